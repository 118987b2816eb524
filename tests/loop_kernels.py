"""Kernels with the loop shapes users profile: grid-stride, persistent, data-dependent.

Each takes ``SCOPES`` (a constexpr): with it, a scope per iteration; without, the plain
twin whose outputs the instrumented run must equal bit for bit.  ``trips(...)`` helpers
in tests/test_gpu_pool.py compute, on the host, how many times each program runs each
loop: the slice counts the decoder must find.
"""
import triton
import triton.language as tl

import proton_lite.language as pl


@triton.jit
def grid_stride_softmax(x_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr, SCOPES: tl.constexpr):
    """Rows pid, pid + P, ... (P programs): program-id-dependent trip counts."""
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        if SCOPES:
            pl.enter_scope("row")
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, 0))
        tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, 0), mask=cols < n_cols)
        if SCOPES:
            pl.exit_scope("row")


@triton.jit
def persistent_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                      SCOPES: tl.constexpr):
    """A persistent tile loop over ``range(pid, tiles, num_programs)``, a K loop inside."""
    tiles_n = tl.cdiv(N, BN)
    tiles = tl.cdiv(M, BM) * tiles_n
    for tile in range(tl.program_id(0), tiles, tl.num_programs(0)):
        if SCOPES:
            pl.enter_scope("tile")
        om = (tile // tiles_n) * BM + tl.arange(0, BM)
        on = (tile % tiles_n) * BN + tl.arange(0, BN)
        ok = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            if SCOPES:
                pl.enter_scope("k")
            a = tl.load(a_ptr + om[:, None] * K + (k + ok)[None, :])
            b = tl.load(b_ptr + (k + ok)[:, None] * N + on[None, :])
            acc = tl.dot(a, b, acc)
            if SCOPES:
                pl.exit_scope("k")
        tl.store(c_ptr + om[:, None] * N + on[None, :], acc.to(tl.float16))
        if SCOPES:
            pl.exit_scope("tile")


@triton.jit
def segment_sum(offs_ptr, x_ptr, out_ptr, D: tl.constexpr, SCOPES: tl.constexpr):
    """Varlen rows: program p sums rows offs[p] .. offs[p + 1] (bounds loaded from memory)."""
    pid = tl.program_id(0)
    start = tl.load(offs_ptr + pid)
    end = tl.load(offs_ptr + pid + 1)
    cols = tl.arange(0, D)
    acc = tl.zeros((D, ), tl.float32)
    for r in range(start, end):
        if SCOPES:
            pl.enter_scope("row")
        acc += tl.load(x_ptr + r * D + cols)
        if SCOPES:
            pl.exit_scope("row")
    tl.store(out_ptr + pid * D + cols, acc)


@triton.jit
def nested_segments(offs_ptr, lens_ptr, x_ptr, out_ptr, D: tl.constexpr, SCOPES: tl.constexpr):
    """Two data-dependent loops, nested: rows of a segment, then a per-row number of steps."""
    pid = tl.program_id(0)
    cols = tl.arange(0, D)
    acc = tl.zeros((D, ), tl.float32)
    for r in range(tl.load(offs_ptr + pid), tl.load(offs_ptr + pid + 1)):
        if SCOPES:
            pl.enter_scope("row")
        v = tl.load(x_ptr + r * D + cols)
        for _ in range(0, tl.load(lens_ptr + r)):
            if SCOPES:
                pl.enter_scope("step")
            v = v * 0.5 + 1.0
            if SCOPES:
                pl.exit_scope("step")
        acc += v
        if SCOPES:
            pl.exit_scope("row")
    tl.store(out_ptr + pid * D + cols, acc)


@triton.jit
def countdown(n_ptr, out_ptr, SCOPES: tl.constexpr):
    """A while loop: halve until below 1 or 64 steps, whichever comes first (an early exit)."""
    pid = tl.program_id(0)
    x = tl.load(n_ptr + pid)
    steps = 0
    while (x >= 1.0) & (steps < 64):
        if SCOPES:
            pl.enter_scope("halve")
        x = x * 0.5
        steps += 1
        if SCOPES:
            pl.exit_scope("halve")
    tl.store(out_ptr + pid, steps)
