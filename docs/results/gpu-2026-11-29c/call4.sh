# Issue 24: the two best forms of call2/call3 for loop kernels, halves (the low halves in thread 0's
# registers: a CTA must live < 2^32 cycles) against lanes (lane 0 keeps the low halves, lane 1 the
# high ones, gathered by a shuffle at exit: exact), our loop kernels, FlagGems' and liger's, after
# the lifetimes GPU test with lanes as the default.
PART=own FORMS="halves lanes" bash docs/results/gpu-2026-11-29c/call2.sh
PART=liger FORMS="halves lanes" bash docs/results/gpu-2026-11-29c/call2.sh
