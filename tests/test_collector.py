"""The collector's logic (allocator, launch-exit hook, drain thread) on a simulated driver.

The same paths run for real under ``pytest -m gpu`` on the H100; these tests pin down,
on every CI run, what must hold whatever the driver's timing: every saved launch is on
disk once, in order, with its own bytes and zeros where its kernel wrote nothing (so a
reused buffer never shows an older launch); a buffer goes back to the pool only after the
kernel that used it is done; a fault keeps the launches before it; pinned memory stays
within its limit (graph capture: tests/test_collector_graphs.py); the drain thread follows device changes.
"""
from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

from proton_lite.layout import (CTA_HEADER_BYTES, LAUNCH_PREFIX_BYTES, LAUNCH_SIZED_ALIGN, UNIT_HEADER_BYTES,
                                BufferLayout, read_capacity_word)
from proton_lite.raw_format import BATCH_ENTRY, RawWriter, read_raw
from proton_lite.runtime.buffers import ProfileBufferOOM, size_class
from proton_lite import native_drain
from proton_lite.runtime import cuda_api, drain_native, fastpath
from proton_lite.runtime.collector import IDLE_MAX_NS, Collector, LaunchInfo
from proton_lite.runtime.chunks import SPARE_CHUNKS
from sim_driver import SimDriver

SCRATCH = 256  # profile bytes per CTA


class _Meta:
    """The attributes of Triton's kernel metadata that the collector reads."""

    def __init__(self, name: str = "k", scratch: int = SCRATCH) -> None:
        self.name, self.hash, self.num_warps, self.num_ctas, self.shared = name, "hash-" + name, 4, 1, 0
        self.profile_scratch_size = scratch
        # one CTA-wide unit: 32 + 24 + 8 * capacity bytes per CTA
        layout = BufferLayout("cta", 4, (scratch - CTA_HEADER_BYTES - UNIT_HEADER_BYTES) // 8, "global")
        assert layout.stride == scratch
        self.proton_lite = {"scopes": ["a"], "layout": layout.to_json()}


class _LaunchMetadata:
    """Stands for Triton's LazyDict: ``get()`` evaluates the attached launch-metadata function."""

    def __init__(self, grid, meta, attributed: bool = True, jit_fn=None, args=None) -> None:
        self.grid, self.meta, self.attributed, self.jit_fn, self.args = grid, meta, attributed, jit_fn, args or {}

    def get(self):
        if not self.attributed:
            return {"name": self.meta.name}
        return LaunchInfo(self.jit_fn)(self.grid, self.meta, self.args)


@pytest.fixture
def sim(monkeypatch):
    return SimDriver().install(monkeypatch)


# Every test that launches through ``launch()`` runs twice: through the collector's Python
# hooks, and through the C ones (runtime/fastpath.py), whose common case must leave exactly
# the same state behind (it falls back to the Python hooks for everything else).
HOOKS = {"mode": "python"}
_CAP_QUERY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
_DEV_QUERY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))
_C_HOOKS: dict = {}
_DEFAULT_META: dict = {}


@pytest.fixture(autouse=True, params=["python", "c"])
def hook_mode(request, monkeypatch):
    """The Python hooks with the Python drain threads, or the C hooks with the C drain thread
    (runtime/drain_native.py): each pair is what a session uses where C can (not) be built."""
    if request.param == "c" and fastpath.module() is None:
        pytest.skip(f"the C hooks could not be built here: {fastpath.build_error()}")
    if request.param == "c" and native_drain.module() is None:
        pytest.skip(f"the C drain could not be built here: {native_drain.error()}")
    monkeypatch.setattr(drain_native, "ENABLED", request.param == "c")
    HOOKS["mode"] = request.param
    yield request.param
    HOOKS["mode"] = "python"
    _C_HOOKS.clear()
    _DEFAULT_META.clear()


def hooks(col):
    """(allocate, on_launch_exit) as a session installs them in the current mode."""
    if HOOKS["mode"] == "python" or col.resizer is not None:
        return col.allocate, col.on_launch_exit
    if id(col) not in _C_HOOKS:
        def capturing(stream, status):  # the simulated driver behind the C hooks' query pointers
            status[0] = int(bool(cuda_api.stream_is_capturing(stream or 0)))
            return 0

        def device(out):
            out[0] = cuda_api.current_device()
            return 0
        cap, dev = _CAP_QUERY(capturing), _DEV_QUERY(device)
        addresses = (ctypes.cast(cap, ctypes.c_void_p).value, ctypes.cast(dev, ctypes.c_void_p).value)
        fp = fastpath.hooks_for(col, queries=addresses)
        assert fp is not None
        _C_HOOKS[id(col)] = (fp, cap, dev, col)  # the callbacks must outlive the hooks
    fp = _C_HOOKS[id(col)][0]
    return fp.allocate, fp.on_launch_exit


@pytest.fixture
def collector(tmp_path, sim):
    """A collector writing to tmp_path/c.plraw; each test ends it with ``finish``."""
    return Collector(RawWriter(tmp_path / "c.plraw", {"test": True}), host_limit_bytes=64 << 20)


def _launch_metadata(grid, meta, attributed=True, jit_fn=None, args=None, stream=0):
    """Triton's own launch metadata object (LazyDict, 3.6 and 3.9) as its launcher holds it:
    our LaunchInfo pending in it, unless the JIT function had none attached."""
    from triton.compiler.compiler import LazyDict
    lm = LazyDict({"name": meta.name, "function": 1, "stream": stream})
    if attributed:
        lm.add(LaunchInfo(jit_fn), (grid, meta, args or {}))
    return lm


def launch(col, sim, stream: int, grid=(4, 1, 1), payload: bytes = b"", meta=None, attributed=True, check=None,
           jit_fn=None):
    """What Triton does for one launch: allocator, kernel, exit hook. Returns the kernel run."""
    if meta is None:  # one compiled kernel: Triton hands the same metadata object to every launch
        meta = _DEFAULT_META.setdefault(id(col), (_Meta(), col))[0]
    size = meta.profile_scratch_size * grid[0] * grid[1] * grid[2]
    allocate, on_launch_exit = hooks(col)
    buf = allocate(size, 16, stream)
    if check is not None:
        check(buf, size)
    run = sim.kernel(stream, buf, payload)
    on_launch_exit(_launch_metadata(grid, meta, attributed, jit_fn, stream=stream))
    return run


def finish(col, tmp_path):
    col.finish()
    col.writer.close()
    return read_raw(tmp_path / "c.plraw")


def chunks_allocated(col) -> int:
    return col.device_pool.bytes_allocated // size_class(col.chunk_bytes)


