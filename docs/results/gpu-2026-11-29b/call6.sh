# Issue 24, short CTAs: the start read by warp 0 alone (warp0) or thread 0 (pred) against pass, on
# FlagGems' pointwise kernels and our tile_gelu, two runs of each form alternating.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for run in 1 2; do
  for f in pass warp0 pred; do
    echo "== form $f (run $run)"
    TRITON_CACHE_DIR=/tmp/tc_$f timeout 60 python3 tests/benchmarks/fixed_cost.py --no-liger --only tile_gelu \
      --rounds 2 --form $f --out $OUT/own_${f}_$run.json 2>&1 | grep -E "^tile"
    TRITON_CACHE_DIR=/tmp/tc_$f timeout 100 python3 tests/benchmarks/library_fixed_cost.py --rounds 2 --reps 10 --no-proton \
      --only gems_pointwise --form $f --out $OUT/lib_${f}_$run.json 2>&1 | grep -E "^gems" | grep -v "session launches"
  done
done
