"""Raw buffers -> intervals on one nanosecond axis, vectorized with numpy.

Steps per launch (see docs/design.md, "Decoding" and "Time alignment"):

1. View the buffer as one structured record per CTA (layout in ``proton_lite.layout``).
2. Per SM, fit ``globaltimer = a + b * clock64`` over the (globaltimer, clock64) pairs
   taken at every CTA's start and end on that SM: ``%clock64`` is one counter per SM, so
   the fit spans many CTAs and averages away the 32 ns ticks of ``%globaltimer``.  When
   an SM's pairs do not lie on one line (the clock changed speed) or span too little
   time, each CTA falls back to its own two-point rate, and a CTA too short for that to
   the launch's pooled rate.  Cycles are never converted with a nominal frequency.
3. Unwrap each record's 32-bit clock against its CTA's 64-bit start clock.
4. Pair enter/exit records per recording unit by nesting level, so a lost record leaves
   its partner *unmatched* (counted and reported) instead of being paired wrong.
"""
from __future__ import annotations

import numpy as np

from proton_lite.layout import CTA_MAGIC, LAYOUT_VERSION, UNIT_MAGIC, BufferLayout
from proton_lite.passes.config import CALIBRATION_KERNEL, CALIBRATION_SCOPES
from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
from proton_lite.raw_format import RawCapture, RawFormatError

_MASK32 = np.uint64(0xFFFFFFFF)
# A rate is taken from a time span only if the span is at least this many %globaltimer
# ticks long: each end of a span is off by up to one tick, so 200 ticks bound the error at 1%.
MIN_RATE_SPAN_TICKS = 200
_MAX_CTA_NS = 3600 * 10**9  # a CTA end anchor later than this after its start is corrupt
# A record may precede its CTA's start anchor by at most this many cycles (~8 ms).
_BEFORE_START = 1 << 24


def cta_block_dtype(layout: BufferLayout) -> np.dtype:
    unit = np.dtype([("count", "<u4"), ("magic", "<u4"), ("end_gt", "<u8"), ("end_clk", "<u8"),
                     ("rec", "<u4", (layout.capacity, 2))])
    dt = np.dtype([("magic", "<u4"), ("smid", "<u4"), ("start_gt", "<u8"), ("start_clk", "<u8"),
                   ("version", "<u4"), ("units", "<u4"), ("unit", unit, (layout.units, ))])
    assert dt.itemsize == layout.stride, (dt.itemsize, layout.stride)
    return dt


def kernel_info(meta: dict) -> KernelInfo:
    pl = meta["proton_lite"]
    layout = BufferLayout.from_json(pl["layout"])
    return KernelInfo(name=meta.get("name", pl.get("kernel", "?")), scopes=list(pl["scopes"]),
                      num_warps=layout.num_warps, granularity=layout.granularity, unit_warps=layout.unit_warps,
                      capacity=layout.capacity, meta=pl)


def sm_fits(smid: np.ndarray, clk: np.ndarray, gt: np.ndarray, tick: float):
    """Least-squares fit ``gt = g_ref + b * (clk - c_ref)`` per SM, vectorized over SMs.

    ``clk`` (uint64 cycles) and ``gt`` (int64 ns) are reduced to per-SM offsets in integer
    arithmetic first: absolute %globaltimer values (~1.8e18 ns) have a float64 resolution
    of 256 ns.  Returns (sm_index_of_each_point, c_ref (uint64), g_at_c_ref (float, same
    origin as ``gt``), ns_per_cycle, steady) per SM; ``steady`` is False where the points
    stray from the line by more than two timer ticks plus 64 ns (the SM clock changed
    speed) or a line cannot be fitted.
    """
    uniq, inv = np.unique(smid, return_inverse=True)
    k = len(uniq)
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
    steady = np.isfinite(slope) & (slope > 0) & (rmax <= 2 * tick + 64)
    return inv, c_ref, g_ref.astype(np.float64) + intercept, slope, steady


