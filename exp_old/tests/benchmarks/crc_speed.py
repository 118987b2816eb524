"""The raw file's checksum, folded against zlib's (issue 22; CPU, any host).

Every chunk a session writes carries the CRC-32 of its payload, computed by the drain's C
thread (``native_write``): on the H200 machines the session's process spent 50-450 µs of CPU a
call more than the plain one in liger-kernel's loops (``liger_pairs.py --ops 32``), about
what checksumming their 32-byte CTA lifetimes at zlib's speed costs.  Printed: one thread's
GB/s, folded and zlib's, and the wall and process CPU time of writing a 16 MiB chunk (a
session's chunk) to a file with the writer's threads, both ways.

Usage: python tests/benchmarks/crc_speed.py [--mib 16] [--reps 20] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from proton_lite import native_write  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=16)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    mod = native_write.module()
    if mod is None:
        sys.exit(f"the C writer does not build here: {native_write.error()}")
    data = os.urandom(a.mib << 20)
    rows = []
    was = mod.use_folding(True)
    with tempfile.TemporaryDirectory() as tmp:
        fd = os.open(os.path.join(tmp, "c.plraw"), os.O_WRONLY | os.O_CREAT)
        for _ in range(a.reps):  # the file system's first growth, not timed
            mod.write_chunk(fd, 2, (data, ), native_write.THREADS, native_write.BLOCK)
        os.close(fd)
        for fold in (True, False) * 3:  # alternating: the file system moves between rounds
            mod.use_folding(fold)
            t = time.perf_counter()
            for _ in range(a.reps):
                mod.crc32(data, 0, 1, 1 << 30)
            one = len(data) * a.reps / (time.perf_counter() - t) / 1e9
            fd = os.open(os.path.join(tmp, "c.plraw"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            t, cpu = time.perf_counter(), time.process_time()
            for _ in range(a.reps):
                mod.write_chunk(fd, 2, (data, ), native_write.THREADS, native_write.BLOCK)
            wall, cpu = (time.perf_counter() - t) / a.reps, (time.process_time() - cpu) / a.reps
            os.close(fd)
            row = {"folding": fold, "one_thread_gb_s": round(one, 2), "threads": native_write.THREADS,
                   "chunk_mib": a.mib, "write_ms": round(wall * 1e3, 3), "write_cpu_ms": round(cpu * 1e3, 3)}
            rows.append(row)
            print(f"{'folded' if fold else 'zlib  '}: one thread {one:6.2f} GB/s; a {a.mib} MiB chunk written "
                  f"with {native_write.THREADS} threads in {wall * 1e3:6.2f} ms, {cpu * 1e3:6.2f} ms of CPU", flush=True)
    mod.use_folding(was)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
