# The stop's decode and .pftrace write timed in one process (3 passes, the first cold) for the tree at argv[3]
# on the capture argv[1] with argv[2] threads, with the writer's phases; the trace written to argv[4]
# (thirty-seventh session: the traces of two trees compared byte for byte).
import sys, time
sys.path.insert(0, sys.argv[3])
import proton_lite.decode as D
from proton_lite.raw_format import read_raw
from proton_lite.trace.perfetto import write_perfetto
W = int(sys.argv[2])
D.DECODE_WORKERS = W
cap = read_raw(sys.argv[1])
for i in range(3):
    t = time.perf_counter(); p = D.decode(cap); td = time.perf_counter() - t
    t = time.perf_counter(); st = write_perfetto(p, sys.argv[4], workers=W); tw = time.perf_counter() - t
    print(f"decode {td:.3f} write {tw:.3f}", {k: round(v, 3) for k, v in st["phase_s"].items()})
