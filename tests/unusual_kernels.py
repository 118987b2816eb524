"""Kernels of shapes users run that the other kernel files lack: a spin lock taken in a
data-dependent ``while`` loop (as layer-norm backwards accumulate partial sums), CTAs that
return early (and grids of none), a kernel launched with programmatic dependent launch (PDL),
a Hopper cluster of two CTAs (``num_ctas=2``), 32 warps per CTA, a debug build with device
asserts and inline PTX, helpers compiled as functions of their own
(``@triton.jit(noinline=True)``: a ``.func`` in the kernel's PTX, with its own ``ret``), a
grid-wide barrier in a cooperative launch, CTAs that live for seconds, a mixture-of-experts GEMM
routed by loaded expert ids and a decode step over a paged KV cache (the shapes of serving
libraries' fused MoE and paged attention).  Compiled on the CPU by tests/test_unusual_kernels.py,
run on the GPU by tests/test_gpu_unusual.py."""
import triton
import triton.language as tl

import proton_lite.language as pl


@triton.jit
def locked_accumulate(x_ptr, acc_ptr, lock_ptr, count_ptr, BLOCK: tl.constexpr, GROUPS: tl.constexpr):
    """Each CTA adds its row into one of GROUPS accumulators under a spin lock; the lock's
    ``while`` loop runs as often as other CTAs hold it (data-dependent, unbounded)."""
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    group = pid % GROUPS
    with pl.scope("load"):
        x = tl.load(x_ptr + pid * BLOCK + offs)
    lock = lock_ptr + group
    with pl.scope("acquire"):
        while tl.atomic_cas(lock, 0, 1) == 1:
            with pl.scope("spin"):
                tl.atomic_add(count_ptr + pid, 1)
    with pl.scope("update"):
        a = tl.load(acc_ptr + group * BLOCK + offs)
        tl.store(acc_ptr + group * BLOCK + offs, a + x)
        tl.debug_barrier()
        tl.atomic_xchg(lock, 0)


@triton.jit
def early_return(x_ptr, out_ptr, n_rows, BLOCK: tl.constexpr):
    """The grid has more CTAs than rows; the extra ones return before any scope."""
    pid = tl.program_id(0)
    if pid >= n_rows:
        return
    offs = tl.arange(0, BLOCK)
    with pl.scope("row"):
        x = tl.load(x_ptr + pid * BLOCK + offs)
        tl.store(out_ptr + pid * BLOCK + offs, x * 2.0)


@triton.jit
def pdl_scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Launched with ``launch_pdl=True``: waits for the kernel before it (gdc_wait) and lets
    the next one start early (gdc_launch_dependents)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.extra.cuda.gdc_wait()
    with pl.scope("scale"):
        x = tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * 3.0, mask=mask)
    tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def cluster_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Compiled with ``num_ctas=2``: each program is a cluster of two CTAs on Hopper."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("add"):
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def plain_count(x_ptr, n, BLOCK: tl.constexpr):
    """Scope-less and cluster-free: a plain kernel for PDL's first launch."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
    tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def wide_rows(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """Launched with 32 warps (1,024 threads, the most a CTA has): a unit per warp, 32 of them."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    with pl.scope("norm"):
        x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0)
        y = x / tl.sqrt(tl.sum(x * x) / n_cols + 1e-6)
    with pl.scope("store"):
        tl.store(out_ptr + row * n_cols + offs, y, mask=mask)


@triton.jit
def asserted_asm(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Compiled with ``debug=True`` (device asserts kept) and an inline-PTX elementwise op."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("check"):
        x = tl.load(x_ptr + offs, mask=mask, other=1.0)
        tl.device_assert(x > 0, "inputs are positive")
    with pl.scope("asm"):
        y = tl.inline_asm_elementwise("mul.f32 $0, $1, 0f40000000;", "=r,r", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)
        tl.store(out_ptr + offs, y, mask=mask)


@triton.jit(noinline=True)
def _row_sum_into(x_ptr, out_ptr, row, n_cols, BLOCK: tl.constexpr):
    """A helper compiled on its own (a ``.func`` with its own ``ret``), with a loop of its own."""
    acc = tl.zeros((BLOCK, ), tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc))


