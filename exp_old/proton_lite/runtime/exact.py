"""``sizing="exact"``: a launch whose records did not fit runs again, with a buffer sized from its counts.

Every unit's header counts the records it *tried* to write, also those that did not fit
(docs/format.md §1.7), so any run is a counting run.  In exact mode the exit hook waits for
each launch (one stream synchronize and one copy of its buffer), reads those counts and,
when some unit tried more records than its capacity, discards the launch and launches the
kernel again -- same JIT function, grid, arguments and compile options -- compiled with a
loop capacity of the next power of two at or above the largest count.  The session keeps
that larger loop capacity, so later launches usually fit at the first run.

The kernel then runs twice: use it only for kernels whose outputs do not depend on their
previous contents (no in-place updates, no atomics into existing data) and whose control
flow does not depend on timing (else the second run may need more records than the first
counted; those are dropped and reported as usual).
"""
from __future__ import annotations

import threading

import numpy as np

from proton_lite import compat
from proton_lite.layout import CTA_HEADER_BYTES, BufferLayout
from proton_lite.passes.config import InstrumentConfig
from proton_lite.runtime import cuda_api

# compile options a user passes to kernel[grid](...) that the second run must repeat
RELAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion", "launch_cooperative_grid",
                    "launch_pdl")


def max_unit_count(buffer: np.ndarray, layout: BufferLayout, num_ctas: int) -> int:
    """The most records any unit of this launch tried to write (the ``count`` fields; a
    compact layout's lifetime blocks have none: such a kernel records none)."""
    if layout.compact:
        return 0
    blocks = np.frombuffer(buffer, np.uint8, num_ctas * layout.stride).reshape(num_ctas, layout.stride)
    best = 0
    for unit in range(layout.units):
        at = CTA_HEADER_BYTES + unit * layout.unit_bytes
        counts = blocks[:, at:at + 4].copy().view("<u4")
        best = max(best, int(counts.max(initial=0)))
    return best


def relaunch_options(metadata) -> dict:
    """The compile options of a compiled kernel that a relaunch passes to ``kernel[grid](...)``."""
    opts = {}
    for name in RELAUNCH_OPTIONS:
        value = getattr(metadata, name, None)
        if value is not None:
            opts[name] = value
    return opts


def capacity_for(count: int) -> int:
    return 1 << max(0, count - 1).bit_length()


class Resizer:
    """Checks launches in exact mode and runs them again when their records did not fit."""

    def __init__(self, config: InstrumentConfig) -> None:
        self.config = config
        self.loop_capacity = config.loop_capacity
        self.reruns = 0  # launches that ran a second time with a larger buffer
        self._tls = threading.local()

    @property
    def relaunching(self) -> bool:
        return getattr(self._tls, "active", False)

    def needed_capacity(self, ptr: int, stream: int, layout: BufferLayout, num_ctas: int) -> int | None:
        """Wait for the launch and read its counts: the capacity it needs, or None if it fit."""
        cuda_api.stream_synchronize(stream)
        host = np.empty(num_ctas * layout.stride, np.uint8)
        cuda_api.memcpy_dtoh(host, ptr)
        count = max_unit_count(host, layout, num_ctas)
        return capacity_for(count) if count > layout.capacity else None

    def relaunch(self, jit_fn, grid, args: dict, metadata, capacity: int) -> None:
        """Launch ``jit_fn`` again, compiled with at least ``capacity`` records per unit."""
        if capacity > self.loop_capacity:
            self.loop_capacity = capacity
            # also for every later launch of the session: they usually fit at their first run
            compat.set_knob("compilation", "instrumentation_mode", InstrumentConfig(
                self.config.granularity, None, capacity, self.config.buffer_mode, self.config.kernels).to_mode())
        self.reruns += 1
        self._tls.active = True
        try:
            jit_fn[tuple(grid)](**args, **relaunch_options(metadata))
        finally:
            self._tls.active = False
