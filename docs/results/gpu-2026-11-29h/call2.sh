#!/usr/bin/env bash
# Call 2 (issue 22, thirty-eighth session): the stop's memory on many threads. This tree (every array our
# threads make, and every large block our C extensions take, mapped on its own and unmapped when freed:
# fresh_memory.worker_pool, native_build.FRESH_C) beside exp_old (156000d), alternating: the peak of the decode
# and of the whole stop (decode_memory.py) for 21.3 M records and 4.19 M CTA lifetimes on 16 and 4 threads; the
# stop's speed on 16 threads (decode_speed.py); then the GPU tests that run the stop.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do  # each tree's C extensions built once, outside the timings
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events, readback_c; from proton_lite import native_decode, fresh_memory as F; assert native_events.module() and native_decode.module(); print(getattr(F, '_HEAP', None) and F._HEAP.module())"
done
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/sb
timeout 120 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb | grep -E "warm total"
timeout 120 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb | grep -E "warm total"
echo "($SECONDS s)"
for t in exp_old . exp_old .; do
  for c in mixedx16 lifetimesx4; do
    echo "== memory $c $t"
    PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_$c.plraw --workers 16,4
  done
done
echo "($SECONDS s)"
for t in exp_old . exp_old .; do
  for s in "lifetimes --repeat 4" "mixed --repeat 16"; do
    echo "== speed $s $t"
    PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape $s --reps 2 --workers 16 \
      | grep -E "cold total|warm decode|warm write|warm total"
  done
done
echo "($SECONDS s)"
rm -rf exp_old
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py" NO_BENCH=1 TEST_TIMEOUT=200 bash tests/run_gpu.sh 2>&1 | tail -4
echo "($SECONDS s)"
