#!/usr/bin/env bash
# Call 9 (issue 22, thirty-fifth session): the session's last tree (e058005: the plan's passes over the intervals on
# the pool again) beside exp_old (0ee9e29), alternating: both captures' stops, then the plan's steps on the
# 21.3 M-record capture.
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
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
for t in exp_old .; do echo "== plan $t"; PYTHONPATH=/tmp/site python3 docs/results/gpu-2026-11-29e/plan_steps.py /tmp/sb/decode_speed_mixedx16.plraw $PWD/$t | grep plan; done
echo "($SECONDS s)"
rm -rf exp_old
