"""Kernel side without a GPU: compile for sm_90, assemble with Triton's ptxas, inspect the code."""
import re

import pytest
import triton
import triton.language as tl

import proton_lite
import proton_lite.language as pl
from proton_lite.layout import (COPY_SCOPE, CTA_HEADER_BYTES, LAUNCH_CAPACITY_TAG, LAUNCH_PREFIX_BYTES, RECORD_BYTES,
                                 UNIT_HEADER_BYTES)
from proton_lite.passes import stage_hook

import sass
from kernels import CASES, PLAIN_TWINS, signature


def compile_case(name, **kw):
    kernel, constexprs, num_warps, _, _ = CASES[name]
    return proton_lite.compile(kernel, signature(kernel), constexprs, num_warps=num_warps, **kw)


def record_sites(ptx):
    return ptx.count("// proton_lite: record")


@pytest.mark.parametrize("name", list(CASES))
def test_instrumented_kernel_compiles_assembles_and_asks_for_a_buffer(name):
    _, _, num_warps, sites, scopes = CASES[name]
    k = compile_case(name)
    assert len(k.asm["cubin"]) > 1000  # ptxas assembled the instrumented PTX
    assert "ttgir" in k.asm and "ptx" in k.asm
    assert record_sites(k.asm["ptx"]) == sites
    assert "@@proton_lite" not in k.asm["ptx"]  # every marker replaced
    assert k.scopes == scopes
    layout = k.profile["layout"]
    assert layout["num_warps"] == num_warps
    units = num_warps
    sinks = 2 if layout.get("overflow") == "sink" else 0  # global unit blocks: two sink slots per unit
    # global staging, or blocks of shared staging copied to global unit blocks
    blocks = layout.get("flush_slots", 0) > 0
    assert layout.get("overflow", "drop") == ("sink" if layout["staging"] == "global" or blocks else "drop")
    assert blocks == (layout.get("sized_at_launch", False) and layout["staging"] == "shared")
    # the scope table the records index: the kernel's scopes, then the buffer copies' own
    assert k.profile["scopes"] == scopes + ([COPY_SCOPE] if blocks else [])
    assert k.metadata["profile_scratch_size"] == CTA_HEADER_BYTES + units * (UNIT_HEADER_BYTES +
                                                                             (layout["capacity"] + sinks) * RECORD_BYTES)
    assert not stage_hook.installed()  # compile() leaves no hook behind


def test_loops_with_compile_time_bounds_get_an_exact_buffer():
    """range(0, STEPS) with STEPS constexpr: 300 trips x 2 records, more than loop_capacity
    (256) would keep; the TTIR bound sizes the buffer so that the default drops nothing."""
    k = compile_case("const_loop")
    assert k.profile["loop_record_sites"] == 2
    assert k.profile["records_per_unit_max"] == 600
    assert k.profile["layout"]["capacity"] == 600
    assert k.metadata["profile_scratch_size"] == CTA_HEADER_BYTES + 4 * (UNIT_HEADER_BYTES + 600 * RECORD_BYTES)
    assert compile_case("const_loop", capacity=64).profile["layout"]["capacity"] == 64  # explicit wins
    assert compile_case("const_loop", buffer_mode="circular").profile["layout"]["capacity"] == 1024


def test_capacity_is_exact_without_loops_and_loop_capacity_with_them():
    assert compile_case("vector_add").profile["layout"]["capacity"] == 4
    assert compile_case("nested").profile["layout"]["capacity"] == 6
    loop = compile_case("loop_scopes")
    assert loop.profile["loop_record_sites"] == 2
    assert loop.profile["layout"]["capacity"] == 256
    assert compile_case("loop_scopes", loop_capacity=1000).profile["layout"]["capacity"] == 1000
    assert loop.profile["records_per_unit_max"] is None  # the trip count is a kernel argument
    # matmul per-iteration: the K-loop sites are found inside the loop, the others are not
    per_iter = compile_case("matmul_per_iter").profile
    assert per_iter["loop_record_sites"] == 2 and per_iter["record_sites"] == 6


@pytest.mark.parametrize("granularity,units", [("warpgroup", 2), ("cta", 1), ("warp", 8)])
def test_granularity_sets_recording_units(granularity, units):
    k = compile_case("matmul", granularity=granularity)
    layout = k.profile["layout"]
    assert layout["granularity"] == granularity
    cap = layout["capacity"]
    assert k.metadata["profile_scratch_size"] == CTA_HEADER_BYTES + units * (UNIT_HEADER_BYTES + cap * RECORD_BYTES)
    # the leader of a unit is the first thread of 32 / 128 / num_warps*32 threads
    mask = {"warp": 31, "warpgroup": 127, "cta": 255}[granularity]
    assert f"and.b32 %pl_r2, %pl_r0, {mask};" in k.asm["ptx"]
    assert len(k.asm["cubin"]) > 1000


def test_warpgroup_needs_a_multiple_of_four_warps():
    kernel, constexprs, _, _, _ = CASES["vector_add"]
    with pytest.raises(Exception, match="num_warps divisible by 4"):
        proton_lite.compile(kernel, signature(kernel), constexprs, num_warps=2, granularity="warpgroup")


def test_circular_mode_rounds_capacity_to_a_power_of_two():
    k = compile_case("nested", buffer_mode="circular")
    assert k.profile["layout"]["capacity"] == 8
    assert re.search(r"and\.b32 %pl_slot\d, %pl_r3, 7;", k.asm["ptx"])


@pytest.mark.parametrize("options,store,blocks", [({"loop_capacity": 300, "capacity": 300}, "st.shared.v2.u32", 64),
                                                  ({}, "st.global.v2.u32", 0),  # sized at launch: global
                                                  ({}, "st.shared.v2.u32", 64)])  # ... or in blocks
def test_records_read_the_clock_and_use_no_fences(options, store, blocks, monkeypatch):
    """Records in loops (and in runs of close records) read the 32-bit %clock, which ptxas
    reads straight into the store's register; a record on its own reads %clock64 and keeps
    the low half (same bits), which leaves the code around it as it was."""
    from proton_lite.passes import ptx_staging
    monkeypatch.setattr(ptx_staging, "FLUSH_SLOTS", blocks)
    k = compile_case("matmul_per_iter", **options)
    ptx = k.asm["ptx"]
    deferred = k.profile["layout"].get("flush_slots", 0) == 0  # a block copy may not come between
    bodies = [b.split("add.u32 %pl_r3")[0] for b in ptx.split("// proton_lite: record")[1:]]
    assert len(bodies) == 6  # mainloop, iteration (in the K loop), epilogue: enter and exit each
    for n, body in enumerate(bodies):
        in_loop = n in (1, 2)
        assert bool(re.search(r"mov\.u32 %pl_clk\d, %clock;", body)) == in_loop
        assert bool(re.search(r"mov\.u64 %pl_d6, %clock64;\s+cvt\.u32\.u64 %pl_clk\d, %pl_d6;", body)) != in_loop
        # the K loop's last record is stored by the next one (its first, or after the loop)
        assert body.count(store) == ({1: 2, 2: 0}.get(n, 1) if deferred else 1)
    # none of the code the pass adds (prologue, every record, epilogue, the deferred record's
    # store after the K loop) has a fence
    added = _added_snippets(ptx)
    # prologue, 6 records, 1 ret, and the deferred store or, with blocks, a copy before each
    # straight run of records (fewer than the records: each K iteration's two share one)
    copies = ptx.count("// proton_lite: block copy")
    assert deferred or 1 <= copies < 6
    assert len(added) == 1 + 6 + 1 + (1 if deferred else copies) and all(len(s) > 1 for s in added)
    for snippet in added:
        text = "\n".join(snippet)
        assert "membar" not in text and "fence" not in text, text


@pytest.mark.parametrize("name", list(CASES))
def test_ptxas_reads_the_record_clock_with_cs2r(name):
    """The 32-bit %clock can become S2UR (~27 cycles, variable latency: hardware.md) or CS2R.32;
    in the record code, where it feeds a store, ptxas must pick CS2R, as it does for the
    64-bit anchors."""
    k = compile_case(name)
    reads = sass.timer_reads(sass.disassemble(k.asm["cubin"]))
    if k.metadata["proton_lite"]["cta_header"] == "exit":  # the start half comes first and feeds no store
        assert "mov.u32 %pl_r14, %clock;" in k.asm["ptx"]
        reads = reads[1:]
    assert reads
    assert all(i.opcode in ("CS2R", "CS2R.32") for i in reads), [i.text for i in reads if "CS2R" not in i.opcode]
    if re.search(r"mov\.u32 %pl_clk\d, %clock;", k.asm["ptx"]):  # records in loops or close runs
        assert any(i.opcode == "CS2R.32" for i in reads)


