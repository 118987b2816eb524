"""Where a piece's time goes on many threads: python piece_steps.py CAP PIECE WORKERS
Wraps the piece steps with wall and thread-CPU timers (summed over threads), one write."""
import os, resource, sys, threading, time
sys.path.insert(0, os.getcwd())
import proton_lite.decode as D
import proton_lite.trace.perfetto_pieces as pp
import proton_lite.trace.perfetto as pf
from proton_lite.trace import native_events
from proton_lite.raw_format import read_raw
W = int(sys.argv[3])
D.DECODE_WORKERS = W
pp.PIECE = int(sys.argv[2])
acc, lock = {}, threading.Lock()

def wrap(mod, name, label=None):
    f = getattr(mod, name)
    def g(*a, **k):
        t, c = time.perf_counter(), time.thread_time()
        try:
            return f(*a, **k)
        finally:
            dt, dc = time.perf_counter() - t, time.thread_time() - c
            with lock:
                w0, c0, n0 = acc.get(label or name, (0, 0, 0))
                acc[label or name] = (w0 + dt, c0 + dc, n0 + 1)
    setattr(mod, name, g)

wrap(pp, "_nesting"); wrap(pp, "time_order"); wrap(native_events, "encode", "native encode")
wrap(pf, "index_piece"); wrap(pf, "encode_piece")
p = D.decode(read_raw(sys.argv[1]))
ru0 = resource.getrusage(resource.RUSAGE_SELF)
t = time.perf_counter()
st = pf.write_perfetto(p, "/tmp/piece_steps.pftrace", workers=W)
wall = time.perf_counter() - t
ru1 = resource.getrusage(resource.RUSAGE_SELF)
print(f"PIECE {pp.PIECE} pieces {st['pieces']} write {wall:.2f} s; process user {ru1.ru_utime - ru0.ru_utime:.2f} "
      f"sys {ru1.ru_stime - ru0.ru_stime:.2f} s, minor faults {ru1.ru_minflt - ru0.ru_minflt}, "
      f"vol/invol switches {ru1.ru_nvcsw - ru0.ru_nvcsw}/{ru1.ru_nivcsw - ru0.ru_nivcsw}")
for k, (w, c, n) in sorted(acc.items(), key=lambda x: -x[1][0]):
    print(f"  {k:16s} calls {n:6d}  wall {w:7.2f} s  thread cpu {c:7.2f} s  ({1e3 * w / n:.2f} / {1e3 * c / n:.2f} ms a call)")
