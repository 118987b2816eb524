"""The ``proton-lite`` command line, as a subprocess and in-process.

Numbers are checked against values computed here with numpy from the decoded profile, and
against the values the synthetic captures were built with.  Real GPU captures dropped into
tests/data/*.plraw are picked up by the parametrized tests automatically.
"""
import glob
import http.client
import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from proton_lite.layout import CTA_HEADER_BYTES, RECORD_BYTES, UNIT_HEADER_BYTES, BufferLayout, encode_tag
from proton_lite.pipeline import load_profile
from proton_lite.raw_format import CHUNK_HEADER, FILE_HEADER, FORMAT_VERSION, LAUNCH, RawWriter, read_raw
import proton_lite.viewer.server as server_mod
from proton_lite.viewer import cli, cli_view
from proton_lite.viewer.render import fmt_pct

from kernels import CASES, signature
from synth import kernel_meta, launch_buffer, simple_capture

REPO = Path(__file__).resolve().parent.parent
KERNELS_PY = str(REPO / "tests" / "kernels.py")
REAL_CAPTURES = sorted(glob.glob(str(REPO / "tests" / "data" / "*.plraw")))
LONG_NAME = "fused_attention_forward_kernel_with_a_deliberately_long_name_to_test_wrapping_at_80"


# ---------------------------------------------------------------------------------------------
# running the CLI
# ---------------------------------------------------------------------------------------------

def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "80"
    env.pop("PROTON_LITE_DEBUG", None)
    env.update(extra)
    return env


def run_cli(*args, timeout=300, **kw):
    """Run ``python -m proton_lite.viewer.cli ARGS``; returns the CompletedProcess (text)."""
    return subprocess.run([sys.executable, "-m", "proton_lite.viewer.cli", *map(str, args)], env=_env(),
                          capture_output=True, text=True, timeout=timeout, **kw)


def call(capsys, *args):
    """Run ``cli.main`` in this process; returns (exit code, stdout, stderr)."""
    rc = cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_error_line(err: str, *phrases: str):
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("proton-lite: error: "), err
    assert "Traceback" not in err
    for p in phrases:
        assert p.lower() in lines[0].lower(), (p, lines[0])
    return lines[0]


def assert_fits(text: str, width=80):
    """No line wider than ``width``; ``wrote PATH`` lines are exempt (a path is never broken)."""
    long = [line for line in text.splitlines() if len(line) > width and not line.startswith("wrote ")]
    assert not long, long


# ---------------------------------------------------------------------------------------------
# synthetic captures
# ---------------------------------------------------------------------------------------------

SCOPES = ["outer", "inner", "epilogue"]


