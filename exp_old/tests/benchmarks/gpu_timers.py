"""Do the %globaltimer clocks of two GPUs of one host agree? (needs two GPUs)

Both GPUs spin on one flag in pinned host memory; the host sets it; each reads its
%globaltimer the moment it sees it. The difference is the offset between the two timers,
give or take the few microseconds the flag takes to reach each GPU.

Usage: python tests/benchmarks/gpu_timers.py
"""
import time

import torch
import triton
import triton.language as tl


@triton.jit
def wait_and_stamp(flag_ptr, out_ptr):
    seen = tl.load(flag_ptr, volatile=True)
    while seen == 0:
        seen = tl.load(flag_ptr, volatile=True)
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr, t)


def main() -> None:
    flag = torch.zeros(1, dtype=torch.int32).pin_memory()
    outs = [torch.zeros(1, dtype=torch.int64, device=f"cuda:{d}") for d in (0, 1)]
    res = []
    for trial in range(5):
        flag.zero_()
        for d in (0, 1):
            with torch.cuda.device(d):
                wait_and_stamp[(1, )](flag, outs[d])
        time.sleep(0.05)
        flag.fill_(1)
        for d in (0, 1):
            torch.cuda.synchronize(d)
        a, b = int(outs[0].item()), int(outs[1].item())
        res.append(b - a)
        print(f"trial {trial}: GPU1 - GPU0 globaltimer at the same flag: {b - a:+,} ns")
    print("spread", max(res) - min(res), "ns")


if __name__ == "__main__":
    main()
