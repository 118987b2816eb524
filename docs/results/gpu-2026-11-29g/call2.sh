#!/usr/bin/env bash
# Call 2 (issue 22, thirty-seventh session): captures of many kernels, this tree (launches batched across kernels
# by layout and number of scopes, records batches sized from RECORDS_IN_FLIGHT) beside exp_old (9ed9f6c, batches
# by kernel), on 16 threads (once, then twice alternating): the decode of 65,536 launches of 64 CTAs in 4,096 kernels
# (decode_speed.py's `kernels`) and of 16,384 launches with 2 scopes in 2,048 kernels (`kernel_scopes`), and its
# peak; then the GPU tests that decode scope-less kernels, many launches and torch.compile programs.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
for t in exp_old .; do  # each tree's C extensions built once, outside the timings
  PYTHONPATH=/tmp/site:$PWD/$t python3 -c "from proton_lite.trace import native_events; from proton_lite import native_decode; assert native_events.module() and native_decode.module()"
done
export PYTHONPATH=/tmp/site:$PWD
mkdir -p /tmp/sb
python3 -c "import sys; sys.path.insert(0, 'tests/benchmarks'); import decode_speed as S; S.build_capture('/tmp/sb/kernels.plraw', 'kernels'); S.build_capture('/tmp/sb/kernel_scopes.plraw', 'kernel_scopes')"
echo "($SECONDS s)"
S=docs/results/gpu-2026-11-29g/decode_only.py
for run in "exp_old kernels" "new kernels" "exp_old kernel_scopes" "new kernel_scopes" "exp_old kernel_scopes" \
           "new kernel_scopes"; do
  set -- $run
  d=$PWD/$1; [ $1 = new ] && d=$PWD
  echo "== decode $2 $1"
  PYTHONPATH=/tmp/site timeout 60 python3 $S /tmp/sb/$2.plraw 16 $d
done
echo "($SECONDS s)"
rm -rf exp_old
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py tests/test_gpu_inductor_programs.py" NO_BENCH=1 TEST_TIMEOUT=200 bash tests/run_gpu.sh 2>&1 | tail -4
echo "($SECONDS s)"