def build_capture(path, name="synth", inner=1500, launches=3, n_ctas=8, n_sms=4, units=4, rate=1.5, seed=0,
                  kernels=("k",), cap=6, jitter=40):
    """A capture with scopes outer > inner, then epilogue, per unit, at known cycle offsets.

    ``inner`` cycles (plus uniform jitter) for the inner scope; the epilogue's jitter comes
    from a fixed seed so that it is the same in every capture built here.  Launches cycle
    through ``kernels``; ``cap`` < 6 drops the last records of every unit.
    """
    rng = np.random.default_rng(seed)
    rng_epi = np.random.default_rng(12345)
    layout = BufferLayout("warp", units, cap, "shared")
    w = RawWriter(str(path), {"name": name, "device": "synthetic"})
    for kid, kname in enumerate(kernels):
        w.kernel(kernel_meta(kid, kname, list(SCOPES), layout))
    expected = {"inner_cycles": [], "epilogue_cycles": []}
    cta_cycles = inner + 2000
    for launch in range(launches):
        ctas = []
        for i in range(n_ctas):
            sm = i % n_sms
            local = launch * 100_000_000 + (i // n_sms) * (cta_cycles + 500)  # cycles since the SM's origin
            start_clk = 10_000_000 * (sm + 1) + local
            us = []
            for u in range(units):
                t = start_clk + 50 + 7 * u
                d_inner = inner + int(rng.integers(-jitter, jitter + 1))
                d_epi = 600 + int(rng_epi.integers(-jitter, jitter + 1))
                e_inner, x_inner = t + 100, t + 100 + d_inner
                x_outer = x_inner + 200
                e_epi, x_epi = x_outer + 20, x_outer + 20 + d_epi
                recs = [(encode_tag(0, False), t), (encode_tag(1, False), e_inner), (encode_tag(1, True), x_inner),
                        (encode_tag(0, True), x_outer), (encode_tag(2, False), e_epi), (encode_tag(2, True), x_epi)]
                end_clk = x_epi + 50
                end_gt = 1_000_000_000 + int(round((end_clk - 10_000_000 * (sm + 1)) / rate))
                us.append((len(recs), end_gt, end_clk, recs))
                expected["inner_cycles"].append(d_inner)
                expected["epilogue_cycles"].append(d_epi)
            start_gt = 1_000_000_000 + int(round(local / rate))
            ctas.append({"smid": sm, "start_gt": start_gt, "start_clk": start_clk, "units": us})
        w.launch(launch % len(kernels), 0, launch, (n_ctas, 1, 1), n_ctas, 0, 0, launch_buffer(layout, ctas))
    w.end({"launches": launches})
    w.close()
    return expected


SYNTHETIC = {
    "synth-simple": lambda p: simple_capture(str(p)),
    "synth-timed": lambda p: build_capture(p),
    "synth-two-kernels-dropped": lambda p: build_capture(p, kernels=("matmul_kernel", LONG_NAME), launches=4, cap=4),
}
CAPTURE_IDS = list(SYNTHETIC) + REAL_CAPTURES


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("captures")
    out = {}
    for name, make in SYNTHETIC.items():
        path = folder / f"{name}.plraw"
        make(path)
        out[name] = str(path)
    return out


@pytest.fixture(params=CAPTURE_IDS, ids=[Path(c).name for c in CAPTURE_IDS])
def capture(request, captures):
    return captures.get(request.param, request.param)


# ---------------------------------------------------------------------------------------------
# summary
# ---------------------------------------------------------------------------------------------

def _kernel_of_interval(profile):
    order = np.argsort(profile.launches["launch"])
    keys = profile.launches["launch"][order]
    pos = np.searchsorted(keys, profile.intervals["launch"])
    return profile.launches["kernel"][order][pos].astype(np.int64)


def _scope_name(kernel, index):
    return kernel.scopes[index] if index < len(kernel.scopes) else f"scope#{index}"


def _intervals_of(profile, kernel_name, scope_name):
    """The intervals of every kernel called ``kernel_name`` whose scope is called ``scope_name``."""
    kernel_of = _kernel_of_interval(profile)
    keep = np.zeros(len(profile.intervals), dtype=bool)
    for k, info in enumerate(profile.kernels):
        if info.name != kernel_name:
            continue
        for sid in np.unique(profile.intervals["scope"][kernel_of == k]):
            if _scope_name(info, int(sid)) == scope_name:
                keep |= (kernel_of == k) & (profile.intervals["scope"] == sid)
    return profile.intervals[keep]


def test_summary_json_matches_numpy_on_the_decoded_profile(capture, capsys):
    rc, out, err = call(capsys, "summary", capture, "--json")
    assert rc == 0, err
    s = json.loads(out)
    profile = load_profile(capture)
    # every (kernel, scope) with intervals has exactly one row
    kernel_of = _kernel_of_interval(profile)
    pairs = {(profile.kernels[int(k)].name, _scope_name(profile.kernels[int(k)], int(sc)))
             for k, sc in set(zip(kernel_of.tolist(), profile.intervals["scope"].tolist()))}
    assert {(r["kernel"], r["scope"]) for r in s["scopes"]} == pairs
    assert s["scopes_total"] == len(pairs)
    for row in s["scopes"]:
        iv = _intervals_of(profile, row["kernel"], row["scope"])
        d = (iv["end_ns"] - iv["start_ns"]).astype(np.int64)
        assert row["count"] == len(iv)
        assert row["total"] == int(d.sum())
        assert row["mean"] == pytest.approx(d.mean())
        assert row["p50"] == pytest.approx(np.percentile(d, 50))
        assert row["p90"] == pytest.approx(np.percentile(d, 90))
        assert row["min"] == d.min() and row["max"] == d.max()
        assert row["cycles"]["mean"] == pytest.approx(iv["cycles"].mean())
        assert row["cycles"]["p50"] == pytest.approx(np.percentile(iv["cycles"], 50))
    assert [r["launch"] for r in s["launches"]] == sorted(profile.launches["launch"].tolist())
    for row in s["launches"]:
        launch = profile.launches[profile.launches["launch"] == row["launch"]][0]
        ctas = profile.ctas[profile.ctas["launch"] == row["launch"]]
        assert row["kernel"] == profile.kernels[int(launch["kernel"])].name
        assert row["ctas"] == (int(launch["num_ctas"]) or len(ctas))
        assert row["ctas_recorded"] == len(ctas)
        assert row["sms_used"] == len(np.unique(ctas["smid"]))
        assert row["duration_ns"] == int(launch["end_ns"] - launch["start_ns"])
        assert row["dropped"] == int(launch["dropped"])
    assert s["session"]["launches"] == len(profile.launches)


def test_summary_json_matches_how_the_capture_was_built(tmp_path, capsys):
    path = tmp_path / "built.plraw"
    expected = build_capture(path, inner=1800, launches=3, n_ctas=8, n_sms=4, units=4)
    rc, out, _ = call(capsys, "summary", path, "--json")
    assert rc == 0
    s = json.loads(out)
    rows = {r["scope"]: r for r in s["scopes"]}
    assert set(rows) == set(SCOPES)
    inner = np.array(expected["inner_cycles"])
    assert rows["inner"]["count"] == 3 * 8 * 4 == len(inner)
    assert rows["inner"]["cycles"]["mean"] == pytest.approx(inner.mean())
    assert rows["inner"]["cycles"]["p50"] == pytest.approx(np.percentile(inner, 50))
    assert rows["inner"]["cycles"]["p90"] == pytest.approx(np.percentile(inner, 90))
    # rate 1.5 cycles/ns: ns within rounding of cycles / 1.5
    assert rows["inner"]["mean"] == pytest.approx(inner.mean() / 1.5, abs=1.0)
    assert [r["ctas"] for r in s["launches"]] == [8, 8, 8]
    assert [r["sms_used"] for r in s["launches"]] == [4, 4, 4]
    assert [r["waves"] for r in s["launches"]] == [2, 2, 2]  # 8 CTAs, 4 SMs, one at a time
    assert s["session"]["name"] == "synth"


def test_summary_text_fits_80_columns(capture):
    r = run_cli("summary", capture)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    assert_fits(r.stdout)
    profile = load_profile(capture)
    for k in profile.kernels:
        for scope in k.scopes:
            if len(_intervals_of(profile, k.name, scope)):
                assert scope in r.stdout
    assert "Launches" in r.stdout and "time per scope" in r.stdout


def test_summary_text_shows_long_kernel_names_and_warnings_in_80_columns(captures, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, _ = call(capsys, "summary", captures["synth-two-kernels-dropped"])
    assert rc == 0
    assert_fits(out)
    assert "records dropped" in out
    assert LONG_NAME[:40] in out.replace("\n", "")


def test_summary_filters_sort_and_top_pass_through(captures, capsys):
    path = captures["synth-two-kernels-dropped"]
    rc, out, _ = call(capsys, "summary", path, "--json", "--kernel", "MATMUL")
    assert rc == 0
    s = json.loads(out)
    assert {r["kernel"] for r in s["scopes"]} == {"matmul_kernel"}
    assert {r["kernel"] for r in s["launches"]} == {"matmul_kernel"}
    rc, out, _ = call(capsys, "summary", path, "--json", "--scope", "inner")
    assert {r["scope"] for r in json.loads(out)["scopes"]} == {"inner"}
    rc, out, _ = call(capsys, "summary", path, "--json", "--sort", "mean", "--top", "2")
    s = json.loads(out)
    assert len(s["scopes"]) == 2 and s["scopes_total"] == 4  # 2 kernels x (outer, inner); epilogue dropped
    assert s["scopes"][0]["mean"] >= s["scopes"][1]["mean"]
    assert s["filters"] == {"kernel": None, "scope": None, "sort": "mean", "top": 2}
    rc, out, _ = call(capsys, "summary", path, "--top", "1")
    assert rc == 0 and "showing 1 of 4 scopes" in out


def test_summary_warns_about_a_capture_cut_off_after_a_launch(tmp_path, capsys):
    path = tmp_path / "cut.plraw"
    build_capture(path, launches=2)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 200])  # loses the END chunk and part of launch 1
    rc, out, err = call(capsys, "summary", path, "--json")
    assert rc == 0, err
    s = json.loads(out)
    assert s["session"]["launches"] == 1
    assert any(w["kind"] == "truncated" for w in s["warnings"])


