#!/usr/bin/env bash
# Call 3: pass 21 on the other libraries (PART=3: flash-linear-attention, FlagGems), then liger's
# scope-less kernels with the exit chosen per kernel against every exit inline (one more pair of runs)
OUT=$OUT PART=3 NO_BENCH=1 TEST_TIMEOUT=300 bash tests/run_gpu.sh 2>&1 | grep -E "passed|failed|error|rc=" | tail -5
echo "($SECONDS s)"
OUT=$OUT PART=3 TESTS=tests/test_docs.py NO_BENCH=1 FORMS_AB="pass inline" FORMS_REPS=1 \
  FORMS_PIN="_dyt_fwd_kernel=BLOCK_N: 2048, num_warps: 4" bash tests/run_gpu.sh 2>&1 | grep -E "^(pass|inline) " | tail -30
echo "($SECONDS s)"
