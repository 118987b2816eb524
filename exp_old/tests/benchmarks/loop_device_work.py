"""What the device does in a loop of calls, plain against a session (issue 22; GPU).

``liger_pairs.py`` says how much longer a loop that does not synchronize takes in a session
and whether the host or the device bounds it; this says what the device spent the time on:
each kernel's count and summed duration, the copies and memsets (ours among them), and the
device's idle time between them, from CUPTI through ``torch.profiler``, for one block of each
(the plain block first, then the session block, then both again).

Usage: python tests/benchmarks/loop_device_work.py [--ops 32] [--calls 100] [--only layer_norm] [--json FILE]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))
import proton_lite  # noqa: E402
from liger_pairs import ops_cases  # noqa: E402


def device_work(call, calls: int) -> dict:
    """Per kind of device work (kernel name, Memcpy, Memset): count and µs per call; the span
    from the first event's start to the last's end, and the idle time inside it."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call(1)
        torch.cuda.synchronize()
    spans = []
    kinds = collections.defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        start, dur = ev.time_range.start, ev.time_range.elapsed_us()
        spans.append((start, start + dur))
        name = ev.name
        name = "Memcpy " + name.split()[1] if name.startswith("Memcpy") else \
            "Memset" if name.startswith("Memset") else name
        kinds[name][0] += 1
        kinds[name][1] += dur
    spans.sort()
    busy, end = 0.0, None
    for s, e in spans:  # union of the intervals (copies may overlap kernels)
        if end is None or s > end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    span = spans[-1][1] - spans[0][0] if spans else 0.0
    return {"span_us": span / calls, "idle_us": (span - busy) / calls,
            "kinds": {k: {"count": c / calls, "us": us / calls} for k, (c, us) in
                      sorted(kinds.items(), key=lambda kv: -kv[1][1])}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=32, metavar="SCALE")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--only", default="layer_norm", help="the ops whose label contains one of these (A|B)")
    ap.add_argument("--json")
    a = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, call in ops_cases(a.ops):
            if not any(o in label for o in a.only.split("|")):
                continue
            for _ in range(a.warm):
                call(1)
            for rnd in range(2):
                plain = device_work(call, a.calls)
                with proton_lite.start(os.path.join(tmp, f"s{rnd}"), quiet=True, decode=False, calibrate=False):
                    for _ in range(a.warm):
                        call(1)
                    session = device_work(call, a.calls)
                out.append({"case": label, "round": rnd, "plain": plain, "session": session})
                print(f"{label} round {rnd}: device span per call plain {plain['span_us']:.1f} us "
                      f"(idle {plain['idle_us']:.1f}), session {session['span_us']:.1f} (idle {session['idle_us']:.1f})")
                names = list(dict.fromkeys(list(plain["kinds"]) + list(session["kinds"])))
                for n in names:
                    p, s = plain["kinds"].get(n, {"count": 0, "us": 0}), session["kinds"].get(n, {"count": 0, "us": 0})
                    print(f"   {n[:60]:60s} per call: {p['count']:.2f} x {p['us']:8.2f} us | "
                          f"{s['count']:.2f} x {s['us']:8.2f} us")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
