"""Replay time of a CUDA graph of three ~50 us kernels, plain vs recorded in a session (GPU).

The graph (tests/graph_kernels.py): a kernel with two scopes per CTA, a grid-stride loop
with a scope per row, a scope-less kernel.  A plain copy of it is captured before the
session (its kernels compiled without instrumentation), the recorded copy inside; both
are replayed in interleaved rounds inside the session, so the machine's state is the same
for both, timed with CUDA events around ``--replays`` replays.  Reported per round: the
median µs per replay of each and their ratio, the replays kept and the overruns (replays
the host did not copy back in time), and what the copy nodes moved.

Proton is not beside it: its instrumentation mode does not record graph replays (only its
CUPTI mode sees graphs, as kernel times without scopes).

Usage: python tests/benchmarks/graphs.py [--n 16777216] [--replays 200] [--rounds 5] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
import triton

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
import graph_kernels as G  # noqa: E402

import proton_lite  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
from proton_lite.runtime import graph_copy, graphs  # noqa: E402


def step(t, n, rows, cols, block, ctas):
    G.scale_scoped[(triton.cdiv(n, block), )](t["x"], t["a"], n, BLOCK=block, num_warps=8)
    G.grid_stride_sum[(ctas, )](t["m"], t["b"], rows, cols, BLOCK=cols, num_warps=4)
    G.add_plain[(triton.cdiv(n, block), )](t["a"], t["y"], t["c"], n, BLOCK=block, num_warps=8)


def capture(t, args):
    step(t, *args)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step(t, *args)
    torch.cuda.synchronize()
    return g


def timed(g, replays: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / replays


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--rows", type=int, default=1 << 16)
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--block", type=int, default=4096)
    ap.add_argument("--ctas", type=int, default=528)
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--copy-ctas", default="",
                    help="comma-separated: also a recorded graph whose copy nodes use at most this many CTAs "
                         f"(default {graph_copy.MAX_CTAS}), timed in the same rounds")
    ap.add_argument("--leaf-copies", action="store_true",
                    help="also a recorded graph whose copy nodes are leaves (each waits only for its kernel), "
                         "as before they were chained")
    ap.add_argument("--json")
    a = ap.parse_args()
    args = (a.n, a.rows, a.cols, a.block, a.ctas)
    t = {"x": torch.rand(a.n, device="cuda"), "y": torch.rand(a.n, device="cuda"),
         "m": torch.rand(a.rows, a.cols, device="cuda"), "a": torch.empty(a.n, device="cuda"),
         "b": torch.empty(a.rows, device="cuda"), "c": torch.empty(a.n, device="cuda")}
    plain = capture(t, args)
    for _ in range(3):
        timed(plain, 20)
    out = tempfile.mkdtemp()
    rows = []
    with proton_lite.start(os.path.join(out, "graphs"), quiet=True, formats=(), calibrate=False) as s:
        os.environ["PROTON_LITE_GRAPH_NO_COPY"] = "1"  # the instrumented kernels without copy nodes
        bare = capture(t, args)
        del os.environ["PROTON_LITE_GRAPH_NO_COPY"]
        recorded = capture(t, args)
        variants = {}
        for ctas in [int(c) for c in a.copy_ctas.split(",") if c]:
            default, graph_copy.MAX_CTAS = graph_copy.MAX_CTAS, ctas
            variants[ctas] = capture(t, args)
            graph_copy.MAX_CTAS = default
        if a.leaf_copies:
            graphs.CHAIN_COPIES = False
            variants["as leaves"] = capture(t, args)
            graphs.CHAIN_COPIES = True
        timed(recorded, 20)
        timed(bare, 20)
        extra = {ctas: [] for ctas in variants}
        for r in range(a.rounds):
            p = timed(plain, a.replays)
            b = timed(bare, a.replays)
            q = timed(recorded, a.replays)
            rows.append((p, q, b))
            for ctas, g in variants.items():
                extra[ctas].append(timed(g, a.replays) / p)
            print(f"round {r}: plain {p:8.1f} us/replay  session {q:8.1f}  ratio {q / p:.3f}  (instrumented "
                  f"kernels without copy nodes {b / p:.3f})" +
                  "".join(f"; copy nodes {c} {v[-1]:.3f}" for c, v in extra.items()), flush=True)
    end = read_raw(s.result.raw_path).end
    g = end["graphs"]
    g["nodes"] = [n for n in g["nodes"] if n["replays"]]  # the bare graph's launches have no copy node
    ratio = statistics.median(q / p for p, q, _ in rows)
    bare_ratio = statistics.median(b / p for p, _, b in rows)
    slot_mb = [n["slot_bytes"] / 2**20 for n in g["nodes"]]
    replays = (a.rounds * a.replays + 20) * len(g["nodes"])
    print(f"median ratio {ratio:.3f} (goal <= 1.05; kernels alone {bare_ratio:.3f}); plain "
          f"{statistics.median(p for p, _, _ in rows):.1f} us/replay; "
          f"replay launches kept {g['recorded']:,} of {replays:,}, overruns {g['overruns']:,}; "
          f"slot MiB per node {', '.join(f'{m:.2f}' for m in slot_mb)}; slots {[n['slots'] for n in g['nodes']]}")
    for ctas, v in extra.items():
        print(f"copy nodes {ctas} (CTAs at most, or as leaves): median ratio {statistics.median(v):.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "rounds": rows, "median_ratio": ratio, "kernels_alone_ratio": bare_ratio,
                       "copy_ctas_ratios": {str(c): v for c, v in extra.items()}, "graphs": g,
                       "device": torch.cuda.get_device_name()}, f, indent=1)


if __name__ == "__main__":
    main()
