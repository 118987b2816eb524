"""Do the GPUs of this machine share one %globaltimer, and how well does an anchor pin it
to the host clock? (issue 27: one axis for several GPUs and ranks)

Probes every GPU ``--rounds`` times, alternating (runtime/clock_probe.py), and prints per
GPU the offset to the host's CLOCK_REALTIME (median, spread) and the anchors' uncertainty;
with two or more GPUs, the difference of each GPU's offset to GPU 0's. Needs a GPU.

    python tests/benchmarks/clock_anchors.py --rounds 20 --json out.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from proton_lite.runtime import clock_probe, cuda_api  # noqa: E402
from proton_lite.runtime.cuda_api import check, cu  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    check(cu.cuInit(0), "cuInit")
    n = int(check(cu.cuDeviceGetCount(), "cuDeviceGetCount"))
    contexts = {d: check(cu.cuDevicePrimaryCtxRetain(cu.CUdevice(d)), "cuDevicePrimaryCtxRetain") for d in range(n)}
    cuda_api.set_context(contexts[0])
    rows = {d: [] for d in range(n)}
    t_start = time.time_ns()
    for _ in range(args.rounds):
        for a in clock_probe.probe_devices(contexts, "bench"):
            rows[a["device"]].append(a)
    elapsed_s = (time.time_ns() - t_start) / 1e9
    out = {"devices": n, "rounds": args.rounds, "elapsed_s": elapsed_s, "per_device": {}}
    print(f"{n} GPU(s), {args.rounds} probes each over {elapsed_s:.2f} s")
    print(f"{'GPU':>4} {'offset (median)':>20} {'spread':>10} {'uncert. (median)':>17} {'round trip':>11}  errors")
    for d, anchors in rows.items():
        good = [a for a in anchors if "error" not in a]
        offs = [a["offset_ns"] for a in good]
        unc = [a["uncertainty_ns"] for a in good]
        trip = [a["median_round_trip_ns"] for a in good]
        row = {"offset_median_ns": statistics.median(offs) if offs else None,
               "offset_spread_ns": (max(offs) - min(offs)) if offs else None,
               "uncertainty_median_ns": statistics.median(unc) if unc else None,
               "round_trip_median_ns": statistics.median(trip) if trip else None,
               "errors": [a["error"] for a in anchors if "error" in a], "offsets_ns": offs}
        out["per_device"][d] = row
        print(f"{d:>4} {row['offset_median_ns'] or 0:>20,.0f} {row['offset_spread_ns'] or 0:>10,} "
              f"{row['uncertainty_median_ns'] or 0:>17,.0f} {row['round_trip_median_ns'] or 0:>11,.0f}  "
              f"{len(row['errors'])}")
    if n > 1 and rows[0]:
        diffs = {}
        for d in range(1, n):
            pairs = [b["offset_ns"] - a["offset_ns"] for a, b in zip(rows[0], rows[d])
                     if "error" not in a and "error" not in b]
            if pairs:
                diffs[d] = {"median_ns": statistics.median(pairs), "min_ns": min(pairs), "max_ns": max(pairs)}
                print(f"GPU {d} timer minus GPU 0 timer: median {diffs[d]['median_ns']:+,.0f} ns "
                      f"(range {min(pairs):+,} .. {max(pairs):+,} ns over the probes)")
        out["difference_to_gpu0"] = diffs
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
