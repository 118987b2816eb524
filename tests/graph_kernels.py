"""Kernels for the CUDA graph tests and benchmark: one with scopes, one with a grid-stride
loop of scopes (sized at launch from its arguments), one scope-less, and one whose loop
count is read from memory (a launch pool)."""
import triton
import triton.language as tl

import proton_lite.language as pl


@triton.jit
def scale_scoped(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("load"):
        x = tl.load(x_ptr + offs, mask=mask)
    with pl.scope("store"):
        tl.store(out_ptr + offs, x * 2.0 + 1.0, mask=mask)


@triton.jit
def grid_stride_sum(x_ptr, out_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        with pl.scope("row"):
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
            tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def add_plain(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def count_down(n_ptr, out_ptr):
    pid = tl.program_id(0)
    n = tl.load(n_ptr + pid)
    acc = 0
    while n > 0:
        with pl.scope("step"):
            acc += n
            n -= 1
    tl.store(out_ptr + pid, acc)
