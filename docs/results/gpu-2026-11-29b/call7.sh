# Issue 24, short CTAs: is the start read by thread 0 alone (pred) better where a kernel's loads are
# scalar? Our tile_gelu (vector loads) and tile_gelu_scalar (the same with scalar loads, as FlagGems'
# block pointers give), pass against pred, two runs alternating.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for run in 1 2; do
  for f in pass pred; do
    echo "== form $f (run $run)"
    TRITON_CACHE_DIR=/tmp/tc_$f timeout 80 python3 tests/benchmarks/fixed_cost.py --no-liger --only tile_gelu,tile_gelu_scalar \
      --rounds 3 --form $f --out $OUT/own_${f}_$run.json 2>&1 | grep -E "^tile"
  done
done
