"""Decoding one batch of launches of one kernel (``_decode_batch``): CTA blocks, per-SM clock
fits, records unwrapped against their CTA's start clock, enter/exit pairs per unit.  The
steps are described in ``decode``'s docstring; ``decode`` groups launches into batches and
runs this on threads."""
from __future__ import annotations

import numpy as np

from proton_lite import decode_slices, native_decode
from proton_lite.cta_blocks import cta_block_dtype, expand_lifetimes
from proton_lite.decode_pool import PoolState, pool_regions
from proton_lite.decode_records import _BEFORE_START, _records_and_pairs, _segment_sums, room_error
from proton_lite.layout import CTA_MAGIC, LAYOUT_VERSION, UNIT_MAGIC, BufferLayout

# A rate is taken from a time span only if the span is at least this many %globaltimer
# ticks long: each end of a span is off by up to one tick, so 200 ticks bound the error at 1%.
MIN_RATE_SPAN_TICKS = 200
_MAX_CTA_NS = 3600 * 10**9  # a CTA end anchor later than this after its start is corrupt
# a unit's end anchor may precede its CTA's start by at most this (decode_records._BEFORE_START)
_BEFORE_START_NS = 10**7


def _dense_unique(keys: np.ndarray):
    """``np.unique(keys, return_inverse=True)`` for small non-negative integer keys (a table, no sort)."""
    if not len(keys) or int(keys.min()) < 0 or int(keys.max()) > 4 * len(keys) + 4096:
        return np.unique(keys, return_inverse=True)
    present = np.bincount(keys) > 0
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present).astype(keys.dtype), rank[keys]


def sm_fits(smid: np.ndarray, clk: np.ndarray, gt: np.ndarray, tick: float):
    """Least-squares fit ``gt = g_ref + b * (clk - c_ref)`` per SM, vectorized over SMs.

    ``clk`` (uint64 cycles) and ``gt`` (int64 ns) are reduced to per-SM offsets in integer
    arithmetic first: absolute %globaltimer values (~1.8e18 ns) have a float64 resolution
    of 256 ns.  Returns (sm_index_of_each_point, c_ref (uint64), g_at_c_ref (float, same
    origin as ``gt``), ns_per_cycle, steady) per SM; ``steady`` is False where the points
    stray from the line by more than two timer ticks plus 64 ns (the SM clock changed
    speed) or a line cannot be fitted.  ``smid`` may be any non-negative integer key (the
    decoder fits each (launch, SM) of a batch of launches at once).
    """
    uniq, inv = _dense_unique(smid)
    k = len(uniq)
    if native_decode.module() is not None:  # the same arithmetic in C, without the GIL
        c_ref, g_ref, slope, intercept, rmax = native_decode.sm_fit(inv, k, clk, gt)
    else:
        c_ref, g_ref, slope, intercept, rmax = _sm_fit_numpy(inv, k, clk, gt)
    steady = np.isfinite(slope) & (slope > 0) & (rmax <= 2 * tick + 64)
    return inv, c_ref, g_ref.astype(np.float64) + intercept, slope, steady


def _sm_fit_numpy(inv: np.ndarray, k: int, clk: np.ndarray, gt: np.ndarray):
    """Per group: (c_ref, g_ref, slope, intercept, the largest residual), numpy's form of
    ``native_decode.sm_fit`` (``sm_fits``)."""
    c_ref = np.full(k, np.iinfo(np.uint64).max, dtype=np.uint64)
    np.minimum.at(c_ref, inv, clk.astype(np.uint64))
    g_ref = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(g_ref, inv, gt.astype(np.int64))
    x = (clk.astype(np.uint64) - c_ref[inv]).astype(np.int64).astype(np.float64)
    y = (gt.astype(np.int64) - g_ref[inv]).astype(np.float64)
    n = np.bincount(inv, minlength=k).astype(np.float64)
    mx = np.bincount(inv, x, k) / n
    my = np.bincount(inv, y, k) / n
    xc = x - mx[inv]
    yc = y - my[inv]
    sxx = np.bincount(inv, xc * xc, k)
    sxy = np.bincount(inv, xc * yc, k)
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(sxx > 0, sxy / sxx, np.nan)
    intercept = my - slope * mx  # y at x = 0, i.e. gt at c_ref minus g_ref
    resid = np.abs(y - (intercept[inv] + slope[inv] * x))
    rmax = np.zeros(k)
    np.maximum.at(rmax, inv, np.nan_to_num(resid, nan=np.inf))
    return c_ref, g_ref, slope, intercept, rmax


