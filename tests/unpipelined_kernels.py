"""Kernels with ``pl.scope(..., pipelined=False)`` (issue 28): the matmul and TMA matmul of
tests/test_pipelining.py with the option on the load scope, and one with no loop."""
import triton
import triton.language as tl

import proton_lite.language as pl


@triton.jit
def mm_kept(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    om = pid_m * BM + tl.arange(0, BM)
    on = pid_n * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    a_ptrs = a_ptr + om[:, None] * sam + ok[None, :] * sak
    b_ptrs = b_ptr + ok[:, None] * sbk + on[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        with pl.scope("load", pipelined=False):
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        with pl.scope("dot"):
            acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    tl.store(c_ptr + om[:, None] * scm + on[None, :] * scn, acc.to(tl.float16))


@triton.jit
def tma_mm_kept(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BK), num_stages=4):
        with pl.scope("load", pipelined=False):
            a = a_desc.load([pid_m * BM, k * BK])
            b = b_desc.load([k * BK, pid_n * BN])
        with pl.scope("dot"):
            acc = tl.dot(a, b, acc)
    om = pid_m * BM + tl.arange(0, BM)
    on = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc.to(tl.float16))


@triton.jit
def no_loop(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    with pl.scope("load", pipelined=False):
        x = tl.load(x_ptr + offs)
    tl.store(x_ptr + offs, x + 1)
