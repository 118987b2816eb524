"""``proton_lite.arrays.distinct``: ``np.unique``'s values by one sort (numpy 2.3+ hashes them)."""
import numpy as np
import pytest

from proton_lite.arrays import distinct


@pytest.mark.parametrize("dtype", ["<i8", "<u8", "<u4", "<i4", "<u2"])
@pytest.mark.parametrize("n", [0, 1, 2, 1000])
def test_distinct_is_np_unique(dtype, n):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(n)
    values = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    values[: n // 2] = values[n // 2: 2 * (n // 2)]  # repeats
    if n:
        values[0] = info.max
    got = distinct(values)
    want = np.unique(values)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert np.array_equal(distinct(values.reshape(-1, 1)), want)  # (any shape: its values)



@pytest.mark.parametrize("n", [0, 1, 500])
def test_groups_are_each_keys_positions_in_order(n):
    """``groups``: every distinct key once, in key order, with the positions that hold it
    ascending: against a selection per key."""
    from proton_lite.arrays import groups
    keys = np.random.default_rng(n).integers(-3, 40, n)
    got = [(k, at.tolist()) for k, at in groups(keys)]
    assert got == [(int(k), np.flatnonzero(keys == k).tolist()) for k in np.unique(keys)]
