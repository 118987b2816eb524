"""A matmul with a K loop, profiled with proton-lite: run it on a machine with an NVIDIA GPU.

    python docs/examples/matmul.py            # -> matmul.plraw, matmul.pftrace
    proton-lite summary matmul.plraw          # tables in the terminal
    proton-lite open matmul.pftrace           # the timeline in ui.perfetto.dev

Without a GPU, look at the capture of this script shipped beside it:
    proton-lite summary docs/examples/matmul.plraw
"""
import sys

import triton
import triton.language as tl

import proton_lite
import proton_lite.language as pl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    om = pid_m * BM + tl.arange(0, BM)
    on = pid_n * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    a_ptrs = a_ptr + om[:, None] * sam + ok[None, :] * sak
    b_ptrs = b_ptr + ok[:, None] * sbk + on[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    with pl.scope("mainloop"):
        for k in range(0, tl.cdiv(K, BK)):
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
    with pl.scope("epilogue"):
        tl.store(c_ptr + om[:, None] * scm + on[None, :] * scn, acc.to(tl.float16))


def matmul(a, b):
    import torch  # here, so that `proton-lite compile` can read the kernel where torch is missing
    M, K = a.shape
    _, N = b.shape
    c = torch.empty(M, N, device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128), )
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BM=128, BN=128, BK=64, num_warps=8, num_stages=3)
    return c


if __name__ == "__main__":
    import torch
    name = sys.argv[1] if len(sys.argv) > 1 else "matmul"
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    b = torch.randn(2048, 2048, device="cuda", dtype=torch.float16)
    expected = matmul(a, b)  # plain run: no instrumentation, no profile buffer
    with proton_lite.start(name, formats=("perfetto", "chrome")):
        for _ in range(3):
            c = matmul(a, b)
    assert torch.equal(c, expected), "profiling changed the result"
