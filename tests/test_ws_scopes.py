"""Scopes of loops Triton warp-specializes, placed in the partitions that do their work
(``passes/ws_scopes.py``).

First on hand-written IR text shaped like Triton's (a TTIR with markers, the TTGIR after the
split, without them), then on kernels compiled for sm_90 (and sm_100 where this Triton can);
the GPU test (``tests/test_gpu_warp_specialized.py``) counts the records per partition.
"""
import re
import warnings

import pytest
import triton

from proton_lite.offline_compile import compile as pl_compile
from proton_lite.passes import ws_scopes
from proton_lite.passes.kernel_facts import ProtonLiteWarning, marker_scopes

import ws_kernels as W

F = '"k.py"'


def marker(kind, name, ssa, loc, indent="      "):
    return (f'{indent}{ssa} = tt.elementwise_inline_asm "mov.u32 $0, 0; // @@proton_lite {kind} '
            f'{name.encode().hex()}" {{constraints = "=r", packed_element = 1 : i32, pure = false}} -> i32 loc({loc})')


# A TTIR: an outer loop (not specialized) around a warp-specialized K loop with three scopes:
# "load" (a load, through a helper's call site), "idx" (index arithmetic only), "mma" (a dot)
TTIR = "\n".join([
    "module {",
    "  tt.func public @k(%a: !tt.ptr<f16> loc(#loc)) {",
    "    %o = scf.for %t = %c0 to %n step %c1 iter_args(%x = %c0) -> (i32) : i32 {",
    "      %acc = scf.for %k = %c0 to %kt step %c1 iter_args(%y = %z) -> (tensor<64x64xf32>) : i32 {",
    marker("enter", "load", "%1", "#loc10", "        "),
    "        %a1 = tt.descriptor_load %d[%k] : !tt.tensordesc<tensor<64x64xf16>> -> tensor<64x64xf16> loc(#loc20)",
    marker("exit", "load", "%2", "#loc11", "        "),
    marker("enter", "idx", "%3", "#loc12", "        "),
    "        %i = arith.muli %k, %c64 : i32 loc(#loc13)",
    marker("exit", "idx", "%4", "#loc12", "        "),
    marker("enter", "mma", "%5", "#loc14", "        "),
    "        %d1 = tt.dot %a1, %a1, %y : tensor<64x64xf16> * tensor<64x64xf16> -> tensor<64x64xf32> loc(#loc15)",
    marker("exit", "mma", "%6", "#loc14", "        "),
    "        scf.yield %d1 : tensor<64x64xf32> loc(#loc)",
    "      } {tt.warp_specialize} loc(#loc16)",
    "      scf.yield %x : i32 loc(#loc)",
    "    } loc(#loc17)",
    "    tt.return loc(#loc)",
    "  } loc(#loc)",
    "} loc(#loc)",
    f"#loc = loc({F}:1:0)",
    f"#loc1 = loc({F}:30:5)",
    f"#loc2 = loc({F}:40:9)",
    f"#loc10 = loc({F}:10:8)",
    f"#loc11 = loc({F}:12:8)",
    f"#loc12 = loc({F}:13:8)",
    f"#loc13 = loc({F}:14:12)",
    f"#loc14 = loc({F}:15:8)",
    f"#loc15 = loc({F}:16:14)",
    f"#loc16 = loc({F}:9:20)",
    f"#loc17 = loc({F}:8:16)",
    '#loc20 = loc("a1"(#loc21))',
    "#loc21 = loc(callsite(#loc1 at #loc2))",  # a helper at 30:5 called from line 40 ... of the scope
])

