"""Overhead and cost benchmark on the GPU: plain vs proton-lite (vs Proton when available), one process.

Usage: python tests/benchmarks/bench.py [--out results.json] [--quick]
Kernel times are medians of CUPTI kernel durations (torch.profiler), which exclude the
copy-back and all host work.  Prints a table; writes the raw numbers as JSON.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import proton_lite  # noqa: E402
import proton_lite.language as pl  # noqa: E402,F401  (loops.py takes it from here)
from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from host_overhead import burst_us  # noqa: E402

try:
    import triton.profiler as proton
    import triton.profiler.language as ppl
    HAVE_PROTON = True
except Exception:  # pragma: no cover
    HAVE_PROTON = False
    ppl = None

import importlib.util  # noqa: E402
TRACE_FORMATS = ("perfetto", ) if importlib.util.find_spec("proton_lite.trace.perfetto") else ()

from bench_kernels import lnorm, mm, record_cost, record_stream, smax, vadd  # noqa: E402,F401


def median_scope_cycles(path, scope, launch, **options):
    """Median over units of one scope's cycles, from a session around one launch that keeps
    every record."""
    with proton_lite.start(path, quiet=True, formats=(), **options) as s:
        launch()
    assert s.result.dropped == 0, f"{scope}: {s.result.dropped} records dropped"
    prof = decode(read_raw(s.result.raw_path))
    iv = prof.intervals[prof.intervals["scope"] == prof.kernels[0].scopes.index(scope)]
    return float(np.median(iv["cycles"]))


def kernel_times(fn, reps, keep) -> dict[str, list[float]]:
    """CUPTI kernel durations (torch.profiler) per kernel name (``keep(name)``) over ``reps``
    calls of ``fn``, after one warm-up call; host work excluded.  Events of a profiler that
    does not mark them as CUDA events count when there are no marked ones."""
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if keep(e.name)]
    times = defaultdict(list)
    for e in [e for e in events if e.device_type.name == "CUDA"] or events:
        times[e.name].append(e.device_time)
    return times


def cupti_times_us(fn, name, reps):
    """CUPTI kernel durations (torch.profiler) of ``reps`` launches of ``fn``; host work excluded."""
    return kernel_times(fn, reps, lambda n: n == name).get(name, [])


def host_launch_us(fn, n=20):
    """Mean host time of one launch call, over a burst of ``n`` after one warm-up launch."""
    fn()
    return burst_us(fn, n)


def cases(quick):
    n = (1 << 26) if not quick else (1 << 22)
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    o = torch.empty_like(x)
    S = 4096 if not quick else 1024
    a = torch.randn(S, S, device="cuda", dtype=torch.float16)
    b = torch.randn(S, S, device="cuda", dtype=torch.float16)
    c = torch.empty(S, S, device="cuda", dtype=torch.float16)
    xs = torch.randn(4096, 4096, device="cuda")
    os_ = torch.empty_like(xs)
    yield "vector add 64M fp32", "vadd", lambda p: vadd[(triton.cdiv(n, 1024), )](x, y, o, n, BLOCK=1024, PROF=p), {}
    mmgrid = ((S // 128) * (S // 128), )
    yield "matmul 4096^3 fp16", "mm", lambda p: mm[mmgrid](a, b, c, S, S, S, a.stride(0), a.stride(1), b.stride(
        0), b.stride(1), c.stride(0), c.stride(1), BM=128, BN=128, BK=64, PROF=p, PER_ITER=False, num_warps=8,
                                                            num_stages=3), {}
    def per_iter(p):
        mm[mmgrid](a, b, c, S, S, S, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                   BM=128, BN=128, BK=64, PROF=p, PER_ITER=True, num_warps=8, num_stages=3)

    # default: the K loop's bound is an argument, so its buffer is sized per launch (records
    # staged in shared memory in blocks); with an explicit capacity they are staged whole
    yield "matmul, scope per K iter", "mm", per_iter, {}
    yield "matmul, per K iter, capacity=", "mm", per_iter, {"capacity": 2 * (S // 64) + 4}
    yield "softmax 4096x4096 fp32", "smax", lambda p: smax[(4096, )](xs, os_, xs.stride(0), 4096, BLOCK=4096, PROF=p), {}
    L = 8192 if not quick else 1024
    xl = torch.randn(L, L, device="cuda", dtype=torch.float16)
    yl, wl, bl = torch.empty_like(xl), torch.randn(L, device="cuda"), torch.randn(L, device="cuda")
    yield "layernorm 8192x8192 fp16", "lnorm", lambda p: lnorm[(L, )](xl, yl, wl, bl, xl.stride(0), L, 1e-5, BLOCK=L,
                                                                    PROF=p, num_warps=16), {}


class ProtonRef:
    """Triton's Proton, started once and switched on only around its own timing blocks."""

    def __init__(self, tmp, mode=None):
        self.error = None
        self.active = False
        if not HAVE_PROTON:
            self.error = "triton.profiler not importable"
            return
        try:
            ppl.enable_semantic("triton")
            proton.start(os.path.join(tmp, "proton"), backend="instrumentation", **({"mode": mode} if mode else {}))
            proton.deactivate()
            self.active = True
        except Exception as e:  # noqa: BLE001
            self.error = f"{type(e).__name__}: {e}"[:300]

    def times(self, launch, kname, reps):
        proton.activate()
        try:
            return cupti_times_us(lambda: launch(2), kname, reps)
        finally:
            proton.deactivate()


