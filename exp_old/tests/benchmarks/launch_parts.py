"""Where a session's host time per launch goes on the launching thread (issue 22; GPU needed).

Times, for a loop of 3,000 launches of a 4,096-CTA scope-less kernel: the two driver
queries the C hooks make per launch (``cuStreamIsCapturing``, ``cuCtxGetDevice``, in a C
loop); plain and session wall / launching-thread CPU per call; then the session's profile
allocator and launch-exit hook, each wrapped in a timer (about 0.3 µs of wrapper each):
per-call percentiles, how many calls the C code served, and the share of the slow calls
(over 20 µs: a chunk switch on the allocator, a seal on the exit hook).

Usage (from the repository root): python tests/benchmarks/launch_parts.py
"""
import os, sys, time
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import torch
import proton_lite
from proton_lite import compat
from proton_lite.runtime import fastpath
from launch_loops import block, workloads

SRC = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>
#include <stdint.h>
typedef int (*cap_fn)(void *stream, int *status);
typedef int (*dev_fn)(int *device);
static long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000000000LL + t.tv_nsec; }
static PyObject *bench(PyObject *self, PyObject *args) {
    unsigned long long cap, dev, stream; long long n;
    if (!PyArg_ParseTuple(args, "KKKL", &cap, &dev, &stream, &n)) return NULL;
    int st = 0, d = 0;
    long long t0 = now();
    for (long long i = 0; i < n; i++) ((cap_fn)(uintptr_t)cap)((void *)(uintptr_t)stream, &st);
    long long t1 = now();
    for (long long i = 0; i < n; i++) ((dev_fn)(uintptr_t)dev)(&d);
    long long t2 = now();
    return Py_BuildValue("(dd)", (double)(t1 - t0) / n, (double)(t2 - t1) / n);
}
static PyMethodDef m[] = {{"bench", bench, METH_VARARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "pl_drvbench", NULL, -1, m};
PyMODINIT_FUNC PyInit_pl_drvbench(void) { return PyModule_Create(&mod); }
"""
torch.zeros(1, device="cuda")
drv = compat.compile_module_from_src()(SRC, "pl_drvbench")
cap, dev = fastpath.driver_queries()
s_torch = torch.cuda.current_stream().cuda_stream
side = torch.cuda.Stream()
for name, st in (("default stream (0)", 0), ("torch current", s_torch), ("a created stream", side.cuda_stream)):
    print(f"driver calls, {name}: cuStreamIsCapturing {drv.bench(cap, dev, st, 100000)[0]:.0f} ns, cuCtxGetDevice {drv.bench(cap, dev, st, 100000)[1]:.0f} ns")

fn, _ = workloads(liger=False)["add 4096 CTAs"]


for _ in range(2): block(fn, 100)
print("plain wall/cpu us", [round(v, 1) for v in block(fn, 3000)])
with proton_lite.start("/tmp/fp", quiet=True, formats=(), calibrate=False) as s:
    block(fn, 50)
    print("session wall/cpu us", [round(v, 1) for v in block(fn, 3000)])
    # time the installed hooks themselves by wrapping them
    alloc = compat.get_profile_allocator()
    hooks = compat.get_knob("runtime", "launch_exit_hook")
    fp = s._hooks.fastpath
    acc = {"alloc": 0, "exit": 0, "n": 0}
    ta, te = [], []
    pc = time.perf_counter_ns

    def walloc(size, align, stream):
        t = pc(); r = alloc(size, align, stream); d = pc() - t; ta.append(d); acc["alloc"] += d; acc["n"] += 1; return r

    def wexit(lm):
        t = pc(); r = fp.on_launch_exit(lm); d = pc() - t; te.append(d); acc["exit"] += d; return r

    compat.set_profile_allocator(walloc); hooks.remove(fp.on_launch_exit); hooks.add(wexit)
    before = fp.counts()
    print("session, hooks wrapped, wall/cpu us", [round(v, 1) for v in block(fn, 3000)])
    after = fp.counts()
    hooks.remove(wexit); hooks.add(fp.on_launch_exit); compat.set_profile_allocator(alloc)
    print(f"per launch: allocate {acc['alloc'] / acc['n']:.0f} ns, exit hook {acc['exit'] / acc['n']:.0f} ns, "
          f"fast allocs {after[0] - before[0]} exits {after[1] - before[1]} of {acc['n']}")
    import numpy as np
    for nm, v in (("allocate", ta), ("exit", te)):
        v = np.sort(np.array(v))
        big = v[v > 20000]
        print(f"{nm}: p50 {np.percentile(v, 50):.0f} p90 {np.percentile(v, 90):.0f} p99 {np.percentile(v, 99):.0f} max {v.max()} ns;"
              f" {len(big)} calls over 20 us hold {big.sum() / v.sum():.0%} of the total, median of those {np.median(big) if len(big) else 0:.0f} ns")
    st = s._collector.drain.stats() if hasattr(s, "_collector") and hasattr(s._collector, "drain") and hasattr(s._collector.drain, "stats") else None
    print("drain stats", st)
    # Triton's side: launch_metadata built per launch?
    import triton.knobs as K
    print("enter hook:", K.runtime.launch_enter_hook, "exit hook:", K.runtime.launch_exit_hook)
print("plain again wall/cpu us", [round(v, 1) for v in block(fn, 3000)])
