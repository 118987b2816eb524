"""Memory of a stop's decode and trace (CPU only): how much a fresh process grows while
``decode`` turns a raw capture into a profile and ``write_perfetto`` writes its trace, against
the capture's size (issue 22: about twice the raw size).

Each worker count runs in a process of its own: the peak resident size after the capture is
read (memory-mapped, checksummed), after the decode and after the trace is written; the
growth over the read capture is the stop's memory, next to what the profile keeps (its
intervals and CTAs).

Usage: python tests/benchmarks/decode_memory.py CAPTURE.plraw [--workers 2,16] [--format chrome]
       (e.g. the 21 M-record capture that ``decode_speed.py --repeat 16 --keep DIR`` leaves)
"""
import argparse
import os
import subprocess
import sys

_CHILD = r"""
import os, resource, sys, time
sys.path.insert(0, sys.argv[3])
import proton_lite.decode as D
from proton_lite.raw_format import read_raw
D.DECODE_WORKERS = int(sys.argv[2])
cap = read_raw(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
profile = D.decode(cap)
seconds = time.perf_counter() - t
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
kept = (profile.intervals.nbytes + profile.ctas.nbytes) / 2**20
raw = os.path.getsize(sys.argv[1]) / 2**20
print(f"{sys.argv[2]:>3s} threads: decode {seconds:5.2f} s, +{after - before:6.0f} MiB over the read capture "
      f"({(after - before) / raw:.2f}x its {raw:.0f} MiB); the profile keeps {kept:.0f} MiB ({kept / raw:.2f}x)")
from proton_lite.trace.chrome import write_chrome
from proton_lite.trace.perfetto import write_perfetto
t = time.perf_counter()
(write_chrome if sys.argv[5] == "chrome" else write_perfetto)(profile, sys.argv[4], workers=int(sys.argv[2]))
seconds = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{'':>3s}          then the trace {seconds:5.2f} s: peak +{peak - before:6.0f} MiB over the read capture "
      f"({(peak - before) / raw:.2f}x)")
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("capture")
    ap.add_argument("--workers", default="2,16")
    ap.add_argument("--format", default="perfetto", choices=("perfetto", "chrome"))
    a = ap.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    for w in a.workers.split(","):
        trace = os.path.splitext(a.capture)[0] + (".memory.json" if a.format == "chrome" else ".memory.pftrace")
        r = subprocess.run([sys.executable, "-c", _CHILD, a.capture, w.strip(), root, trace, a.format],
                           capture_output=True, text=True)
        print(r.stdout.strip() or r.stderr.strip()[-500:])


if __name__ == "__main__":
    main()