def test_a_fault_reported_at_stop_is_shown_again_by_summary_and_trace(tmp_path, capsys):
    """The stop line scrolls away; the capture keeps what the session reported (END chunk)."""
    path = tmp_path / "fault.plraw"
    build_capture(path, launches=2)
    cap = read_raw(path)
    err_line = ("launch 2: cuEventSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS; 3 launch(es) from this one on "
                "were still on the GPU when it failed and were not saved")
    w = RawWriter(str(tmp_path / "f2.plraw"), dict(cap.session))
    for kid in sorted(cap.kernels):
        w.kernel(cap.kernels[kid])
    for la in cap.launches:
        w.launch(la.kernel_id, la.device, la.launch_index, la.grid, la.num_ctas, la.stream, la.host_time_ns, la.buffer)
    w.end({"launches": 5, "lost_launches": 3, "errors": [err_line], "unsized_launches": 2, "capped_launches": 1})
    w.close()
    rc, out, err = call(capsys, "summary", tmp_path / "f2.plraw", "--json")
    assert rc == 0, err
    warnings = json.loads(out)["warnings"]
    assert {"kind": "capture_error", "message": err_line} in warnings
    assert any(w["kind"] == "lost_launches" and w["lost_launches"] == 3 for w in warnings)
    assert any(w["kind"] == "unsized_launches" and w["unsized_launches"] == 2 for w in warnings)
    assert any(w["kind"] == "capped_launches" and "1 GiB" in w["message"] for w in warnings)
    rc, _, err = call(capsys, "trace", tmp_path / "f2.plraw", "-o", tmp_path / "f2.pftrace")
    assert rc == 0 and f"warning: the session reported: {err_line}" in err
    rc, out, _ = call(capsys, "summary", path, "--json")  # a clean capture: no such warning
    assert not [w for w in json.loads(out)["warnings"]
                if w["kind"] in ("capture_error", "lost_launches", "unsized_launches", "capped_launches")]


# ---------------------------------------------------------------------------------------------
# diff
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def before_after(tmp_path_factory):
    folder = tmp_path_factory.mktemp("diff")
    a, b = folder / "before.plraw", folder / "after.plraw"
    build_capture(a, name="before", inner=1500, seed=1)
    build_capture(b, name="after", inner=2250, seed=2)  # inner +50% in cycles
    return str(a), str(b)


def _mean_ns(path, scope):
    profile = load_profile(path)
    iv = _intervals_of(profile, "k", scope)
    return float((iv["end_ns"] - iv["start_ns"]).mean())


def test_diff_verdict_and_percentage_for_the_changed_scope(before_after, capsys):
    a, b = before_after
    rc, out, _ = call(capsys, "diff", a, b, "--json")
    assert rc == 0
    d = json.loads(out)
    rows = {r["scope"]: r for r in d["scopes"]}
    expected = 100 * (_mean_ns(b, "inner") - _mean_ns(a, "inner")) / _mean_ns(a, "inner")
    assert expected == pytest.approx(50, abs=1.5)  # built +50% in cycles, same clock
    assert rows["inner"]["verdict"] == "slower"
    assert rows["inner"]["delta_mean_pct"] == pytest.approx(expected)
    assert rows["epilogue"]["verdict"] == "no clear change"
    assert rows["outer"]["verdict"] == "slower"
    assert d["a"]["name"] == "before" and d["b"]["name"] == "after"

    rc, out, _ = call(capsys, "diff", b, a, "--json")
    rows = {r["scope"]: r for r in json.loads(out)["scopes"]}
    assert rows["inner"]["verdict"] == "faster"
    back = 100 * (_mean_ns(a, "inner") - _mean_ns(b, "inner")) / _mean_ns(b, "inner")
    assert rows["inner"]["delta_mean_pct"] == pytest.approx(back)


def test_diff_text_names_the_verdict_and_percentage_in_80_columns(before_after):
    a, b = before_after
    r = run_cli("diff", a, b)
    assert r.returncode == 0, r.stderr
    assert_fits(r.stdout)
    expected = 100 * (_mean_ns(b, "inner") - _mean_ns(a, "inner")) / _mean_ns(a, "inner")
    inner = [line for line in r.stdout.splitlines() if line.lstrip().startswith("inner ")]
    assert len(inner) == 1
    assert "slower" in inner[0] and fmt_pct(expected) in inner[0]
    shown = float(re.search(r"([+-]\d+\.\d)%", inner[0]).group(1))  # the first % is the change of the mean
    assert abs(shown - expected) <= 0.05
    epi = [line for line in r.stdout.splitlines() if line.lstrip().startswith("epilogue ")]
    assert "no clear change" in epi[0]


def test_diff_kernel_filter(captures, capsys):
    path = captures["synth-two-kernels-dropped"]
    rc, out, _ = call(capsys, "diff", path, path, "--json", "--kernel", "matmul")
    assert rc == 0
    d = json.loads(out)
    assert {r["kernel"] for r in d["kernels"]} == {"matmul_kernel"}


