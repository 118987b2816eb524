#!/usr/bin/env bash
# Call 7 (issue 22): as committed (797262a: pieces cut inside SM groups where the rows are apart in
# time, PIECE 2^16, the event order in C) against the tree before (exp_old = 1a50673: whole SM groups in the sm
# layout), 16 threads, alternating: decode_memory.py (21.3 M, 85 M, persistent) and the stop's
# time (decode_speed.py, 21.3 M records, cold and warm).
export PYTHONPATH=$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 150 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 64 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 60 python3 tests/benchmarks/decode_speed.py --shape persistent --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
mem() { echo "== $(basename $1) $2"; timeout $3 python3 $2/tests/benchmarks/decode_memory.py $1 --workers 16 | grep -E "decode |then"; }
for r in 1 2; do for t in exp_old .; do mem /tmp/sb/decode_speed_mixedx16.plraw $t 60; done; done
for t in exp_old .; do mem /tmp/sb/decode_speed_mixedx64.plraw $t 120; done
for t in exp_old .; do mem /tmp/sb/decode_speed_persistent.plraw $t 60; done
echo "(memory: $SECONDS s)"
for r in 1 2; do for t in exp_old .; do
  echo "== speed $t"
  timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 \
    | grep -E "cold (decode|write|total)|warm (write|total)|phases"
done; done
echo "($SECONDS s)"
