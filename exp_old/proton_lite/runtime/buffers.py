"""Pools of device and pinned-host buffers, reused across launches.

Each pool hands out buffers in power-of-two size classes; a buffer comes back once the
copy that reads it (device) or the disk write that drains it (host) is finished.  A device
buffer is a *chunk* that the collector hands out in slices, one per launch, as the
kernels' profile-scratch argument (see collector.py).

Allocation is what costs on the launch path (``cuMemHostAlloc`` of 8 MiB takes
milliseconds), so a class grows in *slabs*: each growth allocates, in one driver call, as
many buffers as the class already has (1, 1, 2, 4, ... up to ``SLAB_MAX_BYTES`` a slab).
A burst of launches that outruns the GPU therefore allocates O(log n) times, and once a
pool has grown to what a session keeps in flight, launches allocate nothing.

Both pools hand out zeroed buffers.  Device: a new buffer is cleared at its first take, on
the stream of the launch that takes it (a slab's buffers may serve different streams, and
a clear on one stream is not ordered before a kernel on another); a used chunk is cleared
after its copy, and given back once that clear is done;
so a CTA or unit that never writes its header reads as missing, not as an older launch's
data.  Pinned: a new slab is cleared, and ``give`` clears what a copy wrote; so after a
kernel fault a buffer whose copy never ran reads as empty (``Drain._salvage``).
"""
from __future__ import annotations

import threading
from typing import Callable

from proton_lite.runtime import cuda_api

MIN_CLASS = 4096
SLAB_MAX_BYTES = 64 << 20  # a growth step allocates at most this much (or one buffer, if larger)


def size_class(size: int) -> int:
    return max(MIN_CLASS, 1 << (max(size, 1) - 1).bit_length())


class DeviceBuffer:
    """A pooled device buffer (the collector's chunk; launches get slices of it)."""

    __slots__ = ("ptr", "capacity", "device", "fresh")

    def __init__(self, ptr: int, capacity: int, device: int) -> None:
        self.ptr, self.capacity, self.device = ptr, capacity, device
        self.fresh = True  # never cleared: cleared at its first take, on the taking launch's stream


class HostBuffer:
    __slots__ = ("ptr", "capacity", "size")

    def __init__(self, ptr: int, capacity: int) -> None:
        self.ptr, self.capacity, self.size = ptr, capacity, 0

    def view(self):
        return cuda_api.host_view(self.ptr, self.size)


class ProfileBufferOOM(MemoryError):
    """Not enough device memory for a launch's profile buffer."""


