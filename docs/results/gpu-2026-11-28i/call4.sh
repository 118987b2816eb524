#!/usr/bin/env bash
# Call 4 (issue 24, pass 21): the exit chosen per kernel (pass) against inline everywhere
# (inline: pass 19's rule), liger-kernel's 20 kernels and ours, and bench.py's layer norm without
# scopes; then the GPU tests of lifetimes, liger ops and torch.compile programs with pass 21
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
for f in pass inline; do
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 130 python3 tests/benchmarks/fixed_cost.py --rounds 2 --form $f \
    --pin "_dyt_fwd_kernel=BLOCK_N: 2048, num_warps: 4" --out $OUT/fixed_cost_$f.json 2>&1 | grep -E "mean" | sed "s/^/$f /"
done
for f in pass inline; do
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 60 python3 tests/benchmarks/bench.py --rounds 3 --only lnorm \
    --scopeless --header-form $f --out $OUT/bench_sl_$f.json > /dev/null 2>&1
  python3 -c "
import json
d=json.load(open('$OUT/bench_sl_$f.json'))
print('scopeless $f', ' '.join(f\"{x['kernel'].split()[0]} {x['pl_overhead_pct']:+.2f}% (plain {x['plain_us']:.1f} us)\" for x in d['rows']))"
done
timeout 200 python3 -m pytest -m gpu -q --no-header -p no:cacheprovider -rfE tests/test_gpu_lifetimes.py tests/test_gpu_liger.py \
  tests/test_gpu_inductor.py tests/test_gpu.py -k "not two_gpu" 2>&1 | tail -6
