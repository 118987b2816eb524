#!/usr/bin/env bash
# Call 1 (issue 22, the stop's memory): pieces that begin inside an SM group wherever the rows
# spanning the cut are apart in time (this tree) against the tree before (exp_old = 1a50673),
# 16 threads, alternating: decode_memory.py on the 21.3 M- and 85 M-record captures; the
# persistent launch against 92ce0c5 (exp_p: before any cut inside a group; gpu-runs "Waiting");
# then decode_speed.py's stop time of the 21.3 M-record capture, trees alternating.
export PYTHONPATH=$PWD
nproc
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 150 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 64 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 60 python3 tests/benchmarks/decode_speed.py --shape persistent --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; ls -la /tmp/sb/*.plraw; echo "(captures: $SECONDS s)"
mem() { echo "== $(basename $1) $2"; timeout $3 python3 $2/tests/benchmarks/decode_memory.py $1 --workers 16 | grep -E "decode |then"; }
for r in 1 2; do for t in exp_old .; do mem /tmp/sb/decode_speed_mixedx16.plraw $t 60; done; done
for t in exp_old .; do mem /tmp/sb/decode_speed_mixedx64.plraw $t 120; done
for r in 1 2; do for t in exp_p .; do mem /tmp/sb/decode_speed_persistent.plraw $t 60; done; done
echo "(memory: $SECONDS s)"
for r in 1 2; do for t in exp_old .; do
  echo "== speed $t"
  timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 \
    | grep -E "cold (decode|write|total)|warm (write|total)|phases"
done; done
echo "($SECONDS s)"
