"""The TTIR record bound: exact for compile-time loop bounds, unknown for anything else."""
import pytest
import triton
import triton.language as tl

import proton_lite
import proton_lite.language as pl
from proton_lite.bound_expr import BoundError, arguments, evaluate
from proton_lite.layout import LAUNCH_SIZED_ALIGN
from proton_lite.passes.record_bound import record_bound, record_bound_expr


@triton.jit
def _shapes(x_ptr, flag, n, N: tl.constexpr, M: tl.constexpr, RUNTIME: tl.constexpr):
    offs = tl.arange(0, 128)
    v = tl.load(x_ptr + offs)
    pl.enter_scope("outer")
    for i in range(0, N):
        pl.enter_scope("it")
        for j in range(2, M, 3):  # len(range(2, M, 3)) trips
            with pl.scope("inner"):
                v = v + 1
        if flag > 0:  # a run-time branch: both sides count (an upper bound)
            with pl.scope("then"):
                v = v * 2
        else:
            with pl.scope("else"):
                v = v * 3
        pl.exit_scope("it")
    if RUNTIME:
        for k in range(n):
            with pl.scope("rt"):
                v = v * 0.5
    pl.exit_scope("outer")
    tl.store(x_ptr + offs, v)


def _ttir(N, M, RUNTIME=False):
    ck = proton_lite.compile(_shapes, {"x_ptr": "*fp32", "flag": "i32", "n": "i32"},
                             {"N": N, "M": M, "RUNTIME": RUNTIME})
    return ck.asm["ttir"], ck


@pytest.mark.parametrize("N,M", [(300, 11), (7, 30), (1, 3)])
def test_constant_loops_multiply_and_both_branches_count(N, M):
    ttir, ck = _ttir(N, M)
    expected = 2 + N * (2 + 2 * len(range(2, M, 3)) + 2 + 2)
    assert record_bound(ttir) == expected
    assert ck.profile["records_per_unit_max"] == expected


def test_a_loop_bound_from_a_kernel_argument_makes_it_unknown():
    ttir, ck = _ttir(300, 11, RUNTIME=True)
    assert record_bound(ttir) is None
    assert ck.profile["layout"]["capacity"] == 256  # loop_capacity, as before


def test_markers_outside_any_loop_count_once_and_no_markers_count_zero():
    ttir = """module {
  tt.func public @k(%arg0: !tt.ptr<f32>) attributes {noinline = false} {
    %0 = tt.elementwise_inline_asm "mov.u32 $0, 0; // @@proton_lite enter 61" {pure = false} -> i32 loc(#loc1)
    %1 = tt.elementwise_inline_asm "mov.u32 $0, 0; // @@proton_lite exit 61" {pure = false} -> i32 loc(#loc1)
    tt.return loc(#loc2)
  } loc(#loc)
} loc(#loc)"""
    assert record_bound(ttir) == 2
    assert record_bound(ttir.replace("@@proton_lite", "@@other")) == 0


def test_while_loops_zero_trips_negative_steps_and_called_functions():
    body = '      %m = tt.elementwise_inline_asm "// @@proton_lite enter 61" {pure = false} -> i32 loc(#l)\n'
    head = ("module {\n  tt.func public @k() {\n    %c0_i32 = arith.constant 0 : i32 loc(#l)\n"
            "    %c4_i32 = arith.constant 4 : i32 loc(#l)\n    %c-1_i32 = arith.constant -1 : i32 loc(#l)\n")
    tail = "    tt.return loc(#l)\n  } loc(#l)\n} loc(#l)"

    def loop(header):
        return head + header + body + "      scf.yield loc(#l)\n    } loc(#l)\n" + tail

    assert record_bound(loop("    scf.for %i = %c0_i32 to %c4_i32 step %c4_i32  : i32 {\n")) == 1
    assert record_bound(loop("    scf.for %i = %c4_i32 to %c0_i32 step %c4_i32  : i32 {\n")) == 0
    assert record_bound(loop("    scf.for %i = %c4_i32 to %c0_i32 step %c-1_i32  : i32 {\n")) is None
    assert record_bound(loop("    %w = scf.while (%a = %c0_i32) : (i32) -> i32 {\n")) is None
    called = (head + body + tail).replace("} loc(#l)\n} loc(#l)", "} loc(#l)\n  tt.func private @h() {\n"
                                          + body + "    tt.return loc(#l)\n  } loc(#l)\n} loc(#l)")
    assert record_bound(called) is None


# -- bounds from launch arguments ----------------------------------------------------------------------
@triton.jit
def _arg_loops(x_ptr, n, K, M, flag, BK: tl.constexpr):
    acc = 0.0
    for k in range(0, tl.cdiv(K, BK)):
        with pl.scope("k"):
            acc += tl.load(x_ptr + k)
    for j in range(2, M, 3):
        for i in range(0, n):
            with pl.scope("ij"):
                acc += tl.load(x_ptr + i + j)
    if flag > 0:
        pl.enter_scope("tail")
        pl.exit_scope("tail")
    tl.store(x_ptr, acc)


@triton.jit
def _pid_loop(x_ptr, n):
    for i in range(0, tl.program_id(0) + n):  # bounded by the program id: not known at launch
        with pl.scope("p"):
            tl.store(x_ptr + i, 1.0)


