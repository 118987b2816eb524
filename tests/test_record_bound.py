"""The TTIR record bound: exact for compile-time loop bounds, per launch for bounds from arguments and
program ids, unknown for anything else."""
import pytest
import triton
import triton.language as tl

import numpy as np

import proton_lite
import proton_lite.language as pl

from proton_lite.bound_expr import (CMP_PREDICATES, MAX_PROGRAMS_EVALUATED, BoundError, _vector, arguments, evaluate,
                                    max_over_programs, reads_grid)
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
    assert layout["sized_at_launch"] and layout["capacity"] == 256
    # stored to global memory, or staged in blocks copied to the same unit blocks (ptx_staging.py)
    assert (layout["staging"], layout.get("flush_slots", 0)) in (("global", 0), ("shared", 64))
    assert layout["overflow"] == "sink"
    assert ck.metadata["profile_scratch_align"] == LAUNCH_SIZED_ALIGN
    # 32-bit arithmetic wraps as on the GPU: K + 63 overflows for K near 2**31
    if K_type == "i32":
        assert evaluate(expr, {"n": 0, "K": 2**31 - 1, "M": 0}) == 2  # (K + 63) wraps negative: no trips


def test_loops_bounded_by_a_load_stay_unknown():
    loaded = proton_lite.compile(_loaded_loop, {"x_ptr": "*fp32"})
    assert record_bound_expr(loaded.asm["ttir"]) is None
    assert loaded.profile["records_per_unit_expr"] is None


@triton.jit
def _grid_stride(x_ptr, n_rows):
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):  # a grid-stride row loop
        with pl.scope("row"):
            tl.store(x_ptr + row, 1.0)


@triton.jit
def _persistent(x_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):  # a persistent tile loop
        with pl.scope("tile"):
            for k in range(0, K, BK):  # nested: bounded by an argument
                with pl.scope("k"):
                    tl.store(x_ptr + tile + k, 1.0)


@triton.jit
def _causal(x_ptr, BM: tl.constexpr, BN: tl.constexpr):
    hi = (tl.program_id(0) + 1) * BM
    hi = tl.minimum(hi, tl.program_id(1) * 0 + 4096)  # a min, as causal attention kernels clip the bound
    for start in range(0, hi, BN):
        with pl.scope("block"):
            tl.store(x_ptr + start, 1.0)


@triton.jit
def _two_axes(x_ptr, n):
    pid_y = tl.program_id(1)
    lo = tl.where(pid_y % 2 == 0, 0, n)  # a select on a comparison of program ids
    for i in range(lo, n * 2 + pid_y):
        with pl.scope("p"):
            tl.store(x_ptr + i, 1.0)


def _brute(per_program, grid):
    return max(per_program(x, y, z) for x in range(grid[0]) for y in range(grid[1]) for z in range(grid[2]))


PROGRAM_CASES = {
    "grid_stride": (_grid_stride, {"x_ptr": "*fp32", "n_rows": "i32"}, {},
                    [({"n_rows": n}, g) for n, g in [(65536, (264, 1, 1)), (100, (264, 1, 1)), (7, (3, 1, 1)),
                                                     (0, (5, 1, 1)), (1000, (1, 1, 1))]],
                    lambda a, g: lambda x, y, z: 2 * len(range(x, a["n_rows"], g[0]))),
    "persistent": (_persistent, {"x_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"},
                   {"BM": 128, "BN": 128, "BK": 64},
                   [({"M": m, "N": n, "K": k}, g) for m, n, k, g in [(4096, 4096, 4096, (132, 1, 1)),
                                                                    (300, 129, 65, (5, 1, 1)),
                                                                    (128, 128, 64, (132, 1, 1))]],
                   lambda a, g: lambda x, y, z: len(range(x, -(-a["M"] // 128) * -(-a["N"] // 128), g[0])) * (
                       2 + 2 * len(range(0, a["K"], 64)))),
    "causal": (_causal, {"x_ptr": "*fp32"}, {"BM": 128, "BN": 64},
               [({}, (16, 1, 1)), ({}, (64, 2, 1)), ({}, (1, 1, 1))],
               lambda a, g: lambda x, y, z: 2 * len(range(0, min((x + 1) * 128, 4096), 64))),
    "two_axes": (_two_axes, {"x_ptr": "*fp32", "n": "i32"}, {},
                 [({"n": 5}, (3, 4, 1)), ({"n": 100}, (1, 7, 2)), ({"n": 0}, (2, 2, 1))],
                 lambda a, g: lambda x, y, z: 2 * len(range(0 if y % 2 == 0 else a["n"], 2 * a["n"] + y))),
}


@pytest.mark.parametrize("case", list(PROGRAM_CASES))
def test_loops_bounded_by_program_ids_are_sized_from_the_busiest_program(case):
    kernel, sig, const, launches, per_program = PROGRAM_CASES[case]
    ck = proton_lite.compile(kernel, sig, const)
    expr = record_bound_expr(ck.asm["ttir"])
    assert expr is not None and reads_grid(expr)
    assert ck.profile["records_per_unit_expr"] == expr and ck.profile["layout"]["sized_at_launch"]
    for args, grid in launches:
        assert max_over_programs(expr, args, grid) == _brute(per_program(args, grid), grid), (args, grid)
        # one program at a time, as the scalar evaluator sees it
        for x in {0, grid[0] - 1}:
            programs = {"pid0": x, "pid1": 0, "pid2": 0, "nprog0": grid[0], "nprog1": grid[1], "nprog2": grid[2]}
            assert evaluate(expr, args, programs) == per_program(args, grid)(x, 0, 0)
    with pytest.raises(BoundError, match="program id|grid"):
        evaluate(expr, launches[0][0])  # without programs: a clear error, never a guess


def test_the_program_id_evaluator_wraps_as_the_scalar_one():
    """Every op, on int64 arrays of program ids, gives what ``evaluate`` gives for each id."""
    ops = ["add", "sub", "mul", "divs", "divu", "ceildivs", "floordivs", "rems", "remu", "maxs", "mins", "maxu",
           "minu"]
    for op in ops:
        for bits in (8, 32, 64):
            for const in (-7, 3, 2**31 - 1, -2**40 if bits == 64 else -5):
                expr = [op, bits, ["sub", bits, ["mul", bits, ["pid", 0], ["const", 3]], ["const", 11]],
                        ["const", const]]
                for pid in range(0, 9):
                    scalar = evaluate(expr, {}, {"pid0": pid})
                    assert max_over_programs(expr, {}, (pid + 1, 1, 1)) >= scalar
                got = [int(_vector(expr, {}, {"pid0": np.array([p])})[0]) for p in range(9)]
                assert got == [evaluate(expr, {}, {"pid0": p}) for p in range(9)], (op, bits, const)
    for pred in CMP_PREDICATES:
        expr = ["select", ["cmp", pred, 32, ["pid", 0], ["const", 4]], ["const", 10], ["add", 32, ["pid", 0],
                                                                                         ["const", -1]]]
        got = [int(v) for v in _vector(expr, {}, {"pid0": np.arange(-3, 9)})]
        assert got == [evaluate(expr, {}, {"pid0": p}) for p in range(-3, 9)], pred


def test_huge_grids_are_refused_rather_than_guessed():
    expr = ["trips", ["pid", 0], ["const", 10], ["nprog", 0]]
    with pytest.raises(BoundError, match="programs"):
        max_over_programs(expr, {}, (MAX_PROGRAMS_EVALUATED + 1, 1, 1))
    assert max_over_programs(expr, {}, (0, 1, 1)) == 0


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
