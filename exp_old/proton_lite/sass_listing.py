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
from dataclasses import dataclass

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


_ENCODED = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s+/\* 0x([0-9a-f]{16}) \*/")
_HIGH_WORD = re.compile(r"/\* 0x([0-9a-f]{16}) \*/")


@dataclass(frozen=True)
class Instr:
    """One instruction with the scheduling bits ptxas set.  Since Volta every instruction is
    128 bits; bits 105-125 hold them (Jia et al., "Dissecting the NVIDIA Volta GPU
    Architecture via Microbenchmarking", 2018): stall cycles (4 bits), yield (1), the
    scoreboard a variable-latency instruction releases when its result is written (3, 7 =
    none) and when it has read its source registers (3, 7 = none), then the mask of
    scoreboards the instruction waits for (6) and the operand-reuse flags (4)."""
    addr: int
    text: str  # e.g. "CS2R.32 R9, SR_CLOCKLO", predicate included
    stall: int
    write_barrier: int | None
    read_barrier: int | None
    waits: frozenset[int]

    @property
    def opcode(self) -> str:
        words = self.text.split()
        return words[1] if words[0].startswith("@") else words[0]


def decode(text: str) -> list[Instr]:
    """The instructions of a listing with their scheduling bits (the second 64-bit word of
    each, printed on the line after it)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _ENCODED.match(line)
        if not m:
            continue
        ctrl = int(_HIGH_WORD.search(lines[i + 1]).group(1), 16) >> 41
        wbar, rbar = (ctrl >> 5) & 7, (ctrl >> 8) & 7
        out.append(Instr(int(m.group(1), 16), m.group(2), ctrl & 0xF, None if wbar == 7 else wbar,
                         None if rbar == 7 else rbar, frozenset(b for b in range(6) if ctrl >> (11 + b) & 1)))
    return out


def loads_behind_loads(text: str) -> list[int]:
    """Positions of the global loads issued after an instruction that waited for an earlier
    global load's data: such a load starts its trip to memory only once the other one is
    back.  A kernel whose instrumented build has more of these than its plain build may pay a
    memory latency per extra one, unless that load's data sits in a cache (a weight every CTA
    reads): a hint to look at, not a verdict (liger's DyT forward: docs/design.md)."""
    pending, waited, out = set(), False, []
    for n, instr in enumerate(decode(text)):
        if instr.waits & pending:
            waited = True
        if _opcode(instr.text) == "LDG":
            if waited:
                out.append(n)
            if instr.write_barrier is not None:
                pending.add(instr.write_barrier)
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
