"""Inductor's kernels compiled before a session (or inside one): found in the modules Inductor
loaded, compiled again at their first call (a graph's other kernels on threads meanwhile), and
given their own launchers back at stop (``InductorBridge`` in ``inductor.py`` decides when)."""
from __future__ import annotations

import sys
import types
import weakref
from typing import TYPE_CHECKING

from proton_lite import compat

if TYPE_CHECKING:
    from proton_lite.runtime.inductor import InductorBridge


class _FirstRun:
    """Stands in for an autotuner's ``run`` and ``precompile`` until either is called: swaps
    its launchers (instrumented in a session, ``plain`` after one), removes itself, and
    calls through.  ``precompile`` too: Inductor reuses a kernel module it loaded before
    (same source) and precompiles it again, which must not find static launchers in a
    session (Inductor asserts the static launcher is on then)."""

    METHODS = ("run", "precompile")

    def __init__(self, bridge: InductorBridge, autotuner, plain: bool) -> None:
        self.bridge, self.autotuner, self.plain = bridge, weakref.ref(autotuner), plain
        self.siblings: list = []  # weak references to the other kernels of its graph (InductorBridge.prefetch)

    def install(self) -> None:
        autotuner = self.autotuner()
        for method in self.METHODS:
            setattr(autotuner, method, _Call(self, method))

    def remove(self) -> bool:
        """Take the stand-ins away; False when another call already did."""
        autotuner = self.autotuner()
        mine = autotuner is not None and getattr(autotuner.__dict__.get("run"), "first", None) is self
        if mine:
            for method in self.METHODS:
                autotuner.__dict__.pop(method, None)
        return mine

    def call(self, method: str, args, kwargs):
        autotuner = self.autotuner()
        if self.remove():
            if self.plain:
                _to_plain(autotuner)
            else:
                self.bridge.prefetch([ref() for ref in self.siblings])
                self.bridge.reinstrument(autotuner)
        return getattr(autotuner, method)(*args, **kwargs)


class _Call:
    __slots__ = ("first", "method")

    def __init__(self, first: _FirstRun, method: str) -> None:
        self.first, self.method = first, method

    def __call__(self, *args, **kwargs):
        return self.first.call(self.method, args, kwargs)


def _recompile(autotuner, launchers, rebuild=None) -> None:
    """New launchers for the configs of ``launchers``: ``rebuild(autotuner, launchers)``'s compile
    results where it gives them (``from_plain``), else compiled now through Inductor's own path."""
    results = rebuild(autotuner, launchers) if rebuild is not None else None
    if results is None:
        if getattr(autotuner.fn, "fn", None) is None:  # compiled in a worker: its source is reloaded here
            reload = getattr(autotuner, "_reload_kernel", None)
            if reload is None:
                raise RuntimeError("its JIT function was not kept and cannot be reloaded")
            autotuner.fn = reload().fn
        autotuner.compile_results = []  # (compiles here are not configs added for autotuning: _note_compiled)
        results = [autotuner._precompile_config(launcher.config) for launcher in launchers]
    autotuner.compile_results = results
    autotuner.launchers = []
    autotuner._make_launchers()


def from_plain(autotuner, launchers, mode: str, built=None) -> list | None:
    """The compile results of ``launchers``' configs, instrumented in ``mode`` from their plain
    binaries (runtime/rebuild.py: the pass and ptxas, not Triton's pipeline again); None where
    one cannot be, and the caller compiles them through Triton's pipeline: a kernel the user
    wrote (it may have scopes, which a plain compile drops), one launched from C++
    (``store_cubin``), a binary whose PTX is gone from Triton's cache, a torch this does not know."""
    from proton_lite.runtime.rebuild import PlainKernel, instrumented
    result_class = compat.inductor_compile_result_class()
    kind = getattr(getattr(autotuner, "heuristic_type", None), "name", "")
    if result_class is None or not mode or (getattr(autotuner, "inductor_meta", None) or {}).get("store_cubin") \
            or str(kind).upper() == "USER_AUTOTUNE":
        return None
    by_config = {id(result.config): result for result in getattr(autotuner, "compile_results", None) or ()}
    results = []
    try:
        for launcher in launchers:
            plain = by_config.get(id(launcher.config))
            if plain is None:
                return None
            if instrumented_result(plain):  # compiled in the session in this process (Triton's pipeline)
                results.append(plain)
                continue
            found = PlainKernel.of(plain.kernel)
            meta = plain.compile_meta
            src = compat.ast_source_class()(autotuner.fn, meta["signature"], meta["constants"], meta["configs"][0])
            kernel = instrumented(found, src, mode, built) if found is not None else None
            if kernel is None:
                return None
            results.append(result_class(kernel, plain.config, meta, plain.inductor_meta))
    except (KeyError, AttributeError, TypeError, IndexError, OSError, ValueError, compat.MissingInternal):
        return None  # a shape or a version this does not know: Triton's pipeline
    return results


