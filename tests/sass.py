"""The SASS of a compiled kernel, with each instruction's scheduling bits, for tests that
check what ptxas made of the record code.

``cuobjdump`` comes with the triton wheel, so this works without a GPU. Since Volta every
instruction is 128 bits; bits 105-125 hold the scheduling control that ptxas sets (Jia et
al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018): stall
cycles (4 bits), yield (1), the scoreboard a variable-latency instruction releases when its
result is written (3, 7 = none) and when it has read its source registers (3, 7 = none),
then the mask of scoreboards the instruction waits for (6) and the operand-reuse flags (4).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from proton_lite.sass_listing import listing  # the triton wheel's cuobjdump

_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s+/\* 0x([0-9a-f]{16}) \*/")
_HIGH = re.compile(r"/\* 0x([0-9a-f]{16}) \*/")


@dataclass(frozen=True)
class Instr:
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



def disassemble(cubin: bytes) -> list[Instr]:
    lines = listing(cubin).splitlines()
    out = []
    for i, line in enumerate(lines):
        m = _LINE.match(line)
        if not m:
            continue
        ctrl = int(_HIGH.search(lines[i + 1]).group(1), 16) >> 41
        wbar, rbar = (ctrl >> 5) & 7, (ctrl >> 8) & 7
        out.append(Instr(int(m.group(1), 16), m.group(2), ctrl & 0xF, None if wbar == 7 else wbar,
                         None if rbar == 7 else rbar, frozenset(b for b in range(6) if ctrl >> (11 + b) & 1)))
    return out


def timer_reads(instrs: list[Instr]) -> list[Instr]:
    """Instructions that read the SM clock (``SR_CLOCKLO``, the low word of the 64-bit counter)."""
    return [i for i in instrs if "SR_CLOCKLO" in i.text]
