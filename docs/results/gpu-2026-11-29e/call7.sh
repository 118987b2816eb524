#!/usr/bin/env bash
# Call 7 (issue 22, thirty-fifth session): is the 21.3 M-record capture's write slower in this tree (ced71c4) than in
# the session's first (exp_old = 0ee9e29)? Calls 2-6 put it 0.05-0.1 s slower, most of it in the slots phase. Each
# tree in its own process, alternating twice: the plan alone (5 times, warm) and the write (4 times, warm), with phases.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
cat > /tmp/probe.py <<'PY'
import sys, time
from concurrent.futures import ThreadPoolExecutor
import proton_lite.decode as D
from proton_lite.raw_format import read_raw
from proton_lite.trace import plan as P
from proton_lite.trace.perfetto import _sorted_launches, write_perfetto
from proton_lite.trace.native_events import module
module()
p = D.decode(read_raw(sys.argv[1])); launches = _sorted_launches(p)
with ThreadPoolExecutor(16) as pool:
    plans = []
    for i in range(5):
        t = time.perf_counter(); P.plan_trace(p, launches, "auto", pool.map); plans.append(time.perf_counter() - t)
print("plan", " ".join(f"{x:.3f}" for x in plans))
for i in range(4):
    t = time.perf_counter(); st = write_perfetto(p, "/tmp/m.pftrace", workers=16)
    print(f"write {time.perf_counter() - t:.3f}", {k: v for k, v in st["phase_s"].items() if not k.startswith("busy")})
PY
for t in exp_old . exp_old .; do echo "== $t"; PYTHONPATH=/tmp/site:$PWD/$t python3 /tmp/probe.py /tmp/sb/decode_speed_mixedx16.plraw; done
echo "($SECONDS s)"
rm -rf exp_old