def test_each_launch_s_entry_is_packed_as_the_raw_format_lays_it_out_when_it_ends(collector, sim, tmp_path):
    """The hooks (Python and C) pack each launch's BATCH entry as it ends, so sealing a chunk
    builds none.  Read back here field by field with the byte layout of format.md 2.5a
    (struct "<IIQIIIIQQQQ"), against what each launch was."""
    import struct
    sealed, seal = [], collector._seal

    def checked_seal(chunk):
        sealed.append(bytes(chunk.entries))
        return seal(chunk)
    collector._seal = checked_seal
    grids = [(4, 1, 1), (3, 2, 1), (2, 2, 2), (4, 1, 1), (1, 2, 3)]
    t0 = time.time_ns()
    for i, grid in enumerate(grids):
        launch(collector, sim, stream=1, grid=grid, payload=bytes([i + 1]) * 8)
    t1 = time.time_ns()
    cap = finish(collector, tmp_path)
    assert collector.drain_stats()["thread"] == HOOKS["mode"]  # (each hook mode runs with its drain)
    assert [ln.grid for ln in cap.launches] == grids
    fields = [f for packed in sealed for f in struct.iter_unpack("<IIQIIIIQQQQ", packed)]
    assert len(fields) == len(grids)
    offset_in_chunk = 0
    for i, (grid, f) in enumerate(zip(grids, fields)):
        ctas = grid[0] * grid[1] * grid[2]
        kernel, device, index, gx, gy, gz, num_ctas, stream, host_ns, offset, nbytes = f
        assert (kernel, device, index, (gx, gy, gz), num_ctas, stream) == (0, 0, i, grid, ctas, 1)
        assert t0 <= host_ns <= t1 and nbytes == ctas * SCRATCH
        if i and offset == 0:  # a new chunk (the first launch came after idle time: copied alone)
            offset_in_chunk = 0
        assert offset == offset_in_chunk
        offset_in_chunk = -(-(offset + nbytes) // 256) * 256


def test_the_counters_and_chunk_state_the_c_hooks_hold_are_seen_from_python(tmp_path, sim):
    """The C hooks keep the open chunk's fill level, its launches in flight and the launch
    counters in C while they serve launches; whatever reads them from Python (the launch
    count, a Python hook on another thread) must see the true values."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=100, idle_ns=10**12)
    for i in range(10):
        launch(col, sim, stream=1, payload=bytes([i + 1]) * 8)
    assert col.launches == 10
    with col._lock:
        col._sync()
        chunk = col._open[(0, 1)]
        assert chunk.inflight == 0 and chunk.count == 9  # the first launch came after idle time: alone
        assert chunk.used == 8 * SCRATCH * 4 + SCRATCH * 4  # nine 1 KiB slices, 256-aligned
    # a Python hook on another thread takes the next slice: right after the last C one
    got = []
    t = threading.Thread(target=lambda: got.append(col.allocate(SCRATCH * 4, 16, 1)))
    t.start()
    t.join(5)
    assert got[0] == chunk.buf.ptr + 9 * SCRATCH * 4
    launch(col, sim, stream=1, payload=b"\x0b" * 8)  # and the C hooks go on after it
    cap = finish(col, tmp_path)
    assert [bytes(ln.buffer[:1]) for ln in cap.launches] == [bytes([i + 1]) for i in range(11)]
    assert [ln.launch_index for ln in cap.launches] == list(range(11))


def test_launches_on_more_streams_and_threads_than_the_c_hooks_keep_apart_are_all_saved(tmp_path, sim):
    """The C hooks hold the open chunks of 8 streams and the launches in flight of 16 threads;
    more go through Python.  12 streams in turn, and 20 threads each between allocator and
    exit hook at once: every launch saved once, with its own bytes."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=100, idle_ns=10**12)
    for i in range(48):
        launch(col, sim, stream=1 + i % 12, payload=i.to_bytes(8, "little"))
    allocate, on_launch_exit = hooks(col)
    meta = _DEFAULT_META[id(col)][0]
    ready, go = threading.Barrier(20), threading.Event()

    def one(k):
        ptr = allocate(SCRATCH * 4, 16, 100)
        ready.wait(5)  # all 20 hold a slice before any exit hook runs
        go.wait(5)
        sim.kernel(100, ptr, (1000 + k).to_bytes(8, "little"))
        on_launch_exit(_launch_metadata((4, 1, 1), meta, stream=100))
    threads = [threading.Thread(target=one, args=(k, )) for k in range(20)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    go.set()
    for t in threads:
        t.join(5)
    cap = finish(col, tmp_path)
    values = [int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches]
    assert values[:48] == list(range(48))
    assert sorted(values[48:]) == [1000 + k for k in range(20)]
    assert col.launches == 68 and sorted(ln.launch_index for ln in cap.launches) == list(range(68))


def test_every_launch_is_saved_once_in_order_with_only_its_own_bytes(collector, sim, tmp_path):
    n = 60
    collector.idle_recur_ns = 0  # every pause seals (not taken for a loop's steps): many reuses
    full = b"\xff" * (SCRATCH * 4)
    for i in range(n):
        # launch 0 fills its whole slice; the others write 8 bytes: any byte of an older
        # launch that survived into a reused chunk would show after those 8
        payload = full if i == 0 else i.to_bytes(4, "little") * 2
        launch(collector, sim, stream=1 + i % 2, payload=payload)
        if i % 3 == 0:
            time.sleep(0.002)  # idle streams: their chunks are copied, cleared and reused
    cap = finish(collector, tmp_path)
    assert [ln.launch_index for ln in cap.launches] == list(range(n))
    assert [ln.stream for ln in cap.launches] == [1 + i % 2 for i in range(n)]
    for i, ln in enumerate(cap.launches[1:], start=1):
        data = np.frombuffer(ln.buffer, np.uint8)
        assert len(data) == SCRATCH * 4 and ln.num_ctas == 4 and ln.grid == (4, 1, 1)
        assert bytes(data[:8]) == i.to_bytes(4, "little") * 2
        assert not data[8:].any(), f"launch {i} holds bytes it did not write"
    assert bytes(cap.launches[0].buffer) == full
    # chunks were reused rather than allocated once per copy (there were over 20 copies)
    assert collector.copies > 20 and chunks_allocated(collector) <= 8


def test_a_burst_is_copied_back_in_batches_of_copy_every(tmp_path, sim):
    # no launch counts as coming after idle time, however slow this machine is, except the first
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=16, idle_ns=10**12)
    n = 200
    for i in range(n):
        launch(col, sim, stream=3, payload=i.to_bytes(8, "little"))
    with col._lock:  # (chunks the C hooks switched away from are handed to the drain here)
        col._sync()
    copies_before_stop = col.copies  # chunks sealed with something to copy (the copier copies them)
    cap = finish(col, tmp_path)
    # the first launch came after idle time (copied alone), then one copy per 16 launches
    assert copies_before_stop == 1 + (n - 1) // 16
    assert sim.calls["memcpy_dtoh_async"] == copies_before_stop + 1  # the rest, at stop
    # the isolated first launch: its copy and one event on its stream; every other chunk: an
    # event on its stream, then the copier's copy and an event on the copier's stream
    assert sim.calls["event_record"] == 1 + 2 * (sim.calls["memcpy_dtoh_async"] - 1)
    assert sim.calls["stream_wait_event"] == sim.calls["memcpy_dtoh_async"] - 1
    assert [int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches] == list(range(n))
    if HOOKS["mode"] == "c":  # the C hooks served the burst and switched most chunks themselves
        fp = _C_HOOKS[id(col)][0]
        allocs, exits = fp.counts()
        # 14 chunks: the isolated first launch's, the first one of the burst (Python opens
        # both, and SPARE_CHUNKS chunks ahead with the burst's: the device's first stream to
        # launch back to back), then 12 switches: the C hooks' for as many as it opened, then
        # Python's (it opens as many again), ...
        switches = (n - 1) // 16
        assert fp.switches() == switches - switches // (SPARE_CHUNKS + 1)
        assert allocs == n - (copies_before_stop + 1 - fp.switches())  # the first launch into a chunk opened by Python
        assert exits == n - 1  # the very first launch: Python (a full chunk waits for the next launch)


def test_chunks_switched_by_the_c_hooks_keep_every_launch_in_order_and_go_back_to_the_pool(tmp_path, sim):
    """Two streams fill chunk after chunk, one of them with a launch twice the size halfway: the
    C hooks switch most chunks from the spares Python opened ahead (the larger launch takes
    the Python path, which opens spares that fit it), every launch is saved in its stream's
    order, and at stop every chunk is back in the pool."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=16, idle_ns=10**12)
    at_release = {}
    release = col.device_pool.release_all

    def observe_release(*a, **k):  # what the pool holds when stop frees it: nothing may be out
        pool = col.device_pool
        at_release["free"] = sum(len(v) for v in pool._free.values())
        at_release["made"] = sum(pool._count.values())
        return release(*a, **k)
    col.device_pool.release_all = observe_release
    sent = {1: [], 2: []}
    for i in range(400):
        stream = 1 + i % 2
        grid = (8, 1, 1) if stream == 2 and i >= 200 else (4, 1, 1)
        launch(col, sim, stream=stream, grid=grid, payload=i.to_bytes(8, "little"))
        sent[stream].append(i)
    cap = finish(col, tmp_path)
    got = {1: [], 2: []}
    for ln in cap.launches:
        got[ln.stream].append(int.from_bytes(bytes(ln.buffer[:8]), "little"))
    assert got == sent and col.lost == 0
    assert at_release["free"] == at_release["made"] and not col._spares and not col._c_sealed
    if HOOKS["mode"] == "c":
        fp = _C_HOOKS[id(col)][0]
        assert fp.switches() >= 16  # of 24 switches: Python's take one in SPARE_CHUNKS + 1
        assert sum(fp.counts()) >= 2 * 400 - 2 * 16  # the rest of the launches stayed in C


def test_without_spare_chunks_every_switch_is_python_s(tmp_path, sim, monkeypatch):
    """PROTON_LITE_SPARE_CHUNKS=0 (to measure the C switch against the Python one): no chunk
    is opened ahead and none is switched in C; a value that is not one is named."""
    monkeypatch.setenv("PROTON_LITE_SPARE_CHUNKS", "0")
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=16, idle_ns=10**12)
    for i in range(100):
        launch(col, sim, stream=1, payload=i.to_bytes(8, "little"))
    assert not col._spares
    cap = finish(col, tmp_path)
    assert [int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches] == list(range(100))
    if HOOKS["mode"] == "c":
        assert _C_HOOKS[id(col)][0].switches() == 0
    monkeypatch.setenv("PROTON_LITE_SPARE_CHUNKS", "four")
    with pytest.raises(ValueError, match="PROTON_LITE_SPARE_CHUNKS must be a whole number from 0 to 8"):
        Collector(RawWriter(tmp_path / "d.plraw", {}), host_limit_bytes=64 << 20)


def test_chunks_switched_by_the_c_hooks_stay_within_the_device_limit(tmp_path, sim):
    """The chunks the C hooks switch away from reach the drain at the next Python switch, all at
    once: spares are opened only as far as that leaves the device backlog within its limit."""
    per_launch = SCRATCH * 4
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=16, idle_ns=10**12,
                    device_limit_bytes=7 * 16 * per_launch)
    col.chunk_bytes = 16 * per_launch
    most = 0
    for i in range(600):  # two streams: their spares share the limit
        launch(col, sim, stream=1 + i % 2, payload=i.to_bytes(8, "little"))
        most = max(most, sum(len(v) for v in col._spares.values()))
    # every stream's spares, an open chunk and the one being sealed within 7 chunks (each stream
    # counting only its own spares opened 4 + 4)
    assert most <= 5 and (most > 0 or HOOKS["mode"] == "python")
    # the run's backlog; the stop then seals every stream's open chunk and the last ones the C
    # hooks switched, all at once, chunks already on the device: where the drain thread is
    # behind (a loaded host) that alone went one chunk past the bound below
    during = col._drain.peak_queued_bytes
    cap = finish(col, tmp_path)
    assert len(cap.launches) == 600
    # as with every switch in Python: past the limit by at most a chunk per stream
    assert during <= col.device_limit + 2 * size_class(16 * per_launch), (during, col._drain.peak_queued_bytes)


def test_the_first_launch_on_a_device_makes_the_chunks_a_loop_keeps_in_flight(tmp_path, sim):
    """A loop's first chunk switches take chunks made at its first launch, in one driver call,
    instead of growing the pool one allocation at a time while the loop runs."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=4, idle_ns=10**12)
    launch(col, sim, stream=1, payload=b"\x01" * 8)
    allocations = sim.calls["mem_alloc"]
    # chunks of 4 launches: the first launch's, the loop's first and its spares
    assert col.device_pool.bytes_allocated == (2 + SPARE_CHUNKS) * size_class(SCRATCH * 4 * 4)
    for i in range(11):  # three chunk switches while earlier chunks wait for the drain
        launch(col, sim, stream=1, payload=bytes([i + 2]) * 8)
    assert sim.calls["mem_alloc"] == allocations
    cap = finish(col, tmp_path)
    assert [bytes(ln.buffer[:1]) for ln in cap.launches] == [bytes([i + 1]) for i in range(12)]


def test_only_the_first_stream_to_launch_back_to_back_gets_spares_before_a_chunk_fills(tmp_path, sim):
    """With the C hooks, the device's first stream that launches back to back opens its spare
    chunks with its first chunk (its first switches are then in C); another stream opens
    none until one of its chunks is full, so that streams of a few launches hold none."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=16, idle_ns=10**12)
    for i in range(3):  # stream 1: a loop's first launches, within one chunk
        launch(col, sim, stream=1, payload=(i + 1).to_bytes(8, "little"))
    for i in range(3):  # stream 2: as many, also within one chunk
        launch(col, sim, stream=2, payload=(i + 4).to_bytes(8, "little"))
    c_switch = HOOKS["mode"] == "c"
    assert col._c_switch == c_switch
    assert len(col._spares.get((0, 1), ())) == (SPARE_CHUNKS if c_switch else 0)
    assert not col._spares.get((0, 2))
    for i in range(17):  # stream 2 fills its chunk and switches: its spares now
        launch(col, sim, stream=2, payload=(i + 7).to_bytes(8, "little"))
    assert len(col._spares.get((0, 2), ())) == (SPARE_CHUNKS if c_switch else 0)
    cap = finish(col, tmp_path)
    assert sorted(int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches) == list(range(1, 24))
    assert not col._spares


def test_a_stream_idle_at_every_step_keeps_its_steps_in_one_chunk_a_longer_pause_still_seals(tmp_path, sim):
    """A loop that waits at every step (a synchronize per step, longer than the idle time) is
    idle at each step; once that recurs, the idle time rises to twice the wait, so the next
    steps' launches share a chunk (no seal per step, the C hooks keep them), while a pause
    longer than that still seals; never above IDLE_MAX_NS."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=64,
                    idle_ns=1_000_000)
    sent = 0

    def step(wait: float):
        nonlocal sent
        for _ in range(3):
            launch(col, sim, stream=1, payload=sent.to_bytes(8, "little"))
            sent += 1
        time.sleep(wait)  # the step's synchronize: idle by the session's 1 ms

    for _ in range(3):
        step(0.005)
    assert 10_000_000 <= col.idle_ns <= IDLE_MAX_NS  # twice a wait of 5 ms or more
    copies = col.copies
    for _ in range(8):
        step(0.002)  # (shorter waits than the one measured: a busy machine's delays stay under it)
    with col._lock:
        col._sync()
    assert col.copies == copies  # eight more steps, none sealed for idle time
    time.sleep(0.05)  # a longer pause: what the stream holds is sealed before the next launch
    step(0)
    with col._lock:
        col._sync()
    assert col.copies > copies
    cap = finish(col, tmp_path)
    assert [int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches] == list(range(sent))
    if HOOKS["mode"] == "c":  # the steps after the rise stayed on the C path
        allocs, exits = _C_HOOKS[id(col)][0].counts()
        assert allocs >= 8 * 3 - 2 and exits >= 8 * 3 - 2


