"""Which warps of a warp-specialized kernel run which partition (passes/partitions.py,
issue 29): the table read from Triton's own warp-group allocation, the kind of work each
partition does, and the names warp tracks get from it. Real kernels compiled on the CPU
for sm_90 and sm_100 (Gluon's gl.warp_specialize and tl.range(warp_specialize=True))."""
import json
import warnings

import pytest
import triton

from proton_lite.offline_compile import compile as pl_compile
from proton_lite.partition_map import partition_label, partition_of_warp
from proton_lite.passes.partitions import partition_table
from proton_lite.viewer import cli

import gluon_kernels as G
import ws_kernels as W

ALLOCATED = """module attributes {"ttg.num-warps" = 4 : i32, "ttg.total-num-warps" = 17 : i32} {
  tt.func @k() {
    ttg.warp_specialize(%a) attributes {warpGroupStartIds = array<i32: 16, 4, 12>}
    default {
      %0 = tt.load %p : tensor<128x!tt.ptr<f32>> loc(#loc1)
      ttg.warp_yield
    }
    partition0(%x: i32) num_warps(1) {
      ttng.async_tma_copy_global_to_local %d[%c] %buf, %bar, %t : !tt.tensordesc loc(#loc2)
      ttg.warp_return
    }
    partition1(%x: i32) num_warps(8) {
      %1 = ttng.warp_group_dot %a, %b, %c : tensor<128x128xf32> loc(#loc3)
      ttg.warp_return
    }
    partition2(%x: i32) num_warps(4) {
      ttg.warp_return loc(#loc1)
    } : (i32) -> () loc(#loc1)
    tt.return
  }
}"""


def test_the_table_follows_the_allocated_start_warps_and_names_the_work():
    table = partition_table(ALLOCATED)
    assert [(p["name"], p["first_warp"], p["warps"]) for p in table] == \
        [("default", 0, 4), ("partition 0", 16, 1), ("partition 1", 4, 8), ("partition 2", 12, 4)]
    assert [p["role"] for p in table] == ["loads", "TMA loads", "MMA", "idle: padding to a full warp group"]
    assert partition_of_warp(table, 16)["name"] == "partition 0"
    assert partition_of_warp(table, 11)["name"] == "partition 1" and partition_of_warp(table, 3)["name"] == "default"
    assert partition_of_warp(table, 17) is None
    assert partition_label(table[2]) == "partition 1 (MMA)"
    assert partition_table("module {\n}") is None


def test_two_warp_specialize_ops_are_told_apart():
    two = ALLOCATED.replace("    tt.return\n", ALLOCATED.split("  tt.func @k() {\n")[1].split("    tt.return")[0]
                            .replace("16, 4, 12", "20, 24, 28") + "    tt.return\n")
    table = partition_table(two)
    assert [p["name"] for p in table][:4] == ["0.default", "0.partition 0", "0.partition 1", "0.partition 2"]
    assert [p["first_warp"] for p in table if p["name"].startswith("1.")] == [0, 20, 24, 28]


def _covers_every_warp_once(table, total):
    owner = [None] * total
    for p in table:
        for w in range(p["first_warp"], p["first_warp"] + p["warps"]):
            assert owner[w] is None, (w, owner[w], p)
            owner[w] = p["name"]
    assert None not in owner, owner


def test_a_gluon_warp_specialized_kernel_names_its_partitions():
    ck = pl_compile(G.gl_ws, G.GL_WS_SIG, {"BLOCK": 128, "ROUNDS": 3}, num_warps=4)
    table = ck.profile["partitions"]
    assert [(p["name"], p["first_warp"], p["warps"]) for p in table] == \
        [("default", 0, 4), ("partition 0", 4, 2), ("partition 1", 6, 2)]
    assert table[2]["role"].startswith("idle")
    assert ck.profile["layout"]["num_warps"] == 8 and sorted(ck.scopes) == ["scale", "shift"]
    assert not ck.profile.get("lost_scopes")
    _covers_every_warp_once(table, 8)


