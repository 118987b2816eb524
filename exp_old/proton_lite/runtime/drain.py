"""Sealed chunks on their way from the device to the raw file, off the launching threads.

Where C can be built the drain is ``runtime/drain_native.py``'s (one C thread, no GIL: it
costs a program that launches thousands of CTAs per call much less); this is the Python
drain it falls back to, and the base class whose salvage and write it reuses after a fault.

Why two threads and a backlog on the device: the bytes a session records leave the GPU at
PCIe speed (about 25 GB/s) but reach the raw file at the speed of the disk and the
checksum (about 1 GB/s on the H100 machine, ``docs/design.md`` section 4).  When the
launching thread copied each chunk into pinned memory itself, it waited for pinned memory
whenever the disk was behind, and a program that launches many large grids ran at disk
speed.  Now a sealed chunk is only an event on its stream (recorded by the launching
thread); the rest happens here, each thread woken once per chunk:

- the **copier** enqueues the chunk's copy into pinned memory on a stream of its own,
  ordered after that event (so it overlaps the application's next kernels instead of
  delaying them on their stream), then the chunk's clearing, then an event; it waits for
  pinned memory when the writer is behind;
- the **writer** waits for that event, returns the cleared chunk to the device pool, writes
  the chunk's launches as one BATCH chunk of the raw file and returns the pinned buffer.

A chunk the launching thread copied itself (``eager``: after idle time, or with
``copy_every=1``, so that a fault in the next kernel cannot take it along) passes the copier
as is.  While the disk is behind, sealed chunks wait on the device: ``queued_bytes`` of
them, which the collector keeps under its device limit by waiting (``wait_below``), so
device memory stays bounded as pinned memory does (``PinnedPool.limit``).
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

from proton_lite.raw_format import BATCH_ENTRY
from proton_lite.runtime import cuda_api, cuda_graph
from proton_lite.runtime.buffers import HostBuffer


@dataclass
class Sealed:
    """A chunk whose launches are all enqueued; ``event`` follows them on their stream, or
    (``host_buf`` set) follows the copy and clearing the launching thread enqueued there."""

    chunk: object  # chunks._Chunk
    host_buf: HostBuffer | None
    event: object
    copy_bytes: int  # bytes to copy (the launches' slices; a pooled launch: its CTA blocks)
    clear_bytes: int  # bytes to clear before the chunk is reused


class Drain:
    """The copier and writer threads of one collector (see the module docstring)."""

    thread = "python"  # which drain ran (the END chunk's drain.thread)

    def __init__(self, owner) -> None:
        self.owner = owner  # the Collector: pools, raw writer, contexts, events, fault state
        self._copy_q: queue.Queue = queue.Queue()
        self._write_q: queue.Queue = queue.Queue()
        self._held_by_writer = 0  # items handed to the writer that hold a pinned buffer (under _held_lock)
        self._held_lock = threading.Lock()
        self._copy_streams: dict[int, int] = {}  # device -> the copier's stream
        self._write_streams: dict[int, int] = {}  # device -> the writer's stream (pool chunks)
        self._backlog = threading.Condition()
        self.queued_bytes = 0  # device bytes of sealed chunks not yet back in the pool
        self.graph_backlog = 0  # host bytes of graph replays handed over and not yet written
        self.wait_ns = 0  # time launching threads waited for the backlog to shrink
        self.waits = 0
        self.peak_queued_bytes = 0
        self.copied_bytes = 0
        self.copy_ns = 0  # writer's waits for copies plus copier's enqueue time: see ``stats``
        self.write_ns = 0
        self._start()

    def _start(self) -> None:
        self._threads = [threading.Thread(target=self._copier, name="proton_lite-copy", daemon=True),
                         threading.Thread(target=self._writer, name="proton_lite-write", daemon=True)]
        for t in self._threads:
            t.start()

    def collect(self) -> None:
        """Take back what the drain finished (the C drain's done list; here the threads do it)."""

    def take_pinned(self, size: int, at_least: int = 0):
        """A pinned buffer for a launching thread's own copy, waiting while the limit is in flight."""
        return self.owner.pinned_pool.take(size, at_least=at_least)

    # -- launching threads -----------------------------------------------------------------
    def kernel(self, entry: dict) -> None:
        """A KERNEL chunk, written before any chunk that holds one of its launches."""
        self._copy_q.put(("kernel", entry))

    def graph_batch(self, entries: np.ndarray, data: np.ndarray, replays: list) -> None:
        """Replays of captured launches (``runtime/graphs.py``): a BATCH and its REPLAYS rows,
        written in order with the kernels and chunks before them."""
        with self._backlog:
            self.graph_backlog += len(data)
        self._copy_q.put(("graph", entries, data, replays))

    def submit(self, item: Sealed) -> None:
        with self._backlog:
            self.queued_bytes += item.chunk.buf.capacity
            self.peak_queued_bytes = max(self.peak_queued_bytes, self.queued_bytes)
        self._copy_q.put(item)

    def wait_below(self, limit: int) -> None:
        """Wait while more than ``limit`` device bytes are sealed and not yet drained (they
        always drain, so this ends; after a fault they are dropped at once)."""
        if self.queued_bytes <= limit:
            return
        t0 = time.perf_counter_ns()
        with self._backlog:
            while self.queued_bytes > limit and not self.owner.failed:
                self._backlog.wait(timeout=0.5)
        self.waits += 1
        self.wait_ns += time.perf_counter_ns() - t0

    def finish(self) -> None:
        self._copy_q.put(None)
        for t in self._threads:
            t.join()
        self._destroy_streams()

    def _destroy_streams(self) -> None:
        """The drain's own streams, each in its device's context (none after a fault)."""
        for streams in (self._copy_streams, self._write_streams):
            for device, stream in streams.items():
                if self.owner.failed:
                    break
                self.owner._use_device(device)
                try:
                    cuda_api.stream_destroy(stream)
                except cuda_api.CudaError:
                    pass
            streams.clear()

    # -- copier ----------------------------------------------------------------------------
    def _copier(self) -> None:
        cuda_graph.relax_this_thread()
        current = None
        while True:
            item = self._copy_q.get()
            if item is None:
                self._write_q.put(None)
                return
            if isinstance(item, Sealed) and item.host_buf is None and not self.owner.failed:
                try:
                    if item.chunk.device != current:
                        cuda_api.set_context(self.owner._contexts[item.chunk.device])
                        current = item.chunk.device
                    self._enqueue_copy(item)
                except cuda_api.CudaError as e:  # a kernel fault: the writer keeps what was copied
                    self.owner._failed(e)
            if isinstance(item, Sealed) and item.host_buf is not None:
                with self._held_lock:
                    self._held_by_writer += 1
            self._write_q.put(item)

    def _stream(self, streams: dict[int, int], device: int) -> int:
        stream = streams.get(device)
        if stream is None:  # its own, non-blocking: no wait on (or for) the user's streams
            stream = streams[device] = cuda_api.stream_create()
        return stream

    def _enqueue_copy(self, item: Sealed) -> None:
        chunk, owner = item.chunk, self.owner
        stream = self._stream(self._copy_streams, chunk.device)
        cuda_api.stream_wait_event(stream, item.event)  # after the chunk's last kernel
        owner._recycle_event(chunk.device, item.event)  # the wait took the event's state: free now
        item.event = None
        if item.copy_bytes:
            item.host_buf = self._take_pinned(item.copy_bytes, chunk.buf.capacity)
            cuda_api.memcpy_dtoh_async(item.host_buf.ptr, chunk.buf.ptr, item.copy_bytes, stream)
        cuda_api.memset_d8_async(chunk.buf.ptr, 0, item.clear_bytes, stream)
        item.event = owner._event(chunk.device)
        cuda_api.event_record(item.event, stream)

    def _take_pinned(self, size: int, chunk_bytes: int):
        """A pinned buffer of the chunk's class (the reserved working set), waiting while the
        disk is behind, that is while the writer holds buffers it will give back.  When it holds
        none, the pinned memory in use belongs to chunks queued behind this one (the launching
        thread copied those itself), which can only move once this one has: the limit is passed
        instead of waiting for ever (a loop of six threads with idle gaps hung so)."""
        pool = self.owner.pinned_pool
        while True:
            buf = pool.take_within(size, at_least=chunk_bytes)
            if buf is not None:
                return buf
            with self._held_lock:
                writer_holds = self._held_by_writer
            if not writer_holds:
                return pool.take(size, wait=False, at_least=chunk_bytes)
            pool.wait_for_give(0.05)

    # -- writer ----------------------------------------------------------------------------
    def _writer(self) -> None:
        cuda_graph.relax_this_thread()
        current = None
        owner = self.owner
        while True:
            item = self._write_q.get()
            if item is None:
                return
            if isinstance(item, tuple):
                if item[0] == "kernel":
                    owner.writer.kernel(item[1])
                else:  # "graph": the launches, then the rows that say which replays they are
                    owner.writer.batch(item[1], item[2])
                    owner.writer.replays(item[3])
                    self.copied_bytes += len(item[2])
                    with self._backlog:
                        self.graph_backlog -= len(item[2])
                continue
            chunk = item.chunk
            if owner.failed:  # the context is gone; the copy may still have run before the fault
                self._salvage(item)
            else:
                try:
                    if chunk.device != current:
                        cuda_api.set_context(owner._contexts[chunk.device])
                        current = chunk.device
                    t0 = time.perf_counter_ns()
                    cuda_api.event_synchronize(item.event)
                    t1 = time.perf_counter_ns()
                    self.copy_ns += t1 - t0
                    if chunk.pool is not None and item.host_buf is not None:
                        self._write_pooled(item)
                    else:
                        self._give_chunk(chunk)  # copied and cleared: back before the (slower) disk write
                        if item.host_buf is not None:
                            self._write(chunk, item.host_buf)
                            self.copied_bytes += item.copy_bytes
                    self.write_ns += time.perf_counter_ns() - t1
                except cuda_api.CudaError as e:  # a kernel fault: launches before it are on disk
                    owner._failed(e)
                    self._salvage(item)
            if item.host_buf is not None:
                with self._held_lock:
                    self._held_by_writer -= 1
                owner.pinned_pool.give(item.host_buf)  # zeroed for the next copy (see _salvage)
            if item.event is not None:
                owner._recycle_event(chunk.device, item.event)
            self._drained(chunk)

    def _give_chunk(self, chunk) -> None:
        if not chunk.returned:
            chunk.returned = True
            self.owner.device_pool.give(chunk.buf)

    def _drained(self, chunk) -> None:
        """The chunk no longer waits on the device (given back, or dropped after a fault)."""
        with self._backlog:
            self.queued_bytes -= chunk.buf.capacity
            self._backlog.notify_all()

    def _write_pooled(self, item: Sealed) -> None:
        """A launch with a pool, once its kernel and the copy of its CTA blocks are done: copy
        the chunks its units took (the counter in the copied prefix says how many), clear them,
        return the buffer, and write the launch with its chunks after its CTA blocks."""
        chunk, owner = item.chunk, self.owner
        chunks, _, blocks, chunk_bytes = chunk.pool
        head = item.host_buf.view()
        taken = int(head[12:16].view("<u4")[0])
        nbytes = min(taken, chunks) * chunk_bytes
        extra = None
        if nbytes:
            stream = self._stream(self._write_streams, chunk.device)
            extra = owner.pinned_pool.take(nbytes, wait=False)  # this thread gives buffers back: never wait
            cuda_api.memcpy_dtoh_async(extra.ptr, chunk.buf.ptr + blocks, nbytes, stream)
            cuda_api.memset_d8_async(chunk.buf.ptr + blocks, 0, nbytes, stream)
            cuda_api.stream_synchronize(stream)
        self._give_chunk(chunk)
        try:
            row = chunk.launches[0]
            owner.pool_sizer.observed(row[0], taken, chunks, row[4])
            entries = np.array([row[:7] + (0, blocks + nbytes)], dtype=BATCH_ENTRY)
            data = head[:blocks] if extra is None else np.concatenate([head[:blocks], extra.view()[:nbytes]])
            owner.writer.batch(entries, data)
            self.copied_bytes += blocks + nbytes
        finally:
            if extra is not None:
                owner.pinned_pool.give(extra)

    def _salvage(self, item: Sealed) -> None:
        """After a fault no event says whether this chunk's copy ran before it.  Pinned buffers
        are zero before each copy and every instrumented CTA writes a non-zero header, so a
        launch whose slice holds any non-zero byte was copied (whole, unless the fault hit
        another stream mid-copy: the decoder counts such CTAs missing).  The rest are lost."""
        chunk, host_buf = item.chunk, item.host_buf
        if host_buf is None:
            self.owner._count_lost(chunk.launches)
            return
        data = host_buf.view()  # taken for the copied bytes
        if chunk.pool is not None:  # its chunks cannot be copied any more: none taken, their records dropped
            data[12:16] = 0
        copied = [row for row in chunk.launches if data[row[7]:row[7] + row[8]].any()]
        self.owner._count_lost([row for row in chunk.launches if row not in copied])
        if copied:
            self._write(chunk, host_buf, copied)

    def _write(self, chunk, host_buf: HostBuffer, rows: list | None = None) -> None:
        """The chunk's saved launches as one BATCH chunk of the raw file."""
        every = rows is None
        entries = np.frombuffer(chunk.entries, dtype=BATCH_ENTRY).copy() if every else np.array(rows, dtype=BATCH_ENTRY)
        data = host_buf.view()
        if chunk.skipped_bytes or not every:  # only the slices of saved launches
            parts = [data[o:o + n] for o, n in zip(entries["buffer_offset"].tolist(), entries["buffer_bytes"].tolist())]
            entries["buffer_offset"] = np.concatenate(([0], np.cumsum(entries["buffer_bytes"])[:-1]))
            data = np.concatenate(parts)
        self.owner.writer.batch(entries, data)
