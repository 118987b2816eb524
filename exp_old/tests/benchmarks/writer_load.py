"""Does the drain's writing slow the launching thread through the CPU's caches? (issue 22; GPU needed)

A background thread that never holds the GIL streams 16 MiB buffers at 2.3 GB/s the way
the writer does (``zlib.crc32``, a file write, a memset; each alone and all three), beside
a plain loop of 4,096-CTA launches and of liger-kernel's rms_norm forward; a session's loop
for comparison.  Wall and launching-thread CPU per call, medians of 3 alternating rounds.

Usage (from the repository root): python tests/benchmarks/writer_load.py
"""
import ctypes, os, sys, threading, time, zlib
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
import numpy as np
import proton_lite
from launch_loops import block, workloads

work = workloads()
libc = ctypes.CDLL(None)
CH = 16 << 20
buf = np.ones(CH, np.uint8)


class Load:
    def __init__(self, gbps, parts):
        self.stop, self.gbps, self.parts = False, gbps, parts
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        f = open("/tmp/pollute.bin", "wb", buffering=0)
        period = CH / (self.gbps * 1e9)
        while not self.stop:
            t = time.perf_counter()
            if "crc" in self.parts: zlib.crc32(buf)
            if "write" in self.parts:
                f.write(buf)
                if f.tell() > (1 << 30): f.seek(0)
            if "zero" in self.parts: libc.memset(ctypes.c_void_p(buf.ctypes.data), 0, ctypes.c_size_t(CH))
            left = period - (time.perf_counter() - t)
            if left > 0: time.sleep(left)


def run(v, fn, calls):
    if v == "session":
        with proton_lite.start("/tmp/pol", quiet=True, formats=(), calibrate=False) as s:
            block(fn, 50); r = block(fn, calls)
        os.remove(s.result.raw_path); return r
    if v == "plain":
        return block(fn, calls)
    parts = v.split(":")[1].split("+")
    ld = Load(2.3, parts); ld.t.start()
    try:
        return block(fn, calls)
    finally:
        ld.stop = True; ld.t.join()


variants = ["plain", "load:crc+write+zero", "load:crc", "load:write", "session"]
for name, (fn, calls) in work.items():
    for v in variants: run(v, fn, 50)
    res = {v: [] for v in variants}
    for r in range(3):
        for v in variants: res[v].append(run(v, fn, calls))
    for v in variants:
        walls = sorted(x[0] for x in res[v]); cpus = sorted(x[1] for x in res[v])
        print(f"{name:20s} {v:22s} wall {walls[1]:7.1f} ({walls[0]:.1f}-{walls[2]:.1f})  main CPU {cpus[1]:7.1f} ({cpus[0]:.1f}-{cpus[2]:.1f})", flush=True)
