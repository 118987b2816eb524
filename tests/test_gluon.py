"""Gluon kernels on the CPU: scopes compile through Triton's Gluon path, in proton_lite.compile
and in `proton-lite compile` (tests/test_gpu_library.py runs one in a session on the H100)."""
import json

from proton_lite.offline_compile import compile as pl_compile
from proton_lite.viewer import cli

import gluon_kernels as G


def test_a_gluon_kernel_compiles_with_its_scopes():
    ck = pl_compile(G.gl_scale, G.GL_SCALE_SIG, {"BLOCK": 128}, num_warps=4)
    assert ck.scopes == ["load", "store"] and ck.profile["record_sites"] == 4
    assert ck.profile["layout"]["num_warps"] == 4
    assert "@@proton_lite" not in ck.asm["ptx"] and ck.asm["ptx"].count("// proton_lite: record") == 4
    assert ck.asm["cubin"][:4] == b"\x7fELF"


def test_proton_lite_compile_reports_a_gluon_kernel(capsys):
    args = ["compile", f"{G.__file__}:gl_scale", "--signature", "*fp32,*fp32,i32", "--constexpr", "BLOCK=128",
            "--num-warps", "4", "--json"]
    assert cli.main(args) == 0
    r = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in r["scopes"]] == ["load", "store"] and r["record_sites"] == 4
    assert r["units_per_cta"] == 4
