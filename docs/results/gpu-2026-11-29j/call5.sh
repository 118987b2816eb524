# fortieth session, call 5: a C++ wrapper's kernels named at stop from their plain launches while
# dynamo compiles; the Inductor GPU tests and the Inductor programs
set -u
OUT=$OUT TESTS="tests/test_gpu_inductor.py tests/test_gpu_inductor_programs.py" NO_BENCH=1 TEST_TIMEOUT=330 bash tests/run_gpu.sh
