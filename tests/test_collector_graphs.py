"""The host side of recording CUDA graph replays (runtime/graphs.py) on the simulated driver.

A launch captured into a graph must get scratch of its own (not a chunk's slice), nothing
may be enqueued on the capturing stream but what the kernel needs, and its exit hook adds
the copy node.  The device side of a replay (the copy kernel, run by tests/test_graph_ring.py
in the PTX interpreter) is played here by writing what it writes, as docs/format.md §4 lays
it out: the poller must copy every published slot back once, in the order the replays ran,
tell the device how far it drained, and at stop close the node and free the ring.  The real
thing runs under ``pytest -m gpu`` (tests/test_gpu_graphs.py).
"""
from __future__ import annotations

import contextlib
import ctypes
import struct
import time

import pytest

from proton_lite.coverage import graph_lines
from proton_lite.raw_format import RawWriter
from proton_lite import native_drain
from proton_lite.runtime import cuda_api, cuda_graph, drain_native, graph_copy, graph_earlier, graphs
from proton_lite.runtime.collector import Collector
from sim_driver import SimDriver
from test_collector import SCRATCH, _launch_metadata, _Meta, finish


@pytest.fixture(params=["C drain", "Python drain"])
def sim(monkeypatch, request):
    """The simulated driver, with the C drain thread or the Python drain threads behind it."""
    if request.param == "C drain" and native_drain.module() is None:
        pytest.skip(f"the C drain could not be built here: {native_drain.error()}")
    monkeypatch.setattr(drain_native, "ENABLED", request.param == "C drain")
    return _sim(monkeypatch)


def _sim(monkeypatch):
    sim = SimDriver().install(monkeypatch)
    sim.nodes = []

    def htod(dst, src_host, size, stream):
        data = ctypes.string_at(src_host, size)

        def op():
            mem, off = sim._resolve(dst, size)
            mem[off:off + size] = data
        sim._enqueue(stream, op)

    monkeypatch.setattr(graphs, "_arenas", {})  # headers live in this simulated device's memory
    monkeypatch.setattr(graph_earlier, "_closed", [])  # ... and so do earlier sessions' nodes
    monkeypatch.setattr(cuda_api, "relaxed_capture", contextlib.nullcontext)
    monkeypatch.setattr(cuda_graph, "capture_info", lambda stream: (4242, "graph", ["kernel node"]))
    monkeypatch.setattr(cuda_graph, "memcpy_htod_async", htod)
    monkeypatch.setattr(cuda_graph, "ctx_synchronize", sim.run_all)
    monkeypatch.setattr(graph_copy, "add_node", lambda *args: sim.nodes.append(args) or f"copy node {len(sim.nodes)}")
    return sim


def _capture(col, sim, stream=9, grid=(4, 1, 1), meta=None):
    meta = meta or _Meta()
    sim.capturing.add(stream)
    queued = sum(len(q) for q in sim.streams.values())
    ptr = col.allocate(SCRATCH * grid[0], 16, stream)
    col.on_launch_exit(_launch_metadata(grid, meta, stream=stream))
    sim.capturing.discard(stream)
    assert sum(len(q) for q in sim.streams.get(stream, ())) == 0  # nothing joined the graph
    assert sum(len(q) for q in sim.streams.values()) >= queued
    return ptr


def _header(sim, node) -> dict:
    mem, off = sim._resolve(node.header, 64)
    v = struct.unpack_from("<QQQQQIiII", mem, off)
    return dict(zip(("replays", "written", "consumed", "overruns", "discarded", "done", "next_slot", "closed",
                     "slots"), v))


def _replay(sim, node, replay: int, payload: bytes, time_ns: int) -> None:
    """What the copy node writes at a replay (graph_copy.PTX), from the documented layout."""
    h = _header(sim, node)
    mem, off = sim._resolve(node.header, 64)
    if h["next_slot"] >= 0:
        slot = node.ring + h["next_slot"] * node.slot_bytes
        smem, soff = sim._resolve(slot, node.slot_bytes)
        smem[soff:soff + 16] = struct.pack("<QQ", replay, time_ns)
        smem[soff + 16:soff + 16 + len(payload)] = payload
        h["written"] += 1
    else:
        h["discarded" if h["closed"] else "overruns"] += 1
    h["replays"] += 1
    free = h["written"] - h["consumed"] < h["slots"] and not h["closed"]
    h["next_slot"] = h["written"] % h["slots"] if free else -1
    mem[off:off + 56] = struct.pack("<QQQQQIiII", *(h[k] for k in ("replays", "written", "consumed", "overruns",
                                                                  "discarded", "done", "next_slot", "closed",
                                                                  "slots")))


