#!/usr/bin/env bash
# Call 3 (issue 24): the exit as a call (func) against inline (pass) for kernels without scopes:
# bench.py's three kernels run without their scopes, then fixed_cost.py (liger-kernel's 20 kernels
# and ours), each form its own Triton cache; the caches' cubins come back for the SASS
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
for f in pass func; do
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 150 python3 tests/benchmarks/bench.py --rounds 3 --only lnorm,smax,vadd \
    --scopeless --header-form $f --out $OUT/bench_sl_$f.json > $OUT/bench_sl_$f.txt 2>&1
  python3 -c "
import json
d=json.load(open('$OUT/bench_sl_$f.json'))
print('scopeless $f', ' '.join(f\"{x['kernel'].split()[0]} {x['pl_overhead_pct']:+.2f}% (plain {x['plain_us']:.1f} us)\" for x in d['rows']))" || tail -5 $OUT/bench_sl_$f.txt
done
for f in pass func; do
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 140 python3 tests/benchmarks/fixed_cost.py --rounds 2 --form $f \
    --pin "_dyt_fwd_kernel=BLOCK_N: 2048, num_warps: 4" --out $OUT/fixed_cost_$f.json 2>&1 | grep -E "mean" | sed "s/^/$f /"
done
cd /tmp && find tc_pass tc_func \( -name "*.cubin" -o -name "*.json" \) | tar czf $OUT/caches.tgz -T - ; ls -la $OUT/caches.tgz