class _SlabPool:
    """Free lists per (key, size class), grown in slabs; frees every slab at ``release_all``."""

    def __init__(self, alloc: Callable[[int], int], free: Callable[[int], None]) -> None:
        self._alloc, self._free_slab = alloc, free
        self._free: dict[tuple, list] = {}
        self._count: dict[tuple, int] = {}  # buffers ever made per class
        self._slabs: list[tuple[tuple, int]] = []  # (key, base): a device slab's key starts with its device
        self.bytes_allocated = 0

    def _pop(self, key: tuple):
        free = self._free.get(key)
        return free.pop() if free else None

    def _grow(self, key: tuple, cls: int, make, limit_bytes: int | None = None):
        """Allocate a slab for class ``cls``, keep all but one of its buffers in the free list;
        returns (that buffer, slab pointer, slab bytes)."""
        n = max(1, min(self._count.get(key, 0), SLAB_MAX_BYTES // cls))
        if limit_bytes is not None:
            n = max(1, min(n, limit_bytes // cls))
        while True:
            try:
                base = self._alloc(n * cls)
                break
            except cuda_api.CudaError:
                if n == 1:
                    raise
                n = 1  # a smaller step may still fit
        self._slabs.append((key, base))
        self._count[key] = self._count.get(key, 0) + n
        self.bytes_allocated += n * cls
        for i in range(1, n):
            self._put(key, make(base + i * cls))
        return make(base), base, n * cls

    def _put(self, key: tuple, buf) -> None:
        self._free.setdefault(key, []).append(buf)

    def _release(self, enter: Callable[[tuple], None] | None = None) -> None:
        """Free every slab; ``enter(key)`` first, when given (a device slab is freed in its context)."""
        for key, base in self._slabs:
            try:
                if enter is not None:
                    enter(key)
                self._free_slab(base)
            except cuda_api.CudaError:
                pass  # context already gone (fault or exit): the driver frees it
        self._slabs.clear()
        self._free.clear()
        self._count.clear()
        self.bytes_allocated = 0


class DevicePool(_SlabPool):
    """Device buffers in size classes.  ``exact``: every buffer is its own allocation of exactly
    the size asked for and is never reused, so ``compute-sanitizer`` sees a write one byte past
    a launch's buffer as out of bounds (set by PROTON_LITE_EXACT_BUFFERS=1; for checking only)."""

    def __init__(self, exact: bool = False) -> None:
        super().__init__(cuda_api.mem_alloc, cuda_api.mem_free)
        self._lock = threading.Lock()
        self.exact = exact

    def take(self, size: int, device: int, stream: int) -> DeviceBuffer:
        """A zeroed buffer of at least ``size`` bytes, usable on ``stream`` right away."""
        cls = max(size, 1) if self.exact else size_class(size)
        key = (device, cls)
        with self._lock:
            buf = None if self.exact else self._pop(key)
            if buf is None:
                try:
                    buf, _, _ = self._grow(key, cls, lambda ptr: DeviceBuffer(ptr, cls, device),
                                                   limit_bytes=cls if self.exact else None)
                except cuda_api.CudaError as e:
                    if "OUT_OF_MEMORY" not in str(e):
                        raise  # e.g. the context is gone after a kernel fault: say that, not OOM
                    free_b, total = cuda_api.mem_get_info()
                    raise ProfileBufferOOM(
                        f"proton_lite: out of device memory for a profile buffer of {size / 2**20:.1f} MiB "
                        f"({free_b / 2**20:.0f} MiB free of {total / 2**20:.0f} MiB; {e}). The kernel was not "
                        "launched. Reduce it with fewer scopes, granularity='warpgroup' or 'cta', a smaller "
                        "capacity/loop_capacity, or profile fewer kernels (kernels=[...]).") from None
            if buf.fresh:  # ordered before the launch on this stream (a slab's other buffers may go to
                buf.fresh = False  # other streams: each is cleared on the stream that first uses it)
                cuda_api.memset_d8_async(buf.ptr, 0, buf.capacity, stream)
        return buf

    def reserve(self, size: int, count: int, device: int) -> None:
        """Make ``count`` buffers of ``size``'s class on ``device`` in one slab now (each is
        cleared at its first take), unless the class has buffers already: a loop's first chunk
        switches then take them instead of growing the pool one driver call at a time."""
        if self.exact:
            return
        cls = size_class(size)
        key = (device, cls)
        with self._lock:
            if self._count.get(key):
                return
            base = self._alloc(count * cls)
            self._slabs.append((key, base))
            self._count[key] = count
            self.bytes_allocated += count * cls
            for i in range(count):
                self._put(key, DeviceBuffer(base + i * cls, cls, device))

    def give(self, buf: DeviceBuffer) -> None:
        """Return a buffer that is zero again (the collector clears a chunk after its copy)."""
        if self.exact:
            return  # freed at release_all
        with self._lock:
            self._put((buf.device, buf.capacity), buf)

    def release_all(self, use_device: Callable[[int], None] | None = None) -> None:
        """Free every slab, each after ``use_device(its device)`` (makes that context current)."""
        with self._lock:
            self._release(None if use_device is None else lambda key: use_device(key[0]))


class PinnedPool(_SlabPool):
    """Pinned host memory, bounded: ``take`` waits when ``limit`` bytes are in flight."""

    def __init__(self, limit: int) -> None:
        super().__init__(cuda_api.host_alloc, cuda_api.host_free)
        self.limit = limit
        self._in_use = 0
        self._cond = threading.Condition()

    def reserve(self, size: int, count: int) -> None:
        """Allocate ``count`` buffers of ``size``'s class in one slab now.  Pinning host memory
        takes the driver's lock for milliseconds (30 ms for 64 MiB on the H100 machine), and
        while it does, launches on other threads wait: so the copier's working set is made
        before the first launch instead of while launches run."""
        cls = size_class(size)
        count = max(1, min(count, self.limit // cls))
        with self._cond:
            have = len(self._free.get((cls, ), ()))
            if have >= count:
                return
            base = self._alloc(count * cls)
            cuda_api.host_memset(base, 0, count * cls)
            self._slabs.append(((cls, ), base))
            self._count[(cls, )] = self._count.get((cls, ), 0) + count
            self.bytes_allocated += count * cls
            for i in range(count):
                self._put((cls, ), HostBuffer(base + i * cls, cls))

    def take(self, size: int, wait: bool = True, at_least: int = 0) -> HostBuffer:
        """A zeroed buffer of at least ``size`` bytes (of the class of ``at_least`` when larger:
        copies of chunks use their chunk's class, so that the reserved buffers serve them);
        waits while ``limit`` bytes are in flight, unless ``wait`` is False (the drain's writer,
        which alone gives buffers back, must never wait for itself: it may pass the limit for as
        long as it holds the buffer)."""
        cls = size_class(max(size, at_least))
        key = (cls, )
        with self._cond:
            while wait and self._in_use and self._in_use + cls > self.limit:
                self._cond.wait(timeout=1.0)
            buf = self._pop_fit(cls)
            if buf is None:  # on failure nothing is counted in flight, so later takes do not wait for it
                buf, base, nbytes = self._grow(key, cls, lambda ptr: HostBuffer(ptr, cls),
                                               limit_bytes=max(cls, self.limit - self._in_use))
                cuda_api.host_memset(base, 0, nbytes)  # zero before any copy (module docstring)
            self._in_use += buf.capacity
        buf.size = size
        return buf

    def _pop_fit(self, cls: int) -> HostBuffer | None:
        """A free buffer of class ``cls``, else of the smallest larger class that has one."""
        buf = self._pop((cls, ))
        if buf is None:
            larger = sorted(k[0] for k, free in self._free.items() if free and k[0] > cls)
            if larger:
                buf = self._pop((larger[0], ))
        return buf

    def try_take(self, size: int) -> HostBuffer | None:
        """A free zeroed buffer within ``limit``, else None at once: the launching thread neither
        waits for the disk nor pins memory (``reserve`` says why); the drain copies such a chunk."""
        cls = size_class(size)
        with self._cond:
            if self._in_use and self._in_use + cls > self.limit:
                return None
            buf = self._pop_fit(cls)
            if buf is None:
                return None
            self._in_use += buf.capacity
        buf.size = size
        return buf

    def take_within(self, size: int, at_least: int = 0) -> HostBuffer | None:
        """``take`` that never waits: None while ``limit`` bytes are in flight (a launching
        thread sealing a chunk for the C drain leaves the chunk waiting for a buffer instead)."""
        cls = size_class(max(size, at_least))
        with self._cond:
            if self._in_use and self._in_use + cls > self.limit:
                return None
        return self.take(size, wait=False, at_least=at_least)

    def wait_for_give(self, timeout: float) -> None:
        """Wait until a buffer is given back, or ``timeout`` seconds."""
        with self._cond:
            self._cond.wait(timeout)

    def give(self, buf: HostBuffer, zeroed: bool = False) -> None:
        """Take a buffer back, zeroing the ``size`` bytes it was taken for (unless ``zeroed``:
        the C drain zeroes them without the GIL)."""
        if not zeroed:
            buf.view()[:] = 0  # holds the GIL: no hand-over to the launching thread mid-way
        with self._cond:
            self._put((buf.capacity, ), buf)
            self._in_use -= buf.capacity
            self._cond.notify_all()

    def release_all(self) -> None:
        with self._cond:
            self._release()
            self._in_use = 0
