"""The Inductor bridge's compiles of a graph's kernels on threads (runtime/inductor.py,
``InductorBridge.prefetch``), without torch: CI has no torch, so the autotuners here are
small objects with what the bridge and ``_recompile`` use of Inductor's ``CachingAutotuner``
(launchers with configs, ``_precompile_config``, ``_make_launchers``).  The real kernels are
tested on the GPU (tests/test_gpu_inductor.py)."""
import threading
import time
import weakref
from types import SimpleNamespace

import pytest

from proton_lite.runtime import inductor
from proton_lite.runtime.inductor import InductorBridge
from proton_lite.runtime.inductor_kernels import _FirstRun


class Launcher:
    def __init__(self, config, kind: str):
        self.config, self.kind = config, kind


class Autotuner:
    """A compile takes ``delay`` seconds on the thread that asks for it, and fails if ``fail``."""

    def __init__(self, name: str, delay: float = 0.0, fail: bool = False):
        self.inductor_meta = {"kernel_name": name}
        self.fn = SimpleNamespace(fn=object())
        self.launchers = [Launcher(object(), "plain")]
        self.compile_results = ["plain"]
        self.delay, self.fail, self.compiled_on = delay, fail, []

    def _precompile_config(self, config):
        self.compiled_on.append(threading.current_thread().name)
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("ptxas said no")
        return config

    def _make_launchers(self):
        self.launchers = [Launcher(config, "instrumented") for config in self.compile_results]

    def run(self, *args):
        return self.launchers[0].kind

    def precompile(self):
        pass


@pytest.fixture
def graph(monkeypatch):
    """A bridge in a session, and a function that gives it a graph of autotuners compiled
    before the session (stand-ins installed, each knowing its siblings, as ``install`` does)."""
    monkeypatch.setattr(inductor, "_compile_workers", lambda: 2)
    bridge = InductorBridge(lambda fn: None, lambda fn: None)
    bridge.installed = True
    made = []

    def make(*autotuners):
        firsts = [_FirstRun(bridge, a, plain=False) for a in autotuners]
        for first in firsts:
            first.install()
            first.siblings.extend(weakref.ref(o.autotuner()) for o in firsts if o is not first)
        made.extend(autotuners)
        return autotuners
    monkeypatch.setattr(inductor, "_live_autotuners", lambda *_: list(made))
    yield bridge, make
    bridge.uninstall()


def _compile_threads():
    return [t for t in threading.enumerate() if t.name.startswith("proton_lite-compile")]


def test_a_graphs_first_call_compiles_its_other_kernels_on_threads(graph):
    bridge, make = graph
    a, b, c = make(Autotuner("a"), Autotuner("b", 0.05), Autotuner("c", 0.05))
    assert a.run() == "instrumented" and a.compiled_on == [threading.current_thread().name]
    assert b.run() == "instrumented" and c.run() == "instrumented"
    for k in (b, c):
        assert len(k.compiled_on) == 1 and k.compiled_on[0].startswith("proton_lite-compile")
    assert bridge.reinstrumented == 3 and not bridge.failures
    bridge.uninstall()
    assert [k.run() for k in (a, b, c)] == ["plain"] * 3  # their own launchers back at stop
    assert not _compile_threads()


def test_a_kernel_that_does_not_compile_keeps_its_plain_launchers_and_is_named(graph):
    bridge, make = graph
    a, b = make(Autotuner("a"), Autotuner("b", fail=True))
    assert a.run() == "instrumented" and b.run() == "plain"
    assert list(bridge.failures) == ["b"] and "ptxas said no" in bridge.failures["b"]
    assert bridge.reinstrumented == 1


def test_a_kernel_queued_but_not_begun_is_compiled_by_its_first_caller(graph):
    """Two threads are busy with the graph's slower kernels; the first call of the queued one
    takes its build back and compiles it on the calling thread, once."""
    bridge, make = graph
    first, slow1, slow2, queued = make(Autotuner("first"), Autotuner("slow1", 0.3), Autotuner("slow2", 0.3),
                                       Autotuner("queued"))
    assert first.run() == "instrumented"
    assert queued.run() == "instrumented"
    assert queued.compiled_on == [threading.current_thread().name]
    assert slow1.run() == slow2.run() == "instrumented"
    assert all(len(k.compiled_on) == 1 for k in (first, slow1, slow2, queued))


