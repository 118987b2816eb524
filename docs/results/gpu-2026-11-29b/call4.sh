# Issue 24, short CTAs: FlagGems' pointwise kernels and our tile_gelu without the exit, without the
# entry's reads, with the CTA block's address kept from entry, and with thread 0 spinning at exit.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
for f in pass noexit noentry ublock spin64 spin256; do
  echo "== form $f"
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 60 python3 tests/benchmarks/fixed_cost.py --no-liger --only tile_gelu \
    --rounds 3 --form $f --out $OUT/own_$f.json 2>&1 | grep -E "^tile"
  TRITON_CACHE_DIR=/tmp/tc_$f timeout 100 python3 tests/benchmarks/library_fixed_cost.py --rounds 2 --reps 10 --no-proton \
    --only gems_pointwise --form $f --out $OUT/lib_$f.json 2>&1 | grep -E "^gems" | grep -v "session launches"
done
