"""Where the records land: the pass's output for small PTX kernels, run on the CPU by
tests/ptx_sim.py, read back with the decoder's own CTA block layout.

Each case checks, for every unit of every CTA: the count of records, the tags of the kept
records in program order (the first ``capacity`` of them, whatever the loop shape: pairs,
deferred stores, unrolled copies, sink slots past the capacity), and timestamps that
increase. The simulator raises on any access outside the buffer. The GPU suite checks the
same kernels' records on the H100 (tests/test_gpu.py, test_gpu_reliability.py)."""
import sys
from pathlib import Path

import numpy as np
import pytest

from proton_lite.decode import cta_block_dtype, expand_lifetimes
from proton_lite.layout import UNIT_MAGIC, BufferLayout, capacity_word, encode_tag
from proton_lite.passes.ptx_instrument import fold_exit_branches, loop_start, rewrite, scan, shared_bytes
from ptx_sim import Kernel, Launch
from test_kernel_side import _ptx

CTAS = 2
START_CLOCK = 1000  # thread 0's clock before its first instruction (ptx_sim._Thread)
FMA = "\tfma.rn.f32 %f1, %f1, %f2, %f3;"
COUNT_DOWN = ["\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;"]


def loop(body_between: list[str], label="$L_head", counter="%r2", scope="r") -> list[str]:
    """A loop of ``counter`` iterations (0 runs none) around one scope, LLVM's shape: a guard,
    the head, the scope, the count-down and the conditional back edge."""
    return [f"\tsetp.eq.s32 %p3, {counter}, 0;", f"\t@%p3 bra {label}_out;", f"{label}:", f"E {scope}",
            *body_between, f"X {scope}", f"\tadd.s32 {counter}, {counter}, -1;",
            f"\tsetp.ne.s32 %p1, {counter}, 0;", f"\t@%p1 bra {label};", f"{label}_out:"]


def run(body: list[str], layout: BufferLayout, regs: dict, launch_capacity: int | None = None,
        start_at_exit: bool = True, clock_base: int = START_CLOCK):
    """Rewrite ``_ptx(body)`` with ``layout`` as the stage hook does, run it, return the CTA
    blocks (decoder dtype) and the layout the buffer was read with."""
    ptx = fold_exit_branches(_ptx(body))
    out = rewrite(ptx, scan(ptx), layout, start_at_exit=start_at_exit)
    read = layout
    if layout.sized_at_launch:
        read = layout.with_capacity(launch_capacity)
    mem = bytearray(read.buffer_bytes(CTAS))
    if layout.sized_at_launch:
        mem[0:4] = capacity_word(launch_capacity).to_bytes(4, "little")
    Kernel(out).run(Launch(grid=CTAS, threads=layout.num_warps * 32, params={"k_param_1": 1 << 32},
                           global_mem=mem, shared_bytes=shared_bytes(layout) if layout.staging == "shared" else 0,
                           regs=regs, clock_base=clock_base))
    data = bytes(mem[read.prefix:])
    if read.compact:  # lifetime blocks, read as the headers they hold (the decoder's own step)
        data, read = expand_lifetimes(data, CTAS), read.expanded()
    blocks = np.frombuffer(data, dtype=cta_block_dtype(read), count=CTAS)
    return blocks, read


def check(blocks, layout: BufferLayout, tags: list[int]) -> None:
    kept = min(len(tags), layout.capacity)
    units = blocks["unit"]
    assert (units["count"] == len(tags)).all(), (len(tags), units["count"])
    recs = units["rec"][:, :, :kept, :]
    assert (recs[..., 0] == np.array(tags[:kept], dtype=np.uint32)).all(), (tags[:kept], recs[0, 0, :, 0].tolist())
    assert (np.diff(recs[..., 1].astype(np.int64), axis=2) > 0).all()  # one clock, in program order


def scoped(name_id: int, inner: list[int]) -> list[int]:
    return [encode_tag(name_id, False)] + inner + [encode_tag(name_id, True)]


def global_layout(capacity, sized=False, granularity="warp", num_warps=1):
    return BufferLayout(granularity, num_warps, capacity, "global", sized_at_launch=sized, overflow="sink")


TIGHT = [FMA]  # one instruction between the records: _link_close_sites links them both ways
LONG = [FMA] * 9  # more than CLOSE_GAP: a loop that defers its last record (stored by address)


@pytest.mark.parametrize("shape", ["tight", "long"])
@pytest.mark.parametrize("trips", [0, 1, 2, 3, 6])
@pytest.mark.parametrize("capacity", ["exact", 7, 6, 0])
def test_a_loop_bounded_by_an_argument_keeps_its_first_records_in_order(shape, trips, capacity):
    """Sized at launch (global staging, sink slots): a tight loop is unrolled twice, a longer one
    defers its last record to the next one's address - 8. With the launch's capacity exact,
    odd, even or 0 (a tagged buffer with no slots) every unit keeps its first records."""
    body = ["E k"] + loop(TIGHT if shape == "tight" else LONG) + ["X k"]
    tags = scoped(0, [encode_tag(1, False), encode_tag(1, True)] * trips)
    cap = len(tags) if capacity == "exact" else capacity
    blocks, read = run(body, global_layout(256, sized=True), {"%r2": trips}, launch_capacity=cap)
    check(blocks, read, tags)
    out = rewrite(_ptx(body), scan(_ptx(body)), global_layout(256, sized=True))
    assert ("$pl_unrolled_exit_0" in out) == (shape == "tight")