def test_diff_of_a_capture_with_itself_finds_no_change(capture, capsys):
    rc, out, _ = call(capsys, "diff", capture, capture, "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["scopes"], "no scope rows"
    for row in d["kernels"] + d["scopes"]:  # a kernel that lost records gets no verdict, not even "no change"
        assert row["verdict"] == ("incomplete" if row["incomplete"] else "no clear change"), row
        assert row["delta_mean_ns"] == 0
    rc, out, _ = call(capsys, "diff", capture, capture)
    assert rc == 0 and "+0.0%" in out
    assert "-0.0%" not in out and "slower" not in out and "faster" not in out


# ---------------------------------------------------------------------------------------------
# trace
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def fake_writer(monkeypatch):
    """Replace the trace writers: record what was asked, write a small marker file."""
    import proton_lite.trace as trace_mod
    calls = []

    def write_trace(profile, path, fmt, progress=None, layout="auto"):
        calls.append((str(path), fmt, len(profile.launches)))
        Path(path).write_bytes(f"fake {fmt}".encode())
        return {}

    monkeypatch.setattr(trace_mod, "write_trace", write_trace)
    monkeypatch.setattr(cli_view, "_check_writers", lambda formats: None)
    return calls


def test_trace_writes_next_to_the_capture_by_default(captures, tmp_path, capsys, fake_writer):
    src = tmp_path / "run.plraw"
    src.write_bytes(Path(captures["synth-timed"]).read_bytes())
    rc, out, err = call(capsys, "trace", src)
    assert rc == 0, err
    assert out.splitlines() == [str(tmp_path / "run.pftrace")]
    assert (tmp_path / "run.pftrace").read_bytes() == b"fake perfetto"
    assert fake_writer[0][1:] == ("perfetto", 3)
    assert sorted(os.listdir(tmp_path)) == ["run.pftrace", "run.plraw"]  # no .tmp left


def test_trace_formats_and_output_names(captures, tmp_path, capsys, fake_writer):
    src = captures["synth-timed"]
    rc, out, _ = call(capsys, "trace", src, "-o", tmp_path / "x", "--format", "perfetto", "chrome")
    assert rc == 0
    assert out.splitlines() == [str(tmp_path / "x.pftrace"), str(tmp_path / "x.json")]
    assert (tmp_path / "x.json").read_bytes() == b"fake chrome"
    # the extension of -o picks the format when --format is not given
    rc, out, _ = call(capsys, "trace", src, "-o", tmp_path / "y.json")
    assert out.splitlines() == [str(tmp_path / "y.json")] and fake_writer[-1][1] == "chrome"
    # an existing folder: NAME.pftrace inside it
    (tmp_path / "d").mkdir()
    rc, out, _ = call(capsys, "trace", src, "-o", tmp_path / "d")
    assert out.splitlines() == [str(tmp_path / "d" / "synth-timed.pftrace")]
    # a folder that does not exist is made, as for `-o out/`
    rc, out, err = call(capsys, "trace", src, "-o", tmp_path / "new" / "z.pftrace")
    assert rc == 0 and out.splitlines() == [str(tmp_path / "new" / "z.pftrace")], err


def test_trace_warns_about_dropped_records(captures, tmp_path, capsys, fake_writer):
    rc, out, err = call(capsys, "trace", captures["synth-two-kernels-dropped"], "-o", tmp_path / "t")
    assert rc == 0
    assert "records were dropped" in err and err.startswith("proton-lite: warning: ")
    # every unit of that capture tried 6 records (outer, inner, epilogue) into 4 slots
    assert "loop_capacity=6 (or capacity=6)" in err and "wrote 6 records" in err


def test_trace_of_a_trace_file_is_refused(tmp_path, capsys, fake_writer):
    f = tmp_path / "x.pftrace"
    f.write_bytes(b"\x0a\x00")
    rc, out, err = call(capsys, "trace", f)
    assert rc == 2
    assert_one_error_line(err, "already a trace", ".plraw")


def test_interrupted_trace_write_leaves_no_file(captures, tmp_path, capsys, monkeypatch):
    import proton_lite.trace as trace_mod

    def slow_writer(profile, path, fmt, layout="auto"):
        Path(path).write_bytes(b"half a trace")
        raise KeyboardInterrupt

    monkeypatch.setattr(trace_mod, "write_trace", slow_writer)
    monkeypatch.setattr(cli_view, "_check_writers", lambda formats: None)
    rc, out, err = call(capsys, "trace", captures["synth-timed"], "-o", tmp_path / "t")
    assert rc == 130
    assert err.strip() == "proton-lite: interrupted"
    assert os.listdir(tmp_path) == []


def test_interrupted_decode_exits_130(captures, capsys, monkeypatch):
    import proton_lite.pipeline as pipeline

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "load_profile", interrupted)
    rc, out, err = call(capsys, "summary", captures["synth-simple"])
    assert rc == 130 and out == ""
    assert err.strip().splitlines() == ["proton-lite: interrupted"]


def test_missing_writer_module_is_one_line(captures, tmp_path, capsys, monkeypatch):
    real_import = importlib.import_module

    def no_perfetto(name, *a):
        if name == "proton_lite.trace.perfetto":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, *a)

    monkeypatch.setattr(importlib, "import_module", no_perfetto)
    rc, out, err = call(capsys, "trace", captures["synth-simple"], "-o", tmp_path / "t")
    assert rc == 2
    assert_one_error_line(err, "proton_lite.trace.perfetto")
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt,ext", [("perfetto", ".pftrace"), ("chrome", ".json")])
def test_trace_with_the_real_writers_and_summary_reads_it_back(capture, tmp_path, fmt, ext):
    r = run_cli("trace", capture, "-o", tmp_path / "t", "--format", fmt)
    assert r.returncode == 0, r.stderr
    out = tmp_path / f"t{ext}"
    assert r.stdout.splitlines() == [str(out)]
    assert out.stat().st_size > 0
    from_raw = json.loads(run_cli("summary", capture, "--json").stdout)
    r = run_cli("summary", out, "--json")
    assert r.returncode == 0, r.stderr
    from_trace = json.loads(r.stdout)
    key = [(s["kernel"], s["scope"], s["count"], s["total"], s["cycles"]["total"]) for s in from_raw["scopes"]]
    assert [(s["kernel"], s["scope"], s["count"], s["total"], s["cycles"]["total"])
            for s in from_trace["scopes"]] == key
    assert [r["ctas"] for r in from_trace["launches"]] == [r["ctas"] for r in from_raw["launches"]]
    text = run_cli("summary", out)
    assert text.returncode == 0 and text.stderr == ""
    assert_fits(text.stdout)