def test_a_first_launch_larger_than_a_chunk_reserves_nothing(tmp_path, sim):
    """A launch larger than a chunk gets a chunk of its own; several more of its size made at
    the first launch could take device memory the program needs."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=4 << 20)  # 1 MiB chunks
    meta = _Meta(scratch=SCRATCH)
    launch(col, sim, stream=1, grid=(8192, 1, 1), meta=meta, payload=b"\x01" * 8)  # 2 MiB
    assert col.device_pool.bytes_allocated == size_class(8192 * SCRATCH)  # its own chunk only
    cap = finish(col, tmp_path)
    assert len(cap.launches) == 1 and bytes(cap.launches[0].buffer[:1]) == b"\x01"


def test_a_launch_after_idle_time_is_copied_at_once(collector, sim, tmp_path):
    for i in range(3):
        launch(collector, sim, stream=1, payload=b"\x07" * 8)
        assert sim.calls.get("memcpy_dtoh_async", 0) == i + 1  # on its way before the next call
        time.sleep(0.002)
    assert len(finish(collector, tmp_path).launches) == 3


def test_launches_of_a_burst_are_copied_before_a_launch_after_idle_time(collector, sim, tmp_path):
    """The copy of the earlier launches is enqueued before the next kernel, so a fault in that
    kernel (it follows a synchronize, say) cannot take them along."""
    # every pause is idle time: on a loaded host two of the burst's own gaps could pass 1 ms and
    # be taken for a loop's steps (the next test), raising the idle time past this 2 ms pause
    collector.idle_recur_ns = 0
    for i in range(5):
        launch(collector, sim, stream=1, payload=b"\x08" * 8)
    time.sleep(0.002)
    sim.fault_after_kernels = 5  # the next kernel faults
    launch(collector, sim, stream=1, payload=b"\x09" * 8)
    cap = finish(collector, tmp_path)
    assert [ln.launch_index for ln in cap.launches] == [0, 1, 2, 3, 4], (
        collector.lost, collector.errors, collector.idle_ns)
    assert collector.failed and collector.errors[0].startswith("launch 5:")
    assert collector.lost == 1


def test_a_fault_after_a_loops_steps_counts_the_launches_it_took_along(collector, sim, tmp_path):
    """Pauses that recur (a loop synchronizing each step) raise the idle time to twice the
    pause, so that the steps' launches share chunks; a shorter pause then seals nothing, and
    a fault in the next kernel takes the open chunk's launches along: counted and named in
    the error, never dropped silently."""
    for i in range(5):
        launch(collector, sim, stream=1, payload=b"\x08" * 8)
        if i in (1, 2):
            time.sleep(0.005)  # two pauses of 5 ms within IDLE_RECUR_NS: a loop's steps
    assert collector.idle_ns >= 2 * 5_000_000
    time.sleep(0.002)  # idle by the default 1 ms, not by the raised idle time
    sim.fault_after_kernels = 5
    launch(collector, sim, stream=1, payload=b"\x09" * 8)
    cap = finish(collector, tmp_path)
    saved = [ln.launch_index for ln in cap.launches]  # [0, 1, 2, 3] unless a loaded host paused more
    assert saved == list(range(len(saved))) and len(saved) <= 4  # launch 4 shared the faulting one's chunk
    lost = 6 - len(saved)
    assert collector.failed and collector.lost == lost
    assert collector.errors[0].startswith(f"launch {len(saved)}:")
    assert f"{lost} launch(es) from this one on were still on the GPU" in collector.errors[0]


@pytest.mark.parametrize("copy_every, saved", [(1, [0, 1, 2, 3, 4]), (32, [0])])
def test_a_fault_in_a_burst_keeps_what_was_copied_and_reports_what_was_not(tmp_path, sim, copy_every, saved):
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=copy_every,
                    idle_ns=10**12)
    sim.fault_after_kernels = 5
    for i in range(10):
        launch(col, sim, stream=1, payload=b"\x02" * 8)
    cap = finish(col, tmp_path)
    assert [ln.launch_index for ln in cap.launches] == saved
    assert col.failed and col.lost == 10 - len(saved)
    assert col.errors[0].startswith(f"launch {len(saved)}:")
    assert "ILLEGAL_ADDRESS" in col.errors[0] and "not saved" in col.errors[0]
    assert f"{10 - len(saved)} launch(es) from this one on were still on the GPU" in col.errors[0]
    assert len(col.errors) == 1


def test_copies_that_finished_before_a_fault_are_kept_though_no_event_can_say_so(tmp_path, sim):
    """After a fault every CUDA call fails, also the wait on an event that completed before
    it.  The copies that ran are recognised by their data and kept; the rest are counted."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=1, idle_ns=10**12)
    gate = threading.Event()
    write_kernel = col.writer.kernel
    col.writer.kernel = lambda data: (gate.wait(5), write_kernel(data))  # the drain thread waits here
    sim.drain_gate = gate  # (the C drain's thread, here)
    sim.fault_after_kernels = 5
    for i in range(6):
        launch(col, sim, stream=1, payload=bytes([i + 1]) * 8)
    sim.run_all()  # the GPU runs everything, copies 0-4 included, then kernel 5 faults
    gate.set()
    cap = finish(col, tmp_path)
    assert [bytes(ln.buffer[:1]) for ln in cap.launches] == [bytes([i + 1]) for i in range(5)]
    assert col.lost == 1 and col.errors[0].startswith("launch 5:") and "1 launch(es)" in col.errors[0]


def test_a_chunk_is_not_copied_while_another_thread_still_has_to_launch_into_it(tmp_path, sim):
    """Two threads on one stream: thread A takes its slice, then thread B launches twice and
    its second launch finds the chunk full.  The chunk's copy must wait for A's kernel, or
    A's records would be zeros."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=2, idle_ns=10**12)
    got_slice, go_on = threading.Event(), threading.Event()

    def thread_a():
        ptr = col.allocate(SCRATCH * 4, 16, 5)
        got_slice.set()
        go_on.wait(5)
        sim.kernel(5, ptr, b"\xaa" * 8)
        col.on_launch_exit(_LaunchMetadata((4, 1, 1), _Meta()))

    a = threading.Thread(target=thread_a)
    a.start()
    assert got_slice.wait(5)
    launch(col, sim, stream=5, payload=b"\xbb" * 8)  # thread B: the chunk's second slice
    launch(col, sim, stream=5, payload=b"\xcc" * 8)  # no room left: the chunk is closed
    assert sim.calls.get("memcpy_dtoh_async", 0) == 0  # A's kernel is not enqueued yet
    go_on.set()
    a.join(5)
    assert sim.calls.get("memcpy_dtoh_async", 0) == 1  # A's exit hook sealed it
    cap = finish(col, tmp_path)
    assert sorted(bytes(ln.buffer[:8]) for ln in cap.launches) == [b"\xaa" * 8, b"\xbb" * 8, b"\xcc" * 8]


def test_a_launch_that_never_reached_its_exit_hook_does_not_hold_its_chunk(tmp_path, sim):
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=2, idle_ns=10**12)
    hooks(col)[0](SCRATCH * 4, 16, 1)  # its cuLaunchKernel failed: Triton never calls the exit hook
    for i in range(4):
        launch(col, sim, stream=1, payload=bytes([i + 1]) * 8)
    copies = col.copies  # chunks sealed (and handed to the copier) so far
    cap = finish(col, tmp_path)
    assert copies >= 2  # batches went out during the burst, not only at stop
    assert [bytes(ln.buffer[:1]) for ln in cap.launches] == [b"\x01", b"\x02", b"\x03", b"\x04"]


def test_a_failed_launch_in_a_thread_that_launches_nothing_more_does_not_hold_back_a_chunk(tmp_path, sim):
    """Thread A takes a slice and its launch fails (no exit hook), then A ends.  The chunk fills
    up with another thread's launches and is closed; at stop it must still be copied."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=3, idle_ns=10**12)
    a = threading.Thread(target=lambda: col.allocate(SCRATCH * 4, 16, 1))
    a.start()
    a.join(5)
    for i in range(2):  # with A's slice the chunk holds three: closed, waiting for A
        launch(col, sim, stream=1, payload=bytes([i + 1]) * 8)
    launch(col, sim, stream=1, payload=b"\x03" * 8)  # no room: a new chunk
    cap = finish(col, tmp_path)
    assert [bytes(ln.buffer[:1]) for ln in cap.launches] == [b"\x01", b"\x02", b"\x03"]
    assert not col.failed and col.lost == 0


