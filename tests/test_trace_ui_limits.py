"""A trace with more tracks than Perfetto's UI draws in good time is named, with a cut that
works: 1,024 launches of 64 CTAs (decode_speed.py's ``small`` capture, built to the documented
byte layout) give ~400,000 tracks written a group per launch (``--layout launch``; the default
shares the SM rows and stays small, tests/test_trace_layout.py); the suggested ``--launch``
range writes a trace under the limit; a small capture gets no warning."""
import os
import re

import numpy as np
import sys
from types import SimpleNamespace

from proton_lite.pipeline import load_profile
from proton_lite.profile_cut import cut, parse_launches
from proton_lite.session_result import SessionResult, _summary_line
from proton_lite.trace import write_trace
from proton_lite.trace.ui_limits import TRACKS_FOR_THE_UI, crowded_trace_warning, track_count
from viewer import cli

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "benchmarks"))
from decode_speed import build_capture  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "docs", "examples", "matmul.plraw")


def test_many_small_launches_are_named_with_a_launch_range_that_fits(tmp_path, capsys):
    raw = str(tmp_path / "steps.plraw")
    build_capture(raw, "small")  # 1,024 launches x 64 CTAs x 4 warps
    assert cli.main(["trace", raw, "-o", str(tmp_path / "all"), "--format", "perfetto", "chrome"]) == 0
    err = capsys.readouterr().err  # auto: SM rows shared, no warning; one note says so and how to get the other tree
    assert "warning" not in err and err.count("note:") == 1, err
    assert "all.pftrace: 1,024 launches share each SM's rows" in err and f"trace {raw} --layout launch" in err
    assert cli.main(["trace", raw, "-o", str(tmp_path / "all"), "--layout", "sm"]) == 0
    assert capsys.readouterr().err == ""  # asked for: nothing to say
    assert cli.main(["trace", raw, "-o", str(tmp_path / "all"), "--layout", "launch"]) == 0
    err = capsys.readouterr().err
    m = re.search(r"warning: \S+all\.pftrace has ([\d,]+) tracks \(1,024 launches: .*--layout sm .*"
                  r"--launch (\d+)-(\d+) ", err)
    assert m, err
    tracks, first, last = int(m.group(1).replace(",", "")), int(m.group(2)), int(m.group(3))
    assert tracks > 5 * TRACKS_FOR_THE_UI and first == 0 and 1 <= last < 1023
    profile = load_profile(raw)
    part = cut(profile, launches=parse_launches([f"{first}-{last}"]))
    stats = write_trace(part, tmp_path / "part.pftrace", "perfetto", layout="launch")
    assert TRACKS_FOR_THE_UI // 2 < track_count(stats) <= TRACKS_FOR_THE_UI  # the cut fits, and is not tiny
    assert crowded_trace_warning(stats, part.launches, raw) is None
    chrome = write_trace(part, tmp_path / "part.json", "chrome", layout="launch")  # the JSON's processes and threads
    assert 0 < track_count(chrome) <= track_count(stats) + len(part.launches)


def test_a_small_trace_gets_no_warning(tmp_path, capsys):
    raw = tmp_path / "matmul.plraw"
    raw.write_bytes(open(EXAMPLE, "rb").read())
    assert cli.main(["trace", str(raw)]) == 0
    assert "tracks" not in capsys.readouterr().err


def test_the_stop_line_carries_the_writer_s_warning(tmp_path):
    result = SessionResult(str(tmp_path / "s.plraw"), launches=2000, records=10)
    crowded = "s.pftrace has 400,000 tracks (2,000 launches: ...)"
    lines = _summary_line(result, SimpleNamespace(skipped_autotune=0, unattributed=0), trace_warnings=[crowded])
    assert lines.split("\n")[1:] == ["proton_lite: warning: " + crowded]


def test_the_stop_line_carries_the_layout_note(tmp_path):
    result = SessionResult(str(tmp_path / "s.plraw"), launches=2000, records=10)
    note = "s.pftrace: 2,000 launches share each SM's rows (...)"
    lines = _summary_line(result, SimpleNamespace(skipped_autotune=0, unattributed=0), trace_notes=[note])
    assert lines.split("\n")[1:] == ["proton_lite: note: " + note]
    assert result.warnings == []  # a note, not a warning


def test_one_launch_too_large_alone_is_told_to_cut_by_time():
    launches = np.zeros(3, [("launch", np.int64)])
    launches["launch"] = [0, 1, 2]
    line = crowded_trace_warning({"tracks": 3 * (TRACKS_FOR_THE_UI + 10), "path": "big.pftrace"}, launches, "big.plraw")
    assert "--launch" not in line and "proton-lite trace big.plraw --kernel NAME" in line and "--window" in line
    assert crowded_trace_warning({"tracks": TRACKS_FOR_THE_UI, "path": "ok.pftrace"}, launches, "ok.plraw") is None
