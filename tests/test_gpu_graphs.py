"""CUDA graphs on the GPU (issue 23): kernels captured inside a session keep the records of
every replay, rings that overrun are counted exactly, graphs outlive their session safely.
Kernels: tests/graph_kernels.py (one with scopes, one with a loop, one scope-less, one with
a loop bounded in memory)."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import triton  # noqa: E402

import proton_lite  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import graph_kernels as G  # noqa: E402

HERE = os.path.dirname(__file__)
REPO = os.path.dirname(HERE)
N, ROWS, COLS = 1 << 16, 512, 256


def _inputs():
    torch.manual_seed(0)
    return {"x": torch.rand(N, device="cuda"), "y": torch.rand(N, device="cuda"),
            "m": torch.rand(ROWS, COLS, device="cuda"), "a": torch.empty(N, device="cuda"),
            "b": torch.empty(ROWS, device="cuda"), "c": torch.empty(N, device="cuda")}


def _step(t):
    """Three kernels: scopes, a grid-stride loop of scopes, none."""
    G.scale_scoped[(triton.cdiv(N, 1024), )](t["x"], t["a"], N, BLOCK=1024)
    G.grid_stride_sum[(64, )](t["m"], t["b"], ROWS, COLS, BLOCK=COLS)
    G.add_plain[(triton.cdiv(N, 1024), )](t["a"], t["y"], t["c"], N, BLOCK=1024)


def _expected(t):
    a = t["x"] * 2 + 1
    return a, t["m"].sum(dim=1), a + t["y"]


def _check(t):
    a, b, c = _expected(t)
    torch.testing.assert_close(t["a"], a)
    torch.testing.assert_close(t["b"], b, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(t["c"], c)


def _graph(t, stream=None):
    _step(t)  # compiled (instrumented) and warmed up outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        _step(t)
    return g


def test_three_kernel_graph_replayed_1000_times_keeps_every_replay(tmp_path):
    t = _inputs()
    replays = 1000
    with proton_lite.start(str(tmp_path / "g"), quiet=True, formats=("perfetto", ), calibrate=False) as s:
        g = _graph(t)
        for i in range(replays):
            if i % 100 == 0:  # new inputs now and then: the outputs must follow every replay
                t["x"].copy_(torch.rand(N, device="cuda"))
            g.replay()
        torch.cuda.synchronize()
        _check(t)
    prof = decode(read_raw(s.result.raw_path))
    la = prof.launches
    replayed = la[la["graph"] > 0]
    eager = la[la["graph"] == 0]
    assert len(eager) == 3 and len(replayed) == 3 * replays, (len(eager), len(replayed), s.result.summary_line)
    names = [k.name for k in prof.kernels]
    by_node = {}
    for node in range(3):
        mine = replayed[replayed["graph_node"] == node]
        assert mine["replay"].tolist() == list(range(replays))  # every replay, once, in order
        assert len({names[k] for k in mine["kernel"]}) == 1
        by_node[names[int(mine["kernel"][0])]] = mine
        assert (np.diff(mine["start_ns"]) > 0).all()  # time order per replay, on the session's ns axis
        assert (mine["launch"][1:] > mine["launch"][:-1]).all()  # launch numbers follow the replays
    assert set(by_node) == {"scale_scoped", "grid_stride_sum", "add_plain"}
    # within a replay the three kernels run in stream order; between replays the next starts after
    for r in (0, replays // 2, replays - 1):
        starts = [int(by_node[k]["start_ns"][r]) for k in ("scale_scoped", "grid_stride_sum", "add_plain")]
        ends = [int(by_node[k]["end_ns"][r]) for k in ("scale_scoped", "grid_stride_sum", "add_plain")]
        assert starts[0] < starts[1] < starts[2] and ends[0] <= starts[2]
    # every replay holds its records: 2 per warp... the scoped kernel's records equal the eager launch's
    first = {names[int(k)]: int(r) for k, r in zip(eager["kernel"], eager["records"])}
    for name, rows in by_node.items():
        assert (rows["records"] == first[name]).all(), name
        assert (rows["dropped"] == 0).all() and (rows["missing_ctas"] == 0).all()
    assert first["grid_stride_sum"] == 64 * 4 * 2 * (ROWS // 64)  # the loop: one scope per row, every warp
    assert s.result.counters["graph_captured_launches"] == 0
    assert "replays after this stop" in s.result.summary_line
    assert any("graph 1 replay 999" in t for t in _trace_names(s.result.trace_paths[0]))


def _trace_names(path) -> set[str]:
    """The names of a .pftrace's tracks and events: the launch titles are track names in the
    launch layout and launch slices in the sm layout (a session of thousands of replays)."""
    import trace_processor as tp
    _, packets, _ = tp.pftrace_packets(path)
    return ({p.track_descriptor.name for p in packets if p.HasField("track_descriptor")} |
            {p.track_event.name for p in packets if p.HasField("track_event")})


def test_a_ring_smaller_than_the_replays_between_drains_counts_overruns_exactly(tmp_path):
    t = _inputs()
    with proton_lite.start(str(tmp_path / "ring"), quiet=True, formats=(), calibrate=False, graph_slots=4) as s:
        g = _graph(t)
        recorder = s._collector.graphs
        with recorder.drain_lock:  # the poller waits: 10 replays meet a ring of 4 slots
            for _ in range(10):
                g.replay()
            torch.cuda.synchronize()
        _check(t)
    stats = read_raw(s.result.raw_path).end["graphs"]
    assert [n["recorded"] for n in stats["nodes"]] == [4, 4, 4]
    assert [n["overruns"] for n in stats["nodes"]] == [6, 6, 6] and stats["overruns"] == 18
    assert [n["replays"] for n in stats["nodes"]] == [10, 10, 10]
    prof = decode(read_raw(s.result.raw_path))
    replayed = prof.launches[prof.launches["graph"] > 0]
    assert sorted(replayed["replay"].tolist()) == sorted(list(range(4)) * 3)
    assert "18 replay(s) of launches captured into CUDA graphs found their ring of 4 slot(s) full" in \
        s.result.summary_line, s.result.summary_line
    assert "graph_slots=8" in s.result.summary_line
    assert prof.session["graph_overruns"] == {"scale_scoped": 6, "grid_stride_sum": 6, "add_plain": 6}


def test_a_launch_pool_kernel_in_a_graph_keeps_its_data_dependent_records(tmp_path):
    counts = torch.randint(0, 600, (96, ), device="cuda", dtype=torch.int32)
    out = torch.empty(96, device="cuda", dtype=torch.int32)
    with proton_lite.start(str(tmp_path / "pool"), quiet=True, formats=(), calibrate=False) as s:
        G.count_down[(96, )](counts, out)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            G.count_down[(96, )](counts, out)
        for _ in range(5):
            g.replay()
        torch.cuda.synchronize()
    n = counts.long()
    assert torch.equal(out.long(), n * (n + 1) // 2)
    prof = decode(read_raw(s.result.raw_path))
    la = prof.launches
    per_launch = int(n.sum()) * 2 * 4  # enter + exit per step, every warp
    assert (la["records"] == per_launch).all() and (la["dropped"] == 0).all(), la[["records", "dropped"]]
    assert la["graph"].tolist() == [0] + [1] * 5


def test_make_graphed_callables_and_plain_stream_capture(tmp_path):
    from cuda.bindings import driver as cu
    t = _inputs()

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = torch.empty_like(x)
            G.scale_scoped[(triton.cdiv(x.numel(), 1024), )](x, out, x.numel(), BLOCK=1024)
            return out

        @staticmethod
        def backward(ctx, grad):
            out = torch.empty_like(grad)
            G.add_plain[(triton.cdiv(grad.numel(), 1024), )](grad, grad, out, grad.numel(), BLOCK=1024)
            return out

    x = torch.rand(N, device="cuda", requires_grad=True)
    with proton_lite.start(str(tmp_path / "callables"), quiet=True, formats=(), calibrate=False) as s:
        fn = torch.cuda.make_graphed_callables(Double.apply, (x, ))
        for _ in range(3):
            x.grad = None
            y = fn(x)
            y.sum().backward()
            torch.cuda.synchronize()
            torch.testing.assert_close(y, x.detach() * 2 + 1)
            torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
        # capture with the driver API itself, as a program without torch's CUDAGraph would
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            G.add_plain[(triton.cdiv(N, 1024), )](t["x"], t["y"], t["c"], N, BLOCK=1024)
            h = cu.CUstream(stream.cuda_stream)
            mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL
            assert cu.cuStreamBeginCapture(h, mode)[0] == cu.CUresult.CUDA_SUCCESS
            G.add_plain[(triton.cdiv(N, 1024), )](t["x"], t["y"], t["c"], N, BLOCK=1024)
            err, graph = cu.cuStreamEndCapture(h)
            assert err == cu.CUresult.CUDA_SUCCESS
            err, exe = cu.cuGraphInstantiate(graph, 0)
            assert err == cu.CUresult.CUDA_SUCCESS
            for _ in range(7):
                assert cu.cuGraphLaunch(exe, h)[0] == cu.CUresult.CUDA_SUCCESS
            stream.synchronize()
        torch.testing.assert_close(t["c"], t["x"] + t["y"])
    prof = decode(read_raw(s.result.raw_path))
    la = prof.launches
    names = [prof.kernels[int(k)].name for k in la["kernel"]]
    graphs = {}
    for name, gr in zip(names, la["graph"].tolist()):
        if gr:
            graphs.setdefault(gr, []).append(name)
    driver_graph = [v for v in graphs.values() if set(v) == {"add_plain"} and len(v) == 7]
    assert driver_graph, graphs
    fwd_bwd = [v for v in graphs.values() if "scale_scoped" in v]
    assert sum(v.count("scale_scoped") for v in fwd_bwd) >= 3  # the forward graph replayed 3 times
    assert sum(v.count("add_plain") for v in graphs.values() if v not in driver_graph) >= 3  # the backward
    cu.cuGraphExecDestroy(exe)
    cu.cuGraphDestroy(graph)


def test_a_graph_captured_before_the_session_runs_plain_inside_it(tmp_path):
    t = _inputs()
    g = _graph(t)  # compiled and captured before: plain kernels
    with proton_lite.start(str(tmp_path / "before"), quiet=True, formats=(), calibrate=False) as s:
        for _ in range(5):
            g.replay()
        _step(t)  # an eager step in the session is recorded (compiled again, instrumented)
        torch.cuda.synchronize()
    _check(t)
    prof = decode(read_raw(s.result.raw_path))
    assert len(prof.launches) == 3 and (prof.launches["graph"] == 0).all()


def test_a_graph_replayed_after_stop_is_clean_under_memcheck(tmp_path):
    """Captured in a session, replayed in it and 20 times after it: no memcheck error, the
    outputs right, and the stop line says once that later replays are not recorded.  The
    sanitizer is seen as a tool: with the graph poll holding the GIL in its driver calls,
    a replay here hung (once in a few runs) with the poll stuck in its copy."""
    sanitizer = shutil.which("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer not on PATH")
    script = tmp_path / "after_stop.py"
    script.write_text(textwrap.dedent(f"""
        import faulthandler, sys, torch, triton, proton_lite
        faulthandler.dump_traceback_later(150, repeat=True)  # where it stands, if it stalls
        sys.path.insert(0, {HERE!r})
        import graph_kernels as G
        x = torch.rand(4096, device="cuda"); a = torch.empty_like(x)
        with proton_lite.start({str(tmp_path / "s")!r}, formats=(), calibrate=False) as s:
            G.scale_scoped[(4, )](x, a, 4096, BLOCK=1024)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                G.scale_scoped[(4, )](x, a, 4096, BLOCK=1024)
            for _ in range(5):
                g.replay()
        for _ in range(20):
            x.copy_(torch.rand(4096, device="cuda"))
            g.replay()
        torch.cuda.synchronize()
        assert torch.allclose(a, x * 2 + 1)
        print("launches", s.result.launches)
        from proton_lite.runtime import cuda_api
        print("tool", cuda_api.tool_attached())
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]))
    try:
        r = subprocess.run([sanitizer, "--tool", "memcheck", "--report-api-errors", "no", "--print-limit", "5",
                            sys.executable, str(script)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                           timeout=320)
    except subprocess.TimeoutExpired as e:
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory", "--format=csv"],
                              capture_output=True, text=True).stdout
        partial = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
        pytest.fail(f"memcheck child still running after 320 s; GPU processes:\n{apps}\n{partial[-6000:]}")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "ERROR SUMMARY: 0 errors" in out, out[-3000:]
    assert "launches 6" in out, out[-3000:]
    assert "tool None" not in out, "compute-sanitizer not seen: the poll held the GIL under it (it hung once)"
    assert out.count("replays after this stop run as before but are not recorded") == 1, out[-3000:]


