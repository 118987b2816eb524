#!/usr/bin/env bash
# the pieces' per-interval lists made again in each piece task (this tree, a00bfee+) against kept from
# the index step (exp_old: 5b297a3), alternating on prebuilt captures, 16 threads
ROOT=$PWD
python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/k21 2>&1 | tail -1
python3 tests/benchmarks/decode_speed.py --shape persistent --reps 1 --workers 16 --keep /tmp/kp 2>&1 | tail -1
for r in 1 2; do for t in new old; do
  R=$ROOT; [ $t = old ] && R=$ROOT/exp_old
  for c in /tmp/k21/decode_speed_mixedx16.plraw /tmp/kp/decode_speed_persistent.plraw; do
    res=$(cd $R && PYTHONPATH=/tmp/site:$R python3 tests/benchmarks/decode_speed.py --reps 1 --child $c /tmp/o.pftrace 16 perfetto auto 2>/dev/null | tail -1)
    echo "$t $(basename $c) $res" >> $OUT/ab.txt
    echo "$t $(basename $c) $(echo "$res" | python3 -c 'import json,sys; print([(round(d["decode"],2), round(d["write"],2), round(d["total"],2)) for d in json.loads(sys.stdin.read())])')"
    ls -l /tmp/o.pftrace | awk '{print "  size", $5}'
  done; done; done
for t in new old; do R=$ROOT; [ $t = old ] && R=$ROOT/exp_old
  for c in /tmp/k21/decode_speed_mixedx16.plraw /tmp/kp/decode_speed_persistent.plraw; do
    echo "$t memory $(basename $c): $(cd $R && PYTHONPATH=/tmp/site:$R python3 tests/benchmarks/decode_memory.py $c --workers 16 | tr '\n' ' ')" | tee -a $OUT/ab_mem.txt
  done; done
