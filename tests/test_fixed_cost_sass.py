"""What the instrumentation does to the schedule of a kernel without scopes: compiled for
sm_90 without a GPU, assembled by the triton wheel's ptxas, read back with cuobjdump.

Why: with the CTA's 64-bit start pair kept in registers until exit (pass 15), ptxas issued
some of a kernel's loads dozens of instructions late to stay within the register count it
chose (Triton 3.6 and 3.9 alike); on the H100 that cost a SwiGLU forward 1.3 -> 2.7-3.2% and a
persistent DyT backward 1.25x (design.md, "The fixed cost of instrumenting a kernel").  The
shipped form keeps the pair's low halves only; its loads stay where the plain kernel has
them, a few instructions later (the two timer reads and their neighbours)."""
import pytest

import proton_lite
import fixed_cost_kernels as F
from sass import disassemble

GATED = (F.gated_silu_fwd, {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "stride": "i32", "scale": "fp32"})
SHIFT = 4  # instructions a load may move: the prologue's two reads and what ptxas moves with them


def _loads(instrument: bool, num_warps: int, block: int) -> list[int]:
    k = proton_lite.compile(*GATED, {"n_cols": block, "BLOCK": block}, instrument=instrument, num_warps=num_warps,
                            divisible_by_16=("stride", ))
    if instrument:
        assert k.profile["cta_header"] == "exit" and k.profile["layout"]["capacity"] == 0
    return [n for n, i in enumerate(disassemble(k.asm["cubin"])) if i.opcode.startswith("LDG")]


@pytest.mark.parametrize("num_warps,block", [(8, 2048), (4, 1024)])
def test_a_straight_line_kernel_issues_its_loads_where_the_plain_kernel_does(num_warps, block):
    plain, inst = _loads(False, num_warps, block), _loads(True, num_warps, block)
    assert len(inst) == len(plain) > 0
    moved = [i - p for i, p in zip(inst, plain)]
    assert all(0 <= m <= SHIFT for m in moved), (plain, inst)