def test_a_failed_launch_on_one_gpu_is_settled_in_that_gpu_s_context_when_its_thread_moves_on(tmp_path, sim):
    """Thread A's launch on GPU 0 fails (no exit hook); thread B fills and closes that chunk,
    which then waits for A's slice. A's next launch is on GPU 1: settling the stale slice
    copies GPU 0's chunk, which must happen in GPU 0's context (the simulated driver refuses
    anything else), and A's thread must be back in GPU 1's context for its own launch."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=3, idle_ns=10**12)
    hooks(col)[0](SCRATCH * 4, 16, 1)  # thread A (this one), GPU 0: its launch failed

    def thread_b():
        for i in range(2):  # with A's slice the chunk holds three
            launch(col, sim, stream=1, payload=bytes([i + 1]) * 8)
        launch(col, sim, stream=1, payload=b"\x03" * 8)  # no room: closed, waiting for A
    b = threading.Thread(target=thread_b)
    b.start()
    b.join(5)
    sim.device = 1
    launch(col, sim, stream=2, payload=b"\x04" * 8)
    assert sim.current_context() == "ctx1"
    cap = finish(col, tmp_path)
    assert not col.failed and col.lost == 0 and col.errors == []
    assert sorted((ln.device, bytes(ln.buffer[:1])) for ln in cap.launches) == \
        [(0, b"\x01"), (0, b"\x02"), (0, b"\x03"), (1, b"\x04")]


def test_a_slice_is_never_handed_out_while_a_queued_kernel_may_write_into_it(collector, sim, tmp_path):
    """Launches that are not saved (autotuner trials, unattributed) share chunks with saved
    ones; a chunk returns to the pool only once every kernel in it has run."""
    runs = []
    handed_out_while_queued = []

    def no_queued_kernel_writes_into(ptr, size):
        for run in runs:
            if not run.done and run.ptr < ptr + size and ptr < run.ptr + run.size:
                handed_out_while_queued.append(ptr)

    for i in range(200):
        runs.append(launch(collector, sim, stream=1 + i % 3, payload=b"\x01" * 8, attributed=i % 2 == 0,
                           check=no_queued_kernel_writes_into))
        if i % 10 == 0:
            time.sleep(0.002)  # let the drain thread return chunks
    cap = finish(collector, tmp_path)
    assert not handed_out_while_queued
    assert chunks_allocated(collector) <= 12  # over 40 copies, chunks reused
    assert len(cap.launches) == 100 and all(bytes(ln.buffer[:8]) == b"\x01" * 8 for ln in cap.launches)
    assert collector.unattributed == 100


def test_pinned_memory_in_flight_stays_within_its_limit(tmp_path, sim):
    per_launch = size_class(SCRATCH * 64)
    writer = RawWriter(tmp_path / "c.plraw", {})
    col = Collector(writer, host_limit_bytes=3 * per_launch)
    for i in range(80):
        launch(col, sim, stream=1, grid=(64, 1, 1), payload=b"\x03" * 8)
        assert col.pinned_pool.bytes_allocated <= 3 * per_launch
    cap = finish(col, tmp_path)
    assert len(cap.launches) == 80


class _GatedWriter(RawWriter):
    """A raw writer whose batch writes wait until ``gate`` is set: a disk that is behind (the
    C drain, which writes without this class, waits at the same gate in the simulated driver)."""

    def __init__(self, path, sim) -> None:
        super().__init__(path, {})
        self.gate = sim.drain_gate = threading.Event()
        self.batches = 0

    def batch(self, entries, data) -> None:
        self.gate.wait()
        self.batches += 1
        super().batch(entries, data)


def _copy_streams(sim):
    """Record the stream of every device-to-host copy the simulated driver is asked for."""
    streams = []
    real = cuda_api.memcpy_dtoh_async

    def copy(dst, src, size, stream):
        streams.append(int(stream))
        return real(dst, src, size, stream)
    return streams, copy


def test_a_disk_that_is_behind_does_not_hold_up_launches_while_device_memory_lasts(tmp_path, sim, monkeypatch):
    """Pinned memory for two chunks and a writer that writes nothing yet: every launch of the
    burst still returns, its chunk waiting on the device, and all are written, in order, once
    the disk catches up."""
    streams, copy = _copy_streams(sim)
    monkeypatch.setattr(cuda_api, "memcpy_dtoh_async", copy)
    writer = _GatedWriter(tmp_path / "c.plraw", sim)
    per_launch = SCRATCH * 64
    col = Collector(writer, host_limit_bytes=2 * size_class(per_launch), copy_every=1 << 20, idle_ns=10**12,
                    device_limit_bytes=64 << 20)
    col.chunk_bytes = per_launch  # one launch per chunk: 40 chunks, 20x what pinned memory holds
    done = threading.Event()

    def burst():
        for i in range(40):
            launch(col, sim, stream=5, grid=(64, 1, 1), payload=i.to_bytes(8, "little"))
        done.set()
    t = threading.Thread(target=burst, daemon=True)
    t.start()
    try:
        assert done.wait(timeout=20), "launches waited for the disk"
        assert writer.batches == 0 and col._drain.queued_bytes >= 30 * per_launch  # they wait on the device
    finally:
        writer.gate.set()
    t.join()
    cap = finish(col, tmp_path)
    assert [int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches] == list(range(40))
    # only the first (after idle time) was copied on the launches' stream; the rest on the copier's
    assert streams[0] == 5 and len(streams) == 40 and 5 not in streams[1:]
    assert col._drain.queued_bytes == 0 and col.pinned_pool.bytes_allocated <= 2 * size_class(per_launch)


def test_device_memory_held_by_chunks_waiting_for_the_disk_stays_within_its_limit(tmp_path, sim):
    """Past the device limit the launching thread waits for the drain, and goes on once the
    disk catches up; nothing is lost."""
    writer = _GatedWriter(tmp_path / "c.plraw", sim)
    per_launch = SCRATCH * 64
    limit = 6 * per_launch
    col = Collector(writer, host_limit_bytes=1 << 20, copy_every=1 << 20, idle_ns=10**12, device_limit_bytes=limit)
    col.chunk_bytes = per_launch
    launched = []

    def burst():
        for i in range(30):
            launch(col, sim, stream=2, grid=(64, 1, 1), payload=i.to_bytes(8, "little"))
            launched.append(i)
    t = threading.Thread(target=burst, daemon=True)
    t.start()
    try:
        time.sleep(0.5)
        stalled_at = len(launched)
        assert 6 <= stalled_at < 30, stalled_at  # it stopped at the limit (a chunk or two past it)
        assert col._drain.queued_bytes <= limit + per_launch
    finally:
        writer.gate.set()
    t.join(timeout=20)
    assert len(launched) == 30
    cap = finish(col, tmp_path)
    assert len(cap.launches) == 30 and col.lost == 0
    assert col._drain.peak_queued_bytes <= limit + per_launch and col._drain.waits > 0


def test_running_out_of_device_memory_while_chunks_wait_for_the_disk_waits_instead_of_failing(tmp_path, monkeypatch):
    sim = SimDriver(device_bytes=10 * size_class(SCRATCH * 64)).install(monkeypatch)
    writer = _GatedWriter(tmp_path / "c.plraw", sim)
    col = Collector(writer, host_limit_bytes=1 << 20, copy_every=1 << 20, idle_ns=10**12,
                    device_limit_bytes=1 << 30)  # the limit is never reached: memory runs out first
    col.chunk_bytes = SCRATCH * 64
    threading.Timer(0.3, writer.gate.set).start()
    for i in range(40):
        launch(col, sim, stream=2, grid=(64, 1, 1), payload=i.to_bytes(8, "little"))
    cap = finish(col, tmp_path)
    assert [int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches] == list(range(40))


def test_out_of_device_memory_names_the_size_and_the_ways_out(tmp_path, monkeypatch):
    sim = SimDriver(device_bytes=1 << 20).install(monkeypatch)
    writer = RawWriter(tmp_path / "c.plraw", {})
    col = Collector(writer, host_limit_bytes=64 << 20)
    try:
        with pytest.raises(ProfileBufferOOM, match=r"4\.0 MiB.*not launched.*granularity='warpgroup'"):
            col.allocate(4 << 20, 16, 1)
        # a launch smaller than a chunk still gets a buffer of its own size
        launch(col, sim, stream=1, payload=b"\x05" * 8)
    finally:
        col.finish()
        writer.close()
    assert sim.calls.get("memset_d8_async", 0) >= 1
    assert len(read_raw(tmp_path / "c.plraw").launches) == 1


def test_the_drain_thread_follows_device_changes(collector, sim, tmp_path):
    for device in (0, 1, 1, 0):
        sim.device = device
        launch(collector, sim, stream=1 + device, payload=b"\x04" * 8)
        time.sleep(0.01)  # one launch at a time through the drain thread
    cap = finish(collector, tmp_path)
    assert collector.errors == [] and collector.lost == 0 and collector.unattributed == 0
    assert [ln.device for ln in cap.launches] == [0, 1, 1, 0]
    assert [bytes(ln.buffer[:1]) for ln in cap.launches] == [b"\x04"] * 4
    drain = [ctx for thread, ctx in sim.contexts_set if thread in ("proton_lite-write", "proton_lite-drain (C)")]
    assert drain == ["ctx0", "ctx1", "ctx0"]
    # events, memory and streams stayed in their own contexts (the simulated driver refuses
    # anything else), everything was freed, and the launching thread is back in its context
    assert sim.device_mem == {} and sim.current_context() == "ctx0"


def test_chunks_of_two_devices_still_open_at_stop_are_copied_each_in_its_own_context(tmp_path, sim):
    col = Collector(RawWriter(tmp_path / "c.plraw", {"test": True}), host_limit_bytes=64 << 20, idle_ns=10**12)
    for device in (0, 1, 1, 0, 1):  # after the first launch of each device, no idle time: chunks stay open
        sim.device = device
        launch(col, sim, stream=1 + device, payload=bytes([device + 1]) * 8)
    cap = finish(col, tmp_path)
    assert col.errors == [] and col.lost == 0
    assert [(ln.device, bytes(ln.buffer[:1])) for ln in cap.launches] == \
        [(0, b"\x01"), (1, b"\x02"), (1, b"\x02"), (0, b"\x01"), (1, b"\x02")]
    assert sim.device_mem == {} and sim.current_context() == "ctx1"  # freed; the caller's context is back


def test_chunks_of_two_devices_are_switched_each_in_its_own_context(tmp_path, sim):
    """Launches alternate between two GPUs in bursts that fill chunks: each device's spares
    and their events are made in its context, and the C hooks record each switch's event on
    its own device's stream (the simulated driver refuses an event of another context), so
    nothing fails and every launch is saved in its device's order."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, copy_every=16, idle_ns=10**12)
    sent = {0: [], 1: []}
    for i in range(480):
        device = (i // 40) % 2  # bursts of 40 launches, two and a half chunks each
        sim.device = device
        launch(col, sim, stream=1 + device, payload=i.to_bytes(8, "little"))
        sent[device].append(i)
    cap = finish(col, tmp_path)
    # on failure: the driver call the simulation refused, and why (the C drain sees only a code)
    assert col.errors == [] and col.lost == 0 and not col.failed, (col.errors, sim.native_errors[:3])
    got = {0: [], 1: []}
    for ln in cap.launches:
        got[ln.device].append(int.from_bytes(bytes(ln.buffer[:8]), "little"))
    assert got == sent
    if HOOKS["mode"] == "c":
        assert _C_HOOKS[id(col)][0].switches() > 0
    assert sim.device_mem == {}


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


def test_exact_buffers_give_each_launch_an_allocation_of_its_own_size(tmp_path, sim, monkeypatch):
    """PROTON_LITE_EXACT_BUFFERS=1 (for compute-sanitizer runs): a write past a launch's buffer
    must leave its allocation, not land in a neighbour's slice."""
    monkeypatch.setenv("PROTON_LITE_EXACT_BUFFERS", "1")
    sizes = []
    real_alloc = sim.mem_alloc
    monkeypatch.setattr("proton_lite.runtime.cuda_api.mem_alloc", lambda n: (sizes.append(n), real_alloc(n))[1])
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    for i in range(5):
        launch(col, sim, stream=1, grid=(3, 1, 1), payload=bytes([i + 1]) * 8)
    cap = finish(col, tmp_path)
    assert sizes == [3 * SCRATCH] * 5
    assert [bytes(ln.buffer[:1]) for ln in cap.launches] == [bytes([i + 1]) for i in range(5)]


def test_autotuner_trials_are_recognised_from_triton_s_own_autotuner_code():
    """The exit hook skips launches made while Triton's ``Autotuner._bench`` times a config;
    here the real ``_bench`` runs its ``kernel_call`` into a stand-in for the launch path."""
    from triton.runtime.autotuner import Autotuner, Config

    from proton_lite.runtime.trials import _in_autotuner_benchmark
    seen = []

    def exit_hook():  # Collector.on_launch_exit, called by Triton's hook chain
        seen.append(_in_autotuner_benchmark())

    def hook_chain():
        exit_hook()

    class JitFunction:  # JITFunction.run -> launcher -> hooks
        def __init__(self):
            self.fn = hook_chain

        def run(self, *args, **kwargs):
            hook_chain()

    tuner = Autotuner(JitFunction(), [], [Config({})], [], None, None,
                      do_bench=lambda kernel_call, quantiles: (kernel_call(), [1.0, 1.0, 1.0])[1])
    tuner.nargs = {}
    tuner._bench(config=Config({}))  # a timing trial
    JitFunction().run()  # the launch the user makes afterwards
    assert seen == [True, False]

    # the same, with the stand-in taking the place of JITFunction.run: then only its caller is
    # looked at (kernel_call, or the user's code), not the frames above
    from proton_lite.runtime import trials as trials_module
    saved = trials_module._JIT_RUN
    trials_module._JIT_RUN = JitFunction.run.__code__
    try:
        tuner._bench(config=Config({}))
        JitFunction().run()

        def launch_from_a_trial_s_callee():  # kernel_call is further up, not the caller: not a trial
            JitFunction().run()
        tuner.fn.run = lambda *a, **k: launch_from_a_trial_s_callee()
        tuner._bench(config=Config({}))
    finally:
        trials_module._JIT_RUN = saved
    assert seen == [True, False, True, False, False]


def _cta_unit_counts(counts) -> bytes:
    """CTA blocks (one CTA-wide unit each) holding only the unit ``count`` fields."""
    out = b""
    for count in counts:
        out += bytes(CTA_HEADER_BYTES) + count.to_bytes(4, "little") + bytes(UNIT_HEADER_BYTES - 4)
    return out


def test_exact_sizing_runs_a_launch_again_with_a_buffer_from_its_counts(tmp_path, sim, monkeypatch):
    """sizing="exact": the exit hook reads the counts; a launch whose records did not fit is
    discarded and the kernel launched again, compiled with a capacity that holds them."""
    from triton import knobs

    from proton_lite.passes.config import InstrumentConfig
    from proton_lite.runtime.exact import Resizer
    config = InstrumentConfig(granularity="cta", loop_capacity=4)
    monkeypatch.setattr(knobs.compilation, "instrumentation_mode", config.to_mode())
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, resizer=Resizer(config))
    relaunches = []

    class JitFunction:  # kernel[grid](**args, **options), compiled under the session's mode now
        def __getitem__(self, grid):
            def run(**kwargs):
                relaunches.append((grid, kwargs))
                capacity = InstrumentConfig.from_mode(knobs.compilation.instrumentation_mode).loop_capacity
                meta = _Meta(scratch=CTA_HEADER_BYTES + UNIT_HEADER_BYTES + 8 * capacity)
                ptr = col.allocate(meta.profile_scratch_size * 2, 16, 1)
                sim.kernel(1, ptr, _cta_unit_counts([11, 3]))
                col.on_launch_exit(_LaunchMetadata(grid, meta, jit_fn=self, args={"n": 11}))
            return run

    jit = JitFunction()
    small = _Meta(scratch=CTA_HEADER_BYTES + UNIT_HEADER_BYTES + 8 * 4)  # 4 records per unit
    ptr = col.allocate(small.profile_scratch_size * 2, 16, 1)
    sim.kernel(1, ptr, _cta_unit_counts([11, 3]))  # CTA 0 tried 11 records: 7 did not fit
    col.on_launch_exit(_LaunchMetadata((2, 1, 1), small, jit_fn=jit, args={"n": 11}))
    ptr = col.allocate(small.profile_scratch_size * 2, 16, 1)  # a launch that fits: kept as it is
    sim.kernel(1, ptr, _cta_unit_counts([2, 3]))
    col.on_launch_exit(_LaunchMetadata((2, 1, 1), small, jit_fn=jit, args={"n": 2}))
    cap = finish(col, tmp_path)
    assert relaunches == [((2, 1, 1), {"n": 11, "num_warps": 4, "num_ctas": 1})]
    assert col.resizer.reruns == 1 and col.resizer.loop_capacity == 16
    assert InstrumentConfig.from_mode(knobs.compilation.instrumentation_mode).loop_capacity == 16  # kept
    # saved: the second run (16 records per unit) and the launch that fit; not the first run
    sizes = sorted(len(ln.buffer) // 2 for ln in cap.launches)
    assert sizes == [small.profile_scratch_size, CTA_HEADER_BYTES + UNIT_HEADER_BYTES + 8 * 16]


def test_exact_sizing_does_not_wait_for_kernels_whose_records_always_fit(tmp_path, sim):
    """A kernel whose record count the TTIR bounds within its capacity cannot drop: exact mode
    must not synchronize on its launches (only kernels with run-time loop bounds pay)."""
    from proton_lite.passes.config import InstrumentConfig
    from proton_lite.runtime.exact import Resizer
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20,
                    resizer=Resizer(InstrumentConfig(granularity="cta")))
    bounded, unbounded = _Meta("bounded"), _Meta("loop")
    bounded.proton_lite = dict(bounded.proton_lite, records_per_unit_max=4)  # capacity 25
    unbounded.proton_lite = dict(unbounded.proton_lite, records_per_unit_max=None)

    class JitFunction:
        pass
    for meta in (bounded, bounded, unbounded):
        ptr = col.allocate(meta.profile_scratch_size * 2, 16, 1)
        sim.kernel(1, ptr, _cta_unit_counts([3, 3]))
        col.on_launch_exit(_LaunchMetadata((2, 1, 1), meta, jit_fn=JitFunction()))
    assert sim.calls.get("stream_synchronize", 0) == 1  # the unbounded kernel's launch only
    assert len(finish(col, tmp_path).launches) == 3 and col.resizer.reruns == 0


