# The plan's steps timed (warm, 4 passes, a pool of 16) for the tree at argv[2] on the capture argv[1] (call 8).
import sys, time, functools
root = sys.argv[2]; sys.path.insert(0, root)
import numpy as np, proton_lite.decode as D
from proton_lite.raw_format import read_raw
from concurrent.futures import ThreadPoolExecutor
import proton_lite.trace.plan as P, proton_lite.trace.tree as T, proton_lite.trace.rows as R
from proton_lite.trace.perfetto import _sorted_launches
D.DECODE_WORKERS = 2
p = D.decode(read_raw(sys.argv[1])); pool = ThreadPoolExecutor(16)
launches = _sorted_launches(p)
times = {}
def wrap(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: times[name] = times.get(name, 0) + time.perf_counter() - t
    setattr(mod, name, g)
for mod, names in [(P, ["choose_layout", "top_groups", "_cta_layout", "slot_layout", "_launch_rank"]), (R, ["cta_extents", "_pack_slots_in_parts", "_in_group_parts"])]:
    for n in names: wrap(mod, n)
if hasattr(P, "cta_order_c"):
    wrap(P.cta_order_c, "launch_ranks"); wrap(T.cta_order_c, "cta_order")
for i in range(4):
    times.clear(); t = time.perf_counter(); plan = P.plan_trace(p, launches, "auto", pool.map); print(root, f"plan {time.perf_counter()-t:.3f}", plan.layout)
    print("   ", {k: round(v, 3) for k, v in times.items()})
