"""Kernels of shapes users run that the other kernel files lack: a spin lock taken in a
data-dependent ``while`` loop (as layer-norm backwards accumulate partial sums), CTAs that
return early (and grids of none), a kernel launched with programmatic dependent launch (PDL),
a Hopper cluster of two CTAs (``num_ctas=2``), 32 warps per CTA, a debug build with device
asserts and inline PTX, helpers compiled as functions of their own
(``@triton.jit(noinline=True)``: a ``.func`` in the kernel's PTX, with its own ``ret``), a
grid-wide barrier in a cooperative launch, and CTAs that live for seconds.  Compiled on the CPU by tests/test_unusual_kernels.py,
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