# The TTGIR after the split: loc numbers are new (Triton prints its own table); the producer
# (default) copies the load, both workers the dot, all of them the index arithmetic; an old
# "load" marker pair was left outside the partitions; a worker has an scf.if with an else
TTGIR = "\n".join([
    "module attributes {\"ttg.num-warps\" = 4 : i32} {",
    "  tt.func public @k(%a: !tt.ptr<f16> loc(#loc)) {",
    "    %o = scf.for %t = %c0 to %n step %c1 iter_args(%x = %c0) -> (i32) : i32 {",
    marker("enter", "load", "%1", "#loc3"),
    marker("exit", "load", "%2", "#loc3"),
    "      ttg.warp_specialize(%a) attributes {requestedRegisters = array<i32: 232>}",
    "      default {",
    "        %acc = scf.for %k = %c0 to %kt step %c1 iter_args(%y = %c0) -> (i64) : i32 {",
    "          %i = arith.muli %k, %c64 {async_task_id = array<i32: 0>} : i32 loc(#loc6)",
    "          ttng.wait_barrier %b, %p {async_task_id = array<i32: 0>} : !ttg.memdesc<1xi64> loc(#loc7)",
    "          ttng.async_tma_copy_global_to_local %d[%i] %s, %b, %true : !tt.tensordesc<tensor<64x64xf16>> loc(#loc7)",
    "          scf.yield %y : i64 loc(#loc)",
    "        } {async_task_id = array<i32: 0>} loc(#loc5)",
    "        ttg.warp_yield loc(#loc)",
    "      }",
    "      partition0(%a0: !tt.ptr<f16> loc(#loc)) num_warps(4) {",
    "        %acc:2 = scf.for %k = %c0 to %kt step %c1 iter_args(%y = %z, %w = %c0) -> (tensor<64x64xf32>, i64) : i32 {",
    "          %i = arith.muli %k, %c64 {async_task_id = array<i32: 1>} : i32 loc(#loc6)",
    "          ttng.wait_barrier %b, %p {async_task_id = array<i32: 1>} : !ttg.memdesc<1xi64> loc(#loc)",
    "          %c = scf.if %q -> (i32) {",
    "            scf.yield %c0 : i32 loc(#loc)",
    "          } else {",
    "            scf.yield %c1 : i32 loc(#loc)",
    "          } loc(#loc)",
    "          %d1 = ttng.warp_group_dot %s, %s, %y : !ttg.memdesc<64x64xf16> * !ttg.memdesc<64x64xf16> -> tensor<64x64xf32> loc(#loc8)",
    "          ttng.arrive_barrier %b, 128 : !ttg.memdesc<1xi64> loc(#loc8)",
    "          scf.yield %d1, %w : tensor<64x64xf32>, i64 loc(#loc)",
    "        } {async_task_id = array<i32: 1>} loc(#loc5)",
    "        ttg.warp_return loc(#loc)",
    "      }",
    "      partition1(%a0: !tt.ptr<f16> loc(#loc)) num_warps(4) {",
    "        ttg.warp_return loc(#loc)",
    "      } : (!tt.ptr<f16>) -> ()",
    "      scf.yield %x : i32 loc(#loc)",
    "    } loc(#loc4)",
    "    tt.return loc(#loc)",
    "  } loc(#loc)",
    "} loc(#loc)",
    f"#loc = loc({F}:1:0)",
    f"#loc1 = loc({F}:30:5)",
    f"#loc2 = loc({F}:40:9)",
    f"#loc3 = loc({F}:10:8)",
    f"#loc4 = loc({F}:8:16)",
    f"#loc5 = loc({F}:9:20)",
    f"#loc6 = loc({F}:14:12)",
    '#loc7 = loc("a1"(#loc9))',
    f"#loc8 = loc(fused[{F}:16:14, {F}:16:20])",  # the dot, fused with another position
    "#loc9 = loc(callsite(#loc1 at #loc2))",
])


def _region_markers(text):
    """{region header: [(kind, scope name, enclosing loop count within the region)]}."""
    out, region, depth = {}, "outside", 0
    for line in text.split("\n"):
        bare = line.strip()
        head = re.match(r"^(default|partition\d+)\b", bare)
        if head:
            region, depth = head.group(1), 0
        if " scf.for " in f" {line}" and bare.endswith("{"):
            depth += 1
        m = re.search(r"@@proton_lite (enter|exit) ([0-9a-f]+)", line)
        if m:
            out.setdefault(region, []).append((m.group(1), bytes.fromhex(m.group(2)).decode(), depth))
        if bare.startswith("} {async_task_id") or (bare.startswith("}") and "loc(#loc5)" in bare):
            depth -= 1
    return out


def test_each_scope_goes_to_the_partitions_that_do_its_work():
    instances = ws_scopes.plan(TTIR)
    assert [bytes.fromhex(i.name_hex).decode() for i in instances] == ["load", "idx", "mma"]
    load = instances[0]
    # the loops around it by source position, outermost first; the operation's position through
    # its name and call site: the helper's line and the caller's line
    assert load.loops == (((("k.py", 8, 16), ), ), ((("k.py", 9, 20), ), ))
    assert (("k.py", 30, 5), ("k.py", 40, 9)) in load.keys
    new, placed = ws_scopes.rederive(TTGIR, instances)
    assert [(p["scope"], p["region"]) for p in placed] == [("load", "default"), ("mma", "partition 0")]
    # the outer loop is around the split: one loop to follow inside each partition, found
    assert all(p["loops"] == p["source_loops"] == 1 for p in placed)
    regions = _region_markers(new)
    assert "outside" not in regions  # the old, empty pair left outside the partitions is gone
    assert regions["default"] == [("enter", "load", 1), ("exit", "load", 1)]  # in the loop, around the copy
    assert regions["partition0"] == [("enter", "mma", 1), ("exit", "mma", 1)]
    assert "partition1" not in regions  # no work of any scope there
    # "idx" is index arithmetic only, repeated by every partition: not placed (reported lost at compile)
    assert "idx" not in marker_scopes(new)
    lines = new.split("\n")
    enter = next(i for i, x in enumerate(lines) if "enter 6c6f6164" in x)
    exit_ = next(i for i, x in enumerate(lines) if "exit 6c6f6164" in x)
    assert "wait_barrier" in lines[enter + 1] and "async_tma_copy" in lines[exit_ - 1]
    enter = next(i for i, x in enumerate(lines) if "enter 6d6d61" in x)
    exit_ = next(i for i, x in enumerate(lines) if "exit 6d6d61" in x)
    assert "warp_group_dot" in lines[enter + 1] and "arrive_barrier" in lines[exit_ - 1]
    assert lines[enter].endswith("loc(#loc8)")  # a location of this text's own table
    assert all(" = tt.elementwise_inline_asm" in x for x in (lines[enter], lines[exit_]))
    assert len({x.split("=")[0].strip() for x in lines if "@@proton_lite" in x}) == 4  # fresh names


