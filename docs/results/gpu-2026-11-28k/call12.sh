#!/usr/bin/env bash
# Call 12 (issue 22): the session's last tree (aece75c) against its first (exp_old = 1a50673),
# 16 threads, alternating: decode_memory.py and decode_speed.py on 4.19 M CTA lifetimes and on
# the 21.3 M-record capture.
export PYTHONPATH=$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
mem() { echo "== $(basename $1) $2"; timeout 60 python3 $2/tests/benchmarks/decode_memory.py $1 --workers 16 | grep -E "then"; }
for t in exp_old . exp_old .; do mem /tmp/sb/decode_speed_lifetimesx4.plraw $t; mem /tmp/sb/decode_speed_mixedx16.plraw $t; done
echo "(memory: $SECONDS s)"
for t in exp_old . exp_old .; do for s in "lifetimes --repeat 4" "mixed --repeat 16"; do
  echo "== speed $s $t"
  timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape $s --reps 1 --workers 16 | grep -E "cold total|warm total"
done; done
echo "($SECONDS s)"
