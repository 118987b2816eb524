"""The few CUDA driver calls proton_lite needs, through cuda-python (no torch at run time)."""
from __future__ import annotations

import ctypes
import os
from contextlib import contextmanager

import numpy as np

from proton_lite import compat


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError:  # cuda-python < 12.6 spelled it cuda.cuda
        from cuda import cuda as driver  # type: ignore[no-redef]
    return driver


cu = _driver()
_SUCCESS = cu.CUresult.CUDA_SUCCESS
_NOT_READY = cu.CUresult.CUDA_ERROR_NOT_READY
_MEMHOSTALLOC_PORTABLE = 0x01  # cuda.h's CU_MEMHOSTALLOC_PORTABLE
_MEMHOSTALLOC_DEVICEMAP = 0x02  # cuda.h's CU_MEMHOSTALLOC_DEVICEMAP


def check(result, call: str):
    """Unpack a cuda-python result tuple, raising CudaError on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != _SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise CudaError(f"{call} failed: {name.decode() if isinstance(name, bytes) else name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def recording_problem() -> str | None:
    """Why this process cannot record, in a few words, or None: the driver library must load,
    ``cuInit`` succeed and a device be visible (checked at ``start()``, before any file)."""
    try:
        err, *_ = cu.cuInit(0)
    except Exception as e:  # cuda-python could not load libcuda (no NVIDIA driver installed)
        return f"no NVIDIA driver found (libcuda could not be loaded: {type(e).__name__})"
    if err != _SUCCESS:
        _, name = cu.cuGetErrorName(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        return f"the NVIDIA driver found no usable GPU (cuInit: {name})"
    err, count = cu.cuDeviceGetCount()
    if err != _SUCCESS or not count:
        return "the NVIDIA driver sees no GPU (cuDeviceGetCount: 0)"
    return None


def current_context():
    return check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")


def set_context(ctx) -> None:
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def ensure_context(device: int, known=None) -> None:
    """Give this thread a current context where it has none: PyTorch's autograd runs a
    backward's Triton launches on threads of its own, which the CUDA runtime never made
    current for the driver API (cuMemAlloc there fails with CUDA_ERROR_INVALID_CONTEXT).
    ``known``: the context the session uses for ``device``, else its primary context."""
    ctx = current_context()
    if ctx is not None and (not hasattr(ctx, "getPtr") or int(ctx) != 0):
        return
    if known is None:
        known = check(cu.cuDevicePrimaryCtxRetain(cu.CUdevice(device)), "cuDevicePrimaryCtxRetain")
    set_context(known)


def current_device() -> int:
    """The device Triton launches on (its driver's own getter: half the time of cuCtxGetDevice
    through cuda-python on the H100 machine); cuCtxGetDevice where Triton has none."""
    global _device_getter
    if _device_getter is None:
        _device_getter = _triton_device_getter() or current_device_cuda_python
    return _device_getter()


def device_getter():
    """The function ``current_device`` calls, resolved once (one Python call less per launch)."""
    global _device_getter
    if _device_getter is None:
        _device_getter = _triton_device_getter() or current_device_cuda_python
    return _device_getter


def current_device_cuda_python() -> int:
    return int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))


def _triton_device_getter():
    try:
        return compat.triton_driver().active.get_current_device
    except Exception:
        return None


_device_getter = None


def device_name(device: int) -> str:
    raw = check(cu.cuDeviceGetName(256, device), "cuDeviceGetName")
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def device_attribute(device: int, name: str) -> int:
    attr = getattr(cu.CUdevice_attribute, name)
    return int(check(cu.cuDeviceGetAttribute(attr, device), f"cuDeviceGetAttribute({name})"))


def mem_alloc(size: int) -> int:
    return int(check(cu.cuMemAlloc(size), f"cuMemAlloc({size} bytes)"))


@contextmanager
def relaxed_capture():
    """Let this thread allocate memory and load modules while one of its streams captures:
    a capture in the global or thread-local mode refuses such calls (PyTorch's allocator
    relaxes the mode the same way); the previous mode is restored after."""
    relaxed = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    previous = check(cu.cuThreadExchangeStreamCaptureMode(relaxed), "cuThreadExchangeStreamCaptureMode")
    try:
        yield
    finally:
        check(cu.cuThreadExchangeStreamCaptureMode(previous), "cuThreadExchangeStreamCaptureMode")


def mem_alloc_zeroed_while_capturing(size: int, words: tuple = ()) -> int:
    """Zeroed device memory, allocated while a stream of this thread captures a graph, its
    first 32-bit words set to ``words``: the thread's capture mode is relaxed for the
    allocation, and the memory is written on a stream of its own, outside the graph."""
    with relaxed_capture():
        ptr = mem_alloc(size)
        stream = stream_create()
        try:
            memset_d8_async(ptr, 0, size, stream)
            for i, word in enumerate(words):
                memset_d32_async(ptr + 4 * i, word, 1, stream)
            stream_synchronize(stream)
        finally:
            stream_destroy(stream)
    return ptr


def mem_free(ptr: int) -> None:
    check(cu.cuMemFree(ptr), "cuMemFree")


def mem_get_info() -> tuple[int, int]:
    free, total = check(cu.cuMemGetInfo(), "cuMemGetInfo")
    return int(free), int(total)


def host_alloc(size: int) -> int:
    """Pinned host memory for the copies of every GPU the process launches on.  With unified
    addressing (every 64-bit process) the driver treats it as pinned in all contexts anyway;
    PORTABLE says so where that does not hold."""
    return int(check(cu.cuMemHostAlloc(size, _MEMHOSTALLOC_PORTABLE), f"cuMemHostAlloc({size} bytes)"))


def host_alloc_mapped(size: int) -> tuple[int, int]:
    """Pinned host memory that kernels read and write (zero-copy): (host pointer, device
    pointer). Allocated DEVICEMAP, the device pointer asked of the driver, as the CUDA
    documentation requires (with unified addressing the two are equal)."""
    ptr = int(check(cu.cuMemHostAlloc(size, _MEMHOSTALLOC_PORTABLE | _MEMHOSTALLOC_DEVICEMAP),
                    f"cuMemHostAlloc({size} bytes, mapped)"))
    try:
        dev = int(check(cu.cuMemHostGetDevicePointer(ptr, 0), "cuMemHostGetDevicePointer"))
    except CudaError:
        host_free(ptr)
        raise
    return ptr, dev


def host_free(ptr: int) -> None:
    check(cu.cuMemFreeHost(ptr), "cuMemFreeHost")


def host_view(ptr: int, size: int) -> np.ndarray:
    """A numpy uint8 view of pinned host memory (no copy)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(ptr))


