"""Host time per call at real scale: plain vs proton-lite vs Triton's Proton, one process (GPU).

What the host-path issue asks to be shown: the wall time per call of realistic call
patterns, not of a tiny grid in a tight loop.  For each case, interleaved rounds of a plain
block, a proton-lite session and a Proton block (Proton started once, activated around its
block); a block warms up, synchronizes, runs ``calls`` calls (synchronizing where the pattern
does) and synchronizes once more; wall time / calls is the number.  A session runs two
blocks: ``pl new`` (its first calls, while its buffer pools grow) and ``pl`` (the next ones,
what a longer session runs at; ``+us`` and ``x`` compare it with plain); records still
waiting for the disk at the end are written by ``stop()``, timed apart (``stop s``).  Cases:

- ``loop``: one row kernel (one CTA per row, like an RMS norm) of 132 to 8,192 CTAs and 4 or
  16 warps, launched back to back, scope-less (proton-lite records each CTA) or with two
  scopes;
- ``step``: a training-like step, two different Triton kernels (a row norm of 4,096 CTAs x 8
  warps and a gated elementwise of 8,192 CTAs x 4 warps) with torch ops between them (a
  matmul, an add), with a synchronize per step or none;
- ``liger``: liger-kernel's rms_norm on 4,096 x 4,096 (4,096 CTAs), forward only and forward +
  backward, synchronized per call or not, when liger-kernel is importable;
- ``heavy``: record-heavy launches, a 64M vector add with two scopes per CTA (1M records per
  launch) and a 4096^3 matmul with a scope per K iteration.

For proton-lite also: bytes copied per launch, the most bytes that waited on the device for
the disk, how long launches waited for it, and how long ``stop()`` took to drain the rest
(the END chunk's ``drain`` record).  For the heavy cases one more session under
torch.profiler gives the copy rate the device-to-host copies reached (their bytes over
their CUPTI durations).

Usage: python tests/benchmarks/host_scale.py [--json FILE] [--rounds 3] [--calls 200] [--only loop,step,...]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))
import proton_lite  # noqa: E402
import proton_lite.language as pl  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
from bench import HAVE_PROTON, ProtonRef, mm, ppl, vadd  # noqa: E402

# PROF: 0 no scopes, 1 proton-lite's, 2 Proton's


@triton.jit
def rownorm(x_ptr, w_ptr, o_ptr, n_cols, eps, BLOCK: tl.constexpr, PROF: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    if PROF == 1:
        pl.enter_scope("load")
    if PROF == 2:
        ppl.enter_scope("load")
    x = tl.load(x_ptr + row * n_cols + cols, mask=m, other=0.0)
    w = tl.load(w_ptr + cols, mask=m, other=0.0)
    if PROF == 1:
        pl.exit_scope("load")
        pl.enter_scope("norm")
    if PROF == 2:
        ppl.exit_scope("load")
        ppl.enter_scope("norm")
    r = tl.rsqrt(tl.sum(x * x, 0) / n_cols + eps)
    tl.store(o_ptr + row * n_cols + cols, x * r * w, mask=m)
    if PROF == 1:
        pl.exit_scope("norm")
    if PROF == 2:
        ppl.exit_scope("norm")


@triton.jit
def gated(a_ptr, b_ptr, o_ptr, n, BLOCK: tl.constexpr, PROF: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    if PROF == 1:
        pl.enter_scope("gate")
    if PROF == 2:
        ppl.enter_scope("gate")
    a = tl.load(a_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs, mask=m)
    tl.store(o_ptr + offs, a * tl.sigmoid(a) * b, mask=m)
    if PROF == 1:
        pl.exit_scope("gate")
    if PROF == 2:
        ppl.exit_scope("gate")


def loop_cases():
    cols = 2048
    w = torch.randn(cols, device="cuda")
    for ctas in (132, 1024, 4096, 8192):
        x = torch.randn(ctas, cols, device="cuda")
        o = torch.empty_like(x)
        for warps in (4, 16):
            for scopes in (False, True):
                def call(p, x=x, o=o, ctas=ctas, warps=warps, scopes=scopes):
                    rownorm[(ctas, )](x, w, o, cols, 1e-6, BLOCK=cols, PROF=p if scopes else 0, num_warps=warps)
                yield (f"loop {ctas} CTAs x {warps} warps, {'2 scopes' if scopes else 'no scopes'}",
                       {"ctas": ctas, "warps": warps}, call, None)


def step_cases():
    rows, cols = 4096, 4096
    x = torch.randn(rows, cols, device="cuda")
    w = torch.randn(cols, device="cuda")
    h = torch.empty_like(x)
    lin = torch.randn(cols, cols, device="cuda", dtype=torch.bfloat16)
    n = 8192 * 1024
    a, b, g = (torch.randn(n, device="cuda") for _ in range(3))
    for sync in (False, True):
        for scopes in (False, True):
            def call(p, sync=sync, scopes=scopes):
                q = 0 if not scopes else p
                rownorm[(rows, )](x, w, h, cols, 1e-6, BLOCK=cols, PROF=q, num_warps=8)
                y = (h.to(torch.bfloat16) @ lin).float().view(-1)[:n]
                gated[(triton.cdiv(n, 1024), )](y, b, g, n, BLOCK=1024, PROF=q, num_warps=4)
                a.add_(g)
                if sync:
                    torch.cuda.synchronize()
            yield (f"step norm+matmul+gate+add, {'sync' if sync else 'no sync'}, "
                   f"{'2+1 scopes' if scopes else 'no scopes'}", {"ctas": rows + n // 1024}, call, None)


def liger_cases():
    try:
        import liger_kernel.transformers.functional as F
    except ImportError as e:
        print(f"liger-kernel not importable: {e}", file=sys.stderr)
        return
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4096, 4096, device="cuda", generator=g).requires_grad_(True)
    w = torch.randn(4096, device="cuda", generator=g).requires_grad_(True)
    grad = torch.randn(4096, 4096, device="cuda", generator=g)
    for backward in (False, True):
        for sync in (False, True):
            def call(p, backward=backward, sync=sync):
                y = F.liger_rms_norm(x, w, 1e-6, in_place=False)
                if backward:
                    y.backward(grad)
                if sync:
                    torch.cuda.synchronize()
            yield (f"liger rms_norm 4096x4096 {'fwd+bwd' if backward else 'fwd'}, {'sync' if sync else 'no sync'}",
                   {"ctas": 4096}, call, None)


def heavy_cases():
    n = 1 << 26
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    o = torch.empty_like(x)
    yield ("heavy vector add 64M, 2 scopes per CTA", {"ctas": n // 1024},
           lambda p: vadd[(triton.cdiv(n, 1024), )](x, y, o, n, BLOCK=1024, PROF=p), 20)
    S = 4096
    a = torch.randn(S, S, device="cuda", dtype=torch.float16)
    b = torch.randn(S, S, device="cuda", dtype=torch.float16)
    c = torch.empty(S, S, device="cuda", dtype=torch.float16)
    grid = ((S // 128) * (S // 128), )

    def per_iter(p):
        mm[grid](a, b, c, S, S, S, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BM=128, BN=128, BK=64, PROF=p, PER_ITER=True, num_warps=8, num_stages=3)
    yield "heavy matmul 4096^3, scope per K iteration", {"ctas": grid[0]}, per_iter, 20


def wall_us(call, p, calls) -> float:
    for _ in range(3):
        call(p)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        call(p)
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def session_block(call, calls, path):
    """(µs per call in a new session, µs per call in the same session's next block, the END
    chunk's drain record, launches, seconds stop() took).  The first block pays for the
    session's pools growing to what the call pattern keeps in flight; the second is what a
    longer session runs at."""
    s = proton_lite.start(path, quiet=True, decode=False, calibrate=False)
    try:
        us = (wall_us(call, 1, calls), wall_us(call, 1, calls))
    finally:
        t0 = time.perf_counter()
        result = proton_lite.stop()
        stop_s = time.perf_counter() - t0
    end = read_raw(result.raw_path).end or {}
    os.remove(result.raw_path)
    del s
    return us[0], us[1], end.get("drain") or {}, result.launches, stop_s


def copy_rate(call, calls, path) -> dict:
    """Device-to-host copy rate of a session's copies: bytes (the END chunk) over their CUPTI time."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with proton_lite.start(path, quiet=True, decode=False, calibrate=False) as s:
            wall_us(call, 1, calls)
    copies = [e for e in prof.events() if "Memcpy DtoH" in e.name]
    busy_us = sum(e.device_time for e in copies)
    drain = (read_raw(s.result.raw_path).end or {}).get("drain") or {}
    os.remove(s.result.raw_path)
    nbytes = drain.get("copied_bytes", 0)
    return {"copies": len(copies), "copy_busy_us": busy_us, "copied_bytes": nbytes,
            "copy_gb_s": nbytes / busy_us / 1e3 if busy_us else None}


def run_case(label, info, call, calls, rounds, tmp, proton_ref):
    t = {"plain": [], "pl": [], "pl_cold": [], "proton": []}
    drains, stops, launches = [], [], 0
    for r in range(rounds):
        t["plain"].append(wall_us(call, 0, calls))
        cold, us, drain, launches, stop_s = session_block(call, calls, os.path.join(tmp, f"s{r}"))
        t["pl"].append(us)
        t["pl_cold"].append(cold)
        drains.append(drain)
        stops.append(stop_s)
        if proton_ref.active and not ("heavy" in label and r):  # Proton syncs and parses every heavy launch
            import triton.profiler as proton
            proton.activate()
            try:
                # Proton copies and parses every launch: fewer calls keep the run short
                t["proton"].append(wall_us(call, 2, max(3, calls // 20)))
            except Exception as e:  # noqa: BLE001
                proton_ref.error = f"{type(e).__name__}: {e}"[:300]
                proton_ref.active = False
            finally:
                proton.deactivate()
    row = {"case": label, **info, "calls": calls, "rounds": rounds, "plain_us": statistics.median(t["plain"]),
           "pl_us": statistics.median(t["pl"]), "pl_cold_us": statistics.median(t["pl_cold"]), "pl_all": t["pl"],
           "plain_all": t["plain"]}
    row["pl_added_us"] = row["pl_us"] - row["plain_us"]
    row["pl_ratio"] = row["pl_us"] / row["plain_us"]
    if t["proton"]:
        row["proton_us"] = statistics.median(t["proton"])
        row["proton_ratio"] = row["proton_us"] / row["plain_us"]
    last = drains[-1]
    row["launches_per_session"] = launches
    row["bytes_per_launch"] = last.get("copied_bytes", 0) / max(1, launches)
    row["peak_backlog_mb"] = max(d.get("peak_device_backlog_bytes", 0) for d in drains) / 2**20
    row["launch_wait_ms"] = statistics.median(d.get("launch_wait_ms", 0) for d in drains)
    row["stop_s"] = statistics.median(stops)
    row["drain"] = drains
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--only", default="loop,step,liger,heavy")
    ap.add_argument("--no-proton", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    proton_ref = ProtonRef(tmp) if HAVE_PROTON and not args.no_proton else None
    if proton_ref is None:
        why = "left out (--no-proton)" if args.no_proton else "triton.profiler not importable"
        proton_ref = type("NoProton", (), {"active": False, "error": why})()
    groups = {"loop": loop_cases, "step": step_cases, "liger": liger_cases, "heavy": heavy_cases}
    rows = []
    header = (f"{'case':62s} {'plain':>8s} {'pl new':>8s} {'pl':>8s} {'+us':>7s} {'x':>5s} {'Proton':>9s} {'x':>6s} "
              f"{'KB/launch':>9s} {'backlog MB':>10s} {'waits ms':>8s} {'stop s':>6s}")
    print(header)
    for group in args.only.split(","):
        for label, info, call, calls in groups[group]():
            n = calls or (args.calls if group == "loop" else max(20, args.calls // 4))
            row = run_case(label, info, call, n, args.rounds, tmp, proton_ref)
            rows.append(row)
            pr = f"{row['proton_us']:9.1f} {row['proton_ratio']:6.2f}" if "proton_us" in row else f"{'-':>9s} {'-':>6s}"
            print(f"{label[:62]:62s} {row['plain_us']:8.1f} {row['pl_cold_us']:8.1f} {row['pl_us']:8.1f} "
                  f"{row['pl_added_us']:7.1f} "
                  f"{row['pl_ratio']:5.2f} {pr} {row['bytes_per_launch'] / 1024:9.1f} {row['peak_backlog_mb']:10.1f} "
                  f"{row['launch_wait_ms']:8.1f} {row['stop_s']:6.2f}", flush=True)
            if group == "heavy":
                row["copy"] = copy_rate(call, n, os.path.join(tmp, "rate"))
                print(f"  copies: {row['copy']['copies']}, {row['copy']['copied_bytes'] / 2**20:.0f} MiB, "
                      f"{row['copy']['copy_gb_s'] or 0:.1f} GB/s while copying", flush=True)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "date": time.strftime("%Y-%m-%d"), "cpus": os.cpu_count(), "proton_error": proton_ref.error, "rows": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if proton_ref.error:
        print("Proton:", proton_ref.error)


if __name__ == "__main__":
    main()
