#!/usr/bin/env bash
# Call 1 (issue 22, thirty-sixth session): this tree (lifetime blocks decoded in one C call per batch, the
# plan's slot rows made in place) beside exp_old (0f09420, the session's first tree), alternating twice: both
# captures' stops, the lifetimes' peak; the viewer (summary of a capture and of its trace) beside exp_v
# (0ee9e29, before the thirty-fifth session's viewer changes); then the GPU tests that decode scope-less
# kernels, many launches and torch.compile programs.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old exp_v .; do  # each tree's C extensions built once, outside the timings
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; from proton_lite import native_decode; assert native_events.module() and native_decode.module()"
done
for t in exp_old . exp_old .; do
  for s in "lifetimes --repeat 4" "mixed --repeat 16"; do
    echo "== speed $s $t"
    PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape $s --reps 2 --workers 16 \
      | grep -E "cold total|warm total|warm decode|warm write|phases"
  done
done
echo "($SECONDS s)"
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
for t in exp_old . exp_old .; do
  echo "== memory lifetimesx4 $t"
  PYTHONPATH=/tmp/site:$PWD/$t timeout 60 python3 $t/tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_lifetimesx4.plraw --workers 16,4
done
echo "($SECONDS s)"
for t in exp_v . exp_v .; do
  for f in lifetimesx4.plraw lifetimesx4.pftrace mixedx16.plraw mixedx16.pftrace; do
    echo "== summary $f $t"
    ( cd $t && PYTHONPATH=/tmp/site:$PWD /usr/bin/time -f "%e s %M KB" timeout 60 python3 -m proton_lite summary /tmp/sb/decode_speed_$f > /tmp/sum_$(basename $t)_$f.txt ) 2>&1 | tail -1
  done
done
for f in lifetimesx4.plraw lifetimesx4.pftrace mixedx16.plraw mixedx16.pftrace; do
  cmp -s /tmp/sum_exp_v_$f.txt /tmp/sum_._$f.txt && echo "same report $f" || echo "REPORTS DIFFER $f"
done
echo "($SECONDS s)"
rm -rf exp_old exp_v
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py tests/test_gpu_inductor_programs.py" NO_BENCH=1 TEST_TIMEOUT=300 bash tests/run_gpu.sh 2>&1 | tail -4
echo "($SECONDS s)"
