"""Per-launch work while a session runs: give each launch a buffer, copy it back, stream it to disk.

Triton calls, for every launch of an instrumented kernel, in this order:
  1. the profile allocator (``allocate``) with ``profile_scratch_size x CTAs``: we hand out
     a pooled device buffer and remember it for this thread;
  2. the launch-enter hook (nothing to do; it makes Triton build the launch metadata);
  3. ``cuLaunchKernel``;
  4. the launch-exit hook (``on_launch_exit``): we enqueue an async copy of the buffer to
     pinned host memory on the launch's stream, record an event, and queue the launch.
No host synchronization happens on the launch path.  A drain thread waits on each event in
order, clears the device buffer on its own stream and returns it to the pool, appends the
bytes to the raw file and recycles the pinned buffer, so host memory stays bounded
(``PinnedPool.limit``) however many launches a session has.
"""
from __future__ import annotations

import queue
import threading
import time
import weakref
from dataclasses import dataclass

from proton_lite.raw_format import RawWriter
from proton_lite.runtime import cuda_api
from proton_lite.runtime.buffers import DeviceBuffer, DevicePool, HostBuffer, PinnedPool

_LAUNCH_INFO_KEY = "proton_lite_launch"


def launch_metadata_fn(grid, metadata, args):
    """Attached as ``JITFunction.launch_metadata``: tells the exit hook what was launched."""
    return {_LAUNCH_INFO_KEY: (grid, metadata)}


class _Chained:
    """A user's own launch_metadata function followed by ours."""

    def __init__(self, user) -> None:
        self.user = user

    def __call__(self, grid, metadata, args):
        data = dict(self.user(grid, metadata, args) or {})
        data.update(launch_metadata_fn(grid, metadata, args))
        return data


@dataclass
class _PendingLaunch:
    kernel_id: int
    device: int
    index: int
    grid: tuple
    num_ctas: int
    stream: int
    host_ns: int
    dev_buf: DeviceBuffer
    host_buf: HostBuffer
    event: object


@dataclass
class _Recycle:
    """A launch whose buffer goes back to the pool without being saved."""

    device: int
    dev_buf: DeviceBuffer
    event: object


