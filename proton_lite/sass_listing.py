"""A kernel's SASS, and where its global loads moved against the plain kernel's.

Why: what instrumenting a kernel costs on the device is often not the records but what
ptxas does around them; with the CTA's 64-bit start pair kept in registers, ptxas issued
some of a kernel's loads dozens of instructions late to stay within its register count
(docs/design.md, "The fixed cost of instrumenting a kernel").  `proton-lite compile --emit
sass DIR` writes both listings and reports how far the loads moved, and how many loads wait
for another load's data before they issue (a second trip to memory), so that a kernel
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


_HIGH_WORD = re.compile(r"^\s+/\* (0x[0-9a-f]{16}) \*/\s*$")
_ENCODED = re.compile(r"/\* (0x[0-9a-f]{16}) \*/\s*$")
NO_BARRIER = 7


def control(text: str) -> list[tuple[str, int, int]]:
    """(instruction, write barrier, wait mask) per instruction of a listing, from the control
    bits of sm_70+ encodings: the second 64-bit word's bits 46-48 name the scoreboard a
    variable-latency instruction (a load) signals when its result is ready (7: none), bits
    52-57 the scoreboards the instruction waits for before it issues."""
    lines = text.splitlines()
    out = []
    for n, line in enumerate(lines):
        m = _INSTR.match(line)
        if not m or not _ENCODED.search(line) or n + 1 >= len(lines):
            continue
        high = _HIGH_WORD.match(lines[n + 1])
        if not high:
            continue
        bits = int(high.group(1), 16) >> 41
        out.append((m.group(2), (bits >> 5) & 7, (bits >> 11) & 0x3F))
    return out


def loads_behind_loads(text: str) -> list[int]:
    """Positions of the global loads issued after an instruction that waited for an earlier
    global load's data: such a load starts its trip to memory only once the other one is
    back.  A kernel whose instrumented build has more of these than its plain build may pay a
    memory latency per extra one, unless that load's data sits in a cache (a weight every CTA
    reads): a hint to look at, not a verdict (liger's DyT forward: docs/design.md)."""
    pending, waited, out = set(), False, []
    for n, (instr, barrier, wait) in enumerate(control(text)):
        if any(wait >> b & 1 for b in pending):
            waited = True
        if _opcode(instr) == "LDG":
            if waited:
                out.append(n)
            if barrier != NO_BARRIER:
                pending.add(barrier)
    return out


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
