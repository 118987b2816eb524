"""The profile's CTAs in a trace plan's order, a column at a time, without a sorted copy.

Why: the writers place CTAs in the layout's order (``tree._cta_layout``).  A sorted copy of
the CTA array is 64 bytes a CTA, 256 MB for a capture of 4 M CTA lifetimes, held for the
whole write, where each step reads a few of its columns (issue 22 bounds the stop's memory
by about twice the capture's size; the capture holds 32 bytes a CTA).  Here a column is
gathered when a step asks for it (``view["cta"]``, ~10 ms for 4 M CTAs) and freed by that
step (the four that most steps read, times, SM and CTA id, are kept); the rows a task needs by
``take``; a lazy ``column`` for what is read piece by piece (``meta._pack_columns``).  Where
the order is the profile's own (the launch layout of a decoded capture), columns are views of
the profile's array and nothing is gathered.  The order itself is int32 (4 bytes a CTA).
"""
from __future__ import annotations

import numpy as np

from proton_lite.trace.interval_runs import take_parts


KEPT = ("start_ns", "end_ns", "smid", "cta")  # read by most steps: gathered once, on the plan's threads
GATHER_ROWS = 1 << 16  # rows per part of that gather


class CtaView:
    """``source`` (a CTA_DTYPE array) in the order ``order``; the KEPT columns gathered at once
    on ``pmap`` (24 bytes a CTA), the rest when asked."""

    def __init__(self, source: np.ndarray, order: np.ndarray, pmap=map, gathered: dict | None = None):
        """``gathered``: the KEPT columns in ``order`` where the caller has them (``order`` then
        is not the source's own: ``cta_order_c``)."""
        self.source = source
        self.dtype = source.dtype
        identity = gathered is None and len(order) == len(source) and \
            bool(np.array_equal(order, np.arange(len(order))))
        self.order = None if identity else np.asarray(order, np.int32 if len(order) < 2**31 else np.int64)
        self._n = len(order)
        kept = [name for name in KEPT if name in source.dtype.names]
        if gathered is not None:
            self._kept = {name: gathered[name] for name in kept}
        else:
            self._kept = self._gather_rows(kept, pmap) if self.order is not None else \
                {name: source[name] for name in kept}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, name: str) -> np.ndarray:
        """Column ``name`` in the view's order (a view of the profile's where the order is its own)."""
        kept = self._kept.get(name)
        return kept if kept is not None else self._gather(name, map)  # on the calling thread (a worker's)

    def _gather_rows(self, names: list, pmap) -> dict:
        """Columns ``names`` in the view's order, gathered in one pass over the rows (a 64-byte
        row read once, not once per column: 3-4 times fewer cache misses), in parts of
        GATHER_ROWS on ``pmap`` (enough parts for every thread; each a few MB)."""
        out = {name: np.empty(self._n, self.dtype[name]) for name in names}

        def part(lo: int):
            rows = self.take_rows(names, slice(lo, lo + GATHER_ROWS))
            for name in names:
                out[name][lo:lo + GATHER_ROWS] = rows[name]
        for _ in pmap(part, range(0, self._n, GATHER_ROWS)):
            pass
        return out

    def _gather(self, name: str, pmap) -> np.ndarray:
        col = self.source[name]
        return col if self.order is None else take_parts(col, self.order, pmap)

    def take(self, name: str, idx) -> np.ndarray:
        """Column ``name`` at view positions ``idx`` (an index array or a slice)."""
        kept = self._kept.get(name)
        if kept is not None:
            return kept[idx]
        return self.source[name][idx if self.order is None else self.order[idx]]

    def take_rows(self, names, idx) -> dict:
        """Columns ``names`` at view positions ``idx``, their rows read once for all of them
        (one 64-byte row a CTA, not one cache line a column)."""
        rows = self.source[idx] if self.order is None else np.take(self.source, self.order[idx])
        return {name: rows[name] for name in names}

    def column(self, name: str) -> "LazyColumn":
        return LazyColumn(self, name)


class LazyColumn:
    """One column of a ``CtaView`` that gathers only the rows sliced from it."""

    def __init__(self, view: CtaView, name: str):
        self.view, self.name = view, name
        self.dtype = view.dtype[name]

    def __len__(self) -> int:
        return len(self.view)

    def __getitem__(self, rows: slice) -> np.ndarray:
        return self.view.take(self.name, rows)
