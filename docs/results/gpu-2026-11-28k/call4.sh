#!/usr/bin/env bash
# Call 4 (issue 22): the writer's pieces wait on the GIL (call 3: the same CPU time with 4x the
# pieces, 3x the voluntary switches, steps waiting 3-5x their CPU): write time and peak per
# PIECE and writer threads (the decode on 16), 21.3 M records, alternating; 85 M records for two.
export PYTHONPATH=$PWD
S=docs/results/gpu-2026-11-28k/piece_ab.py
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 150 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 64 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
for r in 1 2; do
  for c in "32768 8" "65536 8" "65536 16" "98304 16" "131072 8"; do
    timeout 40 python3 $S /tmp/sb/decode_speed_mixedx16.plraw $c | head -1
  done
done
echo "(21 M: $SECONDS s)"
for c in "65536 8" "98304 16"; do timeout 90 python3 $S /tmp/sb/decode_speed_mixedx64.plraw $c | head -1; done
echo "($SECONDS s)"
