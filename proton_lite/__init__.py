"""proton-lite: intra-kernel instrumentation profiler for Triton kernels.

    with proton_lite.start("matmul"):
        kernel[grid](...)
"""
from proton_lite._layout import ensure_subpackages as _ensure_subpackages

_ensure_subpackages()
__version__ = "0.1.0"

from proton_lite.compile import CompiledKernel, compile  # noqa: E402,F401  (shadows builtins.compile on purpose)
from proton_lite.session import Session, SessionOptions, SessionResult, active, start, stop  # noqa: E402,F401