def test_exact_sizing_helpers():
    from proton_lite.runtime.exact import capacity_for, max_unit_count
    layout = BufferLayout("warp", 4, 2, "shared")  # 4 units of 2 records
    blocks = bytearray(layout.stride * 3)
    for cta, unit, count in ((0, 3, 5), (2, 1, 9), (1, 0, 1)):
        at = cta * layout.stride + CTA_HEADER_BYTES + unit * layout.unit_bytes
        blocks[at:at + 4] = count.to_bytes(4, "little")
    assert max_unit_count(np.frombuffer(bytes(blocks), np.uint8), layout, 3) == 9
    assert [capacity_for(n) for n in (1, 2, 3, 9, 256, 257)] == [1, 2, 4, 16, 256, 512]


def test_a_rerun_repeats_the_compile_options_the_user_chose():
    """relaunch_options reads them from a real compiled kernel's metadata (sm_90, no GPU)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import kernels as K
    from proton_lite.runtime.exact import relaunch_options
    src = ASTSource(K.vector_add, {**K.signature(K.vector_add), "BLOCK": "constexpr"}, {"BLOCK": 1024})
    chosen = dict(num_warps=8, num_stages=2, enable_fp_fusion=False, maxnreg=128)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=chosen)
    assert relaunch_options(compiled.metadata).items() >= chosen.items()


def test_a_pinned_buffer_comes_back_zeroed(sim):
    """After a fault, a copy that never ran must read as empty (Collector._salvage): a reused
    pinned buffer must not show what an earlier copy wrote into it."""
    from proton_lite.runtime.buffers import PinnedPool
    pool = PinnedPool(limit=1 << 20)
    buf = pool.take(3000)
    buf.view()[:] = 0xAB  # what a copy wrote
    pool.give(buf)
    again = pool.take(3000)
    assert again.ptr == buf.ptr and not again.view().any()
    pool.give(again)
    pool.release_all()


# -- kernels sized at launch (a loop bounded by an argument) ---------------------------------------
class _SizedMeta(_Meta):
    """A kernel whose records per unit are 2 * n (a scope in ``for i in range(n)``)."""

    def __init__(self, fallback: int = 4) -> None:
        layout = BufferLayout("cta", 4, fallback, "global", sized_at_launch=True)
        super().__init__("sized", layout.stride)
        self.proton_lite = {"scopes": ["a"], "layout": layout.to_json(), "records_per_unit_max": None,
                            "records_per_unit_expr": ["prod", ["const", 2],
                                                      ["trips", ["const", 0], ["arg", "n", 32], ["const", 1]]]}
        self.layout = layout


class _Launcher39:
    """Calls the profile allocator the way Triton 3.9's launcher does (launch_metadata is a parameter)."""

    def __call__(self, col, grid, stream, function, kernel_metadata, launch_metadata, size):
        def allocate_scratch():
            return col.allocate(size, LAUNCH_SIZED_ALIGN, stream)
        return allocate_scratch()


class _Launcher36:
    """... and the way Triton 3.6's does (launch_metadata is the second of ``*args``)."""

    def __call__(self, col, size, stream, *args):
        def allocate_scratch():
            return col.allocate(size, LAUNCH_SIZED_ALIGN, stream)
        return allocate_scratch()


def _sized_launch(col, sim, args, launcher, grid=(3, 1, 1), stream=1, meta=None):
    meta = meta or _SizedMeta()
    lm = _launch_metadata(grid, meta, args=args)
    size = meta.profile_scratch_size * grid[0]
    if launcher == "3.9":
        ptr = _Launcher39()(col, grid, stream, None, None, lm, size)
    elif launcher == "3.6":
        ptr = _Launcher36()(col, size, stream, None, lm, None, None)
    else:  # no launcher frame: nothing to read the arguments from
        ptr = col.allocate(size, LAUNCH_SIZED_ALIGN, stream)
    sim.kernel(stream, ptr + LAUNCH_PREFIX_BYTES, b"\x01" * 8)  # the kernel writes after the prefix
    col.on_launch_exit(lm)
    return meta


@pytest.mark.parametrize("launcher", ["3.9", "3.6"])
def test_a_kernel_sized_at_launch_gets_the_buffer_its_arguments_need(collector, sim, tmp_path, launcher):
    meta = None
    for n in (10, 300, 0):
        meta = _sized_launch(collector, sim, {"n": n, "x_ptr": object()}, launcher)
    cap = finish(collector, tmp_path)
    assert collector.unsized == 0 and collector.capped == 0
    for ln, n in zip(cap.launches, (10, 300, 0)):
        layout = meta.layout.with_capacity(2 * n)
        assert len(ln.buffer) == layout.buffer_bytes(3) == LAUNCH_PREFIX_BYTES + 3 * layout.stride
        word = int.from_bytes(bytes(ln.buffer[:4]), "little")
        assert read_capacity_word(word) == 2 * n  # written on the stream before the kernel ran
        assert bytes(ln.buffer[LAUNCH_PREFIX_BYTES:LAUNCH_PREFIX_BYTES + 8]) == b"\x01" * 8


