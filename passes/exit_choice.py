"""Whether a kernel without scopes writes its lifetime inline at exit or through a call, chosen
per kernel from the two builds' SASS.

Why (issue 24; docs/design.md, "The exit chosen per kernel"): ptxas schedules a
kernel's body around the code of our exit.  Inline, that moves some kernels' loads: in liger's
DyT and softmax forwards a load waits for another load's data first (a trip to memory more per
CTA), in a layer norm the weights' loads issue 28 instructions after the plain kernel's, behind
its ``rsqrt``.  As a ``.func`` the kernel calls at ``ret``, ptxas schedules the body as if the
exit were not there, but the call, its parameters and its return cost every CTA some cycles.
On the H200 (2026-11-28, CUPTI durations, one run of each): the call took DyT's forward from
1.053x plain to 1.019x, softmax's from 1.070x to 1.029x, bench.py's layer norm without scopes
from +5.1% to +3.8%, and cost 0.5-2 points on kernels whose loads it did not move (SwiGLU,
GeGLU, rope).  So the cubin stage builds both where the exit could be a call and keeps the
call only where the inline build's loads wait behind other loads more often, or issue at least
``LATE`` instructions later than the call build's.

The SASS is read from the cubin's own bytes, not a disassembler (``cuobjdump`` takes ~0.5 s a
kernel): an sm_80/sm_90 instruction is 128 bits, its opcode in the low 12 bits (``LDG``:
0x981) and its scheduling bits in 105-125 (sass_listing.Instr); tests/test_exit_choice.py
checks both against ``cuobjdump``'s listing.
"""
from __future__ import annotations

import struct

from proton_lite.passes.register_cap import (FRAME_SIZE, MAX_REGS, Build, PlainBuild, ctas_per_sm, cubin_attribute,
                                             elf_section, keep_occupancy)

LDG_OPCODE = 0x981
LATE = 16  # instructions: a load issued this much later inline than with the call is one ptxas held back
ARCHS = (80, 86, 89, 90)  # the encodings the opcode and bits above were checked on (sm_90a: 90)


def text_section(cubin: bytes, kernel: str) -> bytes | None:
    """The bytes of ``.text.<kernel>`` in a cubin's ELF, or None."""
    return elf_section(cubin, b".text." + kernel.encode())


def schedule(code: bytes) -> tuple[list[int], list[int]]:
    """(positions of the global loads, positions of the loads issued after an instruction that
    waited for an earlier global load's data), as sass_listing.loads_behind_loads counts them."""
    loads, behind, pending, waited = [], [], set(), False
    for n in range(len(code) // 16):
        lo, hi = struct.unpack_from("<QQ", code, 16 * n)
        ctrl = hi >> 41
        if any(ctrl >> (11 + b) & 1 for b in pending):
            waited = True
        if lo & 0xFFF == LDG_OPCODE:
            loads.append(n)
            if waited:
                behind.append(n)
            if (ctrl >> 5) & 7 != 7:
                pending.add((ctrl >> 5) & 7)
    return loads, behind


def prefer_call(inline: bytes, call: bytes, kernel: str) -> tuple[bool, dict]:
    """Whether the call build's schedule is the better one, and the measures it was told by."""
    a, b = text_section(inline, kernel), text_section(call, kernel)
    if a is None or b is None:
        return False, {"why": "no .text section"}
    (loads_a, behind_a), (loads_b, behind_b) = schedule(a), schedule(b)
    late = max((x - y for x, y in zip(loads_a, loads_b)), default=0) if len(loads_a) == len(loads_b) else 0
    facts = {"behind": [len(behind_a), len(behind_b)], "late": late}
    return len(behind_a) > len(behind_b) or (len(behind_a) == len(behind_b) and late >= LATE), facts


class CallBuild(Build):
    """The call form's first ptxas run, on a thread of its own while the cubin stage builds the
    inline form: the choice then adds little to a compile's wall time where a second core is
    free.  Begun only for the encodings ``schedule`` reads (``ARCHS``)."""

    def __init__(self, call_ptx: str, make_cubin, metadata, arch: int):
        super().__init__(call_ptx, make_cubin, metadata, start=arch in ARCHS)


def choose(cubin: bytes, decided: dict, call: CallBuild, plain: PlainBuild, make_cubin, metadata,
           threads: int) -> tuple[bytes, dict]:
    """The inline build ``cubin`` or the call build, whichever ``prefer_call`` says, never one
    that spills more or keeps fewer CTAs per SM.  ``decided["exit"]`` says which."""
    decided = dict(decided, exit="inline")
    built = call.result()
    if built is None:  # another architecture's encoding, or ptxas failed on the call form
        if call.error is not None:
            decided["exit_schedule"] = {"why": f"the call form did not build: {type(call.error).__name__}"}
        return cubin, decided
    other, facts = keep_occupancy(call.ptx, plain, make_cubin, metadata, threads, built=built)
    spills = [cubin_attribute(c, FRAME_SIZE) or 0 for c in (cubin, other)]
    ctas = [ctas_per_sm(d["registers"] or MAX_REGS, threads) for d in (decided, facts)]
    better, measures = prefer_call(cubin, other, metadata.get("name", ""))
    decided["exit_schedule"] = measures
    if better and spills[1] <= spills[0] and ctas[1] >= ctas[0]:
        return other, {**decided, **facts, "exit": "call"}
    return cubin, decided