@pytest.mark.parametrize("granularity,num_warps", [("warp", 2), ("warpgroup", 4), ("cta", 2)])
@pytest.mark.parametrize("capacity", [64, 5])
def test_units_of_every_granularity_keep_their_records(granularity, num_warps, capacity):
    """Compiled capacity, global staging: warp units store from every lane, larger ones from
    their leader; a loop after a record starts its pairs at an odd slot."""
    body = ["E k"] + loop(TIGHT) + ["X k"]
    tags = scoped(0, [encode_tag(1, False), encode_tag(1, True)] * 5)
    blocks, read = run(body, global_layout(capacity, granularity=granularity, num_warps=num_warps), {"%r2": 5})
    check(blocks, read, tags)


@pytest.mark.parametrize("staging", ["global", "shared"])
@pytest.mark.parametrize("capacity", [200, 9])
def test_nested_and_consecutive_loops_keep_every_record_in_order(staging, capacity):
    """An outer loop (deferring) around a tight inner one, then a second tight loop: pending
    records are stored by their own loop, once."""
    inner = loop(TIGHT, label="$L_in", counter="%r4", scope="in")
    outer = ["\tmov.u32 %r4, %r5;", *inner]  # the inner trip count, again on each outer pass
    body = ["E k"] + loop(outer, label="$L_out0", counter="%r2", scope="out") + \
        loop(TIGHT, label="$L_after", counter="%r6", scope="after") + ["X k"]
    layout = BufferLayout("warp", 1, capacity, staging, overflow="sink" if staging == "global" else "drop")
    n_out, n_in, n_after = 3, 2, 3
    tags = []
    for _ in range(n_out):
        tags += scoped(1, [encode_tag(2, False), encode_tag(2, True)] * n_in)
    tags = scoped(0, tags + [encode_tag(3, False), encode_tag(3, True)] * n_after)
    blocks, read = run(body, layout, {"%r2": n_out, "%r5": n_in, "%r6": n_after})
    check(blocks, read, tags)


def blocks_layout(capacity, flush_slots=4, sized=True, granularity="warp", num_warps=1):
    """Shared staging copied in blocks of ``flush_slots`` records to global unit blocks."""
    return BufferLayout(granularity, num_warps, capacity, "shared", sized_at_launch=sized, overflow="sink",
                        flush_slots=flush_slots)


def with_copies(tags: list[int], flush_slots: int, runs: list[int], copy_id=2) -> list[int]:
    """The unit's records with the copies' own pairs where the pass puts them: before a
    straight run of records (``runs``: their lengths, in order; ptx_staging.mark_block_checks)
    that does not fit in the block; a copy leaves its own two staged. The copy scope comes
    after the kernel's own (id 2 after k and one loop's scope)."""
    assert sum(runs) == len(tags)
    out, staged, i = [], 0, 0
    for n in runs:
        if staged + n > flush_slots:
            out += [encode_tag(copy_id, False), encode_tag(copy_id, True)]
            staged = 2
        out += tags[i:i + n]
        staged += n
        i += n
    return out


def check_blocks(blocks, layout: BufferLayout, tags: list[int], copy_id=2) -> None:
    """check() for a unit staged in blocks, and each copy's pair: an enter then its exit,
    the time the copy took between them (the simulator's clock: one per instruction)."""
    check(blocks, layout, tags)
    kept = min(len(tags), layout.capacity)
    recs = blocks["unit"]["rec"][:, :, :kept, :]
    for j in [j for j in range(kept - 1) if tags[j] == encode_tag(copy_id, False)]:
        assert tags[j + 1] == encode_tag(copy_id, True)
        assert (recs[..., j + 1, 1].astype(np.int64) - recs[..., j, 1] > 10).all()


@pytest.mark.parametrize("shape", ["tight", "long"])
@pytest.mark.parametrize("trips", [0, 1, 3, 7, 20])
@pytest.mark.parametrize("capacity", ["exact", 7, 6, 3, 0])
@pytest.mark.parametrize("flush_slots", [4, 6])
def test_records_staged_in_blocks_land_in_order_whatever_the_launch_capacity(shape, trips, capacity, flush_slots):
    """Sized at launch, staged in blocks: each time a block fills (a tight loop's pair may
    overfill it by one) the warp copies it to the unit block, record i to slot i, past the
    launch's capacity to the sink slot; the rest at exit. Nothing is deferred past a copy.
    The simulator raises on any access outside the shared staging or the buffer."""
    body = ["E k"] + loop(TIGHT if shape == "tight" else LONG) + ["X k"]
    user = scoped(0, [encode_tag(1, False), encode_tag(1, True)] * trips)
    # runs: k's enter, each iteration's two records (a basic block; a pair if tight), k's exit
    tags = with_copies(user, flush_slots, [1] + [2] * trips + [1])
    copies = (len(tags) - len(user)) // 2
    layout = blocks_layout(256, flush_slots)
    assert len(tags) <= layout.records_with_copies(len(user))  # what the launch sizes the unit for
    cap = layout.records_with_copies(len(user)) if capacity == "exact" else capacity
    out = rewrite(_ptx(body), scan(_ptx(body)), layout)
    assert "mov.pred %pl_pd" not in out and "$pl_unrolled_exit" not in out  # no deferral, no unrolling
    assert out.count("// proton_lite: block copy") == 3  # one check per run
    blocks, read = run(body, layout, {"%r2": trips}, launch_capacity=cap)
    check_blocks(blocks, read, tags)
    assert (copies > 0) == (len(user) > flush_slots)