def estimate_tick_ns(values: np.ndarray) -> float:
    """The %globaltimer update period, from the smallest step between distinct readings."""
    u = np.unique(values)
    if u.size < 2:
        return float("nan")
    return float(np.diff(u).min())


def decode_launch(cap_launch, layout: BufferLayout, n_scopes: int, tick: float, max_rate: float = np.inf):
    """Decode one launch; returns (ctas, pairs, stats) with absolute globaltimer ns as float64."""
    buf = cap_launch.buffer
    n = cap_launch.num_ctas
    if len(buf) != n * layout.stride:
        raise RawFormatError(f"launch {cap_launch.launch_index}: buffer holds {len(buf)} bytes, expected "
                             f"{n} CTAs x {layout.stride} bytes")
    blocks = np.frombuffer(buf, dtype=cta_block_dtype(layout), count=n)
    # a CTA counts only if its header is whole (a kernel that scribbles over the profile
    # buffer, or a CTA that never ran, leaves it missing: counted, not decoded)
    valid = (blocks["magic"] == CTA_MAGIC) & (blocks["version"] == LAYOUT_VERSION) & \
        (blocks["units"] == layout.units)
    # ... and only if its finished units' end anchors lie after its start, within an hour
    fin_all = blocks["unit"]["magic"] == UNIT_MAGIC
    d_gt = blocks["unit"]["end_gt"].astype(np.int64) - blocks["start_gt"].astype(np.int64)[:, None]
    d_clk = blocks["unit"]["end_clk"].astype(np.int64) - blocks["start_clk"].astype(np.int64)[:, None]
    plausible = (d_gt >= 0) & (d_gt < _MAX_CTA_NS) & (d_clk >= 0) & (d_clk < 4 * _MAX_CTA_NS)
    valid &= (plausible | ~fin_all).all(1)
    cta_ids = np.flatnonzero(valid).astype(np.uint32)
    b = blocks[valid]
    units = b["unit"]  # (m, U)
    finished = units["magic"] == UNIT_MAGIC
    # %globaltimer relative to this launch's first CTA, in integers (see sm_fits); ``ref_gt``
    # is returned so that the caller can put launches on one axis without float rounding
    ref_gt = int(b["start_gt"].min()) if len(b) else 0
    start_gt = (b["start_gt"] - np.uint64(ref_gt)).astype(np.int64)
    start_clk = b["start_clk"]
    end_gt_abs = np.where(finished.any(1), np.where(finished, units["end_gt"], 0).max(1), b["start_gt"])
    end_gt = (end_gt_abs.astype(np.uint64) - np.uint64(ref_gt)).astype(np.int64)
    end_clk = np.where(finished.any(1), np.where(finished, units["end_clk"], 0).max(1), start_clk)
    smid = b["smid"]

    # --- time alignment: per-SM fit, per-CTA fallback, launch-wide fallback -------------------
    m = len(b)
    tick_or_default = tick if np.isfinite(tick) else 32.0
    min_span = MIN_RATE_SPAN_TICKS * tick_or_default  # below this a rate is off by > 1% from the ticks alone
    both_sm = np.concatenate([smid, smid])
    both_gt = np.concatenate([start_gt, end_gt])
    inv, c_ref, g_at_ref, slope, steady = sm_fits(both_sm, np.concatenate([start_clk, end_clk]), both_gt,
                                                  tick_or_default)
    gt_f = both_gt.astype(np.float64)
    sm_hi = np.full(len(slope), -np.inf)
    np.maximum.at(sm_hi, inv, gt_f)
    sm_lo = np.full(len(slope), np.inf)
    np.minimum.at(sm_lo, inv, gt_f)
    steady &= (sm_hi - sm_lo) >= min_span  # a fit over a short span is no better than one CTA
    sm_of_cta = inv[:m]
    span_gt = (end_gt.astype(np.int64) - start_gt.astype(np.int64)).astype(np.float64)
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
    ns_per_cycle[on_fit] = slope[sm_of_cta[on_fit]]
    own = ~on_fit & np.isfinite(own_rate) & (own_rate > 0)
    ns_per_cycle[own] = 1.0 / own_rate[own]
    rest = ~np.isfinite(ns_per_cycle)
    if rest.any():
        # CTAs too short to measure alone: pool every CTA of the launch (all SMs share one
        # clock), sum(gt spans) / sum(clock spans); the tick error shrinks with the total span.
        pos = (span_clk > 0) & (span_gt >= 0)
        total_gt, total_clk = span_gt[pos].sum(), span_clk[pos].sum()
        pooled = total_gt / total_clk if total_clk > 0 and total_gt > 0 else np.nan
        if not np.isfinite(pooled):  # every CTA is a few ns long: its cycles are ~0 anyway
            pooled = np.nanmedian(ns_per_cycle) if np.isfinite(ns_per_cycle).any() else 1.0
        # CTAs that start together share their tick phase, so the pooled rate can still be off
        # by a tick per CTA span; it can never truly exceed the GPU's highest SM clock.
        pooled = max(pooled, 1.0 / max_rate)
        ns_per_cycle[rest] = pooled
    cta_start = base_gt
    cta_end = base_gt + span_clk * ns_per_cycle

    # --- records ------------------------------------------------------------------------------
    cap = layout.capacity
    counts = np.where(finished, units["count"], 0).astype(np.int64)  # (m, U)
    kept = np.minimum(counts, cap)
    dropped = int((counts - kept).sum())
    j = np.arange(cap)[None, None, :]
    mask = j < kept[:, :, None]
    if layout.mode == "circular":  # oldest kept record sits at count % cap once the ring wrapped
        first = np.where(counts > cap, counts % cap, 0)[:, :, None]
        slot = (first + j) % cap
    else:
        slot = np.broadcast_to(j, mask.shape)
    recs = units["rec"]  # (m, U, cap, 2)
    ci, ui, ji = np.nonzero(mask)
    si = slot[ci, ui, ji] if layout.mode == "circular" else ji
    tags = recs[ci, ui, si, 0]
    clo = recs[ci, ui, si, 1].astype(np.uint64)
    scope = (tags >> 1).astype(np.int64)
    is_end = (tags & 1).astype(bool)
    corrupt = (scope >= n_scopes) | (tags >> 16 != 0)
    sclk = start_clk[ci]
    # Unwrap the 32-bit clock against the CTA's 64-bit start.  Other warps may record a few
    # cycles before thread 0 reads the start clock: deltas just below 2^32 are negative.
    delta = ((clo - (sclk & _MASK32)) & _MASK32).astype(np.int64)
    delta = np.where(delta >= (1 << 32) - _BEFORE_START, delta - (1 << 32), delta)
    full_clk = (sclk.astype(np.int64) + delta).astype(np.uint64)

    # --- pairing by nesting level within each (CTA, unit) ----------------------------------
    group = ci.astype(np.int64) * layout.units + ui
    step = np.where(is_end, -1, 1)
    step[corrupt] = 0
    cs = np.cumsum(step)
    if cs.size:
        starts = np.r_[0, np.flatnonzero(np.diff(group)) + 1]
        before = np.repeat(np.r_[0, cs[starts[1:] - 1]] if starts.size > 1 else np.array([0]),
                           np.diff(np.r_[starts, cs.size]))
        cs = cs - before
    level = np.where(is_end, cs + 1, cs)
    order = np.lexsort((np.arange(level.size), level, group))
    o_enter, o_next = order[:-1], order[1:]
    pair = ((~is_end[o_enter]) & is_end[o_next] & (group[o_enter] == group[o_next]) &
            (level[o_enter] == level[o_next]) & (scope[o_enter] == scope[o_next]) &
            ~corrupt[o_enter] & ~corrupt[o_next])
    e_idx, x_idx = o_enter[pair], o_next[pair]
    e_idx_sorted = np.argsort(e_idx, kind="stable")
    e_idx, x_idx = e_idx[e_idx_sorted], x_idx[e_idx_sorted]
    unmatched = int(level.size - 2 * e_idx.size)

    # a pair whose times cannot be placed (corrupt anchors) is unmatched, not invented
    ok_t = np.isfinite(base_gt[ci[e_idx]]) & np.isfinite(ns_per_cycle[ci[e_idx]])
    unmatched += int(2 * (~ok_t).sum())
    e_idx, x_idx = e_idx[ok_t], x_idx[ok_t]
    row = ci[e_idx]
    # cycles since the CTA's start, in integers, then scaled (never absolute values in float)
    e_clk = (full_clk[e_idx] - start_clk[row]).astype(np.int64).astype(np.float64)
    x_clk = (full_clk[x_idx] - start_clk[row]).astype(np.int64).astype(np.float64)
    pairs = {
        "cta_row": row,
        "unit": ui[e_idx],
        "scope": scope[e_idx],
        "depth": np.maximum(level[e_idx] - 1, 0),
        "start": base_gt[row] + e_clk * ns_per_cycle[row],
        "end": base_gt[row] + x_clk * ns_per_cycle[row],
        "cycles": (full_clk[x_idx].astype(np.int64) - full_clk[e_idx].astype(np.int64)),
    }
    ctas = {
        "cta": cta_ids, "smid": smid, "start": cta_start, "end": cta_end, "start_clock": start_clk,
        "end_clock": end_clk, "cycles_per_ns": 1.0 / ns_per_cycle, "measured": own_rate,
        "finished_units": finished.sum(1).astype(np.uint32),
    }
    stats = {"ref_gt": ref_gt, "records": int(kept.sum()), "dropped": dropped, "unmatched": unmatched,
             "missing_ctas": int(n - m), "unfinished_units": int((~finished).sum())}
    return ctas, pairs, stats