def test_text_without_warp_specialization_is_left_alone():
    instances = ws_scopes.plan(TTIR)
    plain = TTGIR.replace("ttg.warp_specialize(", "ttg.something_else(")
    assert ws_scopes.rederive(plain, instances) == (plain, [])
    assert ws_scopes.rederive(TTGIR, []) == (TTGIR, [])


def _compile(kernel, sig, const, arch):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ck = pl_compile(kernel, sig, const, arch=arch, num_warps=4)
    return ck, [w for w in caught if issubclass(w.category, ProtonLiteWarning)]


@pytest.mark.parametrize("kernel,sig,const,loads,mmas", [
    (W.ws_matmul, W.WS_MATMUL_SIG, W.WS_MATMUL_CONST, ["load"], ["mma", "epilogue"]),
    (W.ws_attention, W.WS_ATTENTION_SIG, W.WS_ATTENTION_CONST, ["qk", "pv"], ["qk", "softmax", "pv"]),
], ids=["ws_matmul", "ws_attention"])
def test_sm90_loops_keep_every_scope_in_the_partitions_doing_its_work(kernel, sig, const, loads, mmas):
    """Triton 3.6 and 3.9 drop every marker of these loops when they split them for sm_90;
    each scope comes back in the partition(s) whose operations it holds, no warning."""
    ck, caught = _compile(kernel, sig, dict(const, SCOPES=True), 90)
    assert "ttg.warp_specialize" in ck.asm["ttgir"]
    assert not caught and ck.profile["lost_scopes"] is None
    assert set(ck.scopes) == set(loads) | set(mmas)
    table = ck.profile["partitions"]
    (loader, ) = [p for p in table if p["role"] == "TMA loads"]
    assert sorted(loader["scopes"]) == sorted(loads)  # the producer: its loads' scopes, nothing else
    consumers = [p for p in table if "MMA" in (p["role"] or "")]
    assert consumers and all(sorted(p["scopes"]) == sorted(mmas) for p in consumers)
    # every pair placed is one record site pair in the PTX
    assert ck.profile["record_sites"] == 2 * sum(len(p["scopes"]) for p in table)
    # the record bound is still the one read from the TTIR: sized per launch from the trip count
    assert ck.profile["layout"]["sized_at_launch"] and ck.profile["records_per_unit_expr"]


@pytest.mark.skipif(tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7),
                    reason="Triton 3.6 cannot warp-specialize these loops with scopes for sm_100 (its partition "
                           "scheduler aborts)")
def test_sm100_partitions_hold_only_the_scopes_they_work_on():
    """On sm_100 Triton copies every marker into every partition (the MMA partition's 'load'
    would time a barrier wait); placed again, the TMA partition holds 'load', the MMA
    partition 'mma' and not 'load'. The persistent kernel's tile and K loops are flattened into
    one: its pairs go in the flattened loop."""
    ck, caught = _compile(W.ws_matmul, W.WS_MATMUL_SIG, dict(W.WS_MATMUL_CONST, SCOPES=True), 100)
    table = {p["role"]: p["scopes"] for p in ck.profile["partitions"]}
    assert "load" in table["TMA loads"] and "load" not in table["MMA"] and "mma" in table["MMA"]
    assert not caught
    ck, caught = _compile(W.ws_persistent, W.WS_MATMUL_SIG, dict(W.WS_MATMUL_CONST, NUM_SMS=148), 100)
    table = {p["role"]: p["scopes"] for p in ck.profile["partitions"]}
    assert "load" in table["TMA loads"] and "mma" in table["MMA"] and "load" not in table["MMA"]
    assert "store" in table["stores"]
    assert not caught and set(ck.scopes) == {"load", "mma", "store"}


def test_a_placement_that_fails_leaves_the_kernel_compiling_and_the_scopes_reported(monkeypatch, tmp_path):
    """An IR the rewrite does not understand must never stop a kernel from compiling: it is
    built as Triton left it, and the loop's scopes are reported lost."""
    def broken(text, instances):
        raise ValueError("an IR this rewrite does not follow")

    monkeypatch.setattr(ws_scopes, "rederive", broken)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # compile again, not from the cache
    ck, caught = _compile(W.ws_matmul, W.WS_MATMUL_SIG, dict(W.WS_MATMUL_CONST, SCOPES=True), 90)
    assert ck.asm["cubin"]
    assert ck.profile["lost_scopes"]["scopes"] == ["load", "mma"]
    assert len(caught) == 1 and "'load', 'mma'" in str(caught[0].message)
