"""End to end on the GPU: outputs unchanged, exact record counts, CTAs once, times consistent.

Run on a Hopper GPU with ``python -m pytest -m gpu``; skipped elsewhere.  Set
``PROTON_LITE_CAPTURE_DIR`` to keep the raw captures (they become tests/data/).
"""
import os
import shutil

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import proton_lite  # noqa: E402
import proton_lite.language as pl  # noqa: E402
from proton_lite.decode import cta_block_dtype, decode  # noqa: E402
from proton_lite.layout import (COPY_SCOPE, CTA_MAGIC, LAUNCH_PREFIX_BYTES, UNIT_MAGIC, BufferLayout,  # noqa: E402
                                read_capacity_word)
from proton_lite.passes import stage_hook  # noqa: E402
from proton_lite.passes.config import CALIBRATION_KERNEL  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import kernels as K  # noqa: E402

CAPTURE_DIR = os.environ.get("PROTON_LITE_CAPTURE_DIR")
UNDER_SANITIZER = os.environ.get("PROTON_LITE_TEST_UNDER_SANITIZER") == "1"  # set by tests/run_gpu.sh
# trace writers are checked on the CPU from the captures; also write them here when present
import importlib.util  # noqa: E402
TRACE_FORMATS = () if os.environ.get("PROTON_LITE_TEST_TRACES") == "0" else tuple(f for f, mod in (("perfetto", "proton_lite.trace.perfetto"), ("chrome", "proton_lite.trace.chrome"))
                      if importlib.util.find_spec(mod))


