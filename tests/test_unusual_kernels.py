"""tests/unusual_kernels.py compiled for sm_90 on the CPU: what the GPU test relies on is in
the instrumented code (tests/test_gpu_unusual.py runs them)."""
import re

import pytest

import proton_lite
from proton_lite.passes.ptx_scan import InstrumentationError

import unusual_kernels as U

F32, I32 = "*fp32", "*i32"


def test_the_spin_lock_s_scope_inside_its_while_loop_records_into_a_pool():
    k = proton_lite.compile(U.locked_accumulate, {"x_ptr": F32, "acc_ptr": F32, "lock_ptr": I32, "count_ptr": I32},
                            {"BLOCK": 256, "GROUPS": 4})
    assert k.profile["loop_record_sites"] == 2  # the "spin" scope's two records, once per trip
    assert k.profile["records_per_unit_max"] is None  # no bound: the trips depend on other CTAs
    layout = k.profile["layout"]
    assert layout["sized_at_launch"] and layout["pool"]


def test_ctas_that_return_early_reach_the_epilogue():
    k = proton_lite.compile(U.early_return, {"x_ptr": F32, "out_ptr": F32, "n_rows": "i32"}, {"BLOCK": 256})
    ptx = k.asm["ptx"]
    assert ptx.count("ret;") == 1  # one way out, after the epilogue (which writes the header)
    assert ptx.index("// proton_lite: epilogue") < ptx.index("ret;")


def test_programmatic_dependent_launch_keeps_its_grid_dependency_controls():
    k = proton_lite.compile(U.pdl_scale, {"x_ptr": F32, "out_ptr": F32, "n": "i32"}, {"BLOCK": 256})
    ptx = k.asm["ptx"]
    wait, release = ptx.index("griddepcontrol.wait"), ptx.index("griddepcontrol.launch_dependents")
    assert wait < ptx.index("// proton_lite: record") < release  # the scope sits between them
    assert len(k.asm["cubin"]) > 1000


def test_a_two_cta_cluster_kernel_asks_for_a_slice_per_cta():
    k = proton_lite.compile(U.cluster_add, {"x_ptr": F32, "y_ptr": F32, "out_ptr": F32, "n": "i32"}, {"BLOCK": 256},
                            num_ctas=2)
    assert k.metadata["num_ctas"] == 2
    layout = k.profile["layout"]
    assert layout["num_warps"] == 4 and k.metadata["profile_scratch_size"] == k.profile["stride"]


def test_a_32_warp_kernel_gets_a_unit_per_warp():
    k = proton_lite.compile(U.wide_rows, {"x_ptr": F32, "out_ptr": F32, "n_cols": "i32"}, {"BLOCK": 8192}, num_warps=32)
    assert k.profile["layout"]["num_warps"] == 32 and k.profile["layout"]["granularity"] == "warp"


def test_a_debug_build_keeps_its_asserts_and_inline_ptx_beside_the_records():
    k = proton_lite.compile(U.asserted_asm, {"x_ptr": F32, "out_ptr": F32, "n": "i32"}, {"BLOCK": 256}, debug=True)
    ptx = k.asm["ptx"]
    assert "__assertfail" in ptx and "0f40000000" in ptx
    assert ptx.count("// proton_lite: record") == 4


def _functions(ptx: str) -> dict[str, str]:
    """Each ``.func`` definition of the module (its name -> its text up to its closing brace)."""
    out = {}
    for m in re.finditer(r"^\.func\s+(?:\([^)]*\)\s*)?([\w$]+)\s*\(", ptx, re.M):
        end = ptx.find("\n}", m.end())
        if ptx.find("{", m.end()) < end:  # a definition, not a prototype
            out[m.group(1)] = ptx[m.start():end]
    return out


