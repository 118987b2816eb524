"""Kernels sized at launch: the slice a launch gets from its own arguments.

A kernel whose loops are bounded by its arguments (Triton passes ``LAUNCH_SIZED_ALIGN``
with its size) gets a slice sized from its record bound evaluated with this launch's
arguments; one with a launch pool gets its pool's plan (docs/design.md §3).  A mixin of
``Collector``: it reads the collector's kernels and counters.
"""
from __future__ import annotations

from proton_lite.bound_expr import BoundError, arguments, evaluate, max_over_programs, reads_grid
from proton_lite.layout import MAX_LAUNCH_CAPACITY
from proton_lite.runtime.launch_info import _launch_arguments

LAUNCH_SIZED_MAX_BYTES = 1 << 30  # a launch sized from its arguments gets at most this much (then drops, counted)


class LaunchSizing:
    """``Collector``'s sizing of launches whose kernel is sized at launch."""

    def _launch_capacity(self, size: int) -> tuple[int, tuple[int, bool, tuple | None]]:
        """Slice bytes and (capacity, short, pool) of a launch whose kernel is sized at launch:
        its record bound evaluated with this launch's arguments, or for a kernel with a pool
        its unit blocks and pool (``pool``: chunks, epoch, bytes before the pool, bytes per
        chunk; else None).
        ``short``: the capacity may be less than the kernel writes (arguments unreadable, or
        the cap hit); records that do not fit are counted as dropped, as for any kernel."""
        found = _launch_arguments()
        if found is None:  # no launch metadata: the kernel gets no record slots (capacity word 0)
            with self._lock:
                self.unsized += 1
            return size, (0, True, None)
        grid, metadata, args = found
        kernel = self._kernel(metadata)  # registered once per compiled kernel; its layout parsed once
        if kernel is None:  # no proton_lite entry in its metadata: nothing to size it from
            with self._lock:
                self.unsized += 1
            return size, (0, True, None)
        layout = kernel[3]
        num_ctas = size // kernel[2]
        if layout.pool:
            entry = int(metadata.proton_lite.get("pool_entry_records") or 0)
            self._drain.collect()  # what earlier launches' pools took (the C drain reports it when collected)
            capacity, chunks, total = self.pool_sizer.plan(kernel[0], layout, num_ctas, entry)
            with self._lock:
                self._pool_epoch += 1
                epoch = self._pool_epoch
            blocks = layout.with_capacity(capacity).buffer_bytes(num_ctas)
            return total, (capacity, False, (chunks, epoch, blocks, layout.chunk_bytes))
        short = False
        try:  # with staging in blocks, each copy adds its own pair of records (layout.COPY_SCOPE)
            need = layout.records_with_copies(max(0, self._records_needed(metadata, args, grid)))
        except (BoundError, KeyError, TypeError):
            need, short = layout.capacity, True  # the compiled fallback
            with self._lock:
                self.unsized += 1
        capacity = min(need, MAX_LAUNCH_CAPACITY)
        per_record = num_ctas * layout.units * 8
        if per_record and layout.with_capacity(capacity).buffer_bytes(num_ctas) > LAUNCH_SIZED_MAX_BYTES:
            capacity = max(0, (LAUNCH_SIZED_MAX_BYTES - layout.with_capacity(0).buffer_bytes(num_ctas)) // per_record)
        if capacity < need:
            short = True
            with self._lock:
                self.capped += 1
        return layout.with_capacity(capacity).buffer_bytes(num_ctas), (capacity, short, None)

    def _records_needed(self, metadata, args, grid) -> int:
        """The kernel's record bound for this launch: its expression over the arguments, the
        largest over the grid's program ids when it reads them (memoized per arguments and
        grid: a persistent kernel relaunched with the same shapes costs a dict lookup)."""
        expr = metadata.proton_lite["records_per_unit_expr"]
        bound = self._bounds.get(id(metadata))
        if bound is None or bound[0] is not expr:
            bound = (expr, tuple(sorted(arguments(expr))), reads_grid(expr), {})
            self._bounds[id(metadata)] = bound
        if not bound[2]:
            return evaluate(expr, args)
        g = tuple(grid) if len(grid) == 3 else (tuple(grid) + (1, 1))[:3]
        key = (g, tuple(args.get(n) for n in bound[1]))
        memo = bound[3]
        need = memo.get(key)
        if need is None:
            need = max_over_programs(expr, args, g)
            if len(memo) >= 1024:  # shapes that keep changing: keep the newest
                memo.clear()
            memo[key] = need
        return need
