"""What each kernel in a Triton cache is built as (issue 24, GPU or CPU): its warps, registers,
shared memory, the resident CTAs per SM they allow, and where an instrumented build writes its
CTA header.  A fixed-cost run's forms differ by the kernels' shapes (a loop kernel's start in
shared memory pays where its CTAs are long, or few per SM); this lists the shapes beside the
run's numbers.

Usage: python tests/benchmarks/kernel_census.py CACHE_DIR [CACHE_DIR ...] [--json out.json]
"""
import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from proton_lite.passes.ptx_staging import resident_ctas  # noqa: E402
from proton_lite.passes.register_cap import cubin_registers, ctas_per_sm  # noqa: E402


def census(cache_dir: str) -> list[dict]:
    rows = []
    for meta_path in sorted(glob.glob(os.path.join(cache_dir, "*", "*.json"))):
        if os.path.basename(meta_path).startswith("__grp__"):
            continue
        with open(meta_path) as f:
            meta = json.load(f)
        cubin_path = meta_path[:-len(".json")] + ".cubin"
        if "name" not in meta or not os.path.exists(cubin_path):
            continue
        with open(cubin_path, "rb") as f:
            regs = cubin_registers(f.read()) or 0
        warps, shared = int(meta.get("num_warps", 4)), int(meta.get("shared", 0) or 0)
        pl = meta.get("proton_lite") or {}
        rows.append({"kernel": meta["name"], "warps": warps, "regs": regs, "shared": shared,
                     "resident": min(ctas_per_sm(regs, 32 * warps), resident_ctas(shared, warps)),
                     "cta_header": pl.get("cta_header", "plain") + (f" ({pl['loop_start']})" if pl.get("loop_start") else ""),
                     "scopes": len(pl.get("scopes", []))})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = [dict(r, cache=d) for d in args.dirs for r in census(d)]
    print(f"{'kernel':44s} {'warps':>5s} {'regs':>4s} {'shared':>7s} {'CTAs/SM':>7s} header")
    for r in sorted(rows, key=lambda r: (r["kernel"], r["cta_header"])):
        print(f"{r['kernel'][:44]:44s} {r['warps']:5d} {r['regs']:4d} {r['shared']:7d} {r['resident']:7d} {r['cta_header']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
