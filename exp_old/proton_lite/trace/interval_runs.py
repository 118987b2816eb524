"""Runs of one CTA's intervals, found, expanded and reduced in chunks on the writer's threads.

Why: a profile's intervals come in runs of one CTA (the decoder and the reader write them
so), and both writers need each interval's CTA and each CTA's extent: passes over every
interval (tens of millions in a large capture) that ran on one thread before the writer's
workers had anything to do (0.7-0.9 s of a 2.8 s write of 21 M records on the 16-core GPU
host, 2026-11-26).  Cut into chunks of ``PART`` intervals they run on every core: numpy's
comparisons, ``repeat`` and ``reduceat`` release the GIL.  ``pmap(f, items)`` is the map that
runs them (a thread pool's ``map``, or the builtin one: the results never depend on it).
"""
from __future__ import annotations

import numpy as np

PART = 1 << 20  # intervals per chunk: a few ms of work each


def _chunks(n: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + PART, n)) for lo in range(0, n, PART)]


def run_starts(launch: np.ndarray, cta: np.ndarray, pmap=map) -> np.ndarray:
    """Index (int64) of the first interval of each run of equal (launch, CTA) ids."""
    n = len(launch)
    if not n:
        return np.zeros(0, np.int64)

    def part(bounds):
        lo, hi = bounds
        a = max(lo - 1, 0)  # each interval is compared with its predecessor, across chunk borders
        la, ca = launch[a:hi], cta[a:hi]
        return (np.flatnonzero((la[1:] != la[:-1]) | (ca[1:] != ca[:-1])) + (a + 1)).astype(np.int64)
    return np.concatenate([np.zeros(1, np.int64), *pmap(part, _chunks(n))])


def key_parts(keys: np.ndarray, size: int) -> list[tuple[int, int]]:
    """[lo, hi) parts of about ``size`` rows of non-decreasing ``keys``, each cut where a key
    begins (rows of one key stay in one part)."""
    n = len(keys)
    cuts = np.unique(np.r_[0, np.searchsorted(keys, keys[np.arange(size, n, size)]), n])
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def _run_chunks(first: np.ndarray, n: int) -> list[tuple[int, int]]:
    """Runs ``[r0, r1)`` of about ``PART`` intervals each (whole runs)."""
    cuts = np.unique(np.r_[np.searchsorted(first, np.arange(0, n, PART), side="left"), len(first)])
    return list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))


def repeat_runs(values: np.ndarray, first: np.ndarray, n: int, pmap=map) -> np.ndarray:
    """``values[i]`` for every interval of run ``i``: ``np.repeat(values, run lengths)``."""
    out = np.empty(n, values.dtype)
    end = np.r_[first[1:], n].astype(np.int64) if len(first) else first

    def part(bounds):
        r0, r1 = bounds
        lo, hi = int(first[r0]), int(end[r1 - 1])
        out[lo:hi] = np.repeat(values[r0:r1], end[r0:r1] - first[r0:r1])
    for _ in pmap(part, _run_chunks(first, n)):
        pass
    return out


def reduce_runs(ufunc, column: np.ndarray, first: np.ndarray, pmap=map) -> np.ndarray:
    """``ufunc.reduceat(column, first)``: one value per run (runs are never empty)."""
    n = len(column)

    def part(bounds):
        r0, r1 = bounds
        lo = int(first[r0])
        hi = int(first[r1]) if r1 < len(first) else n
        return ufunc.reduceat(column[lo:hi], first[r0:r1] - lo)
    parts = list(pmap(part, _run_chunks(first, n)))
    return np.concatenate(parts) if parts else np.zeros(0, column.dtype)


def take_parts(a: np.ndarray, index: np.ndarray, pmap=map) -> np.ndarray:
    """``a[index]`` gathered in parts of ``PART`` rows on ``pmap`` (``np.take``: ~10x faster than
    fancy indexing for structured rows)."""
    out = np.empty(len(index), a.dtype)

    def part(bounds):
        lo, hi = bounds
        np.take(a, index[lo:hi], out=out[lo:hi])
    for _ in pmap(part, _chunks(len(index))):
        pass
    return out
