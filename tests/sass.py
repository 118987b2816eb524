"""The SASS of a compiled kernel, with each instruction's scheduling bits, for tests that
check what ptxas made of the record code (``cuobjdump`` comes with the triton wheel, so this
works without a GPU; the bits are read by ``proton_lite.sass_listing.decode``)."""
from __future__ import annotations

from proton_lite.sass_listing import Instr, decode, listing

__all__ = ["Instr", "disassemble", "timer_reads"]


def disassemble(cubin: bytes) -> list[Instr]:
    return decode(listing(cubin))


def timer_reads(instrs: list[Instr]) -> list[Instr]:
    """Instructions that read the SM clock (``SR_CLOCKLO``, the low word of the 64-bit counter)."""
    return [i for i in instrs if "SR_CLOCKLO" in i.text]
