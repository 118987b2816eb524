# fortieth session, call 3: kernels compiled plain built again from their PTX (runtime/rebuild.py),
# Inductor's workers left on in a session (InductorBridge.compile_ended): the GPU tests, then
# compile_time.py's torch.compile cases alternating with f421b17 (exp_old, the tree before)
set -u
OUT=$OUT TESTS="tests/test_gpu_inductor.py tests/test_gpu_inductor_programs.py tests/test_gpu.py" NO_BENCH=1 TEST_TIMEOUT=300 bash tests/run_gpu.sh
export PYTHONPATH=/tmp/site:$PWD
for round in 1 2; do
  for tree in new old; do
    echo "== round $round: $tree"
    if [ $tree = new ]; then d=.; else d=exp_old; fi
    (cd $d && PYTHONPATH=/tmp/site:$PWD timeout 200 python3 tests/benchmarks/compile_time.py --only inductor_cold,inductor_before --json $OUT/compile_${tree}_$round.json 2>&1 | grep -v -i warn | tail -12)
  done
done
