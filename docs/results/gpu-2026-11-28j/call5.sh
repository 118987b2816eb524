#!/usr/bin/env bash
# Call 5 (issue 22, the stop's memory): the decode's scratch arrays mapped on their own
# (proton_lite/fresh_memory.py, this tree) against 71975ed (exp_old), 16 threads, alternating
# twice, on the 21.3 M-record and the persistent-launch captures: decode_memory.py's peaks and times
export PYTHONPATH=$PWD
nproc
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 60 python3 tests/benchmarks/decode_speed.py --shape persistent --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
ls /tmp/sb/*.plraw
for cap in /tmp/sb/decode_speed_mixedx16.plraw /tmp/sb/decode_speed_persistent.plraw; do
  for r in 1 2; do for t in exp_old .; do
    echo "== $(basename $cap) $t"
    timeout 40 python3 $t/tests/benchmarks/decode_memory.py $cap --workers 16
  done; done
done
echo "($SECONDS s)"
