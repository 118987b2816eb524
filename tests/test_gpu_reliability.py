"""Reliability on the GPU: faults, exits without stop, out of memory, streams and threads,
CUDA graphs, autotuning.  See docs/reliability.md for what the user sees in each case.

Cases that destroy the CUDA context (a kernel fault) run in a child process.
"""
import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import proton_lite  # noqa: E402
import proton_lite.language as pl  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import kernels as K  # noqa: E402

HERE = os.path.dirname(__file__)
REPO = os.path.dirname(HERE)


def _child(code, tmp_path):
    """Run ``code`` as a script file (Triton needs the source of its kernels) in tmp_path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]))
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    return subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=180)


def _vadd(n=1 << 14, stream=None):
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    K.vector_add[(triton.cdiv(n, 1024), )](x, y, out, n, BLOCK=1024)
    return x, y, out


def test_kernel_fault_reaches_user_and_earlier_launches_are_saved(tmp_path):
    r = _child("""
        import torch, triton, triton.language as tl, proton_lite, proton_lite.language as pl, kernels as K

        @triton.jit
        def scribble(x_ptr, off):
            with pl.scope("scribble"):
                tl.store(x_ptr + off + tl.arange(0, 128), tl.zeros([128], tl.float32))

        x = torch.rand(4096, device="cuda"); out = torch.empty_like(x)
        s = proton_lite.start("fault", quiet=True, formats=())
        for _ in range(3):
            K.vector_add[(4,)](x, x, out, 4096, BLOCK=1024)
        torch.cuda.synchronize()
        scribble[(1,)](x, 1 << 40)  # an address far outside any allocation
        try:
            torch.cuda.synchronize()
        except Exception as e:
            print("USER-SAW:", type(e).__name__, str(e).splitlines()[0])
        res = proton_lite.stop()
        print("LAUNCHES-SAVED:", res.launches, "ERRORS:", res.errors)
    """, tmp_path)
    assert "USER-SAW:" in r.stdout and "illegal" in r.stdout.lower(), r.stdout + r.stderr[-2000:]
    cap = read_raw(str(tmp_path / "fault.plraw"))
    prof = decode(cap)
    assert len(prof.launches) >= 3  # the three good launches are on disk and decode
    assert (prof.launches["records"][:3] == 4 * 4 * 4).all()


@pytest.mark.parametrize("copy_every", [1, 64])
def test_a_fault_right_after_a_burst_loses_only_what_it_reports(tmp_path, copy_every):
    """No synchronize before the faulting kernel: with copy_every=1 every good launch was
    copied before it; with batching, the burst's last batch is lost with it and counted."""
    r = _child(f"""
        import torch, triton, triton.language as tl, proton_lite, proton_lite.language as pl, kernels as K

        @triton.jit
        def scribble(x_ptr, off):
            with pl.scope("scribble"):
                tl.store(x_ptr + off + tl.arange(0, 128), tl.zeros([128], tl.float32))

        x = torch.rand(4096, device="cuda"); out = torch.empty_like(x)
        s = proton_lite.start("burst", quiet=True, formats=(), copy_every={copy_every})
        # compiled before the burst, with an offset of the same specialization (i32, multiple
        # of 16) as the faulting one, so that no compile pause separates it from the burst
        scribble[(1,)](x, 16); K.vector_add[(4,)](x, x, out, 4096, BLOCK=1024)
        torch.cuda.synchronize()
        for _ in range(10):
            K.vector_add[(4,)](x, x, out, 4096, BLOCK=1024)
        scribble[(1,)](x, (1 << 31) - 1024)  # 8 GiB past x
        try:
            torch.cuda.synchronize()
        except Exception as e:
            print("USER-SAW:", type(e).__name__)
        res = proton_lite.stop()
        print("RESULT", res.launches, res.lost, "|".join(res.errors))
    """, tmp_path)
    assert "USER-SAW:" in r.stdout, r.stdout + r.stderr[-2000:]
    launches, lost, errors = r.stdout.split("RESULT ", 1)[1].split(" ", 2)
    prof = decode(read_raw(str(tmp_path / "burst.plraw")))
    vadd = prof.launches["grid_x"] == 4
    assert (prof.launches["records"][vadd] == 4 * 4 * 4).all()  # whatever was saved is whole
    assert int(launches) == 13 and len(prof.launches) + int(lost) == 13  # each launch saved or counted lost
    if copy_every == 1:
        assert len(prof.launches) == 12 and int(lost) == 1  # only the faulting launch itself
    else:
        assert int(lost) > 1 and "were still on the GPU" in errors and "copy_every=1" in errors


