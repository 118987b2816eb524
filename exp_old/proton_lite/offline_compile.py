"""``proton_lite.compile``: build a kernel for a given GPU architecture without a GPU.

(The module is ``offline_compile``, not ``compile``, so that importing it can never put a
module where ``proton_lite.compile``, the function, is looked up.)

Triton compiles for an explicit target and assembles with the ``ptxas`` inside its wheel,
so instrumented code can be inspected (and tested) on any machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton  # the public API (triton.compile); the internals: compat

from proton_lite import compat
from proton_lite.passes import stage_hook
from proton_lite.layout import COPY_SCOPE
from proton_lite.passes.kernel_facts import warn_lost_scopes
from proton_lite.passes.config import InstrumentConfig


@dataclass
class CompiledKernel:
    """The result of ``compile``: code per stage, Triton's metadata and the scope table."""

    name: str
    asm: dict[str, Any]
    metadata: dict[str, Any]
    scopes: list[str]  # the kernel's own (profile["scopes"] is the whole table the records index)
    triton_kernel: Any

    @property
    def profile(self) -> dict | None:
        """proton_lite's metadata entry (layout, scope table), None when not instrumented."""
        return self.metadata.get("proton_lite")


def _metadata_dict(kernel) -> dict:
    md = kernel.metadata
    return dict(md._asdict()) if hasattr(md, "_asdict") else dict(vars(md))


def _divisibility_attrs(kernel, names) -> dict:
    attrs = {}
    for name in names:
        if name not in kernel.arg_names:
            raise ValueError(f"proton_lite.compile: divisible_by_16 names {name!r}, which is not an argument of "
                             f"{kernel.__name__} (its arguments: {', '.join(kernel.arg_names)})")
        attrs[(kernel.arg_names.index(name), )] = [["tt.divisibility", 16]]
    return attrs


def _source_class(kernel):
    """Triton's AST source for the kernel's language: Gluon kernels (``@gluon.jit``) have their own."""
    ast_source = compat.ast_source_class()
    is_gluon = getattr(kernel, "is_gluon", None)
    if callable(is_gluon) and is_gluon():
        return compat.gluon_ast_source_class()
    return ast_source


def compile(kernel, signature: dict[str, str], constexprs: dict[str, Any] | None = None, arch: int = 90,
            instrument: bool = True, num_warps: int = 4, num_stages: int = 3, granularity: str = "auto",
            capacity: int | None = None, loop_capacity: int = 256, buffer_mode: str = "clamp",
            divisible_by_16: tuple[str, ...] | list[str] = (), **options: Any) -> CompiledKernel:
    """Compile ``kernel`` (a ``@triton.jit`` function) for ``sm_<arch>``, instrumented by default.

    ``signature`` maps every argument to a Triton type (``"*fp32"``, ``"i32"``, ...,
    ``"constexpr"`` for constexprs), ``constexprs`` gives the constexpr values (a constexpr
    with a default takes it when not given).
    ``divisible_by_16`` names the arguments to specialize as multiples of 16, as Triton's
    launcher does for an integer or pointer argument whose value is one.  ``granularity``
    "auto" builds what a session builds: a unit per warp with scopes, per CTA without.
    """
    gpu_target = compat.gpu_target_class()

    constexprs = dict(constexprs or {})
    signature = dict(signature)
    for param in getattr(kernel, "params", ()):  # constexprs with a default, as a launch would take them
        if param.is_constexpr and param.has_default and param.name not in constexprs:
            constexprs[param.name] = param.default
    for name in constexprs:
        signature.setdefault(name, "constexpr")
    missing = [a for a in kernel.arg_names if a not in signature]
    if missing:
        raise ValueError(f"proton_lite.compile: signature lacks argument(s) {', '.join(missing)} of "
                         f"{kernel.__name__}; give a type for each, e.g. {{'{missing[0]}': '*fp32'}}")
    opts = dict(num_warps=num_warps, num_stages=num_stages, **options)
    if instrument:
        config = InstrumentConfig(granularity, capacity, loop_capacity, buffer_mode)
        opts["instrumentation_mode"] = config.to_mode()
        stage_hook.install()
    try:
        src = _source_class(kernel)(kernel, signature, constexprs, _divisibility_attrs(kernel, divisible_by_16))
        compiled = triton.compile(src, target=gpu_target("cuda", arch, 32), options=opts)
    finally:
        if instrument:
            stage_hook.uninstall()
    metadata = _metadata_dict(compiled)
    entry = metadata.get("proton_lite")
    warn_lost_scopes(compiled.name, entry)
    # the kernel's own scopes: the scope table's last entry may be the buffer copies' (COPY_SCOPE)
    scopes = [s for s in entry["scopes"] if s != COPY_SCOPE] if entry else []
    return CompiledKernel(compiled.name, dict(compiled.asm), metadata, scopes, compiled)
