"""Chunks: the device buffers that the launches of one (device, stream) fill in order.

A chunk is opened by a launch that finds none with room, closed when it takes no more
slices, sealed (handed to the drain, ``runtime/drain.py``) once its last launch is in, and
at a fault its launches are counted as lost (collector.py says when a chunk is sealed).
A mixin of ``Collector``: ``_new_chunk`` to ``_seal`` run with its lock held; the fault and
event methods take their own locks, as the drain thread calls them too.
"""
from __future__ import annotations

import os

from proton_lite.raw_format import unpack_entries
from proton_lite.runtime import cuda_api
from proton_lite.runtime.buffers import DeviceBuffer, ProfileBufferOOM
from proton_lite.runtime.drain import Sealed

# device bytes per chunk; a launch that needs more gets a chunk of its own.  Each chunk costs
# the launching thread a seal (62-170 us with the C drain, tests/benchmarks/seal_cost.py) and,
# with the Python drain, its threads' turns at the GIL: 16 MiB (the most the default 64 MiB of
# pinned memory allows, a quarter) took 1,024-4,096-CTA loops from +8-27 to +4-17 us per launch
# on the H200 host with the Python drain (2026-11-27, tests/benchmarks/host_scale_chunks.py
# beside 4 MiB in one run, docs/gpu-runs.md)
CHUNK_BYTES = 16 << 20
SLICE_ALIGN = 256  # each launch's slice starts at this alignment (Triton asks for at most 128)
PINNED_RESERVE_CHUNKS = 4  # pinned buffers of a chunk's size made at the first launch (the copier's working set)
# device chunks made at the first launch on a device, besides the spares: that launch's own
# (an isolated launch is copied alone) and the loop's first open chunk
DEVICE_RESERVE_CHUNKS = 2
# chunks opened ahead, each with an event, for a stream whose chunks fill up, when the C hooks
# switch chunks (runtime/fastpath.py): they then switch that many times without Python, and the
# Python switch that follows seals the chunks they left and opens the next ones together, on
# warm caches (one Python switch per SPARE_CHUNKS + 1 chunks)
SPARE_CHUNKS = 4
DEVICE_LIMIT_MAX = 4 << 30  # sealed chunks waiting for the disk hold at most this much device memory ...
DEVICE_LIMIT_SHARE = 8  # ... and at most this share of what was free at the first launch


def spare_chunks_setting() -> int:
    """SPARE_CHUNKS, or ``PROTON_LITE_SPARE_CHUNKS`` (0: every switch in Python, as before the
    C switch; for measuring one against the other)."""
    raw = os.environ.get("PROTON_LITE_SPARE_CHUNKS", "")
    if raw == "":
        return SPARE_CHUNKS
    if not raw.isdigit() or int(raw) > 8:
        raise ValueError(f"proton_lite: PROTON_LITE_SPARE_CHUNKS must be a whole number from 0 to 8 (got {raw!r}); "
                         "unset it for the default")
    return int(raw)


