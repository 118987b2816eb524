"""bench.py's kernels without a GPU: each compiles for sm_90 plain and under the pass, with
the scopes and the CTA header form the benchmark's tables assume (docs/benchmarks.md)."""
import os
import sys

import pytest

import proton_lite

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "benchmarks"))
import bench_kernels as B  # noqa: E402

F16, F32 = "*fp16", "*fp32"
MM_SIG = {"a_ptr": F16, "b_ptr": F16, "c_ptr": F16, **{a: "i32" for a in ("M", "N", "K", "sam", "sak", "sbk", "sbn",
                                                                         "scm", "scn")}}
# name: (kernel, signature, constexprs, warps, scopes, CTA header form)
CASES = {
    "vadd": (B.vadd, {"x_ptr": F32, "y_ptr": F32, "o_ptr": F32, "n": "i32"}, {"BLOCK": 1024}, 4,
             ["load", "store"], "exit"),
    "smax": (B.smax, {"x_ptr": F32, "o_ptr": F32, "stride": "i32", "n": "i32"}, {"BLOCK": 4096}, 8,
             ["reduce", "store"], "exit"),
    "lnorm": (B.lnorm, {"x_ptr": F16, "y_ptr": F16, "w_ptr": F32, "b_ptr": F32, "stride": "i32", "n": "i32",
                        "eps": "fp32"}, {"BLOCK": 8192}, 16, ["stats", "normalize"], "exit"),
    "mm": (B.mm, MM_SIG, {"BM": 128, "BN": 128, "BK": 64, "PER_ITER": False}, 8, ["mainloop", "epilogue"], "entry"),
    "mm_iter": (B.mm, MM_SIG, {"BM": 128, "BN": 128, "BK": 64, "PER_ITER": True}, 8,
                ["mainloop", "iter", "epilogue"], "entry"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_benchmark_kernel_compiles_plain_and_instrumented(name):
    kernel, sig, constexprs, warps, scopes, header = CASES[name]
    aligned = tuple(a for a, t in sig.items() if t != "fp32")  # as bench.py launches them: sizes of 4096, 8192
    plain = proton_lite.compile(kernel, sig, {**constexprs, "PROF": 0}, instrument=False, num_warps=warps,
                                divisible_by_16=aligned)
    assert len(plain.asm["cubin"]) > 1000 and "globaltimer" not in plain.asm["ptx"]
    k = proton_lite.compile(kernel, sig, {**constexprs, "PROF": 1}, num_warps=warps, divisible_by_16=aligned)
    assert len(k.asm["cubin"]) > 1000
    assert sorted(k.scopes) == sorted(scopes)
    assert k.profile["record_sites"] == 2 * len(scopes)
    assert k.profile["cta_header"] == header  # straight-line kernels at exit, the matmul's K loop at entry