@pytest.mark.parametrize("label,checks", [("$L__tmp7", 3), ("$L__BB0_7", 4)])
def test_line_info_labels_do_not_split_a_run_of_records(label, checks):
    """A kernel compiled with line info (Triton's default) has LLVM's ``$L__tmpN`` labels
    around every inlined call (tl.max, tl.sum): no branch goes there, so a loop body holding
    them is one basic block and checks for room once per iteration, for both its records (the
    grid-stride softmax of loops.py checked twice). A label a branch may reach splits it."""
    body = ["E k"] + loop([FMA, f"{label}:", FMA]) + ["X k"]
    if label.startswith("$L__BB"):  # a real block: something branches there
        body = ["\t@%p4 bra " + label + ";"] + body
    layout = blocks_layout(256, 4)
    out = rewrite(_ptx(body), scan(_ptx(body)), layout)
    assert out.count("// proton_lite: block copy") == checks
    trips = 7
    user = scoped(0, [encode_tag(1, False), encode_tag(1, True)] * trips)
    runs = [1] + ([2] if checks == 3 else [1, 1]) * trips + [1]
    tags = with_copies(user, 4, runs)
    blocks, read = run(body, layout, {"%r2": trips}, launch_capacity=layout.records_with_copies(len(user)))
    check_blocks(blocks, read, tags)


@pytest.mark.parametrize("granularity,num_warps", [("warp", 2), ("warpgroup", 4), ("cta", 2)])
@pytest.mark.parametrize("sized", [True, False])
def test_blocks_of_every_granularity_are_copied_by_the_unit_s_first_warp(granularity, num_warps, sized):
    """Larger units stage from their leader lane and copy with their first warp, the other
    warps only keep the pointer; a compiled capacity works as the launch's does."""
    body = ["E k"] + loop(LONG) + ["X k"]
    tags = with_copies(scoped(0, [encode_tag(1, False), encode_tag(1, True)] * 9), 4, [1] + [2] * 9 + [1])
    layout = blocks_layout(17, sized=sized, granularity=granularity, num_warps=num_warps)
    blocks, read = run(body, layout, {"%r2": 9}, launch_capacity=17 if sized else None)
    check_blocks(blocks, read, tags)
    assert len(tags) > 20  # copies came


def test_nested_and_consecutive_loops_staged_in_blocks_keep_every_record_in_order():
    inner = loop(TIGHT, label="$L_in", counter="%r4", scope="in")
    outer = ["\tmov.u32 %r4, %r5;", *inner]
    body = ["E k"] + loop(outer, label="$L_out0", counter="%r2", scope="out") + \
        loop(TIGHT, label="$L_after", counter="%r6", scope="after") + ["X k"]
    n_out, n_in, n_after = 3, 2, 5
    tags = []
    for _ in range(n_out):
        tags += scoped(1, [encode_tag(2, False), encode_tag(2, True)] * n_in)
    user = scoped(0, tags + [encode_tag(3, False), encode_tag(3, True)] * n_after)
    # runs: k's enter, out's enter, each inner pair, out's exit, ..., each last pair, k's exit
    runs = [1] + ([1] + [2] * n_in + [1]) * n_out + [2] * n_after + [1]
    layout = blocks_layout(256, 6)
    expected = with_copies(user, 6, runs, copy_id=4)
    assert len(expected) > len(user) + 4
    for cap in (layout.records_with_copies(len(user)), 11):
        blocks, read = run(body, layout, {"%r2": n_out, "%r5": n_in, "%r6": n_after}, launch_capacity=cap)
        check_blocks(blocks, read, expected, copy_id=4)


def test_a_tight_global_loop_left_as_it_is_defers_its_last_record_and_keeps_it():
    """A tight loop whose head another branch reaches is not unrolled: its last record is
    deferred to the next iteration's first (its own address kept in set 2)."""
    body = ["E k", "\t@%p4 bra $L_head;"] + loop(TIGHT) + ["X k"]
    ptx = _ptx(body)
    assert "$pl_unrolled_exit" not in rewrite(ptx, scan(ptx), global_layout(8))
    for trips in (1, 4, 5):
        tags = scoped(0, [encode_tag(1, False), encode_tag(1, True)] * trips)
        blocks, read = run(body, global_layout(8), {"%r2": trips})
        check(blocks, read, tags)


