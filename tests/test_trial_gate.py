"""The trial gate (runtime/trials.py, Python 3.12+): a launch walks its frames for an
autotuner's timing function only while one runs on the launching thread.

Counted by ``sys.monitoring`` events on the timing functions' code alone; what must hold:
a thread is in the gate whenever such a frame runs on it and, once a check has recounted,
only then (nested functions, other threads, a function watched while it already runs; a frame
left by an exception and a generator, which only count up, are set right by the next walk that
finds none; a generator resumed by ``throw()``), the tool id is given back at stop, and with the
gate the exit hooks (C and Python) skip the same trials and keep the same launches as
without it, the C hook without walking for a launch outside any timing function.
"""
from __future__ import annotations

import sys
import threading

import pytest

from proton_lite.runtime import trials
from test_collector import (_C_HOOKS, HOOKS, _jit_like_kernels, collector, finish, hook_mode,  # noqa: F401
                            sim)

pytestmark = pytest.mark.skipif(not hasattr(sys, "monitoring"), reason="sys.monitoring needs Python 3.12+")


@pytest.fixture
def gate():
    import triton.runtime.autotuner  # noqa: F401  (the trial codes are known once it is loaded)
    assert trials._know_trial_codes()
    assert trials.watch()
    yield trials._GATE
    trials.unwatch()


def _here() -> bool:
    return threading.get_ident() in trials._GATE


def test_a_thread_is_in_the_gate_only_while_a_timing_function_runs(gate):
    seen = []

    def timing(inner):
        seen.append(_here())

        def nested():  # a function nested in a timing function (Inductor's kernel_call)
            return _here()
        seen.append(nested())
        inner()
        return seen

    def timing_steps():  # a generator: counted while it runs; only up (see the next test)
        seen.append(_here())
        yield
        seen.append(_here())

    trials.add_trial_functions(timing, timing_steps)
    assert not _here()
    timing(lambda: seen.append(_here()))
    assert seen == [True, True, True] and not _here()
    steps = timing_steps()
    next(steps)
    next(steps, None)
    assert seen[-2:] == [True, True]
    assert not trials._in_autotuner_benchmark()  # a check finds none running and recounts
    assert not _here()


def test_a_generator_resumed_by_throw_never_hides_the_timing_function_that_runs_it(gate):
    """``throw()`` resumes a generator without a resume event (PY_THROW is not a local
    event): had its yields counted down, the frame running it would look gone."""
    seen = []

    def steps():
        while True:
            try:
                yield
            except ValueError:
                pass

    def timing():
        s = steps()
        next(s)
        s.throw(ValueError)  # resumed without an event, yields again
        s.throw(ValueError)
        seen.append(_here())

    trials.add_trial_functions(timing, steps)
    timing()
    assert seen == [True]


def test_each_thread_is_counted_on_its_own(gate):
    started, release = threading.Event(), threading.Event()
    inside = []

    def timing():
        started.set()
        release.wait(10)
        inside.append(_here())

    trials.add_trial_functions(timing)
    worker = threading.Thread(target=timing)
    worker.start()
    assert started.wait(10)
    assert worker.ident in trials._GATE and not _here()
    release.set()
    worker.join()
    assert inside == [True] and worker.ident not in trials._GATE


def test_a_function_watched_while_it_runs_is_counted_until_it_returns(gate):
    """Inductor's timing functions are registered as their module appears, which can be while
    one of them compiles the kernels it is about to time."""
    inside = []

    def timing():
        trials.add_trial_functions(timing)  # watched from now on: its start was not seen
        inside.append(_here())

    timing()
    assert inside == [True] and not _here()


def test_a_timing_function_left_by_an_exception_is_set_right_by_the_next_check(gate):
    def timing():
        raise RuntimeError("a config that failed")

    trials.add_trial_functions(timing)
    with pytest.raises(RuntimeError):
        timing()
    assert _here()  # its return was never seen
    assert not trials._in_autotuner_benchmark()  # walks, finds none, recounts
    assert not _here()


