# Issue 24, pass 22 candidates: where thread 0 keeps a loop kernel's start (PROTON_LITE_LOOP_START):
# entry (pass 21: the header at entry), pair64 (the 64-bit pair in registers), halves (the low
# halves in registers), shared (the pair in shared memory), two runs of each alternating.
# PART=own: the lifetimes GPU test, our loop kernels and FlagGems'; PART=liger: liger-kernel's ops
# with loops.  FORMS overrides the list.  Then what each kernel is built as (kernel_census.py).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
PART=${PART:-own}
FORMS=${FORMS:-entry pair64 halves shared}
if [ "$PART" = own ]; then
  timeout 150 python3 -m pytest -m gpu -q --no-header -p no:cacheprovider -rfE tests/test_gpu_lifetimes.py \
    --junitxml=$OUT/lifetimes.xml 2>&1 | tail -4
fi
for run in 1 2; do
  for f in $FORMS; do
    echo "== form $f (run $run)"
    export PROTON_LITE_LOOP_START=$f TRITON_CACHE_DIR=/tmp/tc_$f
    if [ "$PART" = own ]; then
      timeout 70 python3 tests/benchmarks/fixed_cost.py --no-liger --rounds 2 \
        --only row_cross_entropy,persistent_row_sum,dyt_bwd,tile_gelu_loop,grad_weight_2d \
        --out $OUT/own_${f}_$run.json 2>&1 | grep -E "^(row|pers|dyt|tile|grad)"
      timeout 100 python3 tests/benchmarks/library_fixed_cost.py --rounds 2 --reps 10 --no-proton \
        --only gems_pointwise,gems_sum,gems_argmax --out $OUT/lib_${f}_$run.json 2>&1 | grep -E "^gems" \
        | grep -v "session launches"
    else
      timeout 140 python3 tests/benchmarks/fixed_cost.py --rounds 2 \
        --only cross_entropy,fused_linear_cross_entropy,layer_norm,rms_norm,group_norm,dyt,kl_div,jsd \
        --out $OUT/liger_${f}_$run.json 2>&1 | grep -E "^(cross|fused|layer|rms|group|dyt|kl|jsd|liger)"
    fi
  done
done
unset PROTON_LITE_LOOP_START
python3 tests/benchmarks/kernel_census.py $(for f in $FORMS; do echo /tmp/tc_$f; done) --json $OUT/census.json \
  | grep -v " plain$" | sort -u
