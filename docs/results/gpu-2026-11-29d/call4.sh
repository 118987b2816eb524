#!/usr/bin/env bash
# Call 4 (issue 22, thirty-fourth session): reading a .pftrace back on the H200 host's 16 cores, this tree (".")
# against the session's first (exp_old = e9a1bc9): proton-lite summary of the 21.3 M-record and
# 4.19 M-lifetime .pftrace, twice each, alternating; then the GPU tests that read traces back.
# Each tree runs from its own directory (`python -m` puts the working directory first on sys.path).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
ls -la /tmp/sb; echo "(captures: $SECONDS s)"
t() { local tree=$1; shift; echo "$tree $*: $(PYTHONPATH=$PWD/$tree:/tmp/site python3 -c 'import resource, subprocess, sys, time
t = time.time(); r = subprocess.run([sys.executable, "-m", "proton_lite"] + sys.argv[2:], capture_output=True, timeout=150, cwd=sys.argv[1])
open("/tmp/out_" + sys.argv[1].replace("/", "_") + sys.argv[-1].replace("/", "_"), "wb").write(r.stdout)
print(f"{time.time() - t:.2f} s, peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20:.2f} GB, rc {r.returncode}")' "$PWD/$tree" "$@")"; }
for round in 1 2; do
  for tree in exp_old .; do
    t $tree summary /tmp/sb/decode_speed_mixedx16.pftrace
    t $tree summary /tmp/sb/decode_speed_lifetimesx4.pftrace
  done
done
for f in mixedx16 lifetimesx4; do cmp /tmp/out_${PWD//\//_}_exp_old_tmp_sb_decode_speed_$f.pftrace /tmp/out_${PWD//\//_}_._tmp_sb_decode_speed_$f.pftrace && echo "$f: the same summary"; done
echo "($SECONDS s)"
rm -rf exp_old
OUT=$OUT TESTS="tests/test_gpu.py tests/test_gpu_lifetimes.py tests/test_docs.py" NO_BENCH=1 TEST_TIMEOUT=330 bash tests/run_gpu.sh 2>&1 | tail -6
