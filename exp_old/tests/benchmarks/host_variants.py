"""Host time per launch for variants of the launch path, interleaved round by round (GPU needed).

An analysis tool for the host-time target: each round runs a plain burst and then, for each
variant, a fresh session's bursts (the first grows the pools; the median of the next three
is the steady state), so that the machine's drift falls on all variants alike.  Variants:
``copy_every`` values, and parts of our per-launch work switched off (the autotuner check,
the drain thread's writes) to price them on this machine.

Usage: python tests/benchmarks/host_variants.py [--launches 2000] [--rounds 5] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))
import proton_lite  # noqa: E402
from host_overhead import burst_us, small_launch  # noqa: E402
from proton_lite.runtime import collector as collector_module  # noqa: E402


def variant_bursts(launch, n, options, no_autotune_check=False, no_writes=False):
    tmp = tempfile.mkdtemp()
    saved = collector_module._in_autotuner_benchmark
    if no_autotune_check:
        collector_module._in_autotuner_benchmark = lambda: False
    try:
        with proton_lite.start(os.path.join(tmp, "v"), quiet=True, decode=False, calibrate=False, **options) as s:
            if no_writes:
                s._collector.writer.batch = lambda *a: None
            launch()
            torch.cuda.synchronize()
            times = [burst_us(launch, n) for _ in range(4)]
    finally:
        collector_module._in_autotuner_benchmark = saved
    return times[0], statistics.median(times[1:])


VARIANTS = {
    "default (copy_every=256)": ({}, {}),
    "copy_every=1024": ({"copy_every": 1024}, {}),
    "copy_every=4096": ({"copy_every": 4096}, {}),
    "no autotuner check": ({}, {"no_autotune_check": True}),
    "no raw-file writes": ({}, {"no_writes": True}),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    launch = small_launch()
    plain = []
    steady = {k: [] for k in VARIANTS}
    for _ in range(a.rounds):
        plain.append(burst_us(launch, a.launches))
        for name, (options, switches) in VARIANTS.items():
            steady[name].append(variant_bursts(launch, a.launches, options, **switches)[1])
    p = statistics.median(plain)
    out = {"device": torch.cuda.get_device_name(), "plain_us": p, "plain_bursts": plain,
           "steady_us": {k: statistics.median(v) for k, v in steady.items()}, "steady_bursts": steady}
    print(f"plain {p:.1f} µs per launch (median of {a.rounds} rounds); steady state, added per launch:")
    for k, v in steady.items():
        print(f"  {k:28s} {statistics.median(v) - p:+6.1f} µs   (rounds: {', '.join(f'{t - q:+.1f}' for t, q in zip(v, plain))})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