def test_a_loop_left_by_a_conditional_exit_before_an_unconditional_back_edge_is_unrolled_too():
    """LLVM's other loop shape (``@%p bra $exit; bra.uni $head; $exit:``, Triton 3.6 for the
    first of two loops) is folded into a conditional back edge before the scan
    (fold_exit_branches): the loop is unrolled and keeps its records; the fold happens only
    where the exit block comes next."""
    shape = ["\tsetp.eq.s32 %p3, %r2, 0;", "\t@%p3 bra $L_out;", "$L_head:", "E r", FMA, "X r",
             "\tadd.s32 %r2, %r2, -1;", "\tsetp.eq.s32 %p1, %r2, 0;", "\t@%p1 bra $L_out;", "\tbra.uni $L_head;",
             "\t// a comment", "$L_out:"]
    body = ["E k"] + shape + ["X k"]
    folded = fold_exit_branches(_ptx(body))
    assert "\t@!%p1 bra $L_head;" in folded.split("\n") and "bra.uni $L_head;" not in folded
    assert "$pl_unrolled_exit_0" in rewrite(folded, scan(folded), global_layout(64, sized=True))
    for trips in (0, 1, 4, 5):
        tags = scoped(0, [encode_tag(1, False), encode_tag(1, True)] * trips)
        blocks, read = run(body, global_layout(64, sized=True), {"%r2": trips}, launch_capacity=len(tags))
        check(blocks, read, tags)
    # not folded: another instruction before the exit block
    other = shape[:-2] + ["\tadd.s32 %r3, %r3, 1;", "$L_out:"]
    assert "bra.uni $L_head;" in fold_exit_branches(_ptx(other))


@pytest.mark.parametrize("start_at_exit", [True, False])
@pytest.mark.parametrize("granularity,num_warps", [("cta", 8), ("warp", 2), ("warpgroup", 4)])
def test_a_kernel_without_scopes_writes_every_lifetime_and_nothing_else(granularity, num_warps, start_at_exit):
    """No scope: capacity 0, no record slot, no staging (stage_hook.choose_layout); the CTA
    header (at exit from the start pair read at entry, or at entry: ptx_lifetimes.py), each
    unit's leader its header at exit, and every byte that nobody writes stays zero."""
    layout = BufferLayout(granularity, num_warps, 0, "global")
    assert layout.stride == 32 + layout.units * 24
    blocks, _ = run([FMA, FMA], layout, {}, start_at_exit=start_at_exit)
    assert (blocks["magic"] == 0x314C5043).all() and (blocks["units"] == layout.units).all()
    assert blocks["smid"].tolist() == [c % 132 for c in range(CTAS)]
    units = blocks["unit"]
    assert (units["magic"] == 0x31554C50).all() and (units["count"] == 0).all()
    assert (units["end_gt"] > blocks["start_gt"][:, None]).all() and (units["end_clk"] > 0).all()


@pytest.mark.parametrize("staging", ["global", "shared"])
@pytest.mark.parametrize("granularity,num_warps", [("warp", 2), ("warpgroup", 4), ("cta", 2)])
def test_a_straight_line_kernel_with_scopes_writes_its_cta_header_at_exit(staging, granularity, num_warps):
    """Scopes but no loop (a vector add, a one-row softmax): the start pair's low halves are
    the kernel's first two reads and thread 0 writes the CTA header after its unit's, at
    every exit; the header and every record are those of the entry form, the start
    earlier (no address arithmetic before it), also where the low halves wrap before exit."""
    from proton_lite.passes.ptx_instrument import keeps_start_pair
    body = ["E k", FMA, "\tsetp.eq.s32 %p3, %r2, 0;", "\t@%p3 ret;", "E s", FMA, "X s", "X k"]
    layout = BufferLayout(granularity, num_warps, 6, staging, overflow="sink" if staging == "global" else "drop")
    ptx = fold_exit_branches(_ptx(body))
    assert keeps_start_pair(ptx, scan(ptx), layout)
    out = rewrite(ptx, scan(ptx), layout).split("\n")
    assert [line.strip() for line in out[out.index("\t// proton_lite: prologue") - 2:][:2]] == [
        "mov.u32 %pl_r13, %globaltimer_lo;", "mov.u32 %pl_r14, %clock;"]
    assert sum("st.global.v2.u32 [%pl_d0], {%pl_r11, %pl_r10};" in line for line in out) == 2  # one per ret
    full = scoped(0, scoped(1, []))
    for early, tags in ((0, full), (1, [encode_tag(0, False)])):  # the early ret leaves k open
        for base in (START_CLOCK, (1 << 32) - 20):
            exit_form, read = run(body, layout, {"%r2": 1 - early}, clock_base=base)
            entry_form, _ = run(body, layout, {"%r2": 1 - early}, start_at_exit=False, clock_base=base)
            check(exit_form, read, tags)
            check(entry_form, read, tags)
            for field in ("magic", "smid", "version", "units"):
                assert (exit_form[field] == entry_form[field]).all(), field
            assert (exit_form["magic"] == 0x314C5043).all() and (exit_form["units"] == layout.units).all()
            assert (exit_form["start_clk"] == base + 2).all() and (entry_form["start_clk"] > base + 10).all()
            assert (exit_form["start_gt"] == 10 * (base + 1)).all()
            first = exit_form["unit"]["rec"][:, :, 0, 1].astype(np.int64)  # the first record's clock (low half)
            assert (((first - (exit_form["start_clk"][:, None] & 0xFFFFFFFF)) % (1 << 32)) < 1 << 20).all()  # after it
            assert (exit_form["unit"]["end_clk"] > exit_form["start_clk"][:, None]).all()


