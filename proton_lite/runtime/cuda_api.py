"""The few CUDA driver calls proton_lite needs, through cuda-python (no torch at run time)."""
from __future__ import annotations

import ctypes

import numpy as np


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


def check(result, call: str):
    """Unpack a cuda-python result tuple, raising CudaError on failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != _SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise CudaError(f"{call} failed: {name.decode() if isinstance(name, bytes) else name}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def current_context():
    return check(cu.cuCtxGetCurrent(), "cuCtxGetCurrent")


def set_context(ctx) -> None:
    check(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def _libcuda():
    """The driver library itself, for the two queries made on every launch (see below)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    lib.cuCtxGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]
    lib.cuStreamIsCapturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    return lib


# cuda-python wraps every result in Python enum objects, which costs about a microsecond per
# call; the two queries on the launch path call the driver through ctypes instead
# (tests/benchmarks/host_overhead.py --calls times both).  Everything else uses cuda-python.
_lib = _libcuda()


def current_device() -> int:
    if _lib is not None:
        dev = ctypes.c_int()
        err = _lib.cuCtxGetDevice(ctypes.byref(dev))
        if err == 0:
            return dev.value
    return int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))


def current_device_cuda_python() -> int:
    return int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))


def device_name(device: int) -> str:
    raw = check(cu.cuDeviceGetName(256, device), "cuDeviceGetName")
    return raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)


def device_attribute(device: int, name: str) -> int:
    attr = getattr(cu.CUdevice_attribute, name)
    return int(check(cu.cuDeviceGetAttribute(attr, device), f"cuDeviceGetAttribute({name})"))


def mem_alloc(size: int) -> int:
    return int(check(cu.cuMemAlloc(size), f"cuMemAlloc({size} bytes)"))


def mem_free(ptr: int) -> None:
    check(cu.cuMemFree(ptr), "cuMemFree")


def mem_get_info() -> tuple[int, int]:
    free, total = check(cu.cuMemGetInfo(), "cuMemGetInfo")
    return int(free), int(total)


def host_alloc(size: int) -> int:
    return int(check(cu.cuMemHostAlloc(size, 0), f"cuMemHostAlloc({size} bytes)"))


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


def memcpy_htod(dst_device: int, src: np.ndarray) -> None:
    check(cu.cuMemcpyHtoD(dst_device, src.ctypes.data, src.nbytes), "cuMemcpyHtoD")


def memset_d8_async(ptr: int, value: int, size: int, stream: int) -> None:
    check(cu.cuMemsetD8Async(ptr, value, size, cu.CUstream(stream)), "cuMemsetD8Async")


def stream_create() -> int:
    """A stream that does not synchronize with the legacy default stream (for the drain thread)."""
    stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
    return int(stream)


def stream_synchronize(stream: int) -> None:
    check(cu.cuStreamSynchronize(cu.CUstream(stream)), "cuStreamSynchronize")


def stream_destroy(stream: int) -> None:
    check(cu.cuStreamDestroy(cu.CUstream(stream)), "cuStreamDestroy")


def event_create():
    return check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")


def event_record(event, stream: int) -> None:
    check(cu.cuEventRecord(event, cu.CUstream(stream)), "cuEventRecord")


def event_done(event) -> bool:
    err, = cu.cuEventQuery(event)
    if err == _NOT_READY:
        return False
    check((err,), "cuEventQuery")
    return True


def event_synchronize(event) -> None:
    check(cu.cuEventSynchronize(event), "cuEventSynchronize")


def event_destroy(event) -> None:
    check(cu.cuEventDestroy(event), "cuEventDestroy")


def stream_is_capturing(stream: int) -> bool:
    if _lib is not None:
        status = ctypes.c_int()
        err = _lib.cuStreamIsCapturing(stream or None, ctypes.byref(status))
        if err == 0:
            return status.value != 0  # CU_STREAM_CAPTURE_STATUS_NONE
    return stream_is_capturing_cuda_python(stream)


def stream_is_capturing_cuda_python(stream: int) -> bool:
    status = check(cu.cuStreamIsCapturing(cu.CUstream(stream)), "cuStreamIsCapturing")
    return status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE

