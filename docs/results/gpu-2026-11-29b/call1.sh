# Issue 24 on libraries nobody shaped the instrumentation after: FlagGems, Cut Cross-Entropy,
# SageAttention, flash-linear-attention at production sizes, scope-less, plain / session / Proton.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
git log --oneline -1 2>/dev/null
timeout 560 python3 tests/benchmarks/library_fixed_cost.py --rounds 3 --reps 10 --out $OUT/library_fixed_cost.json 2>&1 \
  | grep -v -i "warn" | tail -80
