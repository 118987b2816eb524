"""Profile loops whose trip counts differ per program or are read from memory (needs a GPU).

    python docs/examples/loops.py [OUT_PREFIX]

A grid-stride row loop and a varlen segment loop (its bounds loaded from an offsets
table, some segments 100x the median), each with a scope per iteration, in a default
session: every record is kept. A third session gives the varlen kernel a 1 MiB pool on
purpose, to show what the stop line says when a pool runs out.
"""
import sys

import torch
import triton
import triton.language as tl

import proton_lite
import proton_lite.language as pl


@triton.jit
def grid_stride_softmax(x_ptr, o_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        with pl.scope("row"):
            x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
            e = tl.exp(x - tl.max(x, 0))
            tl.store(o_ptr + row * n_cols + cols, e / tl.sum(e, 0), mask=cols < n_cols)


@triton.jit
def segment_sum(offs_ptr, x_ptr, o_ptr, D: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, D)
    acc = tl.zeros((D, ), tl.float32)
    for r in range(tl.load(offs_ptr + pid), tl.load(offs_ptr + pid + 1)):
        with pl.scope("row"):
            acc += tl.load(x_ptr + r * D + cols)
    tl.store(o_ptr + pid * D + cols, acc)


def main(prefix="loops"):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn(65536, 1024, device="cuda")
    o = torch.empty_like(x)
    lens = torch.randint(10, 30, (1024, ))
    lens[::16] = 2000
    offs = torch.zeros(1025, dtype=torch.int32)
    offs[1:] = torch.cumsum(lens, 0)
    rows = torch.randn(int(offs[-1]), 128, device="cuda")
    sums = torch.empty(1024, 128, device="cuda")
    offs = offs.cuda()
    with proton_lite.start(f"{prefix}_grid_stride"):
        grid_stride_softmax[(2 * sms, )](x, o, 65536, 1024, BLOCK=1024)
    with proton_lite.start(f"{prefix}_segments"):
        segment_sum[(1024, )](offs, rows, sums, D=128)
    with proton_lite.start(f"{prefix}_small_pool", pool_mb=1):
        segment_sum[(1024, )](offs, rows, sums, D=128)


if __name__ == "__main__":
    main(*sys.argv[1:])
