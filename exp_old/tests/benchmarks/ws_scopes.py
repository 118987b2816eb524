"""What recording the scopes of a warp-specialized loop costs on the device (issue 29), GPU.

Triton splits these loops into a TMA-load partition and MMA partitions; proton-lite places
each scope in the partitions that do its work (passes/ws_scopes.py), so every producer warp
records its loads' scope and every consumer warp its dot's, every iteration. Kernels:
tests/ws_kernels.py's TMA matmul (4096^3, 128x128x64 tiles: 1,024 CTAs, 64 iterations) and
attention-like loop (8,192 keys, 64-wide blocks: 128 CTAs, 128 iterations; also without warp
specialization, to tell what the records cost from what their placement costs), plain (outside a
session: the plain binary) vs recorded (in a session), by CUPTI kernel durations
(torch.profiler) in interleaved rounds, one process. Proton's instrumentation mode does not
see proton-lite's scopes; where it has none to record it runs the plain binary, so it is
not run here.

Usage: python tests/benchmarks/ws_scopes.py [--json FILE] [--rounds 5] [--reps 20]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench import kernel_times  # noqa: E402

import proton_lite  # noqa: E402
import ws_kernels as W  # noqa: E402


def workloads():
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    g = torch.Generator(device="cuda").manual_seed(0)
    M = N = K = 4096
    a = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=g)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16, generator=g)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    n_ctx, d = 8192, 64
    q, k, v = (torch.randn(n_ctx, d, device="cuda", dtype=torch.float16, generator=g) / 4 for _ in range(3))
    o = torch.empty_like(q)
    return {
        "ws_matmul": lambda: W.ws_matmul[((M // 128) * (N // 128), )](a, b, c, M, N, K, SCOPES=True, num_warps=4,
                                                                        **W.WS_MATMUL_CONST),
        "ws_attention": lambda: W.ws_attention[(n_ctx // W.WS_ATTENTION_CONST["BM"], )](
            q, k, v, o, n_ctx, SCOPES=True, num_warps=4, **W.WS_ATTENTION_CONST),
        # the same loop and scopes without warp specialization: what the records cost there
        "ws_attention (WS=False)": lambda: W.ws_attention[(n_ctx // W.WS_ATTENTION_CONST["BM"], )](
            q, k, v, o, n_ctx, SCOPES=True, WS=False, num_warps=4, **W.WS_ATTENTION_CONST),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    rows = []
    for name, call in workloads().items():
        kernel = name.split(" ")[0]
        keep = (lambda n, kernel=kernel: n == kernel)
        plain, pl, dropped = [], [], 0
        for r in range(args.rounds):
            plain += kernel_times(call, args.reps, keep).get(kernel, [])
            with proton_lite.start(os.path.join(tmp, f"{name}_{r}"), quiet=True, formats=(),
                                   calibrate=False) as s:
                pl += kernel_times(call, args.reps, keep).get(kernel, [])
            dropped += s.result.dropped
        row = {"kernel": name, "plain_us": statistics.median(plain), "pl_us": statistics.median(pl),
               "records_per_launch": s.result.records // max(1, s.result.launches), "dropped": dropped}
        row["overhead_pct"] = 100 * (row["pl_us"] / row["plain_us"] - 1)
        rows.append(row)
        print(f"{name:24s} plain {row['plain_us']:8.1f} us  recorded {row['pl_us']:8.1f} us  "
              f"{row['overhead_pct']:+6.2f}%  {row['records_per_launch']:,} records per launch, dropped {dropped}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "triton": triton.__version__, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
