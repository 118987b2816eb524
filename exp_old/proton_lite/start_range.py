"""Which CTA starts of loop kernels the decoder cannot place (issue 24, pass 22).

A kernel without scopes and with loops keeps its CTA's start in 32 bits until exit
(passes/ptx_lifetimes.py, ``LOOP_START``): ``gt5`` the timer from bit 5 (2^37 ns, 137 s),
``halves`` its low half (2^32 ns, 4.3 s).  The start rebuilt from the end is exact while the
CTA lives less than that range; a CTA living longer would show a start one range (or more) too
late, with nothing in its block to tell.  So the decoder bounds every such CTA's life from
outside: no CTA starts before its launch was queued, which the collector's hooks time on the
host around the queueing (``host_time_ns``, ``CLOCK_REALTIME`` in the Python and C paths
alike; less ``MARGIN_NS``), and none ends after the session's end (``host_end_ns``, the same
clock); the timer's offset to that clock is at least the latest CTA end minus that end.  A
CTA whose end lies less than the range after its launch's time on that bound lived less than
the range: its start is exact.  The others
(a CTA of minutes, or a launch queued that long) are counted per kernel, and the kernel's
numbers are marked incomplete (viewer/completeness.py).  The clock's low half (2^32 cycles,
2.2 s at 1.98 GHz) limits only the CTA's own clock rate, which the summary's rate check shows.
A host clock stepped forward during the session only loosens the bound (more CTAs counted);
one stepped back by more than the margin could hide a CTA that lived past the range.
"""
from __future__ import annotations

import numpy as np

from proton_lite.layout import LOOP_TIMER_SHIFT

MARGIN_NS = 1_000_000_000  # the hooks' time after the launch was queued, at most
RANGE_BITS = {form: 32 + shift for form, shift in LOOP_TIMER_SHIFT.items()}  # of a loop kernel's kept start


def uncertain_starts(capture, kernels, launches: np.ndarray, ctas: np.ndarray) -> dict[str, int]:
    """Kernel name -> CTAs whose start may lie a whole range earlier than shown, over the
    kernels whose metadata has ``loop_start`` (``launches``/``ctas``: the decoder's tables,
    CTA times on one axis, each launch's ``end_ns`` its latest CTA's).  Launch by launch
    first: where a launch's latest CTA is placed, so are all of its CTAs.  A capture cut off
    before its END chunk has no end to bound them by: every such CTA is counted."""
    limit = np.zeros(len(kernels), np.int64)  # each kernel's range (0: not such a kernel)
    for k, info in enumerate(kernels):
        if info.meta.get("loop_start") in RANGE_BITS and info.meta.get("cta_header") == "exit":
            limit[k] = 1 << RANGE_BITS[info.meta["loop_start"]]
    kernel = launches["kernel"].astype(np.int64)
    present = launches["num_ctas"].astype(np.int64) - launches["missing_ctas"]  # CTAs with a block
    mine = (limit[kernel] > 0) & (present > 0)
    if not mine.any():
        return {}
    names = [info.name for info in kernels]
    host_end = (capture.end or {}).get("host_end_ns")
    if not (isinstance(host_end, int) and host_end > 0):
        counts = np.bincount(kernel[mine], weights=present[mine], minlength=len(kernels))
        return {names[k]: int(n) for k, n in enumerate(counts) if n}
    host_ns = {launch.launch_index: launch.host_time_ns for launch in capture.launches}
    queued = np.array([host_ns.get(int(i), 0) for i in launches["launch"]], np.int64)
    device = launches["device"].astype(np.int64)
    ran = present > 0
    latest = np.zeros(int(device.max()) + 1, np.int64)  # each device's latest CTA end
    for d in np.unique(device[ran]):
        latest[d] = launches["end_ns"][ran & (device == d)].max()
    offset = latest[device] + queued - host_end  # the launch's host time on the timer, at the latest
    # a launch whose latest CTA lived less than the range after it: all its CTAs are placed
    suspect = mine & (launches["end_ns"] - offset + MARGIN_NS >= limit[kernel])
    if not suspect.any():
        return {}
    counts = np.zeros(len(kernels), np.int64)
    at = np.flatnonzero(suspect)  # the suspect launches' rows, by their launch ids
    ids = launches["launch"][at].astype(np.int64)
    order = np.argsort(ids)
    ids, at = ids[order], at[order]
    picked = np.isin(ctas["launch"], ids)
    rows = at[np.searchsorted(ids, ctas["launch"][picked])]
    unsure = ctas["end_ns"][picked] - offset[rows] + MARGIN_NS >= limit[kernel[rows]]
    np.add.at(counts, kernel[rows][unsure], 1)
    return {names[k]: int(n) for k, n in enumerate(counts) if n}
