#!/usr/bin/env bash
# Call 6 (issue 22): the viewer at scale on the H200 host's 16 cores, the session's last tree (".")
# against its first (exp_old = 0421f66): proton-lite summary of a .plraw and of a .pftrace (read
# back), diff of a capture with itself; wall seconds and the child's peak RSS.
# (As run, both trees were the working tree's: `python -m` puts the working directory first on
# sys.path; call7.sh runs each tree from its own directory.)
export PYTHONPATH=$PWD
timeout 100 python3 tests/benchmarks/decode_speed.py --shape lifetimes --repeat 4 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
timeout 100 python3 tests/benchmarks/decode_speed.py --shape mixed --repeat 16 --reps 1 --workers 16 --keep /tmp/sb > /dev/null 2>&1
ls -la /tmp/sb; echo "(captures: $SECONDS s)"
t() { local tree=$1; shift; echo "$tree $*: $(PYTHONPATH=$PWD/$tree python3 -c 'import resource, subprocess, sys, time
t = time.time(); r = subprocess.run([sys.executable, "-m", "proton_lite"] + sys.argv[1:], capture_output=True, timeout=150)
print(f"{time.time() - t:.2f} s, peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20:.2f} GB, rc {r.returncode}")' "$@")"; }
for tree in exp_old . exp_old .; do
  t $tree summary /tmp/sb/decode_speed_mixedx16.plraw
  t $tree summary /tmp/sb/decode_speed_mixedx16.pftrace
  t $tree summary /tmp/sb/decode_speed_lifetimesx4.pftrace
done
for tree in exp_old .; do t $tree diff /tmp/sb/decode_speed_mixedx16.plraw /tmp/sb/decode_speed_mixedx16.plraw; done
echo "($SECONDS s)"