def test_stop_gives_the_tool_id_back_and_turns_the_events_off(gate):
    def timing():
        return 1

    trials.add_trial_functions(timing)
    tool = trials._TOOL
    assert sys.monitoring.get_tool(tool) == "proton-lite trials"
    assert sys.monitoring.get_local_events(tool, timing.__code__) != 0
    trials.unwatch()
    assert sys.monitoring.get_tool(tool) is None and trials._GATE is None
    sys.monitoring.use_tool_id(tool, "the next tool")
    try:
        assert sys.monitoring.get_local_events(tool, timing.__code__) == 0
    finally:
        sys.monitoring.free_tool_id(tool)
    assert timing() == 1
    assert trials.watch()  # for the fixture's own unwatch


def test_without_a_free_tool_id_every_check_walks(monkeypatch):
    """Tools that hold both of our ids (a debugger and a profiler, say) leave the walk."""
    import triton.runtime.autotuner  # noqa: F401
    taken = [t for t in trials._TOOL_IDS if sys.monitoring.get_tool(t) is None]
    for t in taken:
        sys.monitoring.use_tool_id(t, "someone else")
    try:
        assert not trials.watch() and trials._GATE is None
        assert not trials._in_autotuner_benchmark()
    finally:
        for t in taken:
            sys.monitoring.free_tool_id(t)


def test_with_the_gate_the_hooks_skip_the_trials_and_keep_the_user_s_launches_without_walking(
        collector, sim, tmp_path, monkeypatch, gate):
    """The same launches as the test without the gate (test_collector's
    ``test_a_users_launches_of_an_autotuned_function_stay_in_the_c_hooks``): the benchmark's
    launches skipped, the user's kept; with the C hooks, the user's launches walk no frames."""
    from triton.runtime.autotuner import Autotuner, Config

    tuned, = _jit_like_kernels(collector, sim, monkeypatch, 1)
    t = Autotuner(tuned, [], [Config({})], [], None, None,
                  do_bench=lambda kernel_call, quantiles: (kernel_call(), [1.0, 1.0, 1.0])[1])
    t.nargs = {}
    t._bench(config=Config({}))  # compiles inside the benchmark: a trial
    t._bench(config=Config({}))
    c_hooks = HOOKS["mode"] == "c"
    tuned.run()  # the first after a benchmark goes to Python, which sees that it has ended
    walks = _C_HOOKS[id(collector)][0].trial_walks() if c_hooks else 0
    for _ in range(5):
        tuned.run()
    if c_hooks:
        assert _C_HOOKS[id(collector)][0].trial_walks() == walks
    t._bench(config=Config({}))  # a benchmark after them: still a trial
    cap = finish(collector, tmp_path)
    assert collector.skipped_autotune == 3 and len(cap.launches) == 6


def test_a_stale_count_costs_one_walk_then_none(collector, sim, tmp_path, monkeypatch, gate):
    """A timing function left by an exception keeps its thread counted: the next launch walks,
    finds no trial, is kept, and recounts (from the C hook: Python code, run before it looks
    at the slots and kernels that other threads may change); the launches after it walk no
    more."""
    tuned, = _jit_like_kernels(collector, sim, monkeypatch, 1)
    trials.mark_trials(tuned)
    tuned.run()  # compiles (outside any benchmark): a user's launch

    def timing():
        raise RuntimeError("a config that failed")

    trials.add_trial_functions(timing)
    with pytest.raises(RuntimeError):
        timing()
    assert _here()
    c_hooks = HOOKS["mode"] == "c"

    def walks():  # the C hook's and the Python hook's: a launch the C hook hands on (its chunk was
        # switched meanwhile, say, which a loaded host makes likelier) is checked in Python
        return (_C_HOOKS[id(collector)][0].trial_walks() if c_hooks else 0) + trials.PY_WALKS
    before = walks()
    for _ in range(4):
        tuned.run()
    assert not _here()
    assert walks() - before == 1
    cap = finish(collector, tmp_path)
    assert collector.skipped_autotune == 0 and len(cap.launches) == 5
