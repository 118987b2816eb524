"""Where a session's added time per call lands on the launching thread (issue 22; GPU needed).

Triton's ``JITFunction.run`` and each binary's launcher (``CompiledKernel._run``: the profile
allocator, the launch, the launch-exit hook) are timed from outside, so a call's wall time
splits into: inside the launcher, the rest of Triton's run, and outside Triton (the
program's own Python and torch).  Blocks of ``launch_loops.py``'s workloads alternate:
plain, a session, a session whose kernel selection matches nothing (plain binaries, the
exit hook only), a session with the C hooks off (``PROTON_LITE_FASTPATH=0``).  Medians over
``ROUNDS`` (default 3).

Usage (from the repository root): python tests/benchmarks/launch_where.py
"""
import os, sys, time
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "benchmarks"))
import torch
import triton
from triton.runtime import jit as J
import proton_lite
from launch_loops import block, workloads

pc = time.perf_counter_ns
acc = {"jit": 0, "launch": 0, "n": 0}
orig_run = J.JITFunction.run


def wrapped_launcher(inner):
    def launch(*a, **k):
        t = pc()
        try:
            return inner(*a, **k)
        finally:
            acc["launch"] += pc() - t
    launch._inner = inner
    return launch


def timed_run(self, *a, **k):
    t = pc()
    try:
        kernel = orig_run(self, *a, **k)
        r = getattr(kernel, "_run", None)
        if kernel is not None and r is not None and not hasattr(r, "_inner"):
            kernel._run = wrapped_launcher(r)  # from the next launch of this binary on
        return kernel
    finally:
        acc["jit"] += pc() - t
        acc["n"] += 1


J.JITFunction.run = timed_run
variants = {"plain": None, "session": {}, "session, kernel not selected": {"kernels": ["no_such_kernel"]},
            "session, fastpath off": "env"}
for name, (fn, n) in workloads(liger=True).items():
    for _ in range(3):
        block(fn, 100)
    res = {}
    for rnd in range(int(os.environ.get("ROUNDS", 3))):
        for var, opts in variants.items():
            def run_block():
                for _ in range(2): block(fn, 30)
                acc.update(jit=0, launch=0, n=0)
                w, c = block(fn, n)
                return w, c, acc["jit"] / n / 1e3, acc["launch"] / n / 1e3, acc["n"] / n
            if opts is None:
                r = run_block()
            else:
                if opts == "env":
                    os.environ["PROTON_LITE_FASTPATH"] = "0"
                with proton_lite.start("/tmp/wp", quiet=True, formats=(), calibrate=False, **({} if opts == "env" else opts)):
                    r = run_block()
                os.environ.pop("PROTON_LITE_FASTPATH", None)
            res.setdefault(var, []).append(r)
    for var, rows in res.items():
        rows.sort()
        w, c, j, l, k = rows[len(rows) // 2]
        print(f"{name:20s} {var:30s} wall {w:6.1f} ({rows[0][0]:.1f}-{rows[-1][0]:.1f}) CPU {c:6.1f}  in jit.run {j:6.1f}"
              f"  in launcher {l:6.1f}  outside triton {w - j:6.1f}  jit calls/call {k:.1f}", flush=True)
