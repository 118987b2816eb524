"""The Triton, PyTorch and CPython internals that proton_lite relies on, reached in one place.

proton_lite hooks into Triton below its public API (launch hooks, the profile allocator,
the compile pipeline), into torch.compile's Inductor, and walks Python frames.  Such names
change between releases without notice, so the code reaches them only through the
accessors here: a missing one raises ``MissingInternal`` naming it, the installed version
and the supported ones, instead of an AttributeError deep inside a session.  Where the
code tolerates an absence (it falls back), the accessor returns None or its caller catches
the error and falls back as before (the last column below).
Importing this module imports neither Triton nor torch: each accessor imports at its call.

Checked against Triton 3.6.0 (the GPU machine; ``tests/test_compat.py`` runs there too) and
Triton 3.9.0 (the development machine; the newest), PyTorch 2.11 (GPU machine only) and
CPython 3.11 and 3.12.
Every internal below exists in both Triton versions unless its line says otherwise.

  Triton internal                                     used by (proton_lite/...)       if absent
  knobs.compilation.instrumentation_mode              runtime/triton_hooks, exact     error
  knobs.compilation.listener                          runtime/triton_hooks            error
  knobs.runtime.launch_exit_hook (a HookChain)        runtime/triton_hooks            error
  knobs.runtime.jit_cache_hook                        runtime/triton_hooks            error
  knobs.runtime.jit_post_compile_hook                 runtime/inductor                error
  knobs.runtime.add_stages_inspection_hook            passes/stage_hook               error
  knobs.cache.manager_class                           passes/stage_hook               error
  runtime._allocation (_profile_allocator,            runtime/triton_hooks            error
    set_profile_allocator, NullAllocator)
  runtime.build.compile_module_from_src               runtime/fastpath                Python code instead
  runtime.driver (.active.get_current_device,         runtime/cuda_api                cuda-python instead
    .active.utils.is_stream_capturing: 3.9 only)
  runtime.jit.JITFunction                             language, viewer/cli_compile    error
  compiler.ASTSource                                  offline_compile                 error
  experimental.gluon._runtime.GluonASTSource          offline_compile (Gluon only)    error (Gluon kernels)
  backends.compiler.GPUTarget                         offline_compile                 error
  language.str_to_ty                                  viewer/cli_compile              error
  compiler.errors.CompilationError                    viewer/cli_compile              error
  runtime.cache.FileCacheManager                      passes/stage_hook               error
  runtime.cache._base32 (get_cache_manager's key),    passes/stage_hook (rebuild)     Triton's pipeline instead
    compiler.compiler.CompiledKernel (its __init__(src, metadata_group, hash)),
    compiler.compiler.make_backend, backend.parse_options and make_cubin
  _C.libtriton.ir.parse_mlir_module, module.context   passes/unpipeline (ttir stage)   error (pipelined=False)
  _C.libtriton.passes.ttgpuir.add_allocate_warp_groups passes/partitions                no partition names
    (3.9: (pm, consan); 3.6: (pm)), pass_manager.run (3.9: (mod, name); 3.6: (mod))
  runtime.autotuner: Autotuner._bench,                runtime/trials (never imported  trials found by names
    Heuristics.run; runtime.jit: JITFunction.run        here: looked up once loaded)

  PyTorch internal (never imported here; looked up once the program has)
  torch._inductor.config, torch._functorch.config     runtime/inductor (SETTINGS)     setting skipped
  torch._inductor.codecache.PyCodeCache,              runtime/inductor                error once loaded
    torch._inductor.runtime.triton_heuristics.CachingAutotuner
  torch._inductor.metrics.generated_kernel_count      session                         counted as 0
  torch._inductor.runtime.triton_heuristics           runtime/inductor_kernels        Triton's pipeline instead
    .TritonCompileResult(kernel, config, compile_meta, inductor_meta)
  torch._dynamo.callback.callback_handler              runtime/inductor                compile in this process
    (register_/remove_start_callback, register_/remove_end_callback)

  CPython internal
  sys._getframe                                       runtime/launch_info, trials,   error
                                                      inductor

Used in place, as the shapes of objects Triton and Inductor hand to our hooks (the same in
the versions above): the launch metadata ``LazyDict`` (``extras``, ``data``, ``get()``) and
the launcher's frame locals (``launch_metadata`` in 3.9, the second of ``*args`` in 3.6:
runtime/launch_info.py); compiled-kernel metadata fields; the hooks' keyword arguments
(``fn.jit_function``, ``src.fn``); ``JITFunction.launch_metadata``, ``params``,
``arg_names``, ``is_gluon()``; Inductor's ``CachingAutotuner`` attributes and methods
(``launchers``, ``compile_results``, ``fn``, ``_precompile_config``, ``_make_launchers``,
``_reload_kernel``, ``inductor_meta``, ``bench``) and its timing modules
(``inductor.TIMING_MODULES``, looked up by name, skipped when absent).
"""
from __future__ import annotations

import importlib
import os
import sys

SUPPORTED = {"Triton": "3.6.0 and 3.9.x", "PyTorch": "2.11", "Python": "CPython 3.10+"}


