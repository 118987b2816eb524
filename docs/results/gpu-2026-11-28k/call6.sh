#!/usr/bin/env bash
# Call 6 (issue 22): a piece's event order in one C call without the GIL (this tree,
# event_order_c.py) against the numpy order (exp_head = 3c54001) and whole groups (exp_old =
# 1a50673): write time and stop peak by PIECE, 16 threads, a process per run, alternating;
# then the 85 M-record capture for the two likeliest PIECEs.
export PYTHONPATH=$PWD
S=docs/results/gpu-2026-11-28k/piece_ab.py
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 150 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 64 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 60 python3 tests/benchmarks/decode_speed.py --shape persistent --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
run() { timeout $1 python3 $S $2 $3 16 $4 2>/dev/null | head -2 | tr "\n" " "; echo; }
for r in 1 2; do
  for P in 16384 32768 65536 131072; do echo -n "C     "; run 40 /tmp/sb/decode_speed_mixedx16.plraw $P; done
  echo -n "numpy "; run 40 /tmp/sb/decode_speed_mixedx16.plraw 65536 $PWD/exp_head
  echo -n "old   "; run 40 /tmp/sb/decode_speed_mixedx16.plraw 32768 $PWD/exp_old
done
echo "(21 M: $SECONDS s)"
for P in 32768 65536; do echo -n "C     "; run 90 /tmp/sb/decode_speed_mixedx64.plraw $P; done
echo -n "numpy "; run 90 /tmp/sb/decode_speed_mixedx64.plraw 65536 $PWD/exp_head
echo "(85 M: $SECONDS s)"
for P in 32768 65536; do echo -n "C     "; run 40 /tmp/sb/decode_speed_persistent.plraw $P; done
echo -n "numpy "; run 40 /tmp/sb/decode_speed_persistent.plraw 65536 $PWD/exp_head
echo -n "old   "; run 40 /tmp/sb/decode_speed_persistent.plraw 32768 $PWD/exp_old
echo "($SECONDS s)"
