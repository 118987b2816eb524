"""Loops whose trip counts are known only at run time: records continue in chunks of a launch pool.

The pass's output for small PTX kernels runs on the CPU (tests/ptx_sim.py: atomics and
warp shuffles included), the buffer is written as a raw capture exactly as the collector
copies it back (prefix, CTA blocks, the chunks taken), and the real decoder reads it.
Trip counts differ per CTA (taken from %ctaid.x), so units take different numbers of
chunks, in an order set by which CTA runs first. The GPU suite runs Triton kernels of the
same shapes on the H100 (tests/test_gpu_pool.py)."""
import struct

import numpy as np
import pytest

import proton_lite
from proton_lite.decode import decode
from proton_lite.layout import (CHUNK_HEADER_BYTES, CHUNK_TAG, CTA_HEADER_BYTES, CTA_MAGIC, LAUNCH_PREFIX_BYTES,
                                LAYOUT_VERSION, RECORD_BYTES, UNIT_HEADER_BYTES, UNIT_MAGIC, BufferLayout,
                                capacity_word, encode_tag)
from proton_lite.passes.pool import plan as plan_pool
from proton_lite.passes.ptx_instrument import fold_exit_branches, function_body, rewrite, scan
from proton_lite.raw_format import RawWriter, read_raw
from ptx_sim import Kernel, Launch
from test_kernel_side import _ptx

FMA = "\tfma.rn.f32 %f1, %f1, %f2, %f3;"
LONG = [FMA] * 9


def trips_from_cta(reg: str, per_cta: str, plus: int = 1) -> list[str]:
    """``reg = ctaid.x * per_cta + plus``: each CTA runs its own trip count."""
    return [f"\tmov.u32 {reg}, %ctaid.x;", f"\tmul.lo.u32 {reg}, {reg}, {per_cta};", f"\tadd.u32 {reg}, {reg}, {plus};"]


def count_loop(body: list[str], label: str, counter: str, scope: str) -> list[str]:
    """LLVM's counted loop: a guard, the head, the scope, the count-down, a conditional back edge."""
    return [f"\tsetp.eq.s32 %p3, {counter}, 0;", f"\t@%p3 bra {label}_out;", f"{label}:", f"E {scope}", *body,
            f"X {scope}", f"\tadd.s32 {counter}, {counter}, -1;", f"\tsetp.ne.s32 %p1, {counter}, 0;",
            f"\t@%p1 bra {label};", f"{label}_out:"]


def while_loop(body: list[str], label: str, i: str, n: str, scope: str) -> list[str]:
    """A ``while i < n`` loop: the test at the top, an unconditional back edge."""
    return [f"{label}:", f"\tsetp.ge.s32 %p2, {i}, {n};", f"\t@%p2 bra {label}_out;", f"E {scope}", *body,
            f"X {scope}", f"\tadd.s32 {i}, {i}, 1;", f"\tbra.uni {label};", f"{label}_out:"]


def compile_pool(body: list[str], chunk_slots: int, granularity="warp", num_warps=1):
    ptx = fold_exit_branches(_ptx(body))
    info = scan(ptx)
    lines = ptx.split("\n")
    start, end = function_body(lines)
    plan = plan_pool(lines, start, end, {s.line for s in info.sites}, info.back_edges)
    assert plan is not None
    layout = BufferLayout(granularity, num_warps, 256, "global", "clamp", sized_at_launch=True, overflow="sink",
                          pool=True, chunk_slots=chunk_slots)
    return rewrite(ptx, info, layout, 0, plan), info, layout, plan


