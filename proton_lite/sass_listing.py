"""A kernel's SASS, and where its global loads moved against the plain kernel's.

Why: what instrumenting a kernel costs on the device is often not the records but what
ptxas does around them; with the CTA's 64-bit start pair kept in registers, ptxas issued
some of a kernel's loads dozens of instructions late to stay within its register count
(docs/design.md, "The fixed cost of instrumenting a kernel").  `proton-lite compile --emit
sass DIR` writes both listings and reports how far the loads moved, so that a kernel
author or compiler developer sees it without a GPU.  The disassembler is the ``cuobjdump``
that comes with the triton wheel.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import tempfile

_INSTR = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")


def cuobjdump() -> str:
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def listing(cubin: bytes) -> str:
    """``cuobjdump -sass`` of a cubin, as text."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        return subprocess.run([cuobjdump(), "-sass", path], capture_output=True, text=True, check=True).stdout


def instructions(text: str) -> list[str]:
    """The instructions of a listing, in order (predicate included, no address or encoding)."""
    return [m.group(2) for m in map(_INSTR.match, text.splitlines()) if m]


def _opcode(instr: str) -> str:
    words = instr.split()
    return (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]


def global_loads(instrs: list[str]) -> list[int]:
    """Positions of the global loads (``LDG``) in a list of instructions."""
    return [n for n, i in enumerate(instrs) if _opcode(i) == "LDG"]


def load_shift(plain: list[str], instrumented: list[str]) -> dict:
    """How far the instrumented kernel's global loads moved against the plain kernel's: the
    n-th load of one against the n-th of the other, in instructions (positive: later).
    ``comparable`` is False when the two kernels do not have as many loads."""
    p, i = global_loads(plain), global_loads(instrumented)
    out = {"plain_instructions": len(plain), "instructions": len(instrumented), "loads": len(i),
           "plain_loads": len(p), "comparable": len(p) == len(i) and len(p) > 0}
    if out["comparable"]:
        moved = [b - a for a, b in zip(p, i)]
        out.update(max_moved=max(moved), median_moved=statistics.median(moved), first_moved=moved[0])
    return out
