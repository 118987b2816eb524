"""Host time that a session adds to each launch, and where it goes (GPU needed).

A small kernel (one CTA per launch, two scopes) is launched in bursts with no
synchronization inside a burst, with the session off and on.  With the session on, the
first burst grows the buffer pools; the following bursts are the steady state that a long
session lives in.  Reported: mean host µs per launch call for each, and the difference.
Two more bursts split the steady-state cost: one whose chunks are not written to the raw
file (what the drain thread's writing costs the launching thread through the GIL) and one
with our allocator and exit hook reduced to nothing (what Triton itself adds once hooks
are installed).  With
``--profile``, the time inside our two hooks and a cProfile of steady-state launches.

A last session with ``copy_every=1`` (a copy after every launch) shows what batching saves;
``--calls`` times the driver queries made on every launch.

Usage: python tests/benchmarks/host_overhead.py [--launches 2000] [--profile] [--calls] [--json FILE]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import proton_lite  # noqa: E402
import proton_lite.language as pl  # noqa: E402


@triton.jit
def small(x_ptr, o_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    with pl.scope("load"):
        x = tl.load(x_ptr + offs)
    with pl.scope("store"):
        tl.store(o_ptr + offs, x + 1)


def small_launch():
    """A launch of ``small`` on fresh tensors, compiled once (the kernel every host benchmark times)."""
    x = torch.rand(1024, device="cuda")
    o = torch.empty_like(x)

    def launch():
        small[(1, )](x, o, BLOCK=1024)

    launch()
    return launch


def burst_us(fn, n: int) -> float:
    """Mean host µs of one launch call over ``n`` calls; the GPU is idle before and after."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


def time_inside_hooks(session, launch, n: int) -> dict:
    """Mean µs spent inside proton_lite's allocator and launch hooks per launch (steady state)."""
    from triton import knobs
    from triton.runtime import _allocation
    spent = {"allocate": 0.0, "exit": 0.0}

    def timed(name, fn):
        def wrapper(*args):
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                spent[name] += time.perf_counter() - t
        return wrapper

    installed_alloc, installed_exit = session._hooks._hooks  # the C hooks when they built, else the collector's
    alloc, exit_hook = timed("allocate", installed_alloc), timed("exit", installed_exit)
    _allocation.set_profile_allocator(alloc)
    knobs.runtime.launch_exit_hook.remove(installed_exit)
    knobs.runtime.launch_exit_hook.add(exit_hook)
    try:
        total = burst_us(launch, n)
    finally:
        knobs.runtime.launch_exit_hook.remove(exit_hook)
        knobs.runtime.launch_exit_hook.add(installed_exit)
        _allocation.set_profile_allocator(installed_alloc)
    return {"burst_us": total, **{k: v / n * 1e6 for k, v in spent.items()}}


def burst_without_writes(session, launch, n: int) -> float:
    """A burst whose chunks the drain thread waits for and recycles but does not write (no
    checksum, no file write): the difference to a normal burst is what writing the raw file
    costs the launching thread through the GIL."""
    col = session._collector
    write = col.writer.batch
    col.writer.batch = lambda *args: None
    try:
        return burst_us(launch, n)
    finally:
        col.writer.batch = write


def burst_with_idle_hooks(session, launch, n: int) -> float:
    """A burst with proton_lite's allocator handing out one fixed buffer and its exit hook doing
    nothing: what Triton itself adds for an instrumented kernel with hooks installed (the
    profile-scratch call, launch metadata, the hook calls), without any of our work."""
    from triton import knobs
    from triton.runtime import _allocation
    scratch = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")  # ample for one 1-CTA launch

    def allocate(size, alignment, stream):
        return scratch

    def nothing(metadata):
        return None

    installed_alloc, installed_exit = session._hooks._hooks  # runtime/triton_hooks.TritonHooks
    _allocation.set_profile_allocator(allocate)
    knobs.runtime.launch_exit_hook.remove(installed_exit)
    knobs.runtime.launch_exit_hook.add(nothing)
    try:
        return burst_us(launch, n)
    finally:
        knobs.runtime.launch_exit_hook.remove(nothing)
        knobs.runtime.launch_exit_hook.add(installed_exit)
        _allocation.set_profile_allocator(installed_alloc)


def driver_call_us(n: int = 20000) -> dict:
    """Host µs of the driver queries on the launch path (capture check: Triton's C query where
    this Triton has one, else cuda-python; device: cuda-python), and alternatives."""
    from proton_lite.runtime import cuda_api
    stream = torch.cuda.current_stream().cuda_stream
    calls = {
        "is_capturing_in_use": lambda: cuda_api.stream_is_capturing(stream),
        "is_capturing_cuda_python": lambda: cuda_api.stream_is_capturing_cuda_python(stream),
        "is_capturing_pydll": (lambda q: (lambda: q(stream)) if q else (lambda: None))(
            cuda_api._gil_holding_capture_query()),
        "current_device_in_use": cuda_api.current_device,
        "current_device_cuda_python": cuda_api.current_device_cuda_python,
        "torch_current_device": torch.cuda.current_device,
    }
    out = {}
    for name, fn in calls.items():
        fn()
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out[name] = (time.perf_counter() - t) / n * 1e6
    return out


