#!/usr/bin/env bash
# Call 6 (issue 22, thirty-fifth session): the session's last tree (the metadata's per-CTA columns queued as soon
# as the plan's order is known, where the trace has no intervals; json_values.plain passing plain lists on)
# beside the session's first (exp_old = 0ee9e29), alternating twice; its peak; then the GPU tests that write
# and read traces of scope-less kernels, many launches and torch.compile programs.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do  # each tree's C extension built once, outside the timings
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; assert native_events.module()"
done
for t in exp_old . exp_old .; do
  for s in "lifetimes --repeat 4" "mixed --repeat 16"; do
    echo "== speed $s $t"
    PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape $s --reps 2 --workers 16 \
      | grep -E "cold total|warm total|warm write|phases"
  done
done
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
echo "== memory lifetimesx4 ."; timeout 60 python3 tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_lifetimesx4.plraw --workers 16,4
echo "($SECONDS s)"
rm -rf exp_old
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py tests/test_gpu_inductor_programs.py" NO_BENCH=1 TEST_TIMEOUT=300 bash tests/run_gpu.sh 2>&1 | tail -6
echo "($SECONDS s)"
