"""What kernels call: ``enter_scope``, ``exit_scope`` and ``scope`` (``with`` block or decorator).

Each scope boundary becomes one side-effecting inline-asm *marker* in the Triton IR, but
only when the kernel is compiled with proton_lite's instrumentation mode.  Otherwise the
builtins emit nothing at all, so an annotated kernel compiles to the same code as the
plain one (zero cost when off).  The markers carry the scope name (hex-encoded, so any
printable name survives LLVM's inline-asm syntax) and are replaced by record-writing code
in the PTX pass (``proton_lite.passes``).

Misuse is found before any code is generated, by a structural check of the kernel's
source (``proton_lite.scope_check``), and reported at the offending line.
"""
from __future__ import annotations

import functools
from typing import Any

import triton.language as tl

from proton_lite import compat, scope_check
from proton_lite.markers import INSTRUMENTATION_MODE, MARKER_TAG  # noqa: F401  (re-exported)
from proton_lite.scope_names import validate_scope_name


def instrumentation_enabled(options: Any) -> bool:
    """True when the compile options ask for proton_lite instrumentation, or carry no mode
    while a session forces its own on such compiles (``triton.compile`` called directly, as
    torch.compile does: passes/stage_hook.force)."""
    from proton_lite.passes.stage_hook import forced_mode
    mode = getattr(options, "instrumentation_mode", "") or forced_mode()
    return INSTRUMENTATION_MODE in {m.strip() for m in mode.split(",")}


def marker_asm(kind: str, name: str) -> str:
    """The inline asm of one marker; ``kind`` is ``"enter"`` or ``"exit"``."""
    return f"mov.u32 $0, 0; // {MARKER_TAG} {kind} {name.encode('utf-8').hex()}"


def _unwrap_name(name: Any, fn: str) -> str:
    value = name.value if isinstance(name, tl.constexpr) else name
    if not isinstance(value, str):
        raise TypeError(f"proton_lite: {fn}() needs a compile-time string name (a literal or a "
                        f"tl.constexpr str), got {type(value).__name__} {value!r}; "
                        f"write e.g. {fn}(\"load\")")
    validate_scope_name(value)
    return value


def _emit_marker(kind: str, name: str, _semantic) -> None:
    if _semantic is None or not instrumentation_enabled(_semantic.builder.options):
        return
    tl.inline_asm_elementwise(marker_asm(kind, name), "=r", [], dtype=tl.int32, is_pure=False, pack=1,
                              _semantic=_semantic)


def _check_structure(_generator) -> None:
    if _generator is None:
        return
    constants = {}
    for name, value in getattr(_generator, "lscope", {}).items():
        if isinstance(value, tl.constexpr):
            value = value.value
            if isinstance(value, (bool, int, float, str, type(None))):
                constants[name] = value
    scope_check.check_function(_generator.jit_fn, constants)


def _builtin(fn):
    """``tl.core.builtin`` (its marks copied from Triton's own wrapper), except that under
    Triton's interpreter (``TRITON_INTERPRET=1``, where kernels run as Python and Triton passes
    no ``_semantic`` to other modules' builtins) a call checks its name and does nothing:
    there is no device timeline to mark."""
    @functools.wraps(tl.core.builtin(fn))
    def wrapper(*args, **kwargs):
        if kwargs.get("_semantic") is None:
            if compat.interpreting():
                _unwrap_name(args[0] if args else kwargs.get("name"), fn.__name__)
                return None
            raise ValueError(f"proton_lite: pl.{fn.__name__}() marks a scope inside a @triton.jit kernel; "
                             "it was called outside one")
        return fn(*args, **kwargs)

    return wrapper


@_builtin
def enter_scope(name, _semantic=None, _generator=None):
    """Open scope ``name`` for the calling warp; close it with ``exit_scope(name)``."""
    _check_structure(_generator)
    _emit_marker("enter", _unwrap_name(name, "enter_scope"), _semantic)


@_builtin
def exit_scope(name, _semantic=None, _generator=None):
    """Close scope ``name``, which must be the innermost open scope."""
    _check_structure(_generator)
    _emit_marker("exit", _unwrap_name(name, "exit_scope"), _semantic)


def _unwrap_pipelined(pipelined: Any) -> bool:
    value = pipelined.value if isinstance(pipelined, tl.constexpr) else pipelined
    if not isinstance(value, bool):
        raise TypeError(f"proton_lite: scope(..., pipelined=) takes True or False (a compile-time constant), "
                        f"got {type(value).__name__} {value!r}")
    return value


class _ScopeBlock:
    """The object a ``with pl.scope(name):`` block lowers through (Triton calls enter/exit)."""

    def __init__(self, name: str, semantic, pipelined: bool = True) -> None:
        self._name = name
        self._semantic = semantic
        self._pipelined = pipelined

    def __enter__(self):
        if not self._pipelined:  # passes/unpipeline.py: its loop runs with one stage
            _emit_marker("unpipelined", self._name, self._semantic)
        _emit_marker("enter", self._name, self._semantic)

    def __exit__(self, *exc):
        _emit_marker("exit", self._name, self._semantic)
        return False


