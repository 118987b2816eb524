#!/usr/bin/env bash
# Call 2 (issue 22): call 1 found the write 25-30% slower on 16 threads with pieces near PIECE
# (2^15 intervals) than with the sm layout's whole SM groups (81 k intervals for 21.3 M records).
# Here the write time and the stop's peak per PIECE, a process per run (piece_ab.py: decode, then
# two writes), alternating, with the tree before (exp_old: whole groups) beside.
export PYTHONPATH=$PWD
S=docs/results/gpu-2026-11-28k/piece_ab.py
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 150 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 64 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
for r in 1 2; do
  for P in 32768 65536 131072 262144 old; do
    if [ $P = old ]; then echo "-- exp_old"; timeout 40 python3 $S /tmp/sb/decode_speed_mixedx16.plraw 32768 16 $PWD/exp_old
    else timeout 40 python3 $S /tmp/sb/decode_speed_mixedx16.plraw $P 16; fi
  done
done
echo "(21 M: $SECONDS s)"
for P in 65536 131072 old; do
  if [ $P = old ]; then echo "-- exp_old"; timeout 90 python3 $S /tmp/sb/decode_speed_mixedx64.plraw 32768 16 $PWD/exp_old
  else timeout 90 python3 $S /tmp/sb/decode_speed_mixedx64.plraw $P 16; fi
done
echo "($SECONDS s)"
