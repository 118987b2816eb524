"""Session options and the line a session prints at stop (no GPU needed)."""
from types import SimpleNamespace

import pytest

import proton_lite
from proton_lite.decode import decode
from proton_lite.raw_format import read_raw
from proton_lite.session import SessionOptions, SessionResult
from proton_lite.session_result import _summary_line
from synth import simple_capture


def test_unknown_options_are_refused_with_the_valid_ones_listed():
    with pytest.raises(TypeError, match=r"unknown option\(s\) loopcap, sizes; valid options: .*loop_capacity"):
        SessionOptions.from_kwargs("s", {"loopcap": 3, "sizes": "exact"})
    with pytest.raises(ValueError, match=r"unknown sizing 'counted'; valid: code, exact"):
        SessionOptions.from_kwargs("s", {"sizing": "counted"})
    with pytest.raises(ValueError, match=r"sizing='exact' sizes the buffers itself; leave capacity unset"):
        SessionOptions.from_kwargs("s", {"sizing": "exact", "capacity": 64})
    with pytest.raises(ValueError, match="granularity 'thread'.*warp, warpgroup, cta"):
        SessionOptions.from_kwargs("s", {"granularity": "thread"})
    with pytest.raises(ValueError, match="buffer_mode 'ring'"):
        SessionOptions.from_kwargs("s", {"buffer_mode": "ring"})
    with pytest.raises(ValueError, match="trace format"):
        SessionOptions.from_kwargs("s", {"formats": ("svg", )})
    with pytest.raises(ValueError, match=r"unknown trace_layout 'gpu'; valid: auto, launch, sm"):
        SessionOptions.from_kwargs("s", {"trace_layout": "gpu"})
    assert SessionOptions.from_kwargs("s", {"trace_layout": "sm"}).trace_layout == "sm"
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=r"copy_every must be a whole number of launches >= 1.*1 copies each"):
            SessionOptions.from_kwargs("s", {"copy_every": bad})
    assert SessionOptions.from_kwargs("s", {"copy_every": 1}).copy_every == 1


def test_the_stop_line_counts_drops_once_and_names_the_option_that_keeps_them(tmp_path):
    path = str(tmp_path / "d.plraw")
    simple_capture(path, drop_last=1, cap=3)  # every unit tried 4 records; 3 fit
    prof = decode(read_raw(path))
    result = SessionResult(path, launches=1, records=int(prof.launches["records"].sum()),
                           dropped=prof.total_dropped, unmatched=prof.total_unmatched,
                           keep_all_hint=prof.keep_all_hint())
    counters = SimpleNamespace(skipped_autotune=0, unattributed=0)
    line = _summary_line(result, counters)
    first, warning = line.split("\n")
    assert first.startswith("proton_lite: 1 launch, 72 records, 24 dropped, 24 unmatched -> ")
    assert warning == ("proton_lite: warning: 24 records did not fit the profile buffer and were dropped; "
                       "loop_capacity=4 (or capacity=4) in proton_lite.start() keeps them (the busiest unit wrote "
                       "4 records), or sizing=\"exact\" (runs such launches again); buffer_mode=\"circular\" keeps "
                       "the newest instead")


def test_the_stop_line_names_kernels_whose_scopes_a_triton_pass_removed(tmp_path):
    path = str(tmp_path / "d.plraw")
    simple_capture(path)
    result = SessionResult(path, launches=1, records=72)
    lost = "kernel ws_mm: scope(s) 'load' have no records: Triton's warp specialization removed their markers"
    counters = SimpleNamespace(skipped_autotune=0, unattributed=0, lost_scopes=[lost])
    lines = _summary_line(result, counters).split("\n")
    assert lines[1:] == ["proton_lite: warning: " + lost]


def test_the_stop_line_names_kernels_that_ran_without_instrumentation(tmp_path):
    path = str(tmp_path / "d.plraw")
    simple_capture(path)
    result = SessionResult(path, launches=1, records=72)
    counters = SimpleNamespace(skipped_autotune=0, unattributed=0,
                               uninstrumented={f"k{i}": i + 1 for i in range(10)})
    lines = _summary_line(result, counters).split("\n")
    assert len(lines) == 2 and lines[1].startswith("proton_lite: warning: 55 launch(es) of 10 kernel(s) ran "
                                                   "without instrumentation and are not in the profile: ")
    assert "k9 (10), k8 (9)" in lines[1] and "and 2 more" in lines[1] and "start the session before" in lines[1]


def test_the_stop_line_names_plain_launches_captured_into_graphs_with_the_way_to_see_them(tmp_path):
    path = str(tmp_path / "d.plraw")
    simple_capture(path)
    result = SessionResult(path, launches=1, records=72)
    counters = SimpleNamespace(skipped_autotune=0, unattributed=0, captured={"triton_poi_fused_0": 2, "k": 1})
    lines = _summary_line(result, counters).split("\n")
    assert len(lines) == 2 and lines[1].startswith("proton_lite: warning: 3 launch(es) of 2 kernel(s) were captured "
                                                   "into CUDA graphs without instrumentation and their replays are "
                                                   "not in the profile: triton_poi_fused_0 (2), k (1).")
    assert "capture the graph inside it" in lines[1]


