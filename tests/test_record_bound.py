"""The TTIR record bound: exact for compile-time loop bounds, unknown for anything else."""
import pytest
import triton
import triton.language as tl

import proton_lite
import proton_lite.language as pl
from proton_lite.passes.record_bound import record_bound


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
