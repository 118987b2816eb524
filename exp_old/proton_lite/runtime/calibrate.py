"""Measure what one record costs, in the same session and on the same GPU as the user's kernels.

At stop, the session launches ``proton_lite_calibrate`` once: an outer scope around
``PAIRS`` back-to-back enter/exit pairs, nothing else.  The outer scope's cycles divided by
the records it spans (``2 * PAIRS + 1``: its own enter store, the pairs, its exit's timer
read) is the steady-state cost of one record.  The launch is an ordinary one in the raw
capture; the decoder takes the cost from it, removes it from the profile and reports the
cost in the profile's session metadata, so that durations can be compensated
(``cycles - (records inside + 1) * cost``) by whoever needs the last few cycles.
"""
from __future__ import annotations

import triton
import triton.language as tl

import proton_lite.language as pl
from proton_lite.passes.config import CALIBRATION_KERNEL

PAIRS = 16
CTAS = 16  # 64 warps: enough for a stable median, ~19 KB in the raw capture


@triton.jit
def proton_lite_calibrate(PAIRS: tl.constexpr):
    pl.enter_scope("calibrate")
    for _ in tl.static_range(PAIRS):
        pl.enter_scope("record")
        pl.exit_scope("record")
    pl.exit_scope("calibrate")


assert proton_lite_calibrate.__name__ == CALIBRATION_KERNEL  # the decoder finds it by this name


def launch() -> None:
    """Runs inside an active session, on the current device and stream."""
    proton_lite_calibrate[(CTAS, )](PAIRS=PAIRS, num_warps=4)
