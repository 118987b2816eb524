"""Scope-less kernels shaped like the production kernels of issue 24 (liger-kernel's norms,
gated activations and their backward passes): written here, for the fixed-cost benchmark
(tests/benchmarks/fixed_cost.py) and its CPU checks.  Row-wise kernels run one row per
program with 8-16 warps; the persistent reduction loops over rows on a grid of SMs; the
backward of a 2-D grid reduces a weight gradient per (row block, column block)."""
import triton
import triton.language as tl


@triton.jit
def rms_norm_fwd(x_ptr, w_ptr, y_ptr, rstd_ptr, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride + cols, x * rstd * w, mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def dyt_bwd(x_ptr, dy_ptr, dx_ptr, alpha_ptr, gamma_ptr, dalpha_ptr, dgamma_ptr, n_rows, n_cols, stride,
            BLOCK: tl.constexpr):
    """dy/dx of gamma * tanh(alpha * x), with per-program partial sums of dalpha and dgamma."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    alpha = tl.load(alpha_ptr)
    gamma = tl.load(gamma_ptr + cols, mask=mask, other=0.0)
    da = tl.zeros([BLOCK], tl.float32)
    dg = tl.zeros([BLOCK], tl.float32)
    for row in range(pid, n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        dy = tl.load(dy_ptr + row * stride + cols, mask=mask, other=0.0)
        e = tl.exp(-2.0 * tl.abs(alpha * x))
        t = tl.where(alpha * x >= 0, 1.0, -1.0) * (1.0 - e) / (1.0 + e)
        g = dy * gamma * (1.0 - t * t)
        tl.store(dx_ptr + row * stride + cols, g * alpha, mask=mask)
        da += g * x
        dg += dy * t
    tl.store(dalpha_ptr + pid, tl.sum(da, axis=0))
    tl.store(dgamma_ptr + pid * n_cols + cols, dg, mask=mask)


@triton.jit
def geglu_tanh_bwd(dc_ptr, a_ptr, b_ptr, da_ptr, db_ptr, stride, n_cols, BLOCK: tl.constexpr):
    """Backward of gelu_tanh(a) * b, one row per program."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dc = tl.load(dc_ptr + row * stride + cols, mask=mask, other=0.0)
    a = tl.load(a_ptr + row * stride + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + row * stride + cols, mask=mask, other=0.0)
    k = 0.7978845608028654 * (a + 0.044715 * a * a * a)
    e = tl.exp(-2.0 * tl.abs(k))
    t = tl.where(k >= 0, 1.0, -1.0) * (1.0 - e) / (1.0 + e)
    gelu = 0.5 * a * (1.0 + t)
    dgelu = 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * a * a)
    tl.store(db_ptr + row * stride + cols, dc * gelu, mask=mask)
    tl.store(da_ptr + row * stride + cols, dc * b * dgelu, mask=mask)


