"""What the drain threads' use of the GIL costs the launching thread (issue 22; GPU needed).

If the copier and writer threads' Python (``runtime/drain.py``) held up launches, making it
heavier would show.  Alternating blocks of ``launch_loops.py``'s workloads in one process:
plain; a session; a session whose writer runs 300 µs more Python per chunk; one whose writer,
or copier, hands the GIL over 30 more times per chunk (``time.sleep(0)``).  Per block: wall
and launching-thread CPU µs per call, the launching thread's voluntary context switches per
call, chunks sealed.  Medians over ``ROUNDS`` (default 3).

Usage (from the repository root): python tests/benchmarks/drain_load.py
"""
import os, sys, time
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "benchmarks"))
import torch
import proton_lite
from proton_lite.runtime import drain as D
from launch_loops import block, voluntary_switches, workloads

orig_write, orig_enqueue = D.Drain._write, D.Drain._enqueue_copy


def busy_write(self, *a, **k):
    t = time.perf_counter_ns() + 300_000
    while time.perf_counter_ns() < t:
        pass
    return orig_write(self, *a, **k)


def handoff_write(self, *a, **k):
    for _ in range(30):
        time.sleep(0)
    return orig_write(self, *a, **k)


def handoff_copy(self, *a, **k):
    for _ in range(30):
        time.sleep(0)
    return orig_enqueue(self, *a, **k)


VARIANTS = {"session": (orig_write, orig_enqueue), "+300us py/chunk": (busy_write, orig_enqueue),
            "+30 handoffs writer": (handoff_write, orig_enqueue), "+30 handoffs copier": (orig_write, handoff_copy)}


work = workloads(liger=True)
for name, (fn, n) in work.items():
    for _ in range(2):
        block(fn, 100)
    res = {}
    for rnd in range(int(os.environ.get("ROUNDS", 3))):
        v0 = voluntary_switches(); w, c = block(fn, n); res.setdefault("plain", []).append((w, c, (voluntary_switches() - v0) / n, 0))
        for var, (wr, en) in VARIANTS.items():
            D.Drain._write, D.Drain._enqueue_copy = wr, en
            with proton_lite.start("/tmp/dp", quiet=True, formats=(), calibrate=False) as s:
                block(fn, 50)
                c0 = s._collector.copies
                v0 = voluntary_switches(); w, c = block(fn, n); sw = (voluntary_switches() - v0) / n
                chunks = s._collector.copies - c0
            D.Drain._write, D.Drain._enqueue_copy = orig_write, orig_enqueue
            res.setdefault(var, []).append((w, c, sw, chunks))
    for var, rows in res.items():
        rows.sort()
        med = rows[len(rows) // 2]
        print(f"{name:20s} {var:22s} wall {med[0]:7.1f} us/call ({rows[0][0]:.1f}-{rows[-1][0]:.1f})  main CPU {med[1]:7.1f}"
              f"  main vol. switches/call {med[2]:.3f}  chunks {med[3]}", flush=True)