SM100 = pytest.param(100, marks=pytest.mark.skipif(
    tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7),
    reason="Triton 3.6 cannot warp-specialize these loops for sm_100 (its partition scheduling pass fails)"))


@pytest.mark.parametrize("arch", [90, SM100])
@pytest.mark.parametrize("kernel, sig, const", [(W.ws_matmul, W.WS_MATMUL_SIG, W.WS_MATMUL_CONST),
                                                (W.ws_attention, W.WS_ATTENTION_SIG, W.WS_ATTENTION_CONST)])
def test_triton_warp_specialized_loops_name_their_producer_and_consumer(arch, kernel, sig, const):
    with warnings.catch_warnings():  # sm_90: the markers in the loop are lost (reported elsewhere)
        warnings.simplefilter("ignore")
        ck = pl_compile(kernel, sig, dict(const, SCOPES=True), arch=arch, num_warps=4)
    table = ck.profile["partitions"]
    _covers_every_warp_once(table, ck.profile["layout"]["num_warps"])
    roles = " ".join(p["role"] or "" for p in table)
    assert "TMA loads" in roles and "MMA" in roles


def test_the_compile_report_lists_the_partitions(capsys):
    args = ["compile", f"{G.__file__}:gl_ws", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=128",
            "--constexpr", "ROUNDS=3", "--num-warps", "4"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "partition 0: warps 4-5" in out and "partition 1: warps 6-7 (idle: padding" in " ".join(out.split())
    assert "scopes: shift" in out  # where the author wrote each scope
    assert cli.main(args + ["--json"]) == 0
    table = json.loads(capsys.readouterr().out)["partitions"]
    assert [(p["name"], p["scopes"]) for p in table] == [("default", ["scale"]), ("partition 0", ["shift"]),
                                                          ("partition 1", [])]


def test_warp_tracks_carry_their_partition(tmp_path):
    from synth import one_scope_capture
    ck = pl_compile(G.gl_ws, G.GL_WS_SIG, {"BLOCK": 128, "ROUNDS": 3}, num_warps=4)
    one_scope_capture(tmp_path / "p.plraw", "gl_ws", "scale", {"partitions": ck.profile["partitions"]}, units=8)
    assert cli.main(["trace", str(tmp_path / "p.plraw"), "-o", str(tmp_path / "p.json"), "--format", "chrome"]) == 0
    events = json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}  # e.g. "slot 0 warp 2 · ..."
    assert "slot 0 warp 2 · default (loads, stores)" in names and "slot 0 warp 5 · partition 0 (loads, stores)" in names
    assert any(n.startswith("slot 0 warp 7 · partition 1 (idle") for n in names)


def test_summary_splits_a_scope_by_the_partition_that_ran_it(tmp_path, capsys):
    """On sm_100 Triton copies a scope into every partition, where it times different work:
    the summary gives each partition its own row, its share taken over its own warps."""
    from synth import one_scope_capture
    ck = pl_compile(G.gl_ws, G.GL_WS_SIG, {"BLOCK": 128, "ROUNDS": 3}, num_warps=4)
    one_scope_capture(tmp_path / "p.plraw", "gl_ws", "scale", {"partitions": ck.profile["partitions"]}, units=8)
    assert cli.main(["summary", str(tmp_path / "p.plraw"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["scopes"]
    by_part = {r["partition"]: r for r in rows}
    assert {p.split(" (")[0]: r["count"] for p, r in by_part.items()} == \
        {"default": 4, "partition 0": 2, "partition 1": 2}
    assert len({round(r["share"], 6) for r in rows}) == 1  # every warp timed the same: one share for all
    assert cli.main(["summary", str(tmp_path / "p.plraw"), "--tables", "scopes"]) == 0
    out = capsys.readouterr().out
    assert "scale · default (loads," in out and "scale · partition 0 (loads," in out  # folded at the width
