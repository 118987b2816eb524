#!/usr/bin/env bash
# Call 5 (issue 22, thirty-fifth session): where the head of a 4.19 M-lifetime trace waits on the H200 host's
# 16 cores: exp_probe = 43a120e with two more marks in write_perfetto's phases (extras_done: seconds from the
# writer's start until the metadata's per-CTA blocks are joined; meta: the head's wait for the metadata JSON).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
cat > /tmp/ph.py <<'PY'
import sys, time
import proton_lite.decode as D
from proton_lite.raw_format import read_raw
from proton_lite.trace.perfetto import write_perfetto
W = int(sys.argv[2]); D.DECODE_WORKERS = W
cap = read_raw(sys.argv[1])
for i in range(3):
    t0 = time.perf_counter(); p = D.decode(cap); t1 = time.perf_counter()
    st = write_perfetto(p, "/tmp/m.pftrace", workers=W); t2 = time.perf_counter()
    print(f"decode {t1-t0:.2f} trace {t2-t1:.2f}", st["phase_s"])
    del p
PY
for w in 16 8; do echo "== workers $w"; PYTHONPATH=/tmp/site:$PWD/exp_probe python3 /tmp/ph.py /tmp/sb/decode_speed_lifetimesx4.plraw $w; done
echo "($SECONDS s)"
rm -rf exp_probe