def run_pool(tmp_path, body, regs, *, capacity, chunks, chunk_slots=5, granularity="warp", num_warps=1, ctas=4,
             cta_order=None, epoch=7, damage=None):
    """Run ``body`` with a pool; returns (decoded profile, the launch's buffer as copied back)."""
    out, info, layout, plan = compile_pool(body, chunk_slots, granularity, num_warps)
    assert capacity >= plan.entry_records
    read = layout.with_capacity(capacity)
    mem = bytearray(read.buffer_bytes(ctas, chunks))
    mem[0:16] = struct.pack("<IIII", capacity_word(capacity), chunks, epoch, 0)
    Kernel(out).run(Launch(grid=ctas, threads=num_warps * 32, params={"k_param_1": 1 << 32}, global_mem=mem,
                           regs=regs), cta_order)
    taken = struct.unpack_from("<I", mem, 12)[0]
    buffer = bytearray(mem[:read.buffer_bytes(ctas, min(taken, chunks))])  # what the drain copies back
    if damage is not None:
        damage(buffer, read, ctas)
    path = str(tmp_path / "pool.plraw")
    w = RawWriter(path, {"name": "pool"})
    w.kernel({"id": 0, "name": "k", "hash": "h", "num_warps": num_warps, "num_ctas": 1, "shared": 0,
              "profile_scratch_size": layout.stride,
              "proton_lite": {"layout_version": LAYOUT_VERSION, "scopes": info.scopes, "layout": layout.to_json(),
                              "stride": layout.stride, "kernel": "k", "pool_entry_records": plan.entry_records}})
    w.launch(0, 0, 0, (ctas, 1, 1), ctas, 0, 0, bytes(buffer))
    w.end({"launches": 1})
    w.close()
    return decode(read_raw(path)), buffer, info


def enters_per_unit(prof, scopes):
    """{(cta, unit): [scope name of each interval, in order of its start]}."""
    iv = np.sort(prof.intervals, order=["cta", "unit", "start_ns", "depth"])
    out = {}
    for row in iv:
        out.setdefault((int(row["cta"]), int(row["unit"])), []).append(scopes[int(row["scope"])])
    return out


def expected_simple(trips: int) -> list[str]:
    return ["k"] + ["r"] * trips


@pytest.mark.parametrize("shape", ["tight", "long"])
@pytest.mark.parametrize("order", ["ascending", "descending"])
def test_a_loop_bounded_at_run_time_keeps_every_record_across_chunks(tmp_path, shape, order):
    """Trip counts 1, 8, 15, 22 per CTA (up to 46 records per unit) with a unit block of 3 and
    chunks of 5 records: every unit takes several chunks, in whatever order the CTAs run."""
    body = trips_from_cta("%r2", "%r7") + ["E k"] + count_loop([FMA] if shape == "tight" else LONG, "$L_h", "%r2",
                                                                "r") + ["X k"]
    cta_order = None if order == "ascending" else [3, 2, 1, 0]
    prof, buffer, info = run_pool(tmp_path, body, {"%r7": 7}, capacity=3, chunks=64, cta_order=cta_order)
    launch = prof.launches[0]
    assert launch["dropped"] == 0 and launch["unmatched"] == 0 and launch["torn_chunks"] == 0
    assert launch["records"] == sum(2 + 2 * (1 + 7 * c) for c in range(4))
    assert 0 < launch["pool_taken"] <= launch["pool_chunks"] == 64
    got = enters_per_unit(prof, info.scopes)
    for cta in range(4):
        assert sorted(got[(cta, 0)]) == sorted(expected_simple(1 + 7 * cta))


@pytest.mark.parametrize("granularity,num_warps", [("warp", 2), ("warpgroup", 4), ("cta", 2)])
def test_units_of_every_granularity_take_their_own_chunks(tmp_path, granularity, num_warps):
    body = trips_from_cta("%r2", "%r7") + ["E k"] + count_loop(LONG, "$L_h", "%r2", "r") + ["X k"]
    prof, _, info = run_pool(tmp_path, body, {"%r7": 5}, capacity=2, chunks=64, granularity=granularity,
                             num_warps=num_warps, ctas=3)
    units = num_warps if granularity == "warp" else 1
    assert prof.launches[0]["dropped"] == 0
    assert prof.launches[0]["records"] == units * sum(2 + 2 * (1 + 5 * c) for c in range(3))
    got = enters_per_unit(prof, info.scopes)
    assert len(got) == 3 * units
    for (cta, _), names in got.items():
        assert len(names) == 2 + 5 * cta


