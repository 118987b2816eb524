"""The CTA sequence's part size: python cta_parts_ab.py CAP WRITE_THREADS PART_EVENTS CUT_CHUNK
(decode on 16 threads; whole-stop peak over the read capture, write time)"""
import os, resource, sys, time
sys.path.insert(0, os.getcwd())
import proton_lite.decode as D
import proton_lite.trace.cta_sequence as cs
from proton_lite.raw_format import read_raw
from proton_lite.trace.perfetto import write_perfetto
D.DECODE_WORKERS = 16
cs.PART_EVENTS = int(sys.argv[3]); cs.CUT_CHUNK = int(sys.argv[4])
cap = read_raw(sys.argv[1])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
raw = os.path.getsize(sys.argv[1]) / 2**20
p = D.decode(cap)
mid = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = time.perf_counter()
st = write_perfetto(p, "/tmp/dw.pftrace", workers=int(sys.argv[2]))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"write {sys.argv[2]:>2s} part {cs.PART_EVENTS} cut {cs.CUT_CHUNK}: decode peak {(mid-base)/raw:.2f}x, whole {(peak-base)/raw:.2f}x, write {time.perf_counter()-t:.2f} s bytes {st['bytes']}")
