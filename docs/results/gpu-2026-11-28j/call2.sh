#!/usr/bin/env bash
# Call 2 (issue 24, few scopes): which part of the scoped build's per-warp exit costs the 3-5
# points that norecords shows over the kernels without scopes. bench.py --header-form F for
# pass / xunitnotime (units' end times left zero) / xunitnostore (no unit header stores) /
# xnocopy (no copy of staged records at exit), alternating twice, each its own Triton cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
for r in 1 2; do for f in pass xunitnotime xunitnostore xnocopy; do
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 140 python3 tests/benchmarks/bench.py --rounds 3 --only lnorm,smax,vadd \
    --header-form $f --out $OUT/bench_${f}_$r.json > $OUT/bench_${f}_$r.txt 2>&1
  python3 -c "
import json,sys
d=json.load(open('$OUT/bench_${f}_$r.json'))
print('$f', $r, ' '.join(f\"{x['kernel'].split()[0]} {x['pl_overhead_pct']:+.2f}% (Proton {x['proton_overhead_pct']:+.2f}%, plain {x['plain_us']:.1f} us)\" for x in d['rows']))" || tail -5 $OUT/bench_${f}_$r.txt
  echo "  ($SECONDS s)"
done; done
