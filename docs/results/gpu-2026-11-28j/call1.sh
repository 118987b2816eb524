#!/usr/bin/env bash
# Call 1 (twenty-ninth session): pass 21 on the whole GPU list (parts 1 and 2) and the trial gate on 3.12
OUT=$OUT NO_BENCH=1 TEST_TIMEOUT=560 bash tests/run_gpu.sh 2>&1 | tail -60
