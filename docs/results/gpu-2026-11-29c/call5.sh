# Issue 24: two more forms for loop kernels that keep the timer's range past halves' 4.3 s at
# halves' cost (call4: halves the fastest, lanes' exit shuffle 1-3 points dearer): gt64 (thread 0's
# 64-bit timer and the clock's low half: three registers) and gt5 (the timer in its 32 ns ticks and
# the clock's low half: two registers, 137 s), our loop kernels, FlagGems' and liger's, after the
# lifetimes GPU test with gt64 as the default.
PART=own FORMS="gt64 gt5" bash docs/results/gpu-2026-11-29c/call2.sh
PART=liger FORMS="gt64 gt5" bash docs/results/gpu-2026-11-29c/call2.sh
