"""Which launches are autotuning trials: the timing runs of Triton's autotuner and of
Inductor's (configs, fusions, templates), left out of a profile and counted.

A launch is a trial when a timing function (or one nested in it) is a few frames above its
exit hook.  Walking frames costs a few µs, so only JIT functions that may have trials pay
it: those compiled while an autotuner timed configs (``note_compile``: every config an
autotuner tries compiles inside its first timing run) and those a caller marks
(``mark_trials``: every Inductor kernel, whose module Inductor may time and reuse).

Even they walk only while a timing function runs on the launching thread: on Python 3.12+
a session watches the timing functions' code (``watch``, ``sys.monitoring``'s local start
and return events, on those codes alone) and keeps, per thread, how many of their frames run
(``_GATE``); a launch on a thread with none is no trial without a walk (an Inductor
launch's walk materialised ~12 frame objects: 2-3.5 µs of the 5-10 µs a session added,
2026-11-28, ``tests/benchmarks/inductor_launch_parts.py``).
"""
from __future__ import annotations

import inspect
import sys
import threading
import types

from proton_lite import compat

_trial_codes: frozenset | None = None  # id() of code objects: hashing a code object hashes its contents
_extra_trial_codes: set[int] = set()  # ... of other autotuners' timing functions (add_trial_functions)
# id() of JIT functions compiled while an autotuner benchmark ran (ids: JITFunction's own hash
# is costly); kept across sessions, as Triton keeps their compiled variants
_AUTOTUNED: set[int] = set()
# ... of those among them compiled by the benchmark itself, not by the config it times: the
# kernels behind its cache flush and argument resets (torch's own kernels, unless a library
# such as FlagGems gives torch's ops Triton kernels); their launches are trials wherever the
# benchmark is on the stack, whoever called JITFunction.run
_TUNER_HELPERS: set[int] = set()
# ... and the functions themselves, so that no id in those sets is ever reused by another
# object (a JIT function of a library lives as long as the process anyway; a collected one's
# id given to a new function made that function look autotuned)
_KEPT: list = []
_BENCH_CODE = 0  # id() of Autotuner._bench's own code, once known (0: none)
_KEEP_CODES: list = []  # the code objects added by add_trial_functions
_TUNER_CODES: list = []  # Autotuner._bench's code objects, once _trial_codes is known (the gate watches
# them and _KEEP_CODES: every code object whose id is in _trial_codes)


class _CapturedTrial:
    """What a launch captured into an autotuner benchmark's CUDA graph leaves for its exit
    hook (Triton's ``do_bench_cudagraph`` captures a config's timing runs and replays them
    hundreds of times): it ran on scratch nobody reads, got no copy node, and is counted as
    one trial; its replays are not launches of the program."""

    __slots__ = ()


CAPTURED_TRIAL = _CapturedTrial()


def note_compile(jit_fn) -> None:
    """Called when a JIT function compiles (the session's jit_cache_hook): if Triton's
    autotuner is timing configs right now, its launches may be trials from now on.  Every
    config an autotuner tries compiles inside its first timing run, so this sees them all."""
    if jit_fn is None or id(jit_fn) in _AUTOTUNED or not _know_trial_codes():
        return
    frame, depth = compat.caller_frame(1), 0
    while frame is not None and depth < 40:  # compile time: a deep walk costs nothing here
        code = frame.f_code
        if id(code) in _trial_codes or (not _trial_codes and _named_like_a_trial(code)):
            _AUTOTUNED.add(id(jit_fn))
            _KEPT.append(jit_fn)
            if id(code) == _BENCH_CODE:  # not inside the config's kernel_call
                _TUNER_HELPERS.add(id(jit_fn))
            return
        frame, depth = frame.f_back, depth + 1


def add_trial_functions(*functions) -> None:
    """Other autotuners' timing functions (Inductor's ``CachingAutotuner.bench``, its
    benchmarker): a launch with one of them, or a function nested in one, on the stack is a
    timing trial."""
    global _trial_codes
    found: dict[int, types.CodeType] = {}

    def add(code) -> None:
        if id(code) not in found:
            found[id(code)] = code
            for const in code.co_consts:
                if isinstance(const, types.CodeType):
                    add(const)

    for function in functions:
        function = getattr(function, "__func__", function)
        code = getattr(function, "__code__", None)
        if code is not None:
            add(code)
    # an id stays unique only while its code object lives: each is kept once
    _KEEP_CODES.extend(c for i, c in found.items() if i not in _extra_trial_codes)
    _extra_trial_codes.update(found)
    if _trial_codes is not None:
        _trial_codes = _trial_codes | frozenset(found)
        _watch_codes()


