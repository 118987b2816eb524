# Issue 24, short CTAs: torch.compile programs and FlagGems at production sizes (form pass), then
# FlagGems' pointwise/sum and our tile_gelu (FlagGems' shape) under header_forms.py's forms.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
F="grep -v -i -E warn|isinstance|mask =|assert tgt|ignore_mask"
TRITON_CACHE_DIR=/tmp/tc_pass timeout 200 python3 tests/benchmarks/library_fixed_cost.py --rounds 3 --reps 10 \
  --only inductor_pointwise,inductor_softmax,inductor_layer_norm,gems_pointwise,gems_sum,gems_argmax \
  --out $OUT/lib_pass.json 2>&1 | grep -v -i -E "warn|isinstance|mask =|assert tgt|ignore_mask" | tail -22
for f in pass func empty xnostore; do
  echo "== form $f"
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 60 python3 tests/benchmarks/fixed_cost.py --no-liger --only tile_gelu,gated_silu_fwd \
    --rounds 3 --form $f --out $OUT/own_$f.json 2>&1 | grep -E "^tile|^gated" 
  [ $f = pass ] && continue
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 100 python3 tests/benchmarks/library_fixed_cost.py --rounds 2 --reps 10 --no-proton \
    --only gems_pointwise,gems_sum --form $f --out $OUT/lib_$f.json 2>&1 | grep -E "^gems" | grep -v "session launches"
done
