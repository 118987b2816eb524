"""Python cost of the per-launch host path, with the CUDA driver calls stubbed out (no GPU).

What this isolates: the Python that proton_lite runs for each launch in the launching
thread (profile allocator + launch-exit hook) and in the drain thread (wait for each
copied chunk, write it), for ``--launches`` simulated launches of a small kernel through the real
``Collector`` and ``RawWriter``.  Driver calls are replaced by functions that return at
once (after releasing and re-taking the GIL, as the real bindings do), so the numbers are
a floor: on a GPU the driver calls and the GIL hand-offs between
the two threads come on top (``host_overhead.py`` measures the whole on the device).

This is an analysis tool for the host-time target (<= 10 µs per launch), not a test.

Usage: python tests/benchmarks/host_path_cpu.py [--launches 20000] [--bytes 4096]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))


def stub_driver():
    """Replace the driver calls in proton_lite.runtime.cuda_api by no-ops (host memory stays real)."""
    from proton_lite.runtime import cuda_api
    keep = []
    counter = iter(range(1 << 20, 1 << 62, 1 << 24))

    def host_alloc(size):
        buf = ctypes.create_string_buffer(size)
        keep.append(buf)
        return ctypes.addressof(buf)

    # Each stub makes one foreign call through ctypes, which releases and re-takes the GIL as
    # cuda-bindings does around every driver call: the points where the launching and the
    # drain thread hand the GIL to each other.
    release_gil = ctypes.CDLL(None).getpid

    def noop(*a, **k):
        release_gil()
    for name in ("memset_d8_async", "memcpy_dtoh_async", "event_record", "event_synchronize", "stream_synchronize",
                 "stream_wait_event",
                 "set_context", "mem_free", "host_free", "event_destroy", "stream_destroy"):
        setattr(cuda_api, name, noop)
    cuda_api.stream_is_capturing = lambda stream: bool(release_gil()) and False
    cuda_api.current_device = lambda: release_gil() and 0
    cuda_api.capture_query = lambda: cuda_api.stream_is_capturing
    cuda_api.device_getter = lambda: cuda_api.current_device
    cuda_api.current_context = lambda: "ctx"
    cuda_api.mem_alloc = lambda size: next(counter)
    cuda_api.host_alloc = host_alloc
    cuda_api.event_create = lambda: object()
    cuda_api.stream_create = lambda: 7
    cuda_api.mem_get_info = lambda: (80 << 30, 80 << 30)
    return keep


class _Meta:
    """The attributes of Triton's kernel metadata that the collector reads."""

    def __init__(self, scratch: int) -> None:
        from proton_lite.layout import CTA_HEADER_BYTES, UNIT_HEADER_BYTES, BufferLayout
        self.name, self.hash, self.num_warps, self.num_ctas, self.shared = "small", "h0", 4, 1, 0
        # 4 warp units sharing about `scratch` bytes per CTA
        layout = BufferLayout("warp", 4, max(1, ((scratch - CTA_HEADER_BYTES) // 4 - UNIT_HEADER_BYTES) // 8), "shared")
        self.profile_scratch_size = layout.stride
        self.proton_lite = {"scopes": ["load", "store"], "layout": layout.to_json()}


class _LazyDict:
    """Stands for Triton's LazyDict: ``get()`` evaluates the attached launch-metadata function."""

    def __init__(self, fn, args) -> None:
        self.fn, self.args = fn, args

    def get(self):
        return self.fn(*self.args)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--bytes", type=int, default=4096, help="profile buffer bytes per launch")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    stub_driver()
    from proton_lite.raw_format import RawWriter
    from proton_lite.runtime.collector import Collector, launch_metadata_fn

    meta = _Meta(a.bytes)
    md = _LazyDict(launch_metadata_fn, ((1, 1, 1), meta, {}))
    size = meta.profile_scratch_size
    rows = []
    for _ in range(a.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            col = Collector(RawWriter(os.path.join(tmp, "x.plraw"), {}), 256 << 20)
            t_alloc = t_exit = 0.0
            t0 = time.perf_counter()
            for _ in range(a.launches):
                t = time.perf_counter()
                col.allocate(size, 16, 0)
                t1 = time.perf_counter()
                col.on_launch_exit(md)
                t_exit += time.perf_counter() - t1
                t_alloc += t1 - t
            t_launch = time.perf_counter() - t0
            col.finish()
            t_total = time.perf_counter() - t0
            col.writer.close()
        n = a.launches
        rows.append({"allocate": t_alloc / n * 1e6, "exit": t_exit / n * 1e6, "launch_thread": t_launch / n * 1e6,
                     "with_drain": t_total / n * 1e6})
    print(f"{a.launches} simulated launches of {a.bytes} B, driver stubbed; µs per launch, median of {a.rounds}:")
    for key, label in (("allocate", "profile allocator"), ("exit", "launch-exit hook"),
                       ("launch_thread", "launching thread, whole loop"),
                       ("with_drain", "until the drain thread is done")):
        print(f"  {label:32s} {statistics.median(r[key] for r in rows):7.2f}")


if __name__ == "__main__":
    main()
