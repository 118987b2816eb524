"""Instrumentation settings, carried inside Triton's ``instrumentation_mode`` compile option.

Triton puts ``instrumentation_mode`` into every kernel's cache key (3.6 and 3.9), so
encoding our settings there means instrumented and plain binaries, and binaries built
with different settings, never share a cache entry, with no change to Triton.  The
string looks like ``proton_lite,plcfg=warp.auto.clamp``: Triton 3.9 splits modes on
commas and only reacts to its own sanitizer names.
"""
from __future__ import annotations

from dataclasses import dataclass

from proton_lite.language import INSTRUMENTATION_MODE
from proton_lite.layout import GRANULARITY_WARPS

GRANULARITIES = tuple(GRANULARITY_WARPS)
BUFFER_MODES = ("clamp", "circular")
_PREFIX = "plcfg="


@dataclass(frozen=True)
class InstrumentConfig:
    """How kernels are instrumented.

    granularity: which threads record: one lane per warp, per warp group (4 warps) or per CTA.
    capacity: records per recording unit; None sizes it from the code (exact when no scope
        is inside a loop, otherwise ``loop_capacity``).
    loop_capacity: records per unit when a scope sits inside a loop and capacity is None.
    buffer_mode: "clamp" keeps the first records, "circular" the newest, when full.
    """

    granularity: str = "warp"
    capacity: int | None = None
    loop_capacity: int = 256
    buffer_mode: str = "clamp"

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"proton_lite: unknown granularity {self.granularity!r}; "
                             f"choose one of {', '.join(GRANULARITIES)}")
        if self.buffer_mode not in BUFFER_MODES:
            raise ValueError(f"proton_lite: unknown buffer_mode {self.buffer_mode!r}; "
                             f"choose one of {', '.join(BUFFER_MODES)}")
        for name in ("capacity", "loop_capacity"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1 or value > 1 << 24):
                raise ValueError(f"proton_lite: {name} must be an int between 1 and {1 << 24}, got {value!r}")

    def to_mode(self) -> str:
        cap = "auto" if self.capacity is None else str(self.capacity)
        return f"{INSTRUMENTATION_MODE},{_PREFIX}{self.granularity}.{cap}.{self.loop_capacity}.{self.buffer_mode}"

    @classmethod
    def from_mode(cls, mode: str) -> "InstrumentConfig | None":
        """The config in a mode string, or None when proton_lite is not enabled in it."""
        parts = [p.strip() for p in (mode or "").split(",")]
        if INSTRUMENTATION_MODE not in parts:
            return None
        for part in parts:
            if part.startswith(_PREFIX):
                gran, cap, loop_cap, buf = part[len(_PREFIX):].split(".")
                return cls(gran, None if cap == "auto" else int(cap), int(loop_cap), buf)
        return cls()
