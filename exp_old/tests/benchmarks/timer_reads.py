"""What a timer read costs by the lanes that make it: ``%globaltimer`` against ``%clock64``,
read by 0, 1 or all 32 lanes of every warp (GPU, issue 24).

Why: on the H100 only lane 0's exit reads made a right (timer, clock) pair (a lane 5's own
pair was off by up to ~2,000 cycles), and an exit whose every thread read ``%globaltimer``
cost a persistent row sum 1.34x (design.md, "The exit's stores").  ptxas reads a 64-bit
timer with ``CS2R`` in every active lane and moves such reads past a branch on the lane;
our scoped kernels' epilogue reads the end pair in every thread.  This measures whether
that costs by the lane, as those runs suggest, or by the warp.

A hand-written PTX kernel (below; each lane that reads does so ``--reps`` times in a loop,
so ptxas can neither drop nor predicate the reads), ``--ctas`` CTAs of 8 warps, timed with
CUDA events over ``--launches`` launches after a warm-up; it prints the median µs per launch
and the ns per read above the no-read baseline, per read and per warp-read.

    python tests/benchmarks/timer_reads.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

WARPS = 8
# the 64-bit reads ptxas issues as CS2R in every active lane; the 32-bit low half of the
# timer, which it issues as S2UR (the uniform datapath: once per warp; at our kernels' entry)
# or CS2R.32 (in this loop, unrolled 4 times, both: tests/test_timer_reads_kernel.py)
READS = {"globaltimer": "%globaltimer", "clock64": "%clock64", "globaltimer_lo": "%globaltimer_lo"}


def ptx(read: str) -> str:
    """The kernel for one timer (``READS``): lanes ``< p_lanes`` of each warp read it
    ``p_reps`` times, xor-ing the values, and every thread stores what it got."""
    if read.endswith("_lo"):
        read_line = f"mov.u32 %r7, {READS[read]};\n    cvt.u64.u32 %rd3, %r7;"
    else:
        read_line = f"mov.u64             %rd3, {READS[read]};"
    return f"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry timer_reads_{read}(.param .u64 p_out, .param .u32 p_reps, .param .u32 p_lanes)
{{
    .reg .pred  %p<3>;
    .reg .b32   %r<8>;
    .reg .b64   %rd<8>;

    ld.param.u64        %rd1, [p_out];
    ld.param.u32        %r1, [p_reps];
    ld.param.u32        %r2, [p_lanes];
    mov.u32             %r3, %tid.x;
    and.b32             %r4, %r3, 31;
    mov.u64             %rd2, 0;
    setp.ge.u32         %p1, %r4, %r2;
    @%p1 bra            DONE;
LOOP:
    {read_line}
    xor.b64             %rd2, %rd2, %rd3;
    sub.u32             %r1, %r1, 1;
    setp.ne.u32         %p2, %r1, 0;
    @%p2 bra            LOOP;
DONE:
    mov.u32             %r5, %ctaid.x;
    mov.u32             %r6, %ntid.x;
    mad.lo.u32          %r7, %r5, %r6, %r3;
    mul.wide.u32        %rd4, %r7, 8;
    add.s64             %rd5, %rd1, %rd4;
    st.global.u64       [%rd5], %rd2;
    ret;
}}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctas", type=int, default=132 * 8)
    ap.add_argument("--reps", type=int, default=32)
    ap.add_argument("--launches", type=int, default=50)
    ap.add_argument("--json")
    args = ap.parse_args()
    from proton_lite.runtime import cuda_api
    from proton_lite.runtime.cuda_api import check, cu
    from proton_lite.runtime.cuda_graph import load_function
    import ctypes
    check(cu.cuInit(0), "cuInit")
    ctx = check(cu.cuDevicePrimaryCtxRetain(cu.CUdevice(0)), "cuDevicePrimaryCtxRetain")
    cuda_api.set_context(ctx)
    threads = args.ctas * WARPS * 32
    out = check(cu.cuMemAlloc(threads * 8), "cuMemAlloc")
    stream = check(cu.cuStreamCreate(0), "cuStreamCreate")
    start, end = (check(cu.cuEventCreate(0), "cuEventCreate") for _ in range(2))

    def time_us(fn, lanes: int) -> float:
        params = ((int(out), args.reps, lanes), (ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32))
        times = []
        for i in range(args.launches + 5):
            check(cu.cuEventRecord(start, stream), "cuEventRecord")
            check(cu.cuLaunchKernel(fn, args.ctas, 1, 1, WARPS * 32, 1, 1, 0, stream, params, 0), "cuLaunchKernel")
            check(cu.cuEventRecord(end, stream), "cuEventRecord")
            check(cu.cuEventSynchronize(end), "cuEventSynchronize")
            if i >= 5:
                times.append(check(cu.cuEventElapsedTime(start, end), "cuEventElapsedTime") * 1000)
        return statistics.median(times)

    rows = []
    for read in READS:
        fn = load_function((ptx(read) + "\0").encode(), f"timer_reads_{read}")
        base = time_us(fn, 0)
        for lanes in (1, 32):
            us = time_us(fn, lanes)
            warp_reads = args.ctas * WARPS * args.reps
            rows.append({"read": read, "lanes": lanes, "us": us, "base_us": base,
                         "ns_per_warp_read": (us - base) * 1000 / warp_reads,
                         "ns_per_lane_read": (us - base) * 1000 / (warp_reads * lanes)})
            r = rows[-1]
            print(f"{read:12s} lanes {lanes:2d}: {us:9.1f} us (no reads {base:7.1f})  "
                  f"{r['ns_per_warp_read']:8.3f} ns per warp-read  {r['ns_per_lane_read']:8.4f} ns per lane-read")
    if args.json:
        Path(args.json).write_text(json.dumps({"ctas": args.ctas, "warps": WARPS, "reps": args.reps, "rows": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
