#!/usr/bin/env bash
# Call 5 (issue 22, thirty-eighth session): call 2's mapped blocks with freed mappings kept for reuse, a list
# shared by the threads of at most 32 MiB per extension (native_build.FRESH_KEEP), beside exp_old (850b559, the
# code of 3b8b5e9), alternating twice on 16 threads: the stop's speed (decode_speed.py) and peak (decode_memory.py).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do  # each tree's C extensions built once, outside the timings
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; from proton_lite import native_decode, fresh_memory as F; assert native_events.module() and native_decode.module(); print(getattr(F, '_HEAP', None) and F._HEAP.module())"
done
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/sb
timeout 120 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null
timeout 120 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null
echo "($SECONDS s)"
for round in 1 2; do
  for t in exp_old .; do
    for s in "lifetimes --repeat 4" "mixed --repeat 16"; do
      echo "== speed $s $t"
      PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape $s --reps 2 --workers 16 \
        | grep -E "cold total|warm decode|warm write|warm total"
    done
  done
done
echo "($SECONDS s)"
for t in exp_old . exp_old .; do
  for c in mixedx16 lifetimesx4; do
    echo "== memory $c $t"
    PYTHONPATH=/tmp/site:$PWD/$t timeout 90 python3 $t/tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_$c.plraw --workers 16
  done
done
echo "($SECONDS s)"
