#!/usr/bin/env bash
# Call 4 (issue 22, thirty-fifth session): as call 3, on the tree that also queues the metadata's per-CTA blocks
# on the writer's pool ahead of the CTA sequence (43a120e); three alternations; then the
# stop's peak, and the Chrome JSON writer on the lifetimes.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do  # each tree's C extension built once, outside the timings
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; assert native_events.module()"
done
for t in exp_old . exp_old . exp_old .; do
  for s in "lifetimes --repeat 4" "mixed --repeat 16"; do
    echo "== speed $s $t"
    PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape $s --reps 2 --workers 16 \
      | grep -E "cold total|warm total|warm write|phases"
  done
done
echo "($SECONDS s)"
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
for t in exp_old . exp_old .; do
  echo "== memory lifetimesx4 $t"
  PYTHONPATH=/tmp/site:$PWD/$t timeout 60 python3 $t/tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_lifetimesx4.plraw --workers 16,4
done
for t in exp_old .; do
  echo "== chrome lifetimes $t"
  PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --format chrome \
    | grep -E "cold total|warm total|warm write"
done
echo "($SECONDS s)"
rm -rf exp_old
