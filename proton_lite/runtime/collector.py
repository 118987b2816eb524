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
  - a launch comes after its stream was idle for ``IDLE_NS``: sealed *before* that launch,
    so a fault in it cannot take the earlier launches along;
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
"""
from __future__ import annotations

import os
import sys
import threading
import time
import weakref

import numpy as np

from proton_lite.bound_expr import BoundError, arguments, evaluate, max_over_programs, reads_grid
from proton_lite.layout import LAUNCH_SIZED_ALIGN, MAX_LAUNCH_CAPACITY, BufferLayout, capacity_word
from proton_lite.raw_format import RawWriter
from proton_lite.runtime import cuda_api
from proton_lite.runtime.buffers import DeviceBuffer, DevicePool, PinnedPool, ProfileBufferOOM
from proton_lite.runtime.drain import Drain, Sealed
from proton_lite.runtime.pool_sizing import PoolSizer
from proton_lite.runtime.trials import _AUTOTUNED, _in_autotuner_benchmark  # noqa: F401 (fastpath: _AUTOTUNED)

_LAUNCH_INFO_KEY = "proton_lite_launch"
IDLE_NS = 1_000_000  # a stream with no launch for this long is idle: what it holds is copied
CHUNK_BYTES = 4 << 20  # device bytes per chunk; a launch that needs more gets a chunk of its own
SLICE_ALIGN = 256  # each launch's slice starts at this alignment (Triton asks for at most 128)
DEFAULT_COPY_EVERY = 256
LAUNCH_SIZED_MAX_BYTES = 1 << 30  # a launch sized from its arguments gets at most this much (then drops, counted)
PINNED_RESERVE_CHUNKS = 4  # pinned buffers of a chunk's size made at the first launch (the copier's working set)
DEVICE_LIMIT_MAX = 4 << 30  # sealed chunks waiting for the disk hold at most this much device memory ...
DEVICE_LIMIT_SHARE = 8  # ... and at most this share of what was free at the first launch


def default_device_limit(free_bytes: int) -> int:
    """Device bytes that sealed chunks may hold while the disk is behind, when the session
    does not set ``device_buffer_mb``: records wait in HBM instead of holding up launches."""
    return max(64 << 20, min(DEVICE_LIMIT_MAX, free_bytes // DEVICE_LIMIT_SHARE))


class LaunchInfo:
    """Attached as a JIT function's ``launch_metadata``: tells the exit hook what was launched
    (grid, compiled kernel's metadata, arguments by name, and the JIT function itself, which
    ``sizing="exact"`` needs to launch it again)."""

    __slots__ = ("jit_fn", )

    def __init__(self, jit_fn=None) -> None:
        self.jit_fn = jit_fn

    def __call__(self, grid, metadata, args):
        return {_LAUNCH_INFO_KEY: (grid, metadata, args, self.jit_fn)}


def launch_metadata_fn(grid, metadata, args):
    """``LaunchInfo`` of no particular JIT function (for tests and tools)."""
    return {_LAUNCH_INFO_KEY: (grid, metadata, args, None)}


class _Chained:
    """A user's own launch_metadata function followed by ours."""

    def __init__(self, user, ours: LaunchInfo) -> None:
        self.user, self.ours = user, ours

    def __call__(self, grid, metadata, args):
        data = dict(self.user(grid, metadata, args) or {})
        data.update(self.ours(grid, metadata, args))
        return data


class _Chunk:
    """A device buffer that the launches of one (device, stream) fill in order."""

    __slots__ = ("buf", "limit", "device", "stream", "used", "launches", "inflight", "closed", "sealed",
                 "skipped_bytes", "pool", "eager", "returned")

    def __init__(self, buf: DeviceBuffer, limit: int, device: int, stream: int, pool=None) -> None:
        self.buf, self.device, self.stream = buf, device, stream
        # a launch with a pool has a chunk of its own: (chunks, epoch, bytes before the pool, bytes
        # per pool chunk); its CTA blocks are copied when it is sealed, its chunks by the drain thread
        self.pool = pool
        self.limit = limit  # bytes of slices it takes (its copy-back must fit the pinned limit)
        self.used = 0
        self.launches: list[tuple] = []  # BATCH_ENTRY rows, buffer_offset within this chunk
        self.inflight = 0  # slices handed out whose launch has not reached its exit hook
        self.closed = False  # takes no more slices; sealed once ``inflight`` is 0
        self.sealed = False
        self.skipped_bytes = 0  # bytes of slices whose launches are not saved
        self.eager = False  # copied on its own stream when sealed (it precedes or is an isolated launch)
        self.returned = False  # given back to the device pool


