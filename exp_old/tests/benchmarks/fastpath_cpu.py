"""The C launch hooks' own cost on the CPU (no GPU): ``runtime/fastpath.py``'s allocator and
launch-exit hook, per call, on the common path.

A ``Collector`` on the simulated driver of the CPU tests (``tests/sim_driver.py``), its C
hooks given C stand-ins for the two driver queries (so no Python runs between them), and
Triton's own ``LazyDict`` as the launch metadata, as Triton's launcher passes it.  Each
launch is one allocator call and one exit-hook call, timed apart; chunks are large enough
that a switch (the Python path) comes once per ``--per-chunk`` launches, reported apart.
The mean over every launch (both hooks, chunk switches included, C's and Python's) is what
a program pays.  Also counted: objects the garbage collector tracks that each launch leaves alive until its
chunk is sealed (what makes the collector run more often in the user's program).

``--between MIB`` walks that many MiB of Python objects between launches, as a program's own
Python does, so that the hooks run on cold caches as they do in a real program.

``--free-drain`` gives the C drain driver functions in C that do nothing, so that its thread
runs as on a GPU host instead of waiting for the GIL in the simulated driver's callbacks:
the chunk switch (the allocator's Python path) is then what it costs the launching thread.

``--autotuned`` launches a function an autotuner benchmark compiled (``trials.mark_trials``):
each exit hook then checks the frames for a timing trial, in C; with ``--trials-in-python``
as before, in the Python hook.  ``--depth N`` calls the exit hook N Python calls deep (an
Inductor launch's is about 12: the walk makes a frame object per level), and ``--gate`` asks
the trial gate first (``trials.watch``, Python 3.12+: no walk outside a timing function).

Usage: python tests/benchmarks/fastpath_cpu.py [--launches 20000] [--rounds 5] [--between 8] [--free-drain]
                                               [--autotuned [--trials-in-python] [--depth 12] [--gate]]
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

_QUERIES = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
static int capturing(void *stream, int *status) { *status = 0; return 0; }
static int device(int *out) { *out = 0; return 0; }
static PyObject *addresses(PyObject *self, PyObject *unused) {
    return Py_BuildValue("(KK)", (unsigned long long)(uintptr_t)capturing, (unsigned long long)(uintptr_t)device);
}
static PyMethodDef m[] = {{"addresses", addresses, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "pl_query_standins", NULL, -1, m};
PyMODINIT_FUNC PyInit_pl_query_standins(void) { return PyModule_Create(&mod); }
"""

