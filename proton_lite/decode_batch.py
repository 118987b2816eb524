"""Decoding one batch of launches of one kernel (``_decode_batch``): CTA blocks, per-SM clock
fits, records unwrapped against their CTA's start clock, enter/exit pairs per unit.  The
steps are described in ``decode``'s docstring; ``decode`` groups launches into batches and
runs this on threads."""
from __future__ import annotations

import numpy as np

from proton_lite import native_decode
from proton_lite.decode_pool import PoolState, pool_records
from proton_lite.cta_blocks import cta_block_dtype, expand_lifetimes
from proton_lite.layout import (CTA_HEADER_BYTES, CTA_MAGIC, LAYOUT_VERSION, RECORD_BYTES, UNIT_HEADER_BYTES,
                                UNIT_MAGIC, BufferLayout)

_MASK32 = np.uint64(0xFFFFFFFF)
# A rate is taken from a time span only if the span is at least this many %globaltimer
# ticks long: each end of a span is off by up to one tick, so 200 ticks bound the error at 1%.
MIN_RATE_SPAN_TICKS = 200
_MAX_CTA_NS = 3600 * 10**9  # a CTA end anchor later than this after its start is corrupt
# A record may precede its CTA's start anchor by at most this many cycles (~8 ms), and a unit's
# end anchor by at most _BEFORE_START_NS: other warps can run, and a short one finish, before
# thread 0 reads the start anchor (seen on the H100 in bench.py's vector add: 300 ns CTAs).
_BEFORE_START = 1 << 24
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


