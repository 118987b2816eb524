"""Which CTA starts of loop kernels the decoder cannot place (issue 24, pass 22).

A kernel without scopes and with loops keeps its CTA's start in 32 bits until exit
(passes/ptx_lifetimes.py, ``LOOP_START``): ``gt5`` the timer from bit 5 (2^37 ns, 137 s),
``halves`` its low half (2^32 ns, 4.3 s).  The start rebuilt from the end is exact while the
CTA lives less than that range; a CTA living longer would show a start one range (or more) too
late, with nothing in its block to tell.  So the decoder bounds every such CTA's life from
outside: no CTA starts before its launch was queued, which the collector's hooks time on the
host around the queueing (``host_time_ns``, ``CLOCK_REALTIME`` in the Python and C paths
alike; less ``MARGIN_NS``), and none ends after the session's end (``host_end_ns``, the same
clock); the timer's offset to that clock is at least the latest CTA end minus that end.  A CTA whose end lies less than the range after
its launch's time on that bound lived less than the range: its start is exact.  The others
(a CTA of minutes, or a launch queued that long) are counted per kernel, and the kernel's
numbers are marked incomplete (viewer/completeness.py).  The clock's low half (2^32 cycles,
2.2 s at 1.98 GHz) limits only the CTA's own clock rate, which the summary's rate check shows.
A host clock stepped forward during the session only loosens the bound (more CTAs counted);
one stepped back by more than the margin could hide a CTA that lived past the range.
"""
from __future__ import annotations

import numpy as np

MARGIN_NS = 1_000_000_000  # the exit hook's time after the launch was queued, at most
RANGE_BITS = {"gt5": 37, "halves": 32}  # of a loop kernel's kept start (ptx_lifetimes.TIMER_SHIFT + 32)


def uncertain_starts(capture, kernels, launches: np.ndarray, ctas: np.ndarray) -> dict[str, int]:
    """Kernel name -> CTAs whose start may lie a whole range earlier than shown, over the
    kernels whose metadata has ``loop_start`` (``launches``/``ctas``: the decoder's tables, CTA
    times on one axis).  A capture cut off before its END chunk has no end to bound them by:
    every such CTA is counted."""
    ranges = {k: 1 << RANGE_BITS[info.meta.get("loop_start")] for k, info in enumerate(kernels)
              if info.meta.get("loop_start") in RANGE_BITS and info.meta.get("cta_header") == "exit"}
    if not ranges or not len(ctas):
        return {}
    order = np.argsort(launches["launch"], kind="stable")
    row = order[np.searchsorted(launches["launch"][order], ctas["launch"])]
    kernel = launches["kernel"][row]
    mine = np.isin(kernel, np.fromiter(ranges, np.uint32))
    if not mine.any():
        return {}
    host_end = (capture.end or {}).get("host_end_ns")
    if isinstance(host_end, int) and host_end > 0:
        host_ns = {launch.launch_index: launch.host_time_ns for launch in capture.launches}
        queued = np.array([host_ns.get(int(i), 0) for i in launches["launch"]], np.int64)[row[mine]]
        device = launches["device"][row[mine]]
        end = ctas["end_ns"][mine].astype(np.int64)
        latest = {int(d): int(ctas["end_ns"][launches["device"][row] == d].max()) for d in np.unique(device)}
        latest_end = np.array([latest[int(d)] for d in device], np.int64)
        # the CTA's end after its launch was queued, on the host clock (a lower bound of the timer's offset)
        lived_at_most = (end - latest_end) - (queued - host_end) + MARGIN_NS
        limit = np.array([ranges[int(k)] for k in kernel[mine]], np.int64)
        unsure = lived_at_most >= limit
    else:
        unsure = np.ones(int(mine.sum()), bool)
    names = [info.name for info in kernels]
    counts = np.bincount(kernel[mine][unsure].astype(np.int64), minlength=len(kernels))
    return {names[k]: int(n) for k, n in enumerate(counts) if n}