def instrumented_result(result) -> bool:
    """Whether an Inductor compile result holds an instrumented binary."""
    return "proton_lite" in getattr(getattr(getattr(result, "kernel", None), "metadata", None), "_fields", ())


def _restore(autotuner, saved, ours) -> bool:
    """Its own launchers back; when it chose a config in the session, that config's own one.
    False when a launcher of a config it found in the session (coordinate descent) stays."""
    launchers, compile_results, fn = saved
    if autotuner.launchers is not ours:
        by_config = {id(launcher.config): launcher for launcher in launchers}
        chosen = autotuner.launchers
        launchers = [by_config.get(id(launcher.config), launcher) for launcher in chosen]
        if any(id(launcher.config) not in by_config for launcher in chosen):
            autotuner.launchers, autotuner.fn = launchers, fn
            return False
    autotuner.launchers, autotuner.compile_results, autotuner.fn = launchers, compile_results, fn
    return True


def _to_plain(autotuner) -> None:
    """A kernel compiled in a session, at its first launch after it: its chosen configs
    compiled plain (outside a session: Triton's cache and Inductor's static launcher apply)."""
    try:
        _recompile(autotuner, list(autotuner.launchers))
    except Exception as e:  # keeps the instrumented launchers; the after-stop allocator serves them
        import warnings

        from proton_lite.passes.kernel_facts import ProtonLiteWarning
        warnings.warn(f"proton_lite: {_kernel_name(autotuner)} (compiled in a profiling session) could not be "
                      f"compiled plain again after it and keeps its instrumented binary: {type(e).__name__}: {e}",
                      ProtonLiteWarning, stacklevel=3)


def _autotuners_by_module() -> list[list]:
    """Inductor's kernels in each module it has loaded (a graph's wrapper module holds all its
    kernels as globals, a kernel's own module just that one), without importing anything."""
    internals = compat.inductor_kernel_cache()
    if internals is None:
        return []
    cache, autotuner_class = internals
    modules = list(getattr(cache, "modules", ())) + list(getattr(cache, "modules_no_attr", {}).values())
    groups = []
    for module in modules:
        if isinstance(module, types.ModuleType):
            found = {id(v): v for v in list(vars(module).values()) if isinstance(v, autotuner_class)}
            if found:
                groups.append(list(found.values()))
    return groups


def _live_autotuners(groups: list | None = None) -> list:
    """Inductor's kernels in the modules it has loaded (``groups``, where the caller has them
    already from ``_autotuners_by_module``), each once."""
    found, seen = [], set()
    for group in _autotuners_by_module() if groups is None else groups:
        for autotuner in group:
            if id(autotuner) not in seen:
                seen.add(id(autotuner))
                found.append(autotuner)
    return found


def _compile_workers() -> int:
    """Threads for ``InductorBridge.prefetch``: the cores this process may run on, at most 8
    (each compile holds the GIL in Triton's passes; what overlaps is its ptxas and C compiler runs)."""
    from proton_lite.stop_threads import usable_cores
    return min(usable_cores(), 8)


def _device_of(autotuner) -> int | None:
    """The CUDA device an autotuner's binaries are loaded on: its own, else the launching
    thread's current one (a new thread's would be device 0)."""
    index = getattr(getattr(autotuner, "device_props", None), "index", None)
    if index is not None:
        return int(index)
    try:
        return int(sys.modules["torch"].cuda.current_device())
    except Exception:  # noqa: BLE001 - no CUDA here: the build finds out itself
        return None


def _kernel_name(autotuner) -> str:
    meta = getattr(autotuner, "inductor_meta", {}) or {}
    return meta.get("kernel_name") or getattr(getattr(autotuner, "fn", None), "__name__", "triton kernel")
