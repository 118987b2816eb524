"""Launches captured into a CUDA graph while a session runs, in the collector's two hooks:
scratch of their own (the graph keeps it; ``runtime/graphs.py``), then the copy node that
keeps every replay's records; and an autotuner's timing runs captured to be replayed
(Triton's ``do_bench_cudagraph``), which are trials.  A mixin of ``Collector``.
"""
from __future__ import annotations

from proton_lite.layout import LAUNCH_SIZED_ALIGN, capacity_word
from proton_lite.runtime import cuda_api
from proton_lite.runtime.graphs import CapturedLaunch
from proton_lite.runtime.launch_info import _launch_info
from proton_lite.runtime.trials import CAPTURED_TRIAL, _in_autotuner_benchmark


class CaptureHooks:
    """``Collector``'s allocator and exit hook for a launch on a capturing stream."""

    def _captured(self, size: int, alignment: int, stream: int) -> int:
        """A launch being captured into a CUDA graph: scratch of its own, which the graph
        keeps (``runtime/graphs.py``); its exit hook adds the node that keeps every replay's
        records.  A kernel sized at launch is sized now, from the arguments the graph holds."""
        tls = self._tls
        stale = getattr(tls, "item", None)
        device = self._current_device()
        if getattr(tls, "device", None) != device:
            self._thread_context(device)
        with self._lock:  # (known before any _sync seals chunks of another device: allocate says why)
            if device not in self._contexts:
                self._contexts[device] = cuda_api.current_context()
        if stale is not None:  # this thread's last launch never reached its exit hook (it failed)
            tls.item = None
            if not isinstance(stale, CapturedLaunch) and stale is not CAPTURED_TRIAL:
                with self._lock:
                    self._sync()
                    self._settle(stale[0], device)
        if self.skip_autotune and _in_autotuner_benchmark():  # a config's timing runs, captured to replay
            from proton_lite.runtime.after_stop import AFTER_STOP
            tls.item = CAPTURED_TRIAL
            return AFTER_STOP(size, alignment, stream, count=False)
        capacity = pool = None
        if alignment == LAUNCH_SIZED_ALIGN:
            size, capacity = self._launch_capacity(size)
            pool = capacity[2]
        # the prefix of a launch sized now (its capacity; a pool's chunks and epoch) is written
        # once, outside the graph: a memset node before each such kernel cost every replay
        prefix = () if capacity is None else \
            (capacity_word(capacity[0]), ) + ((pool[0], pool[1]) if pool is not None else ())
        try:
            launch = self.graphs.scratch(size, device, stream, pool, prefix)
        except cuda_api.CudaError as e:  # no memory for it: the capture goes on, these replays unrecorded
            from proton_lite.runtime.after_stop import AFTER_STOP
            self.graphs.errors.append(f"scratch for a captured launch: {e}"[:300])
            return AFTER_STOP(size, alignment, stream, count=False)  # the exit hook counts it (captured)
        if pool is not None:  # the chunks its units take are counted from zero at every replay: captured
            cuda_api.memset_d32_async(launch.scratch + 12, 0, 1, stream)
        tls.item = launch
        return launch.scratch

    def _captured_exit(self, launch: CapturedLaunch, launch_metadata) -> None:
        """The captured kernel's node is in the graph: add the copy node after it."""
        info = _launch_info(launch_metadata)
        kernel = self._kernel(info[1]) if info is not None else None
        if kernel is None:  # no layout to read its records with; its replays only write the scratch
            with self._lock:
                self.unattributed += 1
            return
        kernel_id, ctas_per_block = kernel[0], kernel[1]
        grid = info[0]
        gx, gy, gz = grid if len(grid) == 3 else (tuple(grid) + (1, 1))[:3]
        try:
            self.graphs.add(launch, kernel_id, (gx, gy, gz), gx * gy * gz * ctas_per_block)
        except (cuda_api.CudaError, RuntimeError) as e:  # its replays run; their records are not kept
            name = getattr(info[1], "name", "?")
            with self._lock:
                self.captured[name] = self.captured.get(name, 0) + 1
            self.graphs.errors.append(f"{name}: replays not recorded ({e})"[:300])
