#!/usr/bin/env bash
# Call 2: the layer norm, softmax and vector add without their scopes in a session (bench.py
# --scopeless, twice), then the per-interval lists A/B (lists-ab/ab.sh) against 5b297a3
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
for r in 1 2; do
  TRITON_CACHE_DIR=/tmp/tc_sl timeout 170 python3 tests/benchmarks/bench.py --rounds 3 --only lnorm,smax,vadd \
    --scopeless --out $OUT/bench_scopeless_$r.json > $OUT/bench_scopeless_$r.txt 2>&1
  python3 -c "
import json
d=json.load(open('$OUT/bench_scopeless_$r.json'))
print('scopeless', $r, ' '.join(f\"{x['kernel'].split()[0]} {x['pl_overhead_pct']:+.2f}% (plain {x['plain_us']:.1f} us)\" for x in d['rows']))" || tail -5 $OUT/bench_scopeless_$r.txt
done
ls exp_old | head -3
timeout 330 bash docs/results/gpu-2026-11-28i/lists-ab/ab.sh
