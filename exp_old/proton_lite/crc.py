"""CRC-32 (zlib's) of large buffers on several cores.

Where the C writer builds (``native_write``), its checksum does it: carry-less folding on
several threads, 10-15 GB/s a core.  Else, here: every raw-file chunk carries the CRC-32 of its
payload, and one core computes it with zlib at about
2 GB/s on the GPU machine (500 µs per MiB, measured 2026-11-25): for launches of thousands
of CTAs the drain thread's checksums, not the copies, set how fast launches can go, and the
reader pays the same at stop.  zlib releases the GIL while it checksums a buffer, so blocks
of ``BLOCK`` bytes are checksummed in parallel threads and the results combined in order:

    crc(P || A) = shift_A(crc(P)) ^ crc(A)

where ``shift_A`` (appending ``len(A)`` zero bytes to the message, in CRC terms) is linear
over GF(2) for a fixed length: a 32x32 bit matrix, built once for ``BLOCK`` by repeated
squaring (as zlib's own ``crc32_combine`` does) and applied through four byte tables.  The
result equals ``zlib.crc32`` of the concatenation bit for bit.
"""
from __future__ import annotations

import os
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

BLOCK = 256 << 10  # bytes per block checksummed by one thread
PARALLEL_MIN = 2 * BLOCK  # smaller buffers: one zlib call is as fast
_POLY = 0xEDB88320
_lock = threading.Lock()
_tables: list[list[int]] | None = None
_pool: ThreadPoolExecutor | None = None


def _times(mat: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _square(mat: list[int]) -> list[int]:
    return [_times(mat, mat[n]) for n in range(32)]


def shift_matrix(nbytes: int) -> list[int]:
    """Columns of the operator that appends ``nbytes`` zero bytes (zlib's crc32_combine)."""
    odd = [_POLY] + [1 << n for n in range(31)]  # one zero bit
    even = _square(odd)  # two
    odd = _square(even)  # four
    result = [1 << n for n in range(32)]  # identity
    while True:
        even = _square(odd)  # first pass: one byte
        if nbytes & 1:
            result = [_times(even, col) for col in result]
        nbytes >>= 1
        if not nbytes:
            return result
        odd = _square(even)
        if nbytes & 1:
            result = [_times(odd, col) for col in result]
        nbytes >>= 1
        if not nbytes:
            return result


def _block_tables() -> list[list[int]]:
    global _tables
    with _lock:
        if _tables is None:
            cols = shift_matrix(BLOCK)
            _tables = [[_times(cols, b << (8 * k)) for b in range(256)] for k in range(4)]
    return _tables


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(2, min(16, os.cpu_count() or 2)),
                                       thread_name_prefix="proton_lite-crc")
    return _pool


def _native():
    """The C checksum (``native_write``: carry-less folding, several threads, no GIL), or None
    where it does not build (no compiler, no ``libz``): zlib's crc32 on a thread pool then."""
    from proton_lite import native_write  # compiled at first use, cached
    return native_write.module()


def crc32(data, value: int = 0) -> int:
    """``zlib.crc32(data, value)``, on several cores when ``data`` is large."""
    view = memoryview(data).cast("B")
    n = len(view)
    native = _native() if n >= 128 else None
    if native is not None:
        return native.crc32(view, value, max(1, min(8, os.cpu_count() or 1)), BLOCK)
    if n < PARALLEL_MIN:
        return zlib.crc32(view, value)
    t0, t1, t2, t3 = _block_tables()
    full = n // BLOCK
    crcs = _workers().map(zlib.crc32, (view[i * BLOCK:(i + 1) * BLOCK] for i in range(full)))
    for c in crcs:
        value = (t0[value & 0xFF] ^ t1[(value >> 8) & 0xFF] ^ t2[(value >> 16) & 0xFF] ^ t3[value >> 24]) ^ c
    return zlib.crc32(view[full * BLOCK:], value)