def decode(capture: RawCapture, progress=None) -> Profile:
    """Decode a whole raw capture into a Profile (deterministic: same file, same arrays)."""
    kernel_ids = sorted(capture.kernels)
    kinfo = {kid: kernel_info(capture.kernels[kid]) for kid in kernel_ids}
    layouts = {kid: BufferLayout.from_json(capture.kernels[kid]["proton_lite"]["layout"]) for kid in kernel_ids}
    index_of = {kid: i for i, kid in enumerate(kernel_ids)}

    # the timer tick, from all start anchors of the capture (needs several CTAs)
    samples = []
    for launch in capture.launches[:64]:
        lay = layouts[launch.kernel_id]
        starts = np.frombuffer(launch.buffer, dtype=cta_block_dtype(lay), count=launch.num_ctas)
        starts = starts[starts["magic"] == CTA_MAGIC]
        samples.append(starts["start_gt"])
        samples.append(starts["unit"]["end_gt"].ravel())
    tick = estimate_tick_ns(np.concatenate(samples)) if samples else float("nan")

    max_khz = capture.session.get("sm_clock_max_khz")
    max_rate = max_khz / 1e6 if isinstance(max_khz, (int, float)) and max_khz > 0 else np.inf  # cycles per ns
    launch_rows, cta_parts, iv_parts = [], [], []
    for i, launch in enumerate(capture.launches):
        ctas, pairs, stats = decode_launch(launch, layouts[launch.kernel_id], len(kinfo[launch.kernel_id].scopes),
                                           tick, max_rate)
        launch_rows.append((launch, stats, ctas))
        cta_parts.append((i, ctas))
        iv_parts.append((i, pairs))
        if progress is not None:
            progress(i + 1, len(capture.launches))

    refs = [stats["ref_gt"] for _, stats, _ in launch_rows]
    t0_int = min((refs[i] + int(np.floor(c["start"].min())) for i, c in cta_parts if len(c["start"])), default=0)

    def rel(x, i):
        """Launch i's times (float ns after its own reference) -> int ns after t0."""
        return np.rint(np.asarray(x) + float(refs[i] - t0_int)).astype(np.int64)

    launches = np.zeros(len(launch_rows), dtype=LAUNCH_DTYPE)
    for i, (launch, stats, ctas) in enumerate(launch_rows):
        launches[i] = (launch.launch_index, index_of[launch.kernel_id], launch.device, *launch.grid,
                       launch.num_ctas, launch.stream,
                       rel(ctas["start"].min(), i) if len(ctas["start"]) else 0,
                       rel(ctas["end"].max(), i) if len(ctas["end"]) else 0,
                       stats["records"], stats["dropped"], stats["unmatched"], stats["missing_ctas"])
    ctas_out = []
    for i, c in cta_parts:
        a = np.zeros(len(c["cta"]), dtype=CTA_DTYPE)
        a["launch"] = launches["launch"][i]
        a["cta"] = c["cta"]
        a["smid"] = c["smid"]
        a["start_ns"] = rel(c["start"], i)
        a["end_ns"] = rel(c["end"], i)
        a["start_clock"] = c["start_clock"]
        a["end_clock"] = c["end_clock"]
        a["cycles_per_ns"] = c["cycles_per_ns"]
        a["measured_cycles_per_ns"] = c["measured"]
        a["finished_units"] = c["finished_units"]
        ctas_out.append(a)
    ivs_out = []
    for i, p in iv_parts:
        c = cta_parts[i][1]
        a = np.zeros(len(p["scope"]), dtype=INTERVAL_DTYPE)
        a["launch"] = launches["launch"][i]
        a["cta"] = c["cta"][p["cta_row"]]
        a["unit"] = p["unit"]
        a["scope"] = p["scope"]
        a["depth"] = p["depth"]
        a["start_ns"] = rel(p["start"], i)
        a["end_ns"] = np.maximum(rel(p["end"], i), a["start_ns"])
        a["cycles"] = p["cycles"]
        ivs_out.append(a)
    session = dict(capture.session)
    session["timer_tick_ns"] = tick
    session["truncated"] = capture.end is None
    profile = Profile(kernels=[kinfo[k] for k in kernel_ids], launches=launches,
                      ctas=np.concatenate(ctas_out) if ctas_out else np.zeros(0, CTA_DTYPE),
                      intervals=np.concatenate(ivs_out) if ivs_out else np.zeros(0, INTERVAL_DTYPE),
                      t0_ns=t0_int, session=session)
    return _take_calibration(profile)