def test_a_kernel_sized_at_launch_reads_its_capacity_from_the_buffer_prefix(direct_loop_stores):
    """loop_scopes' loop runs n_iter times: the capacity and strides come from the launch
    prefix at run time (no immediate capacity in the bounds checks), and the CTA blocks
    start after the prefix."""
    k = compile_case("loop_scopes")
    layout = k.profile["layout"]
    assert layout["sized_at_launch"] and layout["staging"] == "global"
    assert k.profile["records_per_unit_expr"] is not None
    ptx = k.asm["ptx"]
    prologue = ptx.split("// proton_lite: prologue")[1].split("$pl_prologue_done:")[0]
    assert "ld.global.u32 %pl_r24, [%pl_d0];" in prologue
    assert f"setp.eq.u32 %pl_p5, %pl_r25, {LAUNCH_CAPACITY_TAG};" in prologue  # untagged: no records
    assert f"add.s64 %pl_d0, %pl_d0, {LAUNCH_PREFIX_BYTES};" in prologue
    # unit_bytes = 8 * capacity + the header and the two sink slots, at run time
    assert f"add.s64 %pl_d11, %pl_d11, {UNIT_HEADER_BYTES + 2 * RECORD_BYTES};" in prologue
    records = [r.split("add.u32 %pl_r3")[0] for r in ptx.split("// proton_lite: record")[1:]]
    assert len(records) == 2
    # a tight loop, unrolled twice (_pair_tight_loops): each copy's address advances by the
    # slots left before the launch's capacity, at most four, so that past the capacity the
    # pairs land in the two sink slots. No compare per record, and no predicate either: a
    # capacity-0 launch (an untagged buffer) has its sink slots too. Records elsewhere keep
    # the prologue's predicate (capacity > 0).
    assert "setp.ne.u32 %pl_p7, %pl_r24, 0;" in prologue
    entry = ptx.split("// proton_lite: unrolled loop entry")[1]
    assert "min.u32 %pl_un, %pl_r3, %pl_r24;" in entry and "sub.u32 %pl_uo0, %pl_r24, %pl_un;" in entry
    for body in records:  # (the first record's part runs on into the loop's own exit test)
        assert not [ln for ln in body.split("\n") if ln.strip().startswith("setp") and "%pl_" in ln]
    assert [ln.strip() for ln in records[1].split("\n") if "st.global" in ln] == [
        "st.global.v2.u32 [%pl_up0], {%pl_ut0, %pl_uc0};", "st.global.v2.u32 [%pl_up0+8], {%pl_ut1, %pl_uc1};"]
    assert "min.u32 %pl_ud, %pl_uo1, 4;" in ptx.split("// proton_lite: record")[2]
    assert "st.shared" not in ptx.split("// proton_lite: prologue")[1]
    assert len(k.asm["cubin"]) > 0  # ptxas assembled it


def _added_snippets(ptx: str) -> list[list[str]]:
    """Each block of PTX the pass inserted, from its '// proton_lite: ...' line to its last line."""
    ends = {"prologue": lambda ln: ln.startswith("$pl_prologue_done:"),
            "record": lambda ln: ln.startswith("add.u32 %pl_r3, %pl_r3, 1;"),
            "epilogue": lambda ln: ln.startswith("$pl_done_"),
            "deferred": lambda ln: " st." in ln,
            "block": lambda ln: ln.startswith("$pl_block") and ln.endswith("_kept:")}
    blocks, current, end = [], None, None
    for line in (ln.strip() for ln in ptx.split("\n")):
        if line.startswith("// proton_lite: "):
            current, end = [line], ends[line.split()[2]]
            continue
        if current is not None:
            current.append(line)
            if end(line):
                blocks.append(current)
                current = None
    return blocks


@pytest.mark.parametrize("staging", ["shared", "global", "global_compiled"])
@pytest.mark.parametrize("granularity", ["warp", "warpgroup", "cta"])
def test_only_the_unit_leader_stores_unless_the_unit_is_one_warp(granularity, staging, direct_loop_stores):
    """Warp units store from every lane (same record, same address: no predicate needed for
    the leader, and ptxas can merge stores), except in loops with shared staging, where the
    leader lane alone is cheaper; larger units must keep other warps out. A record past the
    capacity costs no compare: it goes to the sink slots. loop_scopes' loop is tight: its two
    records are stored together by the second one, and with global staging the loop is
    unrolled twice (_pair_tight_loops)."""
    # loop_scopes is sized at launch (global); 30000 records per unit do not fit in shared memory
    kw = {"shared": {"capacity": 20}, "global": {}, "global_compiled": {"capacity": 30000}}[staging]
    k = compile_case("loop_scopes", granularity=granularity, **kw)
    assert k.profile["layout"]["staging"] == staging.split("_")[0]
    assert k.profile["layout"].get("overflow", "drop") == ("drop" if staging == "shared" else "sink")
    prologue = k.asm["ptx"].split("// proton_lite: prologue")[1].split("$pl_prologue_done:")[0]
    records = [r.split("add.u32 %pl_r3")[0] for r in k.asm["ptx"].split("// proton_lite: record")[1:]]
    assert len(records) == 2
    for n, body in enumerate(records):
        store = [ln.strip() for ln in body.split("\n") if "st.shared" in ln or "st.global" in ln]
        bound = [ln.strip() for ln in body.split("\n") if ln.strip().startswith("setp") and "%pl_" in ln]
        assert not bound
        if n == 0:  # a pair, stored by the second record
            assert store == []
            continue
        if staging == "shared":  # at a pointer that saturates at the sink slots
            assert store == ["@%pl_p0 st.shared.v2.u32 [%pl_ptr], {%pl_tag0, %pl_clk0};",
                             "@%pl_p0 st.shared.v2.u32 [%pl_ptr+8], {%pl_tag1, %pl_clk1};"]
            assert "add.u32 %pl_ptr, %pl_ptr, 16;" in body and "min.u32 %pl_ptr, %pl_ptr, %pl_sink;" in body
            continue
        # global: unrolled twice, at an address that stops at the capacity (the sink slots)
        pred = "" if granularity == "warp" else "@%pl_p0 "
        assert store == [f"{pred}st.global.v2.u32 [%pl_up0], {{%pl_ut0, %pl_uc0}};",
                         f"{pred}st.global.v2.u32 [%pl_up0+8], {{%pl_ut1, %pl_uc1}};"]
        cap = "%pl_r24" if staging == "global" else "30000"
        assert f"min.u32 %pl_un, %pl_r3, {cap};" in k.asm["ptx"].split("// proton_lite: unrolled loop entry")[1]
        if staging == "global":  # the other records' predicate (capacity > 0, and the leader)
            leader = "setp.ne.and.u32 %pl_p7, %pl_r24, 0, %pl_p0;" if granularity != "warp" else \
                "setp.ne.u32 %pl_p7, %pl_r24, 0;"
            assert leader in prologue


def test_shared_staging_has_sink_slots_per_unit_and_stays_16_byte_aligned():
    """Records past the capacity land in slot `capacity` (a tight loop's pair in slots
    `capacity` and `capacity + 1`) of the unit's staging area, which the epilogue never copies
    out; every unit's area is a multiple of 16 bytes."""
    for capacity, slots in ((20, 22), (21, 24)):
        k = compile_case("loop_scopes", capacity=capacity)
        units = k.profile["layout"]["num_warps"]
        assert k.profile["shared_staging_bytes"] == units * slots * RECORD_BYTES
        prologue = k.asm["ptx"].split("// proton_lite: prologue")[1].split("$pl_prologue_done:")[0]
        assert f"mad.lo.u32 %pl_r4, %pl_r1, {slots * RECORD_BYTES}, %pl_r4;" in prologue
        epilogue = k.asm["ptx"].split("// proton_lite: epilogue")[1]
        assert f"min.u32 %pl_r17, %pl_r3, {capacity};" in epilogue  # copies at most `capacity` slots


