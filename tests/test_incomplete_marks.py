"""`summary` and `diff` mark every number built from lost records, and `diff` gives it no verdict.

Inputs: the real H100 capture `docs/examples/matmul.plraw` (3 launches), a copy of it cut
off after its first launch (what a killed program leaves), a capture with drops built
to the documented layout (`tests/synth.py`: every unit tried 4 records, 3 fit), and a
real capture with drops: `tests/data/loop_scopes_dropped.plraw` (H200, 2026-11-27,
`tests/test_gpu.py::test_overflow_is_counted_not_written`: loop_scopes with capacity=16,
each of 7 CTAs x 4 warps tried 74 records) beside the same kernel's whole capture
`tests/data/loop_scopes.plraw`.
"""
import json
import shutil
from pathlib import Path

import pytest
from synth import simple_capture

from proton_lite.viewer import cli

ROOT = Path(__file__).resolve().parent.parent
MATMUL = ROOT / "docs" / "examples" / "matmul.plraw"
DROPPED = ROOT / "tests" / "data" / "loop_scopes_dropped.plraw"
WHOLE = ROOT / "tests" / "data" / "loop_scopes.plraw"


def _run(capsys, *args):
    rc = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def captures(tmp_path):
    full = tmp_path / "full.plraw"
    shutil.copy(MATMUL, full)
    data = full.read_bytes()
    cut = tmp_path / "cut.plraw"
    cut.write_bytes(data[:int(len(data) * 0.62)])  # the first launch whole, the second torn
    drops = tmp_path / "drops.plraw"
    simple_capture(str(drops), drop_last=1, cap=3)
    return full, cut, drops


def test_summary_of_a_cut_off_capture_warns_first_and_marks_every_row(captures, capsys):
    full, cut, _ = captures
    rc, out, _ = _run(capsys, "summary", cut, "--tables", "launches,scopes")
    assert rc == 0
    lines = out.splitlines()
    first_table = next(i for i, line in enumerate(lines) if line.startswith("Launches"))
    warning = next(i for i, line in enumerate(lines) if line.startswith("! the capture was cut off"))
    legend = [i for i, line in enumerate(lines) if line.startswith("* incomplete")]
    assert warning < first_table and len(legend) == 1 and legend[0] < first_table
    assert "matmul_kernel *" in out and "mainloop *" in out and "epilogue *" in out
    assert "SMs (" not in out  # --tables left the SM table out
    header = " ".join(lines[:warning])
    assert "file: " in header and "session: matmul " in header and "pytest-of" not in header.replace(str(cut), "")
    rc, out, _ = _run(capsys, "summary", cut, "--json")
    s = json.loads(out)
    assert rc == 0 and s["incomplete"]["matmul_kernel"][0].startswith("the capture was cut off")
    assert all(r["incomplete"] for r in s["launches"] + s["scopes"])
    assert s["counters"] == {"lost_launches": 0, "unsized_launches": 0, "capped_launches": 0}
    # the whole capture: nothing marked, no legend
    rc, out, _ = _run(capsys, "summary", full)
    assert rc == 0 and "*" not in out and "incomplete" not in out and "SMs (132 used)" in out


def test_summary_marks_the_kernel_that_dropped_records_with_counts_in_thousands(captures, capsys):
    _, _, drops = captures
    rc, out, _ = _run(capsys, "summary", drops)
    assert rc == 0
    assert "! k: 24 records dropped (buffer full) in 1 of 1 launch(es)" in out
    assert "k *" in out and "b *" in out and out.count("* incomplete") == 1
    assert out.index("! k: 24 records dropped") < out.index("Launches")
    assert "total: summed over every unit" in out


def test_diff_gives_no_verdict_where_a_side_is_incomplete(captures, capsys):
    full, cut, _ = captures
    rc, out, _ = _run(capsys, "diff", full, cut, "--json")
    d = json.loads(out)
    assert rc == 0
    assert d["warnings"][0].startswith("b: the capture was cut off")
    rows = d["kernels"] + d["scopes"]
    assert rows and all(r["verdict"] == "incomplete" and "b" in r["incomplete"] and "a" not in r["incomplete"]
                        for r in rows)
    rc, out, _ = _run(capsys, "diff", full, cut)
    assert "no clear change" not in out and "incomplete" in out
    assert out.index("! b: the capture was cut off") < out.index("(launch) *")
    # two whole captures: verdicts as before, no warnings
    rc, out, _ = _run(capsys, "diff", full, full, "--json")
    d = json.loads(out)
    assert d["warnings"] == [] and all(r["incomplete"] is None and r["verdict"] != "incomplete"
                                       for r in d["kernels"] + d["scopes"])


