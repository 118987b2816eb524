"""The .pftrace's deflate on the CPU (no GPU needed): ``trace/deflate.py``'s encoder against
zlib at level 1 (what the writer used before), on the packets of a real trace.

Builds ``decode_speed.py``'s synthetic capture (``--shape``, ``--repeat``), writes its trace
without deflating, cuts the packets into the writer's 1 MiB batches and deflates each with
both, alternating over ``--rounds``; every batch is checked to inflate back.  Prints MB/s
of input per core and the size ratio.

Usage: python tests/benchmarks/deflate_speed.py [--shape mixed] [--repeat 1] [--rounds 3]
"""
import argparse
import os
import sys
import tempfile
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from decode_speed import build_capture  # noqa: E402

from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
from proton_lite.trace import native_events  # noqa: E402
from proton_lite.trace.perfetto import write_perfetto  # noqa: E402
from proton_lite.trace.perfetto_pieces import MAX_RAW_BATCH  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="mixed")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    mod = native_events.module()
    if mod is None:
        sys.exit(f"the C extension did not build: {native_events.error()}")
    with tempfile.TemporaryDirectory() as tmp:
        raw, out = os.path.join(tmp, "c.plraw"), os.path.join(tmp, "t.pftrace")
        build_capture(raw, a.shape, 1, a.repeat)
        write_perfetto(decode(read_raw(raw)), out, compress=False, workers=1)
        with open(out, "rb") as f:
            data = f.read()
    batches = [data[i:i + MAX_RAW_BATCH] for i in range(0, len(data), MAX_RAW_BATCH)]
    for b in batches:
        assert zlib.decompress(mod.deflate(b)) == b
    coders = {"zlib level 1": lambda b: zlib.compress(b, 1), "trace/deflate.py": mod.deflate}
    times = {k: [] for k in coders}
    sizes = {}
    for _ in range(a.rounds):
        for name, fn in coders.items():
            t = time.perf_counter()
            sizes[name] = sum(len(fn(b)) for b in batches)
            times[name].append(time.perf_counter() - t)
    print(f"{len(data) / 1e6:.1f} MB of packets ({a.shape} x{a.repeat}) in {len(batches)} batches, best of {a.rounds}:")
    for name in coders:
        best = min(times[name])
        print(f"  {name:18s} {len(data) / best / 1e6:6.0f} MB/s per core   -> {sizes[name] / 1e6:6.1f} MB "
              f"(x{len(data) / sizes[name]:.2f})")


if __name__ == "__main__":
    main()