def test_cta_header_records_smid_and_timer_pairs():
    ptx = compile_case("vector_add").asm["ptx"]
    prologue = ptx.split("// proton_lite: prologue")[1].split("$pl_prologue_done:")[0]
    for reg in ("%smid", "%globaltimer", "%clock64"):
        assert reg in prologue
    epilogue = ptx.split("// proton_lite: epilogue")[1]
    assert "%globaltimer" in epilogue and "%clock64" in epilogue


def test_kernel_without_scopes_still_gets_cta_records():
    @triton.jit
    def no_scopes(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)

    k = proton_lite.compile(no_scopes, {"x_ptr": "*fp32"}, {"BLOCK": 128})
    assert k.scopes == [] and record_sites(k.asm["ptx"]) == 0
    assert "%smid" in k.asm["ptx"] and k.metadata["profile_scratch_size"] > 0


def _normalized_entry(ptx, name):
    body = ptx[ptx.index(".visible .entry"):]
    body = body[:body.index("// -- End function")]
    keep = []
    for line in body.split("\n"):
        s = line.strip()
        if not s or s.startswith(".loc") or s.startswith("//") or re.match(r"\$L__(tmp|func)", s):
            continue
        keep.append(s)
    return "\n".join(keep).replace(name, "KERNEL")


@pytest.mark.parametrize("name", list(PLAIN_TWINS))
def test_zero_cost_when_off_same_ptx_as_the_unannotated_kernel(name):
    kernel, constexprs, num_warps, _, _ = CASES[name]
    twin = PLAIN_TWINS[name]
    off = proton_lite.compile(kernel, signature(kernel), constexprs, num_warps=num_warps, instrument=False)
    plain = proton_lite.compile(twin, signature(twin), constexprs, num_warps=num_warps, instrument=False)
    assert "proton_lite" not in off.metadata and off.metadata["profile_scratch_size"] == 0
    assert _normalized_entry(off.asm["ptx"], kernel.__name__) == _normalized_entry(plain.asm["ptx"], twin.__name__)


def test_cache_keys_plain_unchanged_and_instrumented_distinct():
    """Instrumentation settings live in a compile option, so they are part of Triton's cache key."""
    kernel, constexprs, num_warps, _, _ = CASES["vector_add"]
    off = proton_lite.compile(kernel, signature(kernel), constexprs, num_warps=num_warps, instrument=False)
    on = proton_lite.compile(kernel, signature(kernel), constexprs, num_warps=num_warps)
    cta = proton_lite.compile(kernel, signature(kernel), constexprs, num_warps=num_warps, granularity="cta")
    hashes = {off.metadata["hash"], on.metadata["hash"], cta.metadata["hash"]}
    assert len(hashes) == 3
    # a plain compile done while no hook is installed matches a plain compile done before
    again = proton_lite.compile(kernel, signature(kernel), constexprs, num_warps=num_warps, instrument=False)
    assert again.metadata["hash"] == off.metadata["hash"]
    assert "proton_lite" not in again.metadata


# ---------------------------------------------------------------------------------------------
# misuse: every error points at the kernel source line and says how to fix it


@triton.jit
def _exit_without_enter(x_ptr):
    pl.exit_scope("a")


@triton.jit
def _crossing(x_ptr):
    pl.enter_scope("a")
    pl.enter_scope("b")
    pl.exit_scope("a")
    pl.exit_scope("b")


@triton.jit
def _open_at_end(x_ptr):
    pl.enter_scope("a")
    tl.store(x_ptr, 1.0)


@triton.jit
def _open_at_return(x_ptr, n):
    pl.enter_scope("a")
    if n > 0:
        return
    pl.exit_scope("a")


@triton.jit
def _open_on_one_path(x_ptr, n):
    if n > 0:
        pl.enter_scope("a")
    tl.store(x_ptr, 1.0)


@triton.jit
def _entered_in_loop_exited_after(x_ptr, n):
    for i in range(n):
        pl.enter_scope("a")
    pl.exit_scope("a")


@triton.jit
def _non_constant_name(x_ptr, n):
    pl.enter_scope(n)
    pl.exit_scope(n)


@triton.jit
def _bad_name(x_ptr):
    with pl.scope("tab\there"):
        tl.store(x_ptr, 1.0)


MISUSE = {
    "_exit_without_enter": (_exit_without_enter, "has no matching enter_scope", 'pl.exit_scope("a")'),
    "_crossing": (_crossing, "does not match the innermost open scope 'b'", 'pl.exit_scope("a")'),
    "_open_at_end": (_open_at_end, "still open at the end", 'pl.enter_scope("a")'),
    "_open_at_return": (_open_at_return, "still open at this return", "return"),
    "_open_on_one_path": (_open_on_one_path, "branches of this if leave different scopes open", "if n > 0:"),
    "_entered_in_loop_exited_after": (_entered_in_loop_exited_after, "not exited in the same iteration",
                                      "for i in range(n):"),
    "_non_constant_name": (_non_constant_name, "compile-time string", "pl.enter_scope(n)"),
    "_bad_name": (_bad_name, "unprintable", 'with pl.scope("tab\\there"):'),
}


@pytest.mark.parametrize("case", list(MISUSE))
@pytest.mark.parametrize("instrument", [True, False])
def test_misuse_is_a_compile_error_at_the_source_line(case, instrument):
    kernel, message, source_line = MISUSE[case]
    sig = {"x_ptr": "*fp32"}
    if "n" in kernel.arg_names:
        sig["n"] = "i32"
    with pytest.raises(triton.compiler.errors.CompilationError) as info:
        proton_lite.compile(kernel, sig, instrument=instrument)
    text = str(info.value)
    assert message in text
    # the reported line is the line of the kernel source that caused it
    m = re.search(r"test_kernel_side\.py:(\d+)", text)
    if m:
        with open(__file__) as f:
            lines = f.read().split("\n")
        assert lines[int(m.group(1)) - 1].strip() == source_line
    else:  # errors raised at the call itself carry Triton's own "at line:col" excerpt
        assert source_line in text


def test_decorator_in_the_wrong_order_says_which_order_to_use():
    with pytest.raises(TypeError, match="must be placed above @triton.jit"):
        @triton.jit
        @pl.scope("x")
        def helper(x):
            return x


def test_static_if_on_constexpr_takes_only_the_compiled_branch():
    # matmul's `if PER_ITER:` enters and exits a scope under a constexpr: legal both ways
    assert compile_case("matmul").scopes == ["mainloop", "epilogue"]
    assert "iteration" in compile_case("matmul_per_iter").scopes


