"""Write time and peak of one PIECE (a process per run): python piece_ab.py CAP PIECE WORKERS [TREE]
(the decode on 16 threads, the writer on WORKERS)"""
import os, resource, sys, time
sys.path.insert(0, sys.argv[4] if len(sys.argv) > 4 else os.getcwd())
import proton_lite.decode as D
import proton_lite.trace.perfetto_pieces as pp
from proton_lite.raw_format import read_raw
from proton_lite.trace.perfetto import write_perfetto
W = int(sys.argv[3])
D.DECODE_WORKERS = 16
pp.PIECE = int(sys.argv[2])
cap = read_raw(sys.argv[1])
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
raw = os.path.getsize(sys.argv[1]) / 2**20
p = D.decode(cap)
for i in range(2):
    t = time.perf_counter()
    st = write_perfetto(p, "/tmp/piece_ab.pftrace", workers=W)
    w = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ph = st["phase_s"]
    print(f"PIECE {pp.PIECE:>7d} threads {W:2d} pass {i}: write {w:5.2f} s pieces {st['pieces']:4d} peak {(peak - base) / raw:4.2f}x "
          f"index {ph.get('index', 0):.2f} events {ph.get('events', 0):.2f} busy_pieces {ph.get('busy_pieces', 0):.1f} "
          f"bytes {st['bytes']}")
