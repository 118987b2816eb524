"""A simulated CUDA driver for testing the collector's logic on machines without a GPU.

The real driver cannot run in CI, and the collector (allocator, launch hooks, drain
thread) is otherwise only exercised by ``pytest -m gpu``.  This stands in for the few
``proton_lite.runtime.cuda_api`` calls it makes, with the semantics that matter: device
memory that keeps its bytes (slabs, offsets), streams whose operations run in order and
only when someone waits (``event_synchronize`` / ``stream_synchronize``), pinned host
memory that is real memory, and a fault that makes every later wait fail.  A "kernel"
is an operation the test enqueues on a stream that writes bytes into a device buffer.

Contexts, as with several GPUs: each thread has a current context (``ctx<device>``; setting
``sim.device`` is what ``torch.cuda.device(d)`` does to the calling thread).  Device memory,
streams (at their first use) and events belong to the context current when they were made, and
the driver's rules hold: an event is recorded only on a stream of its own context, an
asynchronous operation is enqueued on a stream of the current context, and memory is freed and
events destroyed from the context that owns them.
"""
from __future__ import annotations

import ctypes
import threading
from collections import deque

from proton_lite.runtime import cuda_api

_FUNCTIONS = ("mem_alloc", "mem_free", "mem_get_info", "host_alloc", "host_free", "memset_d8_async", "memset_d32_async",
              "memcpy_dtoh_async", "event_create", "event_record", "stream_wait_event", "event_synchronize", "event_destroy",
              "stream_is_capturing", "stream_synchronize", "stream_create", "stream_destroy", "memcpy_dtoh",
              "current_device", "mem_alloc_zeroed_while_capturing",
              "current_context", "set_context", "capture_query", "device_getter", "driver_table", "handle",
              "error_name")


class KernelRun:
    """A queued simulated kernel: where it writes, and whether it has run."""

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr, self.size, self.done = ptr, size, False


class _Event:
    def __init__(self, ctx: str) -> None:
        self.done = True  # an event never recorded counts as complete, as in CUDA
        self.stream = None
        self.record = [True]  # this record's completion: a stream waiting on it keeps it past a new record
        self.ctx = ctx


