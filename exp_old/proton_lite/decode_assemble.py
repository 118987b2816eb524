"""The decoded batches assembled into one Profile, in launch order (``decode`` calls this).

Per launch: its row in ``launches`` (counts of records, drops, unmatched, missing CTAs), its
times on the session's one axis (ns after ``t0``, the earliest user CTA). CTAs and intervals
are written by each batch at its launches' room in one array each as it is decoded
(``write_ctas``, ``write_intervals``), then moved together and their times finished
(``_settle_ctas``, ``_settle``): a decode holds the profile once plus the batches in flight,
never every batch's columns until the last one is done. The record-cost
launches (``runtime/calibrate.py``) leave the profile: their cycles per record go into the
session metadata.
"""
from __future__ import annotations

import numpy as np

from proton_lite import native_decode
from proton_lite.passes.config import CALIBRATION_KERNEL, CALIBRATION_SCOPES
from proton_lite.profile_data import INTERVAL_DTYPE, LAUNCH_DTYPE, Profile, copy_intervals
from proton_lite.start_range import uncertain_starts


def interval_bounds(launches, layouts, pools) -> np.ndarray:
    """Per launch, the most intervals it can hold: a unit's intervals pair two of its kept
    records, and it keeps at most what it counted, at most its capacity (its count without a
    pool).  Read from the unit headers before anything is decoded, so that the output is
    allocated once and each batch writes its rows straight to their place (memory: the
    intervals once, plus the batches in flight)."""
    from proton_lite.decode_batch import cta_block_dtype
    bounds = np.zeros(len(launches), np.int64)
    for i, (launch, layout) in enumerate(zip(launches, layouts)):
        if layout.capacity == 0 and pools[i] is None:
            continue  # no record area: CTA lifetimes only
        counts = np.frombuffer(launch.buffer, cta_block_dtype(layout), launch.num_ctas)["unit"]["count"]
        counts = counts.astype(np.int64)
        if pools[i] is None:
            counts = np.minimum(counts, layout.capacity)
        # and never more than the buffer holds (two 8-byte records an interval), whatever a
        # header that the kernel never wrote says
        bounds[i] = min(int((counts // 2).sum()), len(launch.buffer) // 16)
    return bounds


def write_intervals(r: dict, idx: list, out: np.ndarray, first: np.ndarray, bounds: np.ndarray,
                    launch_ids: np.ndarray) -> None:
    """A decoded batch's pairs written as rows at their launches' places in ``out``, with their
    times left as float64 ns after each launch's reference (``_settle`` finishes them once
    every launch's offset is known); the pairs are dropped, their counts kept (``iv_rows``).
    The numpy path: with the C steps, ``native_decode.pair_rows`` wrote them already."""
    p, c = r.pop("pairs"), r["ctas"]
    if p is None:  # written by the C steps already (decode_batch's sink)
        return
    cta_row = p["cta_row"]
    lrow = c["launch"][cta_row]  # each pair's launch within the batch: non-decreasing
    if len(lrow) > 1 and np.any(lrow[1:] < lrow[:-1]):
        order = np.argsort(lrow, kind="stable")
        p = {name: a[order] for name, a in p.items()}
        cta_row, lrow = p["cta_row"], lrow[order]
    m = np.bincount(lrow, minlength=len(idx)).astype(np.int64)
    r["iv_rows"] = m
    idx = np.asarray(idx, np.int64)
    over = m > bounds[idx]
    if over.any():
        from proton_lite.decode_records import room_error
        j = int(np.flatnonzero(over)[0])
        raise room_error(int(launch_ids[idx[j]]), int(m[j]), int(bounds[idx[j]]))
    at = 0
    for j in np.flatnonzero(m).tolist():
        sl, dest = slice(at, at + m[j]), out[first[idx[j]]:first[idx[j]] + m[j]]
        at += m[j]
        dest["launch"] = launch_ids[idx[j]]
        dest["cta"] = c["cta"][cta_row[sl]]
        dest["unit"] = p["unit"][sl]
        dest["scope"] = p["scope"][sl]
        dest["depth"] = p["depth"][sl]
        dest["lane"] = 0
        dest["start_ns"].view(np.float64)[:] = p["start"][sl]
        dest["end_ns"].view(np.float64)[:] = p["end"][sl]
        dest["cycles"] = p["cycles"][sl]


def write_ctas(r: dict, idx: list, out: np.ndarray, first: np.ndarray, launch_ids: np.ndarray) -> None:
    """A decoded batch's CTA rows written at their launches' places in ``out`` (``first``: each
    launch's first row; room for all its CTAs), with their times left as float64 ns after each
    launch's reference, as the intervals' are (``_settle_ctas`` finishes them); the batch's
    columns are dropped, each launch's earliest start and latest end kept (``cta_min``,
    ``cta_max``) to place the session's time 0."""
    c, rows, row_start = r.pop("ctas"), r["rows"], r["row_start"]
    full = rows > 0
    r["cta_min"], r["cta_max"] = np.zeros(len(rows)), np.zeros(len(rows))
    if full.any():
        r["cta_min"][full] = np.minimum.reduceat(c["start"], row_start[full])
        r["cta_max"][full] = np.maximum.reduceat(c["end"], row_start[full])
    dest = first[np.asarray(idx, np.int64)]
    j = 0
    while j < len(idx):  # blocks of the batch's launches that lie together in ``out`` too
        k = j
        while k + 1 < len(idx) and dest[k + 1] == dest[k] + rows[k]:
            k += 1
        a, e = int(row_start[j]), int(row_start[k] + rows[k])
        if e > a:
            block = out[dest[j]:dest[j] + e - a]
            block["launch"] = launch_ids[idx[j]] if j == k else \
                np.repeat(launch_ids[np.asarray(idx[j:k + 1])], rows[j:k + 1])
            for name, column in (("cta", "cta"), ("smid", "smid"), ("start_clock", "start_clock"),
                                 ("end_clock", "end_clock"), ("cycles_per_ns", "cycles_per_ns"),
                                 ("measured_cycles_per_ns", "measured"), ("finished_units", "finished_units")):
                block[name] = c[column][a:e]
            block["start_ns"].view(np.float64)[:] = c["start"][a:e]
            block["end_ns"].view(np.float64)[:] = c["end"][a:e]
        j = k + 1


SETTLE_ROWS = 1 << 16  # CTA rows whose times one task finishes


def _settle_ctas(out: np.ndarray, first, rows, offset, keep, run=map) -> int:
    """The kept launches' CTA rows finished in place (times ``rint(t + offset)``, in parts on
    ``run``) and moved together in launch order; returns how many there are."""
    live = np.flatnonzero(np.asarray(keep, bool) & (np.asarray(rows) > 0))
    parts, part, size = [], [], 0
    for i in live.tolist():
        part.append(i)
        size += int(rows[i])
        if size >= SETTLE_ROWS:
            parts.append(part)
            part, size = [], 0
    if part:
        parts.append(part)

    def finish(part):
        for i in part:
            block = out[int(first[i]):int(first[i]) + int(rows[i])]
            for name in ("start_ns", "end_ns"):
                block[name] = np.rint(block[name].view(np.float64) + offset[i]).astype(np.int64)
    for _ in run(finish, parts):
        pass
    return _compact(out, first, rows, live)


def _compact(out: np.ndarray, first, rows, live: np.ndarray) -> int:
    """The rows of launches ``live`` (in launch order) moved together to the front of ``out``;
    returns how many there are."""
    dst = 0
    for i in live.tolist():
        src, n = int(first[i]), int(rows[i])
        if src != dst:
            out[dst:dst + n] = out[src:src + n]  # numpy copies overlapping parts safely
        dst += n
    return dst


def _settle(out: np.ndarray, first, rows, offset, keep) -> int:
    """``native_decode.settle``, or the same in numpy: the kept launches' rows moved together
    in launch order, their times ``rint(t + offset)`` (an end never before its start)."""
    if native_decode.module() is not None and native_decode.fits(out):
        return native_decode.settle(out, first, rows, offset, keep)
    live = np.flatnonzero(np.asarray(keep, bool) & (np.asarray(rows) > 0))
    for i in live.tolist():
        block = out[int(first[i]):int(first[i]) + int(rows[i])]
        start = np.rint(block["start_ns"].view(np.float64) + offset[i]).astype(np.int64)
        end = np.rint(block["end_ns"].view(np.float64) + offset[i]).astype(np.int64)
        block["start_ns"] = start
        block["end_ns"] = np.maximum(end, start)
    return _compact(out, first, rows, live)


def assemble(capture, batches, launches_in, pools, kernel_ids, kinfo, index_of, tick, decode_one, pool,
             progress, out: np.ndarray, first: np.ndarray, cta_out: np.ndarray, cta_first: np.ndarray) -> Profile:
    """The batches decoded (on ``pool``'s threads where there is one) and assembled in launch order;
    ``decode_one`` writes each batch's intervals into ``out`` at ``first`` (``write_intervals``)
    and its CTAs into ``cta_out`` at ``cta_first`` (``write_ctas``)."""
    n_launch = len(launches_in)
    run = pool.map if pool is not None else map
    results = []
    done = 0
    for idx, r in zip(batches, run(decode_one, batches)):
        results.append(r)
        if progress is not None:
            for _ in idx:
                done += 1
                progress(done, n_launch)

    # per launch, in launch order
    refs = [0] * n_launch
    stat = np.zeros((6, n_launch), np.int64)  # records, dropped, unmatched, missing CTAs, busiest unit, torn
    n_rows = np.zeros(n_launch, np.int64)
    cta_min = np.zeros(n_launch)
    cta_max = np.zeros(n_launch)
    for idx, r in zip(batches, results):
        pos = np.asarray(idx)
        for j, i in enumerate(idx):
            refs[i] = r["ref_gt"][j]
        for k, name in enumerate(("records", "dropped", "unmatched", "missing_ctas", "unit_records_max",
                                  "torn_chunks")):
            stat[k, pos] = r[name]
        n_rows[pos] = r["rows"]
        cta_min[pos], cta_max[pos] = r["cta_min"], r["cta_max"]
    has = n_rows > 0
    t0_int = min((refs[i] + int(np.floor(cta_min[i])) for i in np.flatnonzero(has).tolist()), default=0)
    offset = np.array([float(r - t0_int) for r in refs])  # launch i's times (float ns after its own reference)

    def rel(x, off):
        """-> int ns after t0."""
        return np.rint(np.asarray(x) + off).astype(np.int64)

    start_ns = rel(np.where(has, cta_min, 0.0), offset)
    end_ns = rel(np.where(has, cta_max, 0.0), offset)
    launches = np.zeros(n_launch, dtype=LAUNCH_DTYPE)
    for i, launch in enumerate(launches_in):
        launches[i] = (launch.launch_index, index_of[launch.kernel_id], launch.device, *launch.grid,
                       launch.num_ctas, launch.stream, start_ns[i] if has[i] else 0, end_ns[i] if has[i] else 0,
                       stat[0, i], stat[1, i], stat[2, i], stat[3, i], stat[4, i],
                       pools[i].chunks if pools[i] else 0, pools[i].taken if pools[i] else 0, stat[5, i],
                       *(launch.replay or (0, 0, 0)))

    # The session's record-cost launches (see runtime/calibrate.py) go into its metadata:
    # their CTAs and intervals are left out, and time 0 becomes the earliest user CTA.
    kernels = [kinfo[k] for k in kernel_ids]
    names = [k.name for k in kernels]
    cal = names.index(CALIBRATION_KERNEL) if CALIBRATION_KERNEL in names else None
    if cal is not None:
        is_cal = launches["kernel"] == cal
        drop = np.isin(launches["launch"], launches["launch"][is_cal])  # by launch index, as the rows carry it
    else:
        drop = np.zeros(n_launch, bool)

    # CTAs: each batch wrote its rows at their places in ``cta_out`` (write_ctas); the kept
    # launches' rows are finished and moved together, in place
    ctas = cta_out[:_settle_ctas(cta_out, cta_first, n_rows, offset, ~drop, run)]
    shift = int(ctas["start_ns"].min()) if cal is not None and len(ctas) else 0
    if shift:
        ctas["start_ns"] -= shift
        ctas["end_ns"] -= shift

    # intervals: each batch wrote its launches' rows at their places in ``out`` (write_intervals);
    # the calibration launches' are copied out first, then the rest move together, in place
    iv_rows = np.zeros(n_launch, np.int64)
    for idx, r in zip(batches, results):
        iv_rows[np.asarray(idx, np.int64)] = r["iv_rows"]
    cal_intervals = None
    if cal is not None:
        picked = np.flatnonzero(drop & (iv_rows > 0))
        cal_intervals = np.concatenate([out[first[i]:first[i] + iv_rows[i]] for i in picked.tolist()]) \
            if len(picked) else np.zeros(0, INTERVAL_DTYPE)
        own_first = np.zeros(n_launch, np.int64)
        own_first[picked] = np.cumsum(iv_rows[picked]) - iv_rows[picked]
        _settle(cal_intervals, own_first, np.where(drop, iv_rows, 0), offset, drop)
    intervals = out[:_settle(out, first, iv_rows, offset, ~drop)]
    _count_own_records(launches, kernels, intervals)
    session = dict(capture.session)
    session["timer_tick_ns"] = tick
    session["truncated"] = capture.end is None
    end = capture.end or {}
    # what the session itself reported at stop (a kernel fault, launches it cost): kept with the
    # profile so that `proton-lite summary` / `trace` show it long after the stop line scrolled away
    session["capture_errors"] = [str(e) for e in (end.get("errors") or []) if e][:100]
    for key in ("lost_launches", "unsized_launches", "capped_launches"):
        value = end.get(key)
        session[key] = int(value) if isinstance(value, int) and value > 0 else 0
    session["graph_overruns"] = _graph_overruns(end, capture.kernels)
    session["clock_anchors"] = [a for a in end.get("clock_anchors") or [] if isinstance(a, dict)]
    # loop kernels' CTA starts kept in 32 bits that the decoder cannot place (start_range.py)
    session["uncertain_starts"] = uncertain_starts(capture, kernels, launches, ctas)
    if cal is None:
        return Profile(kernels=kernels, launches=launches, ctas=ctas, intervals=intervals, t0_ns=t0_int,
                       session=session)
    session["record_cost_cycles"] = record_cost(kernels[cal].scopes, cal_intervals)
    session["record_cost_source"] = "measured at stop by proton_lite_calibrate (median over warps)"
    launches = launches[~is_cal]
    launches["kernel"] -= (launches["kernel"] > cal).astype(launches["kernel"].dtype)
    if shift:
        intervals["start_ns"] -= shift
        intervals["end_ns"] -= shift
        launches["start_ns"] -= shift
        launches["end_ns"] -= shift
    return Profile(kernels=kernels[:cal] + kernels[cal + 1:], launches=launches, ctas=ctas, intervals=intervals,
                   t0_ns=t0_int + shift, session=session)


def _count_own_records(launches: np.ndarray, kernels: list, intervals: np.ndarray) -> None:
    """A launch's ``records`` are its kernel's own: each copy of a block of staged records
    (layout.flush_slots) wrote a pair of records of the copy scope (COPY_SCOPE), which stay
    as intervals, shown where the copy's time went, but are not the kernel's records."""
    if not len(intervals) or not len(launches):
        return
    pos = {int(la): i for i, la in enumerate(launches["launch"].tolist())}
    for k, kernel in enumerate(kernels):
        sel = copy_intervals(k, kernel, launches, intervals)
        if sel is not None and sel.any():
            at, n = np.unique(intervals["launch"][sel], return_counts=True)
            idx = np.array([pos[int(a)] for a in at.tolist()])
            launches["records"][idx] -= (2 * n).astype(launches["records"].dtype)


def record_cost(scopes: list[str], intervals: np.ndarray) -> float | None:
    """Cycles per record from a calibration launch: the median over units of the outer
    scope's cycles / (2 * inner pairs + 1) (its own enter store, the pairs, its exit read)."""
    outer_name, inner_name = CALIBRATION_SCOPES
    if outer_name not in scopes or inner_name not in scopes or not len(intervals):
        return None
    outer = intervals[intervals["scope"] == scopes.index(outer_name)]
    inner = intervals[intervals["scope"] == scopes.index(inner_name)]
    if not len(outer):
        return None
    pairs = len(inner) / len(outer)
    return float(np.median(outer["cycles"] / (2 * pairs + 1)))


def _graph_overruns(end: dict, kernels: dict) -> dict[str, int]:
    """Kernel name -> replays of CUDA graphs whose records found the ring full (not kept)."""
    out: dict[str, int] = {}
    graphs = end.get("graphs") if isinstance(end.get("graphs"), dict) else {}
    for node in graphs.get("nodes") or []:
        n = node.get("overruns") if isinstance(node, dict) else None
        if isinstance(n, int) and n > 0:
            name = str((kernels.get(node.get("kernel")) or {}).get("name", "?"))
            out[name] = out.get(name, 0) + n
    return out
