"""proton_lite/compat.py: every internal it reaches resolves on the installed Triton (and
PyTorch, where installed), a missing one is named with the installed and supported versions,
and the absences the code tolerates stay tolerated.  Real lookups, no stand-ins."""
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from proton_lite import compat

ROOT = Path(__file__).resolve().parent.parent


def test_importing_compat_imports_no_triton_and_no_torch():
    probe = ("import sys, json\nimport proton_lite.compat\n"
             "print(json.dumps([m for m in ('triton', 'torch', 'cuda') if m in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_every_knob_resolves_and_can_be_set():
    from triton import knobs
    for section, name in compat.KNOBS:
        assert compat.knob_section(section, name) is getattr(knobs, section)
        compat.get_knob(section, name)  # raises when this Triton lacks it
    chain = compat.get_knob("runtime", "launch_exit_hook")
    assert callable(chain.add) and callable(chain.remove)
    saved = compat.get_knob("compilation", "instrumentation_mode")
    try:
        compat.set_knob("compilation", "instrumentation_mode", "proton_lite-compat-test")
        assert knobs.compilation.instrumentation_mode == "proton_lite-compat-test"
    finally:
        knobs.compilation.instrumentation_mode = saved
    with pytest.raises(ValueError, match="not in compat.KNOBS"):
        compat.get_knob("runtime", "launch_enter_hook")  # not one we rely on: listed first


def test_the_profile_allocator_accessors_reach_triton_s():
    from triton.runtime import _allocation
    saved = compat.get_profile_allocator()

    def mine(size, alignment, stream):
        return 0

    try:
        compat.set_profile_allocator(mine)
        assert compat.get_profile_allocator() is mine is _allocation._profile_allocator.get()
    finally:
        compat.set_profile_allocator(saved)
    assert compat.get_profile_allocator() is saved
    assert compat.is_default_profile_allocator(_allocation.NullAllocator())
    assert not compat.is_default_profile_allocator(mine)


def test_every_runtime_and_compiler_accessor_resolves():
    import triton
    import triton.language as tl
    import triton.runtime.build
    import triton.runtime.cache

    assert compat.compile_module_from_src() is triton.runtime.build.compile_module_from_src
    assert "active" in dir(type(compat.triton_driver()))  # evaluated only where a GPU driver is

    @triton.jit
    def kernel(x):
        pass

    assert isinstance(kernel, compat.jit_function_class())
    assert isinstance(compat.gpu_target_class()("cuda", 90, 32).arch, int)
    assert issubclass(compat.gluon_ast_source_class(), compat.ast_source_class())
    src = compat.ast_source_class()(kernel, {"x": "*fp32"}, {})
    assert src.fn is kernel
    ty = compat.str_to_ty()("*fp32", None)
    assert ty.is_ptr() and ty.element_ty == tl.float32
    with pytest.raises(Exception):
        compat.str_to_ty()("no_such_type", None)
    assert issubclass(compat.compilation_error_class(), Exception)
    assert issubclass(compat.file_cache_manager_class(), triton.runtime.cache.CacheManager)


def test_the_autotuner_codes_are_found_once_triton_s_autotuner_is_loaded():
    import triton.runtime.autotuner as autotuner  # what a program that autotunes has imported
    import triton.runtime.jit as jit

    assert compat.autotuner_loaded()
    bench, heuristics, jit_run = compat.autotuner_bench_code(), compat.heuristics_run_code(), compat.jit_run_code()
    assert isinstance(bench, types.CodeType) and bench is autotuner.Autotuner._bench.__code__
    assert heuristics is autotuner.Heuristics.run.__code__ and jit_run is jit.JITFunction.run.__code__


def test_a_missing_internal_is_named_with_the_installed_and_the_supported_triton():
    import triton
    with pytest.raises(compat.MissingInternal) as e:
        compat._internal("triton.knobs", "runtime.no_such_hook")
    assert str(e.value) == (f"proton_lite needs triton.knobs.runtime.no_such_hook, which Triton {triton.__version__} "
                            "lacks; supported: 3.6.0 and 3.9.x")
    assert isinstance(e.value, RuntimeError) and isinstance(e.value.__cause__, AttributeError)
    with pytest.raises(compat.MissingInternal, match=r"needs triton\.no_such_module\.thing, which Triton "):
        compat._internal("triton.no_such_module", "thing")


def test_a_knob_this_triton_lacks_is_named(monkeypatch):
    import triton
    monkeypatch.setattr(compat, "KNOBS", compat.KNOBS | {("runtime", "no_such_hook")})
    with pytest.raises(compat.MissingInternal, match=rf"triton\.knobs\.runtime\.no_such_hook, which Triton "
                       rf"{triton.__version__} lacks"):
        compat.set_knob("runtime", "no_such_hook", None)


def test_caller_frame_is_sys_getframe_seen_from_the_caller():
    def here():
        return compat.caller_frame(0), sys._getframe(0), compat.caller_frame(1), sys._getframe(1)

    mine, theirs, up, up_theirs = here()
    assert mine is theirs and up is up_theirs and up.f_code is test_caller_frame_is_sys_getframe_seen_from_the_caller \
        .__code__
    with pytest.raises(ValueError):
        compat.caller_frame(100_000)
    getframe = sys._getframe
    del sys._getframe  # an interpreter without it
    try:
        try:
            compat.caller_frame(0)
            error = None
        except compat.MissingInternal as e:
            error = e
    finally:
        sys._getframe = getframe
    assert error is not None and str(error).startswith("proton_lite needs sys._getframe, which ")
    assert str(error).endswith("lacks; supported: CPython 3.10+")


def test_absences_the_code_tolerates_stay_tolerated(monkeypatch):
    """A module not loaded, a Triton without Autotuner._bench, a torch without a config
    module, a Triton without its C builder: None, a count of 0, or the Python hooks."""
    assert compat._loaded_code("proton_lite_no_such_module", "Autotuner._bench") is None
    assert compat._loaded_code("triton.runtime.jit", "JITFunction.no_such_method") is None
    assert compat.inductor_config("torch._no_such_config") is None
    assert isinstance(compat.inductor_kernels_compiled(), int)
    if "torch._inductor.codecache" not in sys.modules:
        assert compat.inductor_kernel_cache() is None

    import triton.runtime.build

    from proton_lite.runtime import fastpath
    monkeypatch.delattr(triton.runtime.build, "compile_module_from_src")
    monkeypatch.setattr(fastpath, "_module", None)
    monkeypatch.setattr(fastpath, "_build_error", None)
    assert fastpath.module() is None  # the session uses the Python hooks
    assert "triton.runtime.build.compile_module_from_src" in fastpath.build_error()


def test_the_pytorch_internals_resolve_where_torch_is_installed():
    pytest.importorskip("torch")
    import torch._inductor.codecache as codecache  # loaded by any program that uses torch.compile
    import torch._inductor.runtime.triton_heuristics as heuristics

    from proton_lite.runtime.inductor import SETTINGS
    cache, autotuner_class = compat.inductor_kernel_cache()
    assert cache is codecache.PyCodeCache and autotuner_class is heuristics.CachingAutotuner
    for module, names, _ in SETTINGS:
        config = compat.inductor_config(module)
        assert config is not None and any(hasattr(config, n) for n in names), (module, names)
