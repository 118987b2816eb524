# 2026-11-29, thirty-eighth session, call 1 (H200, started fresh), tree 3b8b5e9; .whl carried (perfetto, liger-kernel, packaging)
python3 -c "import numpy; print('numpy', numpy.__version__)"; nproc
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_gpu_many_launches.py tests/test_gpu_inductor_programs.py" NO_BENCH=1 TEST_TIMEOUT=300 bash tests/run_gpu.sh
# -> numpy 2.5.2, 16 threads; 50 passed, 17 warnings in 113.61s (call1-gpu-tests.xml)
