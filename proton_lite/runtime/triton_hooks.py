"""Everything a session installs into Triton (and torch.compile), and takes back at stop.

Installed, in this order, through Triton's own extension points (and, for torch.compile,
torch's settings and its kernel objects: ``runtime/inductor.py``):
  - ``knobs.compilation.instrumentation_mode``: JIT compiles carry the session's mode;
  - the stage hook (``passes/stage_hook.py``);
  - the Inductor bridge, when the program uses torch;
  - the forced mode on compiles that carry none (``stage_hook.force``), except those the
    bridge vetoes (kernels Inductor launches from C++);
  - the profile allocator and the launch-exit hook: the collector's, in C when that builds;
  - on Python 3.12+, ``sys.monitoring`` events on the autotuners' timing functions alone
    (``trials.watch``: a tool id of its own, given back at stop);
  - ``knobs.runtime.jit_cache_hook`` and ``knobs.compilation.listener``: every JIT function
    compiled (by the JIT, or by a direct ``triton.compile``) gets launch metadata that tells
    the exit hook what was launched, and the JIT's compiles are checked for autotuner trials.
At stop each is given back as it was, except that where Triton's default profile allocator
was, the after-stop one stays (``runtime/after_stop.py``).
"""
from __future__ import annotations

import threading

from proton_lite import compat
from proton_lite.passes import stage_hook


class CompileTally:
    """The instrumented compiles a session made (not those Triton's cache answered) and the
    seconds they took, as Triton's compilation listener reports them (its ``times``, summed
    over threads: the bridge's compile threads overlap).  Said at stop when it adds up: the
    first launch of each kernel waited for its compile, so the program's first steps in a
    session are slower by that much (docs/design.md §4b, "Compile time")."""

    def __init__(self) -> None:
        self.compiles, self.seconds = 0, 0.0
        self._lock = threading.Lock()  # compiles of a graph's kernels run on several threads

    def __call__(self, **kwargs) -> None:
        if kwargs.get("cache_hit") or "proton_lite" not in (kwargs.get("metadata") or {}):
            return
        total = getattr(kwargs.get("times"), "total", 0) or 0  # microseconds
        self.add(total / 1e6)

    def add(self, seconds: float) -> None:
        """One instrumented build of ``seconds`` (also those from a plain kernel's PTX, which
        Triton's listener never hears of: runtime/rebuild.py)."""
        with self._lock:
            self.compiles += 1
            self.seconds += seconds


class TritonHooks:
    def __init__(self, collector, mode: str) -> None:
        self.collector, self.mode = collector, mode
        self.fastpath = None  # runtime/fastpath.FastPath when the C hooks are in use
        self.inductor = None  # runtime/inductor.InductorBridge
        self.trial_gate = False  # trials.watch() held: launches walk frames only while a timing function runs
        self.compiled = CompileTally()

    def install(self) -> None:
        from proton_lite.runtime import fastpath
        from proton_lite.runtime.collector import ATTACHER
        from proton_lite.runtime import trials
        from proton_lite.runtime.trials import mark_trials, note_compile
        from proton_lite.runtime.inductor import InductorBridge

        # read before anything changes: a Triton without its profile allocator fails here
        self._saved_allocator = compat.get_profile_allocator()
        self._saved_mode = compat.get_knob("compilation", "instrumentation_mode")
        compat.set_knob("compilation", "instrumentation_mode", self.mode)
        stage_hook.install()
        self.inductor = InductorBridge(ATTACHER.attach, mark_trials, self.compiled.add)
        self.inductor.install()  # only when the program uses torch
        self.collector.compiling = self.inductor.compiling
        # compiles that carry no mode (Inductor's, a direct triton.compile), except those that
        # Inductor launches from C++
        stage_hook.force(self.mode, veto=self.inductor.launched_from_cpp if self.inductor.used else None)
        self.fastpath = fastpath.hooks_for(self.collector)
        self.trial_gate = trials.watch()  # launches walk their frames only while a timing function runs
        fp = self.fastpath
        self._hooks = (fp.allocate, fp.on_launch_exit) if fp is not None else \
            (self.collector.allocate, self.collector.on_launch_exit)
        compat.set_profile_allocator(self._hooks[0])
        compat.get_knob("runtime", "launch_exit_hook").add(self._hooks[1])

        self._saved_jit_cache_hook = previous_cache_hook = compat.get_knob("runtime", "jit_cache_hook")

        def jit_cache_hook(*args, **kwargs):
            fn = kwargs.get("fn")
            if fn is not None:
                ATTACHER.attach(fn.jit_function)
                note_compile(fn.jit_function)
            return previous_cache_hook(*args, **kwargs) if previous_cache_hook is not None else None

        self._jit_cache_hook = jit_cache_hook
        compat.set_knob("runtime", "jit_cache_hook", jit_cache_hook)
        self._saved_listener = previous_listener = compat.get_knob("compilation", "listener")

        tally = self.compiled

        def listener(*args, **kwargs):
            fn = getattr(kwargs.get("src"), "fn", None)
            if fn is not None and hasattr(fn, "launch_metadata"):  # a CompiledKernel launched directly
                ATTACHER.attach(fn)
            tally(**kwargs)
            return previous_listener(*args, **kwargs) if previous_listener is not None else None

        self._listener = listener
        compat.set_knob("compilation", "listener", listener)
        ATTACHER.attach_known()

    def uninstall(self) -> None:
        from proton_lite.runtime import trials
        from proton_lite.runtime.after_stop import AFTER_STOP
        from proton_lite.runtime.collector import ATTACHER

        compat.set_knob("compilation", "instrumentation_mode", self._saved_mode)
        self.inductor.uninstall()
        stage_hook.unforce()
        stage_hook.uninstall()
        # binaries compiled in the session may be launched again from a library's cache: where
        # Triton's default allocator was, one that gives them scratch instead of an error
        # (runtime/after_stop.py); a user's own allocator is restored as it was
        compat.set_profile_allocator(AFTER_STOP if compat.is_default_profile_allocator(self._saved_allocator)
                                     else self._saved_allocator)
        compat.get_knob("runtime", "launch_exit_hook").remove(self._hooks[1])
        trials.unwatch()
        if compat.get_knob("runtime", "jit_cache_hook") is self._jit_cache_hook:
            compat.set_knob("runtime", "jit_cache_hook", self._saved_jit_cache_hook)
        if compat.get_knob("compilation", "listener") is self._listener:
            compat.set_knob("compilation", "listener", self._saved_listener)
        ATTACHER.detach_all()
