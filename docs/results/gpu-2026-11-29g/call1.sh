#!/usr/bin/env bash
# Call 1 (issue 22, thirty-seventh session): this tree (the metadata's JSON written in parts, its integer columns
# and the interned names by C) beside exp_old (efb0703, the session's first tree), alternating twice on 16 threads:
# decode and write of 65,536 launches of 64 CTAs and of 4.19 M lifetimes with the writer's phases, the traces
# compared byte for byte; then the GPU tests that write traces of scope-less kernels, many launches and
# torch.compile programs.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do  # each tree's C extensions built once, outside the timings
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; from proton_lite import native_decode; assert native_events.module() and native_decode.module()"
done
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape steps --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
echo "($SECONDS s)"
S=docs/results/gpu-2026-11-29g/stop_phases.py
for t in exp_old new exp_old new; do
  d=$PWD/$t; [ $t = new ] && d=$PWD
  for c in steps lifetimesx4; do
    echo "== stop $c $t"
    PYTHONPATH=/tmp/site timeout 60 python3 $S /tmp/sb/decode_speed_$c.plraw 16 $d /tmp/trace_${t}_$c.pftrace
  done
done
for c in steps lifetimesx4; do
  cmp -s /tmp/trace_exp_old_$c.pftrace /tmp/trace_new_$c.pftrace && echo "same trace $c" || echo "TRACES DIFFER $c"
done
echo "($SECONDS s)"
rm -rf exp_old
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py tests/test_gpu_inductor_programs.py" NO_BENCH=1 TEST_TIMEOUT=240 bash tests/run_gpu.sh 2>&1 | tail -4
echo "($SECONDS s)"