def test_torch_compile_kernels_the_session_could_not_reach_are_counted():
    """torch imported after start: the bridge was never installed, yet Inductor generated kernels."""
    from proton_lite.coverage import not_covered
    from proton_lite.runtime.inductor import InductorBridge
    counters = SimpleNamespace()
    unused = InductorBridge(lambda fn: None, lambda fn: None)
    assert not_covered(counters, unused, 0) == []
    (line, ) = not_covered(counters, unused, 3)
    assert line.startswith("torch.compile generated 3 Triton kernel(s) during the session") and \
        "import torch before starting the session" in line
    unused.used = True  # installed: its kernels were compiled with instrumentation
    assert not_covered(counters, unused, 3) == []
    unused.failures["triton_red_fused_1"] = "OutOfResources: shared memory"
    (line, ) = not_covered(counters, unused, 3)
    assert "triton_red_fused_1: OutOfResources: shared memory" in line and "ran plain" in line


def test_start_without_a_driver_fails_at_once_in_one_line_and_leaves_no_file(tmp_path):
    """On a machine without an NVIDIA driver (CI's), ``start()`` says so in one line before any
    file exists, and no session is left active."""
    from proton_lite.runtime import cuda_api
    if cuda_api.recording_problem() is None:
        pytest.skip("this machine has a GPU and its driver: the check is for machines without one")
    with pytest.raises(RuntimeError) as err:
        proton_lite.start(str(tmp_path / "out" / "x"))
    msg = str(err.value)
    assert msg.startswith("proton_lite.start: cannot record here: no NVIDIA driver found") and "\n" not in msg
    assert "compile, summary, trace, diff and open work without one" in msg
    assert err.value.__suppress_context__ and err.value.__cause__ is None  # no chained driver traceback
    assert not (tmp_path / "out").exists() and proton_lite.active() is None and proton_lite.stop() is None


def test_help_of_start_lists_every_option_and_out_dir_chooses_the_folder():
    import inspect
    doc = inspect.getdoc(proton_lite.start)
    listed = {line.split(":")[0].strip() for line in doc.splitlines() if ":" in line and line[:1] not in " "}
    options = {f for f in SessionOptions.__dataclass_fields__}
    assert options <= listed | {"name"} and "name" in listed and "mode" in listed, options - listed
    assert SessionOptions.from_kwargs("mm", {"out_dir": "runs/a"}).base == "runs/a/mm"
    assert SessionOptions.from_kwargs("runs/mm", {}).base == "runs/mm"


def test_a_session_that_did_not_decode_reports_no_counts_rather_than_zeros(tmp_path):
    path = str(tmp_path / "d.plraw")
    simple_capture(path)
    result = SessionResult(path, launches=3, records=None, dropped=None, unmatched=None)
    counters = SimpleNamespace(skipped_autotune=2, unattributed=0, uninstrumented={"k": 4}, captured={}, lost=0)
    line = _summary_line(result, counters)
    assert line.startswith("proton_lite: 3 launches, not decoded (decode=False; `proton-lite summary` on the capture "
                           "counts records and drops), 2 autotuner trial launches skipped -> ")
    assert result.records is None and result.dropped is None
    assert result.counters["skipped_autotune"] == 2 and result.counters["uninstrumented_launches"] == 4
    assert len(result.warnings) == 1 and result.warnings[0].startswith("4 launch(es) of 1 kernel(s) ran without")
    assert line.split("\n")[1] == "proton_lite: warning: " + result.warnings[0]


def test_start_installs_its_hooks_where_only_the_driver_is_missing(tmp_path, monkeypatch):
    """What start() does after the driver check (writer, collector, Triton hooks) runs here;
    a failure while installing leaves no capture and no active session."""
    import proton_lite.session as session_mod
    from proton_lite.runtime import triton_hooks
    monkeypatch.setattr(session_mod, "_check_can_record", lambda: None)
    s = proton_lite.start(str(tmp_path / "x"), calibrate=False)
    try:
        assert proton_lite.active() is s and s._installed and s._hooks is not None
        assert (tmp_path / "x.plraw").stat().st_size > 0
    finally:
        s._uninstall()
        s._writer.close()
        session_mod._active = None

    def broken(self):
        raise RuntimeError("hook install failed")
    monkeypatch.setattr(triton_hooks.TritonHooks, "install", broken)
    with pytest.raises(RuntimeError, match="hook install failed"):
        proton_lite.start(str(tmp_path / "y"), calibrate=False)
    assert not (tmp_path / "y.plraw").exists() and proton_lite.active() is None


