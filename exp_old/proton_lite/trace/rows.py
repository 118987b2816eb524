"""CTA slots and occupancy: the track layout that keeps a trace of 10,000 CTAs readable.

Why: one track per CTA gives ~60 rows per SM for a grid of 8,192 CTAs (82,186 tracks for
two launches of a layernorm): the UI slows down, and with the SM groups collapsed nothing
is drawn, so waves and the tail are invisible.  Here CTAs of one SM that never overlap
share a row (a "slot"), so an SM has as many slots as it ever held CTAs at once, and the
SM and launch groups carry the number of resident CTAs over time on their own rows.

A CTA occupies its slot for its *extent*: its lifetime and every interval of its units (a
unit may record a few ns before thread 0 stamps the CTA header), each counted as at least
1 ns, half open.  Extents on one slot are disjoint, so no two slices on a slot or on one
of its unit tracks ever cross, and a reader finds an interval's CTA from its slot and its
start time alone (``cta_by_time``): the last CTA on the slot whose extent starts at or
before it.  Everything is vectorised numpy: a few passes per slot level, none per CTA.
The names of CTAs and unit tracks are here too, so that both writers name them alike.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proton_lite.partition_map import kernel_unit_partitions
from proton_lite.profile_data import KernelInfo, Profile
from proton_lite.trace.interval_runs import key_parts, reduce_runs
from proton_lite.trace.nesting import _argsort_keys, _unique
from proton_lite.trace._proto import Rows
from proton_lite.trace import slots_c

SLOT_NAME = "slot"  # the track of a slot is "slot 2"


@dataclass
class SlotLayout:
    """Where each CTA and interval goes; CTAs in ``_cta_layout`` order (top group, SM, ...).

    ``group``: the (top group, SM) group of each CTA (0-based, in CTA order); ``row``: its slot
    track, numbered over the whole trace in (group, slot) order, whose group and slot are
    ``row_group``/``row_slot`` (``slot``: each CTA's slot in its group, made when asked);
    ``extent_lo``: where the half-open span it occupies begins (its end, used only to pack,
    is not kept: a column per CTA); ``piece_ok``: where a piece of the .pftrace's intervals
    may begin (``piece_starts``; None without intervals); ``runs``: the runs of one CTA's
    intervals, from which both writers take each interval's slot track piece by piece
    (``row`` of its CTA), over ``n_iv`` intervals.
    """
    group: np.ndarray
    group_first: np.ndarray  # index of each group's first CTA
    row: np.ndarray
    row_group: np.ndarray
    row_slot: np.ndarray
    extent_lo: np.ndarray
    runs: tuple  # (first interval of each run of one CTA's intervals, that CTA's rank)
    n_iv: int
    piece_ok: np.ndarray | None = None

    @property
    def slot(self) -> np.ndarray:
        return self.row_slot[self.row]

    @property
    def n_groups(self) -> int:
        return len(self.group_first)

    @property
    def n_rows(self) -> int:
        return len(self.row_group)


def slot_layout(profile: Profile, ctas: np.ndarray, cta_top: np.ndarray, runs: tuple, pmap=map) -> SlotLayout:
    """Pack the CTAs of each (top group, SM) into slots: ``cta_top`` is each CTA's top group
    (its launch, or its GPU: ``plan``), the CTAs sorted by it, then SM; other inputs as
    ``_cta_layout`` returns them (``runs``: its runs of one CTA's intervals)."""
    n = len(ctas)
    new_group = np.ones(n, bool)
    new_group[1:] = (cta_top[1:] != cta_top[:-1]) | (ctas["smid"][1:] != ctas["smid"][:-1])
    group = np.cumsum(new_group, dtype=np.int64)
    group -= 1  # (in place: a column per CTA is 32 MB for 4 M CTAs)
    group_first = np.flatnonzero(new_group)
    del new_group
    lo, hi = cta_extents(ctas, profile.intervals, runs, pmap)
    slot = _pack_slots_in_parts(group, lo, hi, pmap)
    # groups are runs of CTAs: a group's slots are its largest slot + 1
    n_slots = np.maximum.reduceat(slot, group_first).astype(np.int64) + 1 if n else np.zeros(0, np.int64)
    row_base = np.cumsum(n_slots) - n_slots
    row = row_base[group]
    row += slot
    del slot
    piece_ok = _in_group_parts(piece_starts, group, (row, lo, hi), pmap) if len(profile.intervals) else None
    del hi
    row_group = np.repeat(np.arange(len(n_slots)), n_slots)
    row_slot = np.arange(len(row_group)) - row_base[row_group]
    return SlotLayout(group=group, group_first=group_first, row=row, row_group=row_group,
                      row_slot=row_slot, extent_lo=lo, runs=runs, n_iv=len(profile.intervals), piece_ok=piece_ok)


def piece_starts(row: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whether a piece of the .pftrace's intervals (``perfetto_pieces``) may begin at each CTA
    (in the plan's order, ``row`` its slot row, [``lo``, ``hi``) its extent): wherever every
    slot row with CTAs on both sides has those before ending strictly before those after
    begin.

    Why: the pieces are sequences of their own, and the trace processor orders the events of
    different sequences at one timestamp as it likes, so a unit track split between two
    pieces must not have an END in one and a BEGIN in the other at the same ns.  Per row, in
    the plan's order: the latest end so far against the earliest start from the next CTA on;
    a cut between two of the row's CTAs is safe where the first is below the second (CTAs
    that touch, ``hi == lo``, are not).  Rows whose CTAs come in time order (a launch's CTAs
    on an SM, the launches of a stream one after another) allow a cut between any two; a
    kernel on another stream beside them blocks the cuts across the span it overlaps.
    (Before, a piece ended only where no row had CTAs on both sides, so pieces were whole SM
    groups in the sm layout, ~n / 132 intervals each: 16 threads held 2 GB of temporaries for
    an 85 M-record capture.)
    """
    n = len(row)
    if n < 2:
        return np.ones(n, bool)
    order = np.argsort(row, kind="stable")  # each row's CTAs, in the plan's order
    r = row[order]
    same = r[1:] == r[:-1]  # consecutive CTAs of one row: order[k] before order[k + 1]
    seg = np.r_[0, np.cumsum(~same)]  # each CTA's row, numbered 0, 1, ... in this order
    h, lo_s = hi[order], lo[order]
    base = min(int(lo_s.min()), int(h.min()))
    span = max(int(lo_s.max()), int(h.max())) - base + 1
    if (int(seg[-1]) + 1) * span < 1 << 62:  # rows offset apart: one running max / min serves all
        off = seg * span - base
        latest = np.maximum.accumulate(h + off)  # the latest end so far on the row
        earliest = np.minimum.accumulate((lo_s + off)[::-1])[::-1]  # the earliest start from here on
        k = np.flatnonzero(same & (latest[:-1] >= earliest[1:]))
    else:  # (times too far apart to offset): cut only between CTAs in time order on every row
        k = np.flatnonzero(same & (h[:-1] >= lo_s[1:]))
        out_of_order = np.unique(r[k][h[k] > lo_s[k + 1]])
        k = k[~np.isin(r[k], out_of_order)]
        first = order[np.searchsorted(r, out_of_order, "left")]
        last = order[np.searchsorted(r, out_of_order, "right") - 1]
        unsafe = _spans(np.r_[order[k], first], np.r_[order[k + 1], last], n)
        return ~unsafe
    return ~_spans(order[k], order[k + 1], n)


def _spans(p: np.ndarray, q: np.ndarray, n: int) -> np.ndarray:
    """Over n CTAs, those in any (p, q]: where a piece may not begin between row neighbours p and q."""
    return np.cumsum(np.bincount(p + 1, minlength=n + 1) - np.bincount(q + 1, minlength=n + 1))[:n] > 0


PACK_PART = 1 << 16  # CTAs per part of ``pack_slots`` run on a worker


def _pack_slots_in_parts(group: np.ndarray, lo: np.ndarray, hi: np.ndarray, pmap=map) -> np.ndarray:
    """``pack_slots`` over parts of about ``PACK_PART`` CTAs cut between groups (groups are
    packed independently and come in runs), the parts on ``pmap``."""
    return _in_group_parts(pack_slots, group, (group, lo, hi), pmap)


def _in_group_parts(step, group: np.ndarray, columns: tuple, pmap=map) -> np.ndarray:
    """``step(*columns)`` over parts of about ``PACK_PART`` CTAs cut between groups, on
    ``pmap``, joined: for steps that treat each group on its own (slots and rows never span
    two groups)."""
    if len(group) <= PACK_PART:
        return step(*columns)
    return np.concatenate(list(pmap(lambda b: step(*(c[b[0]:b[1]] for c in columns)), key_parts(group, PACK_PART))))


def _occupied_end(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """End of the half-open span a slice occupies: a zero-length one still takes 1 ns, so that
    it cannot touch, and be confused with, a CTA that starts at that very ns."""
    return np.maximum(end, start + 1)


def cta_extents(ctas: np.ndarray, intervals: np.ndarray, runs: tuple, pmap=map) -> tuple[np.ndarray, np.ndarray]:
    """Half-open [lo, hi) of each CTA: its lifetime and all of its units' intervals, by
    ``runs`` (first interval of each run of one CTA's intervals, that CTA) (without
    intervals ``lo`` is the start column itself: no copy of a column per CTA)."""
    start = np.asarray(ctas["start_ns"], np.int64)
    lo = start.copy() if len(intervals) else start
    hi = _occupied_end(start, np.asarray(ctas["end_ns"], np.int64))
    if len(intervals):  # per run of one CTA's intervals first (they usually come so), then per CTA
        first, owner = runs
        # straight from the int64 fields, in chunks on ``pmap``: no copy of a column;
        # max(max(end, start + 1)) over a run is max(max(end), max(start) + 1)
        i_start, i_end = intervals["start_ns"], intervals["end_ns"]
        np.minimum.at(lo, owner, reduce_runs(np.minimum, i_start, first, pmap))
        np.maximum.at(hi, owner, np.maximum(reduce_runs(np.maximum, i_end, first, pmap),
                                            reduce_runs(np.maximum, i_start, first, pmap) + 1))
    return lo, hi


def pack_slots(group: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Slot of each CTA: greedy interval partitioning within each group (``pack_slots_numpy``),
    by one sweep in C where the extension is built and the groups come in runs."""
    slot = slots_c.pack_slots(group, lo, hi)
    return slot if slot is not None else pack_slots_numpy(group, lo, hi)


def pack_slots_numpy(group: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Slot of each CTA: greedy interval partitioning within each group.

    CTAs in order of (group, lo, hi, index) each take the lowest-numbered slot whose last
    CTA ended at or before their start; that uses as many slots as CTAs overlap at most.
    Computed slot by slot instead of CTA by CTA: slot 0 of a group holds exactly the chain
    "its first CTA, then the next one that starts at or after the previous one's end" (any
    CTA in between finds slot 0 busy), slot 1 the same chain among the CTAs left, and so
    on.  Each chain is found for all groups at once by pointer doubling, so the cost is
    O(n log n) per slot level, and levels = the most CTAs one SM held at once.
    """
    n = len(group)
    slot = np.full(n, -1, np.int64)
    if not n:
        return slot
    group = np.asarray(group, np.int64)
    order = np.lexsort((np.arange(n), hi, lo, group))
    g = group[order]
    # times as ranks (order and ties kept) so that (group, time) packs into one int64
    times, inv = np.unique(np.concatenate([lo[order], hi[order]]), return_inverse=True)
    width = len(times) + 1
    key_lo = g * width + inv[:n]
    key_hi = g * width + inv[n:]
    left = np.arange(n)  # positions (in ``order``) not yet given a slot, ascending
    level = 0
    while len(left):
        m = len(left)
        keys = key_lo[left]
        nxt = np.searchsorted(keys, key_hi[left])  # first CTA left that starts at/after the end
        gl = g[left]
        nxt = np.where((nxt < m) & (gl[np.minimum(nxt, m - 1)] == gl), nxt, m)  # m: none in the group
        jump = np.append(nxt, m)
        on = np.zeros(m + 1, bool)
        on[np.flatnonzero(np.r_[True, gl[1:] != gl[:-1]])] = True  # each group's first CTA left
        count = int(on.sum())
        while True:  # on = {jump^d(first) : d < 2^k}; stops once the chains reach the end
            on[jump[on]] = True
            now = int(on.sum())
            if now == count:
                break
            count = now
            jump = jump[jump]
        taken = on[:m]
        slot[order[left[taken]]] = level
        left = left[~taken]
        level += 1
    return slot


def resident_changes(key: np.ndarray, t: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the number of resident CTAs per ``key`` (an SM group, a launch) changes.

    Events: a CTA start (``delta`` +1) or end (-1) at time ``t``, in any order.  Returns
    (the event that carries each change, the count after it): one event per (key, time)
    where the count after all of that time's events differs from the one before (a CTA
    that ends in the ns another starts changes nothing), sorted by key, then time.  Every
    key's events sum to 0, so one running sum serves all keys.
    """
    n = len(key)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    t = np.asarray(t, np.int64)
    # events already in time order (the CTA sequence's): (key, position) is (key, t) order, and
    # packs into few bits (ns since the epoch do not: a stable sort of every event, ~10x slower)
    minor = np.arange(n, dtype=np.int64) if (t[1:] >= t[:-1]).all() else t
    order = _argsort_keys([np.asarray(key, np.int64), minor])
    k, tt = key[order], t[order]
    value = np.cumsum(delta[order])
    last = np.r_[(k[1:] != k[:-1]) | (tt[1:] != tt[:-1]), True]  # the count after all events at (key, t)
    ev, k, value = order[last], k[last], value[last]
    before = np.r_[0, value[:-1]]
    before[np.r_[True, k[1:] != k[:-1]]] = 0
    changed = value != before
    return ev[changed], value[changed]


def resident_marks(key: np.ndarray, t: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``resident_changes`` as two columns over the events: (whether the event carries a
    change, the count after it); one pass in C for time-ordered events where it is built."""
    marks = slots_c.resident_marks(key, t, delta)
    if marks is not None:
        return marks
    ev, value = resident_changes(key, t, delta)
    has, v = np.zeros(len(key), bool), np.zeros(len(key), np.int64)
    has[ev] = True
    v[ev] = value
    return has, v


def cta_by_time(cta_row: np.ndarray, cta_lo: np.ndarray, iv_row: np.ndarray, iv_start: np.ndarray) -> np.ndarray:
    """Index of each interval's CTA: the last CTA on the interval's slot whose extent starts at
    or before the interval's start (extents on a slot are disjoint and hold their
    intervals).  -1 where the slot has no CTA that early."""
    if not len(iv_row):
        return np.zeros(0, np.int64)
    if not len(cta_row):
        return np.full(len(iv_row), -1, np.int64)
    cta_lo, iv_start = np.asarray(cta_lo, np.int64), np.asarray(iv_start, np.int64)
    low = min(int(cta_lo.min()), int(iv_start.min()))
    width = max(int(cta_lo.max()), int(iv_start.max())) - low + 1
    top = max(int(np.max(cta_row)), int(np.max(iv_row))) + 1
    if top * width < 1 << 62:  # (slot, time) packed as they are: no sort of every time first
        cta_t, iv_t = cta_lo - low, iv_start - low
    else:  # times as their ranks among all of them
        times, inv = np.unique(np.concatenate([cta_lo, iv_start]), return_inverse=True)
        width = len(times) + 1
        cta_t, iv_t = inv[:len(cta_lo)], inv[len(cta_lo):]
    key = np.asarray(cta_row, np.int64) * width + cta_t
    by_key = np.argsort(key, kind="stable")
    pos = np.searchsorted(key[by_key], np.asarray(iv_row, np.int64) * width + iv_t, side="right") - 1
    found = by_key[np.maximum(pos, 0)]
    ok = (pos >= 0) & (cta_row[found] == iv_row)
    return np.where(ok, found, -1)


# ---- names and unit tracks, shared by both writers -------------------------------------------

def unit_tracks_of(iv_row, unit, lane, units: int, lanes: int, n_rows: int):
    """The (slot row, unit, lane) tracks that hold some intervals (each interval's slot row,
    unit and lane): (track row, unit, lane, each interval's track index), tracks sorted by
    (row, unit, lane); ``units``/``lanes``: bounds over the whole profile."""
    unit = np.asarray(unit).astype(np.int64)
    lane = np.asarray(lane).astype(np.int64)
    iv_row = np.asarray(iv_row, np.int64)
    if not len(iv_row):
        z = np.zeros(0, np.int64)
        return z, z, z, z
    if n_rows * units * lanes < 1 << 62:
        keys, inv = _unique((iv_row * units + unit) * lanes + lane, n_rows * units * lanes)
        return keys // (units * lanes), (keys // lanes) % units, keys % lanes, inv
    keys, inv = np.unique((iv_row << 32) | (unit << 16) | lane, return_inverse=True)
    return keys >> 32, (keys >> 16) & 0xFFFF, keys & 0xFFFF, inv


def unit_names(kernels: list[KernelInfo], track_kernel: np.ndarray, unit: np.ndarray, lane: np.ndarray):
    """(names, index of each track's name): ``warp 3``, ``warpgroup 1 lane 1``, ``cta``; in a
    warp-specialized kernel also the partition the unit's warps ran, ``warp 5 · partition 0
    (TMA loads)`` (passes/partitions.py)."""
    # kernel -1 (CTAs of kernels that name their units differently share the slot): ``unit 3``
    gran = np.array([{"warp": 0, "warpgroup": 1, "cta": 2}[k.granularity] for k in kernels] + [3], np.int64)
    parts = [kernel_unit_partitions(k) for k in kernels]
    own = np.array([i + 1 if p else 0 for i, p in enumerate(parts)] + [0], np.int64)  # named per kernel
    track_kernel = np.where(np.asarray(track_kernel) < 0, len(kernels), track_kernel)
    keys, idx = np.unique((own[track_kernel] << 40) | (gran[track_kernel] << 32) | (unit << 16) | lane,
                          return_inverse=True)
    names = []
    for k in keys.tolist():
        kid, g, u, ln = (k >> 40) - 1, (k >> 32) & 0xFF, (k >> 16) & 0xFFFF, k & 0xFFFF
        name = ("warp {}", "warpgroup {}", "cta", "unit {}")[g].format(u) + (f" lane {ln}" if ln else "")
        if kid >= 0:
            labels, of_unit = parts[kid]
            j = int(of_unit[u]) if u < len(of_unit) else -1
            name += f" · {labels[j]}" if j >= 0 else ""
        names.append(name.encode())
    return names, idx


def cta_name(r: Rows, cid, gx, gy, multi, present=None) -> None:
    """``CTA 37``, or ``CTA 37 (5,1,0)`` in a 2-D / 3-D grid (only in rows ``present``)."""
    m = multi if present is None else multi & present
    r.const(b"CTA ", present)
    r.decimal(cid, present)
    if not np.any(m):  # a 1-D grid: no columns for the coordinates at all
        return
    r.const(b" (", m)
    r.decimal(cid % gx, m)
    r.const(b",", m)
    r.decimal((cid // gx) % gy, m)
    r.const(b",", m)
    r.decimal(cid // (gx * gy), m)
    r.const(b")", m)


def grid_of_launches(launches: np.ndarray):
    """(grid x, grid y, whether the grid is 2-D/3-D) of each launch, for ``cta_name``."""
    grid = np.maximum(np.stack([launches["grid_x"], launches["grid_y"], launches["grid_z"]], 1).astype(np.int64), 1)
    return grid[:, 0], grid[:, 1], grid[:, 1] * grid[:, 2] > 1