def _take_calibration(profile: Profile) -> Profile:
    """Move the session's record-cost launch (see runtime/calibrate.py) into session metadata."""
    names = [k.name for k in profile.kernels]
    if CALIBRATION_KERNEL not in names:
        return profile
    kid = names.index(CALIBRATION_KERNEL)
    is_cal = profile.launches["kernel"] == kid
    cal_launches = set(profile.launches["launch"][is_cal].tolist())
    iv_cal = np.isin(profile.intervals["launch"], list(cal_launches))
    cost = record_cost(profile.kernels[kid].scopes, profile.intervals[iv_cal])
    session = dict(profile.session)
    session["record_cost_cycles"] = cost
    session["record_cost_source"] = "measured at stop by proton_lite_calibrate (median over warps)"
    launches = profile.launches[~is_cal].copy()
    launches["kernel"] -= (launches["kernel"] > kid).astype(launches["kernel"].dtype)
    ctas = profile.ctas[~np.isin(profile.ctas["launch"], list(cal_launches))]
    intervals = profile.intervals[~iv_cal]
    t0 = profile.t0_ns
    if len(ctas):  # time 0 is the earliest user CTA
        shift = int(ctas["start_ns"].min())
        t0 += shift
        ctas = ctas.copy()
        intervals = intervals.copy()
        for arr in (ctas, intervals, launches):
            arr["start_ns"] -= shift
            arr["end_ns"] -= shift
    kernels = profile.kernels[:kid] + profile.kernels[kid + 1:]
    return Profile(kernels=kernels, launches=launches, ctas=ctas, intervals=intervals, t0_ns=t0, session=session)


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
