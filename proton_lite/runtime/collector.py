"""Per-launch work while a session runs: hand each launch a slice of a device chunk, copy
chunks back in batches, stream them to disk.

Triton calls, for every launch of an instrumented kernel, in this order:
  1. the profile allocator (``allocate``) with ``profile_scratch_size x CTAs``: we hand out
     the next slice of the open *chunk* of the launch's (device, stream).  For a kernel
     sized at launch (its loops are bounded by arguments; Triton passes its alignment,
     ``LAUNCH_SIZED_ALIGN``) the slice is sized from the launch's arguments instead
     (``_launch_capacity``) and the capacity is written into its prefix;
  2. ``cuLaunchKernel`` (Triton builds the launch metadata whenever its hook chains exist,
     so no launch-enter hook is needed);
  3. the launch-exit hook (``on_launch_exit``): we note the launch in its chunk.
Neither hook calls the driver in the common case: a launch costs a capture check, a device
query and some bookkeeping.  In a session the common case of both runs in C
(``runtime/fastpath.py``), on the same objects; these methods are the reference and the
path for everything else.  A chunk is *sealed* -- one async copy of its used bytes to
pinned host memory on its stream, then one event -- when:
  - the next launch does not fit, or it holds ``copy_every`` launches (a burst: two driver
    calls per ``copy_every`` launches instead of two per launch);
  - a launch comes after its stream was idle for ``IDLE_NS`` (a stream idle at every step
    of a loop: twice its wait, ``_recurring_idle``): sealed *before* that launch, so a fault
    in it cannot take the earlier launches along;
  - a launch came after such an idle time itself: sealed right after it (an isolated launch
    is on its way to the host at once);
  - the session stops.
The copy is followed on the same stream by a clear of the chunk, so no host synchronization
happens on the launch path.  A drain thread waits on each sealed chunk's event, returns the
(cleared) chunk to the pool and appends its launches to the raw file in one write, so host
memory stays bounded
(``PinnedPool.limit``) however many launches a session has.  If a kernel faults, the
launches of chunks not yet copied are lost with it: they are counted and named in the
session's errors (``copy_every=1`` copies after every launch).

The work is split by job: ``launch_info.py`` (what was launched, from Triton's launch
metadata), ``launch_sizing.py`` (kernels sized at launch), ``chunks.py`` (chunks and their
sealing), ``collector_capture.py`` (launches captured into CUDA graphs), ``collector_stop.py``
(stop); the hooks themselves are here.
"""
from __future__ import annotations

import os
import threading
import time

from proton_lite.layout import LAUNCH_SIZED_ALIGN, BufferLayout, capacity_word
from proton_lite.raw_format import RawWriter
from proton_lite.runtime import cuda_api
from proton_lite.runtime.buffers import DevicePool, PinnedPool
from proton_lite.runtime.chunks import CHUNK_BYTES, SLICE_ALIGN, ChunkBook, _Chunk, spare_chunks_setting
from proton_lite.runtime.collector_capture import CaptureHooks
from proton_lite.runtime.collector_stop import CollectorStop
from proton_lite.raw_format import pack_entry
from proton_lite.runtime.drain_native import make_drain
from proton_lite.runtime.graphs import CapturedLaunch, GraphRecorder
from proton_lite.runtime.launch_info import ATTACHER, LaunchInfo, _Chained, _launch_info, launch_metadata_fn
from proton_lite.runtime.launch_sizing import LAUNCH_SIZED_MAX_BYTES, LaunchSizing
from proton_lite.runtime.pool_sizing import PoolSizer
from proton_lite.runtime.trials import _AUTOTUNED, CAPTURED_TRIAL, _in_autotuner_benchmark

# also the names that other modules, tests and tools import from here (defined in launch_info.py
# and launch_sizing.py)
__all__ = ["Collector", "IDLE_NS", "DEFAULT_COPY_EVERY", "ATTACHER", "LaunchInfo", "_Chained", "launch_metadata_fn",
           "LAUNCH_SIZED_MAX_BYTES"]

IDLE_NS = 1_000_000  # a stream with no launch for this long is idle: what it holds is copied
# A stream that goes idle again within IDLE_RECUR_NS of its last idle time runs a loop that
# waits each step (a synchronize per step): its idle time rises to twice that wait, at most
# IDLE_MAX_NS, so that the steps' launches stay on the C path (``_recurring_idle``)
IDLE_RECUR_NS = 100_000_000
IDLE_MAX_NS = 20_000_000
DEFAULT_COPY_EVERY = 256