@pytest.mark.parametrize("kernel,scoped", [(U.calls_helper, False), (U.calls_helper_scoped, True)])
def test_a_noinline_helper_s_function_is_left_as_triton_wrote_it(kernel, scoped):
    sig, cx = {"x_ptr": F32, "out_ptr": F32, "n_cols": "i32"}, {"BLOCK": 256}
    plain = proton_lite.compile(kernel, sig, cx, instrument=False).asm["ptx"]
    k = proton_lite.compile(kernel, sig, cx)  # ptxas assembles it
    ptx = k.asm["ptx"]
    funcs, plain_funcs = _functions(ptx), _functions(plain)
    assert len(funcs) == 1 and funcs.keys() == plain_funcs.keys()
    (name, body), = funcs.items()
    assert body == plain_funcs[name]  # as Triton wrote it: its ret is not the kernel's exit
    assert "%pl_" not in body and body.count("ret;") == 1
    assert ptx.count("// proton_lite: epilogue") == 1  # the kernel's one exit writes the header
    assert ptx.count("// proton_lite: record") == (2 if scoped else 0)
    assert k.profile["layout"]["granularity"] == ("warp" if scoped else "cta")


def test_a_scope_inside_a_noinline_helper_is_refused_at_its_line():
    with pytest.raises(InstrumentationError) as err:
        proton_lite.compile(U.scope_inside_helper, {"x_ptr": F32}, {"BLOCK": 128})
    msg = str(err.value)
    line = next(i for i, text in enumerate(open(U.__file__).read().split("\n"), 1) if '"inside_helper"' in text)
    assert f"'inside_helper' ({U.__file__}:{line})" in msg, msg
    assert "_scoped_helper" in msg and "noinline=True" in msg and "around the call" in msg


def test_device_print_beside_a_scope_compiles_with_its_vprintf_call():
    k = proton_lite.compile(U.printing_scale, {"x_ptr": F32, "n": "i32"}, {"BLOCK": 128})
    ptx = k.asm["ptx"]
    assert "vprintf" in ptx and ptx.count("// proton_lite: record") == 2
    assert ptx.count("// proton_lite: epilogue") == 1


def test_a_grid_barrier_kernel_keeps_its_cooperative_launch_and_spin_loop():
    k = proton_lite.compile(U.grid_sync_normalize, {"x_ptr": F32, "partial_ptr": F32, "count_ptr": I32,
                                                    "out_ptr": F32, "n": "i32"},
                            {"BLOCK": 4096, "PROGRAMS": 256}, launch_cooperative_grid=True)
    assert k.metadata["launch_cooperative_grid"]
    ptx = k.asm["ptx"]
    assert ptx.count("// proton_lite: record") == 6 and ".gpu.release" in ptx  # the arrival, kept as written
    assert k.profile["loop_record_sites"] == 0  # the spin loop holds no record: the scope is around it


def test_a_routed_moe_gemm_sizes_its_k_loop_from_the_arguments():
    """The K loop's trips come from an argument, so its records are sized per launch, even
    though the blocks that run it are chosen by loaded expert ids (and the others return)."""
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": F32, "sorted_ids_ptr": I32, "expert_ids_ptr": I32,
           "padded_ptr": I32, "N": "i32", "K": "i32", "num_valid": "i32", "stride_am": "i32", "stride_be": "i32",
           "stride_bk": "i32", "stride_cm": "i32"}
    k = proton_lite.compile(U.routed_gemm, sig, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_stages=3)
    assert k.profile["loop_record_sites"] == 2 and k.profile["layout"]["sized_at_launch"]
    assert not k.profile["layout"].get("pool")  # bounded by K: no pool
    ptx = k.asm["ptx"]
    assert ptx.count("ret;") == 1 and ptx.index("// proton_lite: epilogue") < ptx.index("ret;")


def test_paged_decode_s_loop_over_loaded_lengths_records_into_a_pool():
    sig = {"q_ptr": F32, "k_cache_ptr": F32, "v_cache_ptr": F32, "block_table_ptr": I32, "seq_lens_ptr": I32,
           "out_ptr": F32, "scale": "fp32"}
    k = proton_lite.compile(U.paged_decode, sig, {"MAX_BLOCKS": 64, "PAGE": 16, "HEAD_DIM": 128})
    assert k.profile["loop_record_sites"] == 2 and k.profile["records_per_unit_max"] is None
    assert k.profile["layout"]["sized_at_launch"] and k.profile["layout"]["pool"]
