"""The order of BEGIN and END events that makes every track nest (Perfetto closes the
innermost open slice; Chrome drops crossing slices), and the sort helpers it is built on."""
from __future__ import annotations

import numpy as np

from proton_lite.trace.tree import _dense_limit


def _pack(keys: list[np.ndarray]) -> np.ndarray | None:
    """Pack non-negative integer keys (major first) into one int64, or None if > 63 bits."""
    shift, packed = 0, None
    for k in reversed(keys):
        k = np.asarray(k, np.int64)
        width = int(k.max()).bit_length() if len(k) else 0
        if len(k) and int(k.min()) < 0:
            return None
        if shift + width > 63:
            return None
        packed = k << shift if packed is None else packed | (k << shift)
        shift += width
    return packed


def _argsort_keys(major: list[np.ndarray], minor=None) -> np.ndarray:
    """Stable order by ``major`` keys then ``minor`` keys (both most significant first).

    The major keys are packed into one int64; with the row index in the low bits the keys
    are unique, so a plain ``np.sort`` (SIMD, ~10x a stable argsort on shuffled input) gives
    the stable order.  ``minor(idx)`` returns the minor keys of rows ``idx`` only: they
    reorder runs of equal major keys, which are rare, so they are computed for those alone,
    and only the runs not already in the minor keys' order are sorted (a trace read back has
    each unit's intervals in time order: sorting them all took 3 of its 20 s); without ``minor`` the stable order by the major keys is the answer (no pass over the
    runs of equal keys: 0.6 s of 1 s for 8 M CTA events whose times tick by 32 ns).
    """
    n = len(major[0]) if major else 0
    packed = _pack(major)
    if packed is None:
        m = minor(np.arange(n)) if minor is not None else []
        return np.lexsort(tuple(reversed(m)) + tuple(reversed(major)))
    pos_bits = max(n.bit_length(), 1)
    top = int(packed.max()).bit_length() if n else 0
    if top + pos_bits <= 63:
        # (unique keys: any sort gives this order; the stable one merges the runs that rows in
        # launch or time order bring: 8 M CTA events 0.16 s against 0.58 s, shuffled keys no slower)
        order = np.sort((packed << pos_bits) | np.arange(n, dtype=np.int64), kind="stable") & ((1 << pos_bits) - 1)
    else:
        order = np.argsort(packed, kind="stable")
    if n < 2 or minor is None:
        return order
    ps = packed[order]
    eq = ps[1:] == ps[:-1]
    if eq.any():
        tie = np.zeros(n, bool)
        tie[1:] |= eq
        tie[:-1] |= eq
        at = np.flatnonzero(tie)
        del tie, eq
        sub, p_at = order[at], ps[at]
        del ps
        m = minor(sub)
        # runs whose rows already come in the minor keys' order (a trace read back: each
        # unit's intervals in time order) are left as they are; only the others are sorted
        same = p_at[1:] == p_at[:-1]
        bad = same & ~_lex_le([k[:-1] for k in m], [k[1:] for k in m])
        if bad.any():
            run = np.cumsum(np.r_[True, ~same])  # each tied row's run, numbered
            sel = np.flatnonzero(np.isin(run, run[1:][bad]))
            order[at[sel]] = sub[sel][np.lexsort(tuple(reversed([k[sel] for k in m])) + (p_at[sel],))]
    return order


def _lex_le(a: list[np.ndarray], b: list[np.ndarray]) -> np.ndarray:
    """Row by row, whether keys ``a`` come before or equal keys ``b`` (most significant first)."""
    le = np.zeros(len(a[0]) if a else 0, bool)
    eq = np.ones(len(le), bool)
    for x, y in zip(a, b):
        le |= eq & (x < y)
        eq &= x == y
    return le | eq


def _event_sequence(track_keys: list[np.ndarray], start: np.ndarray, end: np.ndarray,
                    depth: np.ndarray):
    """Order the BEGIN/END events of intervals so that every track nests properly.

    Per track, by time; at equal time ENDs come first (innermost first), then BEGINs
    (outermost first).  A zero-length interval keeps its END right after its BEGIN (an END
    sorted before it would close its parent instead).  Events are numbered 0..n-1 (the
    BEGINs of intervals 0..n-1) and n..2n-1 (their ENDs); returns (event ids in order,
    time of each event id).
    """
    n = len(start)
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    zero = end <= start
    ts = np.concatenate([start, np.where(zero, start, end)])
    phase = np.concatenate([np.ones(n, np.int64), zero.astype(np.int64)])
    d = np.asarray(depth, np.int64)

    def minor(ev):  # tie-breakers of events ``ev`` (see the docstring)
        i, is_end = ev % max(n, 1), ev >= n
        z = zero[i]
        as_end = is_end & ~z  # a real END: innermost (latest start, deepest, last) first
        return [np.where(as_end, -start[i], -end[i]), np.where(as_end, -d[i], d[i]),
                np.where(as_end, -i, i), (is_end & z).astype(np.int64)]

    major = [np.concatenate([k, k]) for k in track_keys] + [ts, phase]
    return _argsort_keys(major, minor), ts


def _event_order(track_keys: list[np.ndarray], start: np.ndarray, end: np.ndarray,
                 depth: np.ndarray):
    """``_event_sequence`` as (interval index, is_end) per event, in order."""
    n = len(start)
    order, _ = _event_sequence(track_keys, start, end, depth)
    return order % max(n, 1), order >= n


def _nesting(track: np.ndarray, start: np.ndarray, end: np.ndarray, depth: np.ndarray, what):
    """Per-track event sequence (see ``_event_sequence``) and the nesting level at each BEGIN.

    Both formats need the slices of one track to nest: Perfetto's SLICE_END closes the
    innermost open slice, and crossing Chrome ``X`` events are dropped.  An interval nests
    iff the level before its BEGIN equals the level after its END (the first END that does
    not close the innermost open slice leaves that one open).  ``what(i)`` names the track
    of interval ``i`` for the error.  Returns (event ids in order, time of each event id,
    level before each interval's BEGIN).
    """
    n = len(start)
    check_ends(start, end, what)
    order, ts = _event_sequence([track], start, end, depth)
    level = np.empty(2 * n, np.int64)  # level after each event
    level[order] = np.cumsum(np.where(order >= n, -1, 1))
    before_begin = level[:n] - 1
    crossing = before_begin != level[n:]
    if crossing.any():
        raise crossing_error(int(np.flatnonzero(crossing)[0]), start, end, what)
    return order, ts, before_begin


def check_ends(start: np.ndarray, end: np.ndarray, what) -> None:
    """Raise at the first interval that ends before it starts (``what(i)`` names its track)."""
    if np.any(end < start):
        bad = int(np.flatnonzero(end < start)[0])
        raise ValueError(f"{what(bad)}: a slice ends before it starts ({int(start[bad])} > {int(end[bad])} ns)")


def crossing_error(bad: int, start: np.ndarray, end: np.ndarray, what) -> ValueError:
    """The error for interval ``bad``, whose slice crosses another on its track."""
    return ValueError(f"{what(bad)}: scopes overlap without nesting on one track "
                      f"(interval [{int(start[bad])}, {int(end[bad])}] ns); they need distinct lanes")


def _unique(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for non-negative keys below ``size``.

    With a small key space a presence table replaces the sort.
    """
    keys = np.asarray(keys, np.int64)
    if not len(keys) or size > _dense_limit(keys):
        return np.unique(keys, return_inverse=True)
    present = np.zeros(size, bool)
    present[keys] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present), rank[keys]
