"""The CTA sequence's events (each CTA's BEGIN and END on its slot track) in time order, with
the resident-CTA counts they carry, made part by part of time, each part when it is encoded.

Why in parts: the sequence is one time-ordered stream (its timestamps are deltas), and a
capture of kernels without scopes is little else: 4 M CTA lifetimes are 8 M events whose
sort and counts took 2.9 s on one thread of the 16-core GPU host (2026-11-28).  Events are
cut into parts by time (bounds from a sample of the times), each sorted on its own thread:
parts hold disjoint time ranges, so laid end to end they are the whole sort, and a (key,
time)'s events never straddle two parts.

Why each part only when asked for: made all at once, the sorted events and their counts took
~50 bytes an event, 430 MB for those 4 M CTAs, more than the rest of the trace writer and
three times the capture (issue 22 bounds the stop's memory by about twice the raw size).
Here only the events' part order stays (4 bytes an event) with a few numbers per part: the
time of the event before it (timestamps are deltas) and, per key whose count a part's events
carry, the count before the part, summed from the parts before it.  ``CtaParts.part(j)`` then
makes part j's events on whichever thread encodes them; at PART_EVENTS a part, the parts in
flight at once take a few MB each.  Without the C extension: one part (numpy's counts start
from 0 only).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from proton_lite.trace import cta_parts_c, slots_c
from proton_lite.trace.nesting import _argsort_keys
from proton_lite.trace.rows import resident_marks

# events per part of time, about: each writer thread holds a part's temporaries (~500 bytes an
# event where the part is made in numpy, less in C: ``cta_events_c.part_packets``); H200 host, 4.19 M
# CTA lifetimes, 16 threads, parts in C: 2^15 9.7x the raw size at the stop's peak, 2^14 9.0x,
# 2^13 8.3x, for a write of 1.83-2.02 / 1.78-1.91 / 1.94-2.13 s (in numpy 2^13 cost 0.8 s more)
PART_EVENTS = 1 << 14
MAX_PARTS = (1 << 16) - 1  # part ids are 16-bit
SAMPLE = 1 << 19  # times sampled for the parts' bounds, at most
CUT_CHUNK = 1 << 18  # events per chunk of the part cut (each chunk ~8 MB of temporaries on its thread)


def planned_parts(n_ctas: int, part_events: int | None = None) -> int:
    """How many parts ``CtaParts`` cuts the events of ``n_ctas`` CTAs into (some may be
    empty): known before the CTAs are sorted, so that the writer can queue a task per part."""
    if slots_c._module() is None:
        return 1
    return max(1, min(MAX_PARTS, -(-2 * n_ctas // (part_events or PART_EVENTS))))


@dataclass
class CtaSequence:
    """Events ``e`` of one part in time order (at equal times: ends, begins, then the end of
    a zero-length slice; then by track, then CTA order): ``begin[e]`` (else an END),
    ``cta[e]`` the CTA, ``track[e]``, ``t[e]``, and per key column given, (whether ``e``
    carries a change of its key's resident count, the count after it); ``prev_t``: the time
    of the event before the part's first (0 before the first part)."""
    begin: np.ndarray
    cta: np.ndarray
    track: np.ndarray
    t: np.ndarray
    marks: list
    prev_t: int = 0


class CtaParts:
    """The CTAs' events cut into ``n_parts`` parts of time; ``part(j)`` makes part j's.

    CTA ``i`` starts at ``start[i] + shift`` and ends at ``end[i] + shift`` (ns) on track
    ``track_ids[track[i]]`` (``track[i]`` itself without ``track_ids``); ``keys``: per key
    column, each CTA's key (an SM group, a top group; any integer type), whose resident counts
    the events carry; ``part_events``: events per part (``PART_EVENTS``).  Columns are kept as
    given (no per-CTA copy: narrow types stay narrow) and widened part by part."""

    def __init__(self, start: np.ndarray, end: np.ndarray, track: np.ndarray, keys: list[np.ndarray],
                 workers: int = 1, part_events: int | None = None, shift: int = 0,
                 track_ids: np.ndarray | None = None):
        n = self.n = len(start)
        self.start, self.end = np.asarray(start, np.int64), np.asarray(end, np.int64)
        self.shift = int(shift)  # added where the times are read, so that the columns are not copied
        self.track = np.asarray(track)
        self.track_ids = None if track_ids is None else np.asarray(track_ids, np.int64)
        self.keys = [np.asarray(k) for k in keys]
        self.n_keys = [int(k.max()) + 1 if n else 0 for k in self.keys]
        self.n_parts = parts = planned_parts(n, part_events)
        # event e < n is CTA e's BEGIN, e >= n CTA e - n's END
        self.by_part, self.bounds = None, np.array([0] + [2 * n] * parts)
        self.prev_t = np.zeros(parts, np.int64)
        self.inits: list | None = None  # per part, per key column: (keys present, their counts before)
        if parts == 1:
            return
        with ThreadPoolExecutor(max(1, min(workers, parts))) as pool:
            part = self._part_ids(pool, parts)
            got = cta_parts_c.part_cut(part, parts, self.start, self.end, self.shift, self.keys, self.n_keys)
            if got is not None:  # in one C call without the GIL
                self.by_part, self.bounds, self.prev_t, self.inits = got
                return
            self._cut(pool, parts, part)
            self._carry(list(pool.map(self._part_sums, range(parts))))

    def _part_ids(self, pool, parts: int) -> np.ndarray:
        """Each event's part (16-bit), by time, the bounds from a sample of the times."""
        n, start, end = self.n, self.start, self.end
        step = max(1, n // min(parts * 32, SAMPLE))
        sample = np.sort(np.r_[start[::step], end[::step]])
        edges = np.unique(sample[(np.arange(1, parts) * len(sample)) // parts])  # <= parts - 1 bounds
        part = np.empty(2 * n, np.uint16)

        def bucket(lo: int):
            hi = min(lo + CUT_CHUNK, n)
            part[lo:hi] = np.searchsorted(edges, start[lo:hi], side="right")
            part[n + lo:n + hi] = np.searchsorted(edges, end[lo:hi], side="right")
        list(pool.map(bucket, range(0, n, CUT_CHUNK)))
        return part

    def _cut(self, pool, parts: int, part: np.ndarray) -> None:
        """The events in part order (``part``: each event's part), in numpy."""
        n = self.n
        # a counting sort by part, stable (each part's events stay in index order), in chunks of
        # events on the pool, each writing its events' places straight into the narrow result
        # (one argsort of all 2n events made 8 bytes an event first, and a bincount widened
        # the ids to 8 bytes: 24 bytes an event, 0.8 GB for 16 M CTAs)
        chunks = range(0, 2 * n, CUT_CHUNK)
        counts = np.array(list(pool.map(lambda lo: np.bincount(part[lo:lo + CUT_CHUNK], minlength=parts), chunks)))
        self.bounds = np.r_[0, np.cumsum(counts.sum(0))]
        cursor = self.bounds[:-1] + np.cumsum(counts, axis=0) - counts  # each chunk's first place in each part
        self.by_part = by_part = np.empty(2 * n, np.int32 if 2 * n < 2**31 else np.int64)

        def place(k: int):
            lo = chunks[k]
            p = part[lo:lo + CUT_CHUNK]
            o = np.argsort(p, kind="stable")  # a radix sort of 16-bit ids
            sp = p[o]
            before = np.cumsum(counts[k]) - counts[k]  # this chunk's events of lower parts
            by_part[cursor[k][sp] + (np.arange(len(sp)) - before[sp])] = o + lo
        list(pool.map(place, range(len(chunks))))

    def _events(self, j: int):
        """(is BEGIN, CTA) of part j's events, in index order."""
        lo, hi = int(self.bounds[j]), int(self.bounds[j + 1])
        idx = self.by_part[lo:hi].astype(np.int64) if self.by_part is not None else np.arange(lo, hi)
        is_begin = idx < self.n
        return is_begin, np.where(is_begin, idx, idx - self.n)

    def _part_sums(self, j: int):
        """Part j's latest time and, per key column, the keys its events touch and each one's
        count change over the part."""
        is_begin, c = self._events(j)
        t_max = int(np.where(is_begin, self.start[c], self.end[c]).max()) + self.shift if len(c) else None
        d = np.where(is_begin, 1, -1)
        out = []
        for k, nk in zip(self.keys, self.n_keys):
            kc = k[c]
            present = np.flatnonzero(np.bincount(kc, minlength=nk))
            change = np.bincount(kc, weights=d, minlength=nk).astype(np.int64)
            out.append((present, change[present]))
        return t_max, out

    def _carry(self, sums: list) -> None:
        """Each part's previous time and its keys' counts before it, in one sweep over the parts."""
        running = [np.zeros(nk, np.int64) for nk in self.n_keys]
        last, inits = 0, []
        for j, (t_max, per_key) in enumerate(sums):
            self.prev_t[j] = last
            last = last if t_max is None else t_max  # parts hold disjoint, increasing time ranges
            inits.append([(present, run[present]) for run, (present, _) in zip(running, per_key)])
            for run, (present, change) in zip(running, per_key):
                run[present] += change
        self.inits = inits

    def part(self, j: int) -> CtaSequence:
        """Part j's events in time order, with their counts."""
        is_begin, c = self._events(j)
        t = np.where(is_begin, self.start[c], self.end[c]) + self.shift
        phase = np.where(is_begin, 1, np.where(self.end[c] <= self.start[c], 2, 0))
        o = _argsort_keys([t, phase, self._track(c)])  # ties: in CTA order
        begin, cta, tt = is_begin[o], c[o], t[o]
        delta = np.where(begin, 1, -1)
        init = self.counts_before(j) if self.inits is not None else [None] * len(self.keys)
        marks = [_marks(k[cta].astype(np.int64), tt, delta, i0) for k, i0 in zip(self.keys, init)]
        return CtaSequence(begin, cta, self._track(cta), tt, marks, int(self.prev_t[j]))

    def counts_before(self, j: int) -> list:
        """Per key column, every key's resident count before part j (parts cut: ``inits``)."""
        out = []
        for (present, before), nk in zip(self.inits[j], self.n_keys):
            init = np.zeros(nk, np.int64)
            init[present] = before
            out.append(init)
        return out

    def _track(self, c: np.ndarray) -> np.ndarray:
        """The tracks of CTAs ``c``, as int64."""
        tr = self.track[c]
        return self.track_ids[tr] if self.track_ids is not None else tr.astype(np.int64)


def _marks(key: np.ndarray, t: np.ndarray, delta: np.ndarray, init: np.ndarray | None):
    marks = slots_c.resident_marks(key, t, delta, init)  # without the C: one part, ``init`` None
    return marks if marks is not None else resident_marks(key, t, delta)