def _near_launch_median(start_gt: np.ndarray, valid: np.ndarray, n_ctas: np.ndarray) -> np.ndarray:
    """True for CTAs that started within ``_MAX_CTA_NS`` of the median start of their launch's
    valid CTAs.  A corrupt start anchor (a kernel scribbling over the buffer) would otherwise
    become the launch's time reference or put a CTA years away, beyond int64 nanoseconds."""
    launch = np.repeat(np.arange(len(n_ctas)), n_ctas)
    cand = np.flatnonzero(valid)
    if not cand.size:
        return valid
    count = np.bincount(launch[cand], minlength=len(n_ctas))
    mid = np.cumsum(count) - count + count // 2
    median = np.zeros(len(n_ctas), np.uint64)
    has = count > 0
    median[has] = _sorted_by_launch(start_gt[cand], launch[cand])[mid[has]]
    med = median[launch]
    limit = np.uint64(_MAX_CTA_NS)
    return ((start_gt - med) < limit) | ((med - start_gt) < limit)  # |start - median| < limit, in uint64


def _sorted_by_launch(start_gt: np.ndarray, launch: np.ndarray) -> np.ndarray:
    """The start readings sorted by (launch, reading): as (launch, offset from the smallest)
    packed in one int64 and sorted by value where they fit (4 M CTAs: ~3x faster than a
    lexsort), else by a lexsort (a scribbled anchor years away)."""
    lo = start_gt.min()
    off = start_gt - lo
    shift = int(off.max()).bit_length()
    if shift + int(launch.max()).bit_length() <= 62:
        # stable: a merge of the runs already in order (a launch's CTAs start about in id order,
        # wave by wave): 4 M keys 0.03-0.04 s against 0.21-0.30 s by quicksort; the same values
        keys = np.sort((launch.astype(np.int64) << shift) | off.astype(np.int64), kind="stable")
        return (keys & ((1 << shift) - 1)).astype(np.uint64) + lo
    return start_gt[np.lexsort((start_gt, launch))]