class MissingInternal(RuntimeError):
    """An internal that proton_lite relies on is not in the installed Triton, PyTorch or Python."""


def triton_version() -> str:
    try:
        import triton
        return triton.__version__
    except Exception:
        return "unknown"


def _installed(owner: str) -> str:
    if owner == "Triton":
        return f"Triton {triton_version()}"
    if owner == "PyTorch":
        return f"PyTorch {getattr(sys.modules.get('torch'), '__version__', 'unknown')}"
    import platform
    return f"{platform.python_implementation()} {platform.python_version()}"


def missing_internal(internal: str, owner: str = "Triton") -> MissingInternal:
    """The one error for a missing internal: which, the installed version that lacks it, and
    the versions proton_lite supports (``owner``: Triton, PyTorch or Python)."""
    return MissingInternal(f"proton_lite needs {internal}, which {_installed(owner)} lacks; "
                           f"supported: {SUPPORTED[owner]}")


def _internal(module: str, attr: str = "", owner: str = "Triton"):
    """``module.attr`` (``attr`` may be dotted), imported now; MissingInternal when the module or
    the attribute is not there."""
    try:
        obj = importlib.import_module(module)
        for part in attr.split(".") if attr else ():
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise missing_internal(f"{module}.{attr}" if attr else module, owner) from e
    return obj


def _loaded_code(module: str, qualname: str):
    """The code object of ``module.qualname`` when that module is already imported and has it,
    else None (imports nothing)."""
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return getattr(obj, "__code__", None)


# -- Triton's knobs --------------------------------------------------------------------------
KNOBS = frozenset({  # (section, name): triton.knobs.<section>.<name>, read and set by a session
    ("compilation", "instrumentation_mode"),
    ("compilation", "listener"),
    ("runtime", "launch_exit_hook"),
    ("runtime", "jit_cache_hook"),
    ("runtime", "jit_post_compile_hook"),
    ("runtime", "add_stages_inspection_hook"),
    ("cache", "manager_class"),
})


def knob_section(section: str, name: str):
    """``triton.knobs.<section>``, checked to have the knob ``name`` (``KNOBS``): for code that
    also needs to know whether the knob was set explicitly (``vars(section)``)."""
    if (section, name) not in KNOBS:
        raise ValueError(f"triton.knobs.{section}.{name} is not in compat.KNOBS; add it there with the versions "
                         "it was checked against")
    obj = _internal("triton.knobs", section)
    if not hasattr(obj, name):
        raise missing_internal(f"triton.knobs.{section}.{name}")
    return obj


def get_knob(section: str, name: str):
    return getattr(knob_section(section, name), name)


def set_knob(section: str, name: str, value) -> None:
    setattr(knob_section(section, name), name, value)


# -- Triton's runtime ------------------------------------------------------------------------
def get_profile_allocator():
    """The allocator Triton's launcher asks for profile scratch (``_allocation._profile_allocator``)."""
    return _internal("triton.runtime._allocation", "_profile_allocator").get()


def set_profile_allocator(allocator) -> None:
    _internal("triton.runtime._allocation", "set_profile_allocator")(allocator)


def is_default_profile_allocator(allocator) -> bool:
    """True for Triton's own profile allocator (``NullAllocator``: none set)."""
    return isinstance(allocator, _internal("triton.runtime._allocation", "NullAllocator"))


def compile_module_from_src():
    """Triton's C-extension builder, what it builds its own launchers with (runtime/fastpath.py)."""
    return _internal("triton.runtime.build", "compile_module_from_src")


def triton_driver():
    """``triton.runtime.driver``; its ``active`` raises (Triton's own error) without a GPU driver."""
    return _internal("triton.runtime", "driver")


def jit_function_class():
    """The class of ``@triton.jit`` functions."""
    return _internal("triton.runtime.jit", "JITFunction")


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``): ``@triton.jit``
    then gives an ``InterpretedFunction`` and kernels run as Python on the CPU."""
    try:
        return bool(get_knob("runtime", "interpret"))
    except Exception:  # a Triton without the knob: read the variable it reads
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def autotuner_loaded() -> bool:
    """Whether Triton's autotuner is imported (before that, no launch can be one of its trials)."""
    return "triton.runtime.autotuner" in sys.modules


def autotuner_bench_code():
    """The code of ``Autotuner._bench`` (it times configs), or None: not imported, or a Triton
    without it (runtime/trials.py then recognises trials by name)."""
    return _loaded_code("triton.runtime.autotuner", "Autotuner._bench")


def heuristics_run_code():
    """The code of ``Heuristics.run`` (it may sit between a timing call and the JIT), or None."""
    return _loaded_code("triton.runtime.autotuner", "Heuristics.run")


def jit_run_code():
    """The code of ``JITFunction.run`` (the launch's caller sits right above it), or None."""
    return _loaded_code("triton.runtime.jit", "JITFunction.run")


# -- Triton's compiler -----------------------------------------------------------------------
def ast_source_class():
    return _internal("triton.compiler", "ASTSource")