def default_device_limit(free_bytes: int) -> int:
    """Device bytes that sealed chunks may hold while the disk is behind, when the session
    does not set ``device_buffer_mb``: records wait in HBM instead of holding up launches."""
    return max(64 << 20, min(DEVICE_LIMIT_MAX, free_bytes // DEVICE_LIMIT_SHARE))


class _Chunk:
    """A device buffer that the launches of one (device, stream) fill in order."""

    __slots__ = ("buf", "limit", "device", "stream", "used", "inflight", "closed", "sealed",
                 "skipped_bytes", "pool", "eager", "returned", "entries")

    def __init__(self, buf: DeviceBuffer, limit: int, device: int, stream: int, pool=None) -> None:
        self.buf, self.device, self.stream = buf, device, stream
        # a launch with a pool has a chunk of its own: (chunks, epoch, bytes before the pool, bytes
        # per pool chunk); its CTA blocks are copied when it is sealed, its chunks by the drain thread
        self.pool = pool
        self.limit = limit  # bytes of slices it takes (its copy-back must fit the pinned limit)
        self.used = 0
        # the saved launches as BATCH_ENTRY bytes (raw_format.pack_entry), buffer_offset within
        # this chunk: packed by the hooks as each launch ends, so a seal builds nothing
        self.entries = bytearray()
        self.inflight = 0  # slices handed out whose launch has not reached its exit hook
        self.closed = False  # takes no more slices; sealed once ``inflight`` is 0
        self.sealed = False
        self.skipped_bytes = 0  # bytes of slices whose launches are not saved
        self.eager = False  # copied on its own stream when sealed (it precedes or is an isolated launch)
        self.returned = False  # given back to the device pool

    @property
    def count(self) -> int:
        """Launches saved in this chunk."""
        return len(self.entries) // 64

    @property
    def launches(self) -> list[tuple]:
        """The saved launches' rows (kernel_id, device, launch_index, grid, num_ctas, stream,
        host_time_ns, buffer_offset, buffer_bytes), unpacked from ``entries``."""
        return unpack_entries(self.entries)


class ChunkBook:
    """``Collector``'s chunks: opening, closing, sealing, and what a fault costs."""

    def _new_chunk(self, key: tuple[int, int], size: int, stream: int) -> _Chunk:
        device = key[0]
        limit = self._chunk_limit(size)
        spares = self._spares.get(key)
        if spares and spares[0][0].limit >= size:  # opened ahead: its event goes back to the free ones
            chunk, event, _ = spares.pop(0)
            self._recycle_event(device, event)
            self._open[key] = chunk
            return chunk
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

    def _open_spares(self, key: tuple[int, int], size: int, stream: int) -> None:
        """Chunks (and events) for the C hooks' next switches on ``key``'s stream, opened here
        while this switch's objects are in the caches.  None when memory is short: then the
        Python path switches, as without spares."""
        spares = self._spares.setdefault(key, [])
        limit = self._chunk_limit(size)
        while spares and spares[0][0].limit < size:  # made for smaller launches: not taken by C
            chunk, event, _ = spares.pop(0)
            self.device_pool.give(chunk.buf)
            self._recycle_event(key[0], event)
        # every stream's spares count: they are device memory the drain's backlog does not show
        opened = sum(chunk.buf.capacity for held in self._spares.values() for chunk, _, _ in held)
        while len(spares) < self.spare_chunks:
            # what the C switches seal reaches the drain at the next Python switch, all at once:
            # with the open chunk and the spares it must fit under the device limit, which that
            # switch waits for (the disk is behind: fewer spares, more waits there)
            if self.device_limit is not None and \
                    self._drain.queued_bytes + opened + 2 * limit > self.device_limit:
                return
            try:
                buf = self.device_pool.take(limit, key[0], stream)
                event = self._event(key[0])
            except (ProfileBufferOOM, cuda_api.CudaError):
                return
            spares.append((_Chunk(buf, limit, key[0], stream), event, cuda_api.handle(event)))
            opened += buf.capacity

    def _seal_switched(self) -> None:
        """Seal the chunks the C hooks switched away from (``_c_sealed``, in order): their
        event was recorded after their launches there."""
        while self._c_sealed:
            chunk, event, used = self._c_sealed.pop(0)
            chunk.used, chunk.inflight, chunk.closed = used, 0, True
            self._seal(chunk, event)

    def _drop_spares(self) -> None:
        """At stop: the chunks opened ahead go back to the pool, their events to the free ones."""
        for key, spares in self._spares.items():
            for chunk, event, _ in spares:
                self.device_pool.give(chunk.buf)
                self._recycle_event(key[0], event)
        self._spares.clear()

    def _reserve_pinned(self) -> None:
        """Pin the copier's working set now (PinnedPool.reserve says why); a failure only means
        the pool grows later, as it would without this."""
        try:
            self.pinned_pool.reserve(self.chunk_bytes, PINNED_RESERVE_CHUNKS)
        except cuda_api.CudaError:
            pass

    def _chunk_limit(self, size: int) -> int:
        """Bytes of slices a chunk opened for a launch of ``size`` takes: room for copy_every
        launches like it (small launches: small chunks), at most chunk_bytes."""
        return max(size, min(self.chunk_bytes, -(-size // SLICE_ALIGN) * SLICE_ALIGN * self.copy_every))

    def _reserve_device(self, device: int, size: int) -> None:
        """Chunks for a loop's first chunks on ``device`` (the first launch's, the loop's first
        open chunk and its spares), of the size the first launch (``size`` bytes) opens, made
        in one driver call (``DevicePool.reserve``): growing the pool while the loop runs took
        0.2-0.5 ms a driver call on the launching thread (H200 machine, ``seal_cost.py``).  None
        for a launch larger than a chunk (it gets a chunk of its own: several of those could take
        memory the program needs).  A failure only means the pool grows later, as without this."""
        limit = self._chunk_limit(size)
        if limit > self.chunk_bytes:
            return
        try:
            self.device_pool.reserve(limit, DEVICE_RESERVE_CHUNKS + self.spare_chunks, device)
        except cuda_api.CudaError:
            pass

    def _first_loop_on_device(self, key: tuple[int, int]) -> bool:
        """Whether no stream of ``key``'s device has had spares yet: its first stream to run
        launches back to back gets them when it opens its first chunk, not when that chunk is
        full (the first Python switch opened them, ~1 ms on the launching thread, H200
        machine); other streams get theirs once a chunk fills, so that streams with a few
        launches each do not hold spares."""
        return not any(device == key[0] for device, _ in self._spares)

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

    def _seal(self, chunk: _Chunk, recorded=None) -> None:
        """Hand the chunk to the drain once every launch in it is enqueued: an event after its
        launches on their stream, and nothing else on the launch path (``runtime/drain.py``
        copies it), unless it is ``eager``: then its copy and clearing are enqueued here, on its
        stream, so that they run before any later kernel there (one that faults included).
        ``recorded``: that event, already recorded by the C hooks' switch."""
        chunk.sealed = True
        host_buf = None
        if self.failed:  # the context is gone: nothing can be copied any more
            if recorded is not None:
                self._recycle_event(chunk.device, recorded)
            self._count_lost(chunk.launches)
            return
        # a launch with a pool: its prefix and CTA blocks now, the chunks it took once the drain
        # knows how many (Drain._write_pooled); not copied: cleared whole
        copy = (chunk.pool[2] if chunk.pool is not None else chunk.used) if chunk.entries else 0
        clear = chunk.pool[2] if chunk.pool is not None and chunk.entries else chunk.used
        if recorded is not None:
            self.copies += bool(copy)
            self._drain.submit(Sealed(chunk, None, recorded, copy, clear))
            return
        try:
            if getattr(self._tls, "device", None) is None:  # a thread whose launches all took the C path
                self._thread_context(chunk.device)
            if copy and self.copy_every == 1:  # chasing a fault: every launch copied right after it
                host_buf = self._drain.take_pinned(copy, at_least=chunk.buf.capacity)
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

    def _use_device(self, device: int) -> None:
        """Make ``device``'s context current in this thread: a chunk's copy, its event and its
        memory must be handled in the context its launches ran in."""
        ctx = self._contexts.get(device)
        if ctx is not None:
            try:
                cuda_api.set_context(ctx)
            except cuda_api.CudaError as e:
                self._failed(e)
