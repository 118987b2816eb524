"""A batch's records: read from the buffer, paired into scopes per (CTA, unit), each pair's
times from its CTA's clock fit (``decode_batch`` fits the clocks, then hands the records here).
In C where ``native_decode`` builds (one pass each, without the GIL), else numpy; a launch too
large for its records' arrays at once goes in slices of CTAs (``decode_slices``)."""
from __future__ import annotations

import numpy as np

from proton_lite import native_decode
from proton_lite.layout import CTA_HEADER_BYTES, RECORD_BYTES, UNIT_HEADER_BYTES, BufferLayout

_MASK32 = np.uint64(0xFFFFFFFF)
# A record may precede its CTA's start anchor by at most this many cycles (~8 ms), and a unit's
# end anchor by at most _BEFORE_START_NS: other warps can run, and a short one finish, before
# thread 0 reads the start anchor (seen on the H100 in bench.py's vector add: 300 ns CTAs).
_BEFORE_START = 1 << 24


def _segment_sums(values: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per segment (rows ``starts[i]``.. of ``counts[i]`` rows, in order) sums; 0 where empty."""
    out = np.zeros(len(starts), values.dtype)
    full = counts > 0
    if full.any():
        out[full] = np.add.reduceat(values, starts[full])
    return out


def room_error(launch_id: int, rows: int, room: int) -> RuntimeError:
    """A launch that decoded more intervals than its units' counts allow (never written past)."""
    return RuntimeError(f"proton_lite: launch {launch_id} decoded {rows} intervals, more than its units' counts "
                        f"allow ({room}); please report this capture")


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


def _records_and_pairs(buf, layout: BufferLayout, rows_at, counts, kept, regions, records, n_scopes: int, start_clk,
                       u_end_clk, base_gt, ns_per_cycle, lrow, cta_ids, long_row, row_start, m_l, n_l: int, sink):
    """A batch's records read and paired at once: (pairs or None, rows written per launch or
    None, unmatched records per launch).  ``regions``: a pool launch's
    (``decode_pool.PoolRegions``), else None; ``records``: the records kept per launch.  With
    the C steps and a sink the rows go straight to it; else the pairs' columns come back for
    ``write_intervals``."""
    if regions is not None:
        words, group, first = regions.records(buf)
    elif native_decode.module() is not None and layout.capacity > 0:  # one pass in C, without the GIL
        words, group, first = native_decode.records(buf, layout, rows_at, counts, kept)
    else:
        words, group, first = _records(buf, layout, rows_at, counts, kept)
    if native_decode.module() is not None:  # the same pairs from one pass in C, without the GIL
        e_idx, x_idx, level = native_decode.pair(words, group, n_scopes)
    else:
        e_idx, x_idx, level = _pair(words.view("<u4")[0::2], group, first, n_scopes)
    iv_rows = None
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
    return pairs, iv_rows, unmatched
