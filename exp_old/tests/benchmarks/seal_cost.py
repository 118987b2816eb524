"""What sealing a chunk costs the launching thread, step by step (issue 22; GPU and liger-kernel needed).

With the drain in C (``runtime/drain_native.py``) the launching thread that seals a chunk
takes a pinned buffer and an event, hands the chunk's parts to the C thread and collects the
jobs it finished; with the Python drain threads it only queues the chunk (their cost shows
as waits for the GIL instead, ``launch_where.py``).  This times those steps with
``perf_counter_ns`` wrappers in a loop of liger-kernel's rms_norm forward (4,096 x 4,096, no
synchronization; about 67 launches per 16 MiB chunk) and prints, per step, how often it ran,
its median and its share per call, once with each drain.  The wrappers add ~0.3 µs a step.

Usage (from the repository root): python tests/benchmarks/seal_cost.py [--calls 1000] [--drains C,Python]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import proton_lite  # noqa: E402
from host_scale import liger_cases  # noqa: E402
from proton_lite.runtime import buffers, chunks, collector, cuda_api, drain_native  # noqa: E402

STEPS = [(drain_native.NativeDrain, "_add"), (drain_native.NativeDrain, "collect"),
         (drain_native.NativeDrain, "_prepare"), (drain_native.NativeDrain, "_describe_write"),
         (drain_native.NativeDrain, "_push"), (drain_native.NativeDrain, "_done"),
         (drain_native.NativeDrain, "wait_below"), (chunks.ChunkBook, "_seal"),
         (chunks.ChunkBook, "_new_chunk"), (chunks.ChunkBook, "_take_device"), (chunks.ChunkBook, "_close"),
         (chunks.ChunkBook, "_event"), (chunks.ChunkBook, "_open_spares"),
         (chunks.ChunkBook, "_seal_switched"), (collector.Collector, "_sync"), (cuda_api, "event_record"), (buffers.DevicePool, "take"),
         (buffers._SlabPool, "_grow"), (cuda_api, "mem_alloc"), (cuda_api, "memset_d8_async"),
         (cuda_api, "event_create"),
         (collector.Collector, "allocate"), (collector.Collector, "on_launch_exit")]


def _timed(times: dict, label: str, fn):
    def call(*args, **kwargs):
        t = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            times.setdefault(label, []).append(time.perf_counter_ns() - t)
    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--drains", default="C,Python", help="which drains to run, e.g. C")
    a = ap.parse_args()
    cases = {label: call for label, _, call, _ in liger_cases()}
    call = cases.get("liger rms_norm 4096x4096 fwd, no sync")
    if call is None:
        sys.exit("liger-kernel is not importable: nothing to measure")
    times: dict[str, list[int]] = {}
    for cls, name in STEPS:
        setattr(cls, name, _timed(times, f"{getattr(cls, '__name__', cls)}.{name}".replace("proton_lite.runtime.", ""),
                                  getattr(cls, name)))
    for kind in a.drains.split(","):
        drain_native.ENABLED = kind == "C"
        with proton_lite.start("/tmp/seal_cost", quiet=True, decode=False, calibrate=False) as s:
            for _ in range(50):
                call(1)
            torch.cuda.synchronize()
            times.clear()
            t = time.perf_counter_ns()
            for _ in range(a.calls):
                call(1)
            torch.cuda.synchronize()
            per_call = (time.perf_counter_ns() - t) / a.calls / 1e3
        os.remove(s.result.raw_path)
        print(f"{kind} drain: {per_call:.1f} µs per call (one block, not paired with plain: see launch_where.py)")
        for label, values in sorted(times.items()):
            print(f"   {label:32s} n={len(values):5d}  median {statistics.median(values) / 1e3:7.1f} µs  "
                  f"per call {sum(values) / a.calls / 1e3:6.2f} µs")
            if len(values) <= 30:  # rare steps: each one, in order (the first ones grow the pools)
                print(f"   {'':32s} {' '.join(f'{v / 1e3:.0f}' for v in values)}")


if __name__ == "__main__":
    main()
