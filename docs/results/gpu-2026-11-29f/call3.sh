#!/usr/bin/env bash
# Call 3 (issue 22, thirty-sixth session): call 2's stop timings again (its script wrote to a folder missing on
# the device): this tree (2fe473b) beside exp_old (0f09420), alternating twice, decode and write in one process with
# the writer's phases, on 65,536 launches of 64 CTAs and on the 4.19 M-lifetime capture.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; from proton_lite import native_decode; assert native_events.module() and native_decode.module()"
done
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape steps --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
echo "($SECONDS s)"
for t in exp_old . exp_old .; do
  for c in steps lifetimesx4; do
    echo "== stop $c $t"
    PYTHONPATH=/tmp/site timeout 60 python3 docs/results/gpu-2026-11-29f/stop_phases.py /tmp/sb/decode_speed_$c.plraw 16 $PWD/$t
  done
done
echo "($SECONDS s)"
rm -rf exp_old
