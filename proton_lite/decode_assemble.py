"""The decoded batches assembled into one Profile, in launch order (``decode`` calls this).

Per launch: its row in ``launches`` (counts of records, drops, unmatched, missing CTAs), its
times on the session's one axis (ns after ``t0``, the earliest user CTA); CTAs written
straight to their place in launch order (``_in_launch_order``); intervals written by each
batch at its launches' room in one array as it is decoded (``write_intervals``), then moved
together and their times finished (``_settle``). The record-cost
launches (``runtime/calibrate.py``) leave the profile: their cycles per record go into the
session metadata.
"""
from __future__ import annotations

import numpy as np

from proton_lite import native_decode
from proton_lite.passes.config import CALIBRATION_KERNEL, CALIBRATION_SCOPES
from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, Profile, copy_intervals


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
        from proton_lite.decode_batch import room_error
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


def _settle(out: np.ndarray, first, rows, offset, keep) -> int:
    """``native_decode.settle``, or the same in numpy: the kept launches' rows moved together
    in launch order, their times ``rint(t + offset)`` (an end never before its start)."""
    if native_decode.module() is not None and native_decode.fits(out):
        return native_decode.settle(out, first, rows, offset, keep)
    dst = 0
    for i in np.flatnonzero(np.asarray(keep, bool) & (np.asarray(rows) > 0)).tolist():
        src, n = int(first[i]), int(rows[i])
        if src != dst:
            out[dst:dst + n] = out[src:src + n]  # numpy copies overlapping parts safely
        block = out[dst:dst + n]
        start = np.rint(block["start_ns"].view(np.float64) + offset[i]).astype(np.int64)
        end = np.rint(block["end_ns"].view(np.float64) + offset[i]).astype(np.int64)
        block["start_ns"] = start
        block["end_ns"] = np.maximum(end, start)
        dst += n
    return dst


def assemble(capture, batches, launches_in, pools, kernel_ids, kinfo, index_of, tick, decode_one, pool,
             progress, out: np.ndarray, first: np.ndarray) -> Profile:
    """The batches decoded (on ``pool``'s threads where there is one) and assembled in launch order;
    ``decode_one`` writes each batch's intervals into ``out`` at ``first`` (``write_intervals``)."""
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
        full = r["rows"] > 0
        if full.any():
            cta_min[pos[full]] = np.minimum.reduceat(r["ctas"]["start"], r["row_start"][full])
            cta_max[pos[full]] = np.maximum.reduceat(r["ctas"]["end"], r["row_start"][full])
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

    # CTAs, in launch order
    cta_lpos = [np.asarray(idx)[r["ctas"]["launch"]] for idx, r in zip(batches, results)]

    def cta_rows(k: int, rows, a) -> np.ndarray:
        c = results[k]["ctas"]
        sel = (lambda a: a) if rows is None else (lambda a: a[rows])
        lpos = sel(cta_lpos[k])
        a = np.zeros(len(lpos), dtype=CTA_DTYPE) if a is None else a  # every field is set below
        a["launch"] = launches["launch"][lpos]
        a["cta"] = sel(c["cta"])
        a["smid"] = sel(c["smid"])
        off = offset[lpos]
        a["start_ns"] = rel(sel(c["start"]), off)
        a["end_ns"] = rel(sel(c["end"]), off)
        a["start_clock"] = sel(c["start_clock"])
        a["end_clock"] = sel(c["end_clock"])
        a["cycles_per_ns"] = sel(c["cycles_per_ns"])
        a["measured_cycles_per_ns"] = sel(c["measured"])
        a["finished_units"] = sel(c["finished_units"])
        return a
    ctas = _in_launch_order(cta_lpos, ~drop, CTA_DTYPE, cta_rows, run, batches)
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


BLOCK_ROWS = 4096  # below this many rows per block on average, one scatter beats a build per block


def _in_launch_order(lpos: list, keep: np.ndarray, dtype, build, run, batch_launches: list) -> np.ndarray:
    """The rows of every batch, in launch order, in one array allocated once.

    ``lpos[k]``: the launch (position in the capture) of each row of batch ``k``, whose
    launches are ``batch_launches[k]``; ``keep``: which launches to take; ``build(k, rows,
    dest)`` makes batch ``k``'s structured rows (``rows``: None for all, a slice or a mask)
    in ``dest`` (their place in the output, every field to be set) or, where ``dest`` is
    None, in a new array it returns.  A launch's rows all come from one batch and keep its
    order, so each batch writes its launches at their final place, in parallel (``run`` is a map over the batches, on
    threads).  Where the batch's launches come in order (the usual case, found per run of
    one launch, not per row), each block of launches that sit together in the output is
    built in place; otherwise the batch is built once and scattered.
    """
    n_launch = len(keep)
    counts = np.zeros(n_launch, np.int64)
    for c in run(lambda lp: np.bincount(lp, minlength=n_launch), lpos):
        counts += c
    counts[~keep] = 0
    first = np.cumsum(counts) - counts
    out = np.empty(int(counts.sum()), dtype)

    def blocks(lp):
        """(start, end) in the batch and output start of each block, or None if out of order."""
        starts = np.r_[0, np.flatnonzero(lp[1:] != lp[:-1]) + 1]  # runs of one launch
        run_lp = lp[starts]
        if np.any(run_lp[1:] <= run_lp[:-1]):
            return None
        ends = np.r_[starts[1:], len(lp)]
        kept = keep[run_lp]
        starts, ends, run_lp = starts[kept], ends[kept], run_lp[kept]
        if not len(starts):
            return []
        joined = (starts[1:] == ends[:-1]) & (first[run_lp[1:]] == first[run_lp[:-1]] + ends[:-1] - starts[:-1])
        brk = np.flatnonzero(~joined) + 1
        b_start, b_end = starts[np.r_[0, brk]], ends[np.r_[brk - 1, len(starts) - 1]]
        if len(b_start) > 1 and len(lp) < BLOCK_ROWS * len(b_start):
            return None
        return list(zip(b_start.tolist(), b_end.tolist(), first[run_lp[np.r_[0, brk]]].tolist()))

    def place(k: int) -> None:
        lp = lpos[k]
        plan = blocks(lp) if len(lp) else []
        if plan is not None:
            for s, e, lo in plan:
                build(k, slice(s, e), out[lo:lo + e - s])
        else:
            rows = None
            if not keep[np.asarray(batch_launches[k], np.int64)].all():
                rows = keep[lp]
                lp = lp[rows]
            if len(lp):
                order = np.argsort(lp, kind="stable")  # stable per launch
                lp = lp[order]
                run_start = np.flatnonzero(np.r_[True, lp[1:] != lp[:-1]])
                pos = first[lp] + np.arange(len(lp)) - np.repeat(run_start, np.diff(np.r_[run_start, len(lp)]))
                out[pos] = build(k, rows, None)[order]
    for _ in run(place, range(len(lpos))):
        pass
    return out


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