def test_summary_of_a_trace_without_the_reader_says_what_is_missing(tmp_path, capsys, monkeypatch):
    """An install without the trace reader (a None entry in sys.modules makes its import fail
    as a missing module does) is one line naming what is missing, not a traceback."""
    monkeypatch.setitem(sys.modules, "proton_lite.trace.readback", None)
    f = tmp_path / "x.pftrace"
    f.write_bytes(b"\x0a\x00")
    rc, out, err = call(capsys, "summary", f)
    assert rc == 2
    assert_one_error_line(err, "proton_lite.trace")


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------

def _chunk_offsets(data: bytes) -> dict:
    """chunk type -> byte offsets of its chunks, walking the chunk headers."""
    out, offset = {}, FILE_HEADER.size
    while offset + CHUNK_HEADER.size <= len(data):
        kind, _, size = CHUNK_HEADER.unpack_from(data, offset)
        out.setdefault(kind, []).append(offset)
        offset += CHUNK_HEADER.size + size
    return out


def _bad_files(folder: Path, good: bytes) -> dict:
    """name -> (path, phrases the error line must contain)."""
    rng = np.random.default_rng(7)
    files = {}

    def put(name, data, *phrases):
        p = folder / name
        p.write_bytes(data)
        files[name] = (str(p), phrases)

    put("empty.plraw", b"", "empty")
    put("short.plraw", good[:10], "too short")
    # cut inside the session chunk: nothing readable
    put("cut-in-session.plraw", good[:FILE_HEADER.size + CHUNK_HEADER.size + 3], "session")
    # cut inside the first launch: a session and a kernel, but no launch at all
    first_launch = _chunk_offsets(good)[LAUNCH][0]
    put("cut-before-launch.plraw", good[:first_launch + 40], "cut off", "capture again")
    put("random.plraw", rng.bytes(4096), "not a proton-lite")
    put("random.bin", rng.bytes(4096), "not a proton-lite file")
    put("picture.png", b"\x89PNG\r\n\x1a\n" + rng.bytes(100), "not a proton-lite file")
    put("notes.txt", b"hello\n", "not a proton-lite file")
    future = bytearray(good)
    future[8:12] = (FORMAT_VERSION + 1).to_bytes(4, "little")
    put("future.plraw", bytes(future), "newer", "upgrade")
    flipped = bytearray(good)
    flipped[-100] ^= 0xFF  # inside the last launch's buffer: checksum mismatch
    put("corrupt.plraw", bytes(flipped), "corrupted")
    files["missing.plraw"] = (str(folder / "missing.plraw"), ("no such file",))
    (folder / "adir.plraw").mkdir()
    files["adir.plraw"] = (str(folder / "adir.plraw"), ("folder",))
    return files


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, captures):
    folder = tmp_path_factory.mktemp("bad")
    return _bad_files(folder, Path(captures["synth-timed"]).read_bytes())