@triton.jit
def loop_out_of_place(x_ptr, o_ptr, n_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    n_iter = tl.load(n_ptr)  # a trip count read from memory: not known at launch, loop_capacity (256)
    for i in range(n_iter):
        pl.enter_scope("step")
        acc = acc * 1.0001 + 1.0
        pl.exit_scope("step")
    tl.store(o_ptr + offs, acc)


@triton.jit
def long_loop_out_of_place(x_ptr, o_ptr, n_ptr, BLOCK: tl.constexpr):
    """loop_out_of_place with 16 dependent FMAs per iteration: not a tight loop, so with global
    staging its last record is stored at the next record's address - 8 (design.md §2)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    n_iter = tl.load(n_ptr)
    for i in range(n_iter):
        pl.enter_scope("step")
        for _ in tl.static_range(16):
            acc = acc * 1.0001 + 1.0
        pl.exit_scope("step")
    tl.store(o_ptr + offs, acc)


def test_exact_sizing_needs_no_second_run_where_a_launch_pool_keeps_every_record(tmp_path):
    """A loop bounded by a loaded count used to overflow its loop capacity and run again under
    sizing="exact"; its records now continue in the launch's pool: every record, one run each."""
    x = torch.rand(7 * 128, device="cuda")
    iters = (300, 300, 40)  # 600, 600 and 80 records per warp
    counts = [torch.tensor([n], device="cuda", dtype=torch.int32) for n in iters]
    plain = []
    for n in counts:
        o = torch.empty_like(x)
        loop_out_of_place[(7, )](x, o, n, BLOCK=128)
        plain.append(o)
    outs = []
    with proton_lite.start(str(tmp_path / "exact"), quiet=True, sizing="exact", formats=()) as s:
        for n in counts:
            o = torch.full_like(x, -1.0)
            loop_out_of_place[(7, )](x, o, n, BLOCK=128)
            outs.append(o)
    torch.cuda.synchronize()
    for o, p in zip(outs, plain):
        assert torch.equal(o, p)  # the second run wrote the same outputs
    cap = read_raw(s.result.raw_path)
    prof = decode(cap)
    assert s.result.dropped == 0 and prof.total_dropped == 0 and prof.total_unmatched == 0
    assert prof.launches["records"].tolist() == [7 * 4 * 2 * n for n in iters]
    assert cap.end["exact_reruns"] == 0 and prof.launches["pool_taken"].max() > 0
    assert "run again" not in s.result.summary_line


@pytest.mark.parametrize("kernel,capacity", [(loop_out_of_place, 7501), (loop_out_of_place, 7500),
                                             (long_loop_out_of_place, 7501)], ids=["tight", "tight-even", "long"])
def test_overflow_in_global_staging_keeps_the_first_records_and_counts_the_rest(tmp_path, kernel, capacity):
    """A capacity too large to stage in shared memory puts the records in global memory, where
    a record past the capacity goes to its unit's sink slots (no compare per record): every
    unit keeps exactly its first `capacity` records, the rest are counted dropped, the
    kernel's output is unchanged, and nothing is written past a unit (the sanitizer run of
    tests/run_gpu.sh includes this test). The tight loop is unrolled twice and stores its
    records in pairs: with an odd capacity the last kept record is the first of a pair whose
    second goes to a sink slot. In the long loop the deferred record is stored at the next
    one's address - 8, which takes the second sink slot past the capacity."""
    from proton_lite.layout import BufferLayout
    x = torch.rand(7 * 128, device="cuda")
    n = torch.tensor([4000], device="cuda", dtype=torch.int32)  # 8000 records per warp
    plain = torch.empty_like(x)
    kernel[(7, )](x, plain, n, BLOCK=128)
    out = torch.full_like(x, -1.0)
    # an explicit capacity: no launch pool (its loop is bounded by a loaded count)
    with proton_lite.start(str(tmp_path / "g"), quiet=True, capacity=capacity, formats=()) as s:
        kernel[(7, )](x, out, n, BLOCK=128)  # 4 warps x 7503 slots: more than shared memory
    torch.cuda.synchronize()
    assert torch.equal(out, plain)
    cap = read_raw(s.result.raw_path)
    (meta, ) = [m for m in cap.kernels.values() if m["name"] == kernel.__name__]
    layout = BufferLayout.from_json(meta["proton_lite"]["layout"])
    assert (layout.staging, layout.overflow, layout.capacity) == ("global", "sink", capacity)
    assert s.result.dropped == 7 * 4 * (8000 - capacity)
    prof = decode(cap)
    # the kept records of each warp: enter/exit pairs, then with an odd capacity an enter
    # whose exit was dropped
    assert len(prof.intervals) == 7 * 4 * (capacity // 2) and (prof.intervals["cycles"] > 0).all()
    assert prof.total_unmatched == 7 * 4 * (capacity % 2)


def test_exit_without_stop_still_writes_the_raw_capture(tmp_path):
    r = _child("""
        import torch, proton_lite, kernels as K
        x = torch.rand(4096, device="cuda"); out = torch.empty_like(x)
        proton_lite.start("noexit", quiet=True)
        for _ in range(5):
            K.vector_add[(4,)](x, x, out, 4096, BLOCK=1024)
    """, tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    cap = read_raw(str(tmp_path / "noexit.plraw"))
    assert cap.end is not None  # END chunk written by the atexit handler
    prof = decode(cap)
    assert len(prof.launches) == 5 and prof.total_dropped == 0


def test_out_of_memory_for_profile_buffer_is_clear_and_kernel_not_launched(tmp_path):
    free, total = torch.cuda.mem_get_info()
    n = 1 << 20
    x = torch.rand(n * 1024 // 1024, device="cuda")
    out = torch.full_like(x, -1.0)
    # capacity so large that size x CTAs exceeds the free memory
    per_unit = int(free / (n // 1024) / 4 / 8 * 2)
    with pytest.raises(MemoryError, match=r"out of device memory for a profile buffer.*Reduce"):
        with proton_lite.start(str(tmp_path / "oom"), quiet=True, capacity=min(per_unit, 1 << 24), formats=()):
            K.vector_add[(n // 1024, )](x, x, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    assert (out == -1.0).all()  # the kernel did not run with a missing buffer


def test_streams_and_threads_attribute_every_launch(tmp_path):
    streams = [torch.cuda.Stream() for _ in range(3)]
    n_each = 7

    def work(i):
        with torch.cuda.stream(streams[i]):
            x = torch.rand(4096 * (i + 1), device="cuda")
            out = torch.empty_like(x)
            for _ in range(n_each):
                K.vector_add[(4 * (i + 1), )](x, x, out, x.numel(), BLOCK=1024)

    with proton_lite.start(str(tmp_path / "mt"), quiet=True, formats=()) as s:
        threads = [threading.Thread(target=work, args=(i, )) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    torch.cuda.synchronize()
    prof = decode(read_raw(s.result.raw_path))
    assert len(prof.launches) == 3 * n_each
    by_stream = {}
    for launch in prof.launches:
        by_stream.setdefault(int(launch["stream"]), set()).add(int(launch["grid_x"]))
    assert sorted(by_stream) == sorted(st.cuda_stream for st in streams)
    for i, st in enumerate(streams):
        assert by_stream[st.cuda_stream] == {4 * (i + 1)}  # each stream saw only its own grid
    assert (prof.launches["records"] == prof.launches["num_ctas"] * 4 * 4).all()
    assert len(np.unique(prof.launches["launch"])) == 3 * n_each


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs in one process (device kind "
                    "nvidia-h200-x2); the single-GPU machines skip it")
def test_two_gpus_in_one_process_keep_their_launches_apart(tmp_path):
    runs = []
    with proton_lite.start(str(tmp_path / "two"), quiet=True, formats=("chrome", ), calibrate=False) as s:
        for device in (0, 1, 1, 0):
            with torch.cuda.device(device):
                x = torch.rand(4096 * (device + 1), device=f"cuda:{device}")
                out = torch.empty_like(x)
                K.vector_add[(4 * (device + 1), )](x, x, out, x.numel(), BLOCK=1024)
                runs.append((x, out))
    for device in (0, 1):
        torch.cuda.synchronize(device)
    for x, out in runs:
        assert torch.equal(out, x + x)
    assert s.result.launches == 4 and s.result.errors == [] and s.result.lost == 0, s.result.summary_line
    prof = decode(read_raw(s.result.raw_path))
    assert prof.launches["device"].tolist() == [0, 1, 1, 0]
    assert prof.launches["grid_x"].tolist() == [4, 8, 8, 4]  # each launch's buffer came back from its own GPU
    assert (prof.launches["records"] == prof.launches["num_ctas"] * 4 * 4).all() and prof.total_dropped == 0
    doc = json.loads(open(s.result.trace_paths[0]).read())  # the trace names each launch's GPU
    titles = {e["args"]["name"].rsplit(" SM ", 1)[0] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    # e.g. "#1 vector_add grid=(8,1,1) warps=4 GPU 1"
    assert {(t.split()[0], t.split(" GPU ")[-1]) for t in titles} == {("#0", "0"), ("#1", "1"), ("#2", "1"),
                                                                      ("#3", "0")}
    # each GPU's timer anchored to the host clock at stop; the verdict per device is recorded
    anchors = {a["device"]: a for a in prof.session["clock_anchors"]}
    assert set(anchors) == {0, 1} and all("error" not in a for a in anchors.values()), anchors
    assert set(prof.session["device_clocks"]) == {"0", "1"}
    out = os.environ.get("PROTON_LITE_RESULTS_DIR")
    if out:
        with open(os.path.join(out, "two_gpu_one_process_clocks.json"), "w") as f:
            json.dump({"anchors": anchors, "device_clocks": prof.session["device_clocks"]}, f, indent=1)


def test_a_graph_captured_in_a_session_is_recorded_and_runs_after_stop(tmp_path):
    """Capturing must not break (it used to be refused), every replay in the session is
    recorded, and replays after stop write only into scratch that outlives the session
    (this test also runs under compute-sanitizer)."""
    n = 4096
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    K.vector_add[(4, )](x, x, out, n, BLOCK=1024)  # compiled outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with proton_lite.start(str(tmp_path / "graph"), quiet=True, formats=(), calibrate=False) as s:
        K.vector_add[(4, )](x, x, out, n, BLOCK=1024)
        with torch.cuda.graph(g):
            K.vector_add[(4, )](x, x, out, n, BLOCK=1024)
        for _ in range(3):
            out.zero_()
            g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, x + x)
    assert s.result.launches == 4  # the eager launch and 3 replays; the capture is not a launch of its own
    assert s.result.counters["graph_captured_launches"] == 0
    assert "1 launch(es) captured into 1 CUDA graph(s) in this session were recorded in 3 replay launch(es)" in \
        s.result.summary_line, s.result.summary_line
    x.copy_(torch.rand(n, device="cuda"))
    for _ in range(5):  # after stop
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x + x)
    del g


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024})], key=["n"])
@triton.jit
def tuned_copy(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("copy"):
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def test_autotuner_trials_are_skipped_and_chosen_config_profiled(tmp_path):
    n = 1 << 16
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    with proton_lite.start(str(tmp_path / "tune"), quiet=True, formats=()) as s:
        for _ in range(3):
            tuned_copy[lambda m: (triton.cdiv(n, m["BLOCK"]), )](x, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x)
    prof = decode(read_raw(s.result.raw_path))
    assert len(prof.launches) == 3  # only the real launches, not the autotuner's trials
    assert "autotuner trial launches skipped" in s.result.summary_line
    block = tuned_copy.best_config.kwargs["BLOCK"]
    assert (prof.launches["grid_x"] == n // block).all()
