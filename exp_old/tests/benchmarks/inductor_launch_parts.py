"""Where a session's host time per torch.compile launch goes (issue 22; GPU and torch needed).

``library.py --inductor-host`` measured +8-13 µs a launch for Inductor's kernels in a session,
two to three times a liger launch's.  This takes it apart, for the same programs:
  - per block of calls, alternating, plain and in a session: host wall and the launching
    thread's CPU per call, launches per call, and how many of the collector's hooks ran in
    Python per launch (the C hooks' slow paths call them);
  - the session again with the trial check off (the set of autotuned JIT functions emptied for
    the block: Inductor marks all its kernels autotuned, so each launch is checked), and with
    the check walking every launch's frames as before the trial gate (``trials.unwatch()``
    for the block);
  - a deterministic profile (cProfile) of one plain and one session block: the Python
    functions whose time per call differs most, with their calls per call.

Usage: python tests/benchmarks/inductor_launch_parts.py [--pairs 4] [--calls 200] [--json FILE]
       [--no-static] (compile plain kernels with Triton's launcher, as a session does)
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
import proton_lite  # noqa: E402
from launch_loops import block  # noqa: E402
from library import inductor_workloads  # noqa: E402
from proton_lite.runtime import collector as collector_module, trials  # noqa: E402

_python_hooks = {"allocate": 0, "on_launch_exit": 0}


def _counted(name):
    method = getattr(collector_module.Collector, name)

    def call(self, *args, **kwargs):
        _python_hooks[name] += 1
        return method(self, *args, **kwargs)
    setattr(collector_module.Collector, name, call)


_counted("allocate")
_counted("on_launch_exit")
TMP = tempfile.mkdtemp()


def timed(fn, calls: int) -> tuple[float, float]:
    """(wall µs, launching thread's CPU µs) per call, after one call not timed."""
    fn()
    return block(fn, calls)


def session_block(fn, calls: int, trial_check: bool = True, gate: bool = True) -> dict:
    with proton_lite.start(os.path.join(TMP, "parts"), quiet=True, decode=False, calibrate=False) as s:
        fn()
        torch.cuda.synchronize()
        saved = set(collector_module._AUTOTUNED)
        if not trial_check:
            collector_module._AUTOTUNED.clear()
        if not gate:
            trials.unwatch()
        fp = s._hooks.fastpath
        walks0 = fp.trial_walks() if fp is not None else 0
        try:
            before = dict(_python_hooks)
            launches0 = s._collector.launches
            wall, cpu = timed(fn, calls)
            launches = s._collector.launches - launches0
            walks = (fp.trial_walks() if fp is not None else 0) - walks0
        finally:
            collector_module._AUTOTUNED.update(saved)
            if not gate:
                trials.watch()
    os.remove(s.result.raw_path)
    per = max(launches, 1)
    return {"wall": wall, "cpu": cpu, "launches_per_call": launches / (calls + 1),
            "python_alloc_per_launch": (_python_hooks["allocate"] - before["allocate"]) / per,
            "python_exit_per_launch": (_python_hooks["on_launch_exit"] - before["on_launch_exit"]) / per,
            "walks_per_launch": walks / per, "gate": s._hooks.trial_gate}


def profile_block(fn, calls: int, session: bool) -> dict:
    """{(file, line, function): (calls per call, own µs per call)} from cProfile."""
    prof = cProfile.Profile()

    def run():
        fn()
        torch.cuda.synchronize()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
        torch.cuda.synchronize()
    if session:
        with proton_lite.start(os.path.join(TMP, "prof"), quiet=True, decode=False, calibrate=False) as s:
            run()
        os.remove(s.result.raw_path)
    else:
        run()
    stats = pstats.Stats(prof).stats
    return {(os.path.basename(k[0]), k[1], k[2]): (v[1] / calls, v[2] / calls * 1e6) for k, v in stats.items()}


def profile_diff(plain: dict, session: dict, top: int = 18) -> list[dict]:
    rows = []
    for key in set(plain) | set(session):
        pc, pt = plain.get(key, (0.0, 0.0))
        sc, st = session.get(key, (0.0, 0.0))
        rows.append({"function": f"{key[0]}:{key[1]}({key[2]})", "plain_calls": pc, "session_calls": sc,
                     "plain_us": pt, "session_us": st, "added_us": st - pt})
    rows.sort(key=lambda r: -abs(r["added_us"]))
    return rows[:top]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--no-static", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.no_static:
        torch._inductor.config.use_static_cuda_launcher = False
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": __import__("triton").__version__, "static_launcher": not a.no_static, "workloads": []}
    for name, call in inductor_workloads().items():
        timed(call, 5)  # compiled plain
        session_block(call, 5)  # and instrumented
        blocks = {"plain": [], "session": [], "session, walks (no gate)": [], "session, no trial check": []}
        for k in range(a.pairs):
            order = list(blocks) if k % 2 == 0 else list(reversed(blocks))
            for which in order:
                if which == "plain":
                    wall, cpu = timed(call, a.calls)
                    blocks[which].append({"wall": wall, "cpu": cpu})
                else:
                    blocks[which].append(session_block(call, a.calls, trial_check="no trial" not in which,
                                                       gate="no gate" not in which))
        row = {"workload": name}
        for which, got in blocks.items():
            row[which] = {key: statistics.median(b[key] for b in got) for key in got[0]}
            # against the plain block of the same round: drifts of the host's speed cancel
            row[which]["ratio"] = statistics.median(b["wall"] / p["wall"] for b, p in zip(got, blocks["plain"]))
        launches = row["session"]["launches_per_call"]
        print(f"{name}: {launches:.1f} launches a call", flush=True)
        for which in blocks:
            r = row[which]
            extra = "" if which == "plain" else (f"  Python hooks per launch: allocate {r['python_alloc_per_launch']:.2f},"
                                                 f" exit {r['python_exit_per_launch']:.2f}; walks {r['walks_per_launch']:.2f}")
            print(f"  {which:26s} wall {r['wall']:8.1f} us/call (x{r['ratio']:.3f})  thread CPU {r['cpu']:8.1f}{extra}",
                  flush=True)
        plain_prof, session_prof = profile_block(call, a.calls, False), profile_block(call, a.calls, True)
        row["profile"] = profile_diff(plain_prof, session_prof)
        print(f"  cProfile, per call: {'function':70s} {'calls p/s':>11s} {'own us p/s':>14s}")
        for r in row["profile"]:
            print(f"    {r['function'][:86]:86s} {r['plain_calls']:5.1f}/{r['session_calls']:5.1f}"
                  f" {r['plain_us']:6.2f}/{r['session_us']:6.2f}", flush=True)
        out["workloads"].append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