def mark_trials(jit_fn) -> None:
    """Launches of ``jit_fn`` may be autotuning trials from now on (checked by frames)."""
    if id(jit_fn) not in _AUTOTUNED:
        _AUTOTUNED.add(id(jit_fn))
        _KEPT.append(jit_fn)


def _autotuner_trial_codes() -> list:
    """The code of Triton's ``Autotuner._bench`` and the functions nested in it (its
    ``kernel_call``): a launch with one of them on the stack is a timing trial."""
    code = compat.autotuner_bench_code()
    if code is None:
        return []
    return [c for c in (code, *code.co_consts) if isinstance(c, types.CodeType)]


def _named_like_a_trial(code) -> bool:
    """For a Triton whose Autotuner has no ``_bench``: its benchmark, recognised by name."""
    return code.co_name in ("_bench", "do_bench") and "autotuner" in code.co_filename


_JIT_RUN = None  # JITFunction.run's code: the launch's caller sits right above it
_WRAPPERS: frozenset = frozenset()  # id() of codes that may sit between kernel_call and JITFunction.run


def _know_trial_codes() -> bool:
    """Look up the code objects the trial checks compare with, once Triton's autotuner is
    imported; False before that (no launch can be a trial then)."""
    global _trial_codes, _JIT_RUN, _WRAPPERS, _BENCH_CODE
    if _trial_codes is None:
        if not compat.autotuner_loaded():
            return False
        _TUNER_CODES[:] = _autotuner_trial_codes()
        _trial_codes = frozenset(id(c) for c in _TUNER_CODES) | frozenset(_extra_trial_codes)
        _watch_codes()
        bench = compat.autotuner_bench_code()
        _BENCH_CODE = id(bench) if bench is not None else 0
        _JIT_RUN = compat.jit_run_code()
        _WRAPPERS = frozenset(id(c) for c in (compat.heuristics_run_code(), ) if c)
    return True


def _in_autotuner_benchmark(jit_fn_id: int = 0, helper: bool = False) -> bool:
    """True while Triton's autotuner times its candidate configs (their launches are trials),
    and for a tuner's helper kernel (``_TUNER_HELPERS``, or any kernel with ``helper``) while
    its benchmark runs."""
    if not _know_trial_codes():
        return False
    if _trial_codes:  # compare code objects a few frames up (kernel_call is 4 above the hook,
        # 5 through Triton's Heuristics; Inductor's benchmarker up to 8)
        gate = _GATE
        if gate is not None and threading.get_ident() not in gate:
            return False  # no timing function runs on this thread
        global PY_WALKS
        PY_WALKS += 1
        found = _walk_finds_trial(jit_fn_id, helper)
        if not found and gate is not None:
            recount_thread()  # counted, yet none near: one left by an exception
        return found
    frame, depth = compat.caller_frame(2), 0  # a Triton without Autotuner._bench: go by names
    while frame is not None and depth < 16:
        depth += 1
        if _named_like_a_trial(frame.f_code):
            return True
        frame = frame.f_back
    return False


def _walk_finds_trial(jit_fn_id: int, helper: bool) -> bool:
    """A timing function's code within 12 frames of the exit hook (three calls up from here)."""
    frame, depth = compat.caller_frame(3), 0
    while frame is not None and depth < 12:
        code = frame.f_code
        if id(code) in _trial_codes:
            return True
        if code is _JIT_RUN:  # the caller of JITFunction.run decides: kernel_call or not
            caller = frame.f_back
            while caller is not None and id(caller.f_code) in _WRAPPERS:
                caller = caller.f_back
            if caller is not None and id(caller.f_code) in _trial_codes:
                return True
            if not helper and jit_fn_id not in _TUNER_HELPERS:  # a user's launch: stop here
                return False
            frame, depth = caller, depth + 1  # a helper: a flush or reset, a few frames below _bench
            continue
        frame, depth = frame.f_back, depth + 1
    return False


