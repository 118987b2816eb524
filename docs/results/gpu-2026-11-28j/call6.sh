#!/usr/bin/env bash
# Call 6 (issue 24, loop kernels): liger's layer norm (its backward's loop is scheduled
# otherwise by Triton 3.6's ptxas when the CTA header is written at entry and the unit header
# at exit; loop_schedule_ablation.py) and DyT, with the header written once at exit
# (header_forms.py's "exit" form: the start's low halves kept across the loop) against pass
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
for f in pass exit; do
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 95 python3 tests/benchmarks/fixed_cost.py --rounds 2 --form $f --only layer_norm,dyt \
    --out $OUT/fixed_cost_$f.json 2>&1 | grep -E "_kernel|mean" | sed "s/^/$f /"
  echo "($SECONDS s)"
done
