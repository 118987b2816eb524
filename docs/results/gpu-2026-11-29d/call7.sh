#!/usr/bin/env bash
# Call 7 (issue 22, thirty-fourth session): lifetime blocks decoded by at most
# decode.COMPACT_THREADS (8) threads at once, in batches sharing COMPACT_IN_FLIGHT (16 MiB), on
# the H200 host's 16 cores (call 6 chose them: docs/results/gpu-2026-11-29d/call6.txt): the decode
# per setting, then the whole stop's memory and time, and `summary` of the capture.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 200 python3 tests/benchmarks/decode_batches.py /tmp/sb/decode_speed_lifetimesx4.plraw --workers 16,2 \
  --in-flight-mb 16,32,128 --rounds 2 --reps 3
timeout 100 python3 tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_lifetimesx4.plraw --workers 16,2
timeout 150 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 3 --workers 16 2>&1 | tail -6
for i in 1 2; do
  /usr/bin/time -f "summary of the .plraw: %e s, %M KB" python3 -m proton_lite summary /tmp/sb/decode_speed_lifetimesx4.plraw > /dev/null
done
echo "($SECONDS s)"