def gluon_ast_source_class():
    """Gluon's AST source (only ``@gluon.jit`` kernels need it)."""
    return _internal("triton.experimental.gluon._runtime", "GluonASTSource")


def gpu_target_class():
    return _internal("triton.backends.compiler", "GPUTarget")


def str_to_ty():
    """Triton's parser of signature type strings (``"*fp32"``, ``"i32"``)."""
    return _internal("triton.language", "str_to_ty")


def compilation_error_class():
    return _internal("triton.compiler.errors", "CompilationError")


def file_cache_manager_class():
    """Triton's default cache manager (``knobs.cache.manager_class`` when none is set)."""
    return _internal("triton.runtime.cache", "FileCacheManager")


def compiled_kernel_class():
    """Triton's ``CompiledKernel``, built from a cache group (runtime/rebuild.py)."""
    return _internal("triton.compiler.compiler", "CompiledKernel")


def make_backend(target):
    """Triton's backend for a ``GPUTarget`` (its ``parse_options`` and ``make_cubin``)."""
    return _internal("triton.compiler.compiler", "make_backend")(target)


def cache_key_path(key: str) -> str:
    """What Triton's ``get_cache_manager`` hands its manager class for ``key``."""
    return _internal("triton.runtime.cache", "_base32")(key)


# -- PyTorch (torch.compile's Inductor): never imported here ---------------------------------
def inductor_config(module: str):
    """A config module of torch's (``torch._inductor.config``, ``torch._functorch.config``), or
    None when this torch has none (the setting is then skipped)."""
    try:
        return importlib.import_module(module)
    except Exception:
        return None


def inductor_kernel_cache():
    """(``PyCodeCache``, ``CachingAutotuner``) when Inductor's modules are loaded, else None: the
    modules Inductor generated, and the class of the kernels they hold as globals."""
    if "torch._inductor.codecache" not in sys.modules or \
            "torch._inductor.runtime.triton_heuristics" not in sys.modules:
        return None
    return (_internal("torch._inductor.codecache", "PyCodeCache", owner="PyTorch"),
            _internal("torch._inductor.runtime.triton_heuristics", "CachingAutotuner", owner="PyTorch"))


def inductor_compile_result_class():
    """Inductor's ``TritonCompileResult`` (a compiled config launched by Triton's launcher), or
    None when its module is not loaded or lacks it."""
    return getattr(sys.modules.get("torch._inductor.runtime.triton_heuristics"), "TritonCompileResult", None)


def dynamo_compile_callbacks():
    """Dynamo's compile callbacks (``register_end_callback``: called when a frame's compile, or
    a backward compiled lazily, ends), or None when ``torch._dynamo`` is not loaded or has none."""
    if "torch._dynamo" not in sys.modules:
        return None
    try:
        handler = importlib.import_module("torch._dynamo.callback").callback_handler
    except Exception:  # noqa: BLE001 - a torch without it: the session compiles in this process
        return None
    needs = ("register_start_callback", "register_end_callback", "remove_start_callback", "remove_end_callback")
    return handler if all(hasattr(handler, n) for n in needs) else None


def inductor_kernels_compiled() -> int:
    """Kernels Inductor generated in this process (its own metrics); 0 when torch was never
    imported or has no such count."""
    metrics = sys.modules.get("torch._inductor.metrics")
    try:
        return int(getattr(metrics, "generated_kernel_count", 0) or 0)
    except (TypeError, ValueError):
        return 0


# -- CPython ---------------------------------------------------------------------------------
def caller_frame(depth: int = 0):
    """The frame ``sys._getframe(depth)`` gives in the function that calls this (0: that
    function's own frame).  ValueError when the stack is less deep, as ``sys._getframe`` raises."""
    try:
        getframe = sys._getframe
    except AttributeError:
        raise missing_internal("sys._getframe", owner="Python") from None
    return getframe(depth + 1)


def parse_module(text: str, like):
    """A Triton MLIR module parsed from ``text`` in the context of module ``like`` (what
    Triton's kernel-override knob does); the next stages read its ``context``."""
    import os
    import tempfile
    ir = _internal("triton._C.libtriton", "ir")
    fd, path = tempfile.mkstemp(suffix=".mlir")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        mod = ir.parse_mlir_module(path, like.context)
    finally:
        os.unlink(path)
    mod.context = like.context
    return mod


def allocate_warp_groups(mod) -> None:
    """Run Triton's warp-group allocation (the first passes of its ``make_llir``) on ``mod``,
    a copy of a kernel's final TTGIR: it writes ``warpGroupStartIds`` on each
    ``ttg.warp_specialize``, the first warp of each partition."""
    ir = _internal("triton._C.libtriton", "ir")
    add = _internal("triton._C.libtriton", "passes.ttgpuir.add_allocate_warp_groups")
    pm = ir.pass_manager(mod.context)
    try:
        add(pm, False)  # 3.9: (pm, consan)
    except TypeError:
        add(pm)  # 3.6
    try:
        pm.run(mod, "proton_lite-partitions")  # 3.9 names the pipeline
    except TypeError:
        pm.run(mod)
