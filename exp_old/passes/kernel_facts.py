"""What the compiled kernel really is, as opposed to what was asked for.

Triton's passes may change a kernel behind the options it was compiled with:

* warp specialization (``tl.range(..., warp_specialize=True)``, Gluon's
  ``gl.warp_specialize``) adds partitions of their own warps, so the kernel runs with more
  warps than ``num_warps`` asked for (4 requested, 12 run on sm_90 with Triton 3.6 and 3.9).
  Triton writes the real count into the metadata (``make_llir``: ``ttg.total-num-warps``)
  and into the PTX (``.reqntid``).  Every buffer must be sized for the warps that run, or
  the extra warps write past it;
* a pass may drop the markers of some scopes (Triton 3.6 and 3.9 on sm_90 drop every
  marker inside a loop they warp-specialize).  Those scopes then have no record at all,
  which a user must be told rather than find an empty trace.
"""
from __future__ import annotations

import re
import warnings

from proton_lite.markers import MARKER_TAG

_NTID_RE = re.compile(r"^\s*\.(reqntid|maxntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", re.M)
_MARKER_NAME_RE = re.compile(re.escape(MARKER_TAG) + r"\s+(?:enter|exit)\s+([0-9a-f]+)")
WARP_SPECIALIZE_OP = "ttg.warp_specialize"


def ptx_block_threads(ptx: str) -> int | None:
    """Threads per CTA that the PTX declares (``.reqntid``, else ``.maxntid``), or None."""
    found = {}
    for m in _NTID_RE.finditer(ptx):
        dims = [int(d) for d in m.groups()[1:] if d is not None]
        threads = 1
        for d in dims:
            threads *= d
        found.setdefault(m.group(1), threads)
    return found.get("reqntid", found.get("maxntid"))


def launched_warps(ptx: str, metadata: dict, requested: int) -> int:
    """The warps per CTA the kernel runs with: the most of the PTX's thread count, Triton's
    metadata (which its launcher uses for the block size) and the requested ``num_warps``,
    so that no warp that runs is left without its part of the buffer."""
    counts = [int(requested)]
    meta = metadata.get("num_warps")
    if meta:
        counts.append(int(meta))
    threads = ptx_block_threads(ptx)
    if threads:
        counts.append(-(-threads // 32))
    return max(counts)


def marker_scopes(ir_text: str) -> list[str]:
    """Scope names of the markers in an IR's text (TTIR, TTGIR or PTX), in order of first appearance."""
    names: list[str] = []
    for m in _MARKER_NAME_RE.finditer(ir_text):
        name = bytes.fromhex(m.group(1)).decode("utf-8", "replace")
        if name not in names:
            names.append(name)
    return names


def lost_scopes(ttir_scopes: list[str] | None, ttgir_scopes: list[str] | None, warp_specialized: bool,
                ptx_scopes: list[str]) -> dict | None:
    """``{"scopes": [...], "reason": "..."}`` for scopes whose markers were in the TTIR but
    are missing from the PTX (None when nothing was lost, or when the TTIR was not seen)."""
    if ttir_scopes is None:
        return None
    lost = [s for s in ttir_scopes if s not in ptx_scopes]
    if not lost:
        return None
    fix = "move them where the compiler keeps them, or report this kernel to proton-lite"
    if ttgir_scopes is not None and any(s not in ttgir_scopes for s in lost):
        if warp_specialized:
            reason = ("Triton's warp specialization (tl.range(..., warp_specialize=True)) split their loop into "
                      "partitions, and no partition holds work of theirs to place them around (only index "
                      "arithmetic, which every partition repeats)")
            fix = ("put the loads, dots or stores they should time inside them, or move them outside the "
                   "warp-specialized loop")
        else:
            reason = "a Triton pass between TTIR and TTGIR removed their markers"
    else:
        reason = "Triton's lowering between TTGIR and PTX removed their markers"
    return {"scopes": lost, "reason": reason, "fix": fix}


def lost_scopes_message(kernel: str, lost: dict) -> str:
    """One line for a user: which kernel, which scopes, why, and what still works."""
    names = ", ".join(repr(s) for s in lost["scopes"])
    return (f"kernel {kernel}: scope(s) {names} have no records: {lost['reason']}; the kernel still records "
            f"its CTA and warp lifetimes; {lost.get('fix', 'move the scopes')}")


class ProtonLiteWarning(UserWarning):
    """A kernel compiled, but proton_lite cannot record all of what its source asks for."""


def warn_lost_scopes(kernel: str, entry: dict | None, stacklevel: int = 3) -> None:
    """Warn once about the scopes a kernel lost (from its metadata, so that a kernel taken from
    Triton's cache warns as well as a freshly compiled one)."""
    lost = (entry or {}).get("lost_scopes")
    if lost:
        warnings.warn("proton_lite: " + lost_scopes_message(kernel, lost), ProtonLiteWarning, stacklevel=stacklevel)