def _wait_drained(node, written: int) -> None:
    deadline = time.time() + 10
    while node.consumed < written and time.time() < deadline:
        time.sleep(0.002)
    assert node.consumed == written


def test_every_published_replay_is_copied_back_once_in_the_order_it_ran(sim, tmp_path):
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, graph_slots=4)
    ptr = _capture(col, sim)
    assert not any(c.buf.ptr <= ptr < c.buf.ptr + c.limit for c in col._open.values())  # not a chunk's slice
    (node, ) = col.graphs.nodes
    args = sim.nodes[0]
    assert args[1] == ["kernel node"] and args[3:] == (node.header, ptr, node.ring, SCRATCH * 4, node.slot_bytes,
                                                       None)
    assert _header(sim, node)["slots"] == 4 and _header(sim, node)["next_slot"] == 0
    payloads = [bytes([r + 1]) * (SCRATCH * 4) for r in range(10)]
    written = 0
    for r in range(10):  # in pairs, with a drain between: the ring of 4 never fills
        with col.graphs.drain_lock:
            _replay(sim, node, r, payloads[r], time_ns=1000 + r)
        written += 1
        if r % 2:
            _wait_drained(node, written)
            assert _header(sim, node)["consumed"] == written  # the device knows how far the host got
    cap = finish(col, tmp_path)
    assert [ln.replay for ln in cap.launches] == [(1, 0, r) for r in range(10)]
    assert [bytes(ln.buffer) for ln in cap.launches] == payloads
    assert [ln.launch_index for ln in cap.launches] == list(range(10)) and col.launches == 10
    h = _header(sim, node)
    assert h["closed"] == 1 and h["next_slot"] == -1 and node.ring == 0  # closed, and the ring freed
    assert ptr in sim.device_mem and node.header  # the scratch outlives the session (the graph may)
    stats = col.graphs.stats()
    assert stats["recorded"] == 10 and stats["overruns"] == 0 and stats["nodes"][0]["replays"] == 10
    assert graph_lines(col.graphs)[-1].startswith("1 launch(es) captured into 1 CUDA graph(s) in this session were "
                                                  "recorded in 10 replay launch(es)")


def test_replays_of_two_captured_launches_are_numbered_in_time_order_and_overruns_reported(sim, tmp_path):
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, graph_slots=4)
    _capture(col, sim, meta=_Meta("first"))
    _capture(col, sim, meta=_Meta("second"))
    a, b = col.graphs.nodes
    assert (a.graph, a.node, b.graph, b.node) == (1, 0, 1, 1)
    with col.graphs.drain_lock:  # six replays meet rings of four slots: two overruns each
        for r in range(6):
            _replay(sim, a, r, b"\x01" * (SCRATCH * 4), time_ns=100 * r)
            _replay(sim, b, r, b"\x02" * (SCRATCH * 4), time_ns=100 * r + 50)
    cap = finish(col, tmp_path)
    assert [(ln.replay, ln.kernel_id) for ln in cap.launches] == \
        [((1, n, r), n) for r in range(4) for n in (0, 1)]  # a, b, a, b ...: the order they ran
    stats = col.graphs.stats()
    assert [n["overruns"] for n in stats["nodes"]] == [2, 2] and stats["overruns"] == 4
    line = graph_lines(col.graphs)[0]
    assert line.startswith("4 replay(s) of launches captured into CUDA graphs found their ring of 4 slot(s) full")
    assert "first (2), second (2)" in line and "graph_slots=8" in line


