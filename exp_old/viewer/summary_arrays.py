"""The passes the summary makes over every CTA and interval of a profile, each one array
pass or one sort: at 21 M intervals and 4 M CTAs the summary took 4-6 s, most of it sorts of
every row by several keys and copies of every row (2026-11-29, CPU host)."""
from __future__ import annotations

import numpy as np

from proton_lite.trace.nesting import _argsort_keys, _pack, _unique


def rows_of_launches(launch_ids: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``rows`` (CTAs or intervals) of the launches ``launch_ids`` (sorted) and each one's
    position in them; the rows themselves, not a copy, where every row is of one of them (a
    copy of 21 M intervals is ~0.9 GB)."""
    if not len(rows) or not len(launch_ids):
        return rows[:0], np.zeros(0, np.int64)
    pos = np.minimum(np.searchsorted(launch_ids, rows["launch"]), len(launch_ids) - 1)
    ours = launch_ids[pos] == rows["launch"]
    if ours.all():
        return rows, pos
    return rows[ours], pos[ours]


def dense_unique(pair: np.ndarray, *parts: np.ndarray):
    """``np.unique(pair, return_inverse=True)`` for keys made of a few small non-negative
    columns (``parts``, most significant first): packed into one key (``nesting._pack``) and
    counted in a presence table where they span few values (``nesting._unique``), instead of a
    sort of every key (2 s for 21 M intervals)."""
    packed = _pack(list(parts))
    if packed is None:
        return np.unique(pair, return_inverse=True)
    present, inverse = _unique(packed, 1 << max(int(packed.max()).bit_length(), 1))
    keys = np.zeros(len(present), pair.dtype)  # the packed keys keep the pairs' order
    keys[inverse] = pair
    return keys, inverse


def group_time_order(g: np.ndarray, t: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``np.lexsort((delta, t, g))`` for delta in {-1, +1}: the three packed into one sort
    where they fit 63 bits (``nesting._argsort_keys``; three keys took 2.2 s for 4 M CTAs' 8 M
    events)."""
    if not len(g):
        return np.zeros(0, np.int64)
    return _argsort_keys([g - g.min(), t - t.min(), (delta > 0).astype(np.int64)])


def sweep(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """Sweep [start, end) intervals per group.

    Returns (group ids, max overlap per group, union length per group), groups sorted.
    """
    ends = np.maximum(ends, starts)
    n = len(starts)
    events = _sorted_events(groups, starts, ends)
    if events is not None:
        g, t, delta = events
    else:
        g = np.concatenate([groups, groups]).astype(np.int64)
        t = np.concatenate([starts, ends]).astype(np.int64)
        delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
        order = group_time_order(g, t, delta)  # by group, then time, ends (-1) before starts (+1)
        g, t, delta = g[order], t[order], delta[order]
    alive = np.cumsum(delta)  # each group nets to zero, so the sum restarts at every group
    # (g sorted: each group's first event, without np.unique's sort of it again)
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else np.zeros(0, np.int64)
    gid = g[first]
    max_alive = np.maximum.reduceat(alive, first)
    step = np.zeros(len(t), dtype=np.int64)
    step[:-1] = np.where((alive[:-1] > 0) & (g[1:] == g[:-1]), t[1:] - t[:-1], 0)
    busy = np.add.reduceat(step, first)
    return gid, max_alive, busy


def _sorted_events(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray):
    """The sweep's events (group, time, +1 for a start or -1 for an end) in (group, time, ends
    first) order, sorted as values packed in one int64 (group, time, start bit) and unpacked:
    no order to gather three columns by (events alike in all three may come in any order, so no
    position bits either).  None where they do not fit 63 bits."""
    if not len(starts):
        return None
    g0, t0 = int(groups.min()), min(int(starts.min()), int(ends.min()))
    t_bits = (int(ends.max()) - t0).bit_length()  # (ends >= starts here)
    g_bits = (int(groups.max()) - g0).bit_length()
    if g_bits + t_bits + 1 > 63:
        return None
    g = np.asarray(groups, np.int64) - g0
    g <<= t_bits + 1
    keys = np.concatenate([g | ((np.asarray(starts, np.int64) - t0) << 1) | 1,
                           g | ((np.asarray(ends, np.int64) - t0) << 1)])
    del g
    keys.sort(kind="stable")  # (merges the runs that rows in launch order bring)
    delta = (keys & 1) * 2 - 1
    t = (keys >> 1) & ((1 << t_bits) - 1)
    t += t0
    keys >>= t_bits + 1
    keys += g0
    return keys, t, delta
