"""The timer-read microbenchmark's kernel (tests/benchmarks/timer_reads.py), without a GPU:
run in the PTX simulator, only the lanes asked for read the timer, each ``reps`` times; and
assembled by the triton wheel's ptxas, its read stays inside a loop that the other lanes
branch around (so the benchmark measures reads by the lanes it names, not by every lane)."""
import struct
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
import timer_reads  # noqa: E402
from ptx_sim import Kernel, Launch  # noqa: E402

BASE = 1 << 32
THREADS = 64  # two warps


@pytest.mark.parametrize("read", list(timer_reads.READS))
@pytest.mark.parametrize("lanes", [0, 1, 5, 32])
def test_only_the_lanes_asked_for_read_the_timer(read, lanes):
    reps, grid = 3, 2
    mem = bytearray(grid * THREADS * 8)
    Kernel(timer_reads.ptx(read)).run(Launch(grid=grid, threads=THREADS, global_mem=mem, global_base=BASE,
                                             params={"p_out": BASE, "p_reps": reps, "p_lanes": lanes}))
    got = struct.unpack(f"<{grid * THREADS}Q", mem)
    for t, v in enumerate(got):
        lane = t % THREADS % 32
        assert (v != 0) == (lane < lanes), (t, v)


def test_ptxas_keeps_one_timer_read_in_the_loop_behind_the_lane_branch(tmp_path):
    from triton.backends.nvidia.compiler import get_ptxas
    from proton_lite.sass_listing import instructions, listing
    for read, sr in (("globaltimer", "SR_GLOBALTIMERLO"), ("clock64", "SR_CLOCKLO"), ("globaltimer_lo", "SR_GLOBALTIMERLO")):
        ptx = tmp_path / f"{read}.ptx"
        ptx.write_text(timer_reads.ptx(read))
        cubin = tmp_path / f"{read}.cubin"
        r = subprocess.run([get_ptxas(90).path, "-arch=sm_90", str(ptx), "-o", str(cubin)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        ins = instructions(listing(cubin.read_bytes()))
        reads = [i for i, x in enumerate(ins) if sr in x]
        branches = [i for i, x in enumerate(ins) if "BRA" in x]
        assert len(reads) >= 1, ins
        first_branch = branches[0]  # the lanes that do not read leave first
        assert first_branch < reads[0], ins
        assert any(b > reads[-1] for b in branches), ins  # the loop's backward branch
