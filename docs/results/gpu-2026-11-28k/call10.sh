#!/usr/bin/env bash
# Call 10 (issue 22): as call 8 (the CTA sequence's part size against the lifetimes capture's
# peak and write time), with each part now sorted, counted and laid out in one C call (this tree).
export PYTHONPATH=$PWD
S=docs/results/gpu-2026-11-28k/cta_parts_ab.py
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
rm -f /tmp/sb/*.pftrace; echo "(captures: $SECONDS s)"
for r in 1 2; do for P in 32768 16384 8192; do timeout 60 python3 $S /tmp/sb/decode_speed_lifetimesx4.plraw 16 $P 262144; done; done
echo "($SECONDS s)"