@pytest.mark.parametrize("name", ["matmul", "softmax", "vector_add"])
def test_staging_is_appended_to_dynamic_shared_memory_leaving_triton_addresses_alone(name):
    """A static .shared array would shift Triton's dynamic region off its 1024-byte
    alignment (wrong wgmma results on the H100); staging must come after Triton's bytes."""
    plain = compile_case(name, instrument=False)
    k = compile_case(name)
    assert k.profile["layout"]["staging"] == "shared"
    assert not re.search(r"^\s*\.shared\s+\.align", k.asm["ptx"], re.M)  # no static shared of ours
    triton_shared = plain.metadata["shared"]
    offset = -(-triton_shared // 128) * 128  # docs/format.md §1.8: Triton's bytes rounded up to 128
    assert offset >= triton_shared and offset % 128 == 0
    assert k.metadata["shared"] == offset + k.profile["shared_staging_bytes"]
    # every use of Triton's own dynamic region is unchanged
    uses = lambda ptx: re.findall(r"global_smem[^;\n]*", ptx)  # noqa: E731
    assert uses(k.asm["ptx"]) == uses(plain.asm["ptx"])


# --- records close behind each other take turns between two register sets --------------------

@triton.jit
def _back_to_back(x_ptr, PAIRS: tl.constexpr):
    for _ in tl.static_range(PAIRS):
        pl.enter_scope("r")
        pl.exit_scope("r")
    tl.store(x_ptr, 1.0)


@triton.jit
def _tight_loop(x_ptr, n):
    v = tl.load(x_ptr + tl.arange(0, 128))
    for _ in range(n):
        pl.enter_scope("r")
        v = v * 1.000001 + 0.5
        pl.exit_scope("r")
    tl.store(x_ptr + tl.arange(0, 128), v)


@triton.jit
def _fma_loop(x_ptr, n, FMAS: tl.constexpr):
    v = tl.load(x_ptr + tl.arange(0, 128))
    for _ in range(n):
        pl.enter_scope("r")
        for _ in tl.static_range(FMAS):
            v = v * 1.000001 + 0.5
        pl.exit_scope("r")
    tl.store(x_ptr + tl.arange(0, 128), v)


@triton.jit
def _far_apart(x_ptr, n):
    pl.enter_scope("a")
    acc = tl.load(x_ptr + tl.arange(0, 128))
    for _ in range(n):
        acc = tl.sqrt(acc * acc + 1.0) * 0.5 + tl.exp(acc) * 0.25
    pl.exit_scope("a")
    tl.store(x_ptr + tl.arange(0, 128), acc)


def _records(ptx):
    """(register set, keeps the other set alive) of every record, in PTX order."""
    out = []
    for body in ptx.split("// proton_lite: record")[1:]:
        body = body.split("add.u32 %pl_r3")[0]
        m = re.search(r"mov\.u32 %pl_clk(\d), %clock;|cvt\.u32\.u64 %pl_clk(\d), %pl_d6;", body)
        out.append((int(m.group(1) or m.group(2)), "xor.b32 %pl_acc" in body))
    return out


def _store_waits(instrs):
    """Record stores after which the next record waits for that store to read its registers:
    an instruction between it and the next store (or the end of ``instrs``) waits on the
    store's read scoreboard."""
    stores = [k for k, i in enumerate(instrs) if i.opcode.startswith(("STS", "STG")) and i.read_barrier is not None]
    return [instrs[a].text for a, b in zip(stores, stores[1:] + [len(instrs) - 1])
            if any(instrs[a].read_barrier in i.waits for i in instrs[a + 1:b + 1])]


def _timer_reads_waiting(instrs):
    """Record timer reads that wait for the record store just before them."""
    out, last_store = [], None
    for i in instrs:
        if i.opcode.startswith(("STS", "STG")) and i.read_barrier is not None:
            last_store = i
        elif i.opcode == "CS2R.32" and last_store is not None and last_store.read_barrier in i.waits:
            out.append(f"{i.text} after {last_store.text}")
    return out


def _between_records(instrs):
    """From the second record's timer read to the last record's: back-to-back records only."""
    reads = [k for k, i in enumerate(instrs) if i.opcode == "CS2R.32"]
    return instrs[reads[1]:reads[-1] + 1]


def test_back_to_back_records_alternate_register_sets_and_never_wait_for_the_previous_store():
    k = proton_lite.compile(_back_to_back, {"x_ptr": "*fp32"}, {"PAIRS": 16}, num_warps=4)
    recs = _records(k.asm["ptx"])
    assert recs == [(0, False)] + [(n % 2, True) for n in range(1, 32)]
    assert _store_waits(_between_records(sass.disassemble(k.asm["cubin"]))) == []
    # the accumulator that keeps both sets live is stored once, to the sink slot
    assert k.asm["ptx"].count("st.shared.u32 [%pl_r4+256], %pl_acc;") == 1  # sink = slot 32 (32 records)


def _loop_bodies(instrs):
    """The SASS of each loop (a backward branch and what lies between its target and it)."""
    loops = [i for i in instrs if i.opcode == "BRA" and int(i.text.split("0x")[-1], 16) < i.addr]
    return [[j for j in instrs if int(b.text.split("0x")[-1], 16) <= j.addr <= b.addr] for b in loops]


# cycles a global store holds its source registers on the H100 (docs/benchmarks.md, "Record
# sequence, sixth version"): an instruction that waits for the store sooner stalls the loop
STORE_HOLD_CYCLES = 20


def _store_waits_sooner_than(body, cycles):
    """In a loop body (SASS), the instructions that wait on a record store's read scoreboard
    less than ``cycles`` stall cycles after that store issued, going round the loop."""
    out = []
    for k, i in enumerate(body):
        for sb in i.waits:
            gap = 0
            for back in range(1, len(body) + 1):
                prev = body[k - back]  # round the back edge
                gap += prev.stall
                if prev.opcode.startswith(("STG", "STS")) and prev.read_barrier == sb:
                    if gap < cycles:
                        out.append(f"{i.text} {gap} cycles after {prev.text}")
                    break
    return out


def test_a_tight_loop_with_global_staging_is_unrolled_twice_and_never_waits_for_a_store(direct_loop_stores):
    """Global staging (sized at launch): the body is emitted twice; each copy reads two clocks
    into registers of its own and stores its pair at its own address, which the other copy
    computed. So every store has the whole other copy to read its registers before they are
    written again: bench.py's tightest loop went from 19.5 to 11.4 cycles per record on the
    H100 (_pair_tight_loops). Before, an instruction of the loop waited for a store issued
    13 cycles earlier."""
    from proton_lite.passes.ptx_instrument import UNROLLED_COPY
    k = proton_lite.compile(_tight_loop, {"x_ptr": "*fp32", "n": "i32"}, num_warps=2)
    assert k.profile["layout"]["staging"] == "global"
    ptx = k.asm["ptx"]
    assert ptx.count("// proton_lite: record") == 2 and ptx.count(UNROLLED_COPY) == 2
    code = ptx.split("$pl_prologue_done:")[1]
    assert "%pl_acc" not in code and "%pl_pd" not in code  # no keep-alive, no deferral
    body = max(_loop_bodies(sass.disassemble(k.asm["cubin"])), key=len)
    stores = [i for i in body if i.opcode.startswith("STG")]
    clocks = [i.text.split()[1] for i in body if i.opcode == "CS2R.32"]  # destination registers
    assert len(stores) == 4 and len(clocks) == 4 and len(set(clocks)) == 4, [i.text for i in body]
    assert len({re.search(r"\[(R\d+)\.64", i.text).group(1) for i in stores}) == 2  # an address per copy
    assert _store_waits_sooner_than(body, STORE_HOLD_CYCLES) == []


def test_an_unrolled_loop_runs_the_same_instructions_and_stores_each_pair_once():
    """The second copy repeats the body line for line; the first copy's back edge becomes the
    way out (negated, to past the second copy); the first copy's address is computed on the
    way in. Its tags are the constants plus a value that is 0 (the record base's low bits)."""
    from proton_lite.passes.ptx_instrument import UNROLLED_COPY
    add, fma = "\tadd.s32 %r2, %r2, -1;", "\tfma.rn.f32 %f1, %f1, %f2, %f3;"
    test = "\tsetp.ne.s32 %p1, %r2, 0;"
    out = _global_rewrite(["E k", "$L_head:", "E r", fma, "X r", add, test, "\t@%p1 bra $L_head;", "X k"])
    lines = [ln.strip() for ln in out.split("\n")]
    head, exit_ = lines.index("$L_head:"), lines.index("@!%p1 bra $pl_unrolled_exit_0;")
    back = lines.index("@%p1 bra $L_head;")
    assert lines[back + 1] == "$pl_unrolled_exit_0:" and head < exit_ < back
    # the second copy's address starts a step back: the first copy moves it on before its stores
    assert lines[head - 7:head] == [
        "// proton_lite: unrolled loop entry", "min.u32 %pl_un, %pl_r3, 64;", "sub.u32 %pl_uo0, 64, %pl_un;",
        "mul.wide.u32 %pl_up0, %pl_un, 8;", "add.s64 %pl_up0, %pl_up0, %pl_d3;", "add.u32 %pl_uo1, %pl_uo0, 2;",
        "add.s64 %pl_up1, %pl_up0, -16;"]
    first, second = lines[head + 1:exit_], lines[exit_ + 1:back]
    kernel_lines = [fma.strip(), add.strip(), test.strip()]
    assert [ln for ln in first if ln in kernel_lines] == [ln for ln in second if ln in kernel_lines] == \
        [fma.strip(), add.strip(), test.strip()]
    assert first[:2] == ["// proton_lite: record", "// proton_lite: tag 2"] and second[0] == UNROLLED_COPY
    stores = [ln for ln in first + second if "st.global" in ln]
    assert stores == ["st.global.v2.u32 [%pl_up0], {%pl_ut0, %pl_uc0};",
                      "st.global.v2.u32 [%pl_up0+8], {%pl_ut1, %pl_uc1};",
                      "st.global.v2.u32 [%pl_up1], {%pl_ut2, %pl_uc2};",
                      "st.global.v2.u32 [%pl_up1+8], {%pl_ut3, %pl_uc3};"]
    # after its stores each copy moves the other copy's address on by four slots, or the
    # slots left before the sink slots, in place
    for copy, other in ((first, 1), (second, 0)):
        tail = copy[copy.index(stores[0 if copy is first else 2]):]
        assert tail[2:6] == ["add.u32 %pl_r3, %pl_r3, 2;", f"min.u32 %pl_ud, %pl_uo{other}, 4;",
                             f"sub.u32 %pl_uo{other}, %pl_uo{other}, %pl_ud;",
                             f"mad.wide.u32 %pl_up{other}, %pl_ud, 8, %pl_up{other};"]
    prologue = out.split("$pl_prologue_done:")[0]
    tags = re.findall(r"add\.u32 %pl_ut(\d), %pl_ut\1, (\d+);", prologue)
    assert tags == [("0", "2"), ("1", "3"), ("2", "2"), ("3", "3")]
    # each tag's zero reads the cycle counter again (ptxas cannot relate one tag to another)
    assert prologue.count("%clock_hi;") == 4
    assert _deferral(out) == (0, 0, 0)  # nothing is pending on either way out


@pytest.mark.parametrize("change", ["head reached twice", "unconditional", "shared", "circular"])
def test_only_a_tight_global_loop_entered_from_above_with_a_conditional_back_edge_is_unrolled(change):
    """Otherwise the entry code could be skipped or there is no exit test to split; shared
    staging pairs without unrolling (ptxas unrolls those loops itself), and circular buffers
    keep one store per record. A tight global loop left as it is defers its last record."""
    from proton_lite.layout import BufferLayout
    add, fma = "\tadd.s32 %r2, %r2, -1;", "\tfma.rn.f32 %f1, %f1, %f2, %f3;"
    test, back = "\tsetp.ne.s32 %p1, %r2, 0;", "\t@%p1 bra $L_head;"
    loop = ["$L_head:", "E r", fma, "X r", add, test, back]
    body = {"head reached twice": ["\t@%p2 bra $L_head;"] + loop,
            "unconditional": ["$L_head:", "E r", fma, "X r", "\tbra.uni $L_head;"]}.get(change, loop)
    layout = {"shared": BufferLayout("warp", 1, 64, "shared"),
              "circular": BufferLayout("warp", 1, 64, "global", "circular")}.get(
        change, BufferLayout("warp", 1, 64, "global", overflow="sink"))
    out = _rewrite(body, layout)
    assert "$pl_unrolled_exit" not in out and "%pl_up" not in out
    if change == "head reached twice":
        assert _deferral(out) == (1, 1, 1)


def test_a_tight_loop_with_shared_staging_stores_its_two_records_together():
    """The first record only reads the clock; the second one stores both, at the saturating
    pointer and the slot after it. No xor keeps the register sets apart (both are live until
    that store), and ptxas unrolls the loop: bench.py's tightest loop went from 12.1 to 10.4
    cycles per record on the H100 (_pair_tight_loops)."""
    k = proton_lite.compile(_tight_loop, {"x_ptr": "*fp32", "n": "i32"}, num_warps=2, capacity=4096)
    ptx = k.asm["ptx"]
    assert _records(ptx) == [(0, False), (1, False)]
    code = ptx.split("// proton_lite: prologue")[1]  # (past the register declarations)
    assert "%pl_acc" not in code and "%pl_pd" not in code  # no keep-alive, no deferral
    first, second = [r.split("add.u32 %pl_r3")[0] for r in ptx.split("// proton_lite: record")[1:]]
    assert "st.shared" not in first and "%pl_ptr" not in first
    assert [ln.strip() for ln in second.split("\n") if "st.shared" in ln] == [
        "@%pl_p0 st.shared.v2.u32 [%pl_ptr], {%pl_tag0, %pl_clk0};",
        "@%pl_p0 st.shared.v2.u32 [%pl_ptr+8], {%pl_tag1, %pl_clk1};"]
    loops = [b for b in _loop_bodies(sass.disassemble(k.asm["cubin"])) if any(i.opcode == "CS2R.32" for i in b)]
    body = max(loops, key=lambda b: sum(i.opcode.startswith("STS") for i in b))
    stores = [re.search(r"\[(R\d+)(\+0x8)?\]", i.text).groups() for i in body if i.opcode.startswith("STS")]
    assert len(stores) >= 4  # at least two pairs per pass through the loop: ptxas unrolled it
    assert all(a[1] is None and b == (a[0], "+0x8") for a, b in zip(stores[::2], stores[1::2])), stores


@pytest.mark.parametrize("change", [None, "global", "circular", "long tail", "label between", "three records"])
def test_only_a_tight_loop_of_two_records_with_shared_staging_stores_them_in_pairs(change):
    """In longer loops the pair's store, just before the back edge, made the next iteration's
    first timer read wait (17.2 against 8.2 cycles per record with 8 FMAs); global stores in
    pairs measured no better; a circular buffer has no saturating pointer."""
    from proton_lite.layout import BufferLayout
    add = "\tadd.s32 %r3, %r3, 1;"
    tail = ["\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;", "\t@%p1 bra $L_head;"]
    loop = {None: ["$L_head:", "E r", add, "X r", *tail],
            "long tail": ["$L_head:", "E r", add, "X r", *[add] * 9, *tail],
            "label between": ["$L_head:", "E r", add, "$L_mid:", "X r", *tail],
            "three records": ["$L_head:", "E r", add, "X r", "E s", *tail[:2], "X s", tail[2]]}.get(change)
    layout = {"global": BufferLayout("warp", 1, 64, "global", overflow="sink"),
              "circular": BufferLayout("warp", 1, 64, "shared", "circular")}.get(change, BufferLayout("warp", 1, 64, "shared"))
    out = _rewrite(loop or ["$L_head:", "E r", add, "X r", *tail], layout)
    paired = out.count("st.shared.v2.u32 [%pl_ptr+8]")
    assert paired == (1 if change is None else 0)
    if change is None:
        assert "%pl_acc" not in out.split("// proton_lite: prologue")[1]
        assert out.count("add.u32 %pl_ptr, %pl_ptr, 16;") == 1


def test_records_far_apart_keep_one_register_set_and_no_accumulator():
    k = proton_lite.compile(_far_apart, {"x_ptr": "*fp32", "n": "i32"}, num_warps=4)
    assert _records(k.asm["ptx"]) == [(0, False), (0, False)]
    assert k.asm["ptx"].count("%clock64;") == 2 + 2  # both records (on their own), the start and end anchors
    assert "%pl_acc" not in k.asm["ptx"].split("// proton_lite: record")[1]
    assert "st.shared.u32" not in k.asm["ptx"] and "%pl_acc, 0;" not in k.asm["ptx"]


def test_a_short_run_outside_loops_and_the_calibration_kernel_keep_one_register_set():
    """vector_add's exit of "load" and enter of "store" are close, but two records outside a
    loop do not take turns (MIN_CHAIN); the calibration kernel never does, so that it
    measures what a record adds inside a scope around real work, with its CTA header at
    entry as in every run before pass 17."""
    from proton_lite.runtime.calibrate import proton_lite_calibrate
    assert _records(compile_case("vector_add").asm["ptx"]) == [(0, False)] * 4
    cal = proton_lite.compile(proton_lite_calibrate, {}, {"PAIRS": 4}, num_warps=4)
    assert _records(cal.asm["ptx"]) == [(0, False)] * 10
    same_shape = proton_lite.compile(_back_to_back, {"x_ptr": "*fp32"}, {"PAIRS": 4}, num_warps=4)
    assert _records(same_shape.asm["ptx"])[1:] == [(n % 2, True) for n in range(1, 8)]
    # and its CTA header stays at entry (keeps_start_pair says why); a straight-line kernel
    # of the same shape writes it at exit
    assert cal.profile["cta_header"] == "entry" and same_shape.profile["cta_header"] == "exit"


def _ptx(body: list[str]) -> str:
    """A minimal kernel in PTX with proton_lite markers: `E name` / `X name` lines are markers."""
    lines = [".version 8.0", ".target sm_90a", ".address_size 64", ".visible .entry k(",
             "\t.param .u64 k_param_0,", "\t.param .u64 k_param_1", ")", "{", "\t.reg .b32 %r<9>;"]
    for item in body:
        if item[:2] in ("E ", "X "):
            kind = "enter" if item[0] == "E" else "exit"
            lines.append(f"\tmov.u32 %r1, 0; // @@proton_lite {kind} {item[2:].encode().hex()}")
        else:
            lines.append(item)
    return "\n".join(lines + ["\tret;", "}"])


def _sets(body):
    from proton_lite.passes.ptx_instrument import scan
    return [(s.reg_set, (1 - s.reg_set, ) if s.keeps_other else ()) for s in scan(_ptx(body)).sites]  # kept set


def test_close_records_are_runs_within_one_block_and_at_most_close_gap_apart():
    from proton_lite.passes.ptx_instrument import CLOSE_GAP
    add = "\tadd.u32 %r2, %r2, 1;"
    three = ["E a", "X a", "E b", "X b"]  # four back to back: one run, sets in turn
    assert _sets(three) == [(0, ()), (1, (0, )), (0, (1, )), (1, (0, ))]
    # comments, .loc lines and blank lines are not instructions; CLOSE_GAP instructions still close
    assert _sets(["E a", "\t.loc 1 2 3", "\t// c", *[add] * CLOSE_GAP, "X a", "E b"])[1:] == [(1, (0, )), (0, (1, ))]
    # one more instruction, a label or a branch between two records ends the run
    assert _sets(["E a", *[add] * (CLOSE_GAP + 1), "X a", "E b", "X b"]) == [(0, ()), (0, ()), (1, (0, )), (0, (1, ))]
    assert _sets(["E a", "X a", "$L1:", "E b", "X b", "E c"]) == [(0, ())] * 2 + [(0, ()), (1, (0, )), (0, (1, ))]
    assert _sets(["E a", "X a", "\tbra.uni $L2;", "$L2:", "E b"]) == [(0, ())] * 3
    # outside loops a run of two keeps one register set (MIN_CHAIN)
    assert _sets(["E a", "X a"]) == [(0, ()), (0, ())]


def test_a_short_loop_links_its_first_record_to_its_last_one():
    add = "\tadd.u32 %r2, %r2, 1;"
    loop = ["$L_head:", "E r", add, "X r", add, "\tsetp.ne.u32 %p1, %r2, 0;", "\t@%p1 bra $L_head;"]
    # in a loop even a pair takes turns, and the first record keeps the last one's set live
    assert _sets(loop) == [(0, (1, )), (1, (0, ))]
    long_tail = loop[:-2] + [add] * 8 + loop[-2:]  # the previous iteration's last record is far
    assert _sets(long_tail) == [(0, ()), (1, (0, ))]


def test_a_loop_s_counter_update_and_exit_test_move_above_its_last_record():
    """ptxas issued a loop's exit test after the body's last record and stalled the back edge
    on it; the pass moves the loop's own register arithmetic above that record, and nothing
    else: not across a memory access, a clock read or a label."""
    from proton_lite.layout import BufferLayout
    update, test = "\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;"
    loop = ["$L_head:", "E r", "\tfma.rn.f32 %f1, %f1, %f2, %f3;", "X r", update, test, "\t@%p1 bra $L_head;"]

    def before_last_record(body):
        out = _rewrite(body, BufferLayout("warp", 1, 8, "shared")).split("\n")
        last = max(i for i, line in enumerate(out) if "// proton_lite: record" in line)
        assert sum(line in (update, test) for line in out) == 2  # moved, never copied or lost
        return [i < last for i, line in enumerate(out) if line in (update, test)]

    assert before_last_record(loop) == [True, True]
    for extra in ("\tst.global.u32 [%rd1], %r2;", "\tmov.u32 %r3, %clock;", "$L_mid:", "\tbar.sync 0;"):
        assert before_last_record(loop[:4] + [extra] + loop[4:]) == [False, False], extra


@pytest.mark.parametrize("kw", [{"capacity": 4096}, {}])  # shared staging; sized at launch (global)
def test_a_real_loop_s_exit_test_comes_before_the_body_s_last_record(kw):
    from proton_lite.passes.ptx_instrument import UNROLLED_COPY
    ptx = proton_lite.compile(_tight_loop, {"x_ptr": "*fp32", "n": "i32"}, num_warps=2, **kw).asm["ptx"]
    lines = ptx.split("\n")
    branch = next(i for i, line in enumerate(lines) if re.match(r"\s*@%p\d+\s+bra\s+\$L__BB0_\d+;", line) and
                  any(re.match(r"^\$L__BB0_\d+:", x) and x.split(":")[0] + ";" in line for x in lines[:i]))  # back edge
    pred = re.match(r"\s*@(%p\d+)", lines[branch]).group(1)
    test = max(i for i in range(branch) if re.match(rf"\s*setp\.\S+\s+{re.escape(pred)},", lines[i]))
    last_record = max(i for i in range(branch) if "// proton_lite: record" in lines[i] or UNROLLED_COPY in lines[i])
    assert test < last_record


def test_warp_records_store_from_every_lane_outside_loops_and_from_the_leader_in_shared_loops(monkeypatch):
    def stores(ptx):
        return [ln.strip().split(" st.")[0] if ln.strip().startswith("@") else "" for ln in ptx.split("\n")
                if re.search(r"\bst\.(shared|global)\.v2\.u32 \[%pl_(sa|ga|ptr|up)", ln)]
    assert set(stores(compile_case("vector_add").asm["ptx"])) == {""}  # no loop: every lane, merged stores
    loop = proton_lite.compile(_tight_loop, {"x_ptr": "*fp32", "n": "i32"}, num_warps=2, capacity=4096).asm["ptx"]
    assert stores(loop) == ["@%pl_p0", "@%pl_p0"]  # one pair, stored by the second record
    sized = proton_lite.compile(_tight_loop, {"x_ptr": "*fp32", "n": "i32"}, num_warps=2).asm["ptx"]
    # sized at launch, a tight loop: global, unrolled twice, each copy stores its pair from every lane
    assert stores(sized) == [""] * 4
    from proton_lite.passes import ptx_staging
    monkeypatch.setattr(ptx_staging, "MIN_INSTRUCTIONS_PER_RECORD", 0)  # blocks for a tight loop too
    monkeypatch.setattr(ptx_staging, "FLUSH_SLOTS", 62)
    blocks = proton_lite.compile(_tight_loop, {"x_ptr": "*fp32", "n": "i32"}, num_warps=2).asm["ptx"]
    assert stores(blocks) == ["@%pl_p0", "@%pl_p0"]  # in blocks: shared staging's pair, from the leader


def _rewrite(body: list[str], layout) -> str:
    """The pass's output for the minimal kernel ``_ptx(body)`` with the given layout."""
    from proton_lite.passes.ptx_instrument import rewrite, scan
    ptx = _ptx(body)
    return rewrite(ptx, scan(ptx), layout)


def _global_rewrite(body, granularity="warp", num_warps=1):
    from proton_lite.layout import BufferLayout
    return _rewrite(body, BufferLayout(granularity, num_warps, 64, "global", overflow="sink"))


_DEFERRED = "st.global.v2.u32 [%pl_ga2], {%pl_tag2, %pl_clk2};"
_BY_ADDRESS = re.compile(r"st\.global\.v2\.u32 \[%pl_ga\d\+-8\], \{%pl_tag2, %pl_clk2\};")


def _deferral(out: str) -> tuple[int, int, int]:
    """(records that leave their store to a later one, stores of a deferred record inside
    records, at its own address or the record's address - 8, stores of one after a loop)."""
    records = [r.split("add.u32 %pl_r3")[0] for r in out.split("// proton_lite: record")[1:]]
    return (sum("%pl_clk2, %clock" in r for r in records),
            sum(_DEFERRED in r or bool(_BY_ADDRESS.search(r)) for r in records),
            out.count("// proton_lite: deferred record"))


def test_a_loop_s_last_global_record_is_stored_by_the_next_iteration_s_first():
    """Global staging: the body's last record takes its slot and reads the clock, and the
    store follows at the next iteration's first record (after that record's timer read,
    before its own store) or right after the back edge on the way out; the predicate that
    says a record waits (%pl_pd) is false until one does."""
    add, fma = "\tadd.s32 %r2, %r2, -1;", "\tfma.rn.f32 %f1, %f1, %f2, %f3;"
    # a tight loop that is not unrolled: its head is also the target of a branch from above
    loop = ["\t@%p2 bra $L_head;", "$L_head:", "E r", fma, "X r", add, "\tsetp.ne.s32 %p1, %r2, 0;",
            "\t@%p1 bra $L_head;"]
    out = _global_rewrite(["E k"] + loop + ["X k"])
    lines = [ln.strip() for ln in out.split("\n")]
    assert _deferral(out) == (1, 1, 1)
    assert "setp.ne.u32 %pl_pd0, 0, 0;" in out.split("$pl_prologue_done:")[0]
    first, last = [r.split("add.u32 %pl_r3")[0] for r in out.split("// proton_lite: record")[2:4]]
    # first record of the body: timer read, then the deferred store, then its own store
    assert first.index("%clock;") < first.index(_DEFERRED) < first.index("st.global.v2.u32 [%pl_ga0]")
    # last record: slot, address and clock in set 2, no store; every lane would store: %pl_pd0 true.
    # (a tight loop: its last record computes its own address, the first sink slot past the capacity)
    assert "st.global" not in last and "setp.eq.u32 %pl_pd0, 0, 0;" in last
    assert re.search(r"min\.u32 %pl_slot2, %pl_r3, 64;", last)
    back_edge = lines.index("@%p1 bra $L_head;")
    # on the way out: the pending record, then its loop's predicate is cleared
    assert lines[back_edge + 1:back_edge + 4] == ["// proton_lite: deferred record", "@%pl_pd0 " + _DEFERRED,
                                                  "setp.ne.u32 %pl_pd0, 0, 0;"]
    # records outside the loop store as before
    assert _deferral(_global_rewrite(["E k", "X k"])) == (0, 0, 0)
    # leader stores (warp groups): the deferred record keeps the leader predicate
    assert "mov.pred %pl_pd0, %pl_p0;" in _global_rewrite(loop, "warpgroup", 4)


def test_outside_tight_loops_a_deferred_global_record_is_stored_at_the_next_one_s_address_minus_8():
    """A longer loop's last record computes no address: the next iteration's first record,
    whose slot follows it, stores it at its own address - 8, and takes the second sink slot
    (capacity + 1) past the capacity so that the deferred one lands in the first, never on a
    kept slot. On the way out its slot is count - 1, or the first sink slot. ptxas had reused
    the deferred record's own address register right after its store and waited ~20 cycles
    for the store to read it (17.2 -> 11.2 cycles per record with 8 FMAs per iteration)."""
    fmas = ["\tfma.rn.f32 %f1, %f1, %f2, %f3;"] * 9  # more than CLOSE_GAP: not a tight loop
    loop = ["$L_head:", "E r", *fmas, "X r", "\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;",
            "\t@%p1 bra $L_head;"]
    out = _global_rewrite(["E k"] + loop + ["X k"])
    assert _deferral(out) == (1, 1, 1)
    first, last = [r.split("add.u32 %pl_r3")[0] for r in out.split("// proton_lite: record")[2:4]]
    assert "%pl_slot2" not in last and "%pl_ga2" not in last and "st.global" not in last  # no address at all
    assert "min.u32 %pl_slot0, %pl_r3, 65;" in first  # the second sink slot
    assert first.index("%clock;") < first.index("@%pl_pd0 st.global.v2.u32 [%pl_ga0+-8], {%pl_tag2, %pl_clk2};") < \
        first.index("st.global.v2.u32 [%pl_ga0], {%pl_tag0, %pl_clk0};")
    exit_store = out.split("// proton_lite: deferred record")[1].split("\n")[1:7]
    assert [ln.strip() for ln in exit_store] == [
        "sub.u32 %pl_slot2, %pl_r3, 1;", "min.u32 %pl_slot2, %pl_slot2, 64;", "mul.wide.u32 %pl_ga2, %pl_slot2, 8;",
        "add.s64 %pl_ga2, %pl_ga2, %pl_d3;", "@%pl_pd0 " + _DEFERRED, "setp.ne.u32 %pl_pd0, 0, 0;"]
    # sized at launch: the sink slots from the launch's capacity, and the stores' predicate
    from proton_lite.layout import BufferLayout
    sized = _rewrite(["E k"] + loop + ["X k"], BufferLayout("warp", 1, 64, "global", sized_at_launch=True,
                                                             overflow="sink"))
    assert "add.u32 %pl_gs2, %pl_r24, 1;" in sized and "min.u32 %pl_slot0, %pl_r3, %pl_gs2;" in sized
    assert "mov.pred %pl_pd0, %pl_p7;" in sized and "min.u32 %pl_slot2, %pl_slot2, %pl_r24;" in sized


def test_every_deferring_loop_has_a_pending_predicate_of_its_own():
    """A record stored at the next record's address - 8 must be stored by its own loop only:
    a later loop, or an inner loop entered again, storing a stale one would put it on another
    record's slot. So each deferring loop hands over in %pl_pd<n>, false at CTA start and
    cleared on the way out."""
    fmas = ["\tfma.rn.f32 %f1, %f1, %f2, %f3;"] * 9
    def loop(n):
        return [f"$L_{n}:", "E r", *fmas, "X r", "\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;",
                f"\t@%p1 bra $L_{n};"]
    out = _global_rewrite(["E k"] + loop("a") + ["X k"] + loop("b"))
    assert ".reg .pred %pl_pd<2>;" in out
    prologue = out.split("$pl_prologue_done:")[0]
    assert "setp.ne.u32 %pl_pd0, 0, 0;" in prologue and "setp.ne.u32 %pl_pd1, 0, 0;" in prologue
    records = [r.split("add.u32 %pl_r3")[0] for r in out.split("// proton_lite: record")[1:]]
    assert "@%pl_pd0 st.global" in records[1] and "setp.eq.u32 %pl_pd0, 0, 0;" in records[2]
    assert "@%pl_pd1 st.global" in records[4] and "setp.eq.u32 %pl_pd1, 0, 0;" in records[5]
    assert out.count("setp.ne.u32 %pl_pd0, 0, 0;") == 2 and out.count("setp.ne.u32 %pl_pd1, 0, 0;") == 2


@pytest.mark.parametrize("change", ["branch out", "ret", "unconditional", "label before first", "store after last",
                                    "label after last", "one record", "second back edge"])
def test_a_loop_tail_is_deferred_only_where_every_way_out_stores_it(change):
    """The last record waits for a later store only where each path from it meets one before
    anything else can happen: the conditional back edge and its fall-through are the only way
    out, and the first record is the first thing each iteration does."""
    add, fma = "\tadd.s32 %r2, %r2, -1;", "\n".join(["\tfma.rn.f32 %f1, %f1, %f2, %f3;"] * 9)  # not tight
    test, back = "\tsetp.ne.s32 %p1, %r2, 0;", "\t@%p1 bra $L_head;"
    loop = ["$L_head:", "E r", fma, "X r", add, test, back]
    assert _deferral(_global_rewrite(loop + ["$L_out:"])) == (1, 1, 1)
    changed = {
        "branch out": ["$L_head:", "E r", "\t@%p2 bra $L_out;", fma, "X r", add, test, back, "$L_out:"],
        "ret": ["$L_head:", "E r", "\t@%p2 ret;", fma, "X r", add, test, back],
        "unconditional": ["$L_head:", "E r", fma, "X r", "\tbra.uni $L_head;"],
        "label before first": ["$L_head:", fma, "$L_mid:", "E r", fma, "X r", add, test, back],
        "store after last": ["$L_head:", "E r", fma, "X r", "\tst.global.u32 [%rd1], %r2;", add, test, back],
        "label after last": ["$L_head:", "E r", fma, add, test, "X r", "$L_latch:", back],  # a join
        "one record": ["$L_head:", "E r", fma, add, test, back, "X r"],
        "second back edge": ["$L_head:", "E r", "\t@%p2 bra $L_head;", fma, "X r", add, test, back],
    }[change]
    assert _deferral(_global_rewrite(changed))[::2] == (0, 0)


def test_shared_staging_defers_outside_tight_loops_and_circular_buffers_never():
    """With shared staging the deferred record goes to the saturating pointer's slot, under
    the leader-lane predicate of loops; a tight loop (first record linked to the last one,
    where the deferral measured slower: 12.5 against 12.3 cycles) and circular buffers keep
    their stores."""
    from proton_lite.layout import BufferLayout
    fmas = ["\tfma.rn.f32 %f1, %f1, %f2, %f3;"] * 9  # more than CLOSE_GAP: first and last not linked
    tail = ["\tadd.s32 %r2, %r2, -1;", "\tsetp.ne.s32 %p1, %r2, 0;", "\t@%p1 bra $L_head;"]
    shared = BufferLayout("warp", 1, 64, "shared")
    loop = ["$L_head:", "E r", *fmas, "X r", *tail]
    out = _rewrite(loop, shared)
    assert _deferral(out) == (1, 0, 1)  # (the shared deferred store's own check below)
    first, last = [r.split("add.u32 %pl_r3")[0] for r in out.split("// proton_lite: record")[1:3]]
    deferred = "@%pl_pd0 st.shared.v2.u32 [%pl_sa2], {%pl_tag2, %pl_clk2};"
    assert first.index("mov.u32 %pl_sa0, %pl_ptr;") < first.index(deferred) < first.index("st.shared.v2.u32 [%pl_sa0]")
    assert "mov.u32 %pl_sa2, %pl_ptr;" in last and "mov.pred %pl_pd0, %pl_p0;" in last and "st.shared" not in last
    assert "min.u32 %pl_ptr, %pl_ptr, %pl_sink;" in last  # the pointer advances past its slot as before
    assert out.count(deferred) == 2  # the first record, and after the back edge
    tight = ["$L_head:", "E r", "\tadd.s32 %r3, %r3, 1;", "X r", *tail]
    assert _deferral(_rewrite(tight, shared)) == (0, 0, 0)
    assert _deferral(_rewrite(loop, BufferLayout("warp", 1, 64, "global", "circular"))) == (0, 0, 0)


@pytest.mark.parametrize("fmas,kw", [(8, {}), (8, {"capacity": 4096})])  # global; shared staging
def test_no_store_comes_between_a_loop_s_last_timer_read_and_its_back_edge(fmas, kw, direct_loop_stores):
    """The first timer read of the next iteration waited for the store just before the back
    edge to read its registers, however long the body (bench.py, 32 FMAs per element: 17.4
    cycles per record with global stores, whose loop ptxas tracks with one scoreboard, 9.0
    with shared ones; 13.9 and 7.0 with the store deferred). With the last record's store
    deferred, the loop's stores come after its first timer read and before its last one. Outside
    tight loops, global ones share one address register (11.2 cycles with 8 FMAs). (Tight
    global loops are unrolled instead: test_a_tight_loop_with_global_staging_is_unrolled...)"""
    k = proton_lite.compile(_fma_loop, {"x_ptr": "*fp32", "n": "i32"}, {"FMAS": fmas}, num_warps=2, **kw)
    store = "STS" if kw else "STG"
    assert k.profile["layout"]["staging"] == ("shared" if kw else "global")
    assert _deferral(k.asm["ptx"])[::2] == (1, 1)
    instrs = sass.disassemble(k.asm["cubin"])
    loops = [i for i in instrs if i.opcode == "BRA" and int(i.text.split("0x")[-1], 16) < i.addr]
    bodies = [[j for j in instrs if int(b.text.split("0x")[-1], 16) <= j.addr <= b.addr] for b in loops]
    body, = [b for b in bodies if any(i.opcode.startswith("CS2R") for i in b)]  # the records' loop
    kinds = [i.opcode.split(".")[0] for i in body if i.opcode.startswith((store, "CS2R"))]
    assert kinds == ["CS2R", store, store, "CS2R"], kinds  # two records, two stores per iteration
    if store == "STG":  # not a tight loop: the deferred record at the next one's address - 8
        addresses = [re.search(r"\[(R\d+)\.64(\+-0x8)?\]", i.text).groups() for i in body if i.opcode.startswith("STG")]
        assert addresses[0][1] == "+-0x8" and addresses[1] == (addresses[0][0], None), addresses


def test_capacity_does_not_shrink_the_record_cost_launch():
    """``capacity=`` sizes the user's kernels; the record-cost launch at stop keeps the size of
    its 34 records, or the session's cost of a record would come from truncated scopes."""
    from proton_lite.runtime.calibrate import PAIRS, proton_lite_calibrate
    small = proton_lite.compile(proton_lite_calibrate, {}, {"PAIRS": PAIRS}, num_warps=4, capacity=16)
    assert small.profile["layout"]["capacity"] >= 2 * PAIRS + 2
    user = proton_lite.compile(_tight_loop, {"x_ptr": "*fp32", "n": "i32"}, num_warps=2, capacity=16)
    assert user.profile["layout"]["capacity"] == 16


def test_a_kernel_staged_in_blocks_can_fall_back_to_global_stores_with_their_metadata(monkeypatch):
    """Where ptxas spills less for it (register_cap.build_best), the cubin stage takes the form
    with every record stored to global memory, and the metadata follows the form it took:
    its layout, its scope table (no copy scope) and Triton's own shared memory."""
    from proton_lite.passes import ptx_staging, stage_hook
    monkeypatch.setattr(ptx_staging, "MIN_INSTRUCTIONS_PER_RECORD", 0)  # loop_scopes' loop is tight
    monkeypatch.setattr(ptx_staging, "FLUSH_SLOTS", 60)
    blocks = compile_case("loop_scopes")
    assert blocks.profile["layout"]["flush_slots"] == 60 and blocks.metadata["shared"] > 0
    assert any(i.opcode.startswith("STS") for i in sass.disassemble(blocks.asm["cubin"]))

    def last_form(sources, plain, make_cubin, metadata, threads):
        return make_cubin(sources[-1], metadata), {"registers": None, "plain": None, "cap": None,
                                                   "form": len(sources) - 1}
    monkeypatch.setattr(stage_hook, "build_best", last_form)
    k = compile_case("loop_scopes", loop_capacity=255)  # (another compile: not Triton's cached one)
    layout = k.profile["layout"]
    assert (layout["staging"], layout.get("flush_slots", 0), layout["sized_at_launch"]) == ("global", 0, True)
    assert k.profile["scopes"] == ["step"] and k.metadata["shared"] == 0 and k.profile["registers"]["form"] == 1
    assert k.metadata["profile_scratch_size"] == blocks.metadata["profile_scratch_size"] - 8 * 4  # capacity 255
    instrs = sass.disassemble(k.asm["cubin"])
    assert not any(i.opcode.startswith("STS") for i in instrs) and any(i.opcode.startswith("STG") for i in instrs)


@triton.jit
def _row_loop(x_ptr, o_ptr, n_rows, BLOCK: tl.constexpr):
    """A grid-stride loop over rows, a scope per row: each iteration waits for its row."""
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        pl.enter_scope("row")
        x = tl.load(x_ptr + row * BLOCK + cols)
        tl.store(o_ptr + row * BLOCK + cols, x / tl.sum(x, 0))
        pl.exit_scope("row")


@pytest.mark.parametrize("case,blocks", [("fma8", False), ("fma128", False), ("rows", True)])
def test_only_loops_that_wait_on_memory_are_staged_in_blocks(case, blocks):
    """Sized at launch: a block's check and copies cost a record 16-25 cycles more than a
    global store in a loop of arithmetic (bench.py), and pay in a loop whose iterations wait
    on memory (ptx_staging.sparse_loops): a row's loads and reduction, not 128 FMAs, however
    many instructions those are."""
    if case == "rows":
        k = proton_lite.compile(_row_loop, {"x_ptr": "*fp32", "o_ptr": "*fp32", "n_rows": "i32"}, {"BLOCK": 256},
                                num_warps=4)
    else:
        k = proton_lite.compile(_fma_loop, {"x_ptr": "*fp32", "n": "i32"}, {"FMAS": int(case[3:])}, num_warps=2)
    layout = k.profile["layout"]
    assert layout["sized_at_launch"] and (layout["staging"], layout.get("flush_slots", 0)) == (
        ("shared", 64) if blocks else ("global", 0))