@triton.jit
def persistent_row_sum(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def grad_weight_2d(x_ptr, dy_ptr, dw_ptr, n_rows, n_cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """Partial dW = sum over a block of rows of x * dy, per (row block, column block)."""
    rb = tl.program_id(0)
    cb = tl.program_id(1)
    cols = cb * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for r in range(0, ROWS):
        row = rb * ROWS + r
        ok = mask & (row < n_rows)
        acc += tl.load(x_ptr + row * stride + cols, mask=ok, other=0.0) * \
            tl.load(dy_ptr + row * stride + cols, mask=ok, other=0.0)
    tl.store(dw_ptr + rb * n_cols + cols, acc, mask=mask)


@triton.jit
def gated_silu_fwd(a_ptr, b_ptr, c_ptr, stride, scale, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    """silu(scale * a) * b, one row per program: a gated activation's forward, whose two
    loads per element ptxas issues back to back."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    a = tl.load(a_ptr + row * stride + cols, mask=mask, other=0.0) * scale
    b = tl.load(b_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(c_ptr + row * stride + cols, a / (1.0 + tl.exp(-a)) * b, mask=mask)


@triton.jit
def tanh_affine_fwd(x_ptr, y_ptr, alpha_ptr, w_ptr, b_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    """w * tanh(alpha * x) + b, one row per program, the block wider than the row (a dynamic
    tanh norm's forward): ptxas issues the bias load after the tanh; under some of our code
    it also split the row's loads around the math (docs/design.md)."""
    cols = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    row = tl.program_id(1).to(tl.int64)
    alpha = tl.load(alpha_ptr).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    t = 2.0 / (1.0 + tl.exp(-2.0 * alpha * x)) - 1.0
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * N + cols, t * w + b, mask=mask)


@triton.jit
def row_cross_entropy(x_ptr, target_ptr, loss_ptr, stride, n_cols, BLOCK: tl.constexpr):
    """Shaped like liger's cross-entropy: the row's target index loaded first (in the entry
    block), then a loop over the row's columns in blocks (an online log-sum-exp), run with 32
    warps (1,024 threads: at most two CTAs per SM; liger's own takes 64 registers, one)."""
    row = tl.program_id(0)
    target = tl.load(target_ptr + row)
    cols = tl.arange(0, BLOCK)
    m = float("-inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        x = tl.load(x_ptr + row * stride + start + cols, mask=start + cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    picked = tl.load(x_ptr + row * stride + target)
    tl.store(loss_ptr + row, m + tl.log(s) - picked)


@triton.jit
def layer_norm_rows(x_ptr, y_ptr, w_ptr, b_ptr, stride, n, eps, BLOCK: tl.constexpr):
    """A row-wise layer norm without scopes, one row of fp16 per program, 16 warps: the plain
    build issues the weights' loads before the ``rsqrt``; with our exit inline ptxas issues them
    ~26 instructions later, through a call as plain (passes/exit_choice.py)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    xc = tl.where(m, x - mean, 0.0)
    rstd = 1 / tl.sqrt(tl.sum(xc * xc, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _gelu_tile(x_ptr, y_ptr, out_ptr, tid, n, n_cols):
    """gelu(x * y + 1) at the flat positions ``tid`` below ``n`` (``y`` a row of ``n_cols``),
    inlined by Triton into each tile kernel below."""
    mask = tid < n
    x = tl.load(x_ptr + tid, mask=mask)
    y = tl.load(y_ptr + tid % n_cols, mask=mask)
    v = x * y + 1.0
    tl.store(out_ptr + tid, 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476)), mask=mask)


@triton.jit
def tile_gelu(x_ptr, y_ptr, out_ptr, n, n_cols, TILE: tl.constexpr):
    """gelu(x * y + 1) over a flat tensor, one tile of ``TILE`` elements per program: the
    shape of the pointwise kernels that FlagGems generates while its grid stays under its cap
    of 65,536 CTAs (one tile a CTA, 4 warps; past it they loop over tiles, benchmarks.md) and
    of Inductor's (1,024): tens of thousands of straight-line CTAs of 1-3 µs."""
    _gelu_tile(x_ptr, y_ptr, out_ptr, tl.program_id(0) * TILE + tl.arange(0, TILE), n, n_cols)


@triton.jit(do_not_specialize=["n"])
def tile_gelu_scalar(x_ptr, y_ptr, out_ptr, n, n_cols, TILE: tl.constexpr):
    """``tile_gelu`` with ``n`` left unspecialized: its mask is then not known to hold in runs
    of 4, so each thread loads and stores its elements one by one, as FlagGems' block
    pointers make its pointwise kernels do (LDG.E where ``tile_gelu`` has LDG.E.128)."""
    _gelu_tile(x_ptr, y_ptr, out_ptr, tl.program_id(0) * TILE + tl.arange(0, TILE), n, n_cols)


@triton.jit
def tile_gelu_loop(x_ptr, y_ptr, out_ptr, n, n_cols, tiles_per_cta, TILE: tl.constexpr):
    """``tile_gelu`` as a grid-stride loop over ``tiles_per_cta`` tiles a program: what
    FlagGems' pointwise kernels run past its grid cap of 65,536 CTAs (8,192 x 4,096 elements:
    tiles of 256, two a CTA; benchmarks.md "Scope-less kernels of other libraries").  A kernel
    with a loop gets its CTA header at entry."""
    pid = tl.program_id(0)
    num_ctas = tl.num_programs(0)
    for j in range(0, tiles_per_cta):
        _gelu_tile(x_ptr, y_ptr, out_ptr, (pid + j * num_ctas) * TILE + tl.arange(0, TILE), n, n_cols)
