"""proton-lite: intra-kernel instrumentation profiler for Triton kernels.

    with proton_lite.start("matmul"):
        kernel[grid](...)
"""
from proton_lite._layout import ensure_subpackages as _ensure_subpackages

_ensure_subpackages()
__version__ = "0.1.0"

# The public names load their modules at first use, so that `import proton_lite` (and reading
# a capture: decode, trace, summary) never loads Triton; compiling and recording do.
_LAZY = {"compile": "proton_lite.offline_compile", "CompiledKernel": "proton_lite.offline_compile",
         "start": "proton_lite.session", "stop": "proton_lite.session", "active": "proton_lite.session",
         "Session": "proton_lite.session", "SessionOptions": "proton_lite.session",
         "SessionResult": "proton_lite.session_result",
         "load": "proton_lite.analysis", "LoadedProfile": "proton_lite.analysis",
         "merge_profiler_trace": "proton_lite.profiler_merge"}
__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'proton_lite' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