def host_memset(ptr: int, value: int, size: int) -> None:
    """Fill pinned host memory (no driver call; ctypes releases the GIL while it runs)."""
    ctypes.memset(ptr, value, size)


def memcpy_dtoh_async(dst_host: int, src_device: int, size: int, stream: int) -> None:
    check(cu.cuMemcpyDtoHAsync(dst_host, src_device, size, cu.CUstream(stream)), "cuMemcpyDtoHAsync")


def memcpy_dtoh(dst: np.ndarray, src_device: int) -> None:
    """Synchronous copy of ``dst.nbytes`` bytes from the device into a numpy array."""
    check(cu.cuMemcpyDtoH(dst.ctypes.data, src_device, dst.nbytes), "cuMemcpyDtoH")


def stream_create() -> int:
    """A non-blocking stream (no implicit order with the legacy default stream)."""
    stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    return int(stream)


def stream_destroy(stream: int) -> None:
    check(cu.cuStreamDestroy(cu.CUstream(stream)), "cuStreamDestroy")


def stream_synchronize(stream: int) -> None:
    check(cu.cuStreamSynchronize(cu.CUstream(stream)), "cuStreamSynchronize")


def memcpy_htod(dst_device: int, src: np.ndarray) -> None:
    check(cu.cuMemcpyHtoD(dst_device, src.ctypes.data, src.nbytes), "cuMemcpyHtoD")


def memset_d32_async(ptr: int, value: int, count: int, stream: int) -> None:
    check(cu.cuMemsetD32Async(ptr, value, count, cu.CUstream(stream)), "cuMemsetD32Async")


def memset_d8_async(ptr: int, value: int, size: int, stream: int) -> None:
    check(cu.cuMemsetD8Async(ptr, value, size, cu.CUstream(stream)), "cuMemsetD8Async")


