#!/usr/bin/env bash
# Call 1 (issue 22): the decode's batches of launches at 8 MiB (HEAD, ".") against 2 MiB
# (exp_b2) and 1 MiB (exp_b1), 16 threads, alternating: decode_memory.py and decode_speed.py on
# 4.19 M CTA lifetimes and on the 21.3 M-record capture; decode_speed on 85 M records once each.
export PYTHONPATH=$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
mem() { echo "== $(basename $1) $2"; timeout 60 python3 $2/tests/benchmarks/decode_memory.py $1 --workers 16; }
for t in . exp_b2 exp_b1 . exp_b2 exp_b1; do mem /tmp/sb/decode_speed_lifetimesx4.plraw $t; mem /tmp/sb/decode_speed_mixedx16.plraw $t; done
echo "(memory: $SECONDS s)"
for t in . exp_b2 exp_b1 . exp_b2 exp_b1; do for s in "lifetimes --repeat 4" "mixed --repeat 16"; do
  echo "== speed $s $t"
  timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape $s --reps 1 --workers 16 | grep -E "cold (decode|total)|warm (decode|total)"
done; done
echo "($SECONDS s)"
for t in . exp_b2 exp_b1; do echo "== speed mixed --repeat 64 $t"
  timeout 150 python3 $t/tests/benchmarks/decode_speed.py --shape mixed --repeat 64 --reps 1 --workers 16 | grep -E "cold (decode|total)"
done
echo "($SECONDS s)"
