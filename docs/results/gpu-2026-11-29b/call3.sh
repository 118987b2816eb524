# Issue 24, short CTAs: where FlagGems' pointwise kernels' 4-6% goes (header_forms.py's forms), and
# the torch.compile programs that call2 lost to a weak proxy.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for f in pass cs2r clockonly pred xnogt; do
  echo "== form $f"
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 100 python3 tests/benchmarks/library_fixed_cost.py --rounds 2 --reps 10 --no-proton \
    --only gems_pointwise --form $f --out $OUT/lib_$f.json 2>&1 | grep -E "^gems" | grep -v "session launches"
done
TRITON_CACHE_DIR=/tmp/tc_pass timeout 150 python3 tests/benchmarks/library_fixed_cost.py --rounds 3 --reps 10 \
  --only inductor_softmax,inductor_layer_norm,gems_sum,gems_argmax \
  --out $OUT/lib_more.json 2>&1 | grep -E "^(inductor|gems|torch|Flag)" | grep -v "session launches"