def test_nested_while_and_early_exit_loops_keep_every_record(tmp_path):
    """An outer counted loop around an inner one (its count again per pass), a while loop
    with its test at the top, and a loop with a second exit in the middle of its body."""
    inner = count_loop([FMA], "$L_in", "%r4", "in")
    outer = ["\tmov.u32 %r4, %r5;", *inner]
    early = ["$L_e:", "E e", FMA, "X e", "\tadd.s32 %r6, %r6, -1;", "\tsetp.eq.s32 %p4, %r6, %r8;",
             "\t@%p4 bra $L_e_out;", FMA, "\tsetp.ne.s32 %p1, %r6, 0;", "\t@%p1 bra $L_e;", "$L_e_out:"]
    body = (trips_from_cta("%r2", "%r7") + ["\tmov.u32 %r3, 0;"] + trips_from_cta("%r9", "%r7", plus=2) +
            ["E k"] + count_loop(outer, "$L_out", "%r2", "out") + while_loop([FMA], "$L_w", "%r3", "%r9", "w") +
            ["\tmov.u32 %r6, 9;"] + early + ["X k"])
    # inner: 3 per outer pass; early exit when the count-down reaches 4: 5 passes of 9
    prof, _, info = run_pool(tmp_path, body, {"%r7": 2, "%r5": 3, "%r8": 4}, capacity=2, chunks=128, ctas=3)
    assert prof.launches[0]["dropped"] == 0 and prof.launches[0]["unmatched"] == 0
    got = enters_per_unit(prof, info.scopes)
    for cta in range(3):
        n_out, n_w = 1 + 2 * cta, 2 + 2 * cta
        want = ["k"] + ["out"] * n_out + ["in"] * (3 * n_out) + ["w"] * n_w + ["e"] * 5
        assert sorted(got[(cta, 0)]) == sorted(want)


def test_an_exhausted_pool_keeps_the_first_records_and_counts_the_rest(tmp_path):
    body = trips_from_cta("%r2", "%r7") + ["E k"] + count_loop(LONG, "$L_h", "%r2", "r") + ["X k"]
    prof, _, info = run_pool(tmp_path, body, {"%r7": 7}, capacity=3, chunks=4)
    launch = prof.launches[0]
    tried = sum(2 + 2 * (1 + 7 * c) for c in range(4))
    assert launch["pool_taken"] > launch["pool_chunks"] == 4
    assert launch["dropped"] > 0 and launch["records"] + launch["dropped"] == tried
    hint = prof.keep_all_hint()
    assert "pool_mb=" in hint and "needed at most" in hint
    # the pool it names is enough: the same launch with a pool that cannot run out took fewer chunks
    full, _, _ = run_pool(tmp_path, body, {"%r7": 7}, capacity=3, chunks=10_000)
    taken = int(full.launches[0]["pool_taken"])
    assert full.launches[0]["dropped"] == 0
    layout = BufferLayout("warp", 1, 256, "global", sized_at_launch=True, overflow="sink", pool=True, chunk_slots=5)
    named = int(hint.split("pool_mb=")[1].split()[0]) << 20
    assert named // layout.chunk_bytes >= taken
    needed = int(hint.split("needed at most ")[1].rstrip(")").replace(",", ""))
    assert taken <= needed <= 3 * taken  # a bound, not a wild guess
    # what is kept of each unit is the first of its records: `k` is complete only where nothing
    # was dropped, and every kept `r` pair is one of the first iterations
    got = enters_per_unit(prof, info.scopes)
    for (cta, _), names in got.items():
        assert set(names) <= {"k", "r"} and names.count("r") <= 1 + 7 * cta
    assert got[(0, 0)] == ["k", "r"]  # 4 records: the unit block and one chunk hold them
    assert "k" not in got[(3, 0)]  # 46 records: its exit of k was dropped
    assert launch["unmatched"] == launch["records"] - 2 * len(prof.intervals)