BAD_NAMES = ["empty.plraw", "short.plraw", "cut-in-session.plraw", "cut-before-launch.plraw", "random.plraw",
             "random.bin", "picture.png", "notes.txt", "future.plraw", "corrupt.plraw", "missing.plraw",
             "adir.plraw"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_file_summary_subprocess_one_line_exit_2(bad_files, name):
    path, phrases = bad_files[name]
    r = run_cli("summary", path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    line = assert_one_error_line(r.stderr, *phrases)
    assert Path(path).name in line


FOREIGN = ("random.bin", "picture.png", "notes.txt")  # `open` serves any file but a capture as it is


@pytest.mark.parametrize("command", ["summary", "trace", "diff-a", "diff-b", "open"])
@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_file_every_command_exit_2_and_no_output_left(bad_files, captures, tmp_path, capsys, monkeypatch,
                                                          fake_writer, command, name):
    if command == "open" and name in FOREIGN:
        pytest.skip("open hands files that are not captures to Perfetto unchanged")
    path, phrases = bad_files[name]
    good = captures["synth-simple"]
    served = []
    monkeypatch.setattr(server_mod, "serve_file", lambda *a, **kw: served.append(a) or True)
    args = {"summary": ["summary", path], "trace": ["trace", path, "-o", tmp_path / "out"],
            "diff-a": ["diff", path, good], "diff-b": ["diff", good, path], "open": ["open", path]}[command]
    before = set(os.listdir(Path(path).parent)) if Path(path).parent.exists() else set()
    rc, out, err = call(capsys, *args)
    assert rc == 2
    assert_one_error_line(err, *phrases)
    assert os.listdir(tmp_path) == []  # no trace written for -o
    assert set(os.listdir(Path(path).parent)) == before  # nothing written beside the input
    assert not served


def test_argument_errors_are_one_line(capsys):
    for args, phrase in ([[], "choose a command"], [["summary"], "required"], [["bogus"], "invalid choice"],
                         [["summary", "x.plraw", "--sort", "fastest"], "--sort"],
                         [["summary", "x.plraw", "--top", "-3"], "--top"],
                         [["open", "x.pftrace", "--port", "70000"], "--port"],
                         [["compile", "k.py:k"], "--signature"]):
        rc, out, err = call(capsys, *args)
        assert rc == 2, args
        assert_one_error_line(err, phrase)


def test_help_has_an_example_for_every_command(capsys):
    for command in ("trace", "summary", "open", "compile", "diff"):
        with pytest.raises(SystemExit) as e:
            cli.main([command, "--help"])
        assert e.value.code == 0
        out = capsys.readouterr().out
        assert "example:" in out and f"proton-lite {command} " in out.split("example:")[1]


def test_python_dash_m_proton_lite_and_version():
    r = subprocess.run([sys.executable, "-m", "proton_lite", "--version"], env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "proton-lite 0.1.0"
    r = subprocess.run([sys.executable, "-m", "proton_lite", "summary", "/no/such.plraw"], env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert_one_error_line(r.stderr, "no such file")


# ---------------------------------------------------------------------------------------------
# open
# ---------------------------------------------------------------------------------------------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _interruptible():
    """Ctrl-C as at a terminal. A test run started in the background (a CI runner without job
    control, nohup) ignores SIGINT, and so would every process it starts: a program that
    starts with SIGINT ignored rightly keeps ignoring it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start_open(path, *extra):
    proc = subprocess.Popen([sys.executable, "-m", "proton_lite.viewer.cli", "open", str(path), "--no-browser",
                             *map(str, extra)], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_interruptible)
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Open "):
            return proc, lines
    proc.kill()
    out, err = proc.communicate()
    pytest.fail(f"no URL printed: {lines} {out} {err}")


def test_open_prints_the_url_serves_the_file_and_exits_0(tmp_path):
    trace = tmp_path / "my run.pftrace"
    trace.write_bytes(b"\x0a\x02hi" * 100)
    proc, lines = _start_open(trace, "--port", 0, "--timeout", 60)
    try:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/(\S+)", lines[0])
        assert m, lines
        port, name = int(m.group(1)), m.group(2)
        assert name == "my%20run.pftrace"
        assert "url=http://127.0.0.1:%d/my%%20run.pftrace" % port in lines[-1]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/" + name)
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read() == trace.read_bytes()
        conn.close()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Trace sent" in out and err == ""


def test_open_not_fetched_in_time_exits_1(tmp_path):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"\x0a\x00")  # one empty packet: a well-formed trace
    r = run_cli("open", trace, "--no-browser", "--port", 0, "--timeout", 0.3)
    assert r.returncode == 1
    assert "Nobody fetched" in r.stdout and r.stderr == ""


def test_open_on_a_busy_port_is_one_line(tmp_path):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"\x0a\x00")  # one empty packet: a well-formed trace
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = run_cli("open", trace, "--no-browser", "--port", s.getsockname()[1], "--timeout", 5)
    assert r.returncode == 2
    assert_one_error_line(r.stderr, "already in use")


def test_open_ctrl_c_exits_130_with_one_line(tmp_path):
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"\x0a\x00")  # one empty packet: a well-formed trace
    proc, _ = _start_open(trace, "--port", _free_port(), "--timeout", 60)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["proton-lite: interrupted"]


def test_open_converts_a_capture_first(captures, tmp_path, capsys, monkeypatch, fake_writer):
    src = tmp_path / "cap.plraw"
    src.write_bytes(Path(captures["synth-simple"]).read_bytes())
    served = []

    def serve(path, **kw):
        served.append((path, kw))
        return True

    monkeypatch.setattr(server_mod, "serve_file", serve)
    rc, out, err = call(capsys, "open", src, "--no-browser", "--port", "0", "--offline", "--timeout", "7")
    assert rc == 0, err
    assert out.splitlines() == [f"wrote {tmp_path / 'cap.pftrace'}"]
    assert served == [(str(tmp_path / "cap.pftrace"),
                       {"port": 0, "timeout": 7.0, "open_browser": False, "offline": True})]


def test_open_offline_without_a_ui_build_is_one_line(tmp_path, capsys, monkeypatch):
    def no_ui():
        raise server_mod.OfflineUIError("offline viewing needs a local Perfetto UI build and none is installed")

    monkeypatch.setattr(server_mod, "find_offline_ui", no_ui)
    trace = tmp_path / "t.pftrace"
    trace.write_bytes(b"\x0a\x00")  # one empty packet: a well-formed trace
    rc, out, err = call(capsys, "open", trace, "--offline", "--no-browser", "--port", "0")
    assert rc == 2
    assert_one_error_line(err, "offline", "--offline")


# ---------------------------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------------------------

def _compile_args(case):
    kernel, constexprs, num_warps, _, _ = CASES[case]
    args = ["compile", f"{KERNELS_PY}:{kernel.__name__}", "--signature", ",".join(signature(kernel).values()),
            "--num-warps", num_warps]
    for k, v in constexprs.items():
        args += ["--constexpr", f"{k}={v}"]
    return args


@pytest.mark.parametrize("case", list(CASES))
def test_compile_report_matches_the_kernel(case, capsys):
    _, constexprs, num_warps, sites, scopes = CASES[case]
    rc, out, err = call(capsys, *_compile_args(case), "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert [s["name"] for s in r["scopes"]] == scopes
    assert [s["id"] for s in r["scopes"]] == list(range(len(scopes)))
    assert r["record_sites"] == sites
    assert sum(s["enter_sites"] + s["exit_sites"] for s in r["scopes"]) == sites
    for s in r["scopes"]:
        assert s["enter_sites"] == s["exit_sites"] >= 1
    assert r["num_warps"] == num_warps and r["units_per_cta"] == num_warps
    cap = r["capacity"]
    # global unit blocks (global staging, or shared staging copied in blocks): two slots past the capacity
    assert r["sink_slots"] == (2 if r["staging"] == "global" or r["flush_slots"] else 0)
    assert r["buffer_bytes_per_cta"] == CTA_HEADER_BYTES + num_warps * (UNIT_HEADER_BYTES +
                                                                        (cap + r["sink_slots"]) * RECORD_BYTES)
    if r["sized_at_launch"]:  # a loop bounded by an argument: sized per launch, records staged in blocks
        # where they are sparse in the loop (the K loop's), else stored to global memory (a tight loop)
        assert (r["staging"], r["flush_slots"]) == {"matmul_per_iter": ("shared", 64), "loop_scopes": ("global", 0)}[case]
        assert r["shared_staging_bytes"] == (num_warps * (64 + 2) * RECORD_BYTES if r["flush_slots"] else 0)
        assert r["records_per_unit"]["from_arguments"] == {"loop_scopes": ["n_iter"], "matmul_per_iter": ["K"]}[case]
    else:
        assert r["shared_staging_bytes"] == num_warps * ((cap + 3) // 2 * 2) * RECORD_BYTES  # + 2 sink slots, even
        assert r["records_per_unit"]["from_arguments"] is None
    if r["loop_record_sites"]:
        assert r["records_per_unit"]["exact"] is None
        assert r["records_per_unit"]["outside_loops"] == sites - r["loop_record_sites"]
        at_most = r["records_per_unit"]["at_most"]
        assert cap == (256 if at_most is None else at_most)
        assert (at_most is not None) == (case == "const_loop")
    else:
        assert r["records_per_unit"]["exact"] == sites == cap


def test_compile_reports_where_a_loop_kernel_without_scopes_keeps_its_start(capsys, monkeypatch):
    """Pass 22: a scope-less kernel with a loop (a grid-stride loop of tiles) writes its CTA
    header at exit from what thread 0 kept (the timer from bit 5), and the report says so and
    how long a CTA may live for it; ``PROTON_LITE_LOOP_START=entry`` puts it back at entry."""
    from proton_lite.passes import ptx_lifetimes
    args = ["compile", f"{Path(KERNELS_PY).parent / 'fixed_cost_kernels.py'}:tile_gelu_loop", "--signature",
            "*fp32,*fp32,*fp32,i32,i32,i32", "--num-warps", "4", "--constexpr", "TILE=256"]
    rc, out, err = call(capsys, *args, "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert (r["cta_header"], r["loop_start"], r["capacity"]) == ("exit", "gt5", 0)
    monkeypatch.setenv("COLUMNS", "400")  # one line per row
    rc, out, _ = call(capsys, *args)
    assert "keeps it across the loops" in out and "137 s" in out
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", "entry")
    r = json.loads(call(capsys, *args, "--json")[1])
    assert (r["cta_header"], r["loop_start"]) == ("entry", None)


def test_compile_per_scope_sites_of_a_helper_called_twice(capsys):
    rc, out, _ = call(capsys, *_compile_args("helper_twice"), "--json")
    r = json.loads(out)
    assert r["scopes"] == [{"id": 0, "name": "load_tile", "enter_sites": 2, "exit_sites": 2}]


def test_compile_text_report_in_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, _ = call(capsys, *_compile_args("matmul_per_iter"), "--granularity", "warpgroup")
    assert rc == 0
    assert_fits(out)
    assert re.search(r"^\s*0\s+mainloop\s+1\s+1\s*$", out, re.M)
    assert re.search(r"^\s*1\s+iteration\s+1\s+1\s*$", out, re.M)
    assert "records per warp group" in out and "≥ 4" in out and "capacity 256" in out
    assert "one record stream per warp group (2 per CTA)" in out
    rc, out, _ = call(capsys, *_compile_args("vector_add"))
    assert re.search(r"records per warp\s+4 \(no record site inside a loop\)", out)
    assert re.search(r"buffer per CTA\s+256 bytes", out)  # 32 + 4 x (24 + 4 x 8)
    assert re.search(r"shared staging\s+192 bytes", out)  # 4 x (4 records + sink slot, even) x 8


def test_compile_emit_writes_stripped_ptx_and_a_cubin(tmp_path, capsys):
    rc, out, err = call(capsys, *_compile_args("vector_add"), "--emit", "ptx", tmp_path / "out",
                        "--emit", "cubin", tmp_path / "out", "--emit", "ttgir", tmp_path / "ir")
    assert rc == 0, err
    ptx = (tmp_path / "out" / "vector_add.ptx").read_text()
    assert "@@proton_lite" not in ptx
    assert "globaltimer" in ptx and "clock64" in ptx
    assert ptx.count("// proton_lite: record") == 4
    assert (tmp_path / "out" / "vector_add.cubin").read_bytes()[:4] == b"\x7fELF"
    assert "tt.func" in (tmp_path / "ir" / "vector_add.ttgir").read_text()
    assert f"wrote {tmp_path / 'out' / 'vector_add.ptx'}" in out
    assert sorted(os.listdir(tmp_path / "out")) == ["vector_add.cubin", "vector_add.ptx"]


def test_compile_named_signature_and_constexpr_parsing(capsys):
    assert cli.parse_value("1024") == 1024 and cli.parse_value("0.5") == 0.5
    assert cli.parse_value("true") is True and cli.parse_value("False") is False
    assert cli.parse_value("'x'") == "x" and cli.parse_value("ieee") == "ieee"
    rc, out, err = call(capsys, "compile", f"{KERNELS_PY}:vector_add", "--signature",
                        "n:i32,x_ptr:*fp32,out_ptr:*fp32,y_ptr:*fp32", "--constexpr", "BLOCK=256", "--json")
    assert rc == 0, err
    assert json.loads(out)["record_sites"] == 4


@pytest.mark.parametrize("args,phrases", [
    ([f"{KERNELS_PY}:no_such_kernel", "--signature", "i32"], ["no kernel named 'no_such_kernel'", "vector_add"]),
    ([f"{KERNELS_PY}:signature", "--signature", "i32"], ["not a @triton.jit function"]),
    ([KERNELS_PY, "--signature", "i32"], ["FILE.py:KERNEL"]),
    ([f"{KERNELS_PY}:vector_add", "--signature", "*fp32,i32", "--constexpr", "BLOCK=64"],
     ["2 type(s)", "x_ptr, y_ptr, out_ptr, n"]),
    ([f"{KERNELS_PY}:vector_add", "--signature", "*fp32,*fp32,*fp32,int", "--constexpr", "BLOCK=64"],
     ["'int'", "not a Triton type"]),
    ([f"{KERNELS_PY}:vector_add", "--signature", "*fp32,*fp32,*fp32,i32"], ["--constexpr BLOCK=VALUE"]),
    ([f"{KERNELS_PY}:vector_add", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=64",
      "--constexpr", "WIDTH=2"], ["no argument 'WIDTH'"]),
    ([f"{KERNELS_PY}:vector_add", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=1000"],
     ["Triton could not compile", "power of 2"]),
    ([f"{KERNELS_PY}:vector_add", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=64",
      "--num-warps", "2", "--granularity", "warpgroup"], ["num_warps divisible by 4"]),
    ([f"{KERNELS_PY}:vector_add", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=64",
      "--num-warps", "3"], ["power of two"]),
    ([f"{KERNELS_PY}:vector_add", "--signature", "*fp32,*fp32,*fp32,i32", "--constexpr", "BLOCK=64",
      "--emit", "hsaco", "out"], ["--emit hsaco", "unknown kind"]),
    (["/no/such/file.py:k", "--signature", "i32"], ["no such file"]),
])
def test_compile_bad_input_is_one_line(args, phrases, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = call(capsys, "compile", *args)
    assert rc == 2 and out == ""
    assert_one_error_line(err, *phrases)
    assert os.listdir(tmp_path) == []


def test_compile_file_that_fails_to_import_subprocess(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("import triton\n\nraise RuntimeError('boom in user code')\n")
    r = run_cli("compile", f"{bad}:k", "--signature", "i32")
    assert r.returncode == 2 and r.stdout == ""
    assert_one_error_line(r.stderr, "broken.py", "line 3", "boom in user code")
    syntax = tmp_path / "syntax.py"
    syntax.write_text("def f(:\n")
    r = run_cli("compile", f"{syntax}:k", "--signature", "i32")
    assert r.returncode == 2
    assert_one_error_line(r.stderr, "SyntaxError", "line 1")


def test_compile_subprocess_end_to_end(tmp_path):
    r = run_cli(*_compile_args("loop_scopes"), "--emit", "ptx", tmp_path)
    assert r.returncode == 0, r.stderr
    assert_fits(r.stdout)
    assert "step" in r.stdout and "≥ 0, + 2 per loop iteration" in r.stdout
    assert "@@proton_lite" not in (tmp_path / "loop_scopes.ptx").read_text()


def test_cli_trace_formats_agree_with_the_trace_package():
    from proton_lite.trace import EXTENSIONS, FORMATS
    assert cli.TRACE_FORMATS == EXTENSIONS and tuple(cli.TRACE_FORMATS) == FORMATS


def test_trace_output_folders_are_created_as_the_help_example_writes_them(tmp_path, capsys):
    src = os.path.join(os.path.dirname(__file__), "data", "softmax.plraw")
    rc, out, err = call(capsys, "trace", src, "-o", str(tmp_path / "out") + os.sep, "--format", "perfetto", "chrome")
    assert rc == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["softmax.json", "softmax.pftrace"]
    rc, out, err = call(capsys, "trace", src, "-o", str(tmp_path / "a" / "b" / "run"))
    assert rc == 0 and (tmp_path / "a" / "b" / "run.pftrace").exists(), err
    (tmp_path / "file").write_text("")
    rc, out, err = call(capsys, "trace", src, "-o", str(tmp_path / "file" / "x") + os.sep)
    assert rc == 2 and "cannot create the folder" in err and "choose another -o" in err


def test_compile_errors_point_at_the_line_of_the_file(tmp_path, capsys):
    src = tmp_path / "bad_scope.py"
    src.write_text("import triton\nimport triton.language as tl\nimport proton_lite.language as pl\n\n\n"
                   "# the kernel\n@triton.jit\ndef k(x_ptr, BLOCK: tl.constexpr):\n"
                   "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
                   "    pl.enter_scope('a')\n"  # line 10 of the file, line 3 of the function
                   "    tl.store(x_ptr + offs, tl.load(x_ptr + offs))\n")
    rc, out, err = call(capsys, "compile", f"{src}:k", "--signature", "*fp32", "--constexpr", "BLOCK=128")
    assert rc == 2 and err.startswith(f"proton-lite: error: {src}:10: k: Triton could not compile it: fix: "), err
    assert err.count("fix") == 1 and err.count(str(src)) == 1, err


def test_open_warns_about_a_damaged_trace_and_still_serves_it(tmp_path, capsys, monkeypatch):
    served = []
    monkeypatch.setattr(server_mod, "serve_file", lambda path, **kw: served.append(path) or True)
    src = os.path.join(os.path.dirname(__file__), "data", "softmax.plraw")
    assert call(capsys, "trace", src, "-o", str(tmp_path / "whole"), "--format", "perfetto", "chrome")[0] == 0
    whole = (tmp_path / "whole.pftrace").read_bytes()
    (tmp_path / "cut.pftrace").write_bytes(whole[:len(whole) // 2])
    (tmp_path / "text.pftrace").write_text("hello")
    (tmp_path / "bad.json").write_text("hello")
    for name, phrase in (("cut.pftrace", "bytes past the end of the file (truncated)"),
                         ("text.pftrace", "byte 0x68 at offset 0 starts no packet"), ("bad.json", "not JSON")):
        rc, out, err = call(capsys, "open", str(tmp_path / name), "--no-browser")
        assert rc == 0 and served[-1].endswith(name)
        assert err.startswith(f"proton-lite: warning: {tmp_path / name} does not look like a whole trace (") and \
            phrase in err, err
    for name in ("whole.pftrace", "whole.json"):
        rc, out, err = call(capsys, "open", str(tmp_path / name), "--no-browser")
        assert rc == 0 and "warning" not in err, err


def test_compile_reads_the_example_without_torch_and_names_a_missing_module(tmp_path, capsys):
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "matmul.py"
    rc, out, err = call(capsys, "compile", f"{example}:matmul_kernel", "--signature",
                        "*fp16,*fp16,*fp16," + ",".join(["i32"] * 9), "--constexpr", "BM=128", "--constexpr", "BN=128",
                        "--constexpr", "BK=64", "--num-warps", "8")
    assert rc == 0 and "mainloop" in out and "epilogue" in out, err
    src = tmp_path / "needs.py"
    src.write_text("import triton\nimport no_such_module_here\n")
    rc, out, err = call(capsys, "compile", f"{src}:k", "--signature", "i32")
    assert rc == 2 and "needs the module 'no_such_module_here' at line 2, which is not installed here" in err, err


def test_compile_reports_a_scope_less_kernel_s_lifetime_block(capsys, monkeypatch):
    """A kernel without scopes or loops compiled as a session builds it: one 32-byte lifetime
    block per CTA (format.md 1.2a), which the report names instead of a capacity."""
    monkeypatch.setenv("COLUMNS", "100")
    from kernels import vector_add_plain
    args = ["compile", f"{KERNELS_PY}:vector_add_plain", "--signature",
            ",".join(signature(vector_add_plain).values()), "--num-warps", "4", "--constexpr", "BLOCK=1024"]
    rc, out, err = call(capsys, *args, "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["lifetime_block"] is True and r["buffer_bytes_per_cta"] == 32 and r["record_sites"] == 0
    rc, out, _ = call(capsys, *args)
    assert rc == 0 and re.search(r"buffer per CTA\s+32 bytes: one lifetime block", out)