def test_the_copy_nodes_of_one_capture_form_a_chain_beside_the_kernels(sim, tmp_path):
    """Each copy node waits for its kernel and for the capture's previous copy node (one chain
    of copies instead of a leaf per kernel: replays ran 0.8-0.9% faster); no kernel waits for
    a copy node (the capture's dependencies stay the kernel's)."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    for _ in range(3):
        _capture(col, sim)
    deps = [args[1] for args in sim.nodes]
    assert deps == [["kernel node"], ["kernel node", "copy node 1"], ["kernel node", "copy node 2"]]
    finish(col, tmp_path)


def test_a_kernel_sized_at_launch_gets_its_prefix_once_outside_the_graph(sim, tmp_path, monkeypatch):
    """The capacity word is written into the scratch when it is made, not by a memset captured
    into the graph (a node before the kernel at every replay): no replay changes it."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    monkeypatch.setattr(col, "_launch_capacity", lambda size: (size + 16, (5, False, None)))
    sim.capturing.add(9)
    ptr = col.allocate(SCRATCH * 4, 64, 9)
    assert len(sim.streams.get(9, ())) == 0  # nothing captured before the kernel
    mem, off = sim._resolve(ptr, 4)
    assert struct.unpack_from("<I", mem, off)[0] == (0xA5 << 24) | 5
    col.on_launch_exit(_launch_metadata((4, 1, 1), _Meta(), stream=9))
    sim.capturing.discard(9)
    sim.run_all()
    assert struct.unpack_from("<I", mem, off)[0] == (0xA5 << 24) | 5
    assert col.graphs.nodes[0].nbytes == SCRATCH * 4 + 16
    finish(col, tmp_path)


def test_a_pooled_kernel_in_a_graph_has_its_pool_words_set_once_and_its_counter_zeroed_per_replay(sim, tmp_path,
                                                                                                monkeypatch):
    """A launch pool's chunks and epoch are written with the capacity when the scratch is
    made; only the count of chunks taken, which the kernel raises, is reset by a memset
    captured before the kernel (at every replay)."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    monkeypatch.setattr(col, "_launch_capacity", lambda size: (size + 16 + 4096, (5, False, (7, 3, size + 16, 512))))
    sim.capturing.add(9)
    ptr = col.allocate(SCRATCH * 4, 64, 9)
    mem, off = sim._resolve(ptr, 16)
    assert struct.unpack_from("<III", mem, off) == ((0xA5 << 24) | 5, 7, 3)
    assert len(sim.streams[9]) == 1  # the counter's memset, captured
    mem[off + 12:off + 16] = (99).to_bytes(4, "little")  # what a replay's units took
    sim.run_all()
    assert struct.unpack_from("<I", mem, off + 12)[0] == 0
    sim.capturing.discard(9)
    finish(col, tmp_path)


def test_the_poller_waits_while_the_disk_is_behind(sim, tmp_path, monkeypatch):
    """Replays waiting for the raw file are bounded in host memory: past ``BACKLOG_BYTES``
    the poller leaves the slots on the device (a ring that fills then counts overruns)."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, graph_slots=4)
    _capture(col, sim)
    (node, ) = col.graphs.nodes
    monkeypatch.setattr(col._drain, "graph_backlog", graphs.BACKLOG_BYTES + 1)
    with col.graphs.drain_lock:  # the poller thread waits; these polls are the test's
        _replay(sim, node, 0, b"\x05" * (SCRATCH * 4), time_ns=1)
        assert col.graphs.poll() is True and node.consumed == 0
        col._drain.graph_backlog = 0
        assert col.graphs.poll() is False and node.consumed == 1
    cap = finish(col, tmp_path)
    assert [ln.replay for ln in cap.launches] == [(1, 0, 0)] and col._drain.graph_backlog == 0


def test_replays_of_a_graph_captured_in_an_earlier_session_are_counted_in_the_next(sim, tmp_path):
    """A graph keeps its copy nodes after its session: they count each later replay as
    ``discarded``; the next session reads those counters at its start and stop and names the
    replays that ran meanwhile (they are not in its profile)."""
    first = Collector(RawWriter(tmp_path / "a.plraw", {}), host_limit_bytes=64 << 20, graph_slots=4)
    _capture(first, sim, meta=_Meta("kept_graph"))
    (node, ) = first.graphs.nodes
    with first.graphs.drain_lock:
        _replay(sim, node, 0, b"\x01" * (SCRATCH * 4), time_ns=1)
    first.finish()
    first.writer.close()
    _replay(sim, node, 1, b"\x01" * (SCRATCH * 4), time_ns=2)  # between the sessions: not counted
    second = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    for r in range(5):  # while the second session runs
        _replay(sim, node, 2 + r, b"\x01" * (SCRATCH * 4), time_ns=3 + r)
    assert _header(sim, node)["discarded"] == 6 and _header(sim, node)["written"] == 1
    cap = finish(second, tmp_path)
    assert second.graphs.earlier_replays == {"kept_graph": 5} and cap.launches == []
    (line, ) = graph_lines(second.graphs)
    assert line.startswith("5 replay(s) of CUDA graphs captured in an earlier session ran in this one and are not "
                           "in the profile: kept_graph (5)")
    assert second.graphs.stats()["earlier_replays"] == {"kept_graph": 5}


