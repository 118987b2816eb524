"""The kernels of bench.py, apart from its harness so that they import without torch or a GPU
(tests/test_bench_kernels.py compiles each for sm_90 under the pass).

PROF: 0 plain, 1 proton-lite, 2 Proton; the scopes of the profiler PROF does not select
compile away.
"""
import triton
import triton.language as tl

import proton_lite.language as pl

try:
    import triton.profiler.language as ppl
except Exception:  # pragma: no cover  (a Triton without Proton: PROF=2 is not run)
    ppl = None

@triton.jit
def vadd(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr, PROF: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if PROF == 1:
        pl.enter_scope("load")
    if PROF == 2:
        ppl.enter_scope("load")
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    if PROF == 1:
        pl.exit_scope("load")
        pl.enter_scope("store")
    if PROF == 2:
        ppl.exit_scope("load")
        ppl.enter_scope("store")
    tl.store(o_ptr + offs, x + y, mask=m)
    if PROF == 1:
        pl.exit_scope("store")
    if PROF == 2:
        ppl.exit_scope("store")


@triton.jit
def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
       BK: tl.constexpr, PROF: tl.constexpr, PER_ITER: tl.constexpr):
    pid = tl.program_id(0)
    nn = tl.cdiv(N, BN)
    pm, pn = pid // nn, pid % nn
    om = pm * BM + tl.arange(0, BM)
    on = pn * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    ap = a_ptr + om[:, None] * sam + ok[None, :] * sak
    bp = b_ptr + ok[:, None] * sbk + on[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    if PROF == 1:
        pl.enter_scope("mainloop")
    if PROF == 2:
        ppl.enter_scope("mainloop")
    for k in range(0, tl.cdiv(K, BK)):
        if PER_ITER:
            if PROF == 1:
                pl.enter_scope("iter")
            if PROF == 2:
                ppl.enter_scope("iter")
        a = tl.load(ap)
        b = tl.load(bp)
        acc = tl.dot(a, b, acc)
        ap += BK * sak
        bp += BK * sbk
        if PER_ITER:
            if PROF == 1:
                pl.exit_scope("iter")
            if PROF == 2:
                ppl.exit_scope("iter")
    if PROF == 1:
        pl.exit_scope("mainloop")
        pl.enter_scope("epilogue")
    if PROF == 2:
        ppl.exit_scope("mainloop")
        ppl.enter_scope("epilogue")
    tl.store(c_ptr + om[:, None] * scm + on[None, :] * scn, acc.to(tl.float16))
    if PROF == 1:
        pl.exit_scope("epilogue")
    if PROF == 2:
        ppl.exit_scope("epilogue")


@triton.jit
def smax(x_ptr, o_ptr, stride, n, BLOCK: tl.constexpr, PROF: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=-float("inf"))
    if PROF == 1:
        pl.enter_scope("reduce")
    if PROF == 2:
        ppl.enter_scope("reduce")
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    if PROF == 1:
        pl.exit_scope("reduce")
        pl.enter_scope("store")
    if PROF == 2:
        ppl.exit_scope("reduce")
        ppl.enter_scope("store")
    tl.store(o_ptr + row * stride + cols, num / den, mask=m)
    if PROF == 1:
        pl.exit_scope("store")
    if PROF == 2:
        ppl.exit_scope("store")


@triton.jit
def record_cost(x_ptr, n_iter, INNER: tl.constexpr, FMAS: tl.constexpr = 1):
    """A loop of n_iter iterations, with (INNER) or without a scope around FMAS dependent
    FMAs per element (2 elements per thread with 2 warps): the records' cost per iteration
    is the difference. FMAS=1 is the tightest loop; longer bodies show what a record costs
    when the work of the iteration can hide the store's latency."""
    v = tl.load(x_ptr + tl.arange(0, 128))
    pl.enter_scope("loop")
    for i in range(n_iter):
        if INNER:
            pl.enter_scope("r")
        for _ in tl.static_range(FMAS):
            v = v * 1.000001 + 0.5
        if INNER:
            pl.exit_scope("r")
    pl.exit_scope("loop")
    tl.store(x_ptr + tl.arange(0, 128), v)


@triton.jit
def record_stream(PAIRS: tl.constexpr):
    """Back-to-back records, as in the calibration kernel, but an ordinary kernel: the pass
    gives its close records two register sets in turn (the calibration kernel keeps one)."""
    pl.enter_scope("stream")
    for _ in tl.static_range(PAIRS):
        pl.enter_scope("r")
        pl.exit_scope("r")
    pl.exit_scope("stream")


@triton.jit
def lnorm(x_ptr, y_ptr, w_ptr, b_ptr, stride, n, eps, BLOCK: tl.constexpr, PROF: tl.constexpr):
    """A row-wise layer norm, one row per program: statistics, then the normalized row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0).to(tl.float32)
    if PROF == 1:
        pl.enter_scope("stats")
    if PROF == 2:
        ppl.enter_scope("stats")
    mean = tl.sum(x, axis=0) / n
    xc = tl.where(m, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(xc * xc, axis=0) / n + eps)
    if PROF == 1:
        pl.exit_scope("stats")
        pl.enter_scope("normalize")
    if PROF == 2:
        ppl.exit_scope("stats")
        ppl.enter_scope("normalize")
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=m)
    if PROF == 1:
        pl.exit_scope("normalize")
    if PROF == 2:
        ppl.exit_scope("normalize")
