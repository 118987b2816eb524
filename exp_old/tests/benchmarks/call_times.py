"""Where a session's added time per call lies in time: on every call, or on a few (issue 22; GPU).

``liger_pairs.py`` gives the ratio of a block's mean; this says whether the added time is a
constant per call (the hooks, Triton's launch metadata) or sits on the few calls that switch
chunks or go through the Python hooks.  Each call of a block is timed alone
(``perf_counter_ns`` around it, no synchronize between calls), plain and session blocks in
pairs, alternating which runs first.  In a session each call is also tagged with what the
hooks did during it: an allocation or an exit hook that went to the Python hooks (a switch
there, a trial check, or another slow path; ``Collector.allocate`` and ``on_launch_exit``
counted), else a chunk switch in C (``FastPath.switches``), or neither.

Printed per workload: the median and mean per call of plain and session blocks, and the
session's added mean split into the *typical call* (median minus plain's median) and the
*tails* (what the mean adds over the median, less plain's own); then the tagged calls'
count and mean.

Usage: python tests/benchmarks/call_times.py [--pairs 8] [--calls 400] [--warm 20] [--only TEXT] [--ops 32] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import proton_lite  # noqa: E402
from host_scale import liger_cases  # noqa: E402
from launch_loops import workloads  # noqa: E402
from liger_pairs import ops_cases  # noqa: E402
from proton_lite.runtime import collector as collector_module  # noqa: E402

_python_hooks = [0]  # allocations and exit hooks the Python hooks served (the C hooks' slow paths call them)


def _counted(method):
    def call(self, *args, **kwargs):
        _python_hooks[0] += 1
        return method(self, *args, **kwargs)
    return call


collector_module.Collector.allocate = _counted(collector_module.Collector.allocate)
collector_module.Collector.on_launch_exit = _counted(collector_module.Collector.on_launch_exit)

pc = time.perf_counter_ns


def plain_block(fn, calls: int) -> list[int]:
    times = [0] * calls
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    for i in range(calls):
        t = pc()
        fn()
        times[i] = pc() - t
    torch.cuda.synchronize()
    return times


WARM = {"calls": 20}  # session calls before a block is timed (--warm)


def session_block(fn, calls: int) -> tuple[list[int], list[str]]:
    """Per-call ns and what the C hooks did in each call ("c-switch", "python", "")."""
    times, tags = [0] * calls, [""] * calls
    with proton_lite.start("/tmp/call_times", quiet=True, decode=False, calibrate=False) as s:
        fp = s._hooks.fastpath
        for _ in range(WARM["calls"]):
            fn()
        torch.cuda.synchronize()
        switches, python = (fp.switches() if fp is not None else 0), _python_hooks[0]
        for i in range(calls):
            t = pc()
            fn()
            times[i] = pc() - t
            sw = fp.switches() if fp is not None else 0
            tags[i] = "python" if _python_hooks[0] != python else ("c-switch" if sw != switches else "")
            switches, python = sw, _python_hooks[0]
        torch.cuda.synchronize()
    os.remove(s.result.raw_path)
    return times, tags


def summary(name: str, plains: list[list[int]], sessions: list[tuple[list[int], list[str]]]) -> dict:
    us = 1e-3
    p_med = statistics.median(statistics.median(b) for b in plains) * us
    p_mean = statistics.median(statistics.mean(b) for b in plains) * us
    s_med = statistics.median(statistics.median(b) for b, _ in sessions) * us
    s_mean = statistics.median(statistics.mean(b) for b, _ in sessions) * us
    out = dict(workload=name, plain_median_us=p_med, plain_mean_us=p_mean, session_median_us=s_med,
               session_mean_us=s_mean, typical_added_us=s_med - p_med,
               tails_added_us=(s_mean - s_med) - (p_mean - p_med), tags={})
    all_times = [t for b, _ in sessions for t in b]
    all_tags = [g for _, tags in sessions for g in tags]
    n_blocks = len(sessions)
    for tag in ("c-switch", "python", ""):
        sel = [t * us for t, g in zip(all_times, all_tags) if g == tag]
        if sel:
            out["tags"][tag or "none"] = dict(calls_per_block=len(sel) / n_blocks, mean_us=statistics.mean(sel),
                                               median_us=statistics.median(sel))
    print(f"{name:34s} plain median {p_med:6.1f} mean {p_mean:6.1f} | session median {s_med:6.1f} mean {s_mean:6.1f} us"
          f" | added: typical call {s_med - p_med:+5.1f}, tails {out['tails_added_us']:+5.1f}", flush=True)
    for tag, d in out["tags"].items():
        print(f"{'':34s}   calls tagged {tag:9s}: {d['calls_per_block']:7.1f} per block, mean {d['mean_us']:8.1f}"
              f" median {d['median_us']:7.1f} us", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--only", default="", help="comma-separated: the workloads whose name contains one of them")
    ap.add_argument("--warm", type=int, default=20, help="calls in each session before its block is timed")
    ap.add_argument("--ops", type=int, metavar="SCALE",
                    help="instead: liger_pairs.py's ops of tests/liger_ops.py (forward + backward, rows x SCALE)")
    ap.add_argument("--json")
    a = ap.parse_args()
    WARM["calls"] = a.warm
    if a.ops:
        work = {label: (lambda call=call: call(1)) for label, call in ops_cases(a.ops)}
    else:
        work = {name: fn for name, (fn, _) in workloads(liger=True).items()}
        for label, _, call, _ in liger_cases() or ():
            if "no sync" in label:
                work[label + " (autograd)"] = (lambda call=call: call(1))
    results = []
    for name, fn in work.items():
        if a.only and not any(part in name for part in a.only.split(",")):
            continue
        session_block(fn, 50)  # compiles the instrumented binaries
        plains, sessions = [], []
        for k in range(a.pairs):
            if k % 2 == 0:
                plains.append(plain_block(fn, a.calls))
                sessions.append(session_block(fn, a.calls))
            else:
                sessions.append(session_block(fn, a.calls))
                plains.append(plain_block(fn, a.calls))
        results.append(summary(name, plains, sessions))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