def test_a_graph_from_an_earlier_session_replayed_in_the_next_is_named(tmp_path):
    """Its copy nodes count the replays after its own session; the next session names those
    that ran while it did (they are not in its profile)."""
    t = _inputs()
    with proton_lite.start(str(tmp_path / "first"), quiet=True, formats=(), calibrate=False):
        g = _graph(t)
        g.replay()
        torch.cuda.synchronize()
    g.replay()  # between the sessions: in neither
    with proton_lite.start(str(tmp_path / "second"), quiet=True, formats=(), calibrate=False) as s:
        for _ in range(4):
            g.replay()
        torch.cuda.synchronize()
    _check(t)
    line = s.result.summary_line
    assert "12 replay(s) of CUDA graphs captured in an earlier session ran in this one" in line, line
    assert read_raw(s.result.raw_path).end["graphs"]["earlier_replays"] == \
        {"scale_scoped": 4, "grid_stride_sum": 4, "add_plain": 4}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs in one process (device kind "
                    "nvidia-h100-x2); the single-GPU machines skip it")
def test_graphs_on_two_gpus_keep_their_replays_apart(tmp_path):
    """A graph captured on each GPU in one session: each device's ring, copy node and
    poller work in its own context, and every replay comes back as a launch of its device."""
    replays = {0: 30, 1: 50}
    tensors, graphs = {}, {}
    with proton_lite.start(str(tmp_path / "two"), quiet=True, formats=(), calibrate=False) as s:
        for dev in (0, 1):
            with torch.cuda.device(dev):
                tensors[dev] = _inputs()
                # a capture stream of this GPU: torch.cuda.graph's default one belongs to the
                # GPU of its first use and would switch the capture there
                graphs[dev] = _graph(tensors[dev], stream=torch.cuda.Stream())
        for i in range(max(replays.values())):  # interleaved, each on its own device
            for dev in (0, 1):
                if i < replays[dev]:
                    with torch.cuda.device(dev):
                        graphs[dev].replay()
        for dev in (0, 1):
            torch.cuda.synchronize(dev)
    for dev in (0, 1):
        with torch.cuda.device(dev):
            _check(tensors[dev])
    prof = decode(read_raw(s.result.raw_path))
    la = prof.launches
    for dev in (0, 1):
        mine = la[(la["graph"] > 0) & (la["device"] == dev)]
        assert len(mine) == 3 * replays[dev], (dev, len(mine), s.result.summary_line)
        for node in np.unique(mine["graph_node"]):
            assert mine[mine["graph_node"] == node]["replay"].tolist() == list(range(replays[dev]))
        assert (mine["dropped"] == 0).all() and (mine["missing_ctas"] == 0).all()
    assert len(np.unique(la[la["graph"] > 0]["graph"])) == 2  # one graph per device
    assert s.result.errors == [] and s.result.lost == 0, s.result.summary_line