def test_a_capture_records_its_host_and_torchrun_rank(tmp_path, monkeypatch):
    """Under torchrun (RANK, WORLD_SIZE, ... in the environment) the capture says which rank
    wrote it, without importing torch; summary shows host and rank."""
    import socket

    import proton_lite.session as session_mod
    from proton_lite.raw_format import read_raw
    from proton_lite.viewer.summary import summarize
    monkeypatch.setattr(session_mod, "_check_can_record", lambda: None)
    for env, value in (("RANK", "3"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "8"), ("LOCAL_WORLD_SIZE", "4")):
        monkeypatch.setenv(env, value)
    monkeypatch.delenv("GROUP_RANK", raising=False)
    s = proton_lite.start(str(tmp_path / "r"), calibrate=False)
    try:
        pass
    finally:
        s._uninstall()
        s._writer.close()
        session_mod._active = None
    info = read_raw(str(tmp_path / "r.plraw")).session
    assert info["host"] == socket.gethostname() and info["rank"] == 3 and info["local_rank"] == 1
    assert info["world_size"] == 8 and info["local_world_size"] == 4 and "node_rank" not in info
    head = summarize(decode(read_raw(str(tmp_path / "r.plraw"))))["session"]
    assert (head["host"], head["rank"], head["world_size"]) == (socket.gethostname(), 3, 8)


@pytest.mark.parametrize("anchors", [True, False])
def test_clock_anchors_are_taken_at_start_and_stop_unless_turned_off(tmp_path, monkeypatch, anchors):
    """start() probes the GPUs already in use, stop() those the session recorded on (the
    probe itself needs a GPU: here it is replaced, and its calls are checked)."""
    import proton_lite.session as session_mod
    from proton_lite.raw_format import read_raw
    from proton_lite.runtime import clock_probe
    from proton_lite.runtime import cuda_api
    from sim_driver import SimDriver
    SimDriver().install(monkeypatch)  # stop's driver calls, on the simulated driver
    monkeypatch.setattr(cuda_api, "device_name", lambda device: "simulated GPU")
    monkeypatch.setattr(cuda_api, "device_attribute", lambda device, name: 0)
    monkeypatch.setattr(session_mod, "_check_can_record", lambda: None)
    calls = []
    monkeypatch.setattr(clock_probe, "active_contexts", lambda: {0: "ctx0"})
    monkeypatch.setattr(clock_probe, "probe_devices",
                        lambda contexts, when: calls.append((sorted(contexts), when)) or
                        [{"device": d, "when": when, "offset_ns": 5} for d in contexts])
    s = proton_lite.start(str(tmp_path / "x"), calibrate=False, decode=False, quiet=True, clock_anchors=anchors)
    s._collector._contexts[1] = "ctx1"  # as if the session had launched on GPU 1
    proton_lite.stop()
    assert calls == ([([0], "start"), ([1], "stop")] if anchors else [])
    end = read_raw(str(tmp_path / "x.plraw")).end
    assert [(a["device"], a["when"]) for a in end["clock_anchors"]] == ([(0, "start"), (1, "stop")] if anchors else [])


def test_the_session_tallies_its_instrumented_compiles_and_tells_them_at_stop(monkeypatch, tmp_path):
    """Triton's compilation listener reports each compile and its time: the session's tally
    counts the instrumented ones that Triton's cache did not answer, and the stop line says
    what they cost the program's first steps once they add up (COMPILE_NOTE_S)."""
    from proton_lite import compat
    from proton_lite.runtime.triton_hooks import CompileTally
    from proton_lite.session_result import COMPILE_NOTE_S
    import fixed_cost_kernels as F
    rms = (F.rms_norm_fwd, {"x_ptr": "*fp32", "w_ptr": "*fp32", "y_ptr": "*fp32", "rstd_ptr": "*fp32",
                            "stride": "i32", "n_cols": "i32", "eps": "fp32"}, {"BLOCK": 1024})
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    tally, saved = CompileTally(), compat.get_knob("compilation", "listener")
    compat.set_knob("compilation", "listener", tally)
    try:
        proton_lite.compile(*rms, instrument=False, num_warps=4)  # plain: not the session's
        assert tally.compiles == 0
        proton_lite.compile(*rms, instrument=True, num_warps=4)
        assert tally.compiles == 1 and 0 < tally.seconds < 60
        proton_lite.compile(*rms, instrument=True, num_warps=4)  # Triton's cache answers: no compile
        assert tally.compiles == 1
    finally:
        compat.set_knob("compilation", "listener", saved)
    counters = SimpleNamespace()
    quick = SessionResult("s.plraw", launches=5, compiles=2, compile_seconds=COMPILE_NOTE_S / 2)
    assert "compiled with instrumentation" not in _summary_line(quick, counters)
    slow = SessionResult("s.plraw", launches=5, compiles=25, compile_seconds=2.94)
    (note, ) = [ln for ln in _summary_line(slow, counters).split("\n") if "compiled with instrumentation" in ln]
    assert note.startswith("proton_lite: note: 25 kernels were compiled with instrumentation in the session (2.9 s")
    assert "time the steps after the first" in note
