"""Kernels compiled plain, instrumented again from their PTX (passes/from_plain.py,
runtime/rebuild.py): the code, the cubin and the metadata must be those of Triton's pipeline
with the stage hook, for every shape of kernel without scopes.  Real compiles for sm_90 and
the triton wheel's ptxas, no GPU."""
import os

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import fixed_cost_kernels as F
from proton_lite.passes import stage_hook
from proton_lite.passes.config import InstrumentConfig
from proton_lite.runtime.rebuild import PlainKernel, instrumented

TARGET = GPUTarget("cuda", 90, 32)
MODE = InstrumentConfig().to_mode()


@triton.jit
def segment_sums(x_ptr, offsets_ptr, out_ptr, BLOCK: tl.constexpr):
    """A loop bounded by data: each program sums its segment, whose length it reads."""
    seg = tl.program_id(0)
    start = tl.load(offsets_ptr + seg)
    end = tl.load(offsets_ptr + seg + 1)
    acc = tl.zeros([BLOCK], tl.float32)
    i = start
    while i < end:
        cols = i + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + cols, mask=cols < end, other=0.0)
        i += BLOCK
    tl.store(out_ptr + seg, tl.sum(acc, axis=0))


F32 = "*fp32"
SHAPES = {  # name -> (kernel, signature, constants, num_warps)
    "row norm, 8 warps": (F.rms_norm_fwd, {"x_ptr": F32, "w_ptr": F32, "y_ptr": F32, "rstd_ptr": F32, "stride": "i32",
                                           "n_cols": "i32", "eps": "fp32", "BLOCK": "constexpr"}, {"BLOCK": 4096}, 8),
    "gated activation, 16 warps": (F.gated_silu_fwd, {"a_ptr": F32, "b_ptr": F32, "c_ptr": F32, "stride": "i32",
                                                      "scale": "fp32", "n_cols": "constexpr", "BLOCK": "constexpr"},
                                   {"n_cols": 8192, "BLOCK": 8192}, 16),
    "persistent loop": (F.persistent_row_sum, {"x_ptr": F32, "out_ptr": F32, "n_rows": "i32", "n_cols": "i32",
                                               "stride": "i32", "BLOCK": "constexpr"}, {"BLOCK": 1024}, 4),
    "grid-stride tiles": (F.tile_gelu_loop, {"x_ptr": F32, "y_ptr": F32, "out_ptr": F32, "n": "i32", "n_cols": "i32",
                                             "tiles_per_cta": "i32", "TILE": "constexpr"}, {"TILE": 256}, 4),
    "2-D grid backward": (F.grad_weight_2d, {"x_ptr": F32, "dy_ptr": F32, "dw_ptr": F32, "n_rows": "i32",
                                             "n_cols": "i32", "stride": "i32", "ROWS": "constexpr",
                                             "BLOCK": "constexpr"}, {"ROWS": 32, "BLOCK": 256}, 4),
    "loop bounded by data": (segment_sums, {"x_ptr": F32, "offsets_ptr": "*i32", "out_ptr": F32,
                                            "BLOCK": "constexpr"}, {"BLOCK": 512}, 4),
}


def _source(shape):
    kernel, signature, constants, _ = SHAPES[shape]
    return ASTSource(kernel, signature, constants)


def _compile(shape, forced: bool):
    warps = SHAPES[shape][3]
    if not forced:
        return triton.compile(_source(shape), target=TARGET, options=dict(num_warps=warps))
    stage_hook.install()
    stage_hook.force(MODE)
    try:
        return triton.compile(_source(shape), target=TARGET, options=dict(num_warps=warps))
    finally:
        stage_hook.unforce()
        stage_hook.uninstall()


def _metadata(kernel) -> dict:
    md = kernel.metadata._asdict()
    md.pop("hash")
    return md


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_kernel_built_from_its_plain_ptx_is_the_one_tritons_pipeline_builds(cache_dir, shape):
    plain = _compile(shape, forced=False)
    assert getattr(plain.metadata, "proton_lite", None) is None
    builds = []
    rebuilt = instrumented(PlainKernel.of(plain), _source(shape), MODE, builds.append)
    piped = _compile(shape, forced=True)
    assert rebuilt is not None and len(builds) == 1 and builds[0] > 0
    assert rebuilt.metadata.proton_lite["cta_header"] in ("entry", "exit")
    assert rebuilt.asm["ptx"] == piped.asm["ptx"]
    assert rebuilt.asm["cubin"] == piped.asm["cubin"]
    assert _metadata(rebuilt) == _metadata(piped)
    assert rebuilt.hash != plain.hash and rebuilt.src.fn is SHAPES[shape][0]


