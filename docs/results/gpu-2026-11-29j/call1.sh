# fortieth session, call 1: the GPU tests of f421b17 (register_cap.Build), and the sources of
# torch 2.11 / Triton 3.6 that the next change reads (copied to $OUT/src, not kept in the repo)
set -u
OUT=$OUT TESTS="tests/test_gpu_inductor.py tests/test_gpu_inductor_programs.py tests/test_gpu.py tests/test_gpu_liger.py tests/test_gpu_lifetimes.py" NO_BENCH=1 TEST_TIMEOUT=330 bash tests/run_gpu.sh
mkdir -p $OUT/src
python3 - <<'PY'
import os, inspect, shutil
import torch._inductor.runtime.triton_heuristics as th, torch._inductor.async_compile as ac
import torch._inductor.runtime.static_cuda_launcher as sl
import triton.compiler.compiler as cc, triton.backends.nvidia.driver as drv, triton.backends.nvidia.compiler as ncc
import triton.runtime.jit as jit, triton.runtime.cache as rc
mods = [th, ac, sl, cc, drv, ncc, jit, rc]
try:
    import torch._inductor.compile_worker.utils as u; mods.append(u)
except Exception as e: print(e)
try:
    import torch._inductor.runtime.compile_tasks as ct; mods.append(ct)
except Exception as e: print(e)
import torch._dynamo.callback as cb; mods.append(cb)
for m in mods:
    shutil.copy(m.__file__, os.path.join(os.environ["OUT"], "src", m.__name__ + ".py"))
print("copied", len(mods))
PY
