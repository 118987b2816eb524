# Issue 24, pass 22 candidate: a loop kernel's start in shared memory (pass), against the header at
# entry (loopentry, pass 21) and the start's halves in thread 0's registers (pred), two runs of each
# form alternating; PART=own: our loop kernels and FlagGems' (the lifetimes GPU test first),
# PART=liger: liger-kernel's ops with loops.  Then what each kernel is built as (kernel_census.py).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
PART=${PART:-own}
if [ "$PART" = own ]; then
  timeout 150 python3 -m pytest -m gpu -q --no-header -p no:cacheprovider -rfE tests/test_gpu_lifetimes.py \
    --junitxml=$OUT/lifetimes.xml 2>&1 | tail -4
fi
for run in 1 2; do
  for f in loopentry pass pred; do
    echo "== form $f (run $run)"
    if [ "$PART" = own ]; then
      TRITON_CACHE_DIR=/tmp/tc_$f timeout 70 python3 tests/benchmarks/fixed_cost.py --no-liger --rounds 2 --form $f \
        --only row_cross_entropy,persistent_row_sum,dyt_bwd,tile_gelu_loop,grad_weight_2d \
        --out $OUT/own_${f}_$run.json 2>&1 | grep -E "^(row|pers|dyt|tile|grad)"
      TRITON_CACHE_DIR=/tmp/tc_$f timeout 100 python3 tests/benchmarks/library_fixed_cost.py --rounds 2 --reps 10 --no-proton \
        --only gems_pointwise,gems_sum,gems_argmax --form $f --out $OUT/lib_${f}_$run.json 2>&1 | grep -E "^gems" \
        | grep -v "session launches"
    else
      TRITON_CACHE_DIR=/tmp/tc_$f timeout 140 python3 tests/benchmarks/fixed_cost.py --rounds 2 --form $f \
        --only cross_entropy,fused_linear_cross_entropy,layer_norm,rms_norm,group_norm,dyt,kl_div,jsd \
        --out $OUT/liger_${f}_$run.json 2>&1 | grep -E "^(cross|fused|layer|rms|group|dyt|kl|jsd|liger|autotuned)"
    fi
  done
done
python3 tests/benchmarks/kernel_census.py /tmp/tc_loopentry /tmp/tc_pass --json $OUT/census.json | grep -v " plain$" | sort -u
