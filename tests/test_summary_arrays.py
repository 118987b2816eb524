"""The summary's passes over every row (viewer/summary_arrays.py) against the numpy calls they
replace: one packed sort for a three-key lexsort, a presence table for np.unique, the rows of
some launches without a copy where they are all of them."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_lite.profile_data import CTA_DTYPE
from proton_lite.viewer.summary_arrays import dense_unique, group_time_order, rows_of_launches, sweep


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 400), st.booleans())
def test_group_time_order_is_the_lexsort_of_group_time_and_end_before_start(seed, n, far):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 5, n)
    t = rng.integers(0, 50, n) + (rng.integers(0, 2, n) << 62 if far else 0)  # far: too wide to pack
    delta = rng.choice([-1, 1], n)
    order = group_time_order(g, t, delta)
    expected = np.lexsort((delta, t, g))
    key = lambda o: np.stack([g[o], t[o], delta[o]], 1)  # noqa: E731  (equal keys may come in any order)
    assert np.array_equal(key(order), key(expected)) and sorted(order.tolist()) == list(range(n))


@pytest.mark.parametrize("wide", [False, True])
def test_dense_unique_is_np_unique_of_the_packed_pairs(wide):
    rng = np.random.default_rng(3)
    kernel = rng.integers(0, 7, 5000)
    part = rng.integers(0, 3, 5000)
    scope = rng.integers(0, 2**25 if wide else 40, 5000)  # wide: too many keys for a table
    pair = (kernel << 40) | (part << 32) | scope
    keys, inverse = dense_unique(pair, kernel, part, scope)
    e_keys, e_inv = np.unique(pair, return_inverse=True)
    assert np.array_equal(keys, e_keys) and np.array_equal(np.asarray(inverse).reshape(-1), e_inv.reshape(-1))


def test_rows_of_launches_keeps_the_array_itself_unless_some_rows_are_of_other_launches():
    ctas = np.zeros(6, CTA_DTYPE)
    ctas["launch"] = [3, 3, 7, 9, 7, 3]
    rows, pos = rows_of_launches(np.array([3, 7, 9], np.uint32), ctas)
    assert rows is ctas and pos.tolist() == [0, 0, 1, 2, 1, 0]
    rows, pos = rows_of_launches(np.array([3, 9], np.uint32), ctas)
    assert rows["launch"].tolist() == [3, 3, 9, 3] and pos.tolist() == [0, 0, 1, 0]
    rows, pos = rows_of_launches(np.zeros(0, np.uint32), ctas)
    assert len(rows) == 0 and len(pos) == 0


def test_sweep_counts_overlap_and_union_per_group_touching_spans_apart():
    g = np.array([0, 0, 0, 1, 1])
    start = np.array([0, 5, 10, 100, 100])
    end = np.array([10, 8, 20, 150, 120])
    gid, most, busy = sweep(g, start, end)
    assert gid.tolist() == [0, 1] and most.tolist() == [2, 2] and busy.tolist() == [20, 50]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sweep_is_a_sweep_written_here_on_random_spans(seed):
    """Max overlap and union length per group against a plain loop over each group's spans."""
    rng = np.random.default_rng(seed)
    n = 400
    g = rng.integers(0, 9, n) * 7 + 3
    start = rng.integers(-50, 500, n)
    end = start + rng.integers(-5, 60, n)  # some empty, some ending before they start (taken as empty)
    gid, most, busy = sweep(g, start, end)
    want_g = sorted(set(g.tolist()))
    assert gid.tolist() == want_g
    for k, grp in enumerate(want_g):
        spans = [(int(s), max(int(s), int(e))) for s, e, x in zip(start, end, g) if x == grp]
        points = sorted({p for sp in spans for p in sp})
        assert most[k] == max(sum(1 for s, e in spans if s <= p < e) for p in points)
        covered = sum(b - a for a, b in zip(points, points[1:]) if any(s <= a and b <= e for s, e in spans))
        assert busy[k] == covered


def test_sweep_of_no_span_has_no_group():
    gid, most, busy = sweep(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert len(gid) == len(most) == len(busy) == 0


@pytest.mark.parametrize("seed", [0, 1])
def test_sweep_of_packed_events_is_the_sweep_by_an_order(seed, monkeypatch):
    """The events packed as values and sorted (``_sorted_events``) against the sweep that
    orders the three columns by an argsort, on spans with ties of every kind; and groups or
    times too wide to pack take the latter."""
    from viewer import summary_arrays
    rng = np.random.default_rng(seed)
    n = 3000
    g = rng.integers(0, 40, n) * 3
    start = rng.integers(-20, 200, n)
    end = start + rng.integers(-3, 30, n)
    fast = sweep(g, start, end)
    with monkeypatch.context() as m:
        m.setattr(summary_arrays, "_sorted_events", lambda *a: None)
        slow = sweep(g, start, end)
    for a, b in zip(fast, slow):
        assert np.array_equal(a, b)
    wide = (start.astype(np.int64) << 40, end.astype(np.int64) << 40)  # 2^48 ns apart at most: no room for groups
    assert summary_arrays._sorted_events(g.astype(np.int64) << 20, *wide) is None
    gid, most, busy = sweep(g.astype(np.int64) << 20, *wide)
    assert np.array_equal(gid, slow[0] << 20) and np.array_equal(most, slow[1]) and np.array_equal(busy, slow[2] << 40)