# -- the gate: which threads run a timing function now (Python 3.12+) ----------------------
_GATE: dict | None = None  # thread ident -> timing frames running on it (absent: none); None: no gate
_TOOL: int | None = None  # the sys.monitoring tool id held while watching
_WATCHED: dict = {}  # id() -> code object, of the codes whose events are set
_TOOL_IDS = (3, 4)  # not the debugger's, coverage's, profiler's or optimizer's (0, 1, 2, 5)
_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
# Held while the gate changes: a recount from the frames must not lose a start another thread
# reports meanwhile (a start waiting here is on its thread's stack already, so it is counted
# twice: too many only makes launches walk).  Reentrant: a finalizer may run anywhere.
_GATE_LOCK = threading.RLock()
PY_WALKS = 0  # launches whose frames the Python hooks walked for trials (the C hook counts its own)


def _entered(code, offset) -> None:  # PY_START, PY_RESUME
    with _GATE_LOCK:
        gate = _GATE
        if gate is not None:
            t = threading.get_ident()
            gate[t] = gate.get(t, 0) + 1


def _left(code, offset, value) -> None:  # PY_RETURN, PY_YIELD
    with _GATE_LOCK:
        gate = _GATE
        if gate is not None:
            t = threading.get_ident()
            n = gate.get(t, 0) - 1
            if n > 0:
                gate[t] = n
            else:
                gate.pop(t, None)


def watch() -> bool:
    """Keep count of the timing functions' frames per thread while a session runs (False: this
    Python has no ``sys.monitoring``, or its tool ids are taken; every check then walks).
    A frame that ends by an exception is not seen leaving, nor is a generator (see
    ``_watch_codes``): its thread stays counted (its launches walk) until a walk finds no
    timing frame and ``recount_thread`` sets it right."""
    global _GATE, _TOOL
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None or _TOOL is not None:
        return _TOOL is not None
    for tool in _TOOL_IDS:
        try:
            monitoring.use_tool_id(tool, "proton-lite trials")
        except ValueError:  # another tool holds it
            continue
        _TOOL = tool
        break
    else:
        return False
    events = monitoring.events
    monitoring.register_callback(_TOOL, events.PY_START, _entered)
    monitoring.register_callback(_TOOL, events.PY_RESUME, _entered)
    monitoring.register_callback(_TOOL, events.PY_RETURN, _left)
    monitoring.register_callback(_TOOL, events.PY_YIELD, _left)
    _GATE = {}
    _watch_codes()
    return True


def unwatch() -> None:
    """Stop counting (at a session's stop): the codes' events off, the tool id given back."""
    global _GATE, _TOOL
    if _TOOL is None:
        return
    monitoring = sys.monitoring
    _GATE = None
    for code in _WATCHED.values():  # (freeing the id turns no event off before Python 3.14)
        monitoring.set_local_events(_TOOL, code, 0)
    _WATCHED.clear()
    for event in ("PY_START", "PY_RESUME", "PY_RETURN", "PY_YIELD"):
        monitoring.register_callback(_TOOL, getattr(monitoring.events, event), None)
    monitoring.free_tool_id(_TOOL)
    _TOOL = None


def _watch_codes() -> None:
    """Set the events of codes not watched yet, then count every thread's timing frames afresh
    (a newly watched function may be running: its start was not seen, its return will be)."""
    if _TOOL is None or _GATE is None or _trial_codes is None:
        return
    monitoring = sys.monitoring
    events = monitoring.events
    mask = events.PY_START | events.PY_RESUME | events.PY_RETURN | events.PY_YIELD
    added = False
    for code in (*_TUNER_CODES, *_KEEP_CODES):
        if id(code) not in _WATCHED:
            # a generator resumed by throw() reports no resume (PY_THROW is no local event),
            # so its next yield would count one frame too few: generators only count up,
            # and a walk that finds none recounts
            gen = code.co_flags & _GENERATOR_FLAGS
            monitoring.set_local_events(_TOOL, code, events.PY_START | events.PY_RESUME if gen else mask)
            _WATCHED[id(code)] = code
            added = True
    if added:
        with _GATE_LOCK:
            counts = {t: _timing_frames(f) for t, f in sys._current_frames().items()}
            _GATE.clear()
            _GATE.update((t, n) for t, n in counts.items() if n)


def _timing_frames(frame) -> int:
    n = 0
    while frame is not None:
        n += id(frame.f_code) in _WATCHED
        frame = frame.f_back
    return n


def recount_thread() -> None:
    """The calling thread's timing frames counted on its stack (the exit hooks call this when
    a walk found no timing frame on a thread the gate counts: one left by an exception)."""
    with _GATE_LOCK:
        gate = _GATE
        if gate is not None:
            n = _timing_frames(sys._getframe(1))
            t = threading.get_ident()
            if n:
                gate[t] = n
            else:
                gate.pop(t, None)
