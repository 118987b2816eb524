"""The profile buffer's layout: one place that the pass (writer) and the decoder (reader) share.

Per launch the buffer holds one *CTA block* per CTA, in linear CTA order
(``x + nx * (y + ny * z)``), each ``stride`` bytes::

    CTA header (32 bytes)
      0  u32  magic            0x314C5043 ("CPL1") once the CTA has started
      4  u32  smid             %smid of the SM that ran the CTA
      8  u64  start_globaltimer  %globaltimer (ns) at CTA start, thread 0
     16  u64  start_clock        %clock64 (SM cycles) at CTA start, thread 0
     24  u32  layout_version   LAYOUT_VERSION
     28  u32  units            recording units in this CTA
    then one *unit block* per recording unit (warp, warp group or CTA), each
    ``UNIT_HEADER_BYTES + (capacity + sink_slots) * 8`` bytes:
      0  u32  count            records the unit tried to write (count > capacity: some dropped)
      4  u32  magic            0x31554C50 ("PLU1") once the unit reached the end of the kernel
      8  u64  end_globaltimer  %globaltimer at the unit's exit (before its flush)
     16  u64  end_clock        %clock64 at the same point
     24  records: capacity x 8 bytes, each
          0 u32 tag    (scope_id << 1) | is_end
          4 u32 clock  low 32 bits of %clock64 (unwrapped by the decoder against start_clock)
         then sink_slots x 8 bytes that the decoder never reads

A record past the capacity is not kept, and never lands on a kept one: a unit keeps
``min(count, capacity)`` (``BufferLayout.kept``).  With shared staging the records past the
capacity go to sink slots in shared memory, which are never copied out.  With global staging
in clamp mode (``overflow == "sink"``, since 2026-11-24) they go to two sink slots after the
capacity in the unit block itself (``sink_slots == 2``), so a store needs no per-record
compare (kernels sized at launch keep one predicate, capacity > 0, set once per CTA, except
in tight loops, which store their pairs into the sinks at capacity 0 too).  Captures from 2026-11-23 have
``overflow == "last"`` instead: no sink slots, a record past the capacity went over the
unit's last slot, and a unit whose count exceeds the capacity keeps ``capacity - 1``.

A kernel whose records per unit depend on its launch arguments (``sized_at_launch``, see
``proton_lite/bound_expr.py``) has a 16-byte *launch prefix* before the first CTA block::

      0  u32  capacity word    (0xA5 << 24) | capacity, written by the host before the launch
      4  12 bytes              zero

and its ``capacity`` is that launch's: the host evaluates the kernel's record bound with the
launch's arguments.  The kernel reads the word at CTA start; without the 0xA5 tag it writes
no records (a buffer that proton_lite did not allocate).

A kernel with ``flush_slots`` (loops sized at launch, since 2026-11-27) has the same unit
blocks, capacity and sink slots as global staging; its records are staged in shared memory
and each unit's first warp copies them to the unit block, ``flush_slots`` at a time and the
rest at exit, record ``i`` to slot ``min(i, capacity)``.  Each copy but the one at exit
writes two records of its own, an enter and an exit of the scope ``COPY_SCOPE`` (the
kernel's last scope id), at its start and end, so that its time shows in the unit's
records as a scope of its own; the launch's capacity counts them
(``records_with_copies``).

A kernel whose loop bounds are known only at run time (``pool``, ``passes/pool.py``) uses
the rest of the prefix, and a *pool* of ``chunks`` chunks follows the last CTA block::

      4  u32  chunks           chunks in the pool, written by the host
      8  u32  epoch            this launch's number in the session + 1, written by the host
     12  u32  taken            chunks asked for: the units' atomic counter, zero at launch
    pool, chunk i at ``prefix + CTAs * stride + i * chunk_bytes``:
      0  u32  (0x504C << 16) | unit
      4  u32  epoch            the launch's epoch: a chunk without it was not written (torn)
      8  u32  cta              linear CTA index
     12  u32  first            the unit's record index held by the chunk's first slot
     16  records: chunk_slots x 8 bytes, then one sink slot

A unit's records are its unit block's, then its chunks' in the order of ``first``; a region
(block or chunk) holds the records from its ``first`` (0 for the block) to the next
region's, at most its slots.  Only the chunks taken (``min(taken, chunks)``) are copied
back.

A kernel without scopes and with one unit per CTA whose header waits for the exit
(``compact``: straight-line since 2026-11-28, with loops since pass 22) has a 32-byte
*lifetime block* per CTA instead, written by thread 0 at its exit with two 16-byte stores
(one 32-byte memory sector)::

      0  u32  (0x544C << 16) | smid   (bytes: smid, "LT")
      4  u32  gt_length        end_globaltimer - start_globaltimer (ns)
      8  u64  end_globaltimer  %globaltimer at thread 0's exit
     16  u64  end_clock        %clock64 at the same point
     24  u32  clock_length     end_clock - start_clock (cycles)
     28  u16  layout_version   LAYOUT_VERSION
     30  u8   gt_length bits 32-39 (a loop kernel's CTA may live past 2^32 ns)
     31  u8   clock_length bits 32-39 (0)

It holds what the CTA header and its one unit's header hold (``expand_lifetimes`` rebuilds
them): the starts are exact while a CTA lives less than 2^32 ns and cycles, which a CTA
without loops does not approach (a loop kernel's: format.md §1.2, start_range.py).  What it saves is the exit's cost in short CTAs (issue 24:
seven stores over 56 bytes made liger-kernel's 20 kernels 2.4-2.8% slower on the H100, two
over 32 bytes 2.1-2.3%).

All fields are little-endian.  A CTA whose magic is missing never ran (or the buffer was
not written); a unit whose magic is missing did not reach the end of the kernel.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

LAYOUT_VERSION = 1
# the scope a kernel staged in blocks (BufferLayout.flush_slots) records each of its copies
# under, after the kernel's own scopes: the copy's time, shown where it was spent
COPY_SCOPE = "proton-lite: buffer copy"
CTA_MAGIC = 0x314C5043
UNIT_MAGIC = 0x31554C50
LIFETIME_TAG = 0x544C  # top half of a lifetime block's first word (compact layouts)
# A loop kernel's ``loop_start`` (its metadata, format.md §1.11): the bits of %globaltimer below
# the 32 that thread 0 kept of its CTA's start; a start is exact while the CTA lives less than
# 2^(32 + shift) ns (passes/ptx_lifetimes.py writes it, proton_lite/start_range.py bounds it)
LOOP_TIMER_SHIFT = {"gt5": 5, "halves": 0}
LIFETIME_BYTES = 32
CTA_HEADER_BYTES = 32
UNIT_HEADER_BYTES = 24
RECORD_BYTES = 8
MAX_SCOPES = 1 << 15  # scope ids are 15 bits so that tags stay below 2**16
GRANULARITY_WARPS = {"warp": 1, "warpgroup": 4, "cta": None}
LAUNCH_PREFIX_BYTES = 16
LAUNCH_CAPACITY_TAG = 0xA5  # top byte of the capacity word
MAX_LAUNCH_CAPACITY = (1 << 24) - 1
# ``profile_scratch_align`` of kernels sized at launch: Triton passes it to the profile
# allocator, which is how the allocator knows that this launch needs its arguments
LAUNCH_SIZED_ALIGN = 64
# sink slots after the capacity of a global-staged unit (overflow == "sink"): one for records
# past the capacity, and one more because two records can be stored from one address: a
# loop's deferred record and the record after it (_defer_loop_tails), and a tight loop's pair
# (_pair_tight_loops)
GLOBAL_SINK_SLOTS = 2
DEFAULT_ALIGN = 16
# the launch pool (kernels whose loop bounds are known only at run time, passes/pool.py)
CHUNK_HEADER_BYTES = 16
CHUNK_TAG = 0x504C  # top half of a chunk header's first word ("PL"); the unit index below it
DEFAULT_CHUNK_SLOTS = 255  # records per chunk (odd: header + slots + one sink slot = 2064 bytes)


@dataclass(frozen=True)
class BufferLayout:
    """Sizes of one kernel's profile buffer; stored in the kernel's metadata."""

    granularity: str  # "warp" | "warpgroup" | "cta"
    num_warps: int
    capacity: int  # records per unit
    staging: str  # "shared" (copied at exit, or in blocks: flush_slots) or "global" (written directly)
    mode: str = "clamp"  # "clamp": keep the first `capacity`; "circular": keep the newest
    # capacity set per launch from the kernel's arguments (then ``capacity`` is the compiled
    # fallback, used when the arguments cannot be read); global staging, or shared staging
    # copied in blocks (``flush_slots``)
    sized_at_launch: bool = False
    # where a clamp-mode record past the capacity goes: "drop" (not in the buffer: shared
    # staging, whose sink slots are never copied out), "sink" (global staging: two slots after
    # the capacity in each unit block, never read) or, in captures from 2026-11-23, "last"
    # (over the unit's last slot; a unit that overflowed keeps capacity - 1)
    overflow: str = "drop"
    # records past the unit block go to chunks of a launch-wide pool after the CTA blocks
    # (loop bounds known only at run time; sized_at_launch, global staging, clamp mode)
    pool: bool = False
    chunk_slots: int = 0  # records per pool chunk (odd), when ``pool``
    # records staged in shared memory between copies to the unit block (``staging == "shared"``
    # with a global unit block of ``capacity`` and sink slots): a unit copies its staged
    # records each time ``flush_slots`` have gathered, and the rest at exit; 0: staged
    # records are copied at exit only (the staging holds the whole capacity)
    flush_slots: int = 0
    # one 32-byte lifetime block per CTA (see above): kernels without scopes or loops, one unit
    # per CTA, whose CTA header waits for the exit (passes/stage_hook.py)
    compact: bool = False

    def __post_init__(self):
        if self.compact and (self.capacity or self.units != 1 or self.sized_at_launch or self.staging != "global"):
            raise ValueError(f"a compact layout has one unit per CTA and no records: {self}")

    def expanded(self) -> "BufferLayout":
        """The layout of the blocks that ``expand_lifetimes`` makes of a compact one."""
        return replace(self, compact=False)

    @property
    def flush_run(self) -> int:
        """With staging in blocks: the most records one check makes room for (a straight run
        of records, a tight loop's pair counted whole), so at least ``flush_slots - 1 -
        flush_run`` records of the unit come between two copies."""
        return max(2, min(8, (self.flush_slots - 2) // 2))

    def records_with_copies(self, records: int) -> int:
        """Slots a unit needs for ``records`` of its own when its records are staged in
        blocks: each copy of a block to the unit block writes a pair of records of its own
        (``COPY_SCOPE``: when it started and ended) at the start of the next block."""
        if not self.flush_slots:
            return records
        return records + 2 * (records // (self.flush_slots - 1 - self.flush_run))

    def kept(self, counts: np.ndarray) -> np.ndarray:
        """Records that each unit's block holds, from the counts the units wrote."""
        if self.mode == "clamp" and self.overflow == "last":  # (captures from 2026-11-23)
            return np.where(counts > self.capacity, max(self.capacity - 1, 0), counts)
        return np.minimum(counts, self.capacity)

    @property
    def unit_warps(self) -> int:
        warps = GRANULARITY_WARPS[self.granularity]
        return self.num_warps if warps is None else warps

    @property
    def units(self) -> int:
        return self.num_warps // self.unit_warps

    @property
    def sink_slots(self) -> int:
        """Slots after the capacity in each unit block, for records past the capacity."""
        return GLOBAL_SINK_SLOTS if self.overflow == "sink" else 0

    @property
    def unit_bytes(self) -> int:
        return UNIT_HEADER_BYTES + (self.capacity + self.sink_slots) * RECORD_BYTES

    @property
    def stride(self) -> int:
        if self.compact:
            return LIFETIME_BYTES
        return CTA_HEADER_BYTES + self.units * self.unit_bytes

    @property
    def prefix(self) -> int:
        """Bytes before the first CTA block."""
        return LAUNCH_PREFIX_BYTES if self.sized_at_launch else 0

    @property
    def chunk_bytes(self) -> int:
        """Bytes per pool chunk: header, ``chunk_slots`` records, one sink slot."""
        return CHUNK_HEADER_BYTES + (self.chunk_slots + 1) * RECORD_BYTES if self.pool else 0

    def buffer_bytes(self, num_ctas: int, chunks: int = 0) -> int:
        return self.prefix + num_ctas * self.stride + chunks * self.chunk_bytes

    def with_capacity(self, capacity: int) -> "BufferLayout":
        return replace(self, capacity=capacity)

    def to_json(self) -> dict:
        data = asdict(self)
        if not self.sized_at_launch:  # captures of kernels sized at compile time read as before
            del data["sized_at_launch"]
        if self.overflow == "drop":
            del data["overflow"]
        if not self.pool:
            del data["pool"], data["chunk_slots"]
        if not self.flush_slots:
            del data["flush_slots"]
        if not self.compact:
            del data["compact"]
        return data

    @classmethod
    def from_json(cls, data: dict) -> "BufferLayout":
        # captures from before 2026-11-23 (eighth session) have no "overflow": their records
        # past the capacity were never stored
        return cls(**{k: data[k] for k in ("granularity", "num_warps", "capacity", "staging", "mode")},
                   sized_at_launch=bool(data.get("sized_at_launch", False)), overflow=data.get("overflow", "drop"),
                   pool=bool(data.get("pool", False)), chunk_slots=int(data.get("chunk_slots", 0)),
                   flush_slots=int(data.get("flush_slots", 0)), compact=bool(data.get("compact", False)))


def capacity_word(capacity: int) -> int:
    """The launch prefix's first word for ``capacity`` records per unit."""
    if not 0 <= capacity <= MAX_LAUNCH_CAPACITY:
        raise ValueError(f"launch capacity {capacity} outside 0..{MAX_LAUNCH_CAPACITY}")
    return (LAUNCH_CAPACITY_TAG << 24) | capacity


def read_capacity_word(word: int) -> int | None:
    """The capacity in a launch prefix's first word, None without the tag."""
    return word & MAX_LAUNCH_CAPACITY if word >> 24 == LAUNCH_CAPACITY_TAG else None


def encode_tag(scope_id: int, is_end: bool) -> int:
    return (scope_id << 1) | int(is_end)
