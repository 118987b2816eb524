"""Several captures as one profile (profile_merge.py), and `diff` of two folders of captures
(one per rank). Inputs: real captures from tests/data and docs/examples."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from proton_lite.decode import decode
from proton_lite.profile_merge import merge_profiles
from proton_lite.raw_format import read_raw
from proton_lite.viewer import cli

ROOT = Path(__file__).resolve().parent.parent
WHOLE = ROOT / "tests" / "data" / "loop_scopes.plraw"
DROPPED = ROOT / "tests" / "data" / "loop_scopes_dropped.plraw"
MATMUL = ROOT / "docs" / "examples" / "matmul.plraw"


def _load(path):
    return decode(read_raw(str(path)))


def test_merged_profile_holds_every_launch_renumbered_on_the_earliest_axis():
    a, b = _load(MATMUL), _load(WHOLE)
    m = merge_profiles([a, b])
    assert len(m.kernels) == len(a.kernels) + len(b.kernels)
    assert m.launches["launch"].tolist() == list(range(len(a.launches) + len(b.launches)))
    assert len(m.ctas) == len(a.ctas) + len(b.ctas) and len(m.intervals) == len(a.intervals) + len(b.intervals)
    assert m.t0_ns == min(a.t0_ns, b.t0_ns)
    # b's rows: its kernel indices after a's, its times moved by the difference of the t0s
    tail = m.intervals[len(a.intervals):]
    shift = int(b.t0_ns) - int(m.t0_ns)
    assert np.array_equal(tail["start_ns"], b.intervals["start_ns"] + shift)
    assert np.array_equal(tail["launch"], b.intervals["launch"] + len(a.launches))
    assert set(m.launches["kernel"][len(a.launches):].tolist()) == {len(a.kernels)}
    assert [o["name"] for o in m.session["merged_from"]] == [a.session["name"], b.session["name"]]
    assert a.launches["launch"].tolist() == list(range(len(a.launches)))  # the inputs are left as they were


def test_a_cut_off_capture_makes_the_merged_one_incomplete(tmp_path):
    data = MATMUL.read_bytes()
    cut = tmp_path / "cut.plraw"
    cut.write_bytes(data[:int(len(data) * 0.62)])
    m = merge_profiles([_load(WHOLE), _load(cut)])
    assert m.session["truncated"] is True
    assert merge_profiles([_load(WHOLE), _load(WHOLE)]).session["truncated"] is False
    with pytest.raises(ValueError, match="no captures"):
        merge_profiles([])


def test_per_kernel_losses_of_every_capture_are_summed_into_the_merged_one():
    """What each capture counted per kernel name (graph replays not kept, loop kernels' CTA
    starts not placed: proton_lite/start_range.py) is the merged profile's sum, not the first
    capture's, so the kernel is marked incomplete whichever rank lost something."""
    from viewer.completeness import kernel_losses
    a, b = _load(WHOLE), _load(WHOLE)
    name = a.kernels[0].name
    a.session["uncertain_starts"], b.session["uncertain_starts"] = {}, {name: 3}
    b.session["graph_overruns"] = {name: 2}
    m = merge_profiles([a, b])
    assert m.session["uncertain_starts"] == {name: 3} and m.session["graph_overruns"] == {name: 2}
    assert any("3 CTA start(s) not placed" in r for r in kernel_losses(m)[name])
    assert merge_profiles([b, b]).session["uncertain_starts"] == {name: 6}


