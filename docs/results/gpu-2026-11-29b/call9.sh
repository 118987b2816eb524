# Issue 24, short CTAs: FlagGems' gelu kernel launched directly on our inputs and on gelu(x * y + 1)'s
# input (the values FlagGems gives it), as shipped, two runs.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for run in 1 2; do
  for only in flaggems_gelu flaggems_gelu_xy1; do
    TRITON_CACHE_DIR=/tmp/tc_pass timeout 80 python3 tests/benchmarks/fixed_cost.py --no-liger --only $only \
      --rounds 3 --out $OUT/${only}_$run.json 2>&1 | grep -E "^flag"
  done
done
