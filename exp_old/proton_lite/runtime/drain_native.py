"""The drain with its thread in C: no Python thread is woken per sealed chunk.

``native_drain`` says why (the Python copier and writer cost launching threads their turns at
the GIL).  The work splits as follows:

- the **launching thread**, when it seals a chunk, takes a pinned buffer and an event and
  pushes a job: the chunk's parts (its launch entries, packed by the hooks as each launch
  ended, and the pinned slices), held as Python objects until the job is collected;
- the **C thread** enqueues the chunk's copy into pinned memory, its clearing and the event
  on the drain's own stream after the chunk's event, waits for it, copies a pooled launch's
  chunks, writes the chunk (checksummed on several threads) and zeroes the pinned buffer;
- **whoever seals the next chunk** (or waits for device memory, or the graph poller) collects
  the finished jobs: the device chunk and the pinned buffer go back to their pools.

Jobs reach the file in the order they were pushed; one that finds no pinned memory within the
pool's limit waits here, with every job after it, until a finished job returns some (nothing
waits on a launching thread for the disk unless device memory runs short, ``wait_below``).
After a failure (a kernel fault, a write error) the C thread runs nothing more and the rest is
done here in order, as the Python drain does it (``Drain._salvage``).
"""
from __future__ import annotations

import os
import threading
import time
from collections import deque

import numpy as np

from proton_lite import native_drain
from proton_lite.raw_format import (BATCH, BATCH_ENTRY, BATCH_HEADER, KERNEL, REPLAY_ROW, REPLAYS, json_payload,
                                    pack_entry)
from proton_lite.runtime import cuda_api
from proton_lite.runtime.drain import Drain, Sealed

ENABLED = True  # False: the Python threads drain (the tests run both)
_BUFFER_BYTES_AT = BATCH_ENTRY.fields["buffer_bytes"][1]
_CHUNK_KINDS = {"kernel": KERNEL, "graph": BATCH, "replays": REPLAYS, "chunk": BATCH}  # job kind -> raw chunk kind


def _pack_entries(rows: list[tuple]) -> bytes:
    return b"".join([pack_entry(row) for row in rows])


def make_drain(owner) -> Drain:
    """The C drain where its extension builds and the driver's functions load, else the Python one."""
    if ENABLED and native_drain.module() is not None:
        try:
            table = cuda_api.driver_table()
        except OSError:
            table = None
        if table is not None:
            return NativeDrain(owner, table)
    return Drain(owner)


class _Job:
    """One push to the C thread: what it writes, and what must stay alive until it is done."""

    __slots__ = ("kind", "item", "parts", "pooled", "zero", "copy", "event", "ctx", "bytes", "sealed_event")

    def __init__(self, kind: str, item=None, parts=(), bytes_=0) -> None:
        self.kind, self.item, self.parts, self.bytes = kind, item, parts, bytes_
        self.pooled = self.zero = self.copy = self.sealed_event = None
        self.event = self.ctx = 0