def test_a_grid_stride_kernel_gets_the_records_of_its_busiest_program(collector, sim, tmp_path):
    """``range(pid, n, num_programs)`` with a scope: the first programs run one more row."""
    meta = _SizedMeta()
    meta.proton_lite["records_per_unit_expr"] = ["prod", ["const", 2],
                                                 ["trips", ["pid", 0], ["arg", "n", 32], ["nprog", 0]]]
    shapes = [(10, (3, 1, 1)), (9, (3, 1, 1)), (10, (3, 1, 1)), (2, (3, 1, 1))]
    for n, grid in shapes:
        _sized_launch(collector, sim, {"n": n}, "3.9", grid=grid, meta=meta)
    cap = finish(collector, tmp_path)
    assert collector.unsized == 0
    for ln, (n, grid) in zip(cap.launches, shapes):
        busiest = 2 * len(range(0, n, grid[0]))  # program 0
        assert read_capacity_word(int.from_bytes(bytes(ln.buffer[:4]), "little")) == busiest
        assert len(ln.buffer) == meta.layout.with_capacity(busiest).buffer_bytes(3)
    (expr, names, grid_bound, memo), = collector._bounds.values()
    assert names == ("n", ) and grid_bound and len(memo) == 3  # the repeated shape was looked up


class _PoolMeta(_Meta):
    """A kernel whose loop bounds are known only at run time: unit blocks, then a launch pool."""

    def __init__(self) -> None:
        layout = BufferLayout("warp", 2, 4, "global", sized_at_launch=True, overflow="sink", pool=True,
                              chunk_slots=5)
        super().__init__("pooled", layout.stride)
        self.proton_lite = {"scopes": ["a"], "layout": layout.to_json(), "records_per_unit_max": None,
                            "records_per_unit_expr": None, "pool_entry_records": 1}
        self.layout = layout


def _pool_launch(col, sim, meta, taken, grid=(3, 1, 1), stream=1, seen=None):
    """A launch whose kernel takes ``taken`` chunks and fills each with its index (mod 251, + 1);
    ``seen`` gets the pool's bytes as the kernel found them."""
    lm = _launch_metadata(grid, meta, args={})
    ptr = _Launcher39()(col, grid, stream, None, None, lm, meta.profile_scratch_size * grid[0])
    blocks = meta.layout.buffer_bytes(grid[0])  # the unit blocks keep the compiled 4 records here
    chunk = meta.layout.chunk_bytes

    def kernel():
        mem, off = sim._resolve(ptr, 16)
        chunks = int.from_bytes(mem[off + 4:off + 8], "little")
        if seen is not None:
            seen.append(bytes(mem[off + blocks:off + blocks + chunks * chunk]))
        mem[off + 12:off + 16] = taken.to_bytes(4, "little")
        for i in range(min(taken, chunks)):
            mem[off + blocks + i * chunk:off + blocks + (i + 1) * chunk] = bytes([i % 251 + 1]) * chunk
    sim._enqueue(stream, kernel)
    col.on_launch_exit(lm)


def test_a_launch_pool_is_copied_back_as_far_as_its_units_took_it(tmp_path, sim):
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, pool_mb=1)
    meta = _PoolMeta()
    chunk, blocks = meta.layout.chunk_bytes, meta.layout.buffer_bytes(3)
    per_launch = (1 << 20) // chunk
    seen: list[bytes] = []
    for taken in (3, 0, per_launch + 40):  # some, none, more than the pool holds (asks past the end count)
        _pool_launch(col, sim, meta, taken, seen=seen)
        free_now = sum(len(v) for v in col.device_pool._free.values())  # (the chunks reserved at the first launch)
        deadline = time.time() + 5  # the drain thread returns the buffer before the next launch takes one
        while sum(len(v) for v in col.device_pool._free.values()) == free_now and time.time() < deadline:
            col._drain.collect()  # (the C drain's come back when collected)
            time.sleep(0.001)
    cap = finish(col, tmp_path)
    assert [len(ln.buffer) for ln in cap.launches] == [blocks + 3 * chunk, blocks, blocks + per_launch * chunk]
    for i, (ln, taken) in enumerate(zip(cap.launches, (3, 0, per_launch + 40))):
        words = np.frombuffer(ln.buffer, "<u4", 4)
        assert read_capacity_word(int(words[0])) == 4 and words[1] == per_launch and words[3] == taken
        assert words[2] == i + 1  # the epoch: the launch's number among pool launches
        used = min(taken, per_launch)
        pool = np.frombuffer(ln.buffer, np.uint8, offset=blocks)
        assert (pool.reshape(used, chunk) == (np.arange(used) % 251 + 1).astype(np.uint8)[:, None]).all()
    # the buffer was reused, and every chunk a launch found was zero: the drain cleared what it copied
    assert len(seen) == 3 and not any(any(s) for s in seen)
    assert sim.calls["stream_create"] == 1  # the drain thread's own stream, once per device


def test_a_pooled_launch_is_sized_from_what_the_one_before_took(tmp_path, sim):
    """What a pool's units took reaches the sizer through the drain (the C drain reports it
    when its job is collected: sizing a pooled launch collects first)."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    meta = _PoolMeta()
    _pool_launch(col, sim, meta, 2)
    sim.run_all()
    if col._drain.thread == "c":  # the C thread has written it; nothing collected yet
        assert col._drain._mod.wait(col._drain._cap, 5.0)
    else:
        deadline = time.time() + 5
        while col._drain.queued_bytes and time.time() < deadline:
            time.sleep(0.001)
    _pool_launch(col, sim, meta, 2)
    cap = finish(col, tmp_path)
    first, second = (int(np.frombuffer(ln.buffer, "<u4", 4)[1]) for ln in cap.launches)
    assert 2 <= second < first  # learned: fewer chunks than the first guess, still enough


def test_pool_sizes_learn_from_earlier_launches(sim):
    from proton_lite.runtime.pool_sizing import FIRST_POOL_BYTES, MIN_POOL_BYTES, PoolSizer
    layout = _PoolMeta().layout
    sizer = PoolSizer()
    cap, chunks, total = sizer.plan(0, layout, 100, entry_records=1)
    # the first launch: as many chunks as fit in 256 MiB with the blocks (one allocation class)
    assert cap == 4 and total == layout.buffer_bytes(100, chunks) and FIRST_POOL_BYTES - layout.chunk_bytes < total \
        <= FIRST_POOL_BYTES
    sizer.observed(0, taken=50, chunks=chunks, num_ctas=100)  # half a chunk per CTA
    _, chunks2, total2 = sizer.plan(0, layout, 1000, entry_records=1)
    assert chunks2 * layout.chunk_bytes >= (0.5 * 1000 * 1.5 + 1000 * layout.units) * layout.chunk_bytes - \
        layout.chunk_bytes and total2 >= MIN_POOL_BYTES and size_class(total2) - layout.chunk_bytes < total2
    sizer.observed(0, taken=chunks2 + 5, chunks=chunks2, num_ctas=1000)  # ran out: counts double
    _, chunks3, _ = sizer.plan(0, layout, 1000, entry_records=1)
    assert chunks3 > 2 * chunks2 * 0.9
    fixed = PoolSizer(pool_mb=3)
    _, chunks4, total4 = fixed.plan(0, layout, 10, entry_records=1)
    assert chunks4 == (3 << 20) // layout.chunk_bytes and total4 == layout.buffer_bytes(10, chunks4)
    # a huge grid: smaller unit blocks, never below what the kernel writes before its first check
    cap5, _, _ = sizer.plan(1, layout.with_capacity(256), 4_000_000, entry_records=3)
    assert cap5 == 3


def test_a_kernel_sized_at_launch_without_readable_arguments_is_counted(collector, sim, tmp_path):
    meta = _sized_launch(collector, sim, {"n": 5}, launcher=None)  # no launcher frame
    _sized_launch(collector, sim, {"m": 5}, launcher="3.9")  # the bound's argument is missing
    cap = finish(collector, tmp_path)
    assert collector.unsized == 2
    no_frame, missing = cap.launches
    assert read_capacity_word(int.from_bytes(bytes(no_frame.buffer[:4]), "little")) == 0  # no record slots
    assert len(no_frame.buffer) == meta.layout.with_capacity(0).buffer_bytes(3)
    assert read_capacity_word(int.from_bytes(bytes(missing.buffer[:4]), "little")) == meta.layout.capacity
    assert len(missing.buffer) == meta.layout.buffer_bytes(3)


def test_a_kernel_sized_at_launch_is_capped_and_counted(collector, sim, tmp_path, monkeypatch):
    from proton_lite.runtime import launch_sizing
    monkeypatch.setattr(launch_sizing, "LAUNCH_SIZED_MAX_BYTES", 4096)
    meta = _sized_launch(collector, sim, {"n": 10_000}, launcher="3.9")
    cap = finish(collector, tmp_path)
    assert collector.capped == 1
    (ln, ) = cap.launches
    got = read_capacity_word(int.from_bytes(bytes(ln.buffer[:4]), "little"))
    assert 0 < got < 20_000 and len(ln.buffer) <= 4096
    assert meta.layout.with_capacity(got + 1).buffer_bytes(3) > 4096  # the most that fits


def test_the_exit_hook_reads_the_launch_from_triton_s_launch_metadata_without_evaluating_it():
    """Our LaunchInfo alone, chained after a user's launch_metadata function, and after another
    hook already evaluated the LazyDict: the same (grid, metadata, arguments, JIT function)."""
    from triton.compiler.compiler import LazyDict

    from proton_lite.runtime.collector import _Chained, _launch_info
    meta, jit = _Meta(), object()
    user_calls = []

    def user_fn(grid, metadata, args):
        user_calls.append(grid)
        return {"flops": 1}

    for fn in (LaunchInfo(jit), _Chained(user_fn, LaunchInfo(jit))):
        lm = LazyDict({"name": "k"})
        lm.add(fn, ((4, 1, 1), meta, {"n": 3}))
        assert _launch_info(lm) == ((4, 1, 1), meta, {"n": 3}, jit)
        assert lm.extras and not user_calls  # nothing evaluated
        lm.get()  # another exit hook (Proton's, say) evaluates it first
        assert _launch_info(lm) == ((4, 1, 1), meta, {"n": 3}, jit)
    assert user_calls == [(4, 1, 1)]
    assert _launch_info(None) is None


def test_only_functions_compiled_inside_an_autotuner_benchmark_are_checked_for_trials(collector, sim, tmp_path):
    """The frame check costs every launch; only a JIT function that compiled while Triton's
    autotuner timed configs (the session's jit_cache_hook calls note_compile) can have trial
    launches, so only its launches pay it."""
    from triton.runtime.autotuner import Autotuner, Config

    from proton_lite.runtime.trials import _AUTOTUNED, note_compile

    class Kernel:  # stands for a JITFunction: compile (first call only), then launch
        def __init__(self, compiles_in_session: bool):
            self.compiles = compiles_in_session
            self.fn = lambda: None  # what Autotuner reads from the function it wraps

        def run(self, *args, **kwargs):
            if self.compiles:
                note_compile(self)
                self.compiles = False
            launch(collector, sim, stream=1, payload=b"\x01" * 8, jit_fn=self)

    def tuner(kernel):
        t = Autotuner(kernel, [], [Config({})], [], None, None,
                      do_bench=lambda kernel_call, quantiles: (kernel_call(), [1.0, 1.0, 1.0])[1])
        t.nargs = {}
        return t

    tuned = Kernel(compiles_in_session=True)
    tuner(tuned)._bench(config=Config({}))  # compiles inside the benchmark: a trial, skipped
    assert id(tuned) in _AUTOTUNED
    tuned.run()  # the user's own launch of it: checked, and kept
    elsewhere = Kernel(compiles_in_session=False)  # compiled before, outside any benchmark
    tuner(elsewhere)._bench(config=Config({}))  # not checked: kept
    note_compile(Kernel(compiles_in_session=True))  # a compile outside a benchmark marks nothing
    cap = finish(collector, tmp_path)
    assert collector.skipped_autotune == 1 and len(cap.launches) == 2
    assert id(elsewhere) not in _AUTOTUNED


def test_a_users_launches_of_an_autotuned_function_stay_in_the_c_hooks(collector, sim, tmp_path, monkeypatch):
    """The C exit hook walks the frames for a launch of a function an autotuner benchmark
    compiled, as the Python one does: the benchmark's launches are trials (skipped), the
    user's own launches of that function are kept, and with the C hooks they no longer go to
    Python for the check (every launch of an autotuned library kernel or a torch.compile
    kernel did)."""
    from triton.runtime.autotuner import Autotuner, Config

    # the C hook hands a launch after idle time to Python: on a loaded host a 1 ms gap between
    # these launches happened (1 in ~10 runs), so nothing here counts as idle
    collector.idle_ns = 10**12
    tuned, = _jit_like_kernels(collector, sim, monkeypatch, 1)
    t = Autotuner(tuned, [], [Config({})], [], None, None,
                  do_bench=lambda kernel_call, quantiles: (kernel_call(), [1.0, 1.0, 1.0])[1])
    t.nargs = {}
    t._bench(config=Config({}))  # compiles inside the benchmark: a trial
    t._bench(config=Config({}))  # a trial again, the function known as autotuned now
    c_hooks = HOOKS["mode"] == "c"
    exits = _C_HOOKS[id(collector)][0].counts()[1] if c_hooks else 0
    for _ in range(5):
        tuned.run()  # the user's launches
    if c_hooks:  # the first after a benchmark goes to Python, which sees that it has ended
        assert _C_HOOKS[id(collector)][0].counts()[1] - exits == 4
    t._bench(config=Config({}))  # a benchmark after them: still a trial
    cap = finish(collector, tmp_path)
    assert collector.skipped_autotune == 3 and len(cap.launches) == 5


def _jit_like_kernels(collector, sim, monkeypatch, n):
    """``n`` stand-ins for JIT functions (compile on the first call, then launch), whose ``run``
    the trial check takes for ``JITFunction.run``."""
    from proton_lite.runtime import trials as trials_module

    class Kernel:
        def __init__(self):
            self.compiles = True
            self.fn = lambda: None

        def run(self, *args, **kwargs):
            if self.compiles:
                trials_module.note_compile(self)
                self.compiles = False
            launch(collector, sim, stream=1, payload=b"\x01" * 8, jit_fn=self)

    assert trials_module._know_trial_codes()
    monkeypatch.setattr(trials_module, "_JIT_RUN", Kernel.run.__code__)
    return [Kernel() for _ in range(n)]


def test_a_kernel_the_benchmark_itself_launches_is_a_trial_there_and_kept_elsewhere(collector, sim, tmp_path,
                                                                                     monkeypatch):
    """Triton's benchmark flushes the L2 cache and resets arguments between timings; where a
    library gives torch's ops Triton kernels (FlagGems' ``zero_``), those launches come from
    the library's op, not from the tuner's kernel_call, yet they are the tuner's work: trials
    while the benchmark is on the stack, the user's own launches elsewhere."""
    from triton.runtime.autotuner import Autotuner, Config

    from proton_lite.runtime import trials as trials_module

    tuned, flush = _jit_like_kernels(collector, sim, monkeypatch, 2)

    def zero_(buffer):  # the library's op behind torch's zero_, two frames below do_bench
        flush.run(buffer)

    def do_bench(kernel_call, quantiles):
        zero_("l2 cache")
        kernel_call()
        return [1.0, 1.0, 1.0]

    t = Autotuner(tuned, [], [Config({})], [], None, None, do_bench=do_bench)
    t.nargs = {}
    t._bench(config=Config({}))  # both compile inside the benchmark; both launches are trials
    assert id(flush) in trials_module._TUNER_HELPERS and id(tuned) not in trials_module._TUNER_HELPERS
    t._bench(config=Config({}))  # compiled already: still trials
    zero_("a user's tensor")  # the user's own launches: kept
    tuned.run()
    cap = finish(collector, tmp_path)
    assert collector.skipped_autotune == 4 and len(cap.launches) == 2