def res_end_hooks(result) -> dict:
    """Which hooks the session ran (C or Python) and how many launches the C ones served."""
    from proton_lite.raw_format import read_raw
    end = read_raw(result.raw_path).end or {}
    return {"hooks": end.get("host_hooks"), "fast": end.get("host_hooks_fast")}


def session_bursts(launch, n: int, bursts: int, **options) -> tuple[list, object]:
    tmp = tempfile.mkdtemp()
    with proton_lite.start(os.path.join(tmp, "host"), quiet=True, decode=False, calibrate=False, **options) as s:
        launch()
        torch.cuda.synchronize()
        times = [burst_us(launch, n) for _ in range(bursts)]
    return times, s.result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=2000, help="launches per burst")
    ap.add_argument("--bursts", type=int, default=5, help="rounds of plain burst / session bursts")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--calls", action="store_true", help="also time the driver queries of the launch path")
    a = ap.parse_args()
    launch = small_launch()
    # plain bursts and session bursts interleaved, round by round, so that drifts of the
    # machine (clocks, other load) fall on both; each round: plain, then a fresh session's
    # first burst (pools grow) and three more (steady state: their median)
    plain, firsts, steadies = [], [], []
    for _ in range(a.bursts):
        plain.append(burst_us(launch, a.launches))
        times, _res = session_bursts(launch, a.launches, 4)
        firsts.append(times[0])
        steadies.append(statistics.median(times[1:]))
    tmp = tempfile.mkdtemp()
    with proton_lite.start(os.path.join(tmp, "host"), quiet=True, decode=False, calibrate=False) as s:
        launch()  # compile the instrumented kernel outside the timed bursts
        torch.cuda.synchronize()
        bursts = [burst_us(launch, a.launches) for _ in range(3)]
        inside = time_inside_hooks(s, launch, a.launches) if a.profile else {}
        no_writes = burst_without_writes(s, launch, a.launches)
        idle = burst_with_idle_hooks(s, launch, a.launches)
        prof_text = ""
        if a.profile:
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(a.launches):
                launch()
            pr.disable()
            torch.cuda.synchronize()
            buf = io.StringIO()
            pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(30)
            pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(30)
            prof_text = buf.getvalue()
    res = s.result
    out = {
        "device": torch.cuda.get_device_name(), "triton": triton.__version__, "launches_per_burst": a.launches,
        "plain_us": statistics.median(plain), "first_burst_us": statistics.median(firsts),
        "steady_us": statistics.median(steadies), "plain_bursts_us": plain, "first_bursts_us": firsts,
        "steady_bursts_us": steadies, "one_session_bursts_us": bursts,
        "added_steady_per_round_us": [st - p for st, p in zip(steadies, plain)],
        "saved_launches": res.launches, "errors": res.errors, "inside_hooks_us": inside,
        "no_writes_us": no_writes, "idle_hooks_us": idle,
        "host_hooks": res_end_hooks(res),
    }
    every1, res1 = session_bursts(launch, a.launches, 3, copy_every=1)
    out["copy_every_1_steady_us"] = statistics.median(every1[1:])
    out["copy_every_1_saved"] = res1.launches
    every256, _ = session_bursts(launch, a.launches, 3, copy_every=256)
    out["copy_every_256_steady_us"] = statistics.median(every256[1:])
    if a.calls:
        out["driver_calls_us"] = driver_call_us()
    out["added_first_us"] = statistics.median(f - p for f, p in zip(firsts, plain))
    out["added_steady_us"] = statistics.median(out["added_steady_per_round_us"])
    if prof_text:
        print(prof_text)
        if a.json:
            with open(a.json + ".prof.txt", "w") as f:
                f.write(prof_text)
    print(json.dumps(out, indent=1))
    print(f"host µs per launch (medians of {a.bursts} interleaved rounds): plain {out['plain_us']:.1f}, session "
          f"first burst {out['first_burst_us']:.1f} (+{out['added_first_us']:.1f}), steady {out['steady_us']:.1f} "
          f"(+{out['added_steady_us']:.1f}); in one long session: "
          f"drain thread not writing {no_writes:.1f}, our hooks idle (Triton's own share) {idle:.1f}, "
          f"copy_every=1 steady {out['copy_every_1_steady_us']:.1f}, copy_every=256 steady "
          f"{out['copy_every_256_steady_us']:.1f}")
    if inside:
        print(f"inside our allocator {inside['allocate']:.1f} µs, inside our exit hook {inside['exit']:.1f} µs "
              f"(burst {inside['burst_us']:.1f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
