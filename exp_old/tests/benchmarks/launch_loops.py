"""The loops that ``launch_variants.py``, ``launch_parts.py`` and ``writer_load.py`` time
(issue 22; GPU needed): one place for the workloads and for how a block of calls is timed.
The scripts put the repository root and ``tests/`` on ``sys.path`` before importing this."""
import time

import torch

import graph_kernels as G


def workloads(liger: bool = True) -> dict:
    """name -> (call, calls per block): a 4,096-CTA scope-less vector add and, when liger-kernel
    is importable (and ``liger``), its rms_norm forward on 4,096 x 4,096."""
    n = 1 << 22
    a, b, c = torch.rand(n, device="cuda"), torch.rand(n, device="cuda"), torch.empty(n, device="cuda")
    work = {"add 4096 CTAs": (lambda: G.add_plain[(4096, )](a, b, c, n, BLOCK=1024), 3000)}
    if liger:
        try:
            import liger_kernel.transformers.functional as F
        except ImportError as e:
            print("no liger", e)
        else:
            x, w = torch.randn(4096, 4096, device="cuda"), torch.randn(4096, device="cuda")
            work["liger rms_norm fwd"] = (lambda: F.liger_rms_norm(x, w, 1e-6, in_place=False), 1000)
    return work


def block(fn, calls: int) -> tuple[float, float]:
    """(wall µs, launching thread's CPU µs) per call of ``calls`` calls of ``fn``, without a
    synchronize between them (one before and one after)."""
    torch.cuda.synchronize()
    t, c0 = time.perf_counter(), time.thread_time()
    for _ in range(calls):
        fn()
    cpu = time.thread_time() - c0
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / calls * 1e6, cpu / calls * 1e6


def voluntary_switches() -> int:
    """The calling thread's voluntary context switches so far (it waited: for the GIL, a lock)."""
    with open("/proc/thread-self/status") as f:
        return int(next(line for line in f if line.startswith("voluntary_ctxt_switches")).split()[1])
