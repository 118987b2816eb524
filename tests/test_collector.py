"""The collector's logic (allocator, launch-exit hook, drain thread) on a simulated driver.

The same paths run for real under ``pytest -m gpu`` on the H100; these tests pin down,
on every CI run, what must hold whatever the driver's timing: every saved launch is on
disk once, in order, with its own bytes and zeros where its kernel wrote nothing (so a
reused buffer never shows an older launch); a buffer goes back to the pool only after the
kernel that used it is done; a fault keeps the launches before it; pinned memory stays
within its limit; graph capture is refused; the drain thread follows device changes.
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from proton_lite.raw_format import RawWriter, read_raw
from proton_lite.runtime.buffers import ProfileBufferOOM, size_class
from proton_lite.runtime.collector import Collector, launch_metadata_fn
from sim_driver import SimDriver

SCRATCH = 256  # profile bytes per CTA


class _Meta:
    """The attributes of Triton's kernel metadata that the collector reads."""

    def __init__(self, name: str = "k", scratch: int = SCRATCH) -> None:
        self.name, self.hash, self.num_warps, self.num_ctas, self.shared = name, "hash-" + name, 4, 1, 0
        self.profile_scratch_size = scratch
        self.proton_lite = {"scopes": ["a"], "layout": {}}


class _LaunchMetadata:
    """Stands for Triton's LazyDict: ``get()`` evaluates the attached launch-metadata function."""

    def __init__(self, grid, meta, attributed: bool = True) -> None:
        self.grid, self.meta, self.attributed = grid, meta, attributed

    def get(self):
        return launch_metadata_fn(self.grid, self.meta, {}) if self.attributed else {"name": self.meta.name}


@pytest.fixture
def sim(monkeypatch):
    return SimDriver().install(monkeypatch)


@pytest.fixture
def collector(tmp_path, sim):
    """A collector writing to tmp_path/c.plraw; each test ends it with ``finish``."""
    return Collector(RawWriter(tmp_path / "c.plraw", {"test": True}), host_limit_bytes=64 << 20)


def launch(col, sim, stream: int, grid=(4, 1, 1), payload: bytes = b"", meta=None, attributed=True, check=None):
    """What Triton does for one launch: allocator, kernel, exit hook. Returns the kernel run."""
    meta = meta or _Meta()
    size = meta.profile_scratch_size * grid[0] * grid[1] * grid[2]
    buf = col.allocate(size, 16, stream)
    if check is not None:
        check(buf)
    run = sim.kernel(stream, buf.ptr, payload)
    col.on_launch_exit(_LaunchMetadata(grid, meta, attributed))
    return run


def finish(col, tmp_path):
    col.finish()
    col.writer.close()
    return read_raw(tmp_path / "c.plraw")


def test_every_launch_is_saved_once_in_order_with_only_its_own_bytes(collector, sim, tmp_path):
    n = 60
    full = b"\xff" * (SCRATCH * 4)
    for i in range(n):
        # launch 0 fills its whole buffer; the others write 8 bytes: any byte of an older
        # launch that survived into a reused buffer would show after those 8
        payload = full if i == 0 else i.to_bytes(4, "little") * 2
        launch(collector, sim, stream=1 + i % 2, payload=payload)
        if i % 3 == 0:
            time.sleep(0.001)  # let the drain thread return buffers, so that they get reused
    cap = finish(collector, tmp_path)
    assert [ln.launch_index for ln in cap.launches] == list(range(n))
    assert [ln.stream for ln in cap.launches] == [1 + i % 2 for i in range(n)]
    for i, ln in enumerate(cap.launches[1:], start=1):
        data = np.frombuffer(ln.buffer, np.uint8)
        assert len(data) == SCRATCH * 4 and ln.num_ctas == 4 and ln.grid == (4, 1, 1)
        assert bytes(data[:8]) == i.to_bytes(4, "little") * 2
        assert not data[8:].any(), f"launch {i} holds bytes it did not write"
    assert bytes(cap.launches[0].buffer) == full
    # the pool was reused rather than grown once per launch
    assert collector.device_pool.bytes_allocated < n * size_class(SCRATCH * 4) // 4


