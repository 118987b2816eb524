"""The profile allocator a session leaves behind: instrumented binaries keep working after stop.

A kernel compiled inside a session is an instrumented binary: its launcher asks Triton's
profile allocator for scratch at every launch.  Libraries keep such binaries (a cached
``CompiledKernel`` from ``warmup()``, an autotuner's chosen config, Inductor's caches)
and launch them again after the session stopped, when Triton's default allocator raises
``Kernel requires a runtime memory allocation, but no allocator was set``: profiling one
step broke the rest of the program.

So at stop, where the allocator was Triton's default one, the session installs this one
instead.  Only instrumented binaries ever call a profile allocator (a plain kernel has no
profile scratch), so plain kernels are untouched and cost nothing.  It hands every such
launch one zeroed device buffer per device, grown to the largest size asked for; the
records written there are never read.  Its first word is never the capacity tag (kernels
write CTA headers there, or nothing: the launch prefix is the host's), so a kernel sized
at launch records nothing and a kernel with a launch pool takes no chunk (docs/format.md
§1.1, §1.12).  Buffers are kept for the life of the process: a kernel may still run in
one that was outgrown.

An instrumented binary captured into a CUDA graph after the session stopped gets the same
scratch (allocated outside the capture): the graph holds its address, and it lives as long
as the process.  Launches captured inside a session are recorded (``runtime/graphs.py``).
"""
from __future__ import annotations

import threading

from proton_lite.runtime import cuda_api
from proton_lite.runtime.buffers import size_class


class ScratchAfterStop:
    """Triton profile allocator for instrumented binaries launched outside any session."""

    def __init__(self) -> None:
        self._buffers: dict[int, tuple[int, int]] = {}  # device -> (pointer, bytes)
        self._outgrown: list[int] = []  # still possibly in use by a kernel in flight
        self._lock = threading.Lock()
        self.launches = 0  # instrumented launches after stop, whose records were discarded

    def __call__(self, size: int, alignment: int, stream, count: bool = True) -> int:
        device = cuda_api.current_device()
        stream = int(stream or 0)
        with self._lock:
            self.launches += count
            ptr, have = self._buffers.get(device, (0, 0))
            if size > have:
                have = size_class(size)
                if ptr:
                    self._outgrown.append(ptr)
                if cuda_api.stream_is_capturing(stream):  # a clear on its stream would join the graph
                    ptr = cuda_api.mem_alloc_zeroed_while_capturing(have)
                else:
                    ptr = cuda_api.mem_alloc(have)
                    cuda_api.memset_d8_async(ptr, 0, have, stream)  # before the kernel, on its stream
                self._buffers[device] = (ptr, have)
        return ptr


AFTER_STOP = ScratchAfterStop()  # one per process: sessions come and go, cached binaries stay