def test_stop_waits_for_the_builds_begun_and_drops_those_queued(graph):
    bridge, make = graph
    kernels = make(Autotuner("first"), *(Autotuner(f"k{i}", 0.3) for i in range(5)))
    assert kernels[0].run() == "instrumented"
    bridge.uninstall()  # two of the five are being compiled; three wait
    built = [k for k in kernels[1:] if k.compiled_on]
    assert 1 <= len(built) <= 3 and not _compile_threads()
    for k in kernels:  # none is left instrumented or with a stand-in
        assert "run" not in vars(k) and k.run() == "plain"


def test_kernels_compiled_plain_in_the_session_are_built_when_the_compile_ends(graph, monkeypatch):
    """Inductor's workers compile plain (they never see the stage hook): at dynamo's end of the
    compile, those kernels get stand-ins and their builds begin on the threads before any call;
    kernels compiled instrumented in this process, kernels its C++ wrapper launches and kernels
    not loaded yet are left alone."""
    bridge, make = graph
    before = make(Autotuner("before"))[0]  # compiled before the session: its stand-in is there already
    bridge._seen.add(before)
    plain, other = Autotuner("plain", 0.05), Autotuner("other", 0.05)
    done = Autotuner("done")
    done.compile_results = [SimpleNamespace(kernel=SimpleNamespace(metadata=SimpleNamespace(_fields=("proton_lite", ))))]
    cpp = Autotuner("cpp")
    cpp.inductor_meta["store_cubin"] = True
    unloaded = Autotuner("unloaded")
    unloaded.launchers = []
    monkeypatch.setattr(inductor, "_live_autotuners", lambda *_: [before, plain, other, done, cpp, unloaded])
    bridge.compile_ended()
    for k in (plain, other):  # begun at once, on the threads
        bridge._builds[k].result(timeout=5)
        assert len(k.compiled_on) == 1 and k.compiled_on[0].startswith("proton_lite-compile")
    assert "run" not in vars(done) and "run" not in vars(cpp) and "run" not in vars(unloaded)
    assert bridge.from_cpp == {"cpp": 1}
    assert plain.run() == other.run() == "instrumented" and len(plain.compiled_on) == 1
    assert done.run() == "plain" and cpp.run() == "plain"  # (the fakes' own launchers)
    unloaded.launchers = [Launcher(object(), "plain")]  # loaded by a later compile
    bridge.compile_ended()
    assert "run" in vars(unloaded) and unloaded.run() == "instrumented"
    bridge.compile_ended()  # nothing new: nothing built again
    assert len(plain.compiled_on) == 1 and before.compiled_on == []
    bridge.uninstall()
    for k in (plain, other, unloaded):  # their plain launchers back at stop, compiled again (static) at the next call
        assert k.launchers[0].kind == "plain" and isinstance(getattr(vars(k).get("run"), "first", None), _FirstRun)
        assert vars(k)["run"].first.plain
    bridge.compile_ended()  # after stop: nothing
    assert bridge.from_cpp == {"cpp": 1} and not bridge.compiling()


def test_the_bridge_knows_when_dynamo_compiles_and_names_a_cpp_wrappers_kernels(graph):
    bridge, _ = graph
    assert not bridge.compiling()
    bridge.compile_started()
    assert bridge.compiling()
    cpp = Autotuner("for_cpp")
    cpp.inductor_meta["store_cubin"] = True

    def launched_by(self):  # a launch by a kernel compiled for Inductor's C++ wrapper, while compiling
        return bridge.compiling()
    assert launched_by(cpp) and bridge.from_cpp == {"for_cpp": 1}
    assert launched_by(Autotuner("python_wrapper")) and bridge.from_cpp == {"for_cpp": 1}
    bridge.compile_ended()
    assert not bridge.compiling()
    bridge.compile_ended()  # an end whose start came before the session: never below zero
    bridge.compile_started()
    assert bridge.compiling()