def run_case(name, device="cuda"):
    """Launch test kernel `name`; return (output tensors, grid, expected records per unit, scopes)."""
    g = torch.Generator(device=device).manual_seed(0)
    if name == "vector_add":
        n = 1 << 16
        x, y = torch.rand(n, device=device, generator=g), torch.rand(n, device=device, generator=g)
        out = torch.empty_like(x)
        grid = (triton_cdiv(n, 1024), )
        K.vector_add[grid](x, y, out, n, BLOCK=1024)
        return [out], grid, 4, ["load", "store"], 4
    if name == "softmax":
        x = torch.randn(256, 1000, device=device, generator=g)
        out = torch.empty_like(x)
        grid = (256, )
        K.softmax[grid](x, out, x.stride(0), 1000, BLOCK=1024)
        return [out], grid, 4, ["reduce", "store"], 4
    if name in ("matmul", "matmul_per_iter"):
        M = N = 512
        KK = 1024
        a = torch.randn(M, KK, device=device, dtype=torch.float16, generator=g)
        b = torch.randn(KK, N, device=device, dtype=torch.float16, generator=g)
        c = torch.empty(M, N, device=device, dtype=torch.float16)
        grid = ((M // 128) * (N // 128), )
        per_iter = name == "matmul_per_iter"
        K.matmul[grid](a, b, c, M, N, KK, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                       c.stride(1), BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, PER_ITER=per_iter, num_warps=8,
                       num_stages=3)
        expected = 4 + (2 * (KK // 64) if per_iter else 0)
        scopes = ["mainloop", "iteration", "epilogue"] if per_iter else ["mainloop", "epilogue"]
        return [c], grid, expected, scopes, 8
    if name == "loop_scopes":
        x = torch.rand(128, device=device, generator=g)
        grid = (7, )
        K.loop_scopes[grid](x, 37, BLOCK=128)
        return [x], grid, 74, ["step"], 4
    if name == "const_loop":  # 300 trips x 2 records: more than loop_capacity, sized from the TTIR
        x = torch.rand(128, device=device, generator=g)
        grid = (5, )
        K.const_loop[grid](x, BLOCK=128, STEPS=300)
        return [x], grid, 600, ["step"], 4
    if name == "nested":
        x = torch.rand(128, device=device, generator=g)
        grid = (3, )
        K.nested[grid](x, BLOCK=128)
        return [x], grid, 6, ["outer", "inner", "innermost"], 4
    if name == "helper_twice":
        x, y = torch.rand(128, device=device, generator=g), torch.rand(128, device=device, generator=g)
        out = torch.empty_like(x)
        grid = (5, )
        K.helper_twice[grid](x, y, out, BLOCK=128)
        return [out], grid, 4, ["load_tile"], 4
    raise KeyError(name)


def triton_cdiv(a, b):
    return (a + b - 1) // b


CASES = ["vector_add", "softmax", "matmul", "matmul_per_iter", "loop_scopes", "const_loop", "nested", "helper_twice"]


@pytest.mark.parametrize("granularity", ["warp", "warpgroup", "cta"])
@pytest.mark.parametrize("name", CASES)
def test_instrumented_matches_plain_and_records_are_exact(name, granularity, tmp_path):
    plain, grid, _, _, num_warps = run_case(name)
    torch.cuda.synchronize()
    if granularity == "warpgroup" and num_warps % 4:
        pytest.skip("warpgroup needs a multiple of 4 warps")
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    base = str(tmp_path / f"{name}_{granularity}")
    with proton_lite.start(base, granularity=granularity, formats=TRACE_FORMATS, quiet=True) as session:
        start_ev.record()
        outs, grid, expected, scopes, num_warps = run_case(name)
        end_ev.record()
    torch.cuda.synchronize()
    kernel_ms = start_ev.elapsed_time(end_ev)
    # 1. outputs identical to the uninstrumented run
    for a, b in zip(plain, outs):
        assert torch.equal(a, b), f"{name}: instrumented output differs"
    result = session.result
    assert result.launches == 1 and result.dropped == 0 and result.unmatched == 0
    # 2. the raw buffer holds exactly the expected records per unit and per CTA
    cap = read_raw(result.raw_path)
    (kid, kmeta), = [(k, m) for k, m in cap.kernels.items() if m["name"] != CALIBRATION_KERNEL]
    layout = BufferLayout.from_json(kmeta["proton_lite"]["layout"])
    # the scope table: the kernel's, then (staging in blocks) the copies' own
    assert kmeta["proton_lite"]["scopes"] == scopes + ([COPY_SCOPE] if layout.flush_slots else [])
    (launch, ) = [la for la in cap.launches if la.kernel_id == kid]
    n_ctas = int(np.prod(grid))
    assert launch.num_ctas == n_ctas
    buffer = launch.buffer
    if layout.sized_at_launch:  # a loop bounded by an argument: the launch holds exactly what it writes
        assert name in ("loop_scopes", "matmul_per_iter")
        layout = layout.with_capacity(read_capacity_word(int(np.frombuffer(buffer, "<u4", 1)[0])))
        assert layout.capacity == layout.records_with_copies(expected)
        buffer = buffer[LAUNCH_PREFIX_BYTES:]
        assert cap.end["unsized_launches"] == 0 and cap.end["capped_launches"] == 0
    assert len(buffer) == n_ctas * layout.stride
    blocks = np.frombuffer(buffer, dtype=cta_block_dtype(layout), count=n_ctas)
    assert (blocks["magic"] == CTA_MAGIC).all()  # every CTA wrote its header exactly in its own slot
    units = blocks["unit"]
    assert (units["magic"] == UNIT_MAGIC).all()
    # each copy of a staged block adds its own pair of records, at the same places in every unit
    (written, ) = set(units["count"].ravel().tolist())
    assert written == expected or (layout.flush_slots and written > expected and (written - expected) % 2 == 0)
    recs = units["rec"][:, :, :written, :]
    tags = recs[..., 0]
    # ids: the same tag sequence in every unit, with enter/exit alternating as nested
    assert (tags == tags[0:1, 0:1, :]).all()
    clk = recs[..., 1].astype(np.int64)
    steps = np.diff(clk, axis=2) % (1 << 32)
    assert (steps < (1 << 31)).all()  # timestamps increase within a unit
    sm_count = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    assert (blocks["smid"] < sm_count).all(), np.unique(blocks["smid"])  # real SM ids, not garbage
    assert n_ctas == 1 or len(np.unique(blocks["smid"])) > 1  # a grid of several CTAs spreads over SMs
    # 3. decoded: every CTA once, scopes inside their CTA, CTAs inside the kernel's event time
    prof = decode(cap)
    assert len(prof.ctas) == n_ctas and len(np.unique(prof.ctas["cta"])) == n_ctas
    iv = prof.intervals
    assert len(iv) == n_ctas * layout.units * written // 2
    ours = np.isin(prof.launches["kernel"], [i for i, k in enumerate(prof.kernels) if k.name == kmeta["name"]])
    assert prof.launches[ours]["records"].tolist() == [n_ctas * layout.units * expected]  # the kernel's own
    cta_of = {int(c["cta"]): c for c in prof.ctas}
    starts = np.array([cta_of[int(c)]["start_ns"] for c in iv["cta"]])
    ends = np.array([cta_of[int(c)]["end_ns"] for c in iv["cta"]])
    slack = 64  # ns: two globaltimer ticks
    early = iv["start_ns"] < starts - slack
    if UNDER_SANITIZER:
        # compute-sanitizer runs a CTA's warps far apart: another unit's first record can come
        # long before thread 0 reads the start anchor. The unit that holds thread 0 cannot.
        units_early, n_early = np.unique(iv["unit"][early], return_counts=True)
        print(f"[sanitizer] {name}-{granularity}: scopes starting > {slack} ns before their CTA, by unit:",
              dict(zip(units_early.tolist(), n_early.tolist())))
        early &= iv["unit"] == 0
    assert not early.any(), ("scope starts before its CTA", int(early.sum()), iv["unit"][early][:8].tolist(),
                             (iv["start_ns"] - starts)[early][:8].tolist())
    assert (iv["end_ns"] <= ends + slack).all()
    span_ns = prof.ctas["end_ns"].max() - prof.ctas["start_ns"].min()
    assert span_ns <= kernel_ms * 1e6 + 2000, (span_ns, kernel_ms)
    rates = prof.ctas["cycles_per_ns"]
    assert ((rates > 0.2) & (rates < 2.5)).all(), rates
    for path in result.trace_paths:
        assert os.path.getsize(path) > 0
    if CAPTURE_DIR and granularity == "warp":
        os.makedirs(CAPTURE_DIR, exist_ok=True)
        shutil.copy(result.raw_path, os.path.join(CAPTURE_DIR, f"{name}.plraw"))


def test_plain_kernels_run_plain_after_a_session(tmp_path):
    run_case("vector_add")
    with proton_lite.start(str(tmp_path / "s"), quiet=True):
        run_case("vector_add")
    from triton import knobs
    from triton.runtime import _allocation
    from proton_lite.runtime.after_stop import AFTER_STOP
    assert knobs.compilation.instrumentation_mode == ""
    assert not stage_hook.installed()
    # Triton's default allocator gave way to the one that serves instrumented binaries still
    # cached somewhere (runtime/after_stop.py); a plain launch never calls it
    assert _allocation._profile_allocator.get() is AFTER_STOP
    before = AFTER_STOP.launches
    outs, *_ = run_case("vector_add")
    torch.cuda.synchronize()
    assert outs[0].isfinite().all() and AFTER_STOP.launches == before


def test_many_launches_stream_to_disk(tmp_path):
    with proton_lite.start(str(tmp_path / "many"), quiet=True, formats=()) as s:
        for _ in range(1000):
            run_case("nested")
    assert s.result.launches == 1000
    cap = read_raw(s.result.raw_path)
    prof = decode(cap)
    assert len(prof.launches) == 1000 and prof.total_dropped == 0 and prof.total_unmatched == 0
    assert len(prof.intervals) == 1000 * 3 * 4 * 3
    # the C hooks (runtime/fastpath.py) built here and served most launches: the 1000 launches
    # go through idle-time copies and chunk changes, where the Python hooks take over
    assert cap.end["host_hooks"] == "c", cap.end
    allocs, exits = cap.end["host_hooks_fast"]
    if os.environ.get("PROTON_LITE_EXACT_BUFFERS", "") in ("", "0"):  # (there: a chunk per launch, Python)
        assert allocs > 100 and exits > 900, cap.end["host_hooks_fast"]
        # 1000 launches fill 4 chunks of copy_every=256: the first switch is Python's, the next in C
        assert cap.end["host_hooks_switches"] >= 1, cap.end


def test_a_loop_bounded_by_an_argument_is_sized_per_launch(tmp_path):
    """Default sizing: 300 and 5 trips of a loop bounded by an argument (600 records per warp,
    more than loop_capacity, then 10) keep every record, each launch with its own buffer;
    outputs are those of the plain kernel."""
    x = torch.rand(128, device="cuda")
    plain = []
    for n in (300, 5):
        y = x.clone()
        K.loop_scopes[(6, )](y, n, BLOCK=128)
        plain.append(y)
    outs = []
    with proton_lite.start(str(tmp_path / "sized"), quiet=True, formats=()) as s:
        for n in (300, 5, 300):
            y = x.clone()
            K.loop_scopes[(6, )](y, n, BLOCK=128)
            outs.append(y)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], plain[0]) and torch.equal(outs[1], plain[1]) and torch.equal(outs[2], plain[0])
    cap = read_raw(s.result.raw_path)
    assert cap.end["unsized_launches"] == 0 and cap.end["capped_launches"] == 0
    prof = decode(cap)
    ours = [i for i, k in enumerate(prof.kernels) if k.name == "loop_scopes"]
    user = prof.launches[np.isin(prof.launches["kernel"], ours)]
    assert user["records"].tolist() == [6 * 4 * 600, 6 * 4 * 10, 6 * 4 * 600]
    assert prof.total_dropped == 0 and prof.total_unmatched == 0
    assert s.result.dropped == 0
    words = [read_capacity_word(int(np.frombuffer(la.buffer, "<u4", 1)[0])) for la in cap.launches[:3]]
    layout = BufferLayout.from_json(cap.kernels[cap.launches[0].kernel_id]["proton_lite"]["layout"])
    assert words == [layout.records_with_copies(n) for n in (600, 10, 600)]  # and the block copies' records


def test_per_iteration_scopes_staged_in_shared_memory_match_plain_and_are_exact(tmp_path):
    """matmul_per_iter with an exact capacity= keeps shared staging, where its K loop's last
    record is stored by the next iteration's first one (design.md §2): same output as the
    plain kernel, every record of every warp in order."""
    from proton_lite.layout import encode_tag
    plain, grid, expected, _, _ = run_case("matmul_per_iter")
    with proton_lite.start(str(tmp_path / "mm"), quiet=True, formats=(), capacity=expected) as s:
        outs, *_ = run_case("matmul_per_iter")
    torch.cuda.synchronize()
    assert torch.equal(plain[0], outs[0])
    assert s.result.dropped == 0 and s.result.unmatched == 0
    cap = read_raw(s.result.raw_path)
    (kid, meta), = [(k, m) for k, m in cap.kernels.items() if m["name"] == "matmul"]
    layout = BufferLayout.from_json(meta["proton_lite"]["layout"])
    assert layout.staging == "shared" and layout.capacity == expected
    (launch, ) = [la for la in cap.launches if la.kernel_id == kid]
    units = np.frombuffer(launch.buffer, dtype=cta_block_dtype(layout), count=int(np.prod(grid)))["unit"]
    assert (units["count"] == expected).all()
    iters = (expected - 4) // 2
    tags = [encode_tag(0, False)] + [encode_tag(1, False), encode_tag(1, True)] * iters + \
        [encode_tag(0, True), encode_tag(2, False), encode_tag(2, True)]
    assert (units["rec"][..., 0] == np.array(tags, dtype=units["rec"].dtype)).all()


@triton.jit
def _loops_in_loops(x_ptr, n_outer, n_inner, n_after, BLOCK: tl.constexpr, VARY: tl.constexpr):
    """Three loops whose last records are stored late (global staging, design.md §2): an
    outer loop, a loop inside it that may run zero times, and one after them."""
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    for i in range(n_outer):
        pl.enter_scope("outer")
        if VARY:
            trips = i % 3
        else:
            trips = n_inner
        for _ in range(trips):
            pl.enter_scope("inner")
            acc = acc * 1.0001 + 1.0
            pl.exit_scope("inner")
        acc = acc + 0.5
        pl.exit_scope("outer")
    for _ in range(n_after):
        pl.enter_scope("after")
        acc = acc * 0.9999
        pl.exit_scope("after")
    tl.store(x_ptr + offs, acc)


@pytest.mark.parametrize("case", ["sized", "sized_direct", "global", "shared"])
def test_a_loop_s_deferred_last_record_lands_in_its_own_slot(tmp_path, case, monkeypatch):
    """A loop body's last record is stored by the next iteration's first record, or after the
    loop. Nested loops, loops that run zero times and loops one after the other keep every
    record, in order, in its own slot. sized: the buffer sized at launch is filled to its
    last slot, the records staged in shared memory in blocks of 8 (copies mid-loop, a pair
    across a block's end), and sized_direct: stored straight to global memory, where the
    last slot's record is one of the late ones. global: inner trip counts 0, 1, 2, ...
    that the sizing cannot know, so a fixed capacity in global memory. shared: shared
    staging, where only the outer loop defers (the others are tight), the last run
    overflowing the 64 slots: the first 64 records kept, the rest counted."""
    from proton_lite.layout import encode_tag
    from proton_lite.passes import ptx_staging
    monkeypatch.setattr(ptx_staging, "FLUSH_SLOTS", 8 if case == "sized" else 0)  # (in the cache key)
    monkeypatch.setattr(ptx_staging, "MIN_INSTRUCTIONS_PER_RECORD", 0)  # its tight loops too
    vary = case == "global"
    sized = case.startswith("sized")
    runs = {"sized": [(5, 3, 4), (4, 0, 0), (0, 2, 3)], "sized_direct": [(5, 3, 4), (4, 0, 0), (0, 2, 3)],
            "global": [(7, 0, 2)],
            "shared": [(5, 3, 4), (4, 0, 0), (0, 2, 3), (9, 3, 4)]}[case]
    x = torch.rand(128, device="cuda")
    plain = []
    for args in runs:
        y = x.clone()
        _loops_in_loops[(3, )](y, *args, BLOCK=128, VARY=vary)
        plain.append(y)
    outs = []
    with proton_lite.start(str(tmp_path / "deferred"), quiet=True, formats=(),
                           **{"global": {"capacity": 30000}, "shared": {"capacity": 64}}.get(case, {})) as s:
        for args in runs:
            y = x.clone()
            _loops_in_loops[(3, )](y, *args, BLOCK=128, VARY=vary)
            outs.append(y)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(outs, plain))
    assert s.result.dropped == (3 * 4 * (9 * 8 + 8 - 64) if case == "shared" else 0)
    assert case == "shared" or s.result.unmatched == 0  # (there: scopes cut at the 64th record)
    cap = read_raw(s.result.raw_path)
    # one compiled kernel per specialisation (a trip count of 0 is divisible by 16)
    layouts = {k: BufferLayout.from_json(m["proton_lite"]["layout"]) for k, m in cap.kernels.items()
               if m["name"] == "_loops_in_loops"}
    launches = [la for la in cap.launches if la.kernel_id in layouts]
    assert len(launches) == len(runs)
    for la, (n_outer, n_inner, n_after) in zip(launches, runs):
        layout = layouts[la.kernel_id]
        assert layout.staging == ("global" if case in ("global", "sized_direct") else "shared")
        assert layout.sized_at_launch == sized and layout.flush_slots == (8 if case == "sized" else 0)
        tags = []
        for i in range(n_outer):
            tags.append(encode_tag(0, False))
            tags += [encode_tag(1, False), encode_tag(1, True)] * (i % 3 if vary else n_inner)
            tags.append(encode_tag(0, True))
        tags += [encode_tag(2, False), encode_tag(2, True)] * n_after
        lay, buffer = layout, la.buffer
        if layout.sized_at_launch:
            lay = layout.with_capacity(read_capacity_word(int(np.frombuffer(buffer, "<u4", 1)[0])))
            buffer = buffer[LAUNCH_PREFIX_BYTES:]
            assert lay.capacity == layout.records_with_copies(len(tags))
        units = np.frombuffer(buffer, dtype=cta_block_dtype(lay), count=3)["unit"]
        if layout.flush_slots:  # each copy of a block wrote its own pair (scope 3, COPY_SCOPE) before a record
            copy = (encode_tag(3, False), encode_tag(3, True))
            (counts, ) = set(units["count"].ravel().tolist())  # every warp copied at the same records
            recs = units["rec"][:, :, :counts, :]
            at = np.flatnonzero(recs[0, 0, :, 0] == copy[0])
            assert (len(at) > 0) == (len(tags) > 8)  # blocks of 8
            assert (recs[..., at + 1, 0] == copy[1]).all() and (recs[..., at, 0] == copy[0]).all()
            assert counts == len(tags) + 2 * len(at) <= lay.capacity
            keep = np.ones(counts, bool)
            keep[at], keep[at + 1] = False, False
            assert (recs[..., keep, 0] == np.array(tags, dtype=recs.dtype)).all()
            recs = recs[..., keep, :]
        else:
            assert (units["count"] == len(tags)).all(), (len(tags), np.unique(units["count"]))
            kept = min(len(tags), lay.capacity)
            recs = units["rec"][:, :, :kept, :]
            assert (recs[..., 0] == np.array(tags[:kept], dtype=recs.dtype)).all()
        steps = np.diff(recs[..., 1].astype(np.int64), axis=2) % (1 << 32)
        assert (steps < (1 << 31)).all()  # timestamps increase within a unit


@triton.jit
def _first_seen_in_a_session(x_ptr, n_iter, BLOCK: tl.constexpr):
    """kernels.loop_scopes, copied on purpose: a JIT function of its own (and source of its
    own, so no cached binary either) whose first launch and compile happen inside a session."""
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    for _ in range(n_iter):
        pl.enter_scope("step")
        acc = acc * 1.0001 + 1.0
        pl.exit_scope("step")
    tl.store(x_ptr + offs, acc)


def test_a_kernel_first_launched_inside_a_session_is_sized_at_its_first_launch(tmp_path):
    """The usual first use: a kernel never launched before, with a loop bounded by an
    argument, launched once inside a session. Its one launch must be sized from its
    arguments (nothing unsized, nothing dropped), also when the bound is a multiple of 16,
    which Triton specializes (until this test, such launches kept the compiled capacity)."""
    x = torch.rand(128, device="cuda")
    with proton_lite.start(str(tmp_path / "first"), quiet=True, formats=()) as s:
        _first_seen_in_a_session[(3, )](x, 320, BLOCK=128, num_warps=2)  # 320: specialized divisible by 16
    cap = read_raw(s.result.raw_path)
    assert (cap.end["unsized_launches"], cap.end["capped_launches"], s.result.dropped) == (0, 0, 0)
    prof = decode(cap)
    ours = [i for i, k in enumerate(prof.kernels) if k.name == "_first_seen_in_a_session"]
    assert prof.launches[np.isin(prof.launches["kernel"], ours)]["records"].tolist() == [3 * 2 * 640]


def test_overflow_is_counted_not_written(tmp_path):
    with proton_lite.start(str(tmp_path / "ovf"), quiet=True, capacity=16, formats=()) as s:
        run_case("loop_scopes")  # 74 records per warp, 16 slots
    assert s.result.dropped == 7 * 4 * (74 - 16)
    if CAPTURE_DIR:  # a real capture with drops, for the CLI's incomplete-number marks (tests/data)
        os.makedirs(CAPTURE_DIR, exist_ok=True)
        shutil.copy(s.result.raw_path, os.path.join(CAPTURE_DIR, "loop_scopes_dropped.plraw"))
    with proton_lite.start(str(tmp_path / "circ"), quiet=True, loop_capacity=16, buffer_mode="circular",
                           formats=()) as s2:
        run_case("loop_scopes")
    assert s2.result.dropped == 7 * 4 * (74 - 16)
    prof = decode(read_raw(s2.result.raw_path))
    # circular keeps the newest 16 records = 8 complete steps per warp
    assert len(prof.intervals) == 7 * 4 * 8 and prof.total_unmatched == 0


def test_second_session_is_an_error(tmp_path):
    with proton_lite.start(str(tmp_path / "a"), quiet=True, formats=()):
        with pytest.raises(RuntimeError, match="already active"):
            proton_lite.start(str(tmp_path / "b"))
