#!/usr/bin/env bash
# Issue 24: how much of what a few scopes cost is each record's timer read (noclock: a constant
# stored in its place) or the records at all (norecords: lifetimes only), against pass; forms
# alternating, each its own Triton cache (the forms are swapped in at run time)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
for r in 1 2; do for f in pass noclock norecords; do
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 170 python3 tests/benchmarks/bench.py --rounds 3 --only lnorm,smax,vadd \
    --header-form $f --out $OUT/bench_${f}_$r.json > $OUT/bench_${f}_$r.txt 2>&1
  python3 -c "
import json,sys
d=json.load(open('$OUT/bench_${f}_$r.json'))
print('$f', $r, ' '.join(f\"{x['kernel'].split()[0]} {x['pl_overhead_pct']:+.2f}% (Proton {x['proton_overhead_pct']:+.2f}%, plain {x['plain_us']:.1f} us)\" for x in d['rows']))" || tail -5 $OUT/bench_${f}_$r.txt
done; done
