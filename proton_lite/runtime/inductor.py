"""torch.compile (Inductor) kernels inside a session.

Inductor compiles and launches Triton kernels its own way, and each of these alone keeps
them out of a profile (read from PyTorch 2.11 and Triton 3.6/3.9, docs/design.md §4b):
  1. it calls ``triton.compile`` with options that carry no instrumentation mode;
  2. it compiles in subprocess workers, which see none of this process's hooks;
  3. its static CUDA launcher passes no profile buffer and runs no launch hooks;
  4. warm caches (FX graph, AOTAutograd, autotune) bring back plain binaries with no compile;
  5. a launch is attributed through its JIT function's ``launch_metadata``, which only
     Triton's JIT sets for us.
While a session runs, the bridge therefore sets a few of torch's settings (``SETTINGS``:
Triton's launcher, no graph caches, the post-compile hook that names each compiled kernel's
JIT function), the stage hook forces the session's mode on compiles that carry none
(``stage_hook.force``), and kernels compiled plain (before the session, or by Inductor's
workers in it: ``compile_ended``) are built again instrumented, from their PTX where they
allow it, by their first launch in it; a torch whose dynamo cannot say when a compile ended
compiles in this process instead (``SERIAL``).  At stop every setting is restored, those
kernels get their own launchers back, and kernels compiled inside the session go back to
plain binaries at their first launch after it (no instrumented binary keeps running outside
a session).

Nothing here imports torch: the bridge acts only when the program already has.
"""
from __future__ import annotations

import sys
import threading
import weakref

from proton_lite import compat
from proton_lite.passes import stage_hook
from proton_lite.runtime.inductor_kernels import (_FirstRun, _autotuners_by_module, _compile_workers, _device_of,
                                                  _kernel_name, _live_autotuners, _recompile, _restore, from_plain,
                                                  instrumented_result)

# compile here, where the stage hook is (2): only where dynamo cannot say when a compile ended, so
# that the kernels its workers compiled plain are instrumented from their PTX (``compile_ended``)
SERIAL = ("torch._inductor.config", ("compile_threads", ), 1)
SETTINGS = (  # (config module, names: the first it has is set, value while a session runs)
    ("torch._inductor.config", ("use_static_cuda_launcher", "use_static_triton_launcher"), False),  # Triton's (3)
    # no cache hands back a compiled graph with plain binaries (4); Triton's own disk cache stays
    # (salted while forcing): force_disable_caches would compile every kernel cold, in fresh directories
    ("torch._inductor.config", ("fx_graph_cache", ), False),
    ("torch._inductor.config", ("fx_graph_remote_cache", ), False),
    ("torch._functorch.config", ("enable_autograd_cache", ), False),
    ("torch._inductor.config", ("run_jit_post_compile_hook", ), True),  # each kernel's JIT function (5)
)


TIMING_MODULES = (  # (module, prefix of the functions that time kernels in it)
    ("torch._inductor.runtime.benchmarking", ""),
    ("torch._inductor.codegen.triton", "benchmark"),
    ("torch._inductor.codegen.simd", "benchmark"),
    ("torch._inductor.codegen.cuda_combined_scheduling", "benchmark"),
    ("torch._inductor.scheduler", "benchmark"),
    ("torch._inductor.select_algorithm", "benchmark"),
    ("torch._inductor.autotune_process", "benchmark"),
)


