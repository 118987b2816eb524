#!/usr/bin/env bash
# Call 2 (issue 22, thirty-fifth session): the stop of 4.19 M CTA lifetimes and of the 21.3 M-record
# capture on the H200 host's 16 cores, this tree (".": the plan's CTA order in C, the metadata's extras by
# blocks of rows, the CTA sequence's parts cut in C) against the session's first (exp_old = 0ee9e29, with
# tests/synth.py this time), alternating, with the writer's phases; then their peaks.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
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
  for c in lifetimesx4 mixedx16; do
    echo "== memory $c $t"
    PYTHONPATH=/tmp/site:$PWD/$t timeout 60 python3 $t/tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_$c.plraw --workers 16
  done
done
echo "($SECONDS s)"
rm -rf exp_old