class Collector:
    """Owns buffers, hooks' per-launch work and the drain thread of one session."""

    def __init__(self, writer: RawWriter, host_limit_bytes: int, skip_autotune: bool = True,
                 copy_every: int = DEFAULT_COPY_EVERY, idle_ns: int = IDLE_NS, resizer=None,
                 pool_mb: int | None = None, selects=None, device_limit_bytes: int | None = None) -> None:
        self.writer = writer
        self.selects = selects or (lambda name: True)  # the session's kernels= patterns
        self.uninstrumented: dict[str, int] = {}  # kernel name -> launches that ran without a profile buffer
        self.captured: dict[str, int] = {}  # kernel name -> launches captured into CUDA graphs (not recorded)
        exact = os.environ.get("PROTON_LITE_EXACT_BUFFERS", "") not in ("", "0")
        self.device_pool = DevicePool(exact=exact)
        self.pool_sizer = PoolSizer(pool_mb, exact)  # launch pools (run-time loop bounds)
        self._pool_epoch = 0
        self.pinned_pool = PinnedPool(host_limit_bytes)
        self.copy_every = copy_every
        self.idle_ns = idle_ns
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
        self._launch_index = 0
        self.device_limit = device_limit_bytes  # None: set at the first launch (default_device_limit)
        self._drain = Drain(self)
        self.launches = 0
        self.copies = 0  # chunks sealed with launches to copy
        self.eager_copies = 0  # ... of which the launching thread copied on their stream (Drain: the rest)
        self.unattributed = 0
        self.lost = 0  # saved launches whose records a fault kept from reaching the host
        self.errors: list[str] = []
        self.failed = False
        self.skip_autotune = skip_autotune
        self.skipped_autotune = 0
        self._contexts: dict[int, object] = {}
        # the two driver queries of every launch, resolved now (one Python call less each)
        self._is_capturing = cuda_api.capture_query()
        self._current_device = cuda_api.device_getter()
        self.unsized = 0  # launches sized at launch whose arguments could not be read or evaluated
        self.capped = 0  # ... and those whose records would need more than LAUNCH_SIZED_MAX_BYTES
        self._bounds: dict[int, tuple] = {}  # id(metadata) -> (expr, its arguments, reads the grid, memo)
        self.lost_scopes: list[str] = []  # one line per launched kernel whose scope markers a Triton pass removed

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
        stale = getattr(tls, "item", None)
        if stale is not None:  # its exit hook never ran; handled once, below
            tls.item = None
        with self._lock:
            if device not in self._contexts:
                self._contexts[device] = cuda_api.current_context()
                if len(self._contexts) == 1:  # the session's first launch: the copier's working set
                    self._reserve_pinned()
            if stale is not None:  # this thread's last launch never reached its exit hook (it failed)
                self._settle(stale[0], device)
            last = self._last_slice_ns.get(key)
            idle = last is None or now - last > self.idle_ns
            self._last_slice_ns[key] = now
            chunk = self._open.get(key)
            offset = 0
            if chunk is not None:
                offset = -(-chunk.used // SLICE_ALIGN) * SLICE_ALIGN
                if idle or pool is not None or offset + size > chunk.limit:
                    chunk.eager = chunk.eager or idle  # then copied on its stream before this launch runs
                    self._close(chunk)
                    chunk = None
            if pool is not None:  # a chunk of its own, never open to other launches
                chunk = _Chunk(self._take_device(size, device, stream), size, device, stream, pool)
                offset = 0
            elif chunk is None:
                chunk = self._new_chunk(key, size, stream)
                offset = 0
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

    def _launch_capacity(self, size: int) -> tuple[int, tuple[int, bool, tuple | None]]:
        """Slice bytes and (capacity, short, pool) of a launch whose kernel is sized at launch:
        its record bound evaluated with this launch's arguments, or for a kernel with a pool
        its unit blocks and pool (``pool``: chunks, epoch, bytes before the pool, bytes per
        chunk; else None).
        ``short``: the capacity may be less than the kernel writes (arguments unreadable, or
        the cap hit); records that do not fit are counted as dropped, as for any kernel."""
        found = _launch_arguments()
        if found is None:  # no launch metadata: the kernel gets no record slots (capacity word 0)
            with self._lock:
                self.unsized += 1
            return size, (0, True, None)
        grid, metadata, args = found
        kernel = self._kernel(metadata)  # registered once per compiled kernel; its layout parsed once
        if kernel is None:  # no proton_lite entry in its metadata: nothing to size it from
            with self._lock:
                self.unsized += 1
            return size, (0, True, None)
        layout = kernel[3]
        num_ctas = size // kernel[2]
        if layout.pool:
            entry = int(metadata.proton_lite.get("pool_entry_records") or 0)
            capacity, chunks, total = self.pool_sizer.plan(kernel[0], layout, num_ctas, entry)
            with self._lock:
                self._pool_epoch += 1
                epoch = self._pool_epoch
            blocks = layout.with_capacity(capacity).buffer_bytes(num_ctas)
            return total, (capacity, False, (chunks, epoch, blocks, layout.chunk_bytes))
        short = False
        try:
            need = max(0, self._records_needed(metadata, args, grid))
        except (BoundError, KeyError, TypeError):
            need, short = layout.capacity, True  # the compiled fallback
            with self._lock:
                self.unsized += 1
        capacity = min(need, MAX_LAUNCH_CAPACITY)
        per_record = num_ctas * layout.units * 8
        if per_record and layout.with_capacity(capacity).buffer_bytes(num_ctas) > LAUNCH_SIZED_MAX_BYTES:
            capacity = max(0, (LAUNCH_SIZED_MAX_BYTES - layout.with_capacity(0).buffer_bytes(num_ctas)) // per_record)
        if capacity < need:
            short = True
            with self._lock:
                self.capped += 1
        return layout.with_capacity(capacity).buffer_bytes(num_ctas), (capacity, short, None)

    def _captured(self, size: int, alignment: int, stream: int) -> int:
        """A launch being captured into a CUDA graph: its replays cannot be recorded yet, so it
        gets scratch whose records are never read (kept for the life of the process, as the
        graph may be), and its exit hook counts it by kernel name (``captured``)."""
        from proton_lite.runtime.after_stop import AFTER_STOP
        stale = getattr(self._tls, "item", None)
        if stale is not None:  # this thread's last launch never reached its exit hook (it failed)
            self._tls.item = None
            with self._lock:
                self._settle(stale[0], self._current_device())
        return AFTER_STOP(size, alignment, stream, count=False)

    def _note_uninstrumented(self, launch_metadata) -> None:
        """A launch without a profile buffer: a plain binary of a kernel the session selects
        (compiled before the session and launched from a cache, or compiled outside Triton's
        JIT), counted per kernel name for the warning at stop.  Kernels that ``kernels=``
        leaves out are plain on purpose and not counted."""
        data = getattr(launch_metadata, "data", None)
        name = data.get("name") if isinstance(data, dict) else None
        if not name or not self.selects(name):
            return
        stream = data.get("stream")
        counts = self.captured if stream is not None and self._is_capturing(int(stream or 0)) else self.uninstrumented
        with self._lock:
            counts[name] = counts.get(name, 0) + 1

    def _records_needed(self, metadata, args, grid) -> int:
        """The kernel's record bound for this launch: its expression over the arguments, the
        largest over the grid's program ids when it reads them (memoized per arguments and
        grid: a persistent kernel relaunched with the same shapes costs a dict lookup)."""
        expr = metadata.proton_lite["records_per_unit_expr"]
        bound = self._bounds.get(id(metadata))
        if bound is None or bound[0] is not expr:
            bound = (expr, tuple(sorted(arguments(expr))), reads_grid(expr), {})
            self._bounds[id(metadata)] = bound
        if not bound[2]:
            return evaluate(expr, args)
        g = tuple(grid) if len(grid) == 3 else (tuple(grid) + (1, 1))[:3]
        key = (g, tuple(args.get(n) for n in bound[1]))
        memo = bound[3]
        need = memo.get(key)
        if need is None:
            need = max_over_programs(expr, args, g)
            if len(memo) >= 1024:  # shapes that keep changing: keep the newest
                memo.clear()
            memo[key] = need
        return need

    def on_launch_exit(self, launch_metadata) -> None:
        tls = self._tls
        item = getattr(tls, "item", None)
        if item is None:  # not an instrumented launch: one the session should have seen is named at stop
            self._note_uninstrumented(launch_metadata)
            return
        tls.item = None
        chunk, offset, size, idle, sized, now_ns = item
        info = _launch_info(launch_metadata)
        kernel = self._kernel(info[1]) if info is not None else None
        # only functions that were compiled inside an autotuner benchmark can have trial launches
        # (note_compile); the frame check is left to their launches
        trial = kernel is not None and self.skip_autotune and info[3] is not None and \
            id(info[3]) in _AUTOTUNED and _in_autotuner_benchmark()
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
            if kernel is not None and not trial and rerun is None:
                chunk.launches.append((kernel_id, chunk.device, self._launch_index, (gx, gy, gz), num_ctas,
                                       chunk.stream, now_ns, offset, nbytes))
                self._launch_index += 1
                self.launches += 1
            else:  # its slice is cleared and reused with the chunk; never copied
                chunk.skipped_bytes += size
                if rerun is not None:
                    pass  # replaced by the run below
                elif info is None or kernel is None:  # no layout to read its records with; counted
                    self.unattributed += 1
                elif trial:
                    self.skipped_autotune += 1
            if not chunk.closed and (idle or chunk.pool is not None or len(chunk.launches) >= self.copy_every):
                self._close(chunk)
            self._slice_done(chunk)
        if rerun is not None:
            self.resizer.relaunch(info[3], (gx, gy, gz), info[2], info[1], rerun)

    # -- chunks (called with self._lock held) ---------------------------------------------------
    def _new_chunk(self, key: tuple[int, int], size: int, stream: int) -> _Chunk:
        device = key[0]
        # room for copy_every launches like this one (small launches: small chunks), at most chunk_bytes
        limit = max(size, min(self.chunk_bytes, -(-size // SLICE_ALIGN) * SLICE_ALIGN * self.copy_every))
        try:
            buf = self._take_device(limit, device, stream)  # zeroed
        except ProfileBufferOOM:
            if size >= limit:
                raise
            limit = size  # a chunk just for this launch may still fit
            buf = self._take_device(size, device, stream)
        chunk = _Chunk(buf, limit, device, stream)
        self._open[key] = chunk
        return chunk

    def _reserve_pinned(self) -> None:
        """Pin the copier's working set now (PinnedPool.reserve says why); a failure only means
        the pool grows later, as it would without this."""
        try:
            self.pinned_pool.reserve(self.chunk_bytes, PINNED_RESERVE_CHUNKS)
        except cuda_api.CudaError:
            pass

    def _take_device(self, size: int, device: int, stream: int):
        """A zeroed device buffer; while sealed chunks waiting for the disk hold more than the
        device limit, wait for the drain first (and when memory runs out while some wait)."""
        if self.device_limit is None:
            free, total = cuda_api.mem_get_info()
            self.device_limit = default_device_limit(free)
        self._drain.wait_below(self.device_limit)
        try:
            return self.device_pool.take(size, device, stream)
        except ProfileBufferOOM:
            if self._drain.queued_bytes == 0:
                raise
            self._drain.wait_below(0)  # what waits on the device will be freed for reuse
            return self.device_pool.take(size, device, stream)

    def _close(self, chunk: _Chunk) -> None:
        """No more slices for this chunk; it is sealed as soon as its last launch is in."""
        if chunk.closed:
            return
        chunk.closed = True
        key = (chunk.device, chunk.stream)
        if self._open.get(key) is chunk:
            del self._open[key]
        if chunk.inflight == 0:
            self._seal(chunk)
        else:
            self._waiting.add(chunk)

    def _settle(self, chunk: _Chunk, device: int) -> None:
        """``_slice_done`` for a failed launch's slice, from a thread now launching on
        ``device``: a chunk it seals is copied in its own GPU's context, then the thread's
        context is restored."""
        if chunk.device == device or self.failed:
            self._slice_done(chunk)
            return
        self._use_device(chunk.device)
        try:
            self._slice_done(chunk)
        finally:
            self._use_device(device)

    def _slice_done(self, chunk: _Chunk) -> None:
        chunk.inflight -= 1
        if chunk.closed and chunk.inflight == 0 and not chunk.sealed:
            self._waiting.discard(chunk)
            self._seal(chunk)

    def _seal(self, chunk: _Chunk) -> None:
        """Hand the chunk to the drain once every launch in it is enqueued: an event after its
        launches on their stream, and nothing else on the launch path (``runtime/drain.py``
        copies it), unless it is ``eager``: then its copy and clearing are enqueued here, on its
        stream, so that they run before any later kernel there (one that faults included)."""
        chunk.sealed = True
        host_buf = None
        if self.failed:  # the context is gone: nothing can be copied any more
            self._count_lost(chunk.launches)
            return
        # a launch with a pool: its prefix and CTA blocks now, the chunks it took once the drain
        # knows how many (Drain._write_pooled); not copied: cleared whole
        copy = (chunk.pool[2] if chunk.pool is not None else chunk.used) if chunk.launches else 0
        clear = chunk.pool[2] if chunk.pool is not None and chunk.launches else chunk.used
        try:
            if copy and self.copy_every == 1:  # chasing a fault: every launch copied right after it
                host_buf = self.pinned_pool.take(copy, at_least=chunk.buf.capacity)
            elif copy and chunk.eager:
                host_buf = self.pinned_pool.try_take(copy)  # None: the disk is behind; the copier copies it
            if host_buf is not None:
                cuda_api.memcpy_dtoh_async(host_buf.ptr, chunk.buf.ptr, copy, chunk.stream)
                cuda_api.memset_d8_async(chunk.buf.ptr, 0, clear, chunk.stream)
            if copy:
                self.copies += 1
                self.eager_copies += host_buf is not None
            event = self._event(chunk.device)
            cuda_api.event_record(event, chunk.stream)
        except cuda_api.CudaError as e:  # an earlier kernel faulted; the user sees it from their next call
            if host_buf is not None:
                self.pinned_pool.give(host_buf)
            self._failed(e)
            self._count_lost(chunk.launches)
            return
        self._drain.submit(Sealed(chunk, host_buf, event, copy, clear))

    def _failed(self, error: Exception) -> None:
        """A CUDA call failed: the context is gone (a kernel fault).  From now on nothing is
        enqueued; chunks already sealed are kept as far as their copies got (``Drain._salvage``)."""
        with self._errors_lock:  # not self._lock: the drain thread never waits for a launching thread
            if not self.failed:
                self.failed = True
                self._fault = str(error)

    def _count_lost(self, rows: list) -> None:
        if not rows:
            return
        with self._errors_lock:
            self.lost += len(rows)
            first = min(row[2] for row in rows)
            self._first_lost = first if self._first_lost is None else min(first, self._first_lost)

    def _fault_message(self) -> str:
        if self._first_lost is None:
            return f"{self._fault}; every saved launch was copied back before the GPU failed"
        return (f"launch {self._first_lost}: {self._fault}; {self.lost} launch(es) from this one on were still on "
                "the GPU when it failed and were not saved (copy_every=1 copies each launch right after it)")

    # -- bookkeeping ---------------------------------------------------------------------------
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

    def drain_stats(self, stop_ns: int = 0) -> dict:
        """How the records travelled (the END chunk's ``drain``): what was copied, how much waited
        on the device for the disk, and how long launching threads and stop waited for it."""
        d = self._drain
        return {"chunks": self.copies, "eager_chunks": self.eager_copies, "copied_bytes": d.copied_bytes,
                "copy_wait_ms": round(d.copy_ns / 1e6, 3),
                "write_ms": round(d.write_ns / 1e6, 3), "device_limit_bytes": self.device_limit,
                "peak_device_backlog_bytes": d.peak_queued_bytes, "launch_waits": d.waits,
                "launch_wait_ms": round(d.wait_ns / 1e6, 3), "stop_ms": round(stop_ns / 1e6, 3)}

    def _recycle_event(self, device: int, event) -> None:
        if not self.failed:
            with self._events_lock:
                self._events.setdefault(device, []).append(event)

    def _event(self, device: int):
        """An event of ``device``'s context (the current one: the chunk's launches ran there)."""
        with self._events_lock:
            free = self._events.get(device)
            if free:
                return free.pop()
        return cuda_api.event_create()

    def finish(self) -> None:
        """Copy back what the open chunks hold, wait for every copy, free buffers (call once)."""
        here = None  # this thread's context, restored at the end (chunks of other devices switch it)
        if not self.failed:
            try:
                here = cuda_api.current_context()
            except cuda_api.CudaError:
                here = None
        with self._lock:
            # open chunks, and closed ones still waiting for a launch that never reached its
            # exit hook (it failed, and its thread launched nothing after it)
            pending = list(self._open.values()) + [c for c in self._waiting if not c.sealed]
            self._waiting.clear()
            for chunk in pending:
                chunk.inflight = 0  # a launch still between allocator and exit hook is not waited for
                if not self.failed:
                    self._use_device(chunk.device)
                if chunk.closed:
                    self._seal(chunk)
                else:
                    self._close(chunk)
        self._drain.finish()
        if self.failed:
            self.errors.append(self._fault_message())
        self.writer.flush()
        if not self.failed:
            with self._events_lock:
                for device, events in self._events.items():
                    self._use_device(device)
                    for ev in events:
                        try:
                            cuda_api.event_destroy(ev)
                        except cuda_api.CudaError:
                            pass
                self._events.clear()
            self.device_pool.release_all(self._use_device)
            if here is not None:
                try:
                    cuda_api.set_context(here)
                except cuda_api.CudaError:
                    pass
        self.pinned_pool.release_all()

    def _use_device(self, device: int) -> None:
        """Make ``device``'s context current in this thread: a chunk's copy, its event and its
        memory must be handled in the context its launches ran in."""
        ctx = self._contexts.get(device)
        if ctx is not None:
            try:
                cuda_api.set_context(ctx)
            except cuda_api.CudaError as e:
                self._failed(e)


def _pending_launch_info(launch_metadata):
    """(grid, metadata, arguments, JIT function) from our ``LaunchInfo`` entry still pending in
    Triton's launch metadata (a ``LazyDict``), without evaluating it; None when not there."""
    for fn, fargs in getattr(launch_metadata, "extras", None) or ():
        kind = type(fn)
        if kind is LaunchInfo:
            return fargs[0], fargs[1], fargs[2], fn.jit_fn
        if kind is _Chained:
            return fargs[0], fargs[1], fargs[2], fn.ours.jit_fn
    return None


def _launch_info(launch_metadata):
    """(grid, metadata, arguments, JIT function) from Triton's launch metadata, or None.

    Read from the ``LazyDict``'s pending entries while our ``LaunchInfo`` is still there (no
    evaluation, no dict merges: this runs for every launch); evaluated when another exit
    hook already did that."""
    if launch_metadata is None:
        return None
    info = _pending_launch_info(launch_metadata)
    return info if info is not None else launch_metadata.get().get(_LAUNCH_INFO_KEY)


def _launch_arguments():
    """(grid, compiled kernel's metadata, arguments by name) of the launch whose profile
    buffer is being allocated, or None.

    Triton's launcher calls the profile allocator with a size only; the launch metadata it
    has already built (``LazyDict``, not yet evaluated) holds our ``LaunchInfo`` with
    exactly these values.  It is a local of the launcher's ``__call__`` (Triton 3.9:
    ``launch_metadata``; 3.6: the second of ``*args``) two frames above the allocator,
    and of ``JITFunction.run`` one frame further.  Only kernels sized at launch look.
    """
    try:
        frame = sys._getframe(3)  # _launch_arguments <- _launch_capacity <- allocate <- allocate_scratch
    except ValueError:  # called from less deep (a test)
        return None
    for _ in range(4):
        frame = frame.f_back
        if frame is None:
            return None
        code = frame.f_code
        names = code.co_varnames
        candidates = ()
        if "launch_metadata" in names:
            candidates = (frame.f_locals.get("launch_metadata"), )
        elif code.co_name == "__call__" and "args" in names:
            args = frame.f_locals.get("args")
            candidates = tuple(args[:3]) if isinstance(args, tuple) else ()
        for lm in candidates:
            info = _pending_launch_info(lm)
            if info is not None:
                return info[:3]
    return None


class LaunchMetadataAttacher:
    """Attaches ``launch_metadata_fn`` to the JIT functions a session sees, and detaches it after."""

    def __init__(self) -> None:
        self._known: "weakref.WeakSet" = weakref.WeakSet()
        self._originals: dict[int, object] = {}

    def attach(self, jit_fn) -> None:
        self._known.add(jit_fn)
        current = jit_fn.launch_metadata
        if isinstance(current, (LaunchInfo, _Chained)):
            return
        self._originals[id(jit_fn)] = current
        ours = LaunchInfo(jit_fn)
        jit_fn.launch_metadata = ours if current is None else _Chained(current, ours)

    def attach_known(self) -> None:
        for fn in list(self._known):
            self.attach(fn)

    def detach_all(self) -> None:
        for fn in list(self._known):
            if id(fn) in self._originals:
                fn.launch_metadata = self._originals.pop(id(fn))
        self._originals.clear()


ATTACHER = LaunchMetadataAttacher()
