# The .pftrace write timed (3 passes in one process after a decode) with perfetto.EXTRAS_WHEN = argv[4] for the tree
# at argv[3] on the capture argv[1] with argv[2] threads, with the writer's phases (thirty-sixth session, call 4).
import sys, time
sys.path.insert(0, sys.argv[3])
import proton_lite.decode as D
import proton_lite.trace.perfetto as PF
from proton_lite.raw_format import read_raw
W = int(sys.argv[2]); D.DECODE_WORKERS = W
PF.EXTRAS_WHEN = sys.argv[4]
p = D.decode(read_raw(sys.argv[1]))
for i in range(3):
    t = time.perf_counter(); st = PF.write_perfetto(p, "/tmp/early.pftrace", workers=W); tw = time.perf_counter() - t
    print(f"{sys.argv[4]} write {tw:.3f}", {k: round(v, 3) for k, v in st["phase_s"].items()})
