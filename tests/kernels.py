"""Annotated test kernels, each with a plain twin (same code without scopes) and its expected records.

``expected_records_per_warp`` gives, for each kernel, the records one warp writes; the
CPU tests compare it with the record sites in the PTX and the GPU tests with the buffer.
"""
import triton
import triton.language as tl

import proton_lite.language as pl


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    pl.enter_scope("load")
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    pl.exit_scope("load")
    with pl.scope("store"):
        tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def vector_add_plain(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


@triton.jit
def softmax(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    with pl.scope("reduce"):
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        den = tl.sum(num, axis=0)
    with pl.scope("store"):
        tl.store(out_ptr + row * stride + cols, num / den, mask=mask)


@triton.jit
def softmax_plain(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(out_ptr + row * stride + cols, num / den, mask=mask)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PER_ITER: tl.constexpr):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_n
    pid_n = pid % num_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    pl.enter_scope("mainloop")
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if PER_ITER:
            pl.enter_scope("iteration")
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        if PER_ITER:
            pl.exit_scope("iteration")
    pl.exit_scope("mainloop")
    with pl.scope("epilogue"):
        c = acc.to(tl.float16)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def matmul_plain(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PER_ITER: tl.constexpr):
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_n
    pid_n = pid % num_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(tl.float16)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def loop_scopes(x_ptr, n_iter, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    for i in range(n_iter):
        pl.enter_scope("step")
        acc = acc * 1.0001 + 1.0
        pl.exit_scope("step")
    tl.store(x_ptr + offs, acc)


@triton.jit
def const_loop(x_ptr, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    """A scope in a loop whose trip count is a constexpr: the buffer is sized exactly."""
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    for i in range(0, STEPS):
        with pl.scope("step"):
            acc = acc * 1.0001 + 1.0
    tl.store(x_ptr + offs, acc)


@triton.jit
def nested(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    with pl.scope("outer"):
        x = tl.load(x_ptr + offs)
        with pl.scope("inner"):
            x = x * 2.0 + 1.0
            pl.enter_scope("innermost")
            x = tl.sqrt(tl.abs(x))
            pl.exit_scope("innermost")
        tl.store(x_ptr + offs, x)


@pl.scope("load_tile")
@triton.jit
def load_tile(ptr, offs):
    return tl.load(ptr + offs)


@triton.jit
def helper_twice(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = load_tile(x_ptr, offs)
    y = load_tile(y_ptr, offs)
    tl.store(out_ptr + offs, x + y)


def signature(kernel):
    """Argument types for compiling each test kernel without a GPU."""
    name = kernel.__name__.removesuffix("_plain")
    if name == "vector_add":
        return {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}
    if name == "softmax":
        return {"x_ptr": "*fp32", "out_ptr": "*fp32", "stride": "i32", "n_cols": "i32"}
    if name == "matmul":
        sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16"}
        sig.update({n: "i32" for n in ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                                        "stride_cm", "stride_cn")})
        return sig
    if name == "loop_scopes":
        return {"x_ptr": "*fp32", "n_iter": "i32"}
    if name == "const_loop":
        return {"x_ptr": "*fp32"}
    if name == "nested":
        return {"x_ptr": "*fp32"}
    if name == "helper_twice":
        return {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"}
    raise KeyError(name)


# kernel name -> (constexprs, num_warps, static record sites, scopes)
CASES = {
    "vector_add": (vector_add, {"BLOCK": 1024}, 4, 4, ["load", "store"]),
    "softmax": (softmax, {"BLOCK": 1024}, 4, 4, ["reduce", "store"]),
    "matmul": (matmul, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "PER_ITER": False}, 8, 4,
               ["mainloop", "epilogue"]),
    "matmul_per_iter": (matmul, {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "PER_ITER": True}, 8, 6,
                        ["mainloop", "iteration", "epilogue"]),
    "loop_scopes": (loop_scopes, {"BLOCK": 128}, 4, 2, ["step"]),
    "const_loop": (const_loop, {"BLOCK": 128, "STEPS": 300}, 4, 2, ["step"]),
    "nested": (nested, {"BLOCK": 128}, 4, 6, ["outer", "inner", "innermost"]),
    "helper_twice": (helper_twice, {"BLOCK": 128}, 4, 4, ["load_tile"]),
}

PLAIN_TWINS = {"vector_add": vector_add_plain, "softmax": softmax_plain, "matmul": matmul_plain}
