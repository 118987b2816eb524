"""Instrumentation settings, carried inside Triton's ``instrumentation_mode`` compile option.

Triton puts ``instrumentation_mode`` into every kernel's cache key (3.6 and 3.9), so
encoding our settings there means instrumented and plain binaries, and binaries built
with different settings, never share a cache entry, with no change to Triton.  The
string looks like ``proton_lite,plcfg=warp.auto.clamp``: Triton 3.9 splits modes on
commas and only reacts to its own sanitizer names.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from proton_lite.markers import INSTRUMENTATION_MODE
from proton_lite.layout import GRANULARITY_WARPS

AUTO = "auto"  # "warp" for kernels with scopes (or warp-specialized), "cta" for the rest: resolve_granularity
GRANULARITIES = (AUTO, ) + tuple(GRANULARITY_WARPS)
BUFFER_MODES = ("clamp", "circular")
_PREFIX = "plcfg="
_VERSION = "plv="


CALIBRATION_KERNEL = "proton_lite_calibrate"  # see proton_lite/runtime/calibrate.py
CALIBRATION_SCOPES = ("calibrate", "record")  # outer scope, back-to-back inner pairs


def _pass_fingerprint() -> str:
    """Hash of the pass sources and of the language module that emits the markers: Triton 3.6
    does not key its cache on stage hooks, nor any cache on the code that builds a kernel's IR
    beyond the kernel's own source, so a change there must change the compile options to
    invalidate binaries built before it."""
    import hashlib
    from pathlib import Path

    from proton_lite import layout
    package = Path(layout.__file__).parent
    h = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")) + [package / "layout.py", package / "language.py",
                                                             package / "markers.py",
                                                             package / "scope_names.py"]:
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


PASS_FINGERPRINT = _pass_fingerprint()
_KERNELS = "plk="


@dataclass(frozen=True)
class InstrumentConfig:
    """How kernels are instrumented.

    granularity: which threads record: one lane per warp, per warp group (4 warps) or per CTA;
        "auto": per warp in kernels with scopes, per CTA in kernels without (resolve_granularity).
    capacity: records per recording unit; None sizes it from the code (exact when no scope
        is inside a loop, otherwise ``loop_capacity``).
    loop_capacity: records per unit when a scope sits inside a loop and capacity is None.
    buffer_mode: "clamp" keeps the first records, "circular" the newest, when full.
    """

    granularity: str = "warp"
    capacity: int | None = None
    loop_capacity: int = 256
    buffer_mode: str = "clamp"
    kernels: tuple[str, ...] = ()  # fnmatch patterns of kernel names to instrument; () = all

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
        from proton_lite.passes import ptx_lifetimes, ptx_staging  # their switches change the PTX: in the key
        exit_form = ".exitfunc" if ptx_lifetimes.EXIT_IN_FUNCTION else "" if ptx_lifetimes.EXIT_CHOSEN else ".exitinline"
        if ptx_lifetimes.LOOP_START != ptx_lifetimes.DEFAULT_LOOP_START:
            exit_form += f".loop{ptx_lifetimes.LOOP_START}"
        if ptx_staging.FLUSH_SLOTS != ptx_staging.DEFAULT_FLUSH_SLOTS:
            exit_form += f".flush{ptx_staging.FLUSH_SLOTS}"
        if ptx_staging.MIN_INSTRUCTIONS_PER_RECORD != ptx_staging.DEFAULT_MIN_INSTRUCTIONS_PER_RECORD:
            exit_form += f".sparse{ptx_staging.MIN_INSTRUCTIONS_PER_RECORD}"
        mode = (f"{INSTRUMENTATION_MODE},{_VERSION}{PASS_FINGERPRINT}{exit_form},"
                f"{_PREFIX}{self.granularity}.{cap}.{self.loop_capacity}.{self.buffer_mode}")
        if self.kernels:
            mode += "," + _KERNELS + ".".join(k.encode().hex() for k in self.kernels)
        return mode

    def selects(self, kernel_name: str) -> bool:
        if kernel_name == CALIBRATION_KERNEL:  # the session's own record-cost measurement
            return True
        return not self.kernels or any(fnmatch.fnmatchcase(kernel_name, pat) for pat in self.kernels)

    @classmethod
    def from_mode(cls, mode: str) -> "InstrumentConfig | None":
        """The config in a mode string, or None when proton_lite is not enabled in it."""
        parts = [p.strip() for p in (mode or "").split(",")]
        if INSTRUMENTATION_MODE not in parts:
            return None
        fields: dict = {}
        for part in parts:
            if part.startswith(_PREFIX):
                gran, cap, loop_cap, buf = part[len(_PREFIX):].split(".")
                fields.update(granularity=gran, capacity=None if cap == "auto" else int(cap),
                              loop_capacity=int(loop_cap), buffer_mode=buf)
            elif part.startswith(_KERNELS):
                fields["kernels"] = tuple(bytes.fromhex(h).decode() for h in part[len(_KERNELS):].split(".") if h)
        return cls(**fields)


def resolve_granularity(granularity: str, has_scopes: bool, warp_specialized: bool) -> str:
    """The granularity a kernel is instrumented with.  ``"auto"``: per warp where there is
    something to record per warp (scopes; warp-specialized kernels, whose warps do different
    work); per CTA in a kernel without scopes, whose warps have only their start and end to
    tell: its CTA's lifetime takes 64 bytes, where 16 warps' lifetimes take 544, and bytes
    per launch are what a session's host time is made of (docs/design.md §4)."""
    if granularity != AUTO:
        return granularity
    return "warp" if has_scopes or warp_specialized else "cta"
