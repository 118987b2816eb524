#!/usr/bin/env bash
# Call 1 (issue 22, thirty-fifth session): the stop of 4.19 M CTA lifetimes on the H200 host's 16 cores,
# this tree (".": the plan's CTA order in C, the metadata's extras by blocks of rows) against the
# session's first (exp_old = 0ee9e29), alternating, with the writer's phases; their peaks; then the
# GPU tests that decode scope-less kernels (the review commit 0ee9e29 had not run on the GPU).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
for t in exp_old . exp_old .; do
  echo "== speed lifetimes $t"
  PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 2 --workers 16 \
    | grep -E "cold total|warm total|warm decode|warm write|phases"
done
for t in exp_old .; do
  echo "== memory lifetimes $t"
  PYTHONPATH=/tmp/site:$PWD/$t timeout 60 python3 $t/tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_lifetimesx4.plraw --workers 16,4 | grep -E "threads"
done
echo "($SECONDS s)"
rm -rf exp_old
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py" NO_BENCH=1 TEST_TIMEOUT=300 bash tests/run_gpu.sh 2>&1 | tail -6
echo "($SECONDS s)"
