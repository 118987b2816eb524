"""The CTA sequence's events (each CTA's BEGIN and END on its slot track) in time order, with
the resident-CTA counts they carry, computed in parts of time on several threads.

Why: the sequence is one time-ordered stream (its timestamps are deltas), and a capture of
kernels without scopes is little else: 4 M CTA lifetimes are 8 M events whose sort and
counts took 2.9 s on one thread of the 16-core GPU host (2026-11-28), the longest task of
the stop.  Events are cut into parts by time (bounds from a sample of the times), each part
sorted on its own thread: parts hold disjoint time ranges, so laid end to end they are the
whole sort.  A key's resident count continues across parts from the sums of the parts
before it, and a (key, time)'s events never straddle two parts, so each part's counts are
those of the whole (``slots_c.resident_marks``).  Without the C extension: one part.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from proton_lite.trace import slots_c
from proton_lite.trace.nesting import _argsort_keys
from proton_lite.trace.rows import resident_marks

PART_EVENTS = 1 << 19  # events per part of time, about
MAX_PARTS = 64


@dataclass
class CtaSequence:
    """Events ``e`` in time order (at equal times: ends, begins, then the end of a
    zero-length slice; then by track, then CTA order): ``begin[e]`` (else an END),
    ``cta[e]`` the CTA, ``track[e]``, ``t[e]``, and per key column given, (whether ``e``
    carries a change of its key's resident count, the count after it)."""
    begin: np.ndarray
    cta: np.ndarray
    track: np.ndarray
    t: np.ndarray
    marks: list


def cta_sequence(start: np.ndarray, end: np.ndarray, track: np.ndarray, keys: list[np.ndarray],
                 workers: int = 1, part_events: int | None = None) -> CtaSequence:
    """The CTAs' events: CTA ``i`` starts at ``start[i]`` and ends at ``end[i]`` (ns) on
    ``track[i]``; ``keys``: per key column, each CTA's key (an SM group, a top group), whose
    resident counts the events carry; ``part_events``: events per part (``PART_EVENTS``)."""
    n = len(start)
    part_events = part_events or PART_EVENTS
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    track = np.asarray(track, np.int64)
    keys = [np.asarray(k, np.int64) for k in keys]
    n_keys = [int(k.max()) + 1 if n else 0 for k in keys]
    parts = min(MAX_PARTS, -(-2 * n // part_events)) if slots_c._module() is not None else 1
    # event e < n is CTA e's BEGIN, e >= n CTA e - n's END; their columns are made per part only
    out = CtaSequence(np.empty(2 * n, bool), np.empty(2 * n, np.int64), np.empty(2 * n, np.int64),
                      np.empty(2 * n, np.int64), [(np.empty(2 * n, bool), np.empty(2 * n, np.int64)) for _ in keys])
    with ThreadPoolExecutor(max(1, min(workers, parts))) as pool:
        if parts > 1:
            step = max(1, n // (parts * 32))
            sample = np.sort(np.r_[start[::step], end[::step]])
            edges = np.unique(sample[(np.arange(1, parts) * len(sample)) // parts])
            parts = len(edges) + 1
            part = np.empty(2 * n, np.uint16)

            def bucket(lo: int):
                hi = min(lo + part_events, n)
                part[lo:hi] = np.searchsorted(edges, start[lo:hi], side="right")
                part[n + lo:n + hi] = np.searchsorted(edges, end[lo:hi], side="right")
            list(pool.map(bucket, range(0, n, part_events)))
            by_part = np.argsort(part, kind="stable")  # a radix sort; each part's events stay in index order
            bounds = np.r_[0, np.cumsum(np.bincount(part, minlength=parts))]
        else:
            by_part, bounds = np.arange(2 * n), np.array([0, 2 * n])

        def sums(j: int) -> list[np.ndarray]:  # each key's count change over part j
            ev = by_part[bounds[j]:bounds[j + 1]]
            cta, d = ev % max(n, 1), np.where(ev < n, 1, -1)
            return [np.bincount(k[cta], weights=d, minlength=nk).astype(np.int64) for k, nk in zip(keys, n_keys)]

        def fill(j: int, init: list[np.ndarray]) -> None:
            lo, hi = int(bounds[j]), int(bounds[j + 1])
            idx = by_part[lo:hi]
            is_begin, c = idx < n, idx % max(n, 1)
            t = np.where(is_begin, start[c], end[c])
            phase = np.where(is_begin, 1, np.where(end[c] <= start[c], 2, 0))
            o = _argsort_keys([t, phase, track[c]], lambda i: [])  # ties: in CTA order
            begin, cta, tt = is_begin[o], c[o], t[o]
            out.begin[lo:hi], out.cta[lo:hi], out.track[lo:hi], out.t[lo:hi] = begin, cta, track[cta], tt
            delta = np.where(begin, 1, -1)
            for (has, value), k, k0 in zip(out.marks, keys, init):
                has[lo:hi], value[lo:hi] = _marks(k[cta], tt, delta, k0)

        per_part = list(pool.map(sums, range(parts))) if parts > 1 else [[np.zeros(nk, np.int64) for nk in n_keys]]
        init = [np.cumsum([np.zeros(nk, np.int64)] + [s[i] for s in per_part[:-1]], axis=0)
                for i, nk in enumerate(n_keys)]
        list(pool.map(lambda j: fill(j, [c[j] for c in init]), range(parts)))
    return out


def _marks(key: np.ndarray, t: np.ndarray, delta: np.ndarray, init: np.ndarray):
    marks = slots_c.resident_marks(key, t, delta, init)  # without the C: one part, ``init`` all 0
    return marks if marks is not None else resident_marks(key, t, delta)
