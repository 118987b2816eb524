#!/usr/bin/env bash
# Call 10 (issue 22, thirty-fifth session): the session's last tree (3b81840: also the decode's median starts by a
# stable sort and the lifetime blocks expanded in C) beside exp_old (0ee9e29), alternating twice: both captures'
# stops; the lifetimes' peak; then the GPU tests that decode scope-less kernels, many launches and torch.compile programs.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do  # each tree's C extensions built once, outside the timings
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; from proton_lite import native_decode; assert native_events.module() and native_decode.module()"
done
for t in exp_old . exp_old .; do
  for s in "lifetimes --repeat 4" "mixed --repeat 16"; do
    echo "== speed $s $t"
    PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape $s --reps 2 --workers 16 \
      | grep -E "cold total|warm total|warm decode|warm write|phases"
  done
done
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
echo "== memory lifetimesx4 ."; timeout 60 python3 tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_lifetimesx4.plraw --workers 16,4
echo "($SECONDS s)"
rm -rf exp_old
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py tests/test_gpu_inductor_programs.py" NO_BENCH=1 TEST_TIMEOUT=300 bash tests/run_gpu.sh 2>&1 | tail -4
echo "($SECONDS s)"
