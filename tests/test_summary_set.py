"""`proton-lite summary` of several captures (one per rank, or per run): each kernel's device
time on every capture, the slowest first, marks where a capture's numbers are incomplete.
Inputs: real captures in tests/data and docs/examples; expected times computed here from
the decoded launches, not from the summary's own code."""
import json
from pathlib import Path

import numpy as np

from proton_lite.decode import decode
from proton_lite.raw_format import read_raw
from proton_lite.viewer import cli
from proton_lite.viewer.summary import summarize
from proton_lite.viewer.summary_set import capture_labels, summarize_set

ROOT = Path(__file__).resolve().parent.parent
WHOLE = ROOT / "tests" / "data" / "loop_scopes.plraw"
DROPPED = ROOT / "tests" / "data" / "loop_scopes_dropped.plraw"
MATMUL_A = ROOT / "tests" / "data" / "matmul.plraw"
MATMUL_B = ROOT / "docs" / "examples" / "matmul.plraw"


def _kernel_time(path, name):
    prof = decode(read_raw(str(path)))
    k = [i for i, kern in enumerate(prof.kernels) if kern.name == name]
    rows = prof.launches[np.isin(prof.launches["kernel"], k)]
    return int((rows["end_ns"] - rows["start_ns"]).sum()), len(rows)


def test_each_kernel_is_compared_across_captures_with_the_slowest_named():
    files = [WHOLE, DROPPED]
    result = summarize_set([decode(read_raw(str(f))) for f in files], [str(f) for f in files])
    (row, ) = result["across"]
    t_whole, _ = _kernel_time(WHOLE, "loop_scopes")
    t_dropped, _ = _kernel_time(DROPPED, "loop_scopes")
    assert row["kernel"] == "loop_scopes" and row["captures"] == 2 and row["launches"] == 2
    assert row["time_ns"]["min"] == min(t_whole, t_dropped) and row["time_ns"]["max"] == max(t_whole, t_dropped)
    slowest = "loop_scopes" if t_whole >= t_dropped else "loop_scopes_dropped"
    assert row["slowest"] == slowest
    assert row["per_capture"]["loop_scopes"]["time_ns"] == t_whole
    # the capture that dropped records makes the kernel's row incomplete, and its warning names it
    assert row["incomplete"] == ["loop_scopes_dropped"]
    assert any(w["message"].startswith("loop_scopes_dropped: loop_scopes: 1,624 records dropped")
               for w in result["warnings"])


def test_a_kernel_missing_from_a_capture_is_warned_about_and_labels_tell_files_apart():
    files = [str(MATMUL_A), str(MATMUL_B), str(WHOLE)]
    result = summarize_set([decode(read_raw(f)) for f in files], files)
    assert [c["label"] for c in result["captures"]] == ["data/matmul", "examples/matmul", "data/loop_scopes"]
    by_kernel = {r["kernel"]: r for r in result["across"]}
    t, n = _kernel_time(MATMUL_B, "matmul_kernel")
    assert by_kernel["matmul_kernel"]["time_ns"]["max"] == t and by_kernel["matmul_kernel"]["launches"] == n == 3
    assert [r["kernel"] for r in result["across"]][0] == "matmul_kernel"  # the longest first
    assert any(w["message"] == "kernel matmul_kernel has no launch in data/matmul, data/loop_scopes"
               for w in result["warnings"])


def test_ranks_name_the_captures_when_each_knows_a_different_one():
    summaries = [summarize(decode(read_raw(str(WHOLE)))) for _ in range(2)]
    for rank, s in enumerate(summaries):
        s["session"]["rank"] = rank
    assert capture_labels(summaries, ["a/x.plraw", "b/x.plraw"]) == ["rank 0", "rank 1"]
    summaries[1]["session"]["rank"] = 0  # two captures of one rank: the files name them
    assert capture_labels(summaries, ["a/x.plraw", "b/x.plraw"]) == ["a/x", "b/x"]


def test_cli_summary_of_several_files(capsys):
    rc = cli.main(["summary", str(WHOLE), str(DROPPED), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["schema"] == "proton_lite.summary_set/1" and len(d["captures"]) == 2
    assert d["captures"][0]["summary"]["schema"] == "proton_lite.summary/1"
    rc = cli.main(["summary", str(WHOLE), str(DROPPED)])
    out = capsys.readouterr().out
    assert rc == 0 and "2 captures" in out and "Kernels across captures" in out and "* loop_scop" in out
    assert out.index("! loop_scopes_dropped: loop_scopes: 1,624 records dropped") < out.index("Captures")
    assert "time per scope" not in out  # the captures' own tables only with --each
    rc = cli.main(["summary", str(WHOLE), str(DROPPED), "--each", "--tables", "scopes"])
    out = capsys.readouterr().out
    assert rc == 0 and out.count("time per scope") == 2
