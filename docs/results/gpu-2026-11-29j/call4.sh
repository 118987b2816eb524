# fortieth session, call 4: after call 3's failures (static kernels found in Triton's cache by
# hash, plain stand-ins at stop for kernels Inductor's workers compiled, plain launches while
# dynamo compiles counted as trials): the Inductor GPU tests, then compile_time.py's torch.compile
# cases with where the first call's time goes, beside f421b17 (exp_old) once
set -u
OUT=$OUT TESTS="tests/test_gpu_inductor.py" NO_BENCH=1 TEST_TIMEOUT=260 bash tests/run_gpu.sh
export PYTHONPATH=/tmp/site:$PWD
echo "== new"
timeout 150 python3 tests/benchmarks/compile_time.py --only inductor_cold,inductor_before --json $OUT/compile_new.json 2>&1 | grep -v -i warn | tail -12
echo "== old"
(cd exp_old && PYTHONPATH=/tmp/site:$PWD timeout 110 python3 tests/benchmarks/compile_time.py --only inductor_cold,inductor_before --json $OUT/compile_old.json 2>&1 | grep -v -i warn | tail -8)