def _decode_batch(batch, layout: BufferLayout, n_scopes: int, tick: float, max_rate: float = np.inf,
                  pool: PoolState | None = None, sink=None, threads: int = 1) -> dict:
    """Decode launches of one kernel at once (rows of all of them in one set of arrays).

    Every step is per CTA, per (launch, SM) or per launch, exactly as if each launch were
    decoded alone; batching only saves the per-launch overhead.  Times are float64 ns after
    each launch's ``ref_gt``.  Returns per-launch arrays (``ref_gt`` as ints, ``records``,
    ``dropped``, ``unmatched``, ``missing_ctas``, ``unfinished_units``, ``row_start``,
    ``rows``), per-CTA-row arrays (``ctas``, with ``launch``: index into ``batch``) and
    per-pair arrays (``pairs``, ``cta_row`` indexing the CTA rows).  The callers have checked
    each buffer's size (``_check_size``).  A launch with a pool (``pool``: its prefix) is
    decoded alone; its chunks follow its CTA blocks in its buffer (``decode_pool``).
    ``sink``: (out, dest, room, launch_id) per launch of the batch; with the C steps, each
    pair's row goes straight to ``out`` (``native_decode.pair_rows``, times raw) and the
    result has ``iv_rows`` instead of ``pairs`` (``decode_assemble.write_intervals`` otherwise).
    ``threads``: how many a large launch's slices of records may use (``decode_slices``).
    """
    n_l = len(batch)
    n_ctas = np.array([la.num_ctas for la in batch], np.int64)
    n = int(n_ctas.sum())
    if layout.compact:  # lifetime blocks, read as the headers they hold (records: none); each launch's in place
        buf, layout = expand_lifetimes([la.buffer for la in batch], n), layout.expanded()
    else:
        buf = batch[0].buffer if n_l == 1 else b"".join(la.buffer for la in batch)
    blocks = np.frombuffer(buf, dtype=cta_block_dtype(layout), count=n)
    unit_all = blocks["unit"]
    # a CTA counts only if its header is whole (a kernel that scribbles over the profile
    # buffer, or a CTA that never ran, leaves it missing: counted, not decoded)
    valid = (blocks["magic"] == CTA_MAGIC) & (blocks["version"] == LAYOUT_VERSION) & \
        (blocks["units"] == layout.units)
    # ... and only if its finished units' end anchors lie after its start, within an hour, or
    # a little before it (-early <= end - start < limit is end - start + early < limit + early
    # in uint64 arithmetic, which wraps)
    fin_all = unit_all["magic"] == UNIT_MAGIC
    early_gt, early_clk = np.uint64(_BEFORE_START_NS), np.uint64(_BEFORE_START)
    plausible = ((unit_all["end_gt"] - blocks["start_gt"][:, None] + early_gt) <
                 np.uint64(_MAX_CTA_NS) + early_gt) & \
        ((unit_all["end_clk"] - blocks["start_clk"][:, None] + early_clk) < np.uint64(4 * _MAX_CTA_NS) + early_clk)
    valid &= (plausible | ~fin_all).all(1)
    valid &= _near_launch_median(blocks["start_gt"], valid, n_ctas)
    rows_at = np.flatnonzero(valid)  # CTA rows: index into the batch's blocks
    m = len(rows_at)
    all_valid = m == n
    if all_valid:
        def rows(a):
            return np.ascontiguousarray(a)
    else:
        def rows(a):
            return a[valid]
    block_start = np.cumsum(n_ctas) - n_ctas
    if n_l == 1:
        lrow = np.zeros(m, np.int64)
        cta_ids = rows_at.astype(np.uint32)
    else:
        lrow = np.repeat(np.arange(n_l), n_ctas)
        lrow = lrow if all_valid else lrow[rows_at]
        cta_ids = (rows_at - block_start[lrow]).astype(np.uint32)
    m_l = np.bincount(lrow, minlength=n_l) if n_l > 1 else np.array([m])
    row_start = np.cumsum(m_l) - m_l
    b_start_gt = rows(blocks["start_gt"])
    start_clk = rows(blocks["start_clk"])
    smid = rows(blocks["smid"])
    u_count, u_end_gt, u_end_clk = rows(unit_all["count"]), rows(unit_all["end_gt"]), rows(unit_all["end_clk"])
    finished = rows(fin_all)
    # (the batch's arrays live until it returns unless let go: 16 threads each hold a batch,
    # ~10x the bytes of lifetime blocks if every step's array is kept)
    del plausible, fin_all
    if layout.capacity == 0 and pool is None:  # no record to read: the blocks' bytes (2x a lifetime block) go
        blocks = unit_all = None
        buf = b""
    # %globaltimer relative to each launch's first CTA, in integers (see sm_fits); ``ref_gt``
    # is returned so that the caller can put launches on one axis without float rounding
    ref = np.zeros(n_l, np.uint64)
    if m:
        ref[m_l > 0] = np.minimum.reduceat(b_start_gt, row_start[m_l > 0])
    ref_row = ref[lrow] if n_l > 1 else ref[0]
    start_gt = (b_start_gt - ref_row).astype(np.int64)
    # the latest end anchor of its finished units, and never before its start (no unit
    # finished; or the unit that holds thread 0 did not, while others did, a little before)
    end_gt_abs = np.maximum(np.where(finished, u_end_gt, 0).max(1), b_start_gt)
    end_gt = (end_gt_abs.astype(np.uint64) - ref_row).astype(np.int64)
    end_clk = np.maximum(np.where(finished, u_end_clk, 0).max(1), start_clk)
    del b_start_gt, u_end_gt, end_gt_abs, ref_row

    # --- time alignment: per-SM fit, per-CTA fallback, launch-wide fallback -------------------
    tick_or_default = tick if np.isfinite(tick) else 32.0
    min_span = MIN_RATE_SPAN_TICKS * tick_or_default  # below this a rate is off by > 1% from the ticks alone
    fit_key = smid if n_l == 1 else lrow * (int(smid.max()) + 1 if m else 1) + smid  # (launch, SM)
    both_sm = np.concatenate([fit_key, fit_key])
    both_gt = np.concatenate([start_gt, end_gt])
    inv, c_ref, g_at_ref, slope, steady = sm_fits(both_sm, np.concatenate([start_clk, end_clk]), both_gt,
                                                  tick_or_default)
    gt_f = both_gt.astype(np.float64)
    sm_hi = np.full(len(slope), -np.inf)
    np.maximum.at(sm_hi, inv, gt_f)
    sm_lo = np.full(len(slope), np.inf)
    np.minimum.at(sm_lo, inv, gt_f)
    steady &= (sm_hi - sm_lo) >= min_span  # a fit over a short span is no better than one CTA
    sm_of_cta = inv[:m].copy()
    del both_sm, both_gt, gt_f, fit_key, inv
    span_gt = (end_gt.astype(np.int64) - start_gt.astype(np.int64)).astype(np.float64)
    del end_gt
    span_clk = (end_clk.astype(np.int64) - start_clk.astype(np.int64)).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        own_rate = np.where(span_gt >= min_span, span_clk / span_gt, np.nan)
    # per CTA: ns(clk) = base_gt + (clk - base_clk) * ns_per_cycle
    base_gt = start_gt.astype(np.float64)
    ns_per_cycle = np.full(m, np.nan)
    on_fit = steady[sm_of_cta]
    fit_sm = sm_of_cta[on_fit]
    since_ref = (start_clk[on_fit].astype(np.uint64) - c_ref[fit_sm]).astype(np.int64).astype(np.float64)
    base_gt[on_fit] = g_at_ref[fit_sm] + since_ref * slope[fit_sm]
    del start_gt, since_ref, fit_sm
    ns_per_cycle[on_fit] = slope[sm_of_cta[on_fit]]
    own = ~on_fit & np.isfinite(own_rate) & (own_rate > 0)
    ns_per_cycle[own] = 1.0 / own_rate[own]
    rest = ~np.isfinite(ns_per_cycle)
    if rest.any():
        # CTAs too short to measure alone: pool every CTA of the launch (all SMs share one
        # clock), sum(gt spans) / sum(clock spans); the tick error shrinks with the total span.
        pos = (span_clk > 0) & (span_gt >= 0)
        need = _segment_sums(rest.astype(np.int64), row_start, m_l) > 0
        # The spans are whole numbers; while their sums stay below 2**53 every partial sum
        # is exact, so the per-launch sums below equal a plain ``sum()`` in any order.
        total_gt = _segment_sums(np.where(pos, span_gt, 0.0), row_start, m_l)
        total_clk = _segment_sums(np.where(pos, span_clk, 0.0), row_start, m_l)
        exact = (total_gt < 2.0 ** 53) & (total_clk < 2.0 ** 53)
        with np.errstate(divide="ignore", invalid="ignore"):
            pooled = np.where((total_clk > 0) & (total_gt > 0), total_gt / total_clk, np.nan)
        floor = 1.0 / max_rate
        for i in np.flatnonzero(need & ~(exact & np.isfinite(pooled))).tolist():
            sl = slice(row_start[i], row_start[i] + m_l[i])
            ok = pos[sl]
            t_gt, t_clk = span_gt[sl][ok].sum(), span_clk[sl][ok].sum()
            p = t_gt / t_clk if t_clk > 0 and t_gt > 0 else np.nan
            if not np.isfinite(p):  # every CTA is a few ns long: its cycles are ~0 anyway
                npc = ns_per_cycle[sl]
                p = np.nanmedian(npc) if np.isfinite(npc).any() else 1.0
            pooled[i] = p
        # CTAs that start together share their tick phase, so the pooled rate can still be off
        # by a tick per CTA span; it can never truly exceed the GPU's highest SM clock.
        pooled = np.where(floor > pooled, floor, pooled)
        ns_per_cycle[rest] = pooled[lrow[rest]]
    cta_start = base_gt
    cta_end = base_gt + span_clk * ns_per_cycle

    # --- records ------------------------------------------------------------------------------
    counts = np.where(finished, u_count, 0).astype(np.int64)  # (m, U)
    # CTAs longer than a 32-bit clock's window: their records are unwrapped from each unit's end
    long_row = (end_clk - start_clk) >= np.uint64((1 << 32) - _BEFORE_START)
    # a pool launch's records lie in its unit blocks and chunks (decode_pool); else in the blocks
    regions = pool_regions(buf, layout, pool, n, rows_at, counts) if pool is not None else None
    kept = layout.kept(counts) if regions is None else regions.kept
    kept_row = kept.sum(1)
    records = _segment_sums(kept_row, row_start, m_l)
    dropped = _segment_sums(counts.sum(1) - kept_row, row_start, m_l)
    torn = regions.torn if regions is not None else 0
    if decode_slices.sliced(n_l, regions, layout, sink, long_row, int(kept_row.sum())):
        # one large launch: its records paired a slice of CTAs at a time (decode_slices)
        per_row, written, lost, over = decode_slices.pair_rows_sliced(
            buf, layout, rows_at, counts, kept, kept_row, regions, n_scopes, _BEFORE_START, start_clk, base_gt,
            ns_per_cycle, cta_ids, sink, threads)
        if over >= 0:
            raise room_error(int(sink[3][0]), over, int(sink[2][0]))
        iv_rows = np.array([written], np.int64)
        unmatched = records - 2 * int(per_row.sum()) + 2 * lost
        pairs = None
    else:
        pairs, iv_rows, unmatched = _records_and_pairs(
            buf, layout, rows_at, counts, kept, regions, records, n_scopes, start_clk, u_end_clk, base_gt, ns_per_cycle,
            lrow, cta_ids, long_row, row_start, m_l, n_l, sink)
    ctas = {
        "launch": lrow, "cta": cta_ids, "smid": smid, "start": cta_start, "end": cta_end, "start_clock": start_clk,
        "end_clock": end_clk, "cycles_per_ns": 1.0 / ns_per_cycle, "measured": own_rate,
        "finished_units": finished.sum(1).astype(np.uint32),
    }
    unfinished = _segment_sums((~finished).sum(1), row_start, m_l)
    most = np.zeros(n_l, np.int64)  # per launch, the records its busiest unit tried to write
    if m:
        nonempty = m_l > 0
        most[nonempty] = np.maximum.reduceat(counts.max(1), row_start[nonempty])
    return {"ref_gt": [int(r) for r in ref.tolist()], "records": records, "dropped": dropped,
            "unmatched": unmatched, "missing_ctas": n_ctas - m_l, "unfinished_units": unfinished,
            "unit_records_max": most, "torn_chunks": np.array([torn] * n_l, np.int64),
            "row_start": row_start, "rows": m_l, "ctas": ctas, "pairs": pairs, "iv_rows": iv_rows}
