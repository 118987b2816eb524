"""Scratch arrays whose memory goes back to the system as soon as they are freed.

Why: a decode's batches run on many threads, and glibc gives each thread an arena whose heap
keeps its high-water mark after the arrays in it are freed: a thread's heap is trimmed from
its top only above the trim threshold, which rises with the mmap threshold as large blocks
are freed (up to 64 MiB, a thread heap's whole size), and ``malloc_trim`` releases free
chunks inside the heaps but not their tops. After a 16-thread decode of 21.3 M records the
process kept +474 MiB that no array referenced (design.md §6, "The stop's memory").

Arrays of at least ``FRESH_BYTES`` are mapped on their own (anonymous, private, zero pages
until written) and unmapped when the last view of them goes, whichever thread made them.
While ``tracemalloc`` traces, each mapping is reported to it in numpy's domain, as numpy
reports the arrays it allocates (the memory tests and a user's snapshots still see them).
"""
from __future__ import annotations

import ctypes
import mmap
import tracemalloc
import weakref

import numpy as np

FRESH_BYTES = 1 << 20  # below this, np.empty (the heap's reuse is worth more than its keep)
_NUMPY_DOMAIN = 389047  # numpy's tracemalloc domain (NPY_TRACE_DOMAIN)
_track = ctypes.pythonapi.PyTraceMalloc_Track
_track.argtypes, _track.restype = [ctypes.c_uint, ctypes.c_size_t, ctypes.c_size_t], ctypes.c_int
_untrack = ctypes.pythonapi.PyTraceMalloc_Untrack
_untrack.argtypes, _untrack.restype = [ctypes.c_uint, ctypes.c_size_t], ctypes.c_int


def empty(n: int, dtype) -> np.ndarray:
    """An uninitialised 1-D array of ``n`` items of ``dtype`` (zeros, when mapped)."""
    dt = np.dtype(dtype)
    size = int(n) * dt.itemsize
    if size < FRESH_BYTES:
        return np.empty(int(n), dt)
    try:
        region = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE) if hasattr(mmap, "MAP_PRIVATE") \
            else mmap.mmap(-1, size)
    except (OSError, ValueError):  # no mapping to be had: the heap's, as before
        return np.empty(int(n), dt)
    out = np.frombuffer(region, dt, count=int(n))  # the array keeps the mapping alive
    if tracemalloc.is_tracing():
        ptr = out.__array_interface__["data"][0]
        if _track(_NUMPY_DOMAIN, ptr, size) == 0:
            weakref.finalize(region, _untrack, _NUMPY_DOMAIN, ptr)
    return out