def test_a_flush_kernel_compiled_before_any_benchmark_is_a_trial_while_one_runs(collector, sim, tmp_path,
                                                                                monkeypatch):
    """The program zeroed its own tensors with the library's kernel before anything was tuned
    (FlagGems' ``torch.zeros``), so the kernel is not a known helper: once a trial shows that a
    benchmark runs, every launch is checked until a checked one is not a trial, so the
    benchmark's flushes are trials and the program's own launches after it are kept."""
    from triton.runtime.autotuner import Autotuner, Config

    from proton_lite.runtime import trials as trials_module

    tuned, flush = _jit_like_kernels(collector, sim, monkeypatch, 2)

    def zero_(buffer):
        flush.run(buffer)

    zero_("the program's tensor")  # compiled here, outside any benchmark: not a helper
    assert id(flush) not in trials_module._AUTOTUNED

    def do_bench(kernel_call, quantiles):  # as Triton's: a first call, then flush and time
        kernel_call()
        for _ in range(3):
            zero_("l2 cache")
            kernel_call()
        return [1.0, 1.0, 1.0]

    t = Autotuner(tuned, [], [Config({})], [], None, None, do_bench=do_bench)
    t.nargs = {}
    t._bench(config=Config({}))
    assert collector.skipped_autotune == 7 and collector._benchmarking  # 4 timing runs and 3 flushes
    launch(collector, sim, stream=1, payload=b"\x01" * 8)  # a kernel of no known JIT function: kept,
    assert not collector._benchmarking  # ... and the checking ends
    t._bench(config=Config({}))  # a second benchmark
    assert collector.skipped_autotune == 14
    from triton.compiler.compiler import LazyDict
    _, on_exit = hooks(collector)

    def plain_zero_(buffer):  # the same flush by a plain binary (compiled before the session)
        on_exit(LazyDict({"name": "plain_zeros", "function": 1, "stream": 0}))

    def do_bench_plain(kernel_call, quantiles):
        kernel_call()
        plain_zero_("l2 cache")
        kernel_call()
        return [1.0, 1.0, 1.0]

    t2 = Autotuner(tuned, [], [Config({})], [], None, None, do_bench=do_bench_plain)
    t2.nargs = {}
    t2._bench(config=Config({}))  # its flush is a trial too, not a launch "without instrumentation"
    assert collector.skipped_autotune == 17 and not collector.uninstrumented
    tuned.run()  # the chosen config's own launch: kept, and the checking ends
    zero_("the program's tensor again")
    assert not collector._benchmarking
    cap = finish(collector, tmp_path)
    assert len(cap.launches) == 4 and collector.skipped_autotune == 17


def test_the_first_compile_prepares_the_launch_time_trial_check(monkeypatch):
    """note_compile usually runs before any exit hook: it must leave the fast trial check
    (anchored at JITFunction.run) ready, not just the list of trial code objects."""
    from triton.runtime.jit import JITFunction

    from proton_lite.runtime import trials as trials_module
    monkeypatch.setattr(trials_module, "_trial_codes", None)
    monkeypatch.setattr(trials_module, "_JIT_RUN", None)
    trials_module.note_compile(object())  # a compile outside any benchmark
    assert trials_module._JIT_RUN is JITFunction.run.__code__
    assert trials_module._trial_codes


def test_slices_start_at_256_byte_boundaries_whatever_the_launch_size(collector, sim, tmp_path):
    odd = _Meta("odd", scratch=CTA_HEADER_BYTES + UNIT_HEADER_BYTES + 8 * 3)  # 80 bytes per CTA
    starts = []
    for i in range(20):
        launch(collector, sim, stream=1, grid=(3, 1, 1), meta=odd, payload=bytes([i + 1]) * 8,
               check=lambda ptr, size: starts.append(ptr))
    cap = finish(collector, tmp_path)
    assert all(p % 256 == 0 for p in starts) and len(set(starts)) == 20
    assert [bytes(ln.buffer[:1]) for ln in cap.launches] == [bytes([i + 1]) for i in range(20)]


def test_launches_without_a_profile_buffer_are_counted_by_kernel_name(tmp_path, sim):
    """A plain binary launched in a session (compiled before it, from a library's cache) never
    asks for a buffer; its exit hook names it for the warning at stop, through both hook
    paths. Kernels the session's kernels= patterns leave out are plain on purpose."""
    from triton.compiler.compiler import LazyDict
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20,
                    selects=lambda name: not name.startswith("skip"))
    _, on_exit = hooks(col)
    for name, n in (("cached_add", 3), ("skipped_on_purpose", 2), ("cached_norm", 1)):
        for _ in range(n):
            on_exit(LazyDict({"name": name, "function": 1, "stream": 0}))
    launch(col, sim, stream=1, payload=b"\x01" * 8)  # an instrumented launch is not counted
    finish(col, tmp_path)
    assert col.uninstrumented == {"cached_add": 3, "cached_norm": 1}
    assert col.launches == 1


def test_plain_launches_while_torch_compile_compiles_are_trials_not_misses(tmp_path, sim):
    """Inductor's workers compile plain; while dynamo compiles, Inductor launches those binaries
    only to time them (InductorBridge.compiling): counted as trials, not named as missed."""
    from triton.compiler.compiler import LazyDict
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    _, on_exit = hooks(col)
    compiling = [True]
    col.compiling = lambda: compiling[0]
    for _ in range(4):
        on_exit(LazyDict({"name": "triton_poi_fused_0", "function": 1, "stream": 0}))
    compiling[0] = False
    on_exit(LazyDict({"name": "triton_poi_fused_0", "function": 1, "stream": 0}))
    finish(col, tmp_path)
    assert col.skipped_autotune == 4 and col.uninstrumented == {"triton_poi_fused_0": 1}


