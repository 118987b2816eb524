"""``nesting._argsort_keys``: the stable order by major then minor keys, the same as numpy's
``lexsort`` on every key, whether runs of equal major keys come already in the minor keys'
order (a trace read back), in no order, or both, and with keys too wide to pack."""
import numpy as np
import pytest

from proton_lite.trace.nesting import _argsort_keys


def _keys(rng, n: int, presorted: float, wide: bool):
    major = [rng.integers(0, 5, n), rng.integers(0, 7, n)]
    if wide:
        major[0] = major[0] << 60  # (no room to pack both: numpy's lexsort instead)
    start = rng.integers(0, 50, n)
    end = start + rng.integers(0, 20, n)
    depth = rng.integers(0, 3, n)
    order = np.lexsort((depth, -end, start))
    sorted_rows = rng.random(n) < presorted
    # a share of the rows laid out in (start, -end, depth) order, the rest shuffled
    pos = np.arange(n)
    pos[sorted_rows] = np.sort(pos[sorted_rows])
    pos[~sorted_rows] = rng.permutation(pos[~sorted_rows])
    perm = order[np.argsort(pos)] if presorted else rng.permutation(n)
    return [k[perm] for k in major], [start[perm], -end[perm], depth[perm]]


@pytest.mark.parametrize("seed,presorted,wide", [(0, 1.0, False), (1, 0.0, False), (2, 0.9, False),
                                                 (3, 0.5, True), (4, 1.0, True)])
def test_the_order_is_lexsorts_on_every_key(seed, presorted, wide):
    rng = np.random.default_rng(seed)
    major, minor = _keys(rng, 3000, presorted, wide)
    got = _argsort_keys(major, lambda idx: [k[idx] for k in minor])
    want = np.lexsort(tuple(reversed(minor)) + tuple(reversed(major)))
    assert got.tolist() == want.tolist()


def test_rows_equal_in_every_key_keep_their_order():
    major = [np.zeros(6, np.int64)]
    minor = [np.array([2, 1, 2, 1, 2, 1])]
    assert _argsort_keys(major, lambda idx: [minor[0][idx]]).tolist() == [1, 3, 5, 0, 2, 4]
