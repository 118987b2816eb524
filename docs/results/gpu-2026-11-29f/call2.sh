#!/usr/bin/env bash
# Call 2 (issue 22, thirty-sixth session): captures of many small launches. This tree (2fe473b: per-launch costs
# out of the read, decode, write and summary) beside exp_old (0f09420, the session's first tree), alternating
# twice: 65,536 launches of 64 CTAs (decode_speed.py --shape steps, BATCH chunks) and the 4.19 M-lifetime capture,
# decode and write in one process (stop_phases.py); `summary` of the steps capture and its trace; then the GPU
# tests that decode lifetimes, many launches and graph replays.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; from proton_lite import native_decode; assert native_events.module() and native_decode.module()"
done
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape steps --reps 1 --workers 16 --keep /tmp/sb | grep -E "capture|warm total"
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
echo "($SECONDS s)"
for t in exp_old . exp_old .; do
  for c in steps lifetimesx4; do
    echo "== stop $c $t"
    PYTHONPATH=/tmp/site timeout 60 python3 docs/results/gpu-2026-11-29f/stop_phases.py /tmp/sb/decode_speed_$c.plraw 16 $PWD/$t
  done
done
echo "($SECONDS s)"
for t in exp_old . exp_old .; do
  for f in steps.plraw steps.pftrace; do
    echo "== summary $f $t"
    ( cd $t && PYTHONPATH=/tmp/site:$PWD /usr/bin/time -f "%e s %M KB" timeout 60 python3 -m proton_lite summary /tmp/sb/decode_speed_$f > /tmp/sum_$(basename $t)_$f.txt ) 2>&1 | tail -1
  done
done
for f in steps.plraw steps.pftrace; do cmp -s /tmp/sum_exp_old_$f.txt /tmp/sum_._$f.txt && echo "same report $f" || echo "REPORTS DIFFER $f"; done
echo "($SECONDS s)"
rm -rf exp_old
OUT=$OUT TESTS="tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py tests/test_gpu_graphs.py tests/test_gpu.py" NO_BENCH=1 TEST_TIMEOUT=300 bash tests/run_gpu.sh 2>&1 | tail -4
echo "($SECONDS s)"
