"""Where a kernel's records are staged in shared memory: slots per unit (the capacity and two
sink slots), the bytes that takes, and where the staging area starts after Triton's own."""
from __future__ import annotations

from proton_lite.layout import RECORD_BYTES, BufferLayout
from proton_lite.passes.ptx_scan import STAGING_ALIGN


def staged_slots(layout: BufferLayout) -> int:
    """Record slots per unit in shared memory: the capacity, then two sink slots (records past
    the capacity, a tight loop's pair stored at the sink, the keep-alive accumulator), rounded
    up to keep every unit's slots 16-byte aligned (ptxas merges two adjacent records into one
    16-byte store)."""
    return (layout.capacity + 3) & ~1


def shared_bytes(layout: BufferLayout) -> int:
    return layout.units * staged_slots(layout) * RECORD_BYTES


def staging_offset(triton_shared: int) -> int:
    """Where the staging area starts in the dynamic shared memory: after Triton's own bytes.

    Appending to the dynamic region (and raising the kernel's ``shared`` size) leaves every
    address Triton uses unchanged; a static ``.shared`` array would instead move the dynamic
    region and break the 1024-byte alignment that swizzled wgmma/TMA tiles rely on.
    """
    return -(-max(triton_shared, 0) // STAGING_ALIGN) * STAGING_ALIGN
