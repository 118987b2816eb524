#!/usr/bin/env bash
# Call 4 (issue 22): the JSON writer in pieces (HEAD, ".") against the tree before it (exp_old =
# f80b98d), 16 threads, alternating: decode_memory.py --format chrome and decode_speed.py
# --format chrome on the 21.3 M-record capture and on 4.19 M CTA lifetimes.
export PYTHONPATH=$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
mem() { echo "== $(basename $1) $2"; timeout 90 python3 $2/tests/benchmarks/decode_memory.py $1 --workers 16 --format chrome; rm -f /tmp/sb/*.json; }
for t in exp_old . exp_old .; do mem /tmp/sb/decode_speed_mixedx16.plraw $t; mem /tmp/sb/decode_speed_lifetimesx4.plraw $t; done
echo "(memory: $SECONDS s)"
for t in exp_old . exp_old .; do
  echo "== speed mixed --repeat 16 chrome $t"
  timeout 120 python3 $t/tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --format chrome | grep -E "cold (write|total)|warm (write|total)"
done
echo "($SECONDS s)"
