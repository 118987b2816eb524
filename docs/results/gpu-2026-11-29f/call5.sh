#!/usr/bin/env bash
# Call 5 (issue 22, thirty-sixth session): as call 4 on the tree whose launch slices (titles, rows, deflate) are a task
# of their own and whose string tables are scattered at once; when the metadata's per-CTA columns are queued in a trace without
# intervals (perfetto.EXTRAS_WHEN: order / plan / events), each in a fresh process, alternating twice, on the
# 4.19 M-lifetime capture and on 65,536 launches of 64 CTAs, 16 threads.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
export PYTHONPATH=/tmp/site:$PWD
python3 -c "from proton_lite.trace import native_events; from proton_lite import native_decode; assert native_events.module() and native_decode.module()"
timeout 100 python3 tests/benchmarks/decode_speed.py --shape steps --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
echo "($SECONDS s)"
for r in 1 2; do
  for c in lifetimesx4 steps; do
    for m in order events; do
      echo "== $c $m"
      timeout 60 python3 docs/results/gpu-2026-11-29f/extras_when.py /tmp/sb/decode_speed_$c.plraw 16 $PWD $m
    done
  done
done
echo "($SECONDS s)"
