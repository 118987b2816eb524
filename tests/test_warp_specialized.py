"""Warp-specialized kernels on the CPU: buffers sized for the warps that run, lost scopes reported.

Where each scope lands among the partitions: ``tests/test_ws_scopes.py``.

Triton compiles these for sm_90 without a GPU (its ptxas assembles the instrumented PTX).
Warp specialization adds partitions with warps of their own: 4 warps requested, 12 run.
The buffer must hold a unit for each of them (before, the extra warps wrote past it: the
GPU tests check that under compute-sanitizer).
"""
import json
import re
import warnings

import pytest
import triton

from proton_lite.offline_compile import compile as pl_compile
from proton_lite.layout import CTA_HEADER_BYTES, RECORD_BYTES, UNIT_HEADER_BYTES, BufferLayout
from proton_lite.passes.kernel_facts import (ProtonLiteWarning, launched_warps, lost_scopes, marker_scopes,
                                             ptx_block_threads)
from proton_lite.viewer import cli

import kernels as K
import ws_kernels as W

CASES = {
    "ws_matmul": (W.ws_matmul, W.WS_MATMUL_SIG, W.WS_MATMUL_CONST),
    "ws_attention": (W.ws_attention, W.WS_ATTENTION_SIG, W.WS_ATTENTION_CONST),
}


def _compile(case, scopes=True, granularity="warp", **kw):
    kernel, sig, const = CASES[case]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ck = pl_compile(kernel, sig, dict(const, SCOPES=scopes), arch=90, num_warps=4, granularity=granularity, **kw)
    return ck, [w for w in caught if issubclass(w.category, ProtonLiteWarning)]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("scopes", [True, False])
def test_the_buffer_holds_a_unit_for_every_warp_that_runs(case, scopes):
    ck, _ = _compile(case, scopes)
    assert "ttg.warp_specialize" in ck.asm["ttgir"]  # else this test proves nothing
    threads = ptx_block_threads(ck.asm["ptx"])
    warps = threads // 32
    assert warps > 4  # Triton added partition warps to the 4 requested
    assert ck.metadata["num_warps"] == warps  # what the launcher launches
    layout = ck.profile["layout"]
    assert layout["num_warps"] == warps
    lay = BufferLayout.from_json(layout)
    assert lay.units == warps
    # every unit's block lies inside the CTA's block, which is what the launcher allocates per CTA
    unit_block = UNIT_HEADER_BYTES + (lay.capacity + lay.sink_slots) * RECORD_BYTES
    assert ck.metadata["profile_scratch_size"] == CTA_HEADER_BYTES + warps * unit_block
    if layout["staging"] == "shared":
        assert ck.profile["shared_staging_bytes"] >= warps * ((lay.flush_slots or lay.capacity) + 1) * RECORD_BYTES
    # a warp-specialized kernel keeps the CTA header at entry (its loop; setmaxnreg): no value
    # of ours lives across the partitions' register reallocation
    assert ck.profile["cta_header"] == "entry"