def test_a_buffer_returns_to_the_pool_only_after_its_kernel_ran(collector, sim, tmp_path):
    """Launches that are not saved (autotuner trials, unattributed) must not hand their buffer
    to another stream while their kernel may still write into it."""
    runs = []
    handed_out_while_queued = []

    def no_queued_kernel_writes_into(buf):
        for run in runs:
            if not run.done and run.ptr < buf.ptr + buf.size and buf.ptr < run.ptr + run.size:
                handed_out_while_queued.append(buf.ptr)

    for i in range(200):
        runs.append(launch(collector, sim, stream=1 + i % 3, payload=b"\x01" * 8, attributed=i % 2 == 0,
                           check=no_queued_kernel_writes_into))
        if i % 10 == 0:
            time.sleep(0.002)  # let the drain thread return buffers
    cap = finish(collector, tmp_path)
    assert not handed_out_while_queued
    assert collector.device_pool.bytes_allocated < 200 * size_class(SCRATCH * 4) // 2  # buffers were reused
    assert len(cap.launches) == 100
    assert collector.unattributed == 100


def test_a_fault_keeps_the_launches_before_it_and_names_the_first_lost(collector, sim, tmp_path):
    sim.fault_after_kernels = 5
    for i in range(10):
        launch(collector, sim, stream=1, payload=b"\x02" * 8)
    cap = finish(collector, tmp_path)
    assert [ln.launch_index for ln in cap.launches] == [0, 1, 2, 3, 4]
    assert collector.failed
    assert len(collector.errors) == 1 and collector.errors[0].startswith("launch 5:")
    assert "ILLEGAL_ADDRESS" in collector.errors[0] and "not saved" in collector.errors[0]


def test_pinned_memory_in_flight_stays_within_its_limit(tmp_path, sim):
    per_launch = size_class(SCRATCH * 64)
    writer = RawWriter(tmp_path / "c.plraw", {})
    col = Collector(writer, host_limit_bytes=3 * per_launch)
    for i in range(80):
        launch(col, sim, stream=1, grid=(64, 1, 1), payload=b"\x03" * 8)
        assert col.pinned_pool.bytes_allocated <= 3 * per_launch
    cap = finish(col, tmp_path)
    assert len(cap.launches) == 80


def test_a_stream_being_captured_into_a_graph_is_refused(collector, sim, tmp_path):
    sim.capturing.add(9)
    with pytest.raises(RuntimeError, match="CUDA graph"):
        collector.allocate(1024, 16, 9)
    assert sim.calls.get("mem_alloc", 0) == 0
    assert finish(collector, tmp_path).launches == []


def test_out_of_device_memory_names_the_size_and_the_ways_out(tmp_path, monkeypatch):
    sim = SimDriver(device_bytes=1 << 20).install(monkeypatch)
    writer = RawWriter(tmp_path / "c.plraw", {})
    col = Collector(writer, host_limit_bytes=64 << 20)
    try:
        with pytest.raises(ProfileBufferOOM, match=r"4\.0 MiB.*not launched.*granularity='warpgroup'"):
            col.allocate(4 << 20, 16, 1)
    finally:
        col.finish()
        writer.close()
    assert sim.calls.get("memset_d8_async", 0) == 0


def test_the_drain_thread_follows_device_changes(collector, sim, tmp_path):
    for device in (0, 1, 1, 0):
        sim.device = device
        launch(collector, sim, stream=1 + device, payload=b"\x04" * 8)
        time.sleep(0.01)  # one launch at a time through the drain thread
    cap = finish(collector, tmp_path)
    assert [ln.device for ln in cap.launches] == [0, 1, 1, 0]
    assert sim.contexts_set == ["ctx0", "ctx1", "ctx0"]


def test_a_failed_pinned_allocation_does_not_hold_its_share_of_the_limit(monkeypatch, sim):
    """A host allocation that fails raises to the launch; it must not stay counted as in
    flight, or later launches would wait for pinned memory that never comes back."""
    from proton_lite.runtime import cuda_api
    from proton_lite.runtime.buffers import PinnedPool
    real, out_of_memory = cuda_api.host_alloc, [True]

    def host_alloc(size):
        if out_of_memory[0]:
            raise cuda_api.CudaError("cuMemHostAlloc failed: CUDA_ERROR_OUT_OF_MEMORY")
        return real(size)

    monkeypatch.setattr(cuda_api, "host_alloc", host_alloc)
    pool = PinnedPool(limit=2 * 4096)
    for _ in range(2):  # together as much as the limit
        with pytest.raises(cuda_api.CudaError):
            pool.take(4096)
    out_of_memory[0] = False
    got = []
    taker = threading.Thread(target=lambda: got.extend([pool.take(4096), pool.take(4096)]), daemon=True)
    taker.start()
    taker.join(timeout=5)  # the whole limit is still available: no wait at all
    assert not taker.is_alive(), "take() waits for pinned memory held by failed allocations"
    assert got[0].ptr != got[1].ptr
    for buf in got:
        pool.give(buf)
    pool.release_all()
