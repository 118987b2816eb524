"""liger-kernel's rms_norm per call, plain vs in a session, as paired blocks (issue 22; GPU).

On the GPU hosts a plain block of these calls moves by up to 2x between blocks of one
process (other tenants, clocks), so medians of separate plain and session blocks say little
about a 10% target.  Here each pair is a plain block and a session block run back to back,
in alternating order (plain first, then session first), and the number is the median of the
pairs' ratios with its quartiles.  Also per block: the time Python's garbage collector ran
(``gc.callbacks``) and its collections, to see whether a session's objects make it run more,
and the host's time to issue the calls beside the device's span between two events around them
(which of the two bounds a loop that does not synchronize).

Cases (``host_scale.py``'s): rms_norm forward, forward + backward, synchronized per call or
not, on 4,096 x 4,096.  A session here is raw only (``decode=False``), started per block,
its first ``--warm`` calls not timed.

``--spares 4,0`` runs one session block per value in each pair, with
``PROTON_LITE_SPARE_CHUNKS`` set to it (4: chunk switches in C, the default; 0: every switch
in Python), in rotating order beside the same plain block: the C switch against the Python
one in one process.  ``--only TEXT`` keeps the cases whose label contains it (``A|B``: either).

``--ops SCALE`` runs every op of ``tests/liger_ops.py`` instead (forward + backward, rows times
SCALE), not synchronized and synchronized: the same loop shape on kernels this work was not
tuned on.

Usage: python tests/benchmarks/liger_pairs.py [--pairs 12] [--calls 200] [--spares 4,0] [--only "fwd, no"] [--ops 32] [--json FILE]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))
import proton_lite  # noqa: E402
from host_scale import liger_cases  # noqa: E402

_gc = {"ns": 0, "runs": 0, "t0": 0}


def _gc_timer(phase, info):
    if phase == "start":
        _gc["t0"] = time.perf_counter_ns()
    else:
        _gc["ns"] += time.perf_counter_ns() - _gc["t0"]
        _gc["runs"] += 1


def thread_cpu_ns() -> dict[str, int]:
    """CPU ns by thread name (``/proc/self/task/*/schedstat``, ns resolution), the process's
    own in "process": what the threads that exited (our checksum threads, ``pl-crc``) took is the
    process's growth less the live threads'.  Empty where there is no /proc."""
    out: dict[str, int] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        name = "main" if int(tid) == os.getpid() else name
        out[name] = out.get(name, 0) + ns
    out["process"] = time.process_time_ns()
    return out


def cpu_by_thread(before: dict[str, int], after: dict[str, int], calls: int) -> dict[str, float]:
    """µs per call by thread name between two ``thread_cpu_ns``; "exited": threads gone by then."""
    out = {k: (after[k] - before.get(k, 0)) / calls / 1e3 for k in after if k != "process"}
    if "process" in after:
        out["exited"] = (after["process"] - before["process"]) / calls / 1e3 - sum(out.values())
    return {k: round(v, 2) for k, v in out.items() if abs(v) >= 0.05}


def timed(call, calls: int) -> tuple:
    """(µs per call, GC ms, GC runs, host µs per call, device µs per call, CPU µs per call of this
    thread and of the process, CPU µs per call by thread name to the block's end) of
    ``calls`` calls between two synchronizes.  Host: until the loop has issued its last call;
    device: between two events recorded on the current stream before the first call and after
    the last (a loop that does not synchronize is bound by whichever is longer: the two say
    which); CPU: this thread's and the whole process's CPU time (the autograd engine's thread runs
a backward, our copier threads the copies) until the last call was issued (a shared host's other
    tenants take wall time from a block, not CPU time: on the H200 machines plain blocks of one
    op moved 540-910 µs a call, the device idle ~80% of it)."""
    torch.cuda.synchronize()
    _gc.update(ns=0, runs=0)
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    threads0 = thread_cpu_ns()
    t0, cpu0, proc0 = time.perf_counter(), time.thread_time(), time.process_time()
    first.record()
    for _ in range(calls):
        call(1)
    last.record()
    issued, cpu, proc = time.perf_counter(), time.thread_time() - cpu0, time.process_time() - proc0
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    threads = cpu_by_thread(threads0, thread_cpu_ns(), calls)  # to the block's end, its writes included
    return (wall / calls * 1e6, _gc["ns"] / 1e6, _gc["runs"], (issued - t0) / calls * 1e6,
            first.elapsed_time(last) * 1e3 / calls, cpu / calls * 1e6, proc / calls * 1e6, threads)


def ops_cases(scale: int):
    """(label, call) for every op of ``tests/liger_ops.py`` at ``scale`` times its rows: forward
    + backward on fixed inputs (their gradients accumulate, alike in both blocks), not
    synchronized and synchronized per call."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    import liger_ops
    liger_ops.ROWS_SCALE = scale
    for op in liger_ops.OPS:
        inputs, fn = op(torch.Generator(device="cuda").manual_seed(7))
        out = fn(*inputs)
        grad = torch.ones_like(out) if out.dim() else None
        for sync in (False, True):
            def call(p, fn=fn, inputs=inputs, grad=grad, sync=sync):
                fn(*inputs).backward(grad)
                if sync:
                    torch.cuda.synchronize()
            yield f"liger {op.__name__} rows x{scale} fwd+bwd, {'sync' if sync else 'no sync'}", call


def session_block(call, calls: int, warm: int, path: str, spares: str | None = None):
    if spares is not None:  # read when the session's collector is made
        os.environ["PROTON_LITE_SPARE_CHUNKS"] = spares
    with proton_lite.start(path, quiet=True, decode=False, calibrate=False) as s:
        for _ in range(warm):
            call(1)
        out = timed(call, calls)
    os.remove(s.result.raw_path)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--spares", help="comma-separated PROTON_LITE_SPARE_CHUNKS values, one session block each per pair")
    ap.add_argument("--only", help="only the cases whose label contains this (A|B: either)")
    ap.add_argument("--ops", type=int, metavar="SCALE",
                    help="instead: every op of tests/liger_ops.py, its rows times SCALE (32: 8,192 tokens)")
    a = ap.parse_args()
    variants = a.spares.split(",") if a.spares else [None]
    gc.callbacks.append(_gc_timer)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = ops_cases(a.ops) if a.ops else ((label, call) for label, _, call, _ in liger_cases())
        for label, call in cases:
            if a.only and not any(o in label for o in a.only.split("|")):
                continue
            for _ in range(a.warm):
                call(1)
            session_block(call, a.warm, a.warm, os.path.join(tmp, "w"))  # compiles the instrumented binaries
            blocks = {v: [] for v in variants}  # per variant: (plain, session) pairs
            for k in range(a.pairs):
                order = ["plain"] + variants  # the plain block, then one per variant, rotated by one per pair
                order = order[k % len(order):] + order[:k % len(order)]
                plain, sessions = None, {}
                for which in order:
                    if which == "plain":
                        for _ in range(a.warm):
                            call(1)
                        plain = timed(call, a.calls)
                    else:
                        sessions[which] = session_block(call, a.calls, a.warm, os.path.join(tmp, f"s{k}"), which)
                for v in variants:
                    blocks[v].append((plain, sessions[v]))
            for v in variants:
                rows.append(_report(label if v is None else f"{label} [spares={v}]", blocks[v], a))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


def _report(label: str, pairs: list, a) -> dict:
    """The pairs' ratios (median, quartiles) and GC times, printed; the row for the json."""
    ratios = sorted(s[0] / p[0] for p, s in pairs)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    row = {"case": label, "pairs": a.pairs, "calls": a.calls,
           "plain_us": statistics.median(p[0] for p, _ in pairs),
           "session_us": statistics.median(s[0] for _, s in pairs),
           "ratio_median": statistics.median(ratios), "ratio_q1": q[0], "ratio_q3": q[2],
           "gc_ms_plain": statistics.median(p[1] for p, _ in pairs),
           "gc_ms_session": statistics.median(s[1] for _, s in pairs),
           "gc_runs_plain": statistics.median(p[2] for p, _ in pairs),
           "gc_runs_session": statistics.median(s[2] for _, s in pairs),
           "host_us_plain": statistics.median(p[3] for p, _ in pairs),
           "host_us_session": statistics.median(s[3] for _, s in pairs),
           "device_us_plain": statistics.median(p[4] for p, _ in pairs),
           "device_us_session": statistics.median(s[4] for _, s in pairs),
           "cpu_us_plain": statistics.median(p[5] for p, _ in pairs),
           "cpu_us_session": statistics.median(s[5] for _, s in pairs),
           "cpu_added_us_median": statistics.median(s[5] - p[5] for p, s in pairs),
           "process_cpu_us_plain": statistics.median(p[6] for p, _ in pairs),
           "process_cpu_us_session": statistics.median(s[6] for _, s in pairs),
           "process_cpu_added_us_median": statistics.median(s[6] - p[6] for p, s in pairs),
           "all": [[p[0], s[0]] for p, s in pairs], "all_host_device": [[p[3:7], s[3:7]] for p, s in pairs]}
    for which, at in (("plain", 0), ("session", 1)):  # CPU µs per call by thread, median over the pairs
        names = {n for pair in pairs for n in pair[at][7]}
        row[f"threads_{which}"] = {n: statistics.median(pair[at][7].get(n, 0.0) for pair in pairs) for n in sorted(names)}
    print(f"{label:56s} plain {row['plain_us']:7.1f} session {row['session_us']:7.1f} us/call  "
          f"ratio median {row['ratio_median']:.3f} (quartiles {row['ratio_q1']:.3f}-{row['ratio_q3']:.3f})  "
          f"GC per block {row['gc_ms_plain']:.1f} / {row['gc_ms_session']:.1f} ms, "
          f"{row['gc_runs_plain']:.0f} / {row['gc_runs_session']:.0f} runs; host issue {row['host_us_plain']:.1f} / "
          f"{row['host_us_session']:.1f}, device span {row['device_us_plain']:.1f} / {row['device_us_session']:.1f}, "
          f"CPU thread {row['cpu_us_plain']:.1f} / {row['cpu_us_session']:.1f} (added {row['cpu_added_us_median']:+.1f}), "
          f"process {row['process_cpu_us_plain']:.1f} / {row['process_cpu_us_session']:.1f} "
          f"(added {row['process_cpu_added_us_median']:+.1f}) us/call",
          flush=True)
    print("    CPU µs per call by thread, plain | session: " + ", ".join(
        f"{n} {row['threads_plain'].get(n, 0):.1f} | {row['threads_session'].get(n, 0):.1f}"
        for n in sorted(set(row["threads_plain"]) | set(row["threads_session"]))), flush=True)
    return row


if __name__ == "__main__":
    main()
