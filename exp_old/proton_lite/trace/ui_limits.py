"""When a trace has more tracks than Perfetto's UI draws in reasonable time, say so and say how to cut it.

A trace's size in bytes is not what slows the UI first: the track tree is built for every
track at load.  In the launch layout every launch has its own SM groups, slots and unit
tracks (``trace/plan.py``), so a session of many launches has many tracks even where each
launch is small; ``auto`` then writes the sm layout, whose tracks are bounded by the GPU.
Measured with the Perfetto UI v52 that ``proton-lite open --offline`` serves, in headless
Chromium on the 2-core CPU host (``tests/synth.py:wave_profile`` with launches of 264 CTAs,
2026-11-28, docs/benchmarks.md "Tracks the UI draws"): 2,796 tracks drew in 3.5 s,
27,960 in 6.1 s, 55,920 in 12.8 s (149 MB of JavaScript heap), 139,800 in 40.8 s (399 MB).
"""
from __future__ import annotations

import numpy as np

TRACKS_FOR_THE_UI = 50_000  # about 12 s to first draw in that measurement; the time grows faster than the count


def track_count(stats: dict) -> int:
    """Tracks of a written trace, from its writer's stats: .pftrace tracks, or the Chrome
    JSON's processes and threads (what its UI turns into tracks)."""
    if "tracks" in stats:
        return int(stats["tracks"])
    return int(stats.get("processes", 0)) + int(stats.get("threads", 0))


def layout_note(stats: dict, launches: np.ndarray, raw_path: str) -> str | None:
    """A note for a trace that ``auto`` wrote in the sm layout (SM rows shared by the
    launches of a GPU): the tree differs from a group per launch, so say so and how to get
    that one; None for a trace in the launch layout."""
    if stats.get("layout") != "sm":
        return None
    n = len(launches)
    return (f"{stats.get('path', 'the trace')}: {n:,} launch{'es' if n != 1 else ''} share each SM's rows (a "
            f"group per GPU with a row of launch slices: one per launch would make too many tracks for Perfetto's "
            f"UI); a group per launch: proton-lite trace {raw_path} --layout launch (with --launch A-B for a part)")


def crowded_trace_warning(stats: dict, launches: np.ndarray, raw_path: str) -> str | None:
    """A warning for a trace with more than TRACKS_FOR_THE_UI tracks, with ``--layout sm``
    where it was written a group per launch, a ``--launch`` range that stays under it
    (launches as many as fit at the trace's mean tracks per launch, from the first; none
    where one launch alone is that large), ``--kernel`` and ``--window``; None when the
    trace is small enough."""
    tracks = track_count(stats)
    if tracks <= TRACKS_FOR_THE_UI:
        return None
    numbers = np.sort(np.asarray(launches["launch"], np.int64)) if len(launches) else np.zeros(0, np.int64)
    per_launch = tracks / max(len(numbers), 1)
    keep = max(1, min(len(numbers), int(TRACKS_FOR_THE_UI // per_launch)))
    run = f"proton-lite trace {raw_path}"
    by_launch = stats.get("layout", "launch") == "launch"
    ways = [f"{run} --layout sm (SM rows shared by the launches)"] if by_launch and len(numbers) > 1 else []
    if len(numbers) > 1 and per_launch < TRACKS_FOR_THE_UI:
        first, last = int(numbers[0]), int(numbers[keep - 1])
        ways.append(f"{run} --launch {first}-{last} (about {keep:,} launch{'es' if keep > 1 else ''})")
    ways += [f"{run} --kernel NAME (one kernel's launches)", "--window START:END (µs)"]
    why = ("each has its own SM groups, slots and warp tracks" if by_launch else
           "their SM rows are shared, but the SMs held many CTAs at once")
    return (f"{stats.get('path', 'the trace')} has {tracks:,} tracks ({len(numbers):,} launch"
            f"{'es' if len(numbers) != 1 else ''}: {why}); "
            f"Perfetto's UI took 13 s to draw 56,000 tracks and 41 s for 140,000 (headless Chromium, UI v52): "
            f"write it again as {', or '.join(ways)}")
