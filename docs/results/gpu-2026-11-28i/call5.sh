#!/usr/bin/env bash
# Call 5 (pass 21 as committed, the call built on a thread): the GPU tests of lifetimes (one
# kernel whose exit the pass chose as a call), liger ops and torch.compile programs, then
# memcheck with exact buffers on the lifetimes tests
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
PT="python3 -m pytest -m gpu -q --no-header -p no:cacheprovider -rfE"
timeout 200 $PT tests/test_gpu_lifetimes.py tests/test_gpu_liger.py tests/test_gpu_inductor.py 2>&1 | tail -4
PROTON_LITE_EXACT_BUFFERS=1 PROTON_LITE_TEST_UNDER_SANITIZER=1 timeout 120 compute-sanitizer --tool memcheck --print-limit 5 \
  $PT tests/test_gpu_lifetimes.py -k "every_cta_lifetime or chose" 2>&1 | tail -4
