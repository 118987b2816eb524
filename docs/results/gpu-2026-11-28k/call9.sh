#!/usr/bin/env bash
# Call 9 (issue 22): each part of the CTA sequence sorted, counted and laid out in one C call
# (cta_events_c.part_packets, this tree) against 3aaf3b7 (exp_head: the part in numpy, its
# packets in C), 16 threads, alternating: decode_memory.py and decode_speed.py on 4.19 M CTA
# lifetimes, then on the 21.3 M-record capture.
export PYTHONPATH=$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
mem() { echo "== $(basename $1) $2"; timeout 60 python3 $2/tests/benchmarks/decode_memory.py $1 --workers 16 | grep -E "decode |then"; }
for r in 1 2; do for t in exp_head .; do mem /tmp/sb/decode_speed_lifetimesx4.plraw $t; done; done
for t in exp_head .; do mem /tmp/sb/decode_speed_mixedx16.plraw $t; done
echo "(memory: $SECONDS s)"
for r in 1 2; do for t in exp_head .; do
  echo "== speed lifetimes $t"
  timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 \
    | grep -E "cold (decode|write|total)|warm (write|total)|phases"
done; done
for t in exp_head .; do
  echo "== speed mixed $t"
  timeout 90 python3 $t/tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 \
    | grep -E "cold (decode|write|total)|warm (write|total)"
done
echo "($SECONDS s)"
