"""How the batches of lifetime blocks trade decode time for memory (CPU only): a capture decoded
in a fresh process per setting of ``decode.COMPACT_IN_FLIGHT`` (the bytes of lifetime blocks
that all threads decode at once), best of ``--reps`` decodes, the peak growth over the read
capture, and whether every setting gives the same CTA table byte for byte.

Usage: python tests/benchmarks/decode_batches.py CAPTURE.plraw [--workers 16,8] [--in-flight-mb 16,128]
       (e.g. the 4.19 M-lifetime capture that ``decode_speed.py --shape lifetimes --repeat 4 --keep DIR``
       leaves; 128 MiB over 16 threads is the 8 MiB batches of records, what lifetimes had before)
"""
import argparse
import os
import subprocess
import sys

_CHILD = r"""
import hashlib, resource, sys, time
sys.path.insert(0, sys.argv[1])
import proton_lite.decode as D
from proton_lite.raw_format import read_raw
D.DECODE_WORKERS, D.COMPACT_IN_FLIGHT = int(sys.argv[3]), int(sys.argv[4]) << 20
cap = read_raw(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
best = None
for _ in range(int(sys.argv[5])):
    t = time.perf_counter()
    p = D.decode(cap)
    best = min(best or 1e9, time.perf_counter() - t)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    digest = hashlib.sha256(p.ctas.view('u1')).hexdigest()[:16]  # (no copy)
    del p
print(f"{best:.3f} {peak:.0f} {digest}")
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("--workers", default="16", help="thread counts, e.g. 16,8,4")
    ap.add_argument("--in-flight-mb", default="16,128")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="settings alternate this many times")
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    raw = os.path.getsize(a.capture) / 2**20
    digests = set()
    print(f"{'threads':>7s} {'in flight':>10s} {'decode s':>9s} {'peak MiB':>9s} {'x capture':>9s}  ({raw:.0f} MiB)")
    for _ in range(a.rounds):
        for workers in a.workers.split(","):
            for mb in a.in_flight_mb.split(","):
                r = subprocess.run([sys.executable, "-c", _CHILD, root, a.capture, workers.strip(), mb.strip(),
                                    str(a.reps)], capture_output=True, text=True)
                if r.returncode:
                    print(r.stderr.strip()[-800:])
                    continue
                best, peak, digest = r.stdout.split()
                digests.add(digest)
                print(f"{workers:>7s} {mb + ' MiB':>10s} {float(best):9.3f} {float(peak):9.0f} {float(peak) / raw:9.2f}")
    print("the same CTA table for every setting" if len(digests) == 1 else f"CTA tables differ: {sorted(digests)}")


if __name__ == "__main__":
    main()