def test_a_kernel_found_in_tritons_cache_by_its_hash_is_built_alike_and_kept_there(cache_dir):
    """Inductor's static launcher keeps only the kernel's name and hash once loaded: the PTX and
    the metadata are read from Triton's cache (not salted while the session forces its mode); a
    second build is a load from the cache, with no ptxas run."""
    shape = "persistent loop"
    plain = _compile(shape, forced=False)
    static = type("StaticKernel", (), {"name": plain.name, "hash": plain.hash})()
    stage_hook.install()
    stage_hook.force(MODE)  # (as in a session)
    try:
        found = PlainKernel.of(static)
    finally:
        stage_hook.unforce()
        stage_hook.uninstall()
    assert found is not None and found.ptx == plain.asm["ptx"] and found.cubin == plain.asm["cubin"]
    assert found.ttir == plain.asm["ttir"] and found.metadata["name"] == plain.name
    builds = []
    first = instrumented(found, _source(shape), MODE, builds.append)
    second = instrumented(PlainKernel.of(plain), _source(shape), MODE, builds.append)
    assert len(builds) == 1 and second.hash == first.hash and second.asm["cubin"] == first.asm["cubin"]
    assert second.metadata.proton_lite == first.metadata.proton_lite
    ptx = next(p for name, p in plain.metadata_group.items() if name.endswith(".ptx"))
    os.remove(ptx)
    assert PlainKernel.of(static) is None  # its PTX gone: the caller compiles it with Triton's pipeline


def test_kernels_the_ptx_alone_cannot_instrument_are_left_to_tritons_pipeline(cache_dir):
    plain = _compile("row norm, 8 warps", forced=False)
    found = PlainKernel.of(plain)
    left_out = InstrumentConfig(kernels=("nothing_matches", )).to_mode()
    assert instrumented(found, _source("row norm, 8 warps"), left_out) is None  # the mode's kernels= leaves it plain
    split = PlainKernel(found.name, found.hash, found.ptx, found.metadata, found.cubin, found.ttir,
                        found.ttgir + "\n  ttg.warp_specialize(%a) // partitions\n")
    assert instrumented(split, _source("row norm, 8 warps"), MODE) is None  # warp-specialized: its TTGIR module
    done = _compile("row norm, 8 warps", forced=True)
    assert instrumented(PlainKernel.of(done), _source("row norm, 8 warps"), MODE) is None  # instrumented already


class Result:
    """What ``from_plain`` uses of Inductor's compile results (``TritonCompileResult``)."""

    def __init__(self, kernel, config, compile_meta, inductor_meta):
        self.kernel, self.config, self.compile_meta, self.inductor_meta = kernel, config, compile_meta, inductor_meta


def _autotuner(shapes, kind="POINTWISE", meta=None):
    from types import SimpleNamespace
    results = []
    for shape in shapes:
        kernel, signature, constants, _ = SHAPES[shape]
        results.append(Result(_compile(shape, forced=False), object(),
                              {"signature": signature, "constants": constants, "configs": [{}]}, meta or {}))
    fn = SHAPES[shapes[0]][0]
    return SimpleNamespace(fn=fn, heuristic_type=SimpleNamespace(name=kind), inductor_meta=meta or {},
                           compile_results=results, launchers=[SimpleNamespace(config=r.config) for r in results])


def test_an_inductor_kernels_configs_are_built_from_their_plain_binaries(cache_dir, monkeypatch):
    from proton_lite import compat
    from proton_lite.runtime.inductor_kernels import from_plain, instrumented_result
    monkeypatch.setattr(compat, "inductor_compile_result_class", lambda: Result)
    tuner = _autotuner(["row norm, 8 warps"])
    tuner.compile_results.append(Result(_compile("persistent loop", forced=True), object(), {}, {}))
    tuner.launchers.append(type("L", (), {"config": tuner.compile_results[1].config})())
    results = from_plain(tuner, tuner.launchers, MODE)
    assert [instrumented_result(r) for r in results] == [True, True]
    assert results[1] is tuner.compile_results[1]  # instrumented in the session already: kept
    assert results[0].config is tuner.compile_results[0].config and results[0].kernel.src.fn is tuner.fn
    assert results[0].kernel.asm["cubin"] == _compile("row norm, 8 warps", forced=True).asm["cubin"]
    assert from_plain(tuner, tuner.launchers[:1], "") is None  # no session mode
    user = _autotuner(["row norm, 8 warps"], kind="USER_AUTOTUNE")  # a user's kernel may have scopes
    assert from_plain(user, user.launchers, MODE) is None
    cpp = _autotuner(["row norm, 8 warps"], meta={"store_cubin": True})  # launched from C++: stays plain
    assert from_plain(cpp, cpp.launchers, MODE) is None
    monkeypatch.setattr(compat, "inductor_compile_result_class", lambda: None)  # a torch without the class
    assert from_plain(tuner, tuner.launchers, MODE) is None
    monkeypatch.setattr(compat, "inductor_compile_result_class", lambda: Result)

    def missing(target):
        raise compat.missing_internal("triton.compiler.compiler.make_backend")
    monkeypatch.setattr(compat, "make_backend", missing)  # a Triton without it: the pipeline, not a failure
    fresh = _autotuner(["grid-stride tiles"])
    assert from_plain(fresh, fresh.launchers, MODE) is None
