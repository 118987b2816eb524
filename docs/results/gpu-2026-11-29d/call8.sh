#!/usr/bin/env bash
# Call 8 (issue 22, thirty-fourth session): the stop's time and peak memory by thread count (decoder
# and writer alike), on the H200 host's 16 cores: is the writer's time worth 16 threads' memory?
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 150 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 3 --workers 16,8,4 --keep /tmp/sb 2>&1 \
  | grep -E "built|threads:|cold total|warm total|warm decode|warm write"
timeout 150 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 3 --workers 16,8 --keep /tmp/sb 2>&1 \
  | grep -E "built|threads:|cold total|warm total|warm decode|warm write"
timeout 100 python3 tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_lifetimesx4.plraw --workers 16,8,4
timeout 100 python3 tests/benchmarks/decode_memory.py /tmp/sb/decode_speed_mixedx16.plraw --workers 16,8
echo "($SECONDS s)"