@pytest.mark.parametrize("granularity,num_warps", [("cta", 4), ("warp", 2)])
def test_the_exit_as_a_function_writes_what_the_inline_exit_writes(granularity, num_warps, monkeypatch):
    """ptx_lifetimes.EXIT_IN_FUNCTION: each ret calls one .func, defined before the kernel,
    with the buffer and the start halves; the CTA and unit headers are those of the inline
    exit, at both exits, also where the low halves wrap before exit."""
    from proton_lite.passes import ptx_lifetimes
    layout = BufferLayout(granularity, num_warps, 0, "global")
    body = [FMA, "\tsetp.eq.s32 %p3, %r2, 0;", "\t@%p3 ret;", FMA]
    inline = {(early, base): run(body, layout, {"%r2": 1 - early}, clock_base=base)[0]
              for early in (0, 1) for base in (START_CLOCK, (1 << 32) - 20)}
    monkeypatch.setattr(ptx_lifetimes, "EXIT_IN_FUNCTION", True)
    ptx = fold_exit_branches(_ptx(body))
    out = rewrite(ptx, scan(ptx), layout)
    assert out.count(".func __proton_lite_exit_k(") == 1 and out.count("call.uni __proton_lite_exit_k,") == 2
    assert out.index(".func __proton_lite_exit_k(") < out.index(".visible .entry k(")
    for (early, base), expected in inline.items():
        blocks, _ = run(body, layout, {"%r2": 1 - early}, clock_base=base)
        for field in ("magic", "smid", "start_gt", "start_clk", "version", "units"):
            assert (blocks[field] == expected[field]).all(), (field, early, base)
        units, want = blocks["unit"], expected["unit"]
        assert (units["magic"] == want["magic"]).all() and (units["count"] == 0).all()
        assert (units["end_clk"] >= want["end_clk"]).all() and (units["end_clk"] > blocks["start_clk"][:, None]).all()
    # a loop: the function reads the start from shared memory; the header at entry has no exit function
    body = [FMA, "$L_head:", FMA, "\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;", "\t@%p1 bra $L_head;",
            "\tsetp.eq.s32 %p3, %r3, 0;", "\t@%p3 ret;", FMA]
    looped = fold_exit_branches(_ptx(body))
    out = rewrite(looped, scan(looped), layout)
    # thread 0's kept halves (gt5: the timer from bit 5), passed as the straight-line kernel's are
    assert out.count(".func __proton_lite_exit_k(.param .b64 pl_buf, .param .b32 pl_gt0, .param .b32 pl_clk0)") == 1
    called = {early: run(body, layout, {"%r2": 3, "%r3": 1 - early})[0] for early in (0, 1)}
    monkeypatch.setattr(ptx_lifetimes, "EXIT_IN_FUNCTION", False)
    for early, blocks in called.items():
        inline, _ = run(body, layout, {"%r2": 3, "%r3": 1 - early})
        for field in ("magic", "smid", "start_clk", "version", "units"):
            assert (blocks[field] == inline[field]).all(), (field, early)
        # gt5 keeps the timer from bit 5: the start's low bits are the end's, which the call reads later
        # (the simulator's timer is not in 32 ns ticks as the H100's and H200's are)
        assert (abs(blocks["start_gt"].astype(np.int64) - inline["start_gt"].astype(np.int64)) < 32).all()
        assert (blocks["unit"]["magic"] == UNIT_MAGIC).all()
    monkeypatch.setattr(ptx_lifetimes, "EXIT_IN_FUNCTION", True)
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", "entry")
    assert ".func" not in rewrite(looped, scan(looped), layout)


