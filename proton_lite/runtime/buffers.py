"""Pools of device and pinned-host buffers, reused across launches.

Each pool hands out buffers in power-of-two size classes; a buffer comes back once the
copy that reads it (device) or the disk write that drains it (host) is finished.  Device
buffers are what Triton's launcher passes as the kernel's profile-scratch argument.
"""
from __future__ import annotations

import threading

from proton_lite.runtime import cuda_api

MIN_CLASS = 4096


def size_class(size: int) -> int:
    return max(MIN_CLASS, 1 << (max(size, 1) - 1).bit_length())


class DeviceBuffer:
    """What Triton's launcher receives from the profile allocator (it calls ``data_ptr()``)."""

    __slots__ = ("ptr", "capacity", "size", "device")

    def __init__(self, ptr: int, capacity: int, device: int) -> None:
        self.ptr, self.capacity, self.size, self.device = ptr, capacity, 0, device

    def data_ptr(self) -> int:
        return self.ptr


class ProfileBufferOOM(MemoryError):
    """Not enough device memory for a launch's profile buffer."""


class DevicePool:
    def __init__(self) -> None:
        self._free: dict[tuple[int, int], list[DeviceBuffer]] = {}
        self._all: list[DeviceBuffer] = []
        self._lock = threading.Lock()
        self.bytes_allocated = 0

    def take(self, size: int, device: int) -> DeviceBuffer:
        cls = size_class(size)
        with self._lock:
            free = self._free.get((device, cls))
            if free:
                buf = free.pop()
                buf.size = size
                return buf
        try:
            ptr = cuda_api.mem_alloc(cls)
        except cuda_api.CudaError as e:
            free_b, total = cuda_api.mem_get_info()
            raise ProfileBufferOOM(
                f"proton_lite: out of device memory for a profile buffer of {size / 2**20:.1f} MiB "
                f"({free_b / 2**20:.0f} MiB free of {total / 2**20:.0f} MiB; {e}). The kernel was not launched. "
                "Reduce it with fewer scopes, granularity='warpgroup' or 'cta', a smaller capacity/loop_capacity, "
                "or profile fewer kernels (kernels=[...]).") from None
        buf = DeviceBuffer(ptr, cls, device)
        buf.size = size
        with self._lock:
            self._all.append(buf)
            self.bytes_allocated += cls
        return buf

    def give(self, buf: DeviceBuffer) -> None:
        with self._lock:
            self._free.setdefault((buf.device, buf.capacity), []).append(buf)

    def release_all(self) -> None:
        with self._lock:
            for buf in self._all:
                try:
                    cuda_api.mem_free(buf.ptr)
                except cuda_api.CudaError:
                    pass  # context already gone (fault or exit): the driver frees it
            self._all.clear()
            self._free.clear()
            self.bytes_allocated = 0


class HostBuffer:
    __slots__ = ("ptr", "capacity", "size")

    def __init__(self, ptr: int, capacity: int) -> None:
        self.ptr, self.capacity, self.size = ptr, capacity, 0

    def view(self):
        return cuda_api.host_view(self.ptr, self.size)


class PinnedPool:
    """Pinned host memory, bounded: ``take`` waits when ``limit`` bytes are in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free: dict[int, list[HostBuffer]] = {}
        self._all: list[HostBuffer] = []
        self._in_use = 0
        self._cond = threading.Condition()

    def take(self, size: int) -> HostBuffer:
        cls = size_class(size)
        with self._cond:
            while self._in_use and self._in_use + cls > self.limit:
                self._cond.wait(timeout=1.0)
            self._in_use += cls
            free = self._free.get(cls)
            if free:
                buf = free.pop()
                buf.size = size
                return buf
        buf = HostBuffer(cuda_api.host_alloc(cls), cls)
        buf.size = size
        with self._cond:
            self._all.append(buf)
        return buf

    def give(self, buf: HostBuffer) -> None:
        with self._cond:
            self._free.setdefault(buf.capacity, []).append(buf)
            self._in_use -= buf.capacity
            self._cond.notify_all()

    def release_all(self) -> None:
        with self._cond:
            for buf in self._all:
                try:
                    cuda_api.host_free(buf.ptr)
                except cuda_api.CudaError:
                    pass
            self._all.clear()
            self._free.clear()
            self._in_use = 0
