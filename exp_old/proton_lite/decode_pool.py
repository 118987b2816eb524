"""Records of kernels with a launch pool: unit blocks continued in chunks (docs/format.md §1.4).

A unit writes its first records into its unit block, then into chunks it took from the
pool, in any order among units; each chunk's header names its CTA, unit and the unit's
record index held by its first slot (``first``).  The decoder orders each unit's regions by
``first``: a region holds the records from its ``first`` to the next region's (or to the
unit's count), at most its slots.  A chunk that was taken (``index < taken``) but whose
header is not this launch's (wrong tag or epoch, an impossible CTA or unit, a ``first``
that overlaps another region) is *torn*: counted, its records are not read and count as
dropped.  Vectorized: one sort over all regions of a launch.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proton_lite.layout import (CHUNK_HEADER_BYTES, CHUNK_TAG, CTA_HEADER_BYTES, LAUNCH_PREFIX_BYTES, RECORD_BYTES,
                                UNIT_HEADER_BYTES, BufferLayout)
from proton_lite.raw_format import RawFormatError


@dataclass(frozen=True)
class PoolState:
    """What a pool launch's prefix says: chunks in the pool, the launch's epoch, chunks asked for."""

    chunks: int
    epoch: int
    taken: int

    @property
    def used(self) -> int:
        """Chunks handed out (and copied back): the counter counts failed asks too."""
        return min(self.taken, self.chunks)

    @property
    def exhausted(self) -> bool:
        return self.taken > self.chunks


def read_prefix(buffer, where: str, launch_index: int) -> PoolState:
    if len(buffer) < LAUNCH_PREFIX_BYTES:
        raise RawFormatError(f"{where}launch {launch_index}: buffer holds {len(buffer)} bytes, less than its "
                             f"{LAUNCH_PREFIX_BYTES}-byte launch prefix")
    words = np.frombuffer(buffer, "<u4", 4)
    return PoolState(int(words[1]), int(words[2]), int(words[3]))


def chunk_dtype(layout: BufferLayout) -> np.dtype:
    dt = np.dtype([("tag", "<u4"), ("epoch", "<u4"), ("cta", "<u4"), ("first", "<u4"),
                   ("rec", "<u4", (layout.chunk_slots + 1, 2))])
    assert dt.itemsize == layout.chunk_bytes
    return dt


class PoolRegions:
    """Where a pool launch's kept records lie: its regions (unit blocks, then good chunks) in
    (CTA row, unit, first) order, each with its (row, unit) group, first word and records kept;
    ``kept`` per (row, unit) and the ``torn`` chunks.  ``records`` reads any run of groups, so
    that a large launch can be read a slice of CTAs at a time (``decode_slices``)."""

    def __init__(self, group: np.ndarray, word: np.ndarray, kept_region: np.ndarray, kept: np.ndarray, torn: int):
        self.group, self.word, self.kept_region, self.kept, self.torn = group, word, kept_region, kept, torn

    def records(self, buf, lo: int = 0, hi: int | None = None):
        """The kept records of groups ``lo`` to ``hi`` (all by default), in (CTA, unit, age)
        order, as ``decode_records._records`` returns them: (8-byte words, each record's group
        counted from ``lo``, the index of each non-empty group's first record)."""
        a, b = (0, len(self.group)) if hi is None else np.searchsorted(self.group, [lo, hi])
        group, word, kept_region = self.group[a:b] - lo, self.word[a:b], self.kept_region[a:b]
        n = int(kept_region.sum())
        offsets = np.cumsum(kept_region) - kept_region
        words_at = np.repeat(word, kept_region) + (np.arange(n) - np.repeat(offsets, kept_region))
        words = np.frombuffer(buf, dtype="<u8", count=len(buf) // RECORD_BYTES)
        rec_group = np.repeat(group, kept_region)
        k = self.kept.ravel()[lo:hi]
        nonempty = k[k > 0]
        group_first = np.cumsum(nonempty) - nonempty
        return words[words_at], rec_group, group_first


def pool_regions(buf, layout: BufferLayout, pool: PoolState, n_ctas: int, rows_at: np.ndarray,
                 counts: np.ndarray) -> PoolRegions:
    """The regions of every (valid CTA, unit) of one pool launch (``PoolRegions``).  ``buf``:
    the CTA blocks then the used chunks (prefix removed); ``rows_at``: the CTA index of each
    valid row; ``counts``: (rows, units) records tried."""
    m, n_units = counts.shape
    used = pool.used
    pool_off = n_ctas * layout.stride
    chunks = np.frombuffer(buf, dtype=chunk_dtype(layout), count=used, offset=pool_off)
    row_of_cta = np.full(n_ctas, -1, np.int64)
    row_of_cta[rows_at] = np.arange(m)
    unit = (chunks["tag"] & 0xFFFF).astype(np.int64)
    cta = chunks["cta"].astype(np.int64)
    ok = ((chunks["tag"] >> 16) == CHUNK_TAG) & (chunks["epoch"] == np.uint32(pool.epoch)) & \
        (cta < n_ctas) & (unit < n_units)
    row = np.where(ok, row_of_cta[np.minimum(cta, n_ctas - 1)], -1)
    ok &= row >= 0  # a chunk of a CTA that is not decoded (header missing) has no unit to join
    # regions: every unit block (first 0), then the good chunks
    group_block = np.arange(m * n_units, dtype=np.int64)
    word_block = (rows_at.astype(np.int64).repeat(n_units) * (layout.stride // RECORD_BYTES) +
                  CTA_HEADER_BYTES // RECORD_BYTES + np.tile(np.arange(n_units), m) * (layout.unit_bytes // RECORD_BYTES) +
                  UNIT_HEADER_BYTES // RECORD_BYTES)
    good = np.flatnonzero(ok)
    group = np.concatenate([group_block, row[good] * n_units + unit[good]])
    first = np.concatenate([np.zeros(m * n_units, np.int64), chunks["first"][good].astype(np.int64)])
    slots = np.concatenate([np.full(m * n_units, layout.capacity, np.int64),
                            np.full(len(good), layout.chunk_slots, np.int64)])
    word = np.concatenate([word_block, (pool_off + good * layout.chunk_bytes + CHUNK_HEADER_BYTES) // RECORD_BYTES])
    is_chunk = np.concatenate([np.zeros(m * n_units, bool), np.ones(len(good), bool)])
    order = np.lexsort((is_chunk, first, group))  # a unit's block before a chunk that starts at 0
    group, first, slots, word, is_chunk = group[order], first[order], slots[order], word[order], is_chunk[order]
    # a chunk whose first repeats another chunk's or lies past what its unit tried is not that
    # unit's continuation: torn, like a chunk without its header
    same = np.r_[False, group[1:] == group[:-1]]
    repeat = same & (first == np.roll(first, 1)) & np.roll(is_chunk, 1)
    bad = is_chunk & (repeat | (first > counts.ravel()[group]))
    torn = int(used - len(good) + bad.sum())
    keep = ~bad
    group, first, slots, word = group[keep], first[keep], slots[keep], word[keep]
    total = counts.ravel()[group]
    last = np.r_[group[1:] != group[:-1], True]
    end = np.where(last, total, np.roll(first, -1))
    kept_region = np.clip(np.minimum(end - first, slots), 0, None)
    kept = np.bincount(group, kept_region, minlength=m * n_units).astype(np.int64).reshape(m, n_units)
    return PoolRegions(group, word, kept_region, kept, torn)