def test_a_kernel_without_scopes_reads_its_start_first_and_writes_its_header_at_exit(monkeypatch):
    """The kernel's first two instructions read the start pair's low halves, nothing else of
    ours runs before the kernel's own code (no %tid, no address, no store), and the CTA header
    is written at exit by thread 0 alone, with the 64-bit pair rebuilt from the end pair, also
    where the low halves wrap in between (the simulator's clock counts instructions: the start
    clock is thread 0's first one).  Read with the exit inline, as a session builds it (with
    PROTON_LITE_EXIT_CALL=1 the exit is a call of a .func that writes the same: the test above)."""
    from proton_lite.passes import ptx_lifetimes
    from proton_lite.passes.ptx_instrument import keeps_start_pair
    monkeypatch.setattr(ptx_lifetimes, "EXIT_IN_FUNCTION", False)
    layout = BufferLayout("cta", 4, 0, "global")
    ptx = _ptx([FMA, "\tsetp.eq.s32 %p3, %r2, 0;", "\t@%p3 ret;", FMA])
    out = rewrite(ptx, scan(ptx), layout).split("\n")
    first = out.index("\t// proton_lite: prologue (lifetimes only: the start pair, stored at exit)")
    assert [line.strip() for line in out[first + 1:first + 3]] == ["mov.u32 %pl_r13, %globaltimer_lo;",
                                                                   "mov.u32 %pl_r14, %clock;"]
    assert out[first + 3] == FMA
    assert sum("st.global.v2.u32 [%pl_d0], {%pl_r11, %pl_r10};" in line for line in out) == 2  # one per ret
    for early in (0, 1):  # the CTA leaves by the predicated ret or by the last one
        blocks, _ = run([FMA, "\tsetp.eq.s32 %p3, %r2, 0;", "\t@%p3 ret;", FMA], layout, {"%r2": 1 - early})
        assert (blocks["magic"] == 0x314C5043).all() and (blocks["unit"]["magic"] == 0x31554C50).all()
        assert (blocks["start_clk"] == START_CLOCK + 2).all()
        assert (blocks["unit"]["end_clk"] > blocks["start_clk"][:, None]).all()
    # the low halves wrap between start and exit: both (clock and timer), the timer's alone
    cases = ((START_CLOCK, (False, False)), ((1 << 32) - 5, (True, True)), ((1 << 32) // 10 - 3, (True, False)))
    for base, wraps in cases:
        blocks, _ = run([FMA, FMA], layout, {}, clock_base=base)
        # the simulator's clock ticks before each instruction: the two reads see base + 1, base + 2
        assert (blocks["start_gt"] == 10 * (base + 1)).all() and (blocks["start_clk"] == base + 2).all(), base
        end = blocks["unit"][:, 0]
        assert ((end["end_gt"] >> 32 != blocks["start_gt"] >> 32).all(),
                (end["end_clk"] >> 32 != blocks["start_clk"] >> 32).all()) == wraps, base
    entry, _ = run([FMA], layout, {}, start_at_exit=False)
    assert (entry["start_clk"] > START_CLOCK + 10).all()  # read after thread 0's address arithmetic
    assert keeps_start_pair(ptx, scan(ptx), layout)
    assert not keeps_start_pair(ptx.replace(FMA, "\tsetmaxnreg.dec.sync.aligned.u32 24;", 1), scan(ptx), layout)
    assert not keeps_start_pair(ptx, scan(ptx), global_layout(4, sized=True, granularity="cta", num_warps=4))
    body = ["$L_head:", FMA, "\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;", "\t@%p1 bra $L_head;"]
    looped = _ptx(body)
    assert not keeps_start_pair(looped, scan(looped), layout)  # a loop: not in registers (in shared memory: below)
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", "entry")  # PROTON_LITE_LOOP_START=entry
    blocks, _ = run(body, layout, {"%r2": 3})
    assert (blocks["start_clk"] > START_CLOCK + 10).all() and (blocks["magic"] == 0x314C5043).all()


LOOPED = [FMA, "$L_head:", FMA, "\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;", "\t@%p1 bra $L_head;",
          "\tsetp.eq.s32 %p3, %r3, 0;", "\t@%p3 ret;", FMA]


READS = {"gt5": ["mov.u64 %pl_d4, %globaltimer;", "shr.u64 %pl_d4, %pl_d4, 5;", "cvt.u32.u64 %pl_r13, %pl_d4;",
                 "mov.u32 %pl_r14, %clock;"],
         "halves": ["mov.u32 %pl_r13, %globaltimer_lo;", "mov.u32 %pl_r14, %clock;"]}


@pytest.mark.parametrize("form", sorted(READS))
@pytest.mark.parametrize("layout", [BufferLayout("cta", 4, 0, "global", compact=True),
                                    BufferLayout("warp", 2, 0, "global")], ids=["compact", "warps"])
def test_a_loop_kernel_without_scopes_keeps_its_start_until_exit(form, layout, monkeypatch):
    """ptx_lifetimes.LOOP_START: thread 0 alone reads the start before the kernel's code
    (predicated: no branch, no address arithmetic, no global store) and keeps it in the two
    registers a straight-line kernel's threads keep (gt5: the timer from bit 5); at each exit
    it writes the CTA's headers (a compact layout: its lifetime block) from it, whichever ret
    it leaves by."""
    from proton_lite.passes import ptx_lifetimes
    monkeypatch.setattr(ptx_lifetimes, "EXIT_IN_FUNCTION", False)
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", form)
    ptx = fold_exit_branches(_ptx(LOOPED))
    assert loop_start(ptx, scan(ptx), layout) == form
    assert loop_start(ptx.replace(FMA, "\tsetmaxnreg.dec.sync.aligned.u32 24;", 1), scan(ptx), layout) is None
    straight = _ptx([FMA])
    assert loop_start(straight, scan(straight), layout) is None  # no loop: every thread's halves
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", "entry")
    assert loop_start(ptx, scan(ptx), layout) is None
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", form)
    out = rewrite(ptx, scan(ptx), layout, triton_shared=100).split("\n")
    assert not any(".shared" in line for line in out)
    first = out.index("\t// proton_lite: prologue (lifetimes only: the start pair, stored at exit)")
    n = 2 + len(READS[form])
    head = ["mov.u32 %pl_r0, %tid.x;", "setp.eq.u32 %pl_p1, %pl_r0, 0;"] + ["@%pl_p1 " + r for r in READS[form]]
    assert [line.strip() for line in out[first + 1:first + 1 + n]] == head
    assert out[first + 1 + n] == FMA and not any("st.global" in line for line in out[:first + 1 + n])
    # the timer and clock reads: after %tid and its test (gt5: the timer's shift between)
    gt_at, clock_at = {"gt5": (3, 6)}.get(form, (3, 4))
    for early in (0, 1):
        blocks, read = run(LOOPED, layout, {"%r2": 3, "%r3": 1 - early})
        assert (blocks["magic"] == 0x314C5043).all() and (blocks["version"] == 1).all()
        assert (blocks["start_clk"] == START_CLOCK + clock_at).all()
        if form == "gt5":  # the timer kept in its 32 ns ticks: the start's low 5 bits are the end's
            end_gt = blocks["unit"]["end_gt"].min(axis=1)
            assert (abs(blocks["start_gt"].astype(np.int64) - 10 * (START_CLOCK + gt_at)) < 32).all()
            assert (blocks["start_gt"] % 32 == end_gt % 32).all()
        else:
            assert (blocks["start_gt"] == 10 * (START_CLOCK + gt_at)).all()
        assert (blocks["unit"]["magic"] == UNIT_MAGIC).all()
        assert (blocks["unit"]["end_clk"] > blocks["start_clk"][:, None] + 3 * 3).all()


@pytest.mark.parametrize("compact", [True, False], ids=["compact", "headers"])
@pytest.mark.parametrize("lived,exact", [((1 << 37) - (1 << 20), True), ((1 << 37) + (1 << 20), False)])
def test_a_gt5_loop_kernel_s_start_is_exact_for_a_cta_shorter_than_137_s(lived, exact, compact, monkeypatch):
    """``gt5``: the timer kept from bit 5 (its 32 ns tick) gives a CTA's start exactly while it
    lives less than 2^37 ns, past the 2^32 ns of the low half alone: the lifetime block holds
    the length's bits 32-36 in its version word.  A CTA living longer shows its start one
    range late (what the decoder bounds from outside: proton_lite/start_range.py).  The
    kernel's own code puts an older start in thread 0's register (as one ``lived`` ns old)."""
    from proton_lite.passes import ptx_lifetimes
    monkeypatch.setattr(ptx_lifetimes, "EXIT_IN_FUNCTION", False)
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", "gt5")
    layout = BufferLayout("cta", 1, 0, "global", compact=compact)
    base = 1 << 40  # the simulator's timer: 10 ns a tick of its clock, multiples of 32 here
    # thread 0's kept timer: (start >> 5) for a start `lived` ns before the clock's base
    old = [f"\tmov.u32 %pl_r13, {((10 * base - lived) >> 5) & 0xFFFFFFFF};"]
    blocks, _ = run(old + LOOPED, layout, {"%r2": 2, "%r3": 1}, clock_base=base)
    end = blocks["unit"][:, 0]
    start = (10 * base - lived) >> 5 << 5
    if exact:
        assert (blocks["start_gt"] == start + (end["end_gt"] & 31)).all()
        assert ((end["end_gt"] - blocks["start_gt"]) >> 32 > 0).all()  # longer than the low half's range
    else:
        assert (blocks["start_gt"] - (end["end_gt"] & 31) - start == 1 << 37).all()  # one range late



def test_a_straight_run_of_records_checks_for_room_once_per_chunk():
    """Records in one basic block share one check for room, at most flush_run of them (2 with
    blocks of 6): eight records check four times, and the copy comes before the chunk that
    does not fit, never between the records of a chunk."""
    body = ["E k", "E a", FMA, "X a", "E b", FMA, "X b", "E c", "X c", FMA, "X k"]
    user = [encode_tag(0, False), encode_tag(1, False), encode_tag(1, True), encode_tag(2, False),
            encode_tag(2, True), encode_tag(3, False), encode_tag(3, True), encode_tag(0, True)]
    layout = blocks_layout(32, 6, sized=False)
    assert layout.flush_run == 2
    ptx = _ptx(body)
    info = scan(ptx)
    out = rewrite(ptx, info, layout)
    assert [s.room for s in sorted(info.sites, key=lambda s: s.line)] == [2, 0, 2, 0, 2, 0, 2, 0]
    assert out.count("// proton_lite: block copy") == 4
    tags = with_copies(user, 6, [2, 2, 2, 2], copy_id=4)
    assert tags[6:8] == [encode_tag(4, False), encode_tag(4, True)]  # before the fourth chunk
    blocks, read = run(body, layout, {})
    check_blocks(blocks, read, tags, copy_id=4)


@pytest.mark.parametrize("body_between", [TIGHT, LONG], ids=["tight", "long"])
def test_a_line_info_label_before_the_back_edge_changes_no_record_code(body_between):
    """A ``$L__tmpN`` label between a loop body's last record and its count-down (line info)
    leaves the loop's code as without it: the count-down still moves above the record
    (_loop_bookkeeping) and the record's store is still deferred; before, the label stopped
    both. The records are the same, in order."""
    plain = ["E k"] + loop(body_between) + ["X k"]
    labelled = list(plain)
    labelled.insert(labelled.index("X r") + 1, "$L__tmp3:")
    layout = global_layout(64, sized=True)
    outs = []
    for body in (plain, labelled):
        ptx = fold_exit_branches(_ptx(body))
        outs.append([line for line in rewrite(ptx, scan(ptx), layout).splitlines() if line.strip() != "$L__tmp3:"])
    assert outs[0] == outs[1]
    trips = 5
    tags = scoped(0, [encode_tag(1, False), encode_tag(1, True)] * trips)
    blocks, read = run(labelled, layout, {"%r2": trips}, launch_capacity=64)
    check(blocks, read, tags)


@pytest.mark.parametrize("early", [0, 1])
def test_the_four_store_exit_candidate_writes_what_the_leader_writes(monkeypatch, early):
    """``header_forms.py --form v4stores`` (issue 24, a candidate not yet measured): thread 0
    stores the CTA header and unit 0's header, 56 bytes, with four 16-byte-aligned stores
    (even and odd CTAs of the 56-byte stride apart) where the leader's exit makes seven; the
    blocks, of both parities, are the leader's byte for byte."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
    import header_forms
    from proton_lite.passes import ptx_lifetimes
    monkeypatch.setattr(ptx_lifetimes.LifetimesCode, "_exit_code", ptx_lifetimes.LifetimesCode._exit_code)
    layout = BufferLayout("cta", 8, 0, "global")
    body = [FMA, "\tsetp.eq.s32 %p3, %r2, 0;", "\t@%p3 ret;", FMA]
    leader = run(body, layout, {"%r2": 1 - early})[0]
    header_forms.use_form("v4stores")
    four = run(body, layout, {"%r2": 1 - early})[0]
    assert CTAS >= 2 and layout.stride % 16 == 8  # CTA 1's block is 8 bytes off a 16-byte boundary
    assert four.tobytes() == leader.tobytes()
    ptx = fold_exit_branches(_ptx(body))
    out = rewrite(ptx, scan(ptx), layout, start_at_exit=True)
    assert out.count("st.global.v4.u32") == 2 * 6 and "st.global.u64" not in out  # per ret: 3 + 3 of 4 stores


def test_the_one_store_diagnosis_writes_a_cta_s_sm_start_and_end_in_sixteen_bytes(monkeypatch):
    """``header_forms.py --form onestore`` (issue 24, a diagnosis measured beside ``pass`` and
    ``xnostore``): thread 0 of each CTA stores only its SM, its lifetime's length and its end
    (``%globaltimer``), one 16-byte store at 16 bytes per CTA; its start is the leader's exit's."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
    import header_forms
    from proton_lite.passes import ptx_lifetimes
    monkeypatch.setattr(ptx_lifetimes.LifetimesCode, "_exit_code", ptx_lifetimes.LifetimesCode._exit_code)
    layout = BufferLayout("cta", 8, 0, "global")
    leader = run([FMA, FMA], layout, {})[0]
    header_forms.use_form("onestore")
    words = np.frombuffer(run([FMA, FMA], layout, {})[0].tobytes()[:16 * CTAS], "<u4").reshape(CTAS, 4)
    end = words[:, 2].astype(np.int64) | (words[:, 3].astype(np.int64) << 32)
    assert words[:, 0].tolist() == [c % 132 for c in range(CTAS)]
    assert (end - words[:, 1] == leader["start_gt"].astype(np.int64)).all()
    assert (words[:, 1] > 0).all()
    ptx = fold_exit_branches(_ptx([FMA, FMA]))
    out = rewrite(ptx, scan(ptx), layout, start_at_exit=True)
    assert out.count("st.global") == 1 and "st.global.v4.u32" in out


@pytest.mark.parametrize("early", [0, 1])
def test_a_compact_kernel_writes_one_lifetime_block_per_cta_in_two_stores(early):
    """No scope, no loop, one unit per CTA (stage_hook.compact_layout): thread 0 writes its
    CTA's lifetime block (format.md §1.2a) at every exit, two 16-byte stores, and it reads
    back as the headers that the leader's exit writes: the same start, SM and magic, ends a
    few instructions apart."""
    from dataclasses import replace
    headers = BufferLayout("cta", 8, 0, "global")
    body = [FMA, "\tsetp.eq.s32 %p3, %r2, 0;", "\t@%p3 ret;", FMA]
    leader = run(body, headers, {"%r2": 1 - early})[0]
    blocks, read = run(body, replace(headers, compact=True), {"%r2": 1 - early})
    assert read == headers
    for field in ("magic", "smid", "start_gt", "start_clk", "version", "units"):
        assert (blocks[field] == leader[field]).all(), field
    assert (blocks["unit"]["magic"] == UNIT_MAGIC).all() and (blocks["unit"]["count"] == 0).all()
    for end in ("end_gt", "end_clk"):
        assert (np.abs(blocks["unit"][end].astype(np.int64) - leader["unit"][end].astype(np.int64)) < 32).all()
    ptx = fold_exit_branches(_ptx(body))
    out = rewrite(ptx, scan(ptx), replace(headers, compact=True), start_at_exit=True)
    assert out.count("st.global.v4.u32") == 2 * 2 and out.count("st.global") == 2 * 2  # per ret
    with pytest.raises(ValueError, match="keeps its start pair until exit"):
        rewrite(ptx, scan(ptx), replace(headers, compact=True), start_at_exit=False)
