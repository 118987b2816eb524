"""The exit of a kernel without scopes, inline or as a call, chosen per kernel from the two
builds' SASS (passes/exit_choice.py): compiled for sm_90a without a GPU, assembled by the
triton wheel's ptxas, the choice's reading of the cubin checked against ``cuobjdump``."""
import struct

import pytest

import proton_lite
import fixed_cost_kernels as F
import test_fixed_cost_sass as T
from proton_lite.passes import exit_choice, ptx_lifetimes
from proton_lite.sass_listing import global_loads, instructions, listing, loads_behind_loads

LNORM = (F.layer_norm_rows, {"x_ptr": "*fp16", "y_ptr": "*fp16", "w_ptr": "*fp16", "b_ptr": "*fp16", "stride": "i32",
                             "n": "i32", "eps": "fp32"}, {"BLOCK": 8192}, 16)
GATED = (T.GATED[0], T.GATED[1], {"n_cols": 2048, "BLOCK": 2048}, 8)
TANH = (T.TANH[0], T.TANH[1], {"N": 1024, "BLOCK": 2048}, 4)


def _build(case, instrument=True):
    fn, sig, constexprs, warps = case
    return proton_lite.compile(fn, sig, constexprs, instrument=instrument, num_warps=warps,
                               divisible_by_16=tuple(n for n, t in sig.items() if t != "fp32"))


@pytest.mark.parametrize("case", [LNORM, GATED, TANH], ids=["layer_norm", "gated_silu", "tanh_affine"])
@pytest.mark.parametrize("instrument", [False, True])
def test_the_cubin_is_read_as_cuobjdump_lists_it(case, instrument):
    k = _build(case, instrument)
    text = listing(k.asm["cubin"])
    code = exit_choice.text_section(k.asm["cubin"], k.metadata["name"])
    loads, behind = exit_choice.schedule(code)
    assert loads == global_loads(instructions(text)) and len(loads) > 0
    assert behind == loads_behind_loads(text)
    assert len(code) // 16 == len(instructions(text))


def test_a_load_behind_a_load_is_told_by_the_scoreboard_bits():
    """Three instructions built by hand from the encoding: a load that sets scoreboard 2, an
    instruction that waits on it, a second load (behind the first); then the wait removed."""
    def instr(opcode, wbar=7, waits=()):
        ctrl = (wbar << 5) | (7 << 8) | sum(1 << (11 + b) for b in waits)
        return struct.pack("<QQ", opcode, ctrl << 41)
    ldg, fadd = exit_choice.LDG_OPCODE, 0x221
    assert exit_choice.schedule(instr(ldg, 2) + instr(fadd, waits=(2,)) + instr(ldg)) == ([0, 2], [2])
    assert exit_choice.schedule(instr(ldg, 2) + instr(fadd, waits=(3,)) + instr(ldg)) == ([0, 2], [])
    assert exit_choice.schedule(instr(fadd) + instr(ldg | 0xF000)) == ([1], [])  # a predicate's bits leave the opcode's alone


def test_the_layer_norm_exits_through_a_call_and_keeps_the_plain_kernel_s_load_order():
    plain, k = _build(LNORM, False), _build(LNORM)
    decided = k.profile["registers"]
    assert decided["exit"] == "call", decided
    assert decided["exit_schedule"]["late"] >= exit_choice.LATE
    assert "CALL" in listing(k.asm["cubin"]) and k.profile["layout"]["compact"]
    p = global_loads(instructions(listing(plain.asm["cubin"])))
    i = global_loads(instructions(listing(k.asm["cubin"])))
    assert len(p) == len(i) and max(b - a for a, b in zip(p, i)) <= 4, (p, i)


@pytest.mark.parametrize("case", [GATED, TANH], ids=["gated_silu", "tanh_affine"])
def test_kernels_whose_loads_the_inline_exit_leaves_in_place_keep_it(case):
    k = _build(case)
    decided = k.profile["registers"]
    assert decided["exit"] == "inline", decided
    assert "CALL" not in listing(k.asm["cubin"])


def test_the_environment_switch_makes_every_exit_inline(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ptx_lifetimes, "EXIT_CHOSEN", False)  # PROTON_LITE_EXIT_CALL=0
    k = _build(LNORM)
    assert "exit" not in k.profile["registers"] and "CALL" not in listing(k.asm["cubin"])


def test_a_kernel_with_scopes_is_not_offered_the_call():
    import kernels as K
    k = proton_lite.compile(K.softmax, {"x_ptr": "*fp32", "out_ptr": "*fp32", "stride": "i32", "n_cols": "i32"},
                            {"BLOCK": 4096}, instrument=True, num_warps=8, divisible_by_16=("x_ptr", "out_ptr"))
    assert "exit" not in k.profile["registers"] and not k.profile["layout"].get("compact")


def test_the_compile_report_says_which_exit_and_why(capsys, monkeypatch):
    """`proton-lite compile` tells a kernel author which form the pass chose and the SASS it read."""
    import json
    import re
    from proton_lite.viewer import cli
    args = ["compile", "tests/fixed_cost_kernels.py:layer_norm_rows", "--signature", "*fp16,*fp16,*fp16,*fp16,i32,i32,fp32",
            "--constexpr", "BLOCK=8192", "--num-warps", "16", "--divisible-by-16", "x_ptr,y_ptr,w_ptr,b_ptr,stride,n"]
    assert cli.main(args + ["--json"]) == 0
    regs = json.loads(capsys.readouterr().out)["registers"]
    assert regs["exit"] == "call" and regs["exit_schedule"]["late"] >= exit_choice.LATE
    monkeypatch.setenv("COLUMNS", "200")
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"exit\s+a call of a function of its own: built both ways; global loads behind another "
                     r"load's data \d+ inline, \d+ with the call; the inline build's latest load \+\d+ instructions", out), out
