"""Warp-specialized test kernels (``tl.range(..., warp_specialize=True)``), with scopes in the loop
that Triton splits into partitions, and their plain twins.

Triton runs such kernels with more warps than ``num_warps`` asks for (4 requested: 12 on
sm_90, 8 on sm_100); the CPU and GPU tests check that every buffer is sized for the warps
that run.
"""
import triton
import triton.language as tl

import proton_lite.language as pl


@triton.jit
def ws_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
              SCOPES: tl.constexpr, WS: tl.constexpr = True):
    """C = A @ B.T with TMA loads; one output tile per program, the K loop warp-specialized
    (``WS=False``: the same loop, not specialized)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BN)
    off_m = (pid // tiles_n) * BM
    off_n = (pid % tiles_n) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(tl.cdiv(K, BK), warp_specialize=WS, num_stages=3):
        if SCOPES:
            pl.enter_scope("load")
        a = a_desc.load((off_m, k * BK))
        b = b_desc.load((off_n, k * BK))
        if SCOPES:
            pl.exit_scope("load")
            pl.enter_scope("mma")
        acc = tl.dot(a, b.T, acc)
        if SCOPES:
            pl.exit_scope("mma")
    if SCOPES:
        with pl.scope("epilogue"):
            c_desc.store((off_m, off_n), acc.to(tl.float16))
    else:
        c_desc.store((off_m, off_n), acc.to(tl.float16))


@triton.jit
def ws_attention(q_ptr, k_ptr, v_ptr, o_ptr, N_CTX, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr,
                 SCOPES: tl.constexpr, WS: tl.constexpr = True):
    """An attention-like loop: S = Q K^T, online softmax, O += P V; one (BM, D) block of Q per
    program, the loop over key blocks warp-specialized."""
    q_desc = tl.make_tensor_descriptor(q_ptr, shape=[N_CTX, D], strides=[D, 1], block_shape=[BM, D])
    k_desc = tl.make_tensor_descriptor(k_ptr, shape=[N_CTX, D], strides=[D, 1], block_shape=[BN, D])
    v_desc = tl.make_tensor_descriptor(v_ptr, shape=[N_CTX, D], strides=[D, 1], block_shape=[BN, D])
    o_desc = tl.make_tensor_descriptor(o_ptr, shape=[N_CTX, D], strides=[D, 1], block_shape=[BM, D])
    off_m = tl.program_id(0) * BM
    q = q_desc.load((off_m, 0))
    m_i = tl.full((BM, ), -float("inf"), tl.float32)
    l_i = tl.zeros((BM, ), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in tl.range(0, N_CTX, BN, warp_specialize=WS):
        if SCOPES:
            pl.enter_scope("qk")
        k = k_desc.load((start, 0))
        s = tl.dot(q, k.T)
        if SCOPES:
            pl.exit_scope("qk")
            pl.enter_scope("softmax")
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        m_i = m_new
        if SCOPES:
            pl.exit_scope("softmax")
            pl.enter_scope("pv")
        v = v_desc.load((start, 0))
        acc = tl.dot(p.to(tl.float16), v, acc)
        if SCOPES:
            pl.exit_scope("pv")
    o_desc.store((off_m, 0), (acc / l_i[:, None]).to(tl.float16))


WS_MATMUL_SIG = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
WS_MATMUL_CONST = dict(BM=128, BN=128, BK=64)
WS_ATTENTION_SIG = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16", "N_CTX": "i32"}
WS_ATTENTION_CONST = dict(BM=64, BN=64, D=64)  # BM=128: Triton 3.6 computes NaNs when it warp-specializes this loop (H100, also without proton-lite)


@triton.jit
def ws_index_scope(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """A warp-specialized loop with a scope around index arithmetic only ("offsets": no
    partition does work of it, so it cannot be placed and is reported) beside one around the
    loads ("load": placed in the partition that issues them)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BN)
    off_m = (pid // tiles_n) * BM
    off_n = (pid % tiles_n) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(tl.cdiv(K, BK), warp_specialize=True, num_stages=3):
        with pl.scope("offsets"):
            off_k = k * BK
        with pl.scope("load"):
            a = a_desc.load((off_m, off_k))
            b = b_desc.load((off_n, off_k))
        acc = tl.dot(a, b.T, acc)
    c_desc.store((off_m, off_n), acc.to(tl.float16))


@triton.jit
def ws_persistent(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  NUM_SMS: tl.constexpr):
    """A persistent matmul whose tile loop is warp-specialized and flattened with its K loop
    (Blackwell's pattern: sm_100 only; Triton 3.6 and 3.9 leave it unspecialized on sm_90)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BN, BK])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    tiles_n = tl.cdiv(N, BN)
    num_tiles = tl.cdiv(M, BM) * tiles_n
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True, warp_specialize=True):
        off_m = (tile // tiles_n) * BM
        off_n = (tile % tiles_n) * BN
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(tl.cdiv(K, BK)):
            with pl.scope("load"):
                a = a_desc.load((off_m, k * BK))
                b = b_desc.load((off_n, k * BK))
            with pl.scope("mma"):
                acc = tl.dot(a, b.T, acc)
        with pl.scope("store"):
            c_desc.store((off_m, off_n), acc.to(tl.float16))
