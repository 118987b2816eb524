"""A capture merged into the PyTorch profiler's trace: one timeline for host, CUPTI and SMs.

``torch.profiler`` exports a Chrome JSON trace whose GPU kernel events (``cat`` "kernel",
from CUPTI) sit on the profiler's clock in µs.  Our launches sit on the GPU's
``%globaltimer`` in ns.  The two clocks differ by an offset (and, over long runs, a tiny
rate difference), which nothing records directly, so it is estimated from the launches
themselves:

1. pair every launch with every CUPTI kernel event of the same kernel name on the same
   device; each pair proposes an offset (the difference of their midpoints).  Where many
   proposals agree (2 µs windows over all kernels at once) are the candidate offsets;
2. from each candidate, match the launches in time order, each to the unused event of its
   name whose interval its CTAs, moved by the current offset, lie least outside of (at most
   its duration or 5 µs outside), the offset moving as little as keeps each match inside (so
   a slow drift between the clocks is followed), and keep the candidate that places the most
   launches;
3. fit ``profiler_ns = a + b * globaltimer_ns``: the rate ``b`` to the matched midpoints
   (b = 1 when they span less than 10 ms), the offset ``a`` in the middle of the offsets
   that put every launch inside its CUPTI interval (a kernel's CTAs run inside it), and
   report, per launch, how far our first CTA start lies after the CUPTI start and our
   last CTA end before the CUPTI end (both small and non-negative).

Launches without a match (the profiler was not running, or a kernel it did not see) are
counted and named; CUPTI events without one (kernels we did not instrument) stay as they
are.  The output is the profiler's JSON with our trace's processes added under new pids,
names prefixed with ``proton-lite``, times mapped onto the profiler's clock.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np

WINDOW_NS = 2_000  # offsets that agree within this are one proposal
MIN_TOLERANCE_NS = 5_000
FIT_SPAN_NS = 10_000_000  # fit a rate as well as an offset when the matches span this long
MAX_PAIRS_PER_KERNEL = 256  # launches per kernel that propose offsets (every launch is matched)
CANDIDATES = 16  # offsets tried in full, densest first


class MergeError(ValueError):
    """The profiler trace or the capture cannot be merged (the message says why)."""


def profiler_kernels(trace: dict) -> dict[tuple[int, str], np.ndarray]:
    """CUPTI kernel events of a torch.profiler trace: (device, name) -> rows of (start, end, index) in ns."""
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        raise MergeError("not a Chrome trace (no traceEvents list): export it with prof.export_chrome_trace(path)")
    out: dict[tuple[int, str], list] = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict) or e.get("ph") != "X" or str(e.get("cat", "")).lower() != "kernel":
            continue
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        start = int(round(float(e["ts"]) * 1000))
        out.setdefault((int(args.get("device", 0) or 0), str(e.get("name"))), []).append(
            (start, start + int(round(float(e.get("dur", 0)) * 1000)), i))
    if not out:
        raise MergeError("the profiler trace has no GPU kernel events: profile with "
                         "activities=[ProfilerActivity.CUDA] (and ProfilerActivity.CPU for the host side)")
    return {k: np.array(sorted(v), dtype=np.int64) for k, v in out.items()}


def our_launches(profile) -> dict[tuple[int, str], np.ndarray]:
    """Launches with recorded CTAs: (device, kernel name) -> rows of (start, end, launch) in
    absolute %globaltimer ns."""
    out: dict[tuple[int, str], list] = {}
    names = [k.name for k in profile.kernels]
    for row in profile.launches:
        if row["end_ns"] <= row["start_ns"]:
            continue
        out.setdefault((int(row["device"]), names[int(row["kernel"])]), []).append(
            (int(profile.t0_ns) + int(row["start_ns"]), int(profile.t0_ns) + int(row["end_ns"]), int(row["launch"])))
    return {k: np.array(sorted(v), dtype=np.int64) for k, v in out.items()}


def _mid(rows: np.ndarray) -> np.ndarray:
    return (rows[:, 0] + rows[:, 1]) // 2


def candidate_offsets(ours: dict, theirs: dict, most: int = CANDIDATES) -> list[int]:
    """Offsets (profiler ns - globaltimer ns) that many launch/event pairs agree on, densest first."""
    proposals = []
    for key, mine in ours.items():
        other = theirs.get(key)
        if other is None:
            continue
        step = max(1, len(mine) // MAX_PAIRS_PER_KERNEL)
        proposals.append((_mid(other)[None, :] - _mid(mine[::step])[:, None]).ravel())
    if not proposals:
        return []
    c = np.sort(np.concatenate(proposals))
    counts = np.searchsorted(c, c + WINDOW_NS, side="right") - np.arange(len(c))
    out: list[int] = []
    for i in np.argsort(-counts, kind="stable"):
        offset = int(np.median(c[i:i + counts[i]]))
        if all(abs(offset - o) > WINDOW_NS for o in out):
            out.append(offset)
            if len(out) == most:
                break
    return out


def best_match(ours: dict, theirs: dict) -> list:
    """The matches of the candidate offset that places the most launches (``match`` follows a
    drift from there, so a candidate need not fit every launch at once)."""
    best: list = []
    for offset in candidate_offsets(ours, theirs):
        pairs = match(ours, theirs, offset)
        if sum(len(a) for _, a, _ in pairs) > sum(len(a) for _, a, _ in best):
            best = pairs
    return best


def match(ours: dict, theirs: dict, offset: int) -> list[tuple[tuple[int, str], np.ndarray, np.ndarray]]:
    """Per kernel: (key, our rows, their rows) of the matched pairs.  Launches are taken in time
    order over all kernels; each goes to the unused event of its name that its CTAs, moved by the
    current offset, lie least outside of (a kernel's CTAs run inside its CUPTI interval; a cold
    launch may start its first CTA many µs after that interval starts, so midpoints can be far
    apart), and the offset then moves as little as keeps that launch inside, so a slow drift
    between the clocks over a long run is followed."""
    order = sorted((int(row[0]), key, i) for key, mine in ours.items() for i, row in enumerate(mine))
    used = {key: np.zeros(len(rows), bool) for key, rows in theirs.items()}
    mids = {key: _mid(rows) for key, rows in theirs.items()}
    found: dict[tuple, list] = {}
    for _, key, i in order:
        other = theirs.get(key)
        if other is None:
            continue
        row = ours[key][i]
        start, end = int(row[0]) + offset, int(row[1]) + offset
        tol = max(MIN_TOLERANCE_NS, end - start)
        j = int(np.searchsorted(mids[key], (start + end) // 2))
        best, best_cost = None, None
        for k in range(max(0, j - 3), min(len(other), j + 4)):
            outside = max(int(other[k, 0]) - start, end - int(other[k, 1]), 0)
            cost = (outside, abs(int(mids[key][k]) - (start + end) // 2))
            if not used[key][k] and outside <= tol and (best_cost is None or cost < best_cost):
                best, best_cost = k, cost
        if best is not None:
            used[key][best] = True
            found.setdefault(key, []).append((row, other[best]))
            offset += _shift_inside(start, end, int(other[best, 0]), int(other[best, 1]))
    return [(key, np.array([a for a, _ in rows]), np.array([b for _, b in rows])) for key, rows in found.items()]


def _shift_inside(start: int, end: int, lo: int, hi: int) -> int:
    """The smallest move of [start, end] that puts it inside [lo, hi] (centred where it is longer)."""
    if end - start > hi - lo:
        return (lo + hi) // 2 - (start + end) // 2
    return lo - start if start < lo else hi - end if end > hi else 0


class Clock:
    """``profiler_ns = y0 + c + b * (globaltimer_ns - x0)``: kept relative to the first match,
    as absolute %globaltimer values (~1.8e18 ns) have 256 ns steps in a float."""

    def __init__(self, x0: int, y0: int, c: float, b: float, contained: bool = False) -> None:
        self.x0, self.y0, self.c, self.b = x0, y0, c, b
        self.contained = contained  # an offset put every matched launch inside its interval

    def __call__(self, ns):
        return self.y0 + self.after(ns, self.y0)

    def after(self, ns, ref) -> np.ndarray:
        """``profiler_ns(ns) - ref`` without the float rounding of large absolute values."""
        return (self.y0 - np.asarray(ref, dtype=np.int64)).astype(np.float64) + self.c + \
            self.b * (np.asarray(ns, dtype=np.int64) - self.x0).astype(np.float64)

    @property
    def offset_ns(self) -> int:
        """profiler_ns - globaltimer_ns at the first match."""
        return int(self.y0 - self.x0 + round(self.c))


def fit_clock(pairs) -> Clock:
    """The profiler's clock from our clock.  The rate (only when the matches span
    ``FIT_SPAN_NS``) is fitted to the matched midpoints; the offset is the middle of the
    offsets that put every launch inside its CUPTI interval (a kernel's CTAs run inside
    it), where such offsets exist, else the median of the midpoints' differences.

    Midpoints alone assume the time before a launch's first CTA and after its last are
    alike; they are not (a cold first launch started its first CTA 1.16 µs after CUPTI's
    start on the H100), and the median over launches then placed some of them partly
    outside their interval.  The containment bounds hold whatever the gaps are."""
    mine = np.concatenate([a[:, :2] for _, a, _ in pairs]).astype(np.int64)
    other = np.concatenate([b[:, :2] for _, _, b in pairs]).astype(np.int64)
    x, y = _mid(mine), _mid(other)
    x0, y0 = int(x.min()), int(y.min())
    xr, yr = (x - x0).astype(np.float64), (y - y0).astype(np.float64)
    b = 1.0 if xr.max() < FIT_SPAN_NS else float(np.polyfit(xr, yr, 1)[0])
    # profiler(t) = y0 + c + b (t - x0): inside needs profiler(start) >= CUPTI start and
    # profiler(end) <= CUPTI end, i.e. lo <= c <= hi
    lo = ((other[:, 0] - y0).astype(np.float64) - b * (mine[:, 0] - x0).astype(np.float64)).max()
    hi = ((other[:, 1] - y0).astype(np.float64) - b * (mine[:, 1] - x0).astype(np.float64)).min()
    c = (lo + hi) / 2 if lo <= hi else float(np.median(yr - b * xr))
    return Clock(x0, y0, float(c), b, contained=bool(lo <= hi))


def merge_profiler_trace(profiler_trace, capture: str | os.PathLike, output: str | os.PathLike) -> dict:
    """Merge ``capture`` (a .plraw) into ``profiler_trace`` (torch.profiler's exported JSON, or
    the ``torch.profiler.profile`` object itself, which is exported first) and write
    ``output``; returns the report (matches, residuals, unmatched launches, the clock)."""
    from proton_lite.decode import decode
    from proton_lite.raw_format import read_raw
    from proton_lite.trace.chrome import write_chrome
    if hasattr(profiler_trace, "export_chrome_trace"):  # right after the `with profile(...) as prof:` block
        with tempfile.TemporaryDirectory() as tmp:
            exported = str(Path(tmp) / "profiler.json")
            profiler_trace.export_chrome_trace(exported)
            return merge_profiler_trace(exported, capture, output)
    try:
        with open(profiler_trace, "rb") as f:
            trace = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise MergeError(f"{profiler_trace}: cannot read a JSON trace ({type(e).__name__}: {e})") from None
    theirs = profiler_kernels(trace)
    profile = decode(read_raw(str(capture)))
    ours = our_launches(profile)
    if not ours:
        raise MergeError(f"{capture}: no launch with recorded CTAs to place")
    pairs = best_match(ours, theirs)
    if not pairs:
        names = sorted({n for _, n in ours})[:5]
        raise MergeError(f"none of the capture's kernels ({', '.join(names)}) is among the profiler's GPU kernels "
                         "in time: profile the same run, with the session inside the profiler's window")
    clock = fit_clock(pairs)
    report = _report(pairs, ours, clock)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ours.json"
        write_chrome(profile, path)
        with open(path, "rb") as f:
            mine = json.loads(f.read())
    shift = int(mine["otherData"]["proton_lite"]["shift_ns"])
    events = trace["traceEvents"]
    pids = [e.get("pid") for e in events if isinstance(e, dict) and isinstance(e.get("pid"), int)]
    base = max(pids, default=0) + 1
    for e in mine["traceEvents"]:
        if isinstance(e.get("pid"), int):
            e["pid"] += base
        if e.get("ph") == "M" and e.get("name") == "process_name":
            e["args"]["name"] = "proton-lite " + str(e["args"].get("name", ""))
        if "ts" in e:
            ns = int(round(float(e["ts"]) * 1000)) - shift + int(profile.t0_ns)
            e["ts"] = round(float(clock(ns)) / 1000, 3)
        if "dur" in e:
            e["dur"] = round(float(e["dur"]) * clock.b, 3)
        events.append(e)
    trace.setdefault("otherData", {})
    if isinstance(trace["otherData"], dict):
        trace["otherData"]["proton_lite_merge"] = {k: v for k, v in report.items() if k != "launches"}
    out = Path(output)
    tmp_out = out.with_name(out.name + ".part")
    with open(tmp_out, "w", encoding="utf-8") as f:  # text as UTF-8: Perfetto shows \u escapes as written
        json.dump(trace, f, ensure_ascii=False)
    os.replace(tmp_out, out)
    report["output"] = str(out)
    return report


def _report(pairs, ours, clock: Clock) -> dict:
    rows = []
    for (device, name), mine, other in pairs:
        start = clock.after(mine[:, 0], other[:, 0])
        end = -clock.after(mine[:, 1], other[:, 1])
        for k in range(len(mine)):
            rows.append({"launch": int(mine[k, 2]), "kernel": name, "device": device,
                         "profiler_event": int(other[k, 2]),
                         "start_after_ns": round(float(start[k]), 1),
                         "end_before_ns": round(float(end[k]), 1)})
    matched = {r["launch"] for r in rows}
    missing = sorted(int(r[2]) for rows_ in ours.values() for r in rows_ if int(r[2]) not in matched)
    starts = np.array([r["start_after_ns"] for r in rows])
    ends = np.array([r["end_before_ns"] for r in rows])
    return {"matched": len(rows), "launches": rows, "unmatched_launches": missing,
            "offset_ns": clock.offset_ns, "rate": clock.b, "all_inside": clock.contained,
            "start_after_ns": {"min": float(starts.min()), "median": float(np.median(starts)), "max": float(starts.max())},
            "end_before_ns": {"min": float(ends.min()), "median": float(np.median(ends)), "max": float(ends.max())}}