def test_diff_of_two_folders_of_captures(tmp_path, capsys):
    before, after = tmp_path / "before", tmp_path / "after"
    before.mkdir()
    after.mkdir()
    for name in ("rank0.plraw", "rank1.plraw"):
        shutil.copy(WHOLE, before / name)
    shutil.copy(WHOLE, after / "rank0.plraw")
    shutil.copy(DROPPED, after / "rank1.plraw")
    rc = cli.main(["diff", str(before), str(after), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["a"]["launches"] == 2 and d["b"]["launches"] == 2
    assert d["b"]["name"].endswith("(2 captures)")
    rows = d["kernels"] + d["scopes"]
    assert rows and all(r["verdict"] == "incomplete" and "b" in r["incomplete"] for r in rows)
    rc = cli.main(["diff", str(before), str(before), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert d["warnings"] == [] and all(r["verdict"] != "incomplete" for r in d["kernels"] + d["scopes"])
    empty = tmp_path / "empty"
    empty.mkdir()
    rc = cli.main(["diff", str(empty), str(before)])
    assert rc == 2 and "a folder with no .plraw capture" in capsys.readouterr().err


def test_a_trace_of_several_captures_groups_each_capture_and_reads_back(tmp_path, capsys):
    """`trace a.plraw b.plraw -o merged`: one timeline, a root track per capture above its
    launches (Perfetto) or its name before each launch's process (Chrome JSON); both read back."""
    import trace_processor as tp
    from proton_lite.trace import load_trace
    rc = cli.main(["trace", str(WHOLE), str(MATMUL), "-o", str(tmp_path / "merged"), "--format", "perfetto",
                   "chrome"])
    assert rc == 0
    a, b = _load(WHOLE), _load(MATMUL)
    for ext in (".pftrace", ".json"):
        back = load_trace(tmp_path / f"merged{ext}")
        assert len(back.launches) == len(a.launches) + len(b.launches)
        assert len(back.intervals) == len(a.intervals) + len(b.intervals)
        assert [o["launches"] for o in back.session["merged_from"]] == [[0, 1], [1, 4]]
    if tp.missing():
        pytest.skip(tp.missing())
    bad, tracks = tp.query(str(tmp_path / "merged.pftrace"), [
        tp.BAD_STATS, "select t.name as name, p.name as parent from track t left join track p on t.parent_id = p.id"])
    assert bad == []
    parents = {t["name"]: t["parent"] for t in tracks}
    roots = {name for name, parent in parents.items() if parent is None and "(" in name}
    assert len(roots) == 2 and any(r.startswith("loop_scopes") for r in roots)
    launch_parents = {parent for name, parent in parents.items() if name.startswith("#")}
    assert launch_parents == roots  # every launch sits under its capture
    rc = cli.main(["trace", str(WHOLE), str(MATMUL)])
    assert rc == 2 and "name it with -o" in capsys.readouterr().err


def test_captures_lined_up_on_a_kernel_every_capture_ran():
    """Timers of different GPUs differ (268 µs on a 2 x H200 machine), so the user may line the
    captures up on a kernel they all ran at once: its first launch starts together."""
    a, b = _load(WHOLE), _load(DROPPED)  # one kernel, two captures taken at different times
    m = merge_profiles([a, b], align_on="loop_scopes")
    first = m.launches[m.launches["launch"] == 0][0], m.launches[m.launches["launch"] == 1][0]
    assert int(first[0]["start_ns"]) == int(first[1]["start_ns"])
    assert m.session["aligned_on"] == "loop_scopes"
    # each capture's own times move together: durations and offsets inside it are kept
    tail = m.intervals[len(a.intervals):]
    offset = int(first[1]["start_ns"]) - int(b.launches["start_ns"][0])
    assert np.array_equal(tail["start_ns"] - offset, b.intervals["start_ns"])
    unaligned = merge_profiles([a, b])
    assert int(unaligned.launches["start_ns"][1]) - int(unaligned.launches["start_ns"][0]) != 0


def test_align_on_a_kernel_a_capture_lacks_is_refused_with_its_kernels(tmp_path, capsys):
    rc = cli.main(["trace", str(WHOLE), str(MATMUL), "-o", str(tmp_path / "m"), "--align-on", "loop_scopes"])
    err = capsys.readouterr().err
    assert rc == 2 and "--align-on: capture 1" in err and "has no launch of 'loop_scopes'" in err
    assert "matmul_kernel" in err  # its kernels, to choose from
    rc = cli.main(["trace", str(WHOLE), str(DROPPED), "-o", str(tmp_path / "m"), "--align-on", "loop_scopes"])
    assert rc == 0 and not capsys.readouterr().err.startswith("proton-lite: error")
    rc = cli.main(["trace", str(WHOLE), "--align-on", "loop_scopes"])
    assert rc == 2 and "give two or more" in capsys.readouterr().err