class ScopedJITFunction:
    """A ``@triton.jit`` helper whose every call is a scope (made by ``@pl.scope(name)``).

    Triton treats it as a builtin: on a call it emits the enter marker, lets the code
    generator call the wrapped JIT function as usual, then emits the exit marker.
    """

    __triton_builtin__ = True
    # Lets Triton's dependency tracker hash the wrapped helper into the caller's cache
    # key (it skips plain builtins), so editing the helper recompiles its callers.
    __triton_aggregate__ = True

    __annotations__ = {}  # Triton 3.9 hashes an aggregate's annotations

    @property
    def hash_attrs(self):
        return [self.fn]

    def __init__(self, name: str, fn, pipelined: bool = True) -> None:
        self.scope_name = name
        self.fn = fn
        self.pipelined = pipelined
        inner = fn.fn if hasattr(fn, "fn") else fn
        # copy the name only: a __wrapped__ attribute would make Triton inspect the wrapped
        # signature and stop passing _semantic/_generator to __call__
        self.__name__ = getattr(inner, "__name__", "helper")
        self.__qualname__ = getattr(inner, "__qualname__", self.__name__)
        self.__module__ = getattr(inner, "__module__", __name__)
        self.__doc__ = getattr(inner, "__doc__", None)

    @property
    def cache_key(self) -> str:
        return f"proton_lite.scope({self.scope_name!r}, pipelined={self.pipelined})-{self.fn.cache_key}"

    def __call__(self, *args, _semantic=None, _generator=None, **kwargs):
        if _generator is None:
            raise TypeError(f"{self.__name__} is a @triton.jit function decorated with "
                            f"@pl.scope({self.scope_name!r}); call it from inside a @triton.jit kernel")
        if not self.pipelined:
            _emit_marker("unpipelined", self.scope_name, _semantic)
        _emit_marker("enter", self.scope_name, _semantic)
        result = _generator.call_JitFunction(self.fn, list(args), kwargs)
        _emit_marker("exit", self.scope_name, _semantic)
        return result

    def __repr__(self) -> str:
        return f"ScopedJITFunction({self.scope_name!r}, {self.fn!r})"


def scope(name, pipelined=True, _semantic=None, _generator=None):
    """A scope as a ``with`` block inside a kernel, or as a decorator of a ``@triton.jit`` helper.

    ``with pl.scope("load"): ...`` inside a kernel, or::

        @pl.scope("load_tile")
        @triton.jit
        def load_tile(...): ...

    ``pipelined=False``: the loop around the scope is not software-pipelined (one stage,
    as ``tl.range(..., num_stages=1)``), so the loads and dots written inside the scope
    complete inside it and the scope times them, not a wait for copies issued iterations
    earlier. It costs the overlap the pipeliner gave that loop (docs/design.md).
    """
    pipelined = _unwrap_pipelined(pipelined)
    if _semantic is not None:  # `with pl.scope(name):` inside a kernel being compiled
        return _ScopeBlock(_unwrap_name(name, "scope"), _semantic, pipelined)
    return _ScopeOutsideCompile(_unwrap_name(name, "scope"), pipelined)


class _ScopeOutsideCompile:
    """``pl.scope(name)`` called by Python, not by Triton's code generator: a decorator of
    ``@triton.jit`` helpers, or, in a kernel run by Triton's interpreter
    (``TRITON_INTERPRET=1``), a ``with`` block that does nothing (no device timeline there)."""

    def __init__(self, name: str, pipelined: bool) -> None:
        self.name, self.pipelined = name, pipelined

    def __call__(self, fn):
        name = self.name
        if isinstance(fn, compat.jit_function_class()):
            return ScopedJITFunction(name, fn, self.pipelined)
        if compat.interpreting() and type(fn).__name__ == "InterpretedFunction":
            return fn  # the interpreter runs the helper as Python: a scope has nothing to time
        if callable(fn):
            raise TypeError(
                f"@pl.scope({name!r}) must be placed above @triton.jit, not below it:\n"
                f"    @pl.scope({name!r})\n    @triton.jit\n    def {getattr(fn, '__name__', 'helper')}(...): ...")
        raise TypeError(f"@pl.scope({name!r}) decorates @triton.jit functions, got {fn!r}")

    def __enter__(self):
        if not compat.interpreting():
            raise TypeError(f"`with pl.scope({self.name!r}):` marks a scope inside a @triton.jit kernel; "
                            "it ran outside one")
        return None

    def __exit__(self, *exc):
        return False


# `scope` is a plain function (it also runs outside kernels, as a decorator) that Triton
# must still accept as a builtin inside kernels and in its dependency tracker.
scope.__triton_builtin__ = True