def event_create():
    """An event the drain waits for: without timing, and waited for by blocking (the thread
    sleeps) instead of spinning a core until the GPU gets there, the context's default while it
    has fewer contexts than cores: our waits are off every launching thread's path, so a few
    µs more to wake cost nothing, and a spinning core is taken from the user's program."""
    flags = int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING) | int(cu.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
    return check(cu.cuEventCreate(flags), "cuEventCreate")


def event_record(event, stream: int) -> None:
    check(cu.cuEventRecord(event, cu.CUstream(stream)), "cuEventRecord")


def stream_wait_event(stream: int, event) -> None:
    """Work enqueued on ``stream`` from now on waits for ``event``'s latest record."""
    check(cu.cuStreamWaitEvent(cu.CUstream(stream), event, 0), "cuStreamWaitEvent")


def event_done(event) -> bool:
    err, = cu.cuEventQuery(event)
    if err == _NOT_READY:
        return False
    check((err,), "cuEventQuery")
    return True


def stream_done(stream: int) -> bool:
    """Whether everything queued on ``stream`` has finished (no wait)."""
    err, = cu.cuStreamQuery(cu.CUstream(stream))
    if err == _NOT_READY:
        return False
    check((err,), "cuStreamQuery")
    return True


def event_synchronize(event) -> None:
    check(cu.cuEventSynchronize(event), "cuEventSynchronize")


def event_destroy(event) -> None:
    check(cu.cuEventDestroy(event), "cuEventDestroy")


_DRAIN_FUNCTIONS = ("cuCtxSetCurrent", "cuEventSynchronize", "cuMemcpyDtoHAsync_v2", "cuMemsetD8Async",
                    "cuStreamSynchronize", "cuThreadExchangeStreamCaptureMode", "cuStreamWaitEvent", "cuEventRecord")


def driver_table() -> tuple[int, ...]:
    """The addresses of the driver functions the C drain calls (``native_drain.open``'s
    order), from the libcuda this process uses; OSError where there is none."""
    lib = ctypes.CDLL("libcuda.so.1")
    return tuple(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value for name in _DRAIN_FUNCTIONS)


def handle(obj) -> int:
    """A driver object (context, event, stream) as the address C code passes to the driver."""
    return int(obj or 0)


def error_name(code: int) -> str:
    try:
        _, name = cu.cuGetErrorName(cu.CUresult(code))
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # not a code this cuda-python knows
        return f"CUDA error {code}"


def _triton_capture_query():
    """Newer Triton (3.9 has it, 3.6 not) ships a C query for stream capture: one C call,
    where cuda-python takes 0.7-1.5 µs on the H100 machines (host_overhead.py --calls)."""
    try:
        return getattr(compat.triton_driver().active.utils, "is_stream_capturing", None)
    except Exception:  # no GPU driver here: cuda-python's path is never reached either
        return None


def _gil_holding_capture_query():
    """cuStreamIsCapturing through ``ctypes.PyDLL``, which keeps the GIL during the call.

    The query returns at once, and not releasing the GIL matters more than the call: every
    release on the launch path is a point where the drain thread can take the GIL and the
    launching thread must wait to get it back.  cuda-python and ``ctypes.CDLL`` release it.
    """
    lib = gil_holding_libcuda()
    if lib is None:
        return None
    fn = lib.cuStreamIsCapturing
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    status = ctypes.c_int()  # shared: no other Python thread runs while the GIL is held
    out = ctypes.addressof(status)

    def query(stream: int) -> bool:
        if fn(stream or None, out) != 0:
            return stream_is_capturing_cuda_python(stream)  # raises with the driver's error name
        return status.value != 0  # CU_STREAM_CAPTURE_STATUS_NONE is 0
    return query


_capture_query = None


def tool_attached() -> str | None:
    """The CUDA tool attached to this process, or None.  Nsight Systems and Nsight Compute
    set ``CUDA_INJECTION64_PATH`` and ``NVTX_INJECTION64_PATH``; compute-sanitizer sets
    ``NVTX_INJECTION64_PATH=libsanitizer-collection.so`` and ``NV_SANITIZER_INJECTION_*``
    (seen under compute-sanitizer 2025.3 on the H200 machine).

    Under such a tool a driver call made while holding the GIL waited forever on another
    thread's driver call (measured: a graph poll holding it and the program's
    ``graph.replay()`` under ``compute-sanitizer --tool memcheck``, H100): the tool's own
    locking, which we cannot see, must need the GIL somewhere (collecting a Python
    backtrace would).  So under a tool every driver call here releases the GIL."""
    for key in ("CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH"):
        injected = os.environ.get(key, "").split(os.pathsep)[0]
        if injected:
            return os.path.basename(injected) or injected
    if any(key.startswith("NV_SANITIZER_") for key in os.environ):
        return "compute-sanitizer"
    for lib in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
        name = os.path.basename(lib).lower()
        if "sanitizer" in name or "injection" in name:
            return os.path.basename(lib)
    return None


def gil_holding_libcuda():
    """libcuda through ``ctypes.PyDLL``, whose calls keep the GIL; None where it cannot be
    loaded (no GPU driver) or a CUDA tool is attached (``tool_attached``: there a call
    holding the GIL can wait forever), and the caller uses cuda-python, which releases it."""
    if tool_attached():
        return None
    try:
        return ctypes.PyDLL("libcuda.so.1")
    except OSError:
        return None


def capture_query():
    """The query ``stream_is_capturing`` calls (truthy while capturing), resolved once.
    Triton's C query keeps the GIL too: under a CUDA tool only cuda-python's is used."""
    global _capture_query
    if _capture_query is None:
        fast = None if tool_attached() else _triton_capture_query() or _gil_holding_capture_query()
        _capture_query = fast or stream_is_capturing_cuda_python
    return _capture_query


def stream_is_capturing(stream: int) -> bool:
    return bool(capture_query()(stream))


def stream_is_capturing_cuda_python(stream: int) -> bool:
    status = check(cu.cuStreamIsCapturing(cu.CUstream(stream)), "cuStreamIsCapturing")
    return status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE
