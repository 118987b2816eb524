"""`proton-lite trace --launch / --window / --kernel`: a trace of part of a capture, on real H100
captures, written by the real writer and read back."""
import shutil
from pathlib import Path

import numpy as np
import pytest

from proton_lite.decode import decode
from proton_lite.profile_cut import cut, parse_launches, parse_window
from proton_lite.raw_format import read_raw
from proton_lite.trace import load_trace
from proton_lite.viewer import cli, cli_view

ROOT = Path(__file__).resolve().parent.parent
MATMUL = ROOT / "docs" / "examples" / "matmul.plraw"  # 3 launches
SOFTMAX = ROOT / "tests" / "data" / "softmax.plraw"  # 256 CTAs


def _run(capsys, *args):
    rc = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_parsing_names_the_fix():
    assert parse_launches(["3", "5-7", "9,10"]) == {3, 5, 6, 7, 9, 10}
    assert parse_window("1200:3400") == (1200.0, 3400.0) and parse_window("5:") == (5.0, None)
    for bad in ("x", "7-5", "-3"):
        with pytest.raises(ValueError, match="--launch"):
            parse_launches([bad])
    for bad in (":", "3400:1200", "a:b", ""):
        with pytest.raises(ValueError, match="--window .*START:END"):
            parse_window(bad)


def test_a_trace_of_one_launch(tmp_path, capsys):
    src = tmp_path / "matmul.plraw"
    shutil.copy(MATMUL, src)
    whole = decode(read_raw(src))
    assert len(whole.launches) == 3
    rc, out, err = _run(capsys, "trace", src, "--launch", "1", "-o", tmp_path / "one")
    assert rc == 0, err
    back = load_trace(out.strip())
    assert back.launches["launch"].tolist() == [1]
    expect = whole.ctas[whole.ctas["launch"] == 1]
    assert sorted(back.ctas["cta"].tolist()) == sorted(expect["cta"].tolist())
    assert len(back.intervals) == int((whole.intervals["launch"] == 1).sum())
    assert "kept 1 of 3 launches" in err


def test_a_window_keeps_exactly_what_overlaps_it_whole(tmp_path):
    whole = decode(read_raw(SOFTMAX))
    lo = int(np.sort(whole.ctas["end_ns"])[len(whole.ctas) // 4]) + 1  # a quarter of the CTAs ended before
    hi = int(whole.ctas["end_ns"].max())
    part = cut(whole, window_us=(lo / 1000, hi / 1000))
    overlap = (whole.ctas["end_ns"] >= lo) & (whole.ctas["start_ns"] <= hi)
    assert 0 < len(part.ctas) == int(overlap.sum()) < len(whole.ctas)
    assert set(part.ctas["cta"].tolist()) == set(whole.ctas["cta"][overlap].tolist())
    # kept whole: the same start and end as before the cut
    before = {int(c["cta"]): (int(c["start_ns"]), int(c["end_ns"])) for c in whole.ctas}
    assert all(before[int(c["cta"])] == (int(c["start_ns"]), int(c["end_ns"])) for c in part.ctas)
    assert set(part.intervals["cta"].tolist()) <= set(part.ctas["cta"].tolist())
    assert np.all(part.intervals["end_ns"] >= lo) and np.all(part.intervals["start_ns"] <= hi)
    assert 0 < len(part.intervals) < len(whole.intervals)
    assert part.session["cut"]["of_ctas"] == len(whole.ctas)


def test_a_cut_that_keeps_nothing_says_what_there_is(tmp_path, capsys):
    rc, out, err = _run(capsys, "trace", SOFTMAX, "--launch", "7", "-o", tmp_path / "none")
    assert rc == 2 and "nothing left after the cut: the capture has launches 0 over 0 to" in err
    assert not list(tmp_path.iterdir())
    rc, out, err = _run(capsys, "trace", SOFTMAX, "--window", "9:3")
    assert rc == 2 and "--window '9:3'" in err


def test_a_trace_too_large_for_the_browser_suggests_a_cut(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli_view, "TOO_LARGE_FOR_THE_UI", 100)
    rc, out, err = _run(capsys, "trace", SOFTMAX, "-o", tmp_path / "big")
    assert rc == 0 and "works up to a few GB; cut it with --launch N or --window" in err


def test_the_summary_of_a_cut_trace_says_it_is_a_part(tmp_path, capsys):
    src = tmp_path / "matmul.plraw"
    shutil.copy(MATMUL, src)
    rc, out, err = _run(capsys, "trace", src, "--launch", "0-1", "-o", tmp_path / "two")
    assert rc == 0, err
    rc, out, err = _run(capsys, "summary", out.strip(), "--json")
    warnings = [w for w in __import__("json").loads(out)["warnings"] if w["kind"] == "cut"]
    assert rc == 0 and len(warnings) == 1
    assert warnings[0]["message"].startswith("a part of the capture: 2 of 3 launches (proton-lite trace")


def test_kernel_keeps_one_kernel_s_launches_and_names_them_all_when_none_matches(tmp_path, capsys):
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
    from decode_speed import WARPS, Capture, _tags, loop_tags
    from proton_lite.layout import BufferLayout
    raw = tmp_path / "steps.plraw"
    c = Capture(str(raw))
    for _ in range(3):  # two kernels alternating, as in the steps of a program
        c.launch("vector_add", ["load", "store"], BufferLayout("warp", WARPS, 4, "shared"), 64,
                 _tags([(0, False), (0, True), (1, False), (1, True)]))
        c.launch("looped", ["outer", "load", "compute"], BufferLayout("warp", WARPS, 64, "shared"), 66,
                 loop_tags(15), loop_tags(64))
    c.close()
    rc, out, err = _run(capsys, "trace", raw, "--kernel", "LOOP", "-o", tmp_path / "looped")
    assert rc == 0, err
    back = load_trace(out.strip())
    assert back.launches["launch"].tolist() == [1, 3, 5] and {k.name for k in back.kernels} >= {"looped"}
    assert {back.kernels[k].name for k in back.launches["kernel"]} == {"looped"}
    rc, out, err = _run(capsys, "trace", raw, "--kernel", "looped", "--launch", "0-3", "-o", tmp_path / "both")
    assert rc == 0 and load_trace(out.strip()).launches["launch"].tolist() == [1, 3]
    rc, out, err = _run(capsys, "trace", raw, "--kernel", "softmax")
    assert rc == 2 and "--kernel 'softmax': no launch" in err and "looped, vector_add" in err