class InductorBridge:
    """Installs and removes what a session needs from Inductor (see the module docstring)."""

    def __init__(self, attach, mark_trials, built=None) -> None:
        self._attach = attach  # ATTACHER.attach: a JIT function's launches become attributable
        self._mark_trials = mark_trials  # a JIT function whose launches may be autotuning trials
        self._built = built  # told the seconds of each kernel built from its plain PTX (CompileTally)
        self._saved: dict[tuple[str, str], object] = {}  # (config module, name) -> the user's value
        self._saved_post_hook = None
        self._post_hook = None
        self._lock = threading.Lock()
        # autotuners compiled before the session and re-instrumented in it: their own state
        self._swapped: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self.compiled: "weakref.WeakSet" = weakref.WeakSet()  # autotuners compiled inside the session
        self._timing_known: set = set()  # autotuner classes and timing modules registered
        self.reinstrumented = 0
        self.failures: dict[str, str] = {}  # kernel name -> why it could not be re-instrumented
        self.from_cpp: dict[str, int] = {}  # kernel name -> compiles kept plain for Inductor's C++ launcher
        self.installed = False
        self.used = False  # installed in this session (torch was in use at start)
        self._pool = None  # threads that compile a graph's other kernels while its first one compiles
        self._builds: dict = {}  # autotuner -> the future of its build on those threads
        self._seen: "weakref.WeakSet" = weakref.WeakSet()  # autotuners looked at (start, each compile's end)
        self._from_workers: "weakref.WeakSet" = weakref.WeakSet()  # compiled plain in the session (compile_ended)
        self._callbacks = None  # dynamo's compile callbacks, where the session compiles in Inductor's workers
        self._compiles_running = 0  # between dynamo's start and end callbacks

    # -- session start ---------------------------------------------------------------------------
    def install(self) -> bool:
        """Take over Inductor's settings; False (nothing done) when torch is not in use."""
        if "torch" not in sys.modules:
            return False
        if compat.inductor_config("torch._inductor.config") is None:  # a torch without Inductor
            return False
        self._callbacks = compat.dynamo_compile_callbacks()
        for module_name, names, value in SETTINGS + (() if self._callbacks is not None else (SERIAL, )):
            config = compat.inductor_config(module_name)
            if config is None:
                continue
            name = next((n for n in names if hasattr(config, n)), None)
            if name is not None:
                self._saved[(module_name, name)] = getattr(config, name)
                setattr(config, name, value)
        self._saved_post_hook = compat.get_knob("runtime", "jit_post_compile_hook")
        previous = self._saved_post_hook

        def jit_post_compile_hook(*args, **kwargs):
            fn = kwargs.get("fn")
            if fn is not None and not hasattr(fn, "jit_function"):  # Inductor passes the JITFunction itself
                self._note_compiled(fn, compat.caller_frame(1))
            return previous(*args, **kwargs) if previous is not None else None

        compat.set_knob("runtime", "jit_post_compile_hook", jit_post_compile_hook)
        self._post_hook = jit_post_compile_hook
        installed = {}  # id(autotuner) -> its stand-in
        groups = _autotuners_by_module()  # a graph's kernels: its wrapper module's globals
        for autotuner in _live_autotuners(groups):
            self._seen.add(autotuner)
            self._note_trials(type(autotuner))
            pending = getattr(autotuner.__dict__.get("run"), "first", None)
            if isinstance(pending, _FirstRun):  # compiled in an earlier session, not launched since
                pending.remove()
                if pending.plain:  # still holds that session's instrumented launchers
                    self.compiled.add(autotuner)
                    continue
            if autotuner.launchers and autotuner not in self._swapped:
                installed[id(autotuner)] = _FirstRun(self, autotuner, plain=False)
                installed[id(autotuner)].install()
        _siblings(installed, groups)
        if self._callbacks is not None:
            self._callbacks.register_start_callback(self.compile_started)
            self._callbacks.register_end_callback(self.compile_ended)
        self.installed = self.used = True
        return True

    def compile_started(self, _args=None) -> None:
        with self._lock:
            self._compiles_running += 1

    def compiling(self) -> bool:
        """Whether dynamo is compiling (on any thread): Inductor then launches kernels only to
        time them (fusions, configs, a C++ wrapper's choice of configs), and those its workers
        compiled are plain binaries, counted as trials rather than as kernels the session missed.
        A plain launch then by a kernel compiled for Inductor's C++ wrapper (``store_cubin``, the
        autotuner among the launching frames) names it for stop, as ``launched_from_cpp`` does for
        those compiled in this process."""
        if self._compiles_running <= 0:
            return False
        frame, depth = compat.caller_frame(1), 0
        while frame is not None and depth < 24:  # compile time: a walk costs nothing
            meta = getattr(frame.f_locals.get("self"), "inductor_meta", None)
            if isinstance(meta, dict):
                if meta.get("store_cubin"):
                    name = meta.get("kernel_name") or "triton kernel"
                    with self._lock:
                        self.from_cpp.setdefault(name, 1)
                break
            frame, depth = frame.f_back, depth + 1
        return True

    def compile_ended(self, _args=None) -> None:
        """Dynamo's callback at the end of a compile (a frame's, or a backward's compiled
        lazily): the kernels Inductor's workers compiled plain in it (they never see the stage
        hook) get the stand-ins of kernels compiled before the session, and their builds from
        the plain PTX begin at once on the compile threads; their first call waits for its own.
        Kernels compiled here (the workers not ready yet) are instrumented already."""
        installed = {}
        with self._lock:
            self._compiles_running = max(0, self._compiles_running - 1)
            if not self.installed:
                return
            groups = _autotuners_by_module()
            for autotuner in _live_autotuners(groups):
                if autotuner in self._seen or not autotuner.launchers:  # (not loaded yet: seen at a later end)
                    continue
                self._seen.add(autotuner)
                self._note_trials(type(autotuner))
                meta = getattr(autotuner, "inductor_meta", None) or {}
                if meta.get("store_cubin"):  # launched from C++: plain, named at stop (launched_from_cpp)
                    name = _kernel_name(autotuner)
                    self.from_cpp[name] = self.from_cpp.get(name, 0) + len(autotuner.launchers)
                elif not all(instrumented_result(r) for r in autotuner.compile_results or ()):
                    installed[id(autotuner)] = _FirstRun(self, autotuner, plain=False)
                    installed[id(autotuner)].install()
                    self._from_workers.add(autotuner)
            _siblings(installed, groups)
        self.prefetch([first.autotuner() for first in installed.values()])

    def _note_compiled(self, fn, frame) -> None:
        """A kernel Inductor compiled in this session: attributable, and its launches checked
        for trials (Inductor times kernels while it compiles: configs, fusions, templates;
        a kernel module it timed is reused for the real kernel of the same source)."""
        self._attach(fn)
        self._mark_trials(fn)
        autotuner = frame.f_locals.get("self") if frame is not None else None
        if autotuner is None or not hasattr(autotuner, "launchers"):
            return
        self._note_trials(type(autotuner))
        self.compiled.add(autotuner)

    def _note_trials(self, autotuner_class) -> None:
        """Launches from its ``bench``, from Inductor's benchmarker and from the functions that
        time fusions and templates while Inductor compiles (a warm-up call comes before the
        benchmarker) are trials."""
        from proton_lite.runtime.trials import add_trial_functions
        if autotuner_class not in self._timing_known:
            self._timing_known.add(autotuner_class)
            add_trial_functions(getattr(autotuner_class, "bench", None))
        for name, prefix in TIMING_MODULES:
            module = sys.modules.get(name)
            if module is not None and name not in self._timing_known:
                self._timing_known.add(name)
                add_trial_functions(*_module_functions(module, prefix))

    def launched_from_cpp(self, kernel_name, count: bool = False) -> bool:
        """Called while a kernel compiles in the session: True when Inductor compiles it for its
        C++ wrapper or AOTInductor (``store_cubin``), which launch the cubin themselves and
        would hand an instrumented kernel a profile buffer of one CTA's size.  Such kernels
        stay plain and are named at stop."""
        frame, depth = compat.caller_frame(1), 0
        while frame is not None and depth < 40:  # compile time: a deep look costs nothing
            if frame.f_code.co_name == "_precompile_config":
                meta = getattr(frame.f_locals.get("self"), "inductor_meta", None) or {}
                if meta.get("store_cubin"):
                    if count:
                        name = meta.get("kernel_name") or kernel_name or "triton kernel"
                        self.from_cpp[name] = self.from_cpp.get(name, 0) + 1
                    return True
                return False
            frame, depth = frame.f_back, depth + 1
        return False

    # -- re-instrumenting kernels compiled before the session -----------------------------------
    def reinstrument(self, autotuner) -> None:
        """Compile the autotuner's configs again (the session's stage hook instruments them) and
        launch those until stop; its own launchers are kept for stop.  Where its graph's first
        kernel queued it on the threads (``prefetch``), that build is waited for, or taken back
        and done here if no thread has begun it."""
        from concurrent.futures import Future
        with self._lock:
            build = self._builds.get(autotuner)
            if build is None or build.cancel():  # none, or one no thread has begun: built here
                build, here = None, Future()
                here.set_running_or_notify_cancel()  # (a caller on another thread waits for it, never cancels it)
                self._builds[autotuner] = here
        if build is not None:
            build.result()
            return
        try:
            self._build(autotuner)
        finally:
            here.set_result(None)

    def prefetch(self, autotuners) -> None:
        """Queue the compiles of ``autotuners`` (a graph's other kernels, still waiting for their
        first call) on threads of their own: a graph's kernels run one after the other in every
        call, so at its first kernel's first call the rest are about to be needed, and their
        compiles (ptxas, Triton's launcher build: processes of their own) overlap.  Measured on
        the H200 host, a compiled stack of 25 kernels (design.md §4b, "Compile time")."""
        workers = _compile_workers()
        if workers < 2:
            return
        with self._lock:
            if not self.installed:
                return
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor
                self._pool = ThreadPoolExecutor(workers, thread_name_prefix="proton_lite-compile")
            for autotuner in autotuners:
                first = getattr(autotuner.__dict__.get("run"), "first", None) if autotuner is not None else None
                if isinstance(first, _FirstRun) and not first.plain and autotuner not in self._swapped \
                        and autotuner not in self._builds:
                    self._builds[autotuner] = self._pool.submit(self._build, autotuner, _device_of(autotuner))

    def _build(self, autotuner, device: int | None = None) -> None:
        """``reinstrument``'s compile, on the calling thread or one of ``prefetch``'s (``device``:
        the GPU whose context Triton loads the binaries into, as on the launching thread)."""
        with self._lock:
            if autotuner in self._swapped or not self.installed:
                return
        name = _kernel_name(autotuner)
        saved = (autotuner.launchers, autotuner.compile_results, autotuner.fn)
        try:
            if device is not None:
                sys.modules["torch"].cuda.set_device(device)
            _recompile(autotuner, saved[0], self._from_plain)
            self._attach(autotuner.fn)  # (built from the PTX: no post-compile hook named it)
            self._mark_trials(autotuner.fn)
        except Exception as e:  # keeps its plain launchers: named at stop
            autotuner.launchers, autotuner.compile_results, autotuner.fn = saved
            with self._lock:
                self.failures[name] = f"{type(e).__name__}: {e}"
            return
        with self._lock:
            self._swapped[autotuner] = (saved, autotuner.launchers)
            self.reinstrumented += 1

    def _from_plain(self, autotuner, launchers):
        return from_plain(autotuner, launchers, stage_hook.forced_mode(), self._built)

    # -- session stop ----------------------------------------------------------------------------
    def uninstall(self) -> None:
        if not self.installed:
            return
        if self._callbacks is not None:
            for remove, callback in ((self._callbacks.remove_start_callback, self.compile_started),
                                     (self._callbacks.remove_end_callback, self.compile_ended)):
                try:
                    remove(callback)
                except ValueError:  # removed by someone else (dynamo's handler.clear())
                    pass
            self._callbacks = None
            self._compiles_running = 0
        if self._pool is not None:  # builds begun finish (and are restored below); queued ones are dropped
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        with self._lock:
            self._builds = {}
            self.installed = False
            for (module_name, name), value in self._saved.items():
                setattr(sys.modules[module_name], name, value)
            self._saved.clear()
            if compat.get_knob("runtime", "jit_post_compile_hook") is self._post_hook:
                compat.set_knob("runtime", "jit_post_compile_hook", self._saved_post_hook)
            for autotuner in _live_autotuners():
                pending = getattr(autotuner.__dict__.get("run"), "first", None)
                if isinstance(pending, _FirstRun):
                    pending.remove()  # never launched in the session
            restored = set()
            for autotuner, (saved, ours) in list(self._swapped.items()):
                if _restore(autotuner, saved, ours):
                    restored.add(id(autotuner))
            self._swapped.clear()
            # plain again at their first launch after stop; those Inductor's workers compiled in the
            # session have their plain binaries back, but for Triton's launcher (Inductor's static one
            # then: compiled again, from Triton's cache)
            for autotuner in {id(a): a for a in [*self.compiled, *self._from_workers]}.values():
                if autotuner.launchers and (id(autotuner) not in restored or autotuner in self._from_workers):
                    _FirstRun(self, autotuner, plain=True).install()
            self.compiled, self._from_workers = weakref.WeakSet(), weakref.WeakSet()

    def warnings(self) -> list[str]:
        lines = []
        if self.from_cpp:
            names = sorted(self.from_cpp)
            lines.append(f"{len(names)} torch.compile kernel(s) compiled in the session for Inductor's C++ wrapper "
                         f"(cpp_wrapper=True or AOTInductor) were kept plain and are not in the profile: "
                         + ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
                         + ". That wrapper launches them itself, without a profile buffer; compile without "
                         "cpp_wrapper to profile them")
        if self.failures:
            names = sorted(self.failures)
            lines.append(f"{len(names)} torch.compile kernel(s) compiled before the session could not be "
                         f"recompiled with instrumentation and ran plain (not in the profile): "
                         + "; ".join(f"{n}: {self.failures[n]}" for n in names[:4])
                         + (f" and {len(names) - 4} more" if len(names) > 4 else ""))
        return lines


def _siblings(installed: dict, groups: list) -> None:
    """Each stand-in learns the other kernels of its graph (``groups``: each module's kernels, a
    wrapper module's being its graph's)."""
    for group in groups:
        mine = [installed[id(a)] for a in group if id(a) in installed]
        for first in mine:
            first.siblings.extend(weakref.ref(other.autotuner()) for other in mine if other is not first)


def _module_functions(module, prefix: str = "") -> list:
    """The functions and methods a module defines whose names start with ``prefix``."""
    if module is None:
        return []
    found = []
    for value in vars(module).values():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        members = vars(value).items() if isinstance(value, type) else ((getattr(value, "__name__", ""), value), )
        for name, member in members:
            if not str(name).startswith(prefix):
                continue
            member = getattr(member, "__func__", member)
            while hasattr(member, "__wrapped__"):
                found.append(member)
                member = member.__wrapped__
            if hasattr(member, "__code__"):
                found.append(member)
    return found
