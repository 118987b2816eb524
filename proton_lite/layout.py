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
    ``UNIT_HEADER_BYTES + capacity * 8`` bytes:
      0  u32  count            records the unit tried to write (count > capacity: dropped)
      4  u32  magic            0x31554C50 ("PLU1") once the unit reached the end of the kernel
      8  u64  end_globaltimer  %globaltimer at the unit's exit (before its flush)
     16  u64  end_clock        %clock64 at the same point
     24  records: capacity x 8 bytes, each
          0 u32 tag    (scope_id << 1) | is_end
          4 u32 clock  low 32 bits of %clock64 (unwrapped by the decoder against start_clock)

All fields are little-endian.  A CTA whose magic is missing never ran (or the buffer was
not written); a unit whose magic is missing did not reach the end of the kernel.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

LAYOUT_VERSION = 1
CTA_MAGIC = 0x314C5043
UNIT_MAGIC = 0x31554C50
CTA_HEADER_BYTES = 32
UNIT_HEADER_BYTES = 24
RECORD_BYTES = 8
MAX_SCOPES = 1 << 15  # scope ids are 15 bits so that tags stay below 2**16
GRANULARITY_WARPS = {"warp": 1, "warpgroup": 4, "cta": None}


@dataclass(frozen=True)
class BufferLayout:
    """Sizes of one kernel's profile buffer; stored in the kernel's metadata."""

    granularity: str  # "warp" | "warpgroup" | "cta"
    num_warps: int
    capacity: int  # records per unit
    staging: str  # "shared" (flushed at exit) or "global" (written directly)
    mode: str = "clamp"  # "clamp": keep the first `capacity`; "circular": keep the newest

    @property
    def unit_warps(self) -> int:
        warps = GRANULARITY_WARPS[self.granularity]
        return self.num_warps if warps is None else warps

    @property
    def units(self) -> int:
        return self.num_warps // self.unit_warps

    @property
    def unit_bytes(self) -> int:
        return UNIT_HEADER_BYTES + self.capacity * RECORD_BYTES

    @property
    def stride(self) -> int:
        return CTA_HEADER_BYTES + self.units * self.unit_bytes

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "BufferLayout":
        return cls(**{k: data[k] for k in ("granularity", "num_warps", "capacity", "staging", "mode")})


def encode_tag(scope_id: int, is_end: bool) -> int:
    return (scope_id << 1) | int(is_end)
