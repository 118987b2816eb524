"""`proton_lite.load`: a capture or a trace as tables and statistics (issue 27's notebook API),
on the real H100 captures in docs/examples and tests/data, checked against numbers computed
here from the raw arrays."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import proton_lite
from proton_lite.trace import write_trace

ROOT = Path(__file__).resolve().parent.parent
MATMUL = ROOT / "docs" / "examples" / "matmul.plraw"


def test_load_gives_the_tables_and_statistics_of_a_capture():
    p = proton_lite.load(MATMUL)
    assert p.kernels == ["matmul_kernel"] and p.scope_names(0) == ["mainloop", "epilogue"]
    assert len(p.launches) == 3 and len(p.ctas) == 3 * 256 and len(p.intervals) == 3 * 256 * 8 * 2
    stats = {s["scope"]: s for s in p.scope_stats()}
    for sid, name in enumerate(p.scope_names("matmul_kernel")):
        dur = (p.intervals["end_ns"] - p.intervals["start_ns"])[p.intervals["scope"] == sid].astype(np.int64)
        assert stats[name]["count"] == len(dur) and stats[name]["total"] == int(dur.sum())
        assert stats[name]["p99"] == pytest.approx(float(np.percentile(dur, 99)))
    assert [r["launch"] for r in p.launch_stats()] == p.launches["launch"].tolist()
    assert sum(r["ctas"] for r in p.sm_stats()) == len(p.ctas)
    assert p.warnings == [] and p.scope_stats("nope") == []


def test_slowest_ctas_are_the_longest_lived_of_that_launch():
    p = proton_lite.load(MATMUL)
    launch = int(p.launches["launch"][1])
    top = p.slowest_ctas(launch, 4)
    life = lambda a: (a["end_ns"] - a["start_ns"]).astype(np.int64)  # noqa: E731
    mine = p.ctas[p.ctas["launch"] == launch]
    assert (top["launch"] == launch).all() and len(top) == 4
    assert life(top).tolist() == sorted(life(mine).tolist(), reverse=True)[:4]


def test_a_trace_loads_to_the_same_tables(tmp_path):
    raw = proton_lite.load(MATMUL)
    write_trace(raw.profile, tmp_path / "m.pftrace", "perfetto")
    tr = proton_lite.load(tmp_path / "m.pftrace")
    assert len(tr.intervals) == len(raw.intervals) and len(tr.ctas) == len(raw.ctas)
    assert [(s["scope"], s["count"], s["total"]) for s in tr.scope_stats()] == \
        [(s["scope"], s["count"], s["total"]) for s in raw.scope_stats()]


def test_load_of_a_missing_file_and_unknown_tables_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="proton_lite.load: .*nope.plraw: no such file"):
        proton_lite.load(tmp_path / "nope.plraw")
    p = proton_lite.load(MATMUL)
    with pytest.raises(ValueError, match="unknown table 'slices'; tables: launches, ctas, intervals"):
        p.to_pandas("slices")
    monkeypatch.setitem(sys.modules, "pandas", None)  # as where pandas is not installed
    with pytest.raises(ImportError, match=r"to_pandas needs pandas.*numpy structured arrays as they are"):
        p.to_pandas("intervals")


def test_to_pandas_names_kernels_and_scopes():
    pd = pytest.importorskip("pandas")
    p = proton_lite.load(ROOT / "tests" / "data" / "nested.plraw")
    df = p.to_pandas("intervals")
    assert isinstance(df, pd.DataFrame) and len(df) == len(p.intervals)
    names = p.scope_names(0)
    assert (df["scope_name"] == [names[s] for s in p.intervals["scope"]]).all()
    assert set(df["kernel_name"]) == set(p.kernels)


def test_sql_without_a_trace_processor_binary_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PROTON_LITE_TRACE_PROCESSOR", str(tmp_path / "no_such_binary"))
    p = proton_lite.load(MATMUL)
    with pytest.raises(FileNotFoundError, match="PROTON_LITE_TRACE_PROCESSOR=.*no_such_binary: no such file"):
        p.sql("select count(*) from slice")
    assert not (MATMUL.parent / "matmul.pftrace").exists()  # nothing written beside the capture


def test_the_notebook_example_runs_on_the_shipped_capture():
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "analyze.py")], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert out.count("matmul_kernel: ") == 3 and "CTA " in out and "tail: " in out and "mainloop" in out


def test_several_captures_load_as_one_profile_on_one_axis(tmp_path):
    import shutil
    loops = ROOT / "tests" / "data" / "loop_scopes.plraw"
    both = proton_lite.load([MATMUL, loops])
    assert len(both.launches) == 3 + 1 and both.kernels == ["matmul_kernel", "loop_scopes"]
    assert both.profile.session["alignment"].startswith("GPU timers as they read")
    aligned = proton_lite.load([MATMUL, MATMUL], align_on="matmul_kernel")
    assert aligned.profile.session["alignment"] == "kernel matmul_kernel: first launches together"
    assert aligned.launches["start_ns"][0] == aligned.launches["start_ns"][3]
    (tmp_path / "job").mkdir()
    for rank, src in enumerate((MATMUL, loops)):
        shutil.copy(src, tmp_path / "job" / f"rank{rank}.plraw")
    folder = proton_lite.load(tmp_path / "job")
    assert len(folder.launches) == 4 and folder.path == str(tmp_path / "job")
    with pytest.raises(FileNotFoundError, match="no .plraw capture in this folder"):
        proton_lite.load(tmp_path)
    with pytest.raises(ValueError, match="an empty list of captures"):
        proton_lite.load([])
