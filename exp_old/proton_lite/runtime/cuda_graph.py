"""The driver calls for recording CUDA graph replays (through cuda-python, no torch).

Kept apart from ``cuda_api.py``: only a launch being captured into a graph needs them (and
the hand-written PTX kernels, ``PtxKernel``: the graph copy node and the clock probe).
cuda-python 12 and 13 differ in what ``cuStreamGetCaptureInfo`` returns (13 adds the
edge data); ``capture_info`` reads both.
"""
from __future__ import annotations

import ctypes
import threading

from proton_lite.runtime import cuda_api
from proton_lite.runtime.cuda_api import check, cu

_TYPES = {"u64": ctypes.c_uint64, "u32": ctypes.c_uint32}


def relax_this_thread() -> None:
    """Exempt a background thread of ours (copier, writer, graph poller) from the rule that
    a capture in the global mode by any other thread forbids its driver calls: while the
    user's thread captures a graph, a stream synchronize here would fail and invalidate
    that capture.  Where there is no driver (CPU tests), nothing to do."""
    try:
        cu.cuThreadExchangeStreamCaptureMode(cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED)
    except Exception:
        pass


def capture_info(stream: int) -> tuple[int, object, list]:
    """(capture id, graph being captured into, the stream's current dependencies) of a stream
    that is capturing; right after a kernel launch the dependencies are that kernel's node."""
    values = check(cu.cuStreamGetCaptureInfo(cu.CUstream(stream)), "cuStreamGetCaptureInfo")
    status, capture_id, graph, dependencies = values[0], values[1], values[2], values[3]
    count = int(values[-1])  # the last value is the number of dependencies (12.x and 13.x)
    if status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        raise RuntimeError(f"stream {stream:#x} is not capturing a graph")
    return int(capture_id), graph, list(dependencies or [])[:count]


def load_function(image: bytes, name: str):
    """Load a module (PTX, NUL-terminated, is JIT-compiled for this GPU) into the current
    context and return one of its kernels."""
    module = check(cu.cuModuleLoadData(image), "cuModuleLoadData")
    return check(cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")


class PtxKernel:
    """A hand-written PTX kernel (the graph copy node, the clock probe), loaded into a
    device's context at its first use there (the context must be current) and kept."""

    def __init__(self, ptx: str, name: str) -> None:
        self._image, self._name = ptx.encode() + b"\0", name
        self._functions: dict[int, object] = {}  # device -> CUfunction
        self._lock = threading.Lock()

    def function(self, device: int):
        with self._lock:
            fn = self._functions.get(device)
            if fn is None:
                fn = self._functions[device] = load_function(self._image, self._name)
            return fn


def graph_add_kernel_node(graph, dependencies: list, func, grid_x: int, block_x: int, params: tuple):
    """A kernel node in ``graph`` after ``dependencies``; ``params``: (values, type names)."""
    p = cu.CUDA_KERNEL_NODE_PARAMS()
    p.func = func
    p.gridDimX, p.gridDimY, p.gridDimZ = grid_x, 1, 1
    p.blockDimX, p.blockDimY, p.blockDimZ = block_x, 1, 1
    p.sharedMemBytes = 0
    values, types = params
    p.kernelParams = (tuple(values), tuple(_TYPES[t] for t in types))
    return check(cu.cuGraphAddKernelNode(graph, dependencies, len(dependencies), p), "cuGraphAddKernelNode")


def memcpy_htod_async(dst_device: int, src_host: int, size: int, stream: int) -> None:
    check(cu.cuMemcpyHtoDAsync(dst_device, src_host, size, cu.CUstream(stream)), "cuMemcpyHtoDAsync")


def ctx_synchronize() -> None:
    check(cu.cuCtxSynchronize(), "cuCtxSynchronize")


class PollDriver:
    """The three calls of a graph poll, made without releasing the GIL (``ctypes.PyDLL``).

    The poller wakes once and makes a handful of short driver calls.  Through cuda-python
    each call releases the GIL and must win it back; while the program's own thread runs
    Python (a loop of ``graph.replay()``), that is up to the interpreter's switch interval
    (5 ms) per call, and the rings fill meanwhile.  Held, a poll waits for the GIL once.
    Where libcuda cannot be loaded (CPU tests), or a CUDA tool is attached (a poll holding
    the GIL hung a replay under compute-sanitizer: ``cuda_api.tool_attached``), cuda_api's
    functions are used: they release the GIL."""

    def __init__(self) -> None:
        self._lib = None
        lib = cuda_api.gil_holding_libcuda()
        if lib is None:
            return
        try:
            for name in ("cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2"):
                fn = getattr(lib, name)
                fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
                fn.restype = ctypes.c_int
            lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
            lib.cuStreamSynchronize.restype = ctypes.c_int
            self._lib = lib
        except AttributeError:
            pass

    @staticmethod
    def _check(err: int, call: str) -> None:
        if err != 0:
            check(cu.CUresult(err), call)

    def dtoh_async(self, dst_host: int, src_device: int, size: int, stream: int) -> None:
        if self._lib is None:
            return cuda_api.memcpy_dtoh_async(dst_host, src_device, size, stream)
        self._check(self._lib.cuMemcpyDtoHAsync_v2(dst_host, src_device, size, stream or None), "cuMemcpyDtoHAsync")

    def htod_async(self, dst_device: int, src_host: int, size: int, stream: int) -> None:
        if self._lib is None:
            return memcpy_htod_async(dst_device, src_host, size, stream)
        self._check(self._lib.cuMemcpyHtoDAsync_v2(dst_device, src_host, size, stream or None), "cuMemcpyHtoDAsync")

    def synchronize(self, stream: int) -> None:
        if self._lib is None:
            return cuda_api.stream_synchronize(stream)
        self._check(self._lib.cuStreamSynchronize(stream or None), "cuStreamSynchronize")
