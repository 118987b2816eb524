"""A kernel compiled plain, instrumented from its PTX.

Why: a session has plain binaries of many kernels it will launch (torch.compile's kernels
compiled before it, or by Inductor's compile workers in it, which never see the stage hook),
and compiling each again through Triton's whole pipeline ran its passes and LLVM again, one
kernel at a time, since they hold the GIL.  The pass rewrites the PTX (stage_hook.py); for a
kernel without scopes the earlier stages only tell it there are none, and the plain compile
kept its PTX, TTIR, TTGIR, metadata and cubin.  So what is left is the pass and ptxas, whose
runs are processes of their own that overlap on threads (docs/design.md §4b, "Compile time").

Only for kernels whose source has no scope: ``pl.scope`` emits its markers only in a compile
with the instrumentation mode (zero cost when off), so a plain kernel's PTX cannot tell; the
caller knows (Inductor generated the kernel).  A kernel Triton warp-specialized (its partitions
come from the TTGIR's module), or compiled in a mode, is left to Triton's pipeline:
``instrument_plain`` returns None.
"""
from __future__ import annotations

from proton_lite.markers import MARKER_TAG
from proton_lite.passes.config import InstrumentConfig
from proton_lite.passes.kernel_facts import WARP_SPECIALIZE_OP, marker_scopes
from proton_lite.passes.ptx_instrument import scan
from proton_lite.passes.record_bound import record_bound_expr
from proton_lite.passes.stage_hook import build_cubin, instrument_ptx


def plain_enough(ptx: str, ttgir: str | None, metadata: dict) -> bool:
    """Whether the PTX alone is enough: no marker, no warp specialization, not instrumented."""
    return MARKER_TAG not in ptx and WARP_SPECIALIZE_OP not in (ttgir or "") and "proton_lite" not in metadata


def instrument_plain(ptx: str, metadata: dict, mode: str, make_cubin, capability, plain_cubin: bytes | None = None,
                     ttir: str | None = None, ttgir: str | None = None) -> tuple[str, bytes] | None:
    """(PTX, cubin) of the kernel instrumented in ``mode``, and ``metadata`` (the plain
    kernel's, as a dict) updated as the stage hook updates a compile's: the same code and
    decisions as Triton's pipeline with the hook.  None where the PTX alone is not enough
    (``plain_enough``), or the mode's ``kernels=`` leaves the kernel out (it stays plain).
    ``make_cubin(ptx, metadata)``: Triton's ptxas stage for the kernel's options."""
    config = InstrumentConfig.from_mode(mode)
    if config is None or not plain_enough(ptx, ttgir, metadata):
        return None
    if not config.selects(metadata.get("name") or scan(ptx).kernel):
        return None
    facts = {}
    bound = None
    if ttir is not None:  # as the TTIR stage reads it
        facts["ttir_scopes"] = marker_scopes(ttir)
        try:
            bound = record_bound_expr(ttir)
        except Exception:  # noqa: BLE001 - as the stage hook: an IR this reader does not follow
            bound = None
    if ttgir is not None:
        facts.update(warp_specialized=False, ttgir_scopes=marker_scopes(ttgir))
    fallbacks: list[tuple[str, dict]] = []
    exit_calls: list[str] = []
    new_ptx = instrument_ptx(ptx, metadata, config, int(metadata["num_warps"]), bound, facts, fallbacks, exit_calls)
    cubin = build_cubin(new_ptx, metadata, ptx, fallbacks, exit_calls, make_cubin, capability, plain_cubin)
    return new_ptx, cubin
