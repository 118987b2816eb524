"""A capture merged into torch.profiler's trace (proton_lite/profiler_merge.py), on recorded
data: docs/examples/matmul.plraw (3 launches on the H100).  The profiler's side is written
here from the Chrome trace format torch.profiler exports (``traceEvents``, kernel events
``cat: "kernel"`` with ``ts``/``dur`` in µs and ``args.device``), placed by a known clock
offset with each CUPTI interval around our CTAs: the merge must find the offset, place
the launches, and say which ones the profiler did not see."""
import json

import numpy as np
import pytest

from proton_lite.decode import decode
from proton_lite.profiler_merge import MergeError, merge_profiler_trace
from proton_lite.raw_format import read_raw
from proton_lite.viewer import cli

CAPTURE = "docs/examples/matmul.plraw"
OFFSET_NS = -1795382113236538304 + 5_000_000_123  # the profiler's clock: 5 s after our first CTA, arbitrary


def _us(ns: int) -> float:
    return ns / 1000


def _profiler_trace(profile, drop=(), before=900, after=1300, extra_same_kernel=True):
    """torch.profiler's export for the same run: our launches (but ``drop``) as CUPTI kernels that
    start ``before`` ns earlier and end ``after`` ns later (one number, or one per launch),
    plus kernels we did not instrument."""
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4242, "tid": 4242, "ts": 1.0, "dur": 5.0}]
    name = profile.kernels[0].name
    for row in profile.launches:
        if int(row["launch"]) in drop:
            continue
        k = int(row["launch"])
        start = int(profile.t0_ns) + int(row["start_ns"]) + OFFSET_NS - (before[k] if isinstance(before, list) else before)
        end = int(profile.t0_ns) + int(row["end_ns"]) + OFFSET_NS + (after[k] if isinstance(after, list) else after)
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": _us(start),
                       "dur": _us(end - start), "args": {"device": 0, "stream": 7, "correlation": 10 + int(row["launch"])}})
        events.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7,
                       "ts": _us(end + 2000), "dur": 3.0, "args": {"device": 0, "stream": 7}})
    if extra_same_kernel:  # a launch of the same kernel before the session started: no partner
        first = int(profile.t0_ns) + OFFSET_NS - 50_000_000
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": _us(first), "dur": 27.0,
                       "args": {"device": 0, "stream": 7}})
    return {"schemaVersion": 1, "traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}]}


@pytest.fixture(scope="module")
def profile():
    return decode(read_raw(CAPTURE))


def test_launches_land_inside_their_cupti_slices_and_a_missing_one_is_named(profile, tmp_path):
    trace = tmp_path / "prof.json"
    trace.write_text(json.dumps(_profiler_trace(profile, drop={1})))
    report = merge_profiler_trace(trace, CAPTURE, tmp_path / "merged.json")
    assert report["matched"] == 2 and report["unmatched_launches"] == [1]
    assert [r["launch"] for r in report["launches"]] == [0, 2]
    # the offsets that keep every launch inside lie within [-900, +1300] ns of the true one: the
    # fit takes the middle (+200 ns), 1100 ns inside at both ends
    for r in report["launches"]:
        assert abs(r["start_after_ns"] - 1100) <= 2 and abs(r["end_before_ns"] - 1100) <= 2
    assert abs(report["offset_ns"] - (OFFSET_NS + 200)) <= 2 and report["rate"] == 1.0
    merged = json.loads((tmp_path / "merged.json").read_text())
    theirs = _profiler_trace(profile, drop={1})["traceEvents"]
    assert merged["traceEvents"][:len(theirs)] == theirs  # the profiler's events are kept as they were
    ours = merged["traceEvents"][len(theirs):]
    assert ours and min(e["pid"] for e in ours if "pid" in e) > 4242  # new pids, after the profiler's
    names = [e["args"]["name"] for e in ours if e.get("ph") == "M" and e.get("name") == "process_name"]
    assert names and all(n.startswith("proton-lite #") for n in names)
    # a launch slice now starts where our first CTA started, on the profiler's clock
    first = min((e for e in ours if e.get("ph") == "X" and str(e["name"]).startswith("#0 ")), key=lambda e: e["ts"])
    want = (int(profile.t0_ns) + int(profile.launches["start_ns"][0]) + report["offset_ns"]) / 1000
    assert abs(first["ts"] - want) < 0.002
    assert merged["otherData"]["proton_lite_merge"]["matched"] == 2


def test_launches_whose_gaps_differ_are_all_placed_inside_their_slices(profile, tmp_path):
    """Two launches start their first CTA 100 ns after CUPTI's start and end 1,900 ns before
    its end, one (a cold first launch) 1,000 ns after and 200 ns before: the midpoints' median
    would put that one 700 ns past its end; the offsets that keep all three inside lie in
    [-100, +200] ns of the true one, and the fit takes their middle."""
    trace = tmp_path / "prof.json"
    trace.write_text(json.dumps(_profiler_trace(profile, before=[1000, 100, 100], after=[200, 1900, 1900])))
    report = merge_profiler_trace(trace, CAPTURE, tmp_path / "merged.json")
    assert report["matched"] == 3 and report["all_inside"]
    assert abs(report["offset_ns"] - (OFFSET_NS + 50)) <= 2
    got = {r["launch"]: (r["start_after_ns"], r["end_before_ns"]) for r in report["launches"]}
    for launch, (start, end) in {0: (1050, 150), 1: (150, 1850), 2: (150, 1850)}.items():
        assert abs(got[launch][0] - start) <= 2 and abs(got[launch][1] - end) <= 2, (launch, got)


def test_a_cold_launch_that_starts_late_in_its_slice_is_still_matched(profile, tmp_path):
    """Launch 0's first CTA starts 60 µs after CUPTI's start (a cold first launch; on the H100
    such a launch once went unmatched): its midpoint lies 30 µs from the slice's, more than its
    26.5 µs duration, yet its CTAs lie inside that slice, and only inside that one."""
    trace = tmp_path / "prof.json"
    trace.write_text(json.dumps(_profiler_trace(profile, before=[60_000, 300, 300], after=[200, 300, 300])))
    report = merge_profiler_trace(trace, CAPTURE, tmp_path / "merged.json")
    assert report["matched"] == 3 and not report["unmatched_launches"] and report["all_inside"], report
    got = {r["launch"]: (r["start_after_ns"], r["end_before_ns"]) for r in report["launches"]}
    # the offsets keeping all three inside lie in [-300, +200] ns of the true one: the fit takes -50
    for launch, (start, end) in {0: (59_950, 250), 1: (250, 350), 2: (250, 350)}.items():
        assert abs(got[launch][0] - start) <= 2 and abs(got[launch][1] - end) <= 2, (launch, got)


def test_a_rate_difference_over_a_long_run_is_fitted(profile, tmp_path):
    """Launches spread over 2 s with the profiler's clock 20 ppm fast: an offset alone would leave
    40 µs at the end; the fit takes the rate."""
    prof = decode(read_raw(CAPTURE))
    prof.launches["start_ns"] += np.array([0, 1_000_000_000, 2_000_000_000], dtype=np.int64)
    prof.launches["end_ns"] += np.array([0, 1_000_000_000, 2_000_000_000], dtype=np.int64)
    from proton_lite.profiler_merge import best_match, fit_clock, our_launches, profiler_kernels
    trace = _profiler_trace(prof, before=500, after=500, extra_same_kernel=False)
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel":
            ns = e["ts"] * 1000 - OFFSET_NS
            e["ts"] = (ns * (1 + 20e-6) + OFFSET_NS - (int(prof.t0_ns) * 20e-6)) / 1000
    ours, theirs = our_launches(prof), profiler_kernels(trace)
    pairs = best_match(ours, theirs)
    assert sum(len(a) for _, a, _ in pairs) == 3
    clock = fit_clock(pairs)
    assert abs(clock.b - (1 + 20e-6)) < 1e-7 and clock.contained


def test_what_cannot_be_merged_is_said(profile, tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1}]}))
    with pytest.raises(MergeError, match="no GPU kernel events.*ProfilerActivity.CUDA"):
        merge_profiler_trace(empty, CAPTURE, tmp_path / "m.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "some_other_kernel", "ts": 1,
                                                  "dur": 1, "args": {"device": 0}}]}))
    with pytest.raises(MergeError, match="none of the capture's kernels"):
        merge_profiler_trace(other, CAPTURE, tmp_path / "m.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(MergeError, match="cannot read a JSON trace"):
        merge_profiler_trace(tmp_path / "bad.json", CAPTURE, tmp_path / "m.json")


def test_the_command_line(profile, tmp_path, capsys):
    trace = tmp_path / "prof.json"
    trace.write_text(json.dumps(_profiler_trace(profile)))
    assert cli.main(["merge", str(trace), CAPTURE, "-o", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 of 3 launches placed on the profiler's GPU kernels") and "out.json" in out
    assert json.loads((tmp_path / "out.json").read_text())["otherData"]["proton_lite_merge"]["matched"] == 3
    assert cli.main(["merge", str(tmp_path / "missing.json"), CAPTURE]) == 2
    assert "no single clock offset" not in out


def test_when_no_offset_keeps_every_launch_inside_the_command_says_so(profile, tmp_path, capsys):
    """Launch 0's CUPTI slice starts 200 ns after our first CTA and ends 100 ns after our last:
    no offset keeps it inside; the fit falls back on the midpoints and the command says so."""
    trace = tmp_path / "prof.json"
    trace.write_text(json.dumps(_profiler_trace(profile, before=[-200, 500, 500], after=[100, 500, 500])))
    assert cli.main(["merge", str(trace), CAPTURE, "-o", str(tmp_path / "out.json")]) == 0
    assert "no single clock offset puts every launch inside its CUPTI slice" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())["otherData"]["proton_lite_merge"]["all_inside"] is False


def test_the_merged_file_imports_in_perfettos_trace_processor(profile, tmp_path):
    """Perfetto's own importer takes the merged JSON with no error stats, and on its clock each of
    our launch slices lies inside the profiler's kernel slice it was matched to."""
    import trace_processor as tp
    if tp.missing():
        pytest.skip(tp.missing())
    trace = tmp_path / "prof.json"
    theirs = _profiler_trace(profile)
    theirs["traceEvents"][0]["name"] = "attention · forward"  # a user's op name that is not ASCII
    trace.write_text(json.dumps(theirs))
    merge_profiler_trace(trace, CAPTURE, tmp_path / "merged.json")
    bad, ours, theirs, op = tp.query(str(tmp_path / "merged.json"), [
        tp.BAD_STATS,
        "select ts, dur, name from slice where name like '#% matmul_kernel %' order by ts",
        "select ts, dur from slice where name = 'matmul_kernel' order by ts",
        "select name from slice where name like 'attention%'"])
    assert bad == [] and op == [{"name": "attention · forward"}]  # as written, not "\u00b7"
    assert len(ours) == 3 and len(theirs) == 4  # the profiler's extra launch before the session stays
    for mine, kernel in zip(ours, theirs[1:]):
        assert kernel["ts"] <= mine["ts"] and mine["ts"] + mine["dur"] <= kernel["ts"] + kernel["dur"]