def test_graphs_on_two_gpus_drain_and_close_each_in_its_own_context(sim, tmp_path):
    """A launch captured on each of two devices: headers, rings and copies belong to their
    device's context (the simulated driver refuses memory freed or a stream used from
    another), and each replay comes back as a launch of its own device."""
    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20, graph_slots=4)
    nodes = []
    for device, stream in ((0, 9), (1, 10)):
        sim.device = device
        _capture(col, sim, stream=stream, meta=_Meta(f"k{device}"))
        nodes.append(col.graphs.nodes[-1])
    assert [n.device for n in nodes] == [0, 1] and nodes[0].arena is not nodes[1].arena
    with col.graphs.drain_lock:
        for r in range(3):
            for n in nodes:
                _replay(sim, n, r, bytes([n.device + 1]) * (SCRATCH * 4), time_ns=10 * r + n.device)
    sim.device = 0
    cap = finish(col, tmp_path)
    assert [(ln.device, ln.replay[2]) for ln in cap.launches] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]
    assert all(bytes(ln.buffer) == bytes([ln.device + 1]) * (SCRATCH * 4) for ln in cap.launches)
    assert all(n.ring == 0 for n in nodes)  # freed, each from its own context (the simulator checks)


def test_an_autotuner_s_timing_runs_captured_into_its_graph_are_trials_with_no_copy_node(sim, tmp_path, monkeypatch):
    """Triton's ``do_bench_cudagraph`` (``triton.autotune(use_cuda_graph=True)``) captures a
    config's timing runs into a graph and replays it hundreds of times: on the H100 one tuned
    kernel's replays were recorded as 12,267 launches of the program.  A launch captured with
    the tuner's kernel_call above it runs on scratch nobody reads, gets no copy node and is
    one trial; a capture of the program's own still gets its node."""
    from triton.runtime.autotuner import Autotuner, Config

    from proton_lite.runtime import trials
    from proton_lite.runtime.after_stop import AFTER_STOP

    col = Collector(RawWriter(tmp_path / "c.plraw", {}), host_limit_bytes=64 << 20)
    given = []

    def run(*args, **kwargs):  # stands for JITFunction.run: the launcher's allocator, then its exit hook
        given.append(col.allocate(SCRATCH * 4, 16, 9))
        col.on_launch_exit(_launch_metadata((4, 1, 1), _Meta("timed"), stream=9))

    class Kernel:
        fn = staticmethod(lambda: None)

    kernel = Kernel()
    kernel.run = run
    assert trials._know_trial_codes()
    monkeypatch.setattr(trials, "_JIT_RUN", run.__code__)

    def do_bench_cudagraph(kernel_call, quantiles):
        sim.capturing.add(9)
        for _ in range(3):  # the unrolled timing runs of one capture
            kernel_call()
        sim.capturing.discard(9)
        return [1.0, 1.0, 1.0]

    tuner = Autotuner(kernel, [], [Config({})], [], None, None, do_bench=do_bench_cudagraph)
    tuner.nargs = {}
    tuner._bench(config=Config({}))
    assert given == [AFTER_STOP._buffers[0][0]] * 3 and not sim.nodes and not col.graphs.nodes
    assert col.skipped_autotune == 3
    _capture(col, sim)  # the program's own capture, after the tuning: recorded
    assert len(col.graphs.nodes) == 1 and len(sim.nodes) == 1
    finish(col, tmp_path)
    assert not col.captured and not col.uninstrumented and col.unattributed == 0