class SimDriver:

    def __init__(self, device_bytes: int = 1 << 30) -> None:
        self._lock = threading.RLock()
        self.device_bytes = device_bytes
        self.device_mem: dict[int, bytearray] = {}  # slab base -> bytes
        self.host_mem: dict[int, ctypes.Array] = {}
        self.streams: dict[int, deque] = {}
        self._next_base = 1 << 40
        self._next_stream = 100
        self.fault_after_kernels: int | None = None  # the kernel with this index faults
        self.kernels_run = 0
        self.faulted = False
        self.calls: dict[str, int] = {}
        self._tls = threading.local()  # the calling thread's current context
        self.stream_ctx: dict[int, str] = {}  # stream -> its context (fixed at first use)
        self.mem_ctx: dict[int, str] = {}  # device allocation -> its context
        self.contexts_set: list = []
        self.capturing: set[int] = set()
        self._handles: dict[int, object] = {}
        self.native_ctx = "ctx0"  # the C drain thread's current context
        self.native_errors: list[str] = []
        self.drain_gate: threading.Event | None = None

    # -- install ---------------------------------------------------------------------------------
    def install(self, monkeypatch) -> "SimDriver":
        for name in _FUNCTIONS:
            monkeypatch.setattr(cuda_api, name, self._counted(name, getattr(self, name)))
        return self

    def _counted(self, name, fn):
        def call(*args):
            with self._lock:
                self.calls[name] = self.calls.get(name, 0) + 1
            return fn(*args)
        return call

    # -- memory ----------------------------------------------------------------------------------
    def _resolve(self, ptr: int, size: int) -> tuple[bytearray, int]:
        for base, mem in self.device_mem.items():
            if base <= ptr and ptr + size <= base + len(mem):
                return mem, ptr - base
        raise AssertionError(f"device access outside any allocation: {ptr:#x} + {size}")

    def mem_alloc(self, size: int) -> int:
        with self._lock:
            if sum(map(len, self.device_mem.values())) + size > self.device_bytes:
                raise cuda_api.CudaError(f"cuMemAlloc({size} bytes) failed: CUDA_ERROR_OUT_OF_MEMORY")
            base = self._next_base
            self._next_base += max(size, 1 << 20) * 2
            self.device_mem[base] = bytearray(b"\xa5" * size)  # not zero: allocations are dirty
            self.mem_ctx[base] = self.current_context()
            return base

    def mem_alloc_zeroed_while_capturing(self, size: int, words: tuple = ()) -> int:
        """Allocated, cleared and its first words set at once, outside any stream (nothing
        joins a graph)."""
        ptr = self.mem_alloc(size)
        with self._lock:
            self.device_mem[ptr][:] = bytes(size)
            for i, word in enumerate(words):
                self.device_mem[ptr][4 * i:4 * i + 4] = (word & 0xFFFFFFFF).to_bytes(4, "little")
        return ptr

    def mem_free(self, ptr: int) -> None:
        with self._lock:
            self._in_context(self.mem_ctx.pop(ptr), "cuMemFree")
            del self.device_mem[ptr]

    def mem_get_info(self):
        used = sum(map(len, self.device_mem.values()))
        return self.device_bytes - used, self.device_bytes

    def host_alloc(self, size: int) -> int:
        buf = (ctypes.c_uint8 * size)()
        ctypes.memset(buf, 0x5A, size)
        ptr = ctypes.addressof(buf)
        with self._lock:
            self.host_mem[ptr] = buf
        return ptr

    def host_free(self, ptr: int) -> None:
        with self._lock:
            del self.host_mem[ptr]

    # -- contexts ----------------------------------------------------------------------------------
    @property
    def device(self) -> int:
        return int(self.current_context()[3:])

    @device.setter
    def device(self, device: int) -> None:
        self._tls.ctx = f"ctx{device}"

    def current_context(self):
        return getattr(self._tls, "ctx", "ctx0")

    def set_context(self, ctx) -> None:
        self.contexts_set.append((threading.current_thread().name, ctx))
        self._tls.ctx = ctx

    def _in_context(self, ctx: str, call: str) -> None:
        if ctx != self.current_context():
            raise cuda_api.CudaError(f"{call} failed: CUDA_ERROR_INVALID_CONTEXT (made in {ctx}, "
                                     f"called with {self.current_context()} current)")

    def _stream_context(self, stream: int) -> str:
        """The stream's context: the current one at its first use."""
        return self.stream_ctx.setdefault(int(stream), self.current_context())

    # -- streams and events ------------------------------------------------------------------------
    def _enqueue(self, stream: int, op) -> None:
        with self._lock:
            self._in_context(self._stream_context(stream), "an asynchronous call on a stream")
            self.streams.setdefault(int(stream), deque()).append(op)

    def memset_d8_async(self, ptr: int, value: int, size: int, stream: int) -> None:
        def op():
            mem, off = self._resolve(ptr, size)
            mem[off:off + size] = bytes([value]) * size
        self._enqueue(stream, op)

    def memset_d32_async(self, ptr: int, value: int, count: int, stream: int) -> None:
        def op():
            mem, off = self._resolve(ptr, 4 * count)
            mem[off:off + 4 * count] = value.to_bytes(4, "little") * count
        self._enqueue(stream, op)

    def memcpy_dtoh_async(self, dst_host: int, src_device: int, size: int, stream: int) -> None:
        def op():
            mem, off = self._resolve(src_device, size)
            ctypes.memmove(dst_host, bytes(mem[off:off + size]), size)
        self._enqueue(stream, op)

    def memcpy_dtoh(self, dst, src_device: int) -> None:
        """Synchronous copy into a numpy array (the caller has synchronized the stream)."""
        with self._lock:
            mem, off = self._resolve(src_device, dst.nbytes)
            dst.view("u1").reshape(-1)[:] = memoryview(mem)[off:off + dst.nbytes]

    def kernel(self, stream: int, ptr: int, data: bytes) -> "KernelRun":
        """Enqueue a kernel that writes ``data`` at ``ptr`` (a fault if it is the chosen one)."""
        run = KernelRun(ptr, len(data))

        def op():
            index = self.kernels_run
            self.kernels_run += 1
            run.done = True
            if self.fault_after_kernels is not None and index >= self.fault_after_kernels:
                self.faulted = True
                return
            mem, off = self._resolve(ptr, len(data))
            mem[off:off + len(data)] = data
        self._enqueue(stream, op)
        return run

    def event_create(self):
        return _Event(self.current_context())

    def event_record(self, event: _Event, stream: int) -> None:
        with self._lock:
            if event.ctx != self._stream_context(stream):
                raise cuda_api.CudaError("cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE (the event and the stream "
                                         "belong to different contexts)")
            event.done, event.stream = False, int(stream)
            record = event.record = [False]

        def op():
            record[0] = True
            if event.record is record:
                event.done = True
        self._enqueue(stream, op)

    def stream_wait_event(self, stream: int, event: _Event) -> None:
        """Later work on ``stream`` waits for the event's record as of now (a later record of
        the same event does not change what it waits for, as in CUDA)."""
        record, source = event.record, event.stream

        def op():
            if not record[0]:
                self._run_until(source, lambda: record[0])
        self._enqueue(stream, op)

    def _run_until(self, stream: int, stop=None) -> None:
        q = self.streams.get(int(stream), deque())
        while q:
            if self.faulted:
                raise cuda_api.CudaError("cuEventSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")
            q.popleft()()
            if stop is not None and stop():
                break
        if self.faulted:
            raise cuda_api.CudaError("cuEventSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")

    def event_synchronize(self, event: _Event) -> None:
        with self._lock:
            if not event.done:
                self._run_until(event.stream, lambda: event.done)
            elif self.faulted:
                raise cuda_api.CudaError("cuEventSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS")

    def event_destroy(self, event) -> None:
        self._in_context(event.ctx, "cuEventDestroy")

    def stream_create(self) -> int:
        with self._lock:
            self._next_stream += 1
            return self._next_stream

    def stream_synchronize(self, stream: int) -> None:
        with self._lock:
            self._run_until(stream)

    def stream_destroy(self, stream: int) -> None:
        pass

    def stream_is_capturing(self, stream: int) -> bool:
        return int(stream or 0) in self.capturing

    def capture_query(self):
        return cuda_api.stream_is_capturing  # the counted stand-in installed beside this one

    def device_getter(self):
        return cuda_api.current_device

    def current_device(self) -> int:
        return self.device

    # -- the C drain's driver (proton_lite/native_drain.py), as addresses --------------------------
    def handle(self, obj) -> int:
        """Contexts and events are Python objects here: the C code gets a number for each."""
        if obj is None or isinstance(obj, int):
            return obj or 0
        with self._lock:
            self._handles[id(obj)] = obj
        return id(obj)

    def error_name(self, code: int) -> str:
        return {700: "CUDA_ERROR_ILLEGAL_ADDRESS"}.get(code, f"CUDA error {code}")

    def driver_table(self) -> tuple[int, ...]:
        """ctypes callbacks into this simulation, for the C drain's thread.  Each callback gets a
        fresh Python thread state (ctypes, from a thread Python did not start), so the C
        thread's current context is kept here, not in ``_tls``."""
        u64, st, i32 = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int

        def entry(fn):
            def call(*args):
                # the C drain's thread (one Python did not start) has the context it set last;
                # a launching thread that calls one of these (the C hooks' event record at a
                # chunk switch) keeps its own, as a thread's current context does in CUDA
                if isinstance(threading.current_thread(), threading._DummyThread):
                    self._tls.ctx = self.native_ctx
                try:
                    fn(*args)
                    return 0
                except cuda_api.CudaError as e:
                    self.native_errors.append(str(e))
                    return 700  # CUDA_ERROR_ILLEGAL_ADDRESS
            return call

        def ctx_set(h):
            self.native_ctx = self._handles[h]
            self.contexts_set.append(("proton_lite-drain (C)", self.native_ctx))

        def event_sync(h):
            if self.drain_gate is not None:
                self.drain_gate.wait(10)  # a disk that is behind (the Python drain's tests gate its writer)
            cuda_api.event_synchronize(self._handles[h])

        # through cuda_api: the calls are counted, and a test's own stand-in sees them too
        self._callbacks = [
            ctypes.CFUNCTYPE(i32, u64)(entry(ctx_set)),
            ctypes.CFUNCTYPE(i32, u64)(entry(event_sync)),
            ctypes.CFUNCTYPE(i32, u64, u64, st, u64)(entry(lambda *a: cuda_api.memcpy_dtoh_async(*a))),
            ctypes.CFUNCTYPE(i32, u64, ctypes.c_ubyte, st, u64)(entry(lambda *a: cuda_api.memset_d8_async(*a))),
            ctypes.CFUNCTYPE(i32, u64)(entry(lambda s: cuda_api.stream_synchronize(s))),
            ctypes.CFUNCTYPE(i32, ctypes.c_void_p)(lambda mode: 0),
            ctypes.CFUNCTYPE(i32, u64, u64, ctypes.c_uint)(
                entry(lambda s, e, flags: cuda_api.stream_wait_event(s, self._handles[e]))),
            ctypes.CFUNCTYPE(i32, u64, u64)(entry(lambda e, s: cuda_api.event_record(self._handles[e], s)))]
        return tuple(ctypes.cast(cb, ctypes.c_void_p).value for cb in self._callbacks)

    def run_all(self) -> None:
        """Let the 'GPU' finish everything queued so far (what time does on a real one)."""
        with self._lock:
            for stream in list(self.streams):
                try:
                    self._run_until(stream)
                except cuda_api.CudaError:
                    pass
