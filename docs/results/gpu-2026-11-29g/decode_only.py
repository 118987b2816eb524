# The decode alone, 3 passes in one process (the first cold), for the tree at argv[3] on the capture argv[1]
# with argv[2] threads; then the process's peak growth over the read capture (thirty-seventh session, call 2).
import os, resource, sys, time
sys.path.insert(0, sys.argv[3])
import proton_lite.decode as D
from proton_lite.raw_format import read_raw
D.DECODE_WORKERS = int(sys.argv[2])
cap = read_raw(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
times = []
for i in range(3):
    t = time.perf_counter(); p = D.decode(cap); times.append(time.perf_counter() - t); del p
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
raw = os.path.getsize(sys.argv[1]) / 2**20
print("decode " + " ".join(f"{t:.3f}" for t in times) + f" s; peak +{peak - before:.0f} MiB ({(peak - before) / raw:.2f}x "
      f"the {raw:.0f} MiB capture)")