def test_summary_tables_flag_refuses_unknown_tables(captures, capsys):
    full, _, _ = captures
    rc, _, err = _run(capsys, "summary", full, "--tables", "sms,foo")
    assert rc == 2 and "unknown table(s) foo; choose from launches,scopes,percentiles,sms" in err


def test_a_real_capture_with_drops_is_marked_where_it_is_incomplete(capsys):
    rc, out, _ = _run(capsys, "summary", DROPPED, "--tables", "launches,scopes")
    dropped = 7 * 4 * (74 - 16)
    assert rc == 0 and f"! loop_scopes: {dropped:,} records dropped (buffer full) in 1 of 1 launch(es)" in out
    assert "loop_capacity=74" in out  # the fix, with the number the busiest unit needed
    assert out.index("records dropped") < out.index("* incomplete") < out.index("Launches")
    assert "loop_scopes *" in out and "step *" in out
    rc, out, _ = _run(capsys, "summary", WHOLE, "--tables", "launches,scopes")
    assert rc == 0 and "*" not in out and "dropped" not in out


def test_diff_of_a_real_capture_with_drops_against_a_whole_one_gives_no_verdict(capsys):
    rc, out, _ = _run(capsys, "diff", WHOLE, DROPPED, "--json")
    d = json.loads(out)
    assert rc == 0 and any("records dropped" in w and w.startswith("b:") for w in d["warnings"])
    rows = d["kernels"] + d["scopes"]
    assert rows and all(r["verdict"] == "incomplete" and "b" in r["incomplete"] for r in rows)
    rc, out, _ = _run(capsys, "diff", WHOLE, DROPPED)
    assert "no clear change" not in out and "incomplete" in out


def test_kernel_losses_per_kernel_of_many_kernels():
    """Each kernel's losses over its own launches, for many kernels interleaved (two ids sharing
    a name add up under it, as they always did): against a plain loop over the launches."""
    import numpy as np

    from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
    from viewer.completeness import kernel_losses
    rng = np.random.default_rng(5)
    n, n_k = 3000, 300
    launches = np.zeros(n, LAUNCH_DTYPE)
    launches["launch"] = np.arange(n)
    launches["kernel"] = rng.integers(0, n_k, n)
    for field in ("dropped", "unmatched", "missing_ctas", "torn_chunks"):
        launches[field] = np.where(rng.random(n) < 0.02, rng.integers(1, 1 << 20, n), 0)
    launches["dropped"][launches["kernel"] == 7] = 2**40  # past 32 bits
    launches["unmatched"][::97] = 1
    kernels = [KernelInfo(name=f"k{k % 280}", scopes=[], num_warps=4, granularity="cta", unit_warps=4, capacity=0,
                          meta={}) for k in range(n_k + 5)]  # (ids 280-299 share names with 0-19; 300-304 unused)
    profile = Profile(kernels=kernels, launches=launches, ctas=np.zeros(0, CTA_DTYPE),
                      intervals=np.zeros(0, INTERVAL_DTYPE))
    whats = {"dropped": "records dropped (buffer full)", "unmatched": "records without a partner",
             "missing_ctas": "CTAs missing (no header)", "torn_chunks": "pool chunks torn"}
    want: dict = {}
    for k in range(n_k + 5):
        mine = [row for row in launches.tolist() if row[1] == k]
        if not mine:
            continue
        reasons = want.setdefault(f"k{k % 280}", [])
        for field, what in whats.items():
            col = LAUNCH_DTYPE.names.index(field)
            values = [row[col] for row in mine]
            if sum(values):
                reasons.append(f"{sum(values):,} {what} in {sum(v > 0 for v in values):,} of {len(mine):,} launch(es)")
    got = kernel_losses(profile)
    assert got == want
    assert int(got["k7"][0].split()[0].replace(",", "")) >= 2**40 and sum(map(len, got.values())) > 50
    assert kernel_losses(profile, launches[:0]) == {}