class Collector(LaunchSizing, ChunkBook, CollectorStop, CaptureHooks):
    """Owns buffers, hooks' per-launch work and the drain thread of one session."""

    def __init__(self, writer: RawWriter, host_limit_bytes: int, skip_autotune: bool = True,
                 copy_every: int = DEFAULT_COPY_EVERY, idle_ns: int = IDLE_NS, resizer=None,
                 pool_mb: int | None = None, selects=None, device_limit_bytes: int | None = None,
                 graph_slots: int | None = None) -> None:
        self.writer = writer
        self.selects = selects or (lambda name: True)  # the session's kernels= patterns
        self.compiling = lambda: False  # while torch.compile compiles, its plain launches time kernels (inductor.py)
        self.uninstrumented: dict[str, int] = {}  # kernel name -> launches that ran without a profile buffer
        self.captured: dict[str, int] = {}  # kernel name -> plain launches captured into CUDA graphs (not recorded)
        self.graphs = GraphRecorder(self, graph_slots)  # instrumented launches captured into graphs
        exact = os.environ.get("PROTON_LITE_EXACT_BUFFERS", "") not in ("", "0")
        self.device_pool = DevicePool(exact=exact)
        self.pool_sizer = PoolSizer(pool_mb, exact)  # launch pools (run-time loop bounds)
        self._pool_epoch = 0
        self.pinned_pool = PinnedPool(host_limit_bytes)
        self.copy_every = copy_every
        self.idle_ns = idle_ns  # raised by _recurring_idle, never above max(idle_ns, IDLE_MAX_NS)
        self._idle_at: dict[tuple[int, int], int] = {}  # key -> when its last idle time ended
        self.idle_recur_ns = IDLE_RECUR_NS  # 0: the idle time stays idle_ns (tests of the idle seals)
        self.resizer = resizer  # runtime.exact.Resizer when sizing="exact", else None
        # a chunk's copy needs as much pinned memory: a few chunks in flight fit the limit
        self.chunk_bytes = max(SLICE_ALIGN, min(CHUNK_BYTES, host_limit_bytes // 4))
        if exact:
            self.chunk_bytes = 1  # one launch per chunk, allocated to its exact size
        self._events: dict[int, list] = {}  # device -> reusable events (an event belongs to one context)
        self._events_lock = threading.Lock()
        self._tls = threading.local()
        self._lock = threading.Lock()  # chunks, launch indices, counters (launching threads only)
        self._errors_lock = threading.Lock()  # failed, fault, lost (also the drain thread)
        self._fault: str | None = None  # the first CUDA error after the GPU failed
        self._first_lost: int | None = None
        self._open: dict[tuple[int, int], _Chunk] = {}
        self._waiting: set[_Chunk] = set()  # closed, but a slice's exit hook has not run yet
        self._last_slice_ns: dict[tuple[int, int], int] = {}
        self._kernels: dict[int, tuple] = {}  # id(metadata) -> (metadata, _kernel() result)
        self._kernel_ids: dict[str, int] = {}  # kernel hash -> id in the raw file
        self._kernel_names: dict[int, str] = {}  # id in the raw file -> kernel name
        self._launch_index = 0
        self._launches = 0  # instrumented launches saved (``launches``)
        self._fast = None  # runtime/fastpath.FastPath when the C hooks run: it holds hot state (_sync)
        self._c_switch = False  # the C hooks switch chunks too (from spares opened here: chunks.py)
        self.spare_chunks = spare_chunks_setting()  # 0: every switch in Python (for measuring one against the other)
        self._spares: dict[tuple[int, int], list[tuple]] = {}  # key -> [(chunk, event, its handle)], opened ahead
        self._c_sealed: list[tuple] = []  # (chunk, recorded event, bytes used) the C hooks switched away from
        self.device_limit = device_limit_bytes  # None: set at the first launch (default_device_limit)
        self._drain = make_drain(self)
        self.copies = 0  # chunks sealed with launches to copy
        self.eager_copies = 0  # ... of which the launching thread copied on their stream (Drain: the rest)
        self.unattributed = 0
        self.lost = 0  # saved launches whose records a fault kept from reaching the host
        self.errors: list[str] = []
        self.failed = False
        self.skip_autotune = skip_autotune
        self.skipped_autotune = 0
        self._benchmarking = False  # the last launch checked for trials was one (_note_benchmarking)
        self._contexts: dict[int, object] = {}
        # the two driver queries of every launch, resolved now (one Python call less each)
        self._is_capturing = cuda_api.capture_query()
        self._current_device = cuda_api.device_getter()
        self.unsized = 0  # launches sized at launch whose arguments could not be read or evaluated
        self.capped = 0  # ... and those whose records would need more than LAUNCH_SIZED_MAX_BYTES
        self._bounds: dict[int, tuple] = {}  # id(metadata) -> (expr, its arguments, reads the grid, memo)
        self.lost_scopes: list[str] = []  # one line per launched kernel whose scope markers a Triton pass removed

    @property
    def launches(self) -> int:
        """Instrumented launches saved so far (graph replays included)."""
        self._sync()
        return self._launches

    def _sync(self, seal: bool = True) -> None:
        """The C hooks hold the open chunks' fill level, their launches in flight, each stream's
        last launch time and the launch counters in C while they serve launches; this writes
        them back here.  Called right after taking ``_lock`` (the C hooks hold nothing while
        it is taken) by every method that reads or changes that state.  ``seal``: also seal
        the chunks they switched away from (not on the graph poller's thread: a seal may make
        a chunk's context current)."""
        fast = self._fast
        if fast is not None:
            fast.flush()
        if seal and self._c_sealed:
            self._seal_switched()

    # -- called by Triton ----------------------------------------------------------------------
    def allocate(self, size: int, alignment: int, stream) -> int:
        """The device address of this launch's slice.  An int, not an object with
        ``data_ptr()``: Triton's launcher takes it as is, with no ``cuPointerGetAttribute``."""
        stream = int(stream or 0)
        if self._is_capturing(stream):
            return self._captured(size, alignment, stream)
        capacity = None
        pool = None
        if alignment == LAUNCH_SIZED_ALIGN:
            size, capacity = self._launch_capacity(size)
            pool = capacity[2]
        device = self._current_device()
        key = (device, stream)
        now = time.time_ns()  # idle detection here, the launch's host time in the exit hook
        tls = self._tls
        if getattr(tls, "device", None) != device:  # this thread's first launch on the device
            self._thread_context(device)
        stale = getattr(tls, "item", None)
        if stale is not None:  # its exit hook never ran; handled once, below
            tls.item = None
            if isinstance(stale, CapturedLaunch) or stale is CAPTURED_TRIAL:  # captured: nothing to settle
                stale = None
        with self._lock:
            # this device's context is known before _sync seals chunks the C hooks switched on
            # another device (each sealed in its own context, then this thread's is made current)
            first_on_device = device not in self._contexts
            if first_on_device:
                self._contexts[device] = cuda_api.current_context()
            self._sync()
            if first_on_device:
                if len(self._contexts) == 1:  # the session's first launch: the copier's working set
                    self._reserve_pinned()
                if pool is None:  # and the chunks a loop keeps in flight on this device
                    self._reserve_device(device, size)
            if stale is not None:  # this thread's last launch never reached its exit hook (it failed)
                self._settle(stale[0], device)
            last = self._last_slice_ns.get(key)
            idle = last is None or now - last > self.idle_ns
            if idle and last is not None:
                self._recurring_idle(key, now, now - last)
            self._last_slice_ns[key] = now
            chunk = self._open.get(key)
            offset = 0
            full = False
            if chunk is not None:
                offset = -(-chunk.used // SLICE_ALIGN) * SLICE_ALIGN
                full = offset + size > chunk.limit or chunk.count >= self.copy_every
                if idle or pool is not None or full:
                    chunk.eager = chunk.eager or idle  # then copied on its stream before this launch runs
                    self._close(chunk)
                    chunk = None
            if pool is not None:  # a chunk of its own, never open to other launches
                chunk = _Chunk(self._take_device(size, device, stream), size, device, stream, pool)
                offset = 0
            elif chunk is None:
                chunk = self._new_chunk(key, size, stream)
                offset = 0
                # a stream whose chunks fill up, or the device's first one to launch back to back:
                # the next switches in C
                if self._c_switch and not idle and (full or self._first_loop_on_device(key)):
                    self._open_spares(key, size, stream)
            chunk.used = offset + size
            chunk.inflight += 1
            chunk.eager = chunk.eager or idle  # an isolated launch: on its way at its exit hook
            self._last_slice_ns[key] = time.time_ns()  # our own work (a pool growing) is not idle time
        tls.item = (chunk, offset, size, idle, capacity, now)
        ptr = chunk.buf.ptr + offset
        if capacity is not None:  # ordered on the stream before the kernel reads it
            cuda_api.memset_d32_async(ptr, capacity_word(capacity[0]), 1, stream)
            if pool is not None:  # the pool's chunks and the launch's epoch (its counter is zero)
                cuda_api.memset_d32_async(ptr + 4, pool[0], 1, stream)
                cuda_api.memset_d32_async(ptr + 8, pool[1], 1, stream)
        return ptr

    def _recurring_idle(self, key: tuple[int, int], now: int, waited: int) -> None:
        """A loop that synchronizes each step is idle at every step: each of its steps then
        went through Python twice (a seal before its first launch, another right after it),
        +140-170 µs per step of liger's fused linear cross-entropy (2 ms steps, H200 machine,
        ``call_times.py --ops 32``).  When ``key`` was idle before within IDLE_RECUR_NS, the
        session's idle time (every stream's) becomes twice this wait (at most IDLE_MAX_NS):
        such steps are a burst then, and only a longer pause seals eagerly.  Never lowered
        during the session."""
        before, self._idle_at[key] = self._idle_at.get(key), now
        if before is None or now - before > self.idle_recur_ns:
            return
        raised = min(max(IDLE_MAX_NS, self.idle_ns), 2 * waited)
        if raised > self.idle_ns:
            self.idle_ns = raised
            if self._fast is not None:
                self._fast.set_idle_ns(raised)

    def _note_benchmarking(self, on: bool) -> None:
        """A trial was seen (an autotuner benchmark runs: check every launch, as its cache
        flushes may be any kernel's), or a checked launch was none (it ended)."""
        self._benchmarking = on
        if self._fast is not None:
            self._fast.set_benchmarking(on)

    def _note_uninstrumented(self, launch_metadata) -> None:
        """A launch without a profile buffer: a plain binary of a kernel the session selects
        (compiled before the session and launched from a cache, or compiled outside Triton's
        JIT), counted per kernel name for the warning at stop.  Kernels that ``kernels=``
        leaves out are plain on purpose and not counted."""
        data = getattr(launch_metadata, "data", None)
        name = data.get("name") if isinstance(data, dict) else None
        if not name or not self.selects(name):
            return
        if (self._benchmarking and _in_autotuner_benchmark(helper=True)) or self.compiling():
            # a tuner's flush by a plain binary, or Inductor timing its workers' plain binaries as it compiles
            with self._lock:
                self.skipped_autotune += 1
            return
        stream = data.get("stream")
        counts = self.captured if stream is not None and self._is_capturing(int(stream or 0)) else self.uninstrumented
        with self._lock:
            counts[name] = counts.get(name, 0) + 1

    def on_launch_exit(self, launch_metadata) -> None:
        tls = self._tls
        item = getattr(tls, "item", None)
        if item is None:  # not an instrumented launch: one the session should have seen is named at stop
            self._note_uninstrumented(launch_metadata)
            return
        tls.item = None
        if isinstance(item, CapturedLaunch):
            self._captured_exit(item, launch_metadata)
            return
        if item is CAPTURED_TRIAL:
            with self._lock:
                self.skipped_autotune += 1
            return
        chunk, offset, size, idle, sized, now_ns = item
        info = _launch_info(launch_metadata)
        kernel = self._kernel(info[1]) if info is not None else None
        # only functions that were compiled inside an autotuner benchmark can have trial launches
        # (note_compile), and, while one runs, the tuner's own kernels: the frame check is left to them
        benchmarking = self._benchmarking
        checked = kernel is not None and self.skip_autotune and \
            (benchmarking or (info[3] is not None and id(info[3]) in _AUTOTUNED))
        trial = checked and _in_autotuner_benchmark(id(info[3]) if info[3] is not None else 0, helper=benchmarking)
        if checked and trial != benchmarking:
            self._note_benchmarking(trial)
        rerun = None  # sizing="exact": the capacity this launch needed, when its records did not fit
        if kernel is not None and not trial:
            kernel_id, ctas_per_block, scratch, layout, may_drop = kernel
            grid = info[0]
            gx, gy, gz = grid if len(grid) == 3 else (tuple(grid) + (1, 1))[:3]
            num_ctas = gx * gy * gz * ctas_per_block
            nbytes = num_ctas * scratch
            if layout.sized_at_launch and sized is not None:  # this launch's capacity (allocate)
                layout = layout.with_capacity(sized[0])
                nbytes, may_drop = layout.buffer_bytes(num_ctas), sized[1]
            if self.resizer is not None and may_drop and not self.resizer.relaunching and info[3] is not None \
                    and not self.failed:  # kernels whose count is known never to exceed the buffer: no wait
                try:
                    rerun = self.resizer.needed_capacity(chunk.buf.ptr + offset + layout.prefix, chunk.stream,
                                                         layout, num_ctas)
                except cuda_api.CudaError as e:  # the kernel faulted: the user sees it from their next call
                    self._failed(e)
        with self._lock:
            self._sync()
            if kernel is not None and not trial and rerun is None:
                row = (kernel_id, chunk.device, self._launch_index, (gx, gy, gz), num_ctas, chunk.stream, now_ns,
                       offset, nbytes)
                chunk.entries += pack_entry(row)
                self._launch_index += 1
                self._launches += 1
            else:  # its slice is cleared and reused with the chunk; never copied
                chunk.skipped_bytes += size
                if rerun is not None:
                    pass  # replaced by the run below
                elif info is None or kernel is None:  # no layout to read its records with; counted
                    self.unattributed += 1
                elif trial:
                    self.skipped_autotune += 1
            if not chunk.closed and (idle or chunk.pool is not None or chunk.count >= self.copy_every):
                self._close(chunk)
            self._slice_done(chunk)
        if rerun is not None:
            self.resizer.relaunch(info[3], (gx, gy, gz), info[2], info[1], rerun)

    # -- bookkeeping ---------------------------------------------------------------------------
    def _thread_context(self, device: int) -> None:
        """A launching thread without a current context (autograd's) gets the session's."""
        cuda_api.ensure_context(device, self._contexts.get(device))
        self._tls.device = device

    def kernel_name(self, kernel_id) -> str:
        return self._kernel_names.get(kernel_id, "?")

    def _kernel(self, metadata) -> tuple | None:
        """(kernel id in this session, CTAs per grid point, profile bytes per CTA, layout, whether
        its records may not fit), or None for a kernel without instrumentation.  Registered
        once per compiled kernel."""
        known = self._kernels.get(id(metadata))
        if known is not None and known[0] is metadata:
            return known[1]
        entry = getattr(metadata, "proton_lite", None)
        if entry is None:
            return None
        with self._lock:
            kid = self._kernel_ids.get(metadata.hash)
            if kid is None:
                kid = len(self._kernel_ids)
                self._kernel_ids[metadata.hash] = kid
                self._kernel_names[kid] = metadata.name
                if entry.get("lost_scopes"):  # told now, at its first launch, and again at stop
                    from proton_lite.passes.kernel_facts import lost_scopes_message, warn_lost_scopes
                    self.lost_scopes.append(lost_scopes_message(metadata.name, entry["lost_scopes"]))
                    warn_lost_scopes(metadata.name, entry, stacklevel=2)
                self._drain.kernel({  # queued before any chunk that holds one of its launches
                    "id": kid, "name": metadata.name, "hash": metadata.hash, "num_warps": metadata.num_warps,
                    "num_ctas": getattr(metadata, "num_ctas", 1), "shared": metadata.shared,
                    "profile_scratch_size": metadata.profile_scratch_size, "proton_lite": entry,
                })
            layout = BufferLayout.from_json(entry["layout"])
            bound = entry.get("records_per_unit_max")  # from the TTIR; None: a run-time loop bound
            may_drop = not isinstance(bound, int) or bound > layout.capacity
            kernel = (kid, int(getattr(metadata, "num_ctas", 1)), int(metadata.profile_scratch_size), layout, may_drop)
            self._kernels[id(metadata)] = (metadata, kernel)  # holds metadata: its id stays unique
        return kernel