def overhead_rounds(launch, kname, reps, rounds, tmp, proton_ref, options, pl_prof=1):
    """Interleave plain / proton-lite / Proton blocks so clock and thermal drift hit all alike;
    ``pl_prof`` 0 runs the kernel without its scopes in the session (its CTAs' lifetimes only)."""
    t = {"plain": [], "pl": [], "proton": []}
    for r in range(rounds):
        t["plain"] += cupti_times_us(lambda: launch(0), kname, reps)
        with proton_lite.start(os.path.join(tmp, f"{kname}_r{r}"), quiet=True, decode=False, calibrate=False,
                               **options):
            t["pl"] += cupti_times_us(lambda: launch(pl_prof), kname, reps)
        if proton_ref.active and not options:  # Proton once per kernel, not per proton-lite option
            try:
                t["proton"] += proton_ref.times(launch, kname, reps)
            except Exception as e:  # noqa: BLE001
                proton_ref.error = f"{type(e).__name__}: {e}"[:300]
                proton_ref.active = False
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench.json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10, help="launches per timing block")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved plain/proton-lite/Proton rounds")
    ap.add_argument("--only", help="comma-separated kernels (vadd, mm, smax, lnorm; mm_iter is the per-K matmul): these "
                    "rows only, without the record-cost loops (an A/B of two trees in one run)")
    ap.add_argument("--header-form", choices=("pass", "entry", "u32reads", "globalrec", "noclock", "norecords", "func",
                                                       "inline", "xunitnotime", "xunitnostore", "xnocopy"),
                    default="pass",
                    help="entry: every CTA header at entry, as before pass 17; globalrec: straight-line kernels store "
                    "each record to global memory where it is made (no shared staging, no copy at exit); "
                    "noclock / norecords: diagnoses, each record's timer read a constant / no records; func / inline: kernels "
                    "without scopes (--scopeless) exit through a call / inline (PROTON_LITE_EXIT_CALL=1 / 0; by "
                    "default chosen per kernel); xunitnotime / xunitnostore / xnocopy: diagnoses, each unit's exit without its "
                    "timer reads / its header's stores / its records' copy; "
                    "u32reads: the epilogue's end timer "
                    "from 32-bit halves, which ptxas reads once per warp (header_forms.py; an A/B in one machine: "
                    "give each form its own TRITON_CACHE_DIR, Triton's cache key does not see it)")
    ap.add_argument("--granularity", default=None,
                    help="proton-lite's granularity for every row (default: auto, one record stream per warp); "
                    "cta: one per CTA, 1/num_warps of the record bytes")
    ap.add_argument("--scopeless", action="store_true",
                    help="the session runs each kernel without its scopes (a diagnosis: what the kernel pays for any "
                    "code of ours, its CTAs' lifetimes only)")
    args = ap.parse_args()
    if args.header_form != "pass":
        from header_forms import use_form
        use_form(args.header_form)
    tmp = tempfile.mkdtemp()
    proton_ref = ProtonRef(tmp)
    rows = []
    for label, kname, launch, options in cases(args.quick):
        if args.only and (kname + ("_iter" if "per K" in label else "")) not in args.only.split(","):
            continue
        if args.granularity:
            options = dict(options, granularity=args.granularity)
        row = {"kernel": label, "options": options}
        t = overhead_rounds(launch, kname, args.reps, args.rounds, tmp, proton_ref, options,
                            pl_prof=0 if args.scopeless else 1)
        row["n_per_variant"] = len(t["plain"])
        row["plain_us"] = statistics.median(t["plain"])
        row["pl_us"] = statistics.median(t["pl"])
        row["pl_overhead_pct"] = 100 * (row["pl_us"] / row["plain_us"] - 1)
        if t["proton"]:
            row["proton_us"] = statistics.median(t["proton"])
            row["proton_overhead_pct"] = 100 * (row["proton_us"] / row["plain_us"] - 1)
        # host time added per launch: a burst of launches with the session off, then on
        row["plain_host_us"] = host_launch_us(lambda: launch(0))
        with proton_lite.start(os.path.join(tmp, kname + "_host"), quiet=True, decode=False, calibrate=False,
                               **options):
            row["pl_host_us"] = host_launch_us(lambda: launch(1))
        row["host_added_us"] = row["pl_host_us"] - row["plain_host_us"]
        # stop -> trace on disk, for a session of 2 launches (as in anchors.md)
        s = proton_lite.start(os.path.join(tmp, kname + "_trace"), quiet=True, formats=TRACE_FORMATS, **options)
        launch(1)
        launch(1)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = s.stop()
        row["stop_to_trace_s"] = time.perf_counter() - t0
        row["records"] = res.records
        row["dropped"] = res.dropped
        row["records_per_launch"] = res.records // 2
        prof = decode(read_raw(res.raw_path))
        row["slices"] = int(len(prof.intervals) + len(prof.ctas))
        row["record_cost_cycles"] = prof.session.get("record_cost_cycles")
        if res.trace_paths:
            row["trace_bytes"] = os.path.getsize(res.trace_paths[0])
            row["bytes_per_slice"] = row["trace_bytes"] / max(row["slices"], 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.only:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "triton": triton.__version__, "args": vars(args),
                       "rows": rows, "proton_error": proton_ref.error}, f, indent=1)
        for r in rows:
            print(f"{r['kernel'][:32]:32} plain {r['plain_us']:8.1f} us  proton-lite {r['pl_overhead_pct']:+6.2f}%  "
                  f"Proton {r.get('proton_overhead_pct', float('nan')):+6.2f}%")
        sys.stdout.flush()
        os._exit(0)
    # cycles per record: same loop with and without 2 records per iteration, measured in-kernel;
    # with capacity= the records are staged in shared memory, by default (the loop bound is an
    # argument) the buffer is sized per launch and the records are staged in blocks ("blocks"),
    # or go straight to global memory ("global": PROTON_LITE_FLUSH_SLOTS=0, part of the cache key)
    # longer loop bodies (FMAS dependent FMAs per iteration): "shared_fma8" and so on
    from proton_lite.passes import ptx_staging
    min_per_record = ptx_staging.MIN_INSTRUCTIONS_PER_RECORD
    xr = torch.rand(128, device="cuda")
    loops = {}
    for fmas in (1, 8, 32):
        for staging, opts in (("shared", {"capacity": 2050}), ("blocks", {}), ("global", {})):
            ptx_staging.FLUSH_SLOTS = 0 if staging == "global" else ptx_staging.flush_slots_setting()
            # blocks even for these dense loops, which a session stores to global memory (ptx_staging.py)
            ptx_staging.MIN_INSTRUCTIONS_PER_RECORD = 0 if staging == "blocks" else min_per_record
            res = {inner: median_scope_cycles(os.path.join(tmp, f"rc{staging}{fmas}{int(inner)}"), "loop",
                                              lambda: record_cost[(132, )](xr, 1024, INNER=inner, FMAS=fmas,
                                                                           num_warps=2), **opts)
                   for inner in (False, True)}
            key = staging if fmas == 1 else f"{staging}_fma{fmas}"
            loops[key] = {"cycles_per_record": (res[True] - res[False]) / (2 * 1024), "loop_cycles": res}
    cpr = loops["shared"]["cycles_per_record"]
    # back to back: the stream scope's cycles over the records it spans (as the calibration does)
    stream = median_scope_cycles(os.path.join(tmp, "stream"), "stream", lambda: record_stream[(16, )](PAIRS=16, num_warps=4))
    loops["back_to_back"] = {"cycles_per_record": stream / (2 * 16 + 1), "loop_cycles": {}}
    print(json.dumps(loops))
    out = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d"), "args": vars(args), "rows": rows, "cycles_per_record": cpr,
           "record_loops": {k: {"cycles_per_record": v["cycles_per_record"],
                                "loop_cycles": {str(i): c for i, c in v["loop_cycles"].items()}}
                            for k, v in loops.items()}, "proton_error": proton_ref.error}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\n{'kernel':26} {'plain us':>8} {'p-lite':>8} {'ovh %':>6} {'Proton %':>8} {'rec/launch':>10} "
          f"{'drop':>4} {'stop>trace s':>12} {'B/slice':>7} {'host +us':>8}")
    for r in rows:
        print(f"{r['kernel'][:26]:26} {r['plain_us']:8.1f} {r['pl_us']:8.1f} {r['pl_overhead_pct']:6.2f} "
              f"{r.get('proton_overhead_pct', float('nan')):8.2f} {r['records_per_launch']:10d} {r['dropped']:4d} "
              f"{r['stop_to_trace_s']:12.3f} {r.get('bytes_per_slice', float('nan')):7.1f} "
              f"{r['host_added_us']:8.1f}")
    print(f"cycles per record: {cpr:.2f} (loop, shared staging), "
          f"{loops['blocks']['cycles_per_record']:.2f} / {loops['global']['cycles_per_record']:.2f} (loop, sized at "
          f"launch: blocks / global), "
          f"{loops['back_to_back']['cycles_per_record']:.2f} (back to back); with 8 / 32 FMAs per iteration: "
          f"{loops['shared_fma8']['cycles_per_record']:.2f} / {loops['shared_fma32']['cycles_per_record']:.2f} "
          f"(shared), {loops['blocks_fma8']['cycles_per_record']:.2f} / {loops['blocks_fma32']['cycles_per_record']:.2f}"
          f" (blocks), {loops['global_fma8']['cycles_per_record']:.2f} / {loops['global_fma32']['cycles_per_record']:.2f}"
          f" (global); calibration kernel: "
          f"{[r['record_cost_cycles'] for r in rows]}; Proton: {proton_ref.error or 'ok'}")
    sys.stdout.flush()
    # Proton keeps every launch's data for its trace; writing it would take minutes (anchors.md
    # has its stop->trace times), so leave without finalizing it.
    os._exit(0)


if __name__ == "__main__":
    main()