class NativeDrain(Drain):
    """``Drain``'s interface over the C thread (module docstring)."""

    thread = "c"

    def __init__(self, owner, table: tuple[int, ...]) -> None:
        self._table = table
        super().__init__(owner)

    def _start(self) -> None:
        self._mod = native_drain.module()
        self._cap = self._mod.open(self.owner.writer.fileno(), native_drain.WRITE_THREADS, native_drain.WRITE_BLOCK,
                                   self._table)
        self._lock = threading.RLock()
        self._waiting: deque[_Job] = deque()  # not yet pushed, in order: the first waits for pinned memory
        self._pushed: dict[int, _Job] = {}
        self._next_id = 0
        self._in_python = False  # after a failure: everything left is done here, in order

    # -- launching threads -----------------------------------------------------------------
    def kernel(self, entry: dict) -> None:
        self._add(_Job("kernel", entry, parts=(json_payload(entry), )))

    def graph_batch(self, entries: np.ndarray, data: np.ndarray, replays: list) -> None:
        with self._backlog:
            self.graph_backlog += len(data)
        entries = np.ascontiguousarray(entries, dtype=BATCH_ENTRY)
        data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        table = np.array(replays, dtype=REPLAY_ROW)
        with self._lock:  # the two chunks one after the other
            self._add(_Job("graph", (entries, data), parts=(BATCH_HEADER.pack(len(entries), 0), entries, data),
                           bytes_=len(data)))
            self._add(_Job("replays", replays, parts=(BATCH_HEADER.pack(len(table), 0), table)))

    def submit(self, item: Sealed) -> None:
        with self._backlog:
            self.queued_bytes += item.chunk.buf.capacity
            self.peak_queued_bytes = max(self.peak_queued_bytes, self.queued_bytes)
        self._add(_Job("chunk", item))

    def _add(self, job: _Job) -> None:
        with self._lock:
            self._waiting.append(job)
            self.collect()  # finished jobs first (their pinned buffers come back), then pushes what waits

    def collect(self) -> None:
        with self._lock:
            for job_id, status, taken, extra, sync_ns, write_ns in self._mod.collect(self._cap):
                self._done(self._pushed.pop(job_id), status, taken, extra)
                self.copy_ns += sync_ns
                self.write_ns += write_ns
            self._pump()

    def take_pinned(self, size: int, at_least: int = 0):
        """Waits by collecting: here finished jobs give pinned buffers back only when collected."""
        pool = self.owner.pinned_pool
        while True:
            self.collect()
            buf = pool.take_within(size, at_least=at_least)
            if buf is not None or not self._pushed:
                return buf if buf is not None else pool.take(size, wait=False, at_least=at_least)
            self._mod.wait(self._cap, 0.5)

    def wait_below(self, limit: int) -> None:
        self.collect()
        if self.queued_bytes <= limit:
            return
        t0 = time.perf_counter_ns()
        while self.queued_bytes > limit and not self.owner.failed:
            self._mod.wait(self._cap, 0.5)
            self.collect()
        if self.owner.failed:
            with self._lock:
                self._finish_in_python()
        self.waits += 1
        self.wait_ns += time.perf_counter_ns() - t0

    def finish(self) -> None:
        with self._lock:
            while self._waiting and not self._in_python:
                self._pump()
                if self._waiting and self._pushed:
                    self._mod.wait(self._cap, 0.5)
                    self.collect()
            self._mod.close(self._cap)  # runs what was pushed, then ends the thread
            self.collect()
            self._finish_in_python()
        self._destroy_streams()

    # -- pushing ---------------------------------------------------------------------------
    def _pump(self) -> None:
        """Push waiting jobs in order; stop at a chunk that finds no pinned memory yet (unless
        nothing is in flight to bring any back: then the pool passes its limit for it)."""
        while self._waiting and not self._in_python:
            if self.owner.failed:
                self._in_python = True
                break
            job = self._waiting[0]
            if job.kind == "chunk" and not self._prepare(job, force=not self._pushed):
                return
            self._waiting.popleft()
            self._push(job)
        if self._in_python and not self._pushed:
            self._finish_in_python()

    def _push(self, job: _Job) -> None:
        job_id = self._next_id
        self._next_id += 1
        kind = _CHUNK_KINDS[job.kind] if job.parts else native_drain.NO_WRITE
        self._pushed[job_id] = job
        self._mod.push(self._cap, job_id, kind, job.ctx, job.event, tuple(job.parts), job.pooled, job.zero, job.copy)

    def _prepare(self, job: _Job, force: bool) -> bool:
        """A sealed chunk's copy and write described for the C thread; False when no pinned
        buffer is to be had within the limit now."""
        item, owner = job.item, self.owner
        chunk = item.chunk
        eager = item.host_buf is not None  # _seal enqueued its copy on the chunk's own stream
        if not eager and item.copy_bytes:
            pool = owner.pinned_pool
            buf = (pool.take(item.copy_bytes, wait=False, at_least=chunk.buf.capacity) if force
                   else pool.take_within(item.copy_bytes, at_least=chunk.buf.capacity))
            if buf is None:
                return False
            item.host_buf = buf
        here = getattr(owner._tls, "device", None)
        try:
            if here != chunk.device:  # the stream and event must be of the chunk's context
                owner._use_device(chunk.device)
            if not eager:  # the C thread enqueues the copy and clearing on the drain's stream
                stream = self._stream(self._copy_streams, chunk.device)
                job.sealed_event, item.event = item.event, owner._event(chunk.device)
                job.copy = (stream, cuda_api.handle(job.sealed_event), item.host_buf.ptr if item.host_buf else 0,
                            chunk.buf.ptr, item.copy_bytes if item.host_buf else 0, item.clear_bytes)
        except cuda_api.CudaError as e:  # a kernel fault: this job and the rest are salvaged in order
            owner._failed(e)
            self._in_python = True
            return False
        finally:
            if here is not None and here != chunk.device:
                owner._use_device(here)
        job.event = cuda_api.handle(item.event)
        job.ctx = cuda_api.handle(owner._contexts[chunk.device])
        if item.host_buf is not None:
            job.zero = (item.host_buf.ptr, item.host_buf.size)
            self._describe_write(job)
        return True

    def _describe_write(self, job: _Job) -> None:
        item = job.item
        chunk, host_buf = item.chunk, item.host_buf
        if chunk.pool is not None:
            chunks, _, blocks, chunk_bytes = chunk.pool
            row = chunk.launches[0]
            entry = bytearray(pack_entry(row[:7] + (0, blocks)))  # buffer_bytes: the C thread adds the chunks taken
            job.parts = (BATCH_HEADER.pack(1, 0), entry, (host_buf.ptr, blocks))
            stream = self._stream(self._write_streams, chunk.device)
            job.pooled = (2, chunk.buf.ptr, blocks, chunks, chunk_bytes, stream, 1, _BUFFER_BYTES_AT)
            return
        entries = chunk.entries  # packed by the hooks as each launch ended (held by the job: never resized)
        slices = [(host_buf.ptr, host_buf.size)]
        if chunk.skipped_bytes:  # only the slices of saved launches, one after the other
            rows = chunk.launches
            slices = [(host_buf.ptr + row[7], row[8]) for row in rows]
            offsets = np.concatenate(([0], np.cumsum([row[8] for row in rows])[:-1])).tolist()
            entries = _pack_entries([row[:7] + (offset, row[8]) for row, offset in zip(rows, offsets)])
        job.parts = (BATCH_HEADER.pack(len(entries) // 64, 0), entries, *slices)

    # -- finished jobs ---------------------------------------------------------------------
    def _done(self, job: _Job, status: int, taken: int, extra: int) -> None:
        if status != 0:
            if status != native_drain.SKIPPED and not self.owner.failed:
                self.owner._failed(_error(status))
            self._in_python = True
            self._in_python_job(job)
            return
        if job.kind == "chunk":
            item = job.item
            chunk = item.chunk
            if chunk.pool is not None and item.host_buf is not None:
                row = chunk.launches[0]
                self.owner.pool_sizer.observed(row[0], taken, chunk.pool[0], row[4])
                self.copied_bytes += chunk.pool[2] + extra
            elif item.host_buf is not None:
                self.copied_bytes += item.copy_bytes
            self._give_chunk(chunk)
            self._release(item, zeroed=True, sealed_event=job.sealed_event)
        elif job.kind == "graph":
            self.copied_bytes += job.bytes
            with self._backlog:
                self.graph_backlog -= job.bytes

    def _release(self, item: Sealed, zeroed: bool, sealed_event=None) -> None:
        if sealed_event is not None:  # the one after the chunk's launches, waited for by the copy
            self.owner._recycle_event(item.chunk.device, sealed_event)
        if item.host_buf is not None:
            self.owner.pinned_pool.give(item.host_buf, zeroed=zeroed)
            item.host_buf = None
        if item.event is not None:
            self.owner._recycle_event(item.chunk.device, item.event)
            item.event = None
        self._drained(item.chunk)

    def _in_python_job(self, job: _Job) -> None:
        """A job the C thread did not run (after a failure), done as the Python drain does."""
        writer = self.owner.writer
        try:
            if job.kind == "chunk":
                item = job.item
                if self.owner.failed:
                    self._salvage(item)
                elif item.host_buf is not None:
                    self._write(item.chunk, item.host_buf)
            elif job.kind == "kernel":
                writer.kernel(job.item)
            elif job.kind == "graph":
                writer.batch(*job.item)
            else:
                writer.replays(job.item)
        except OSError as e:  # the disk failed: what this job held is lost
            self.owner._failed(e)
            if job.kind == "chunk":
                self.owner._count_lost(job.item.chunk.launches)
        finally:
            if job.kind == "chunk":
                self._release(job.item, zeroed=False, sealed_event=job.sealed_event)
            elif job.kind == "graph":
                with self._backlog:
                    self.graph_backlog -= job.bytes

    def _finish_in_python(self) -> None:
        """Once nothing is in flight in C: every waiting job, in order, here."""
        if self._pushed:
            return
        while self._waiting:
            self._in_python_job(self._waiting.popleft())


def _error(status: int) -> Exception:
    if status > 0:
        return cuda_api.CudaError(f"the drain's driver call failed: {cuda_api.error_name(status)}")
    if status == native_drain.NOT_LOADED:
        return cuda_api.CudaError("the drain's driver call failed: the function was not loaded")
    return OSError(-status, f"writing the raw file failed: {os.strerror(-status)}")