def test_a_torn_chunk_is_counted_and_its_records_dropped(tmp_path):
    body = trips_from_cta("%r2", "%r7") + ["E k"] + count_loop(LONG, "$L_h", "%r2", "r") + ["X k"]
    full, buffer, _ = run_pool(tmp_path, body, {"%r7": 7}, capacity=3, chunks=64)

    def tear(buf, layout, ctas):  # chunk 1's header never written (a fault), as its records were
        at = LAUNCH_PREFIX_BYTES + ctas * layout.stride + 1 * layout.chunk_bytes
        buf[at:at + CHUNK_HEADER_BYTES] = bytes(CHUNK_HEADER_BYTES)

    torn, _, _ = run_pool(tmp_path, body, {"%r7": 7}, capacity=3, chunks=64, damage=tear)
    a, b = full.launches[0], torn.launches[0]
    assert b["torn_chunks"] == 1
    assert b["records"] + b["dropped"] == a["records"] and 0 < a["records"] - b["records"] <= 5
    assert "never written" in torn.keep_all_hint()


def test_chunks_are_read_in_any_order(tmp_path):
    """The chunks of a launch permuted in the buffer decode to the same profile."""
    body = trips_from_cta("%r2", "%r7") + ["E k"] + count_loop([FMA], "$L_h", "%r2", "r") + ["X k"]
    base, buffer, _ = run_pool(tmp_path, body, {"%r7": 7}, capacity=3, chunks=64)

    def permute(buf, layout, ctas):
        start = LAUNCH_PREFIX_BYTES + ctas * layout.stride
        n = (len(buf) - start) // layout.chunk_bytes
        parts = [bytes(buf[start + i * layout.chunk_bytes:start + (i + 1) * layout.chunk_bytes]) for i in range(n)]
        buf[start:] = b"".join(parts[::-1])

    perm, _, _ = run_pool(tmp_path, body, {"%r7": 7}, capacity=3, chunks=64, damage=permute)
    assert np.array_equal(base.intervals, perm.intervals)
    assert base.launches["records"][0] == perm.launches["records"][0]


def test_a_hand_built_pool_buffer_decodes_by_the_documented_layout(tmp_path):
    """Independent of the pass: a buffer written from docs/format.md §1.4 with struct."""
    layout = BufferLayout("warp", 2, 256, "global", "clamp", sized_at_launch=True, overflow="sink", pool=True,
                          chunk_slots=3)
    cap, epoch, n_ctas = 2, 99, 1
    unit_block = UNIT_HEADER_BYTES + (cap + 2) * RECORD_BYTES
    stride = CTA_HEADER_BYTES + 2 * unit_block
    clk0 = 5000

    def rec(scope, end, clk):
        return struct.pack("<II", encode_tag(scope, end), clk)
    # unit 0 writes 7 records: a(0..3) enter/exit pairs: E a X a E a X a E a X a E b? -> 3 pairs + 1 unmatched
    seq0 = [(0, False), (0, True)] * 3 + [(1, False)]
    seq1 = [(1, False), (1, True)]  # unit 1: fits its block
    cta = struct.pack("<IIQQII", CTA_MAGIC, 3, 10_000_000, clk0, LAYOUT_VERSION, 2)
    blocks = cta
    for u, seq in enumerate((seq0, seq1)):
        recs = b"".join(rec(s, e, clk0 + 100 * (i + 1) + u) for i, (s, e) in enumerate(seq[:cap]))
        head = struct.pack("<IIQQ", len(seq), UNIT_MAGIC, 10_000_000 + 2000, clk0 + 4000)
        blocks += head + recs.ljust((cap + 2) * RECORD_BYTES, b"\0")
    assert len(blocks) == stride

    def chunk(unit, first, seq):
        recs = b"".join(rec(s, e, clk0 + 100 * (first + i + 1)) for i, (s, e) in enumerate(seq))
        return struct.pack("<IIII", (CHUNK_TAG << 16) | unit, epoch, 0, first) + recs.ljust(4 * RECORD_BYTES, b"\0")
    # unit 0's records 2..4 and 5..6, in chunks stored in reverse order; one torn chunk between
    pool = chunk(0, 5, seq0[5:7]) + bytes(CHUNK_HEADER_BYTES + 4 * RECORD_BYTES) + chunk(0, 2, seq0[2:5])
    prefix = struct.pack("<IIII", capacity_word(cap), 3, epoch, 3)
    path = str(tmp_path / "hand.plraw")
    w = RawWriter(path, {"name": "hand"})
    w.kernel({"id": 0, "name": "k", "hash": "h", "num_warps": 2, "num_ctas": 1, "shared": 0,
              "profile_scratch_size": layout.stride,
              "proton_lite": {"layout_version": LAYOUT_VERSION, "scopes": ["a", "b"], "layout": layout.to_json(),
                              "stride": layout.stride, "kernel": "k"}})
    w.launch(0, 0, 0, (n_ctas, 1, 1), n_ctas, 0, 0, prefix + blocks + pool)
    w.end({"launches": 1})
    w.close()
    prof = decode(read_raw(path))
    launch = prof.launches[0]
    assert (launch["records"], launch["dropped"], launch["torn_chunks"]) == (9, 0, 1)
    assert (launch["pool_chunks"], launch["pool_taken"]) == (3, 3)
    iv = prof.intervals[np.argsort(prof.intervals["start_ns"], kind="stable")]
    unit0 = iv[iv["unit"] == 0]
    assert unit0["scope"].tolist() == [0, 0, 0] and launch["unmatched"] == 1  # the last enter of b has no exit
    assert (np.diff(unit0["start_ns"]) > 0).all()
    assert iv[iv["unit"] == 1]["scope"].tolist() == [1]