@pytest.mark.parametrize("granularity,per_unit", [("warpgroup", 4), ("cta", None)])
def test_coarser_units_count_the_warps_that_run_too(granularity, per_unit):
    ck, _ = _compile("ws_matmul", granularity=granularity)
    warps = ptx_block_threads(ck.asm["ptx"]) // 32
    lay = BufferLayout.from_json(ck.profile["layout"])
    assert lay.num_warps == warps
    assert lay.units == (warps // per_unit if per_unit else 1)


def test_a_scope_no_partition_does_work_of_is_reported():
    """A scope around index arithmetic only, inside a loop Triton warp-specializes: every
    partition repeats that arithmetic, none does the scope's work, so it is not placed; it is
    reported (metadata, one warning naming the kernel, the scope and the fix), and the scope
    beside it is kept."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ck = pl_compile(W.ws_index_scope, W.WS_MATMUL_SIG, W.WS_MATMUL_CONST, arch=90, num_warps=4)
    assert "ttg.warp_specialize" in ck.asm["ttgir"]
    assert ck.scopes == ["load"]
    assert ck.profile["lost_scopes"]["scopes"] == ["offsets"]
    assert "warp specialization" in ck.profile["lost_scopes"]["reason"]
    mine = [w for w in caught if issubclass(w.category, ProtonLiteWarning)]
    assert len(mine) == 1
    message = str(mine[0].message)
    assert "ws_index_scope" in message and "'offsets'" in message and "'load'" not in message
    assert "warp-specialized loop" in message  # the fix


def test_a_kernel_that_keeps_its_markers_gets_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProtonLiteWarning)
        ck = pl_compile(K.matmul, K.signature(K.matmul), K.CASES["matmul_per_iter"][1], arch=90, num_warps=8)
    assert ck.profile["lost_scopes"] is None
    assert ck.profile["layout"]["num_warps"] == 8


def test_launched_warps_reads_the_ptx_and_takes_the_largest_count():
    assert ptx_block_threads(".entry k(\n)\n.reqntid 128, 2, 1\n{") == 256
    assert ptx_block_threads(".entry k(\n)\n.maxntid 384\n{") == 384
    assert ptx_block_threads(".entry k(\n)\n.maxntid 512\n.reqntid 384\n{") == 384  # reqntid is exact
    assert ptx_block_threads(".entry k(\n)\n{") is None
    assert launched_warps(".reqntid 384", {"num_warps": 4}, 4) == 12
    assert launched_warps("", {"num_warps": 12}, 4) == 12
    assert launched_warps("", {}, 8) == 8
    assert launched_warps(".reqntid 100", {}, 1) == 4  # a partial warp still runs as a warp


def test_lost_scopes_names_the_stage_that_dropped_them():
    assert lost_scopes(["a", "b"], ["a", "b"], False, ["a", "b"]) is None
    assert lost_scopes(None, None, True, []) is None  # no TTIR seen (a Gluon kernel starts at TTGIR)
    ws = lost_scopes(["a", "b"], ["a"], True, ["a"])
    assert ws["scopes"] == ["b"] and "warp specialization" in ws["reason"]
    other = lost_scopes(["a", "b"], ["a"], False, ["a"])
    assert "between TTIR and TTGIR" in other["reason"]
    late = lost_scopes(["a", "b"], ["a", "b"], False, ["a"])
    assert "between TTGIR and PTX" in late["reason"]
    assert marker_scopes('"mov.u32 $0, 0; // @@proton_lite enter 6c6f6164" ... @@proton_lite exit 6c6f6164') == [
        "load"]


def test_compile_report_shows_the_real_warps_and_the_lost_scopes(capsys):
    args = ["compile", f"{W.__file__}:ws_index_scope", "--signature", ",".join(W.WS_MATMUL_SIG.values()),
            "--num-warps", "4"]
    for k, v in W.WS_MATMUL_CONST.items():
        args += ["--constexpr", f"{k}={v}"]
    assert cli.main(args + ["--json"]) == 0
    out, err = capsys.readouterr()
    r = json.loads(out)
    assert "ProtonLiteWarning" not in err  # the report says it, once
    assert r["num_warps"] > 4 and r["units_per_cta"] == r["num_warps"]
    assert r["lost_scopes"]["scopes"] == ["offsets"]
    assert cli.main(args) == 0
    out, _ = capsys.readouterr()
    text = re.sub(r"\s+", " ", out)
    assert f"{r['num_warps']} warps" in text
    assert "warning: kernel ws_index_scope: scope(s) 'offsets' have no records" in text


@pytest.mark.skipif(tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7),
                    reason="Triton 3.6 cannot warp-specialize a loop with scopes for sm_100 (its partition "
                           "scheduler aborts)")
def test_sm100_buffers_count_the_partition_warps_too():
    kernel, sig, const = CASES["ws_matmul"]
    ck = pl_compile(kernel, sig, dict(const, SCOPES=True), arch=100, num_warps=4)
    warps = ptx_block_threads(ck.asm["ptx"]) // 32
    assert warps > 4 and ck.profile["layout"]["num_warps"] == warps == ck.metadata["num_warps"]


def test_compile_signatures_take_tensor_descriptor_types(capsys, tmp_path):
    """`--signature` splits between types, not on the comma inside a descriptor's shape."""
    src = tmp_path / "desc.py"
    src.write_text("""
import triton
import triton.language as tl
import proton_lite.language as pl


@triton.jit
def copy_tile(in_desc, out_ptr, N, BM: tl.constexpr, BN: tl.constexpr):
    with pl.scope("load"):
        tile = in_desc.load([tl.program_id(0) * BM, 0])
    offs = tl.arange(0, BM)[:, None] * N + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offs, tile)
""")
    base = ["compile", f"{src}:copy_tile", "--constexpr", "BM=64", "--constexpr", "BN=64", "--json"]
    assert cli.main(base + ["--signature", "tensordesc<fp16[64, 64]>,*fp16,i32"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in r["scopes"]] == ["load"]
    assert cli.main(base + ["--signature", "in_desc:tensordesc<fp16[64, 64]>, out_ptr:*fp16, N:i32"]) == 0
    capsys.readouterr()
