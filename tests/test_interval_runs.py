"""The chunked run helpers of the trace writers against plain numpy on the same data, with
chunks far smaller than the runs and the intervals (so that runs cross chunk borders) and
on a real thread pool."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from proton_lite.trace import interval_runs as ir


def _runs(rng, n_runs):
    lens = rng.integers(1, 9, n_runs)
    launch = np.repeat(rng.integers(0, 3, n_runs).astype(np.uint32), lens)
    cta = np.repeat(rng.integers(0, 4, n_runs).astype(np.uint32), lens)  # equal neighbours merge into one run
    return launch, cta


@pytest.mark.parametrize("part", [1, 5, 64, 1 << 20])
@pytest.mark.parametrize("threads", [1, 3])
def test_runs_repeat_and_reduce_match_numpy(monkeypatch, part, threads):
    monkeypatch.setattr(ir, "PART", part)
    rng = np.random.default_rng(part + threads)
    launch, cta = _runs(rng, 300)
    n = len(launch)
    expected_first = np.flatnonzero(np.r_[True, (launch[1:] != launch[:-1]) | (cta[1:] != cta[:-1])])
    values = rng.integers(-50, 50, n).astype(np.int64)
    with ThreadPoolExecutor(threads) as pool:
        pmap = pool.map if threads > 1 else map
        first = ir.run_starts(launch, cta, pmap)
        assert first.dtype == np.int64 and np.array_equal(first, expected_first)
        per_run = rng.integers(0, 1000, len(first))
        assert np.array_equal(ir.repeat_runs(per_run, first, n, pmap),
                              np.repeat(per_run, np.diff(np.r_[first, n])))
        for ufunc in (np.minimum, np.maximum, np.add):
            assert np.array_equal(ir.reduce_runs(ufunc, values, first, pmap), ufunc.reduceat(values, first))


def test_a_strided_field_reduces_like_a_copy(monkeypatch):
    monkeypatch.setattr(ir, "PART", 3)
    a = np.zeros(10, dtype=[("x", "<u4"), ("t", "<i8")])
    a["t"] = [5, 1, 7, 2, 2, 9, -4, 3, 8, 0]
    first = np.array([0, 2, 3, 7], np.int64)
    assert ir.reduce_runs(np.minimum, a["t"], first).tolist() == [1, 7, -4, 0]


def test_no_intervals():
    empty = np.zeros(0, np.uint32)
    first = ir.run_starts(empty, empty)
    assert len(first) == 0 and len(ir.repeat_runs(np.zeros(0, np.int64), first, 0)) == 0


@pytest.mark.parametrize("threads", [1, 3])
def test_slots_and_cta_order_in_parts_match_one_pass(monkeypatch, threads):
    """Slot packing cut between (launch, SM) groups and the CTA sort cut between launches give
    what one pass over all CTAs gives (parts of 7 CTAs: groups and launches straddle them)."""
    from proton_lite.trace import rows, tree
    rng = np.random.default_rng(threads)
    n = 400
    lr = np.sort(rng.integers(0, 5, n))
    ctas = np.zeros(n, dtype=[("cta", "<u4"), ("smid", "<u4")])
    ctas["smid"] = rng.integers(0, 6, n)
    for launch in range(5):  # CTA ids unique per launch
        at = np.flatnonzero(lr == launch)
        ctas["cta"][at] = rng.permutation(len(at))
    group = np.cumsum(np.r_[True, (lr[1:] != lr[:-1]) | (ctas["smid"][1:] != ctas["smid"][:-1])]) - 1
    lo = rng.integers(0, 1000, n)
    hi = lo + rng.integers(1, 300, n)
    monkeypatch.setattr(rows, "PACK_PART", 7)
    monkeypatch.setattr(tree, "CTA_PART", 7)
    monkeypatch.setattr(ir, "PART", 7)
    with ThreadPoolExecutor(threads) as pool:
        pmap = pool.map if threads > 1 else map
        slot = rows.pack_slots(group, lo, hi)
        assert np.array_equal(rows._pack_slots_in_parts(group, lo, hi, pmap), slot)
        # each CTA's row: its group's first row plus its slot, added in place a run of groups at a time
        group_first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        row_base = rng.integers(0, 1 << 40, len(group_first))
        row = slot.copy()
        rows._add_row_base(row, row_base, group_first, pmap)
        assert np.array_equal(row, row_base[group] + slot)
        order = tree._cta_order(ctas, lr, pmap)
        assert np.array_equal(order, np.lexsort((ctas["cta"], ctas["smid"], lr)))
        assert ir.take_parts(ctas, order, pmap).tobytes() == ctas[order].tobytes()
    shuffled = rng.permutation(n)  # not in launch order: one sort
    assert np.array_equal(tree._cta_order(ctas[shuffled], lr[shuffled]),
                          np.lexsort((ctas[shuffled]["cta"], ctas[shuffled]["smid"], lr[shuffled])))