class Collector:
    """Owns buffers, hooks' per-launch work and the drain thread of one session."""

    def __init__(self, writer: RawWriter, host_limit_bytes: int, skip_autotune: bool = True) -> None:
        self.writer = writer
        self.device_pool = DevicePool()
        self.pinned_pool = PinnedPool(host_limit_bytes)
        self._events: list = []
        self._events_lock = threading.Lock()
        self._pending = threading.local()
        self._kernels: dict[str, int] = {}
        self._kernels_lock = threading.Lock()
        self._launch_index = 0
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="proton_lite-drain", daemon=True)
        self._thread.start()
        self.launches = 0
        self.unattributed = 0
        self.errors: list[str] = []
        self.failed = False
        self.skip_autotune = skip_autotune
        self.skipped_autotune = 0
        self._contexts: dict[int, object] = {}

    # -- called by Triton ----------------------------------------------------------------------
    def allocate(self, size: int, alignment: int, stream) -> DeviceBuffer:
        stream = int(stream or 0)
        if cuda_api.stream_is_capturing(stream):
            raise RuntimeError(
                "proton_lite: a kernel with instrumentation is being captured into a CUDA graph. Triton's launcher "
                "allocates the profile buffer on the host at launch time, so every replay of the graph would "
                "write into the same buffer and no copy-back could follow a replay. Stop the session "
                "(proton_lite.stop()) before capturing graphs, or profile the kernels outside the graph.")
        device = cuda_api.current_device()
        if device not in self._contexts:
            self._contexts[device] = cuda_api.current_context()
        buf = self.device_pool.take(size, device, stream)  # zeroed (see buffers.py)
        self._pending.item = (buf, stream, device)
        return buf

    def on_launch_enter(self, launch_metadata) -> None:
        return None

    def on_launch_exit(self, launch_metadata) -> None:
        pending = getattr(self._pending, "item", None)
        if pending is None:
            return  # not an instrumented launch
        self._pending.item = None
        dev_buf, stream, device = pending
        info = launch_metadata.get().get(_LAUNCH_INFO_KEY) if launch_metadata is not None else None
        if info is None:
            self.unattributed += 1  # not safe to read without knowing the layout; counted
            self._recycle(dev_buf, stream, device)
            return
        grid, metadata = info
        entry = getattr(metadata, "proton_lite", None)
        if entry is None:
            self._recycle(dev_buf, stream, device)
            return
        if self.skip_autotune and _in_autotuner_benchmark():
            self.skipped_autotune += 1
            self._recycle(dev_buf, stream, device)
            return
        kernel_id = self._kernel_id(metadata, entry)
        grid = tuple(int(g) for g in (tuple(grid) + (1, 1, 1))[:3])
        num_ctas = grid[0] * grid[1] * grid[2] * int(getattr(metadata, "num_ctas", 1))
        size = num_ctas * int(metadata.profile_scratch_size)
        host_buf = self.pinned_pool.take(size)
        cuda_api.memcpy_dtoh_async(host_buf.ptr, dev_buf.ptr, size, stream)
        event = self._event()
        cuda_api.event_record(event, stream)
        index = self._launch_index
        self._launch_index += 1
        self.launches += 1
        self._queue.put(_PendingLaunch(kernel_id, device, index, grid, num_ctas, stream, time.time_ns(), dev_buf,
                                       host_buf, event))

    # -- bookkeeping ---------------------------------------------------------------------------
    def _recycle(self, dev_buf: DeviceBuffer, stream: int, device: int) -> None:
        """A launch whose records are not kept: its buffer returns to the pool once the kernel
        is done with it and the drain thread has cleared it."""
        event = self._event()
        cuda_api.event_record(event, stream)
        self._queue.put(_Recycle(device, dev_buf, event))

    def _kernel_id(self, metadata, entry: dict) -> int:
        key = metadata.hash
        kid = self._kernels.get(key)
        if kid is not None:
            return kid
        with self._kernels_lock:
            kid = self._kernels.get(key)
            if kid is None:
                kid = len(self._kernels)
                self._kernels[key] = kid
                self._queue.put(("kernel", {
                    "id": kid, "name": metadata.name, "hash": key, "num_warps": metadata.num_warps,
                    "num_ctas": getattr(metadata, "num_ctas", 1), "shared": metadata.shared,
                    "profile_scratch_size": metadata.profile_scratch_size, "proton_lite": entry,
                }))
        return kid

    def _event(self):
        with self._events_lock:
            if self._events:
                return self._events.pop()
        return cuda_api.event_create()

    def _drain(self) -> None:
        streams: dict[int, int] = {}  # device -> this thread's stream for clearing buffers
        current = None  # device whose context this thread has current
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                if isinstance(item, tuple):
                    self.writer.kernel(item[1])
                    continue
                saved = isinstance(item, _PendingLaunch)
                if not self.failed:
                    try:
                        if item.device != current:
                            cuda_api.set_context(self._contexts[item.device])
                            current = item.device
                            if item.device not in streams:
                                streams[item.device] = cuda_api.stream_create()
                        cuda_api.event_synchronize(item.event)
                        # the device buffer is free once the copy is done: clear it and hand it
                        # back before the (slower) disk write, so launches meanwhile reuse it
                        self._clear_and_give(item.dev_buf, streams[item.device])
                        if saved:
                            self.writer.launch(item.kernel_id, item.device, item.index, item.grid, item.num_ctas,
                                               item.stream, item.host_ns, item.host_buf.view())
                    except cuda_api.CudaError as e:  # a kernel fault: launches before it are on disk
                        self.failed = True
                        which = f"launch {item.index}" if saved else "a launch that was not saved"
                        self.errors.append(f"{which}: {e}; this and later launches were not saved")
                if saved:
                    self.pinned_pool.give(item.host_buf)
                if not self.failed:
                    with self._events_lock:
                        self._events.append(item.event)
        finally:
            if not self.failed:
                for stream in streams.values():
                    try:
                        cuda_api.stream_destroy(stream)
                    except cuda_api.CudaError:
                        pass

    def _clear_and_give(self, buf: DeviceBuffer, stream: int) -> None:
        cuda_api.memset_d8_async(buf.ptr, 0, buf.size, stream)
        cuda_api.stream_synchronize(stream)
        self.device_pool.give(buf)

    def finish(self) -> None:
        """Wait for every queued copy, then free buffers (safe to call once)."""
        self._queue.put(None)
        self._thread.join()
        self.writer.flush()
        if not self.failed:
            with self._events_lock:
                for ev in self._events:
                    try:
                        cuda_api.event_destroy(ev)
                    except cuda_api.CudaError:
                        pass
                self._events.clear()
            self.device_pool.release_all()
        self.pinned_pool.release_all()


def _in_autotuner_benchmark() -> bool:
    """True while Triton's autotuner times its candidate configs (their launches are trials)."""
    import sys
    if "triton.runtime.autotuner" not in sys.modules:
        return False
    frame, depth = sys._getframe(2), 0
    while frame is not None and depth < 16:
        depth += 1
        code = frame.f_code
        if code.co_name in ("_bench", "do_bench") and "autotuner" in code.co_filename:
            return True
        frame = frame.f_back
    return False


class LaunchMetadataAttacher:
    """Attaches ``launch_metadata_fn`` to the JIT functions a session sees, and detaches it after."""

    def __init__(self) -> None:
        self._known: "weakref.WeakSet" = weakref.WeakSet()
        self._originals: dict[int, object] = {}

    def attach(self, jit_fn) -> None:
        self._known.add(jit_fn)
        current = jit_fn.launch_metadata
        if current is launch_metadata_fn or isinstance(current, _Chained):
            return
        self._originals[id(jit_fn)] = current
        jit_fn.launch_metadata = launch_metadata_fn if current is None else _Chained(current)

    def attach_known(self) -> None:
        for fn in list(self._known):
            self.attach(fn)

    def detach_all(self) -> None:
        for fn in list(self._known):
            if id(fn) in self._originals:
                fn.launch_metadata = self._originals.pop(id(fn))
        self._originals.clear()


ATTACHER = LaunchMetadataAttacher()