def test_the_scratch_left_after_stop_is_zeroed_grown_and_kept_per_device(sim):
    from proton_lite.runtime.after_stop import ScratchAfterStop
    scratch = ScratchAfterStop()
    a = scratch(1000, 64, 5)
    sim.stream_synchronize(5)
    mem, off = sim._resolve(a, 1000)
    assert not any(mem[off:off + 1000])  # zeroed before the kernel that gets it
    mem[off:off + 4] = b"\x43\x50\x4c\x31"  # a kernel wrote its CTA header there
    assert scratch(500, 16, 5) == a  # smaller: the same buffer
    b = scratch(10_000, 16, 5)  # larger: a new one; the old one is kept (a kernel may still use it)
    assert b != a and scratch.launches == 3 and a in scratch._outgrown
    sim.device = 1
    assert scratch(100, 16, 0) not in (a, b)  # another device, its own buffer


def test_the_drain_thread_copies_a_pool_larger_than_the_pinned_limit(tmp_path, sim):
    """Only the drain thread gives pinned buffers back, so it must not wait for the limit
    itself when it copies a pool's chunks: a 2 MiB pool under a 1 MiB pinned limit."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=1 << 20, pool_mb=2)
    meta = _PoolMeta()
    per_launch = (2 << 20) // meta.layout.chunk_bytes
    _pool_launch(col, sim, meta, per_launch)
    done = threading.Event()
    threading.Thread(target=lambda: (finish(col, tmp_path), done.set()), daemon=True).start()
    assert done.wait(20), "the drain thread waited for the pinned limit it alone could free"
    (ln, ) = read_raw(tmp_path / "c.plraw").launches
    assert len(ln.buffer) == meta.layout.buffer_bytes(3) + per_launch * meta.layout.chunk_bytes


def test_a_new_buffer_is_cleared_on_the_stream_that_first_uses_it(sim):
    """A slab grown for a launch on one stream holds buffers that later launches on other
    streams take: each must be cleared in the order of its own stream, since nothing orders
    a clear on the first stream before a kernel on another."""
    from proton_lite.runtime.buffers import DevicePool
    pool = DevicePool()
    first = [pool.take(8192, 0, 1) for _ in range(3)]  # slabs of 1, 1 and 2 buffers: one left free
    other = pool.take(8192, 0, 2)  # from the slab grown for stream 1
    assert all(b.ptr != other.ptr for b in first)
    sim.stream_synchronize(2)  # stream 2 ran everything before its kernel; stream 1 ran nothing
    mem, off = sim._resolve(other.ptr, other.capacity)
    assert not any(mem[off:off + other.capacity]), "a buffer reached stream 2 without a clear ordered on it"


def test_the_copiers_pinned_working_set_is_pinned_at_the_first_launch_not_while_launches_run(tmp_path, sim):
    """Pinning host memory holds the driver's lock for milliseconds: the session's first
    launch pins the working set in one slab, and the launching thread never pins later."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    allocate, on_exit = hooks(col)
    assert sim.calls.get("host_alloc", 0) == 0
    buf = allocate(SCRATCH * 4, 16, 1)
    assert sim.calls["host_alloc"] == 1  # before any kernel of the session ran
    assert col.pinned_pool.bytes_allocated == 4 * size_class(col.chunk_bytes)
    sim.kernel(1, buf, b"\x01" * 8)
    on_exit(_launch_metadata((4, 1, 1), _DEFAULT_META.setdefault(id(col), (_Meta(), col))[0], stream=1))
    sim.run_all()
    deadline = time.time() + 10
    while col.pinned_pool._in_use and time.time() < deadline:  # the writer gives its buffer back
        col._drain.collect()  # (the C drain's buffers come back when collected)
        time.sleep(0.01)
    # every reserved buffer in flight: the launching thread's try_take gives up instead of pinning
    held = [col.pinned_pool.try_take(1024) for _ in range(4)]
    assert all(h is not None for h in held) and col.pinned_pool.try_take(1024) is None
    assert sim.calls["host_alloc"] == 1
    for h in held:
        col.pinned_pool.give(h)
    cap = finish(col, tmp_path)
    assert len(cap.launches) == 1


def test_a_finished_collector_and_its_c_hooks_are_freed(tmp_path, sim):
    """The C hooks and the collector refer to each other while a session runs; at finish the
    collector lets go, so neither outlives the session (the C hooks do not take part in
    Python's cycle collection)."""
    import gc
    import weakref
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    for i in range(3):
        launch(col, sim, stream=1, payload=bytes([i + 1]) * 8)
    alive = weakref.ref(col)
    finish(col, tmp_path)
    _C_HOOKS.clear()
    _DEFAULT_META.clear()
    del col
    gc.collect()
    assert alive() is None


def _launch_from_six_threads(col, sim, seed: int, failed_share: float = 0.0) -> set:
    """Six threads launch 300 times each on three streams at once through ``col``'s hooks, each
    launch writing its own 8 bytes ((thread << 20) | i), now and then after an idle gap; a
    ``failed_share`` of launches fail before their exit hook.  Returns the values of the
    launches whose exit hook ran."""
    import random
    allocate, on_launch_exit = hooks(col)
    meta = _DEFAULT_META.setdefault(id(col), (_Meta(), col))[0]
    expected, lock = set(), threading.Lock()

    def worker(k):
        rnd = random.Random(seed * 100 + k)
        for i in range(300):
            stream, value = rnd.choice((1, 2, 3)), (k << 20) | i
            ptr = allocate(SCRATCH * 4, 16, stream)
            if rnd.random() < failed_share:
                continue  # its launch failed: no exit hook
            sim.kernel(stream, ptr, value.to_bytes(8, "little"))
            on_launch_exit(_launch_metadata((4, 1, 1), meta, stream=stream))
            with lock:
                expected.add(value)
            if rnd.random() < 0.02:
                time.sleep(0.003)  # idle: the stream's chunk is copied
    threads = [threading.Thread(target=worker, args=(k, )) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return expected


@pytest.mark.parametrize("copy_every", [7, 24])  # 24: the C hooks also switch chunks (fastpath.C_SWITCH_MIN_COPY_EVERY)
def test_launches_from_many_threads_at_once_are_each_saved_once(tmp_path, sim, copy_every):
    """Six threads launch on three streams at once, with chunks filling up, idle gaps and
    launches that fail before their exit hook: every launch whose exit hook ran is saved once,
    with its own bytes, and launch numbers have no gaps.  (Other threads run whenever the hooks
    call into Python, directly or through the garbage collector; a version of the C hooks that
    kept its thread's entry across such a call lost a launch in about one run of three.)"""
    switches = 0
    for seed in range(6):
        col = Collector(RawWriter(tmp_path / f"c{seed}.plraw", {}), host_limit_bytes=64 << 20,
                        copy_every=copy_every, idle_ns=2_000_000)
        expected = _launch_from_six_threads(col, sim, seed, failed_share=0.01)
        if HOOKS["mode"] == "c":
            switches += _C_HOOKS[id(col)][0].switches()
        col.finish()
        col.writer.close()
        cap = read_raw(tmp_path / f"c{seed}.plraw")
        got = [int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches]
        assert sorted(got) == sorted(expected), f"seed {seed}: lost {sorted(expected - set(got))[:5]}"
        assert sorted(ln.launch_index for ln in cap.launches) == list(range(len(got))) and col.launches == len(got)
        assert not col.uninstrumented and col.lost == 0
    if HOOKS["mode"] == "c" and copy_every >= 16:  # (about 300 in six runs here: the C switch under six threads)
        assert switches > 0


def test_the_python_copier_passes_the_pinned_limit_rather_than_wait_for_chunks_queued_behind_it(tmp_path, sim):
    """The Python drain's copier waits for pinned memory only while its writer holds buffers it
    will give back.  Chunks copied by the launching thread itself (isolated launches) hold
    pinned memory while queued behind the chunk the copier is on: waiting for them never ended
    (six threads with idle gaps hung about one run in seventy)."""
    from proton_lite.runtime.drain import Drain
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=4 * 4096)
    drain = Drain(col)
    try:
        pool = col.pinned_pool
        held = [pool.take(4096) for _ in range(4)]  # the limit, held by chunks queued behind
        got = []
        t = threading.Thread(target=lambda: got.append(drain._take_pinned(4096, 4096)))
        t.start()
        t.join(5)
        assert got and got[0].capacity == 4096  # past the limit, at once
        pool.give(got.pop())
        with drain._held_lock:
            drain._held_by_writer = 1  # the writer holds one: now the copier waits for it
        t = threading.Thread(target=lambda: got.append(drain._take_pinned(4096, 4096)))
        t.start()
        t.join(0.3)
        assert t.is_alive() and not got
        pool.give(held.pop())  # the writer gives one back
        t.join(5)
        assert got and not t.is_alive()
        for buf in held + got:
            pool.give(buf)
    finally:
        drain.finish()
        col.writer.close()


@pytest.mark.parametrize("copy_every", [7, 24])  # 24: the C hooks also switch chunks (fastpath.C_SWITCH_MIN_COPY_EVERY)
def test_a_fault_while_many_threads_launch_keeps_or_counts_every_launch(tmp_path, monkeypatch, copy_every):
    """Six threads launch on three streams and a kernel faults at a random point: every launch
    whose exit hook ran is either saved (once, with its own bytes) or counted as lost."""
    import random
    for seed in range(3):
        sim = SimDriver().install(monkeypatch)  # a fresh GPU for each run
        col = Collector(RawWriter(tmp_path / f"f{seed}.plraw", {}), host_limit_bytes=64 << 20, copy_every=copy_every,
                        idle_ns=2_000_000)
        sim.fault_after_kernels = random.Random(seed).randint(100, 1500)
        expected = _launch_from_six_threads(col, sim, seed)
        col.finish()
        col.writer.close()
        cap = read_raw(tmp_path / f"f{seed}.plraw")
        got = [int.from_bytes(bytes(ln.buffer[:8]), "little") for ln in cap.launches]
        assert col.failed and set(got) <= expected and len(got) == len(set(got))
        assert len(got) + col.lost == len(expected) == col.launches


def test_a_function_marked_as_autotuned_keeps_its_id_for_good():
    """The autotuned set holds ids (cheap to look up at every launch, from C too): a marked
    function is kept alive, so that no later object gets its id and passes for autotuned (a
    test kernel collected between two tests once gave its id to another test's kernel)."""
    import gc
    import weakref

    from proton_lite.runtime.trials import _AUTOTUNED, mark_trials

    class Kernel:
        pass

    marked = Kernel()
    mark_trials(marked)
    alive = weakref.ref(marked)
    del marked
    gc.collect()
    assert alive() is not None and id(alive()) in _AUTOTUNED
    others = [Kernel() for _ in range(2000)]  # none of them can take the marked one's id
    assert not any(id(o) in _AUTOTUNED for o in others if o is not alive())
