"""The sizes and bytes of a CUDA graph ring (docs/format.md §4), apart from who moves them.

A ring per captured launch: ``slots`` slots of ``slot_bytes``, each a 16-byte slot header
and the launch's buffer; a 64-byte node header that the copy node and the host share.  Kept
free of driver calls so that the CPU tests check the host's reading of them directly.
"""
from __future__ import annotations

import numpy as np

from proton_lite.runtime.graph_copy import NODE_HEADER_BYTES, SLOT_HEADER_BYTES

RING_BYTES = 64 << 20  # per captured launch, unless the session sets graph_slots ...
RING_BUDGET_SHARE, RING_BUDGET_MAX = 16, 8 << 30  # ... and while all rings fit this share of free memory
MIN_SLOTS, MAX_SLOTS = 8, 4096
POOL_SLOT_BYTES = RING_BYTES // 16  # a slot of a launch with a pool holds its blocks and chunks up to this

HEADER_DTYPE = np.dtype([("replays", "<u8"), ("written", "<u8"), ("consumed", "<u8"), ("overruns", "<u8"),
                         ("discarded", "<u8"), ("done", "<u4"), ("next_slot", "<i4"), ("closed", "<u4"),
                         ("slots", "<u4"), ("reserved", "<u8")])
assert HEADER_DTYPE.itemsize == NODE_HEADER_BYTES
SLOT_HEADER_DTYPE = np.dtype([("replay", "<u8"), ("published_ns", "<u8")])
assert SLOT_HEADER_DTYPE.itemsize == SLOT_HEADER_BYTES


def ring_slots(slot_bytes: int, slots: int | None = None, budget: int = RING_BYTES) -> int:
    """Slots of a ring: the session's ``graph_slots``, else as many as ``RING_BYTES`` holds
    (or what is left of the session's ring budget, at least ``MIN_SLOTS``)."""
    if slots is not None:
        return slots
    return max(MIN_SLOTS, min(MAX_SLOTS, min(RING_BYTES, budget) // slot_bytes))


def slot_bytes_for(nbytes: int) -> int:
    return -(-(SLOT_HEADER_BYTES + nbytes) // 256) * 256


def new_header(slots: int) -> np.ndarray:
    h = np.zeros(1, HEADER_DTYPE)
    h["slots"] = slots
    h["next_slot"] = 0
    return h


def slot_data_bytes(nbytes: int, pool) -> int:
    """Bytes of a launch a ring slot holds: all, or for a launch with a pool (sized for the
    most its units may take, 256 MiB at first) its blocks and the chunks that fit
    ``POOL_SLOT_BYTES``: a replay whose units took more keeps those, the rest counted dropped."""
    if pool is None:
        return nbytes
    chunks, _, blocks, chunk_bytes = pool
    fit = max(1, (POOL_SLOT_BYTES - blocks) // chunk_bytes)
    return blocks + min(chunks, fit) * chunk_bytes


def launch_bytes(data: np.ndarray, nbytes: int, pool) -> int:
    """Bytes of a replay's slot to keep: all of them, or for a launch with a pool its blocks
    and the chunks its units took (the counter in its prefix, docs/format.md §1.12).  When
    they took more than the slot holds, its prefix is made to say so: the chunks word becomes
    what the slot holds, and the decoder counts the rest as dropped (the pool ran out)."""
    if pool is None:
        return nbytes
    chunks, _, blocks, chunk_bytes = pool
    held = (nbytes - blocks) // chunk_bytes
    taken = int(data[12:16].view("<u4")[0])
    if held < chunks and taken > held:
        data[4:8] = np.array([held], "<u4").view(np.uint8)
    return blocks + min(taken, chunks, held) * chunk_bytes
