"""Kernels users did not write: liger-kernel ops and torch.compile programs, plain vs in a
proton-lite session vs Triton's Proton, one process.

Usage: python tests/benchmarks/library.py [--out library.json] [--rounds 3] [--reps 10] [--inductor-host PAIRS]
Per kernel: the median CUPTI device time (torch.profiler) plain, in a session (scope-less:
only the CTA and warp lifetimes are recorded) and under Proton's instrumentation mode, in
interleaved rounds; per workload: host wall time per call (forward + backward for Liger ops)
plain and in a session.  torch.compile kernels are measured without Proton: its
instrumentation mode does not see them (Inductor compiles in subprocesses and launches
through its static launcher) unless Inductor is configured for it.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench import ProtonRef, kernel_times  # noqa: E402

import proton_lite  # noqa: E402


def host_us(fn, n=30) -> float:
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def inductor_workloads():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4096, 1024, device="cuda", generator=g)
    w = torch.randn(4096, 1024, device="cuda", generator=g)
    ln = torch.nn.LayerNorm(1024, device="cuda")
    lin = torch.nn.Linear(1024, 1024, device="cuda")

    def mlp_step(inp):
        out = torch.nn.functional.gelu(lin(ln(inp))).sum()
        out.backward()
        return out

    xi = torch.randn(2048, 1024, device="cuda", generator=g, requires_grad=True)
    fns = {
        "pointwise": (torch.compile(lambda a, b: torch.relu(a * 2 + b) - torch.sigmoid(a) * b), (x, w)),
        "softmax_sum": (torch.compile(lambda a, b: (torch.softmax(a * b, -1) * b).sum(-1)), (x, w)),
        "layernorm_mlp_fwd_bwd": (torch.compile(mlp_step), (xi, )),
    }
    return {name: (lambda f=f, a=a: f(*a)) for name, (f, a) in fns.items()}


def liger_workloads():
    try:
        import liger_ops
    except ImportError as e:
        print(f"liger-kernel not importable: {e}", file=sys.stderr)
        return {}, set()
    return {op.__name__: (lambda op=op: liger_ops.step(op)) for op in liger_ops.OPS}, liger_ops.liger_kernel_names


def measure(name, call, keep, args, tmp, proton_ref, before_mode=None, host=True):
    """Per kernel (``keep(name)``), the median CUPTI duration plain, in a session and under
    Proton, in ``args.rounds`` interleaved rounds, and the host wall per call plain and in a
    session (``host``); ``before_mode()`` runs as each mode begins (a library's own kernel
    cache emptied, library_fixed_cost.py).  ``session_launches``: the sessions' launches
    recorded, and their counters (those that ran a plain binary among them)."""
    t = {"plain": defaultdict(list), "pl": defaultdict(list), "proton": defaultdict(list)}
    seen = defaultdict(int)
    begin = before_mode or (lambda: None)
    for r in range(args.rounds):
        begin()
        for k, v in kernel_times(call, args.reps, keep).items():
            t["plain"][k] += v
        with proton_lite.start(os.path.join(tmp, f"{name}_{r}"), quiet=True, decode=False,
                               calibrate=False) as session:
            begin()
            for k, v in kernel_times(call, args.reps, keep).items():
                t["pl"][k] += v
        seen["recorded"] += session.result.launches
        for key, n in session.result.counters.items():
            seen[key] += n
        if proton_ref is not None and proton_ref.active:
            import triton.profiler as proton
            proton.activate()
            try:
                begin()
                for k, v in kernel_times(call, args.reps, keep).items():
                    t["proton"][k] += v
            except Exception as e:  # noqa: BLE001
                proton_ref.error = f"{type(e).__name__}: {e}"[:300]
                proton_ref.active = False
            finally:
                proton.deactivate()
    kernels = []
    for k in sorted(t["plain"]):
        row = {"kernel": k, "plain_us": statistics.median(t["plain"][k])}
        if t["pl"].get(k):
            row["pl_us"] = statistics.median(t["pl"][k])
            row["pl_overhead_pct"] = 100 * (row["pl_us"] / row["plain_us"] - 1)
        if t["proton"].get(k):
            row["proton_us"] = statistics.median(t["proton"][k])
            row["proton_overhead_pct"] = 100 * (row["proton_us"] / row["plain_us"] - 1)
        kernels.append(row)
    out = {"workload": name, "kernels": kernels, "session_launches": dict(seen)}
    if host:
        out["host_plain_us"] = host_us(call)
        with proton_lite.start(os.path.join(tmp, f"{name}_host"), quiet=True, decode=False, calibrate=False):
            out["host_pl_us"] = host_us(call)
    return out


def inductor_host(pairs: int, calls: int, out: str) -> None:
    """Only the torch.compile programs' host wall time per call, plain and in a session, in
    ``pairs`` alternating blocks of ``calls`` (a session per block, its first calls not timed):
    every Inductor kernel is marked autotuned, so its launches take the exit hook's trial check."""
    tmp = tempfile.mkdtemp()
    rows = []
    for name, call in inductor_workloads().items():
        host_us(call)  # compiled plain
        with proton_lite.start(os.path.join(tmp, f"{name}_warm"), quiet=True, decode=False, calibrate=False):
            host_us(call)  # and instrumented
        plain, session = [], []
        for k in range(pairs):
            for which in (("plain", "session") if k % 2 == 0 else ("session", "plain")):
                if which == "plain":
                    plain.append(host_us(call, calls))
                else:
                    with proton_lite.start(os.path.join(tmp, f"{name}_{k}"), quiet=True, decode=False,
                                           calibrate=False):
                        call()
                        session.append(host_us(call, calls))
        ratios = sorted(s / p for p, s in zip(plain, session))
        row = {"workload": name, "plain_us": statistics.median(plain), "session_us": statistics.median(session),
               "ratio_median": statistics.median(ratios), "ratios": ratios}
        rows.append(row)
        print(f"{name:28s} host wall per call plain {row['plain_us']:8.1f} us, session {row['session_us']:8.1f} us, "
              f"ratio median {row['ratio_median']:.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})", flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="library.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--inductor-host", type=int, metavar="PAIRS",
                    help="only the torch.compile programs' host time per call, in this many alternating pairs")
    args = ap.parse_args()
    if args.inductor_host:
        return inductor_host(args.inductor_host, 50, args.out)
    tmp = tempfile.mkdtemp()
    proton_ref = ProtonRef(tmp)
    results = []
    liger, liger_names = liger_workloads()
    names = liger_names() if liger else set()
    for name, call in liger.items():
        results.append({"library": "liger-kernel", **measure(name, call, names.__contains__, args, tmp, proton_ref)})
    for name, call in inductor_workloads().items():
        results.append({"library": "torch.compile",
                        **measure(name, call, lambda k: k.startswith("triton_"), args, tmp, None)})
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": __import__("triton").__version__, "rounds": args.rounds, "reps": args.reps,
           "proton_error": proton_ref.error, "results": results}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{'workload':28s} {'kernel':44s} {'plain us':>9s} {'pl %':>7s} {'Proton %':>9s}")
    for res in results:
        for k in res["kernels"]:
            pl_pct = f"{k['pl_overhead_pct']:+.1f}" if "pl_overhead_pct" in k else "-"
            pr_pct = f"{k['proton_overhead_pct']:+.1f}" if "proton_overhead_pct" in k else "-"
            print(f"{res['workload']:28s} {k['kernel'][:44]:44s} {k['plain_us']:9.1f} {pl_pct:>7s} {pr_pct:>9s}")
        print(f"{res['workload']:28s} {'(host wall per call)':44s} {res['host_plain_us']:9.1f} "
              f"{100 * (res['host_pl_us'] / res['host_plain_us'] - 1):+7.1f}")
    if proton_ref.error:
        print("Proton:", proton_ref.error)


if __name__ == "__main__":
    main()
