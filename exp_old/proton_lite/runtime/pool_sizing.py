"""How big a launch's pool is (kernels whose loop bounds are known only at run time).

A launch of such a kernel gets, after its CTA blocks, a pool of chunks that its units take
while they run (passes/pool.py, docs/format.md §1.4).  Nothing on the host knows how many
it will take, so the size is a guess that improves:

* the first launch of a kernel gets a buffer of ``FIRST_POOL_BYTES`` (256 MiB, unit blocks
  and pool together: about 33 M records in chunks of 255), at most a quarter of the device
  memory that is free;
* every later launch gets what the busiest earlier launch of the kernel asked for per CTA,
  times its CTAs, plus half again and a chunk per unit (partly filled chunks), at least
  ``MIN_POOL_BYTES``; a launch whose pool ran out counts double (its real demand is not
  known, only that it was more);
* ``pool_mb=`` in ``proton_lite.start`` fixes the size instead.

The pool is then rounded up to fill the device buffer's size class (a power of two), so
the memory the pool allocator hands out anyway is used.  Only the chunks taken are copied
back.  The unit blocks hold ``capacity`` records each (the launch's capacity word): the
compiled ``loop_capacity``, less for grids so large that the blocks would pass
``BLOCKS_BYTES``, never less than what the kernel writes before its first check.
"""
from __future__ import annotations

import threading

from proton_lite.layout import BufferLayout
from proton_lite.runtime import cuda_api
from proton_lite.runtime.buffers import size_class

FIRST_POOL_BYTES = 256 << 20
FIRST_POOL_BYTES_EXACT = 16 << 20  # PROTON_LITE_EXACT_BUFFERS: every launch allocates, nothing is reused
MIN_POOL_BYTES = 4 << 20
MAX_POOL_BYTES = 4 << 30
BLOCKS_BYTES = 64 << 20  # unit blocks of one launch: capacity is lowered for larger grids


class PoolSizer:
    """Pool sizes per kernel, learned from the chunks earlier launches asked for."""

    def __init__(self, pool_mb: int | None = None, exact: bool = False) -> None:
        self.pool_mb = pool_mb
        self.first_bytes = FIRST_POOL_BYTES_EXACT if exact else FIRST_POOL_BYTES
        self._asked_per_cta: dict[int, float] = {}  # kernel id -> most chunks asked for per CTA
        self._lock = threading.Lock()  # the drain thread reports, launching threads size

    def plan(self, kernel_id: int, layout: BufferLayout, num_ctas: int, entry_records: int) -> tuple[int, int, int]:
        """(unit block capacity, chunks, total bytes) for a launch of ``num_ctas`` CTAs."""
        units = num_ctas * layout.units
        capacity = layout.capacity
        if units and layout.with_capacity(capacity).buffer_bytes(num_ctas) > BLOCKS_BYTES:
            per_unit = (BLOCKS_BYTES // units - layout.with_capacity(0).unit_bytes) // 8
            capacity = max(entry_records, min(capacity, per_unit))
        blocks = layout.with_capacity(capacity).buffer_bytes(num_ctas)
        want = self._pool_bytes(kernel_id, layout, num_ctas)
        if self.pool_mb is None:  # the whole buffer, blocks included, fills the allocator's size class
            want = min(want, max(MIN_POOL_BYTES, self._free_quarter()))
            total = size_class(max(blocks + MIN_POOL_BYTES, want))
        else:
            total = blocks + want
        chunks = max(0, (total - blocks) // layout.chunk_bytes)
        return capacity, chunks, blocks + chunks * layout.chunk_bytes

    def _pool_bytes(self, kernel_id: int, layout: BufferLayout, num_ctas: int) -> int:
        if self.pool_mb is not None:
            return self.pool_mb << 20
        with self._lock:
            per_cta = self._asked_per_cta.get(kernel_id)
        if per_cta is None:
            return self.first_bytes
        chunks = int(per_cta * num_ctas * 1.5) + num_ctas * layout.units
        return min(MAX_POOL_BYTES, max(MIN_POOL_BYTES, chunks * layout.chunk_bytes))

    @staticmethod
    def _free_quarter() -> int:
        try:
            free, _ = cuda_api.mem_get_info()
        except cuda_api.CudaError:
            return MAX_POOL_BYTES
        return free // 4

    def observed(self, kernel_id: int, taken: int, chunks: int, num_ctas: int) -> None:
        """A launch's units asked for ``taken`` chunks of its ``chunks`` (from the drain thread)."""
        if num_ctas <= 0:
            return
        per_cta = taken / num_ctas * (2 if taken > chunks else 1)
        with self._lock:
            self._asked_per_cta[kernel_id] = max(per_cta, self._asked_per_cta.get(kernel_id, 0.0))
