# Issue 24, short CTAs: FlagGems' generated gelu kernel as its generator writes it, launched as a
# plain JIT kernel (no FlagGems), beside our tile kernels: does the kernel's own code pay the 5%?
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for run in 1 2; do
  for f in pass pred; do
    echo "== form $f (run $run)"
    TRITON_CACHE_DIR=/tmp/tc_$f timeout 80 python3 tests/benchmarks/fixed_cost.py --no-liger \
      --only tile_gelu,tile_gelu_scalar,flaggems_gelu --rounds 3 --form $f --out $OUT/own_${f}_$run.json 2>&1 | grep -E "^(tile|flag)"
  done
done
