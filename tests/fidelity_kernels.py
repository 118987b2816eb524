"""Kernels whose regions have a known length, for the fidelity tests (tests/test_fidelity.py).

The timed work is inline PTX so that the compiler cannot move it across the scope markers:
``wait_edge`` returns the first new %globaltimer value (a tick edge), ``spin_until`` spins
until %globaltimer has advanced ``T`` ns past that edge, and ``fma_chain`` runs ``N``
dependent FMAs (``fma_chain_timed`` does the same between two %clock64 reads, the
separate measurement the instrumented one is compared with).
"""
import triton
import triton.language as tl

import proton_lite.language as pl

FMA_N = 1024
# whole numbers of 32 ns timer ticks (and of 256 ns), so the spin ends exactly on a tick
SPIN_NS = tl.constexpr((1024, 10240, 102400))

_WAIT_EDGE = tl.constexpr("""{
.reg .u64 t0;
.reg .pred p;
mov.u64 t0, %globaltimer;
pl_edge${:uid}:
mov.u64 $0, %globaltimer;
setp.eq.u64 p, $0, t0;
@p bra pl_edge${:uid};
}""")

_SPIN = tl.constexpr("""{
.reg .u64 t;
.reg .pred p;
pl_spin${:uid}:
mov.u64 t, %globaltimer;
sub.u64 t, t, $1;
setp.lt.s64 p, t, $2;
@p bra pl_spin${:uid};
mov.u64 $0, t;
}""")

_FMA = tl.constexpr("mov.f32 $0, $1;\n" + "fma.rn.f32 $0, $0, $2, $3;\n" * FMA_N)
_FMA_TIMED = tl.constexpr("{\n.reg .u64 c0, c1;\nmov.u64 c0, %clock64;\nmov.f32 $0, $2;\n" + "fma.rn.f32 $0, $0, $3, $4;\n" * FMA_N +
              "mov.u64 c1, %clock64;\nsub.u64 c1, c1, c0;\ncvt.u32.u64 $1, c1;\n}")


@triton.jit
def wait_edge():
    return tl.inline_asm_elementwise(_WAIT_EDGE, "=l", [], dtype=tl.uint64, is_pure=False, pack=1)


@triton.jit
def spin_until(edge, t_ns):
    return tl.inline_asm_elementwise(_SPIN, "=l,l,l", [edge, t_ns], dtype=tl.uint64, is_pure=False, pack=1)


@triton.jit
def spin_regions(out_ptr, REPS: tl.constexpr):
    """REPS regions each of 1, 10 and 100 µs, every one starting on a timer tick edge."""
    acc = tl.zeros([1], tl.uint64)
    for _ in tl.static_range(REPS):
        e = wait_edge()
        pl.enter_scope("t1us")
        acc += spin_until(e, tl.full([1], SPIN_NS[0], tl.uint64))
        pl.exit_scope("t1us")
        e = wait_edge()
        pl.enter_scope("t10us")
        acc += spin_until(e, tl.full([1], SPIN_NS[1], tl.uint64))
        pl.exit_scope("t10us")
        e = wait_edge()
        pl.enter_scope("t100us")
        acc += spin_until(e, tl.full([1], SPIN_NS[2], tl.uint64))
        pl.exit_scope("t100us")
    tl.store(out_ptr + tl.program_id(0) + tl.arange(0, 1), acc)


@triton.jit
def fma_region(x_ptr, out_ptr, reps):
    """A runtime loop, so that every repetition runs the same (warm) instructions."""
    offs = tl.program_id(0) * 128 + tl.arange(0, 128)
    x = tl.load(x_ptr + offs)
    for _ in range(reps):
        pl.enter_scope("fma")
        x = tl.inline_asm_elementwise(_FMA, "=f,f,f,f", [x, x * 0 + 0.999, x * 0 + 0.001], dtype=tl.float32,
                                      is_pure=False, pack=1)
        pl.exit_scope("fma")
    tl.store(out_ptr + offs, x)


@triton.jit
def fma_timed(x_ptr, out_ptr, cyc_ptr, reps):
    offs = tl.program_id(0) * 128 + tl.arange(0, 128)
    x = tl.load(x_ptr + offs)
    for r in range(reps):
        x, c = tl.inline_asm_elementwise(_FMA_TIMED, "=f,=r,f,f,f", [x, x * 0 + 0.999, x * 0 + 0.001],
                                         dtype=(tl.float32, tl.uint32), is_pure=False, pack=1)
        tl.store(cyc_ptr + offs * reps + r, c)
    tl.store(out_ptr + offs, x)


@triton.jit
def release_together(counter_ptr, flag_ptr, out_ptr, n_ctas, lead_ns):
    """Every CTA arrives; the last one publishes release time = now + lead_ns in ``flag``;
    all CTAs poll the flag, then spin on %globaltimer to that instant and record."""
    arrived = tl.atomic_add(counter_ptr, 1)
    if arrived == n_ctas - 1:
        now = wait_edge()
        tl.atomic_xchg(flag_ptr + tl.arange(0, 1), now + lead_ns)
    target = tl.load(flag_ptr, volatile=True)
    while target == 0:
        target = tl.load(flag_ptr, volatile=True)
    t = spin_until(tl.full([1], 0, tl.uint64) + target, tl.full([1], 0, tl.uint64))
    pl.enter_scope("release")
    pl.exit_scope("release")
    tl.store(out_ptr + tl.program_id(0) + tl.arange(0, 1), t)
