"""Host time a session adds to the launching thread, per call (issue 22; GPU needed).

Four variants in blocks that alternate in one process (3 rounds, medians), for a 4,096-CTA
scope-less kernel and, when liger-kernel is importable, its rms_norm forward on 4,096 x
4,096, no synchronization inside a block: plain; plain with a no-op launch-exit hook
installed (what Triton itself adds once a hook is there); a session (the C hooks); a
session with the Python hooks (``PROTON_LITE_FASTPATH=0``).  Wall time and the launching
thread's own CPU time (``time.thread_time``) per call: where the two agree, the added time
is work on that thread, not waiting.

Usage (from the repository root): python tests/benchmarks/launch_variants.py  [ROUNDS=3]
"""
import os, sys
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import proton_lite
from proton_lite import compat
from launch_loops import block, workloads

work = workloads()


def noop_exit(*_):
    return None


def run(variant, fn, calls):
    if variant == "plain":
        return block(fn, calls)
    if variant == "no-op exit hook":
        hooks = compat.get_knob("runtime", "launch_exit_hook")
        hooks.add(noop_exit)
        try:
            block(fn, 20)
            return block(fn, calls)
        finally:
            hooks.remove(noop_exit)
    os.environ["PROTON_LITE_FASTPATH"] = "0" if variant == "session, Python hooks" else "1"
    with proton_lite.start("/tmp/hc", quiet=True, formats=(), calibrate=False) as s:
        block(fn, 50)
        r = block(fn, calls)
    os.remove(s.result.raw_path)
    return r


variants = ["plain", "no-op exit hook", "session", "session, Python hooks"]
for name, (fn, calls) in work.items():
    for v in variants:
        run(v, fn, 100)  # compile, warm
    res = {v: [] for v in variants}
    for r in range(int(os.environ.get("ROUNDS", 3))):
        for v in variants:
            res[v].append(run(v, fn, calls))
    for v in variants:
        walls = sorted(x[0] for x in res[v]); cpus = sorted(x[1] for x in res[v])
        print(f"{name:22s} {v:24s} wall {walls[len(walls)//2]:7.1f} us/call ({walls[0]:.1f}-{walls[-1]:.1f})"
              f"  main CPU {cpus[len(cpus)//2]:7.1f} ({cpus[0]:.1f}-{cpus[-1]:.1f})", flush=True)