def test_the_plan_bounds_every_path_between_checks():
    """Headroom by hand: the outer check makes room for `out`'s enter and exit and, when the
    loop ends there, `k`'s exit; the inner one for its body (2), `out`'s exit (1) and,
    leaving both loops, `k`'s exit (1)."""
    inner = count_loop([FMA], "$L_in", "%r4", "in")
    body = ["E k"] + count_loop(["\tmov.u32 %r4, %r5;", *inner], "$L_out", "%r2", "out") + ["X k"]
    ptx = fold_exit_branches(_ptx(body))
    info = scan(ptx)
    lines = ptx.split("\n")
    start, end = function_body(lines)
    p = plan_pool(lines, start, end, {s.line for s in info.sites}, info.back_edges)
    heads = {lines[line].strip(): room for line, room in p.checks.items()}
    assert heads == {"$L_out:": 3, "$L_in:": 4}
    assert p.entry_records == 2  # E k, then X k when the outer loop runs no trip
    assert p.max_headroom == 4


def test_triton_kernels_with_loaded_bounds_while_loops_and_nested_ones_get_a_pool():
    import triton
    import triton.language as tl
    import proton_lite.language as pl

    @triton.jit
    def segments(offs_ptr, x_ptr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        start = tl.load(offs_ptr + pid)
        end = tl.load(offs_ptr + pid + 1)
        for r in range(start, end):
            with pl.scope("row"):
                x = tl.load(x_ptr + r * BLOCK + tl.arange(0, BLOCK))
                tl.store(x_ptr + r * BLOCK + tl.arange(0, BLOCK), x + 1)

    @triton.jit
    def until(x_ptr, n_ptr):
        n = tl.load(n_ptr)
        i = 0
        while i < n:
            with pl.scope("step"):
                tl.store(x_ptr + i, i)
            i += 1

    @triton.jit
    def nested(offs_ptr, x_ptr):
        pid = tl.program_id(0)
        for r in range(tl.load(offs_ptr + pid), tl.load(offs_ptr + pid + 1)):
            with pl.scope("outer"):
                for c in range(0, tl.load(offs_ptr + r)):
                    with pl.scope("inner"):
                        tl.store(x_ptr + c, 1.0)

    cases = [(segments, {"offs_ptr": "*i32", "x_ptr": "*fp32"}, {"BLOCK": 128}),
             (until, {"x_ptr": "*i32", "n_ptr": "*i32"}, {}),
             (nested, {"offs_ptr": "*i32", "x_ptr": "*fp32"}, {})]
    for kernel, sig, const in cases:
        ck = proton_lite.compile(kernel, sig, const)
        layout = ck.profile["layout"]
        assert layout.get("pool") and layout["sized_at_launch"] and layout["chunk_slots"] == 255, kernel.__name__
        assert ck.profile["pool_checks"] >= 1 and ck.profile["pool_entry_records"] <= 2  # a rotated loop: its first enter
        assert "atom.global.add.u32" in ck.asm["ptx"] and "shfl.sync.idx" in ck.asm["ptx"]
        assert ck.asm["cubin"][:4] == b"\x7fELF"  # ptxas took it
    # an explicit capacity or a circular buffer keep their fixed capacity
    fixed = proton_lite.compile(segments, cases[0][1], {"BLOCK": 128}, capacity=64).profile["layout"]
    ring = proton_lite.compile(segments, cases[0][1], {"BLOCK": 128}, buffer_mode="circular").profile["layout"]
    assert not fixed.get("pool") and fixed["capacity"] == 64
    assert not ring.get("pool") and ring["capacity"] == 256


def test_compile_report_names_the_pool(capsys, tmp_path):
    from proton_lite.viewer import cli
    src = tmp_path / "seg.py"
    src.write_text("""
import triton
import triton.language as tl
import proton_lite.language as pl


@triton.jit
def segments(offs_ptr, x_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for r in range(tl.load(offs_ptr + pid), tl.load(offs_ptr + pid + 1)):
        with pl.scope("row"):
            tl.store(x_ptr + r * BLOCK + tl.arange(0, BLOCK), 1.0)
""")
    args = ["compile", f"{src}:segments", "--signature", "*i32,*fp32", "--constexpr", "BLOCK=128"]
    assert cli.main(args + ["--json"]) == 0
    import json
    r = json.loads(capsys.readouterr().out)
    assert r["pool"] == {"chunk_slots": 255, "checks": 1, "entry_records": 0} and r["sized_at_launch"]
    assert cli.main(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "every record kept" in text and "chunks of 255 records" in text


@pytest.mark.parametrize("case", ["whole pool", "torn chunk", "exhausted pool"])
def test_a_pool_launch_paired_in_slices_of_ctas_decodes_to_the_same_profile(tmp_path, monkeypatch, case):
    """A large launch's records go in slices of CTAs (decode_slices), a pool launch's from its
    unit blocks and chunks (``PoolRegions.records`` of a run of groups): the same profile byte
    for byte, torn chunks and an exhausted pool's dropped records included."""
    import proton_lite.decode as D
    from proton_lite import decode_slices, native_decode
    if native_decode.module() is None:
        pytest.skip("the C decode steps do not build here")
    body = trips_from_cta("%r2", "%r7") + ["E k"] + count_loop(LONG, "$L_h", "%r2", "r") + ["X k"]

    def tear(buf, layout, ctas):
        at = LAUNCH_PREFIX_BYTES + ctas * layout.stride + 2 * layout.chunk_bytes
        buf[at:at + CHUNK_HEADER_BYTES] = bytes(CHUNK_HEADER_BYTES)

    run_pool(tmp_path, body, {"%r7": 3}, capacity=3, chunks=12 if case == "exhausted pool" else 256, ctas=8,
             num_warps=2, damage=tear if case == "torn chunk" else None)
    cap = read_raw(str(tmp_path / "pool.plraw"))
    profiles = []
    for slice_records, workers in ((1 << 40, 1), (1, 1), (20, 1), (60, 3)):
        monkeypatch.setattr(D, "DECODE_WORKERS", workers)
        monkeypatch.setattr(decode_slices, "SLICE_RECORDS", slice_records)
        profiles.append(decode(cap))
    whole = profiles[0]
    la = whole.launches[0]
    assert la["records"] > 40 and (la["torn_chunks"] > 0) == (case == "torn chunk")
    assert (la["dropped"] > 0) == (case != "whole pool")
    for p in profiles[1:]:
        assert p.intervals.tobytes() == whole.intervals.tobytes()
        assert p.launches.tobytes() == whole.launches.tobytes() and p.ctas.tobytes() == whole.ctas.tobytes()