@triton.jit
def calls_helper(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """No scope: the CTAs' lifetimes only, around a call to a noinline helper."""
    _row_sum_into(x_ptr, out_ptr, tl.program_id(0), n_cols, BLOCK)


@triton.jit
def calls_helper_scoped(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """A scope around the call (where a scope for a noinline helper goes)."""
    with pl.scope("row_sum"):
        _row_sum_into(x_ptr, out_ptr, tl.program_id(0), n_cols, BLOCK)


@triton.jit(noinline=True)
def _scoped_helper(x_ptr, row, BLOCK: tl.constexpr):
    with pl.scope("inside_helper"):
        tl.store(x_ptr + row * BLOCK + tl.arange(0, BLOCK), tl.zeros((BLOCK, ), tl.float32))


@triton.jit
def scope_inside_helper(x_ptr, BLOCK: tl.constexpr):
    """A scope inside a noinline helper: refused at compile, with the scope's line."""
    _scoped_helper(x_ptr, tl.program_id(0), BLOCK)


@triton.jit
def printing_scale(x_ptr, n, BLOCK: tl.constexpr):
    """``tl.device_print`` (a call to ``vprintf``) beside a scope."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("scale"):
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(x_ptr + offs, x * 2, mask=offs < n)
    if tl.program_id(0) == 0:
        tl.device_print("first ", x)


@triton.jit
def grid_sync_normalize(x_ptr, partial_ptr, count_ptr, out_ptr, n, BLOCK: tl.constexpr, PROGRAMS: tl.constexpr):
    """Each CTA sums its block, every CTA waits at a grid-wide barrier (a counter they spin on,
    which needs all of them resident at once: ``launch_cooperative_grid=True``), then each
    divides its block by the grand total."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    with pl.scope("partial"):
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(partial_ptr + pid, tl.sum(x))
    with pl.scope("barrier"):
        tl.debug_barrier()
        tl.atomic_add(count_ptr, 1, sem="release")
        arrived = tl.atomic_add(count_ptr, 0, sem="acquire")
        while arrived < tl.num_programs(0):
            arrived = tl.atomic_add(count_ptr, 0, sem="acquire")
    with pl.scope("finish"):
        r = tl.arange(0, PROGRAMS)
        total = tl.sum(tl.load(partial_ptr + r, mask=r < tl.num_programs(0), other=0.0, cache_modifier=".cg"))
        tl.store(out_ptr + offs, x / total, mask=mask)


@triton.jit
def _globaltimer(like):
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [like], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def long_spin(out_ptr, step_ns, STEPS: tl.constexpr):
    """A CTA that lives for seconds (STEPS x step_ns): its records' 32-bit clocks wrap every
    ~2.15 s, as in persistent kernels that run that long."""
    t = tl.zeros((), tl.int64)
    with pl.scope("whole"):
        for i in range(STEPS):
            with pl.scope("step"):
                t0 = _globaltimer(i)
                t = t0
                while t - t0 < step_ns:
                    t = _globaltimer(i)
    tl.store(out_ptr + tl.program_id(0), t)


@triton.jit
def _zero_tile(c_ptr, stride_cm, offs_token, token_mask, pid_n, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + offs_token[:, None] * stride_cm + offs_n[None, :], tl.zeros((BLOCK_M, BLOCK_N), tl.float32),
             mask=token_mask[:, None] & (offs_n[None, :] < N))


@triton.jit
def routed_gemm(a_ptr, b_ptr, c_ptr, sorted_ids_ptr, expert_ids_ptr, padded_ptr, N, K, num_valid,
                stride_am, stride_be, stride_bk, stride_cm,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A mixture-of-experts GEMM shaped like serving libraries' fused MoE kernels: the padded
    token count and each block's expert are loaded, blocks past the count return at once,
    blocks of an expert not on this rank (-1) write zeros through a helper and return, the
    rest gather their tokens' rows and run a K loop of dots."""
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    if pid_m * BLOCK_M >= tl.load(padded_ptr):
        return
    offs_token = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    token_mask = offs_token < num_valid
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    if expert == -1:
        with pl.scope("zeros"):
            _zero_tile(c_ptr, stride_cm, offs_token, token_mask, pid_n, N, BLOCK_M, BLOCK_N)
        return
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_token[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + expert * stride_be + offs_k[:, None] * stride_bk + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        with pl.scope("k step"):
            a = tl.load(a_ptrs, mask=token_mask[:, None] & (offs_k[None, :] < K - k * BLOCK_K), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & (offs_n[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    with pl.scope("store"):
        tl.store(c_ptr + offs_token[:, None] * stride_cm + offs_n[None, :], acc,
                 mask=token_mask[:, None] & (offs_n[None, :] < N))


@triton.jit
def paged_decode(q_ptr, k_cache_ptr, v_cache_ptr, block_table_ptr, seq_lens_ptr, out_ptr, scale,
                 MAX_BLOCKS: tl.constexpr, PAGE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """One decode step of attention over a paged KV cache, shaped like serving libraries'
    paged attention: per (sequence, head) CTA, the sequence's length is loaded and its pages
    are walked through a block table, so each CTA's trip count is data-dependent."""
    seq = tl.program_id(0)
    head = tl.program_id(1)
    n_heads = tl.num_programs(1)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_p = tl.arange(0, PAGE)
    q = tl.load(q_ptr + (seq * n_heads + head) * HEAD_DIM + offs_d)
    seq_len = tl.load(seq_lens_ptr + seq)
    m_i = -float("inf")
    l_i = 0.0
    acc = tl.zeros((HEAD_DIM, ), tl.float32)
    for blk in range(0, tl.cdiv(seq_len, PAGE)):
        with pl.scope("page"):
            page = tl.load(block_table_ptr + seq * MAX_BLOCKS + blk)
            base = (page * n_heads + head) * PAGE * HEAD_DIM
            valid = blk * PAGE + offs_p < seq_len
            k = tl.load(k_cache_ptr + base + offs_p[:, None] * HEAD_DIM + offs_d[None, :], mask=valid[:, None],
                        other=0.0)
            s = tl.where(valid, tl.sum(k * q[None, :], 1) * scale, -float("inf"))
            m_new = tl.maximum(m_i, tl.max(s, 0))
            p = tl.exp(s - m_new)
            alpha = tl.exp(m_i - m_new)
            v = tl.load(v_cache_ptr + base + offs_p[:, None] * HEAD_DIM + offs_d[None, :], mask=valid[:, None],
                        other=0.0)
            acc = acc * alpha + tl.sum(p[:, None] * v, 0)
            l_i = l_i * alpha + tl.sum(p, 0)
            m_i = m_new
    tl.store(out_ptr + (seq * n_heads + head) * HEAD_DIM + offs_d, acc / l_i)