# ``--free-drain``: the C drain's eight driver functions (native_drain.open's order) as C
# functions that do nothing, so that its thread never waits for the GIL, as on a GPU host
# (the simulated driver's ctypes callbacks take it on every call).  Nothing is copied: the
# raw file gets the pinned buffers as they are; only the launching thread's times count.
_DRAIN_STANDINS = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
static int one(uint64_t a) { return 0; }
static int copy(uint64_t a, uint64_t b, size_t n, uint64_t s) { return 0; }
static int fill(uint64_t a, unsigned char v, size_t n, uint64_t s) { return 0; }
static int mode(void *m) { return 0; }
static int wait_event(uint64_t s, uint64_t e, unsigned int f) { return 0; }
static int record(uint64_t e, uint64_t s) { return 0; }
static PyObject *addresses(PyObject *self, PyObject *unused) {
    return Py_BuildValue("(KKKKKKKK)", (unsigned long long)(uintptr_t)one, (unsigned long long)(uintptr_t)one,
                         (unsigned long long)(uintptr_t)copy, (unsigned long long)(uintptr_t)fill,
                         (unsigned long long)(uintptr_t)one, (unsigned long long)(uintptr_t)mode,
                         (unsigned long long)(uintptr_t)wait_event, (unsigned long long)(uintptr_t)record);
}
static PyMethodDef m[] = {{"addresses", addresses, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "pl_drain_standins", NULL, -1, m};
PyMODINIT_FUNC PyInit_pl_drain_standins(void) { return PyModule_Create(&mod); }
"""


def deep(depth: int, fn, arg):
    """``fn(arg)`` called ``depth`` Python calls down (fresh frames each time, as a launch's)."""
    return deep(depth - 1, fn, arg) if depth > 0 else fn(arg)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-chunk", type=int, default=200)
    ap.add_argument("--between", type=float, default=0.0,
                    help="MiB of the program's own Python objects touched between launches (0: a tight loop)")
    ap.add_argument("--free-drain", action="store_true",
                    help="the C drain's driver calls as C functions that do nothing (its thread never takes the GIL)")
    ap.add_argument("--autotuned", action="store_true", help="launches of a function marked as autotuned")
    ap.add_argument("--trials-in-python", action="store_true", help="with --autotuned: the trial check in Python")
    ap.add_argument("--depth", type=int, default=0, help="Python calls between the loop and the exit hook")
    ap.add_argument("--gate", action="store_true", help="with --autotuned: the trial gate (trials.watch)")
    a = ap.parse_args()
    # a program's own work between launches: walking this many objects pushes the hooks' out
    # of the core's caches, as a real program's Python does (liger's forward: ~100 µs per call)
    program = [{"a": i, "b": float(i)} for i in range(int(a.between * (1 << 20) / 320))]
    import tempfile
    from _pytest.monkeypatch import MonkeyPatch
    from triton.compiler.compiler import LazyDict

    from proton_lite import compat
    from proton_lite.raw_format import RawWriter
    from proton_lite.runtime import fastpath
    from proton_lite.runtime.collector import Collector, LaunchInfo
    from sim_driver import SimDriver
    from test_collector import _Meta

    queries = compat.compile_module_from_src()(_QUERIES, "pl_query_standins").addresses()
    drain_table = compat.compile_module_from_src()(_DRAIN_STANDINS, "pl_drain_standins").addresses() \
        if a.free_drain else None
    meta = _Meta()
    size = meta.profile_scratch_size * 4
    jit_fn = None
    if a.autotuned:
        import triton.runtime.autotuner  # noqa: F401  (the trial check knows its codes once it is loaded)
        from proton_lite.runtime import trials

        class AutotunedFunction:  # stands for the JIT function under an autotuner
            pass
        jit_fn = AutotunedFunction()
        trials.mark_trials(jit_fn)
        assert trials._know_trial_codes()
        if a.gate and not trials.watch():
            raise SystemExit("no trial gate on this Python (3.12+ with a free sys.monitoring tool id)")
    rows = []
    for _ in range(a.rounds):
        mp = MonkeyPatch()
        SimDriver().install(mp)
        if drain_table is not None:
            from proton_lite.runtime import cuda_api
            mp.setattr(cuda_api, "driver_table", lambda: drain_table)
        with tempfile.TemporaryDirectory() as tmp:
            col = Collector(RawWriter(os.path.join(tmp, "c.plraw"), {}), host_limit_bytes=256 << 20,
                            copy_every=a.per_chunk, idle_ns=10**12)
            fp = fastpath.hooks_for(col, queries=queries)
            assert fp is not None, fastpath.build_error()
            if a.trials_in_python:
                fp.set_trials(None)
            args = {"x": 1, "n": 1024}
            fast_a, fast_e, slow, total = [], [], [], []
            gc.collect()
            tracked0 = len(gc.get_objects(generation=0)) + len(gc.get_objects(generation=1))
            kept = []
            pc = time.perf_counter_ns
            for i in range(a.launches):
                for obj in program:
                    obj["a"] += 1
                before = fp.counts()
                t0 = pc()
                fp.allocate(size, 16, 0)
                t1 = pc()
                lm = LazyDict({"name": "k", "function": 1, "stream": 0})
                lm.add(LaunchInfo(jit_fn), ((4, 1, 1), meta, args))
                t2 = pc()
                deep(a.depth, fp.on_launch_exit, lm)
                t3 = pc()
                after = fp.counts()
                if i >= a.per_chunk * 4:  # past the pools' first growth
                    total.append(t1 - t0 + t3 - t2)
                if after[0] > before[0]:
                    fast_a.append(t1 - t0)
                else:
                    slow.append(t1 - t0)
                if after[1] > before[1]:
                    fast_e.append(t3 - t2)
                if i == a.per_chunk // 2:  # mid-chunk: what the open chunk holds on to
                    kept.append(sum(len(gc.get_objects(generation=g)) for g in (0, 1)) - tracked0)
            switches = fp.switches() if hasattr(fp, "switches") else 0
            col.finish()
            col.writer.close()
        mp.undo()
        rows.append((statistics.median(fast_a), statistics.median(fast_e) if fast_e else 0,
                     statistics.median(slow) if slow else 0, len(slow), kept[0] if kept else 0,
                     statistics.mean(total), switches, len(fast_e)))
    print(f"{a.launches} launches, a chunk switch every {a.per_chunk}; medians over {a.rounds} rounds (ns per call):")
    print(f"  allocator, C path      {statistics.median(r[0] for r in rows):8.0f}")
    print(f"  exit hook, C path      {statistics.median(r[1] for r in rows):8.0f}  ({rows[0][7]} of the exits)")
    print(f"  allocator, Python path {statistics.median(r[2] for r in rows):8.0f}  ({rows[0][3]} calls)")
    print(f"  both hooks, mean over every launch, switches included {statistics.median(r[5] for r in rows):8.0f}"
          f"  ({rows[0][6]} chunk switches in C)")
    print(f"  GC-tracked objects alive after {a.per_chunk // 2} launches into a chunk: {rows[0][4]}")


if __name__ == "__main__":
    main()
