"""Kernels that meet across GPUs and the host through a mailbox in pinned host memory:
the clock tests (tests/test_gpu_clocks.py) check that a waiter's release comes after its
signal on the one time axis the anchors give. Words: 0 = the waiter started, 1 = go."""
import triton
import triton.language as tl

import proton_lite.language as pl


@triton.jit
def waiter(box_ptr, LIMIT: tl.constexpr):
    tl.store(box_ptr + 0, 1)  # started
    with pl.scope("wait"):
        i = 0
        while (tl.load(box_ptr + 1, volatile=True) == 0) & (i < LIMIT):
            i += 1


@triton.jit
def signaler(box_ptr, LIMIT: tl.constexpr):
    i = 0
    while (tl.load(box_ptr + 0, volatile=True) == 0) & (i < LIMIT):  # the waiter is spinning
        i += 1
    with pl.scope("signal"):
        tl.store(box_ptr + 1, 1)