def _records(buf, layout: BufferLayout, cta_ids: np.ndarray, counts: np.ndarray, kept: np.ndarray):
    """The kept records of every (valid CTA, unit), in (CTA, unit, age) order.

    Returns (records as uint64 words: tag | clock << 32, group = CTA row * units + unit of
    each, index of the first record of each non-empty group).  Works on the records that
    exist: one gather from the buffer viewed as 8-byte words.
    """
    cap, n_units = layout.capacity, layout.units
    kept_f = kept.ravel()
    groups = np.flatnonzero(kept_f)
    k = kept_f[groups]
    first = np.cumsum(k) - k
    total = int(k.sum())
    # word of slot 0 of each group: CTA header, then unit blocks (unit header, records)
    base = (cta_ids.astype(np.int64)[groups // n_units] * (layout.stride // RECORD_BYTES) +
            CTA_HEADER_BYTES // RECORD_BYTES + (groups % n_units) * (layout.unit_bytes // RECORD_BYTES) +
            UNIT_HEADER_BYTES // RECORD_BYTES)
    if layout.mode == "circular":  # oldest kept record sits at count % cap once the ring wrapped
        c = counts.ravel()[groups]
        oldest = np.where(c > cap, c % cap, 0)
        word = np.repeat(base, k) + (np.arange(total) - np.repeat(first - oldest, k)) % cap
    else:
        word = np.arange(total) + np.repeat(base - first, k)
    words = np.frombuffer(buf, dtype="<u8", count=len(buf) // RECORD_BYTES)
    return words[word], np.repeat(groups, k), first


def _pair(tags: np.ndarray, group: np.ndarray, first: np.ndarray, n_scopes: int):
    """Pair enter/exit records by nesting level within each group (a CTA's unit).

    An enter pairs with the next record of its group at its own level if that record is the
    exit of the same scope; a corrupt record (scope outside the table) never pairs and does
    not change the level.  Returns (enter index, exit index, level of each record), pairs
    in record order.
    """
    n = len(tags)
    corrupt = tags >= min(2 * n_scopes, 1 << 16)  # scope >= n_scopes, or a tag above 16 bits
    is_end = (tags & 1).astype(np.int64)
    step = 1 - 2 * is_end
    step[corrupt] = 0
    if n:  # levels restart in every group: the first step of a group undoes the previous group's sum
        step[first[1:]] -= np.add.reduceat(step, first)[:-1]
    level = np.cumsum(step)
    level += is_end  # an exit sits at the level of the enter it closes
    # one integer per record: group, then the tag (a corrupt record gets an odd value that
    # no enter's tag + 1 can equal); an enter and the exit of its scope differ by exactly 1
    low = np.where(corrupt, 2 * n_scopes + 1, tags)
    span = 2 * n_scopes + 2
    lo = int(level.min()) if n else 0
    n_levels = int(level.max()) - lo + 1 if n else 0
    if n and n_levels <= 64 and (int(group[-1]) + 1) * span < 1 << 62:
        key = group * span + low
        enters, exits = [], []
        for v in range(lo, lo + n_levels):  # records of one level, in record order
            at = np.flatnonzero(level == v)
            kv = key[at]
            ok = (kv[1:] == kv[:-1] + 1) & ((kv[:-1] & 1) == 0)
            enters.append(at[:-1][ok])
            exits.append(at[1:][ok])
        e_idx, x_idx = np.concatenate(enters), np.concatenate(exits)
    else:  # many levels (a corrupt buffer): sort by (group, level)
        order = np.lexsort((np.arange(n), level, group))
        a, b = order[:-1], order[1:]
        ok = ((is_end[a] == 0) & (is_end[b] == 1) & (group[a] == group[b]) & (level[a] == level[b]) &
              (tags[a] >> 1 == tags[b] >> 1) & ~corrupt[a] & ~corrupt[b])
        e_idx, x_idx = a[ok], b[ok]
    by_enter = np.argsort(e_idx, kind="stable")  # sorted runs, one per level: a cheap merge
    return e_idx[by_enter], x_idx[by_enter], level


def _pair_columns(words, group, level, e_idx, x_idx, layout: BufferLayout, start_clk, base_gt, ns_per_cycle, lrow,
                  records, n_l: int, wraps=None):
    """The columns of each pair (its CTA row, unit, scope, depth, times after the launch's
    reference, cycles) and each launch's unmatched records, in numpy; ``native_decode.pair_rows``
    computes the same in C and writes the rows as well."""
    rec = words.view("<u4")
    tags, clo = rec[0::2], rec[1::2]
    g = group[e_idx]
    row = g // layout.units
    unmatched = records - 2 * np.bincount(lrow[row], minlength=n_l)
    # a pair whose times cannot be placed (corrupt anchors) is unmatched, not invented
    placeable = np.isfinite(base_gt) & np.isfinite(ns_per_cycle)
    if not placeable.all():
        ok_t = placeable[row]
        unmatched += 2 * np.bincount(lrow[row[~ok_t]], minlength=n_l)
        e_idx, x_idx, g, row = e_idx[ok_t], x_idx[ok_t], g[ok_t], row[ok_t]
    # the cycles since the CTA's start, in integers, then scaled (never absolute values in float)
    e_d, x_d = _cycles_since_start(clo[e_idx], start_clk[row]), _cycles_since_start(clo[x_idx], start_clk[row])
    if wraps is not None:  # CTAs that lived past the 32-bit window (_long_cta_wraps)
        e_d += wraps[e_idx] << 32
        x_d += wraps[x_idx] << 32
    b_row, r_row = base_gt[row], ns_per_cycle[row]
    return {
        "cta_row": row,
        "unit": g % layout.units,
        "scope": (tags[e_idx] >> 1).astype(np.int64),
        "depth": np.maximum(level[e_idx] - 1, 0),
        "start": b_row + e_d.astype(np.float64) * r_row,
        "end": b_row + x_d.astype(np.float64) * r_row,
        "cycles": x_d - e_d,
    }, unmatched


def _cycles_since_start(clock32, start_clk) -> np.ndarray:
    """Cycles from each CTA's 64-bit start clock to a record's 32-bit clock (format.md §1.9):
    exact within [-2^24, 2^32 - 2^24) of the start (another warp may record a few cycles
    before thread 0 reads the start clock: deltas just below 2^32 are negative)."""
    d = ((clock32.astype(np.uint64) - (start_clk & _MASK32)) & _MASK32).astype(np.int64)
    d[d >= (1 << 32) - _BEFORE_START] -= 1 << 32
    return d


def _long_cta_wraps(words, group, units: int, start_clk, u_end_clk, long_row) -> np.ndarray:
    """Whole 2^32-cycle wraps to add to each record's clock (as ``cycles_since_start`` reads
    it) in CTAs that lived past the 32-bit window (``long_row``); 0 elsewhere.

    Against the CTA's start a 32-bit clock is exact for ~2.15 s (format.md §1.9).  A unit's
    records come in program order and its header holds its 64-bit end clock, so in a longer
    CTA each record is unwrapped backwards from that end: the last one is its end minus the
    (32-bit) cycles to the end, each earlier one the next one minus the cycles between them.
    Exact while no two consecutive records of a unit (nor its last one and its end) are more
    than 2^32 cycles apart."""
    wraps = np.zeros(len(group), np.int64)
    row = group // units
    at = np.flatnonzero(long_row[row])
    if not len(at):
        return wraps
    g, r = group[at], row[at]
    clo = words.view("<u4")[1::2][at].astype(np.int64)
    end = u_end_clk.ravel()[g].astype(np.uint64)
    end_d = (end - start_clk[r].astype(np.uint64)).astype(np.int64)  # the unit's end, cycles after the start
    last = np.ones(len(at), bool)
    last[:-1] = g[1:] != g[:-1]
    nxt = np.empty(len(at), np.int64)
    nxt[:-1] = clo[1:]
    nxt[last] = (end[last] & np.uint64(_MASK32)).astype(np.int64)  # after a unit's last record: its end
    low = (1 << 32) - 1
    step = (nxt - clo) & low  # cycles to the next record (or the end)
    back = np.cumsum(step[::-1])[::-1]  # steps from here to the end of the array
    ends = np.flatnonzero(last)  # ... minus those of the units after this one (from the next one's first record)
    after_unit = np.concatenate((back[ends[:-1] + 1], [0])).astype(np.int64)
    following = np.repeat(after_unit, np.diff(np.concatenate(([-1], ends))))
    d = end_d - (back - following)
    wraps[at] = (d - _cycles_since_start(clo, start_clk[r])) >> 32
    return wraps


def _segment_sums(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per segment (rows ``starts[i]``.. of ``counts[i]`` rows, in order) sums; 0 where empty."""
    out = np.zeros(len(starts), values.dtype)
    full = counts > 0
    if full.any():
        out[full] = np.add.reduceat(values, starts[full])
    return out


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
        keys = np.sort((launch.astype(np.int64) << shift) | off.astype(np.int64))
        return (keys & ((1 << shift) - 1)).astype(np.uint64) + lo
    return start_gt[np.lexsort((start_gt, launch))]


def room_error(launch_id: int, rows: int, room: int) -> RuntimeError:
    """A launch that decoded more intervals than its units' counts allow (never written past)."""
    return RuntimeError(f"proton_lite: launch {launch_id} decoded {rows} intervals, more than its units' counts "
                        f"allow ({room}); please report this capture")


def _decode_batch(batch, layout: BufferLayout, n_scopes: int, tick: float, max_rate: float = np.inf,
                  pool: PoolState | None = None, sink=None) -> dict:
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
    """
    n_l = len(batch)
    n_ctas = np.array([la.num_ctas for la in batch], np.int64)
    n = int(n_ctas.sum())
    buf = batch[0].buffer if n_l == 1 else b"".join(la.buffer for la in batch)
    if layout.compact:  # lifetime blocks, read as the headers they hold (records: none)
        buf, layout = expand_lifetimes(buf, n), layout.expanded()
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
    torn = 0
    if pool is not None:
        words, group, first, kept, torn = pool_records(buf, layout, pool, n, rows_at, counts)
    else:
        kept = layout.kept(counts)
        if native_decode.module() is not None and layout.capacity > 0:  # one pass in C, without the GIL
            words, group, first = native_decode.records(buf, layout, rows_at, counts, kept)
        else:
            words, group, first = _records(buf, layout, rows_at, counts, kept)
    if native_decode.module() is not None:  # the same pairs from one pass in C, without the GIL
        e_idx, x_idx, level = native_decode.pair(words, group, n_scopes)
    else:
        e_idx, x_idx, level = _pair(words.view("<u4")[0::2], group, first, n_scopes)
    kept_row = kept.sum(1)
    records = _segment_sums(kept_row, row_start, m_l)
    dropped = _segment_sums(counts.sum(1) - kept_row, row_start, m_l)
    iv_rows = None
    # CTAs longer than a 32-bit clock's window: their records are unwrapped from each unit's end
    long_row = (end_clk - start_clk) >= np.uint64((1 << 32) - _BEFORE_START)
    wraps = _long_cta_wraps(words, group, layout.units, start_clk, u_end_clk, long_row) if long_row.any() else None
    if wraps is None and native_decode.module() is not None and sink is not None and native_decode.fits(sink[0]):
        # the pairs' rows straight into the profile's array, in one pass in C, without the GIL
        per_row, iv_rows, unplaceable, over = native_decode.pair_rows(
            words, group, level, e_idx, x_idx, layout.units, _BEFORE_START, start_clk, base_gt, ns_per_cycle, lrow,
            cta_ids, *sink)
        if over >= 0:
            raise room_error(int(sink[3][over]), int(iv_rows[over]) + 1, int(sink[2][over]))
        unmatched = records - 2 * _segment_sums(per_row, row_start, m_l) + 2 * unplaceable
        pairs = None
    else:  # numpy; the rows follow in write_intervals
        pairs, unmatched = _pair_columns(words, group, level, e_idx, x_idx, layout, start_clk, base_gt, ns_per_cycle,
                                         lrow, records, n_l, wraps)
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
