#!/usr/bin/env bash
# Call 8 (issue 22, thirty-fifth session): the plan's steps for the 21.3 M-record capture on the H200 host, this tree
# (ced71c4) and exp_old (0ee9e29), alternating: which step makes call 7's plan 0.08-0.1 s slower here.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
for t in exp_old . exp_old .; do echo "== $t"; PYTHONPATH=/tmp/site python3 docs/results/gpu-2026-11-29e/plan_steps.py /tmp/sb/decode_speed_mixedx16.plraw $PWD/$t; done
echo "($SECONDS s)"
rm -rf exp_old