@triton.jit
def _loaded_loop(x_ptr):
    n = tl.load(x_ptr)  # bounded by memory contents: not known at launch
    for i in range(0, n.to(tl.int32)):
        with pl.scope("p"):
            tl.store(x_ptr + i, 1.0)


def _arg_loops_expected(n, K, M, BK=64):
    return 2 * len(range(0, -(-K // BK))) + 2 * len(range(2, M, 3)) * len(range(0, n)) + 2


@pytest.mark.parametrize("K_type,divisible", [("i32", ()), ("i64", ()), ("i32", ("x_ptr", "n", "K", "M"))])
def test_loops_bounded_by_arguments_give_an_expression_over_them(K_type, divisible):
    """Also when Triton specializes the bounds as multiples of 16, as its launcher does for
    values like K = 4096 (the argument then carries `{tt.divisibility = 16 : i32}`)."""
    ck = proton_lite.compile(_arg_loops, {"x_ptr": "*fp32", "n": "i32", "K": K_type, "M": "i32", "flag": "i32"},
                             {"BK": 64}, divisible_by_16=divisible)
    assert ("tt.divisibility = 16" in ck.asm["ttir"].split("loc(\"n\")")[0]) == bool(divisible)
    expr = record_bound_expr(ck.asm["ttir"])
    assert arguments(expr) == {"n", "K", "M"}
    for n, K, M in [(0, 0, 0), (5, 4096, 11), (7, 65, 2), (1, 1, 3), (300, 100_000, 40), (-3, -64, -7)]:
        assert evaluate(expr, {"n": n, "K": K, "M": M}) == _arg_loops_expected(n, K, M)
    assert ck.profile["records_per_unit_expr"] == expr and ck.profile["records_per_unit_max"] is None
    layout = ck.profile["layout"]
    assert layout["sized_at_launch"] and layout["staging"] == "global" and layout["capacity"] == 256
    assert ck.metadata["profile_scratch_align"] == LAUNCH_SIZED_ALIGN
    # 32-bit arithmetic wraps as on the GPU: K + 63 overflows for K near 2**31
    if K_type == "i32":
        assert evaluate(expr, {"n": 0, "K": 2**31 - 1, "M": 0}) == 2  # (K + 63) wraps negative: no trips


def test_loops_bounded_by_a_program_id_or_a_load_stay_unknown():
    pid = proton_lite.compile(_pid_loop, {"x_ptr": "*fp32", "n": "i32"})
    loaded = proton_lite.compile(_loaded_loop, {"x_ptr": "*fp32"})
    for ck in (pid, loaded):
        assert record_bound_expr(ck.asm["ttir"]) is None
        assert not ck.profile["layout"].get("sized_at_launch")
        assert ck.profile["layout"]["capacity"] == 256 and ck.metadata["profile_scratch_align"] == 16


def test_explicit_capacity_and_circular_mode_are_not_sized_at_launch():
    sig = {"x_ptr": "*fp32", "n": "i32", "K": "i32", "M": "i32", "flag": "i32"}
    fixed = proton_lite.compile(_arg_loops, sig, {"BK": 64}, capacity=100).profile["layout"]
    ring = proton_lite.compile(_arg_loops, sig, {"BK": 64}, buffer_mode="circular").profile["layout"]
    assert not fixed.get("sized_at_launch") and fixed["capacity"] == 100
    assert not ring.get("sized_at_launch") and ring["capacity"] == 256


@pytest.mark.parametrize("op,bits,a,b,expected", [
    ("divs", 32, -7, 2, -3), ("rems", 32, -7, 2, -1), ("ceildivs", 32, 7, 2, 4), ("ceildivs", 32, -7, 2, -3),
    ("floordivs", 32, -7, 2, -4), ("divu", 32, -1, 2, 2**31 - 1), ("remu", 8, -1, 7, 3),
    ("add", 32, 2**31 - 1, 1, -2**31), ("mul", 16, 300, 300, 90000 - 65536 * 1), ("maxu", 32, -1, 5, -1),
    ("mins", 64, -1, 5, -1), ("minu", 32, -1, 5, 5), ("sub", 8, -128, 1, 127)])
def test_integer_ops_follow_mlir_semantics(op, bits, a, b, expected):
    assert evaluate([op, bits, ["const", a], ["const", b]], {}) == expected


def test_casts_trips_and_bad_arguments():
    assert evaluate(["exts", 64, 32, ["const", 0xFFFFFFFF]], {}) == -1
    assert evaluate(["extu", 64, 32, ["const", -1]], {}) == 0xFFFFFFFF
    assert evaluate(["trunc", 8, 32, ["const", 0x1FF]], {}) == -1
    assert evaluate(["trips", ["const", 2], ["const", 11], ["const", 3]], {}) == 3
    assert evaluate(["trips", ["const", 5], ["const", 1], ["const", 1]], {}) == 0
    with pytest.raises(BoundError, match="step"):
        evaluate(["trips", ["const", 0], ["const", 4], ["arg", "s", 32]], {"s": 0})
    with pytest.raises(BoundError, match="missing"):
        evaluate(["arg", "n", 32], {})
    with pytest.raises(BoundError, match="not an int"):
        evaluate(["arg", "n", 32], {"n": 1.5})
    with pytest.raises(BoundError, match="division by zero"):
        evaluate(["divs", 32, ["const", 1], ["arg", "d", 32]], {"d": 0})
