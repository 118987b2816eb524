#!/usr/bin/env bash
# Call 8 (issue 22): a capture of 4.19 M CTA lifetimes, whose stop on 16 threads peaks at 8.4x
# its raw size against 5.4x on 2, set by the writer's threads (CPU host: 16 write threads
# after a 2-thread decode 8.30x). The CTA sequence's parts (cta_sequence.PART_EVENTS, 2^15
# events) hold ~500 bytes an event on each thread: write time and peak by part size.
export PYTHONPATH=$PWD
S=docs/results/gpu-2026-11-28k/cta_parts_ab.py
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
for r in 1 2; do for P in 32768 16384 8192; do timeout 60 python3 $S /tmp/sb/decode_speed_lifetimesx4.plraw 16 $P 262144; done; done
echo "($SECONDS s)"
