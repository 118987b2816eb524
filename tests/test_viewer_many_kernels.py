"""`diff` and `summary` of captures with many kernels (a large compiled model launches
thousands): each kernel's numbers are its own launches' and CTAs' (against a plain loop); the
diff's text draws the kernels that changed, the largest change first, the summary's the scope
tables of the kernels of its first rows, each counting the rest."""
from __future__ import annotations

import math

import numpy as np
from rich.console import Console

from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
from proton_lite.viewer import diff as D

N_KERNELS = 60


def _profile(seed: int, slower: dict[int, float], kernels: range, scoped: bool = False) -> Profile:
    """Launches of ``kernels`` interleaved (kernel k: 1 + k % 4 launches of 3 + k % 5 CTAs),
    kernel k's durations times ``slower.get(k, 1)``; every launch's CTAs its rows (``scoped``:
    and each CTA an interval of scope "body" over its first half)."""
    rng = np.random.default_rng(seed)
    order = [k for r in range(4) for k in kernels if r < 1 + k % 4]
    launches = np.zeros(len(order), LAUNCH_DTYPE)
    ctas = []
    t = 0
    for i, k in enumerate(order):
        n = 3 + k % 5
        life = (1000 + 37 * k + rng.integers(0, 60, n)) * slower.get(k, 1.0)
        rows = np.zeros(n, CTA_DTYPE)
        rows["launch"], rows["cta"] = i, np.arange(n)
        rows["start_ns"] = t + rng.integers(0, 20, n)
        rows["end_ns"] = rows["start_ns"] + life.astype(np.int64)
        launches[i]["launch"], launches[i]["kernel"], launches[i]["num_ctas"] = i, k, n
        launches[i]["start_ns"], launches[i]["end_ns"] = rows["start_ns"].min(), rows["end_ns"].max()
        ctas.append(rows)
        t = int(rows["end_ns"].max()) + 500
    names = [KernelInfo(name=f"triton_k{k:03d}", scopes=["body"] if scoped else [], num_warps=4, granularity="cta",
                        unit_warps=4, capacity=4 if scoped else 0, meta={}) for k in range(N_KERNELS + 2)]
    ctas = np.concatenate(ctas)
    intervals = np.zeros(len(ctas) if scoped else 0, INTERVAL_DTYPE)
    if scoped:
        intervals["launch"], intervals["cta"] = ctas["launch"], ctas["cta"]
        intervals["start_ns"] = ctas["start_ns"]
        intervals["end_ns"] = ctas["start_ns"] + (ctas["end_ns"] - ctas["start_ns"]) // 2
        intervals["cycles"] = 2 * (intervals["end_ns"] - intervals["start_ns"])
    return Profile(kernels=names, launches=launches, ctas=ctas, intervals=intervals, session={"name": f"run{seed}"})


SLOWER = {7: 3.0, 21: 1.5, 33: 2.0, 50: 1.3, 58: 5.0}


def _pair():
    a = _profile(1, {}, range(N_KERNELS))  # kernel 60 only in b, 59 only in a
    b = _profile(2, SLOWER, [k for k in range(N_KERNELS + 1) if k != 59])
    return a, b


def test_each_kernels_numbers_are_its_own_launches_and_ctas():
    a, b = _pair()
    d = D.diff_profiles(a, b)
    rows = {r["kernel"]: r for r in d["kernels"]}
    assert len(rows) == N_KERNELS + 1
    for side, p in (("a", a), ("b", b)):
        for k in range(N_KERNELS + 1):
            name = f"triton_k{k:03d}"
            mine = [row for row in p.launches.tolist() if row[1] == k]
            got = rows[name][side]
            if not mine:
                assert got is None
                continue
            dur = [row[LAUNCH_DTYPE.names.index("end_ns")] - row[LAUNCH_DTYPE.names.index("start_ns")] for row in mine]
            assert got["count"] == len(dur) and got["total_ns"] == sum(dur)
            assert math.isclose(got["mean_ns"], sum(dur) / len(dur))
            if len(dur) >= 2:
                assert math.isclose(got["spread_ns"], float(np.std(dur, ddof=1)))
            else:  # one launch: the spread from its CTAs' lifetimes
                ids = {row[0] for row in mine}
                life = np.array([c["end_ns"] - c["start_ns"] for c in p.ctas if c["launch"] in ids], np.float64)
                rel = np.std(life, ddof=1) / math.sqrt(len(life)) / life.mean()
                assert got["spread_basis"] == "cta_lifetimes" and math.isclose(got["spread_ns"], dur[0] * rel)
    assert rows["triton_k059"]["verdict"] == "only in a" and rows["triton_k060"]["verdict"] == "only in b"
    assert all(rows[f"triton_k{k:03d}"]["verdict"] == D.SLOWER for k in SLOWER if 1 + k % 4 >= 2)


def _drawn(d: dict, every: bool = False) -> tuple[list[str], str]:
    console = Console(record=True, width=80)
    D.render_diff(d, console, every_kernel=every)
    text = console.export_text()
    titles = [line.strip() for line in text.splitlines() if line.strip().startswith("triton_k")]
    return titles, text


def test_past_twenty_kernels_the_text_draws_the_changes_largest_first():
    a, b = _pair()
    d = D.diff_profiles(a, b)
    titles, text = _drawn(d)
    changed = [r for r in d["kernels"] if r["verdict"] != D.NO_CHANGE]
    size = {r["kernel"]: abs(r["delta_total_ns"]) if r["delta_total_ns"] is not None else
            max(s["total_ns"] for s in (r["a"], r["b"]) if s) for r in changed}
    assert titles == sorted(size, key=lambda n: (-size[n], n))
    assert f"{len(d['kernels']) - len(changed)} kernel(s) with no clear change" in text and "--all" in text
    every, text = _drawn(d, every=True)
    assert every == [r["kernel"] for r in d["kernels"]] and "not shown" not in text


def test_past_twenty_kernels_with_changes_at_most_twenty_are_drawn(monkeypatch):
    monkeypatch.setattr(D, "KERNELS_SHOWN", 3)
    a, b = _pair()
    d = D.diff_profiles(a, b)
    titles, text = _drawn(d)
    changed = [r for r in d["kernels"] if r["verdict"] != D.NO_CHANGE]
    assert len(titles) == 3 and f"{len(changed) - 3} more with a change or on one side" in text


def test_up_to_twenty_kernels_every_one_is_drawn():
    a, b = _pair()
    d = D.diff_profiles(a, b, kernel="triton_k00")  # ten kernels, one of them slower
    titles, text = _drawn(d)
    assert titles == [f"triton_k{k:03d}" for k in range(10)] and "not shown" not in text


def _summary_text(summary: dict, every: bool = False) -> str:
    from proton_lite.viewer.summary import render_summary
    console = Console(record=True, width=80)
    render_summary(summary, console, every_kernel=every)
    return console.export_text()


def test_past_twenty_kernels_the_summary_draws_the_scope_tables_of_its_first_rows():
    """The scope rows sorted by total over every kernel: the tables of the kernels of the first
    rows, KERNEL_TABLES of them, in that order, and a line counting the others; --all every one."""
    from proton_lite.viewer import summary_render
    from proton_lite.viewer.summary import summarize
    s = summarize(_profile(2, SLOWER, range(N_KERNELS), scoped=True))
    order = list(dict.fromkeys(r["kernel"] for r in s["scopes"]))  # kernels in the rows' order
    assert len(order) == N_KERNELS and order[0] == "triton_k058"  # (5x slower: the largest total)
    text = _summary_text(s)
    drawn = [line.strip() for line in text.splitlines() if line.strip().startswith("triton_k")]
    assert drawn == order[:summary_render.KERNEL_TABLES]
    assert f"{N_KERNELS - summary_render.KERNEL_TABLES} more kernels' scope tables not shown" in text
    text = _summary_text(s, every=True)
    assert [line.strip() for line in text.splitlines() if line.strip().startswith("triton_k")] == order
    assert "not shown (those drawn" not in text
    few = summarize(_profile(2, SLOWER, range(N_KERNELS), scoped=True), kernel="triton_k00")
    assert "scope tables not shown" not in _summary_text(few)


def test_past_twenty_kernels_the_comparison_of_captures_shows_the_most_device_time():
    """Several captures (e.g. one per rank): the kernels of the most device time, KERNEL_TABLES
    of them, and a caption counting the others; --all every one."""
    from proton_lite.viewer.summary_render import KERNEL_TABLES
    from proton_lite.viewer.summary_set import render_summary_set, summarize_set
    a, b = _pair()
    result = summarize_set([a, b], ["rank0.plraw", "rank1.plraw"])
    want = [r["kernel"] for r in result["across"]]
    assert len(want) == N_KERNELS + 1
    for every, n in ((False, KERNEL_TABLES), (True, len(want))):
        console = Console(record=True, width=100)
        render_summary_set(result, console, every_kernel=every)
        text = console.export_text()
        rows = [line.split()[0] for line in text.splitlines() if line.lstrip().startswith("triton_k")]
        assert rows == want[:n]
        assert (f"{len(want) - KERNEL_TABLES} more kernels not shown" in text) == (not every)


def _many_kernel_capture(path, slower: float = 1.0, n_kernels: int = 25):
    """A capture of ``n_kernels`` scope-less kernels (lifetime blocks, 3 launches each, built to
    the documented layout by ``synth``), kernel 0's CTAs ``slower`` times longer."""
    from dataclasses import replace
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout
    from proton_lite.raw_format import RawWriter
    compact = replace(BufferLayout("cta", 4, 0, "global"), compact=True)
    g0, c0 = 1_764_000_000_000_000_000, 5_000_000_000
    w = RawWriter(str(path), {"name": path.stem})
    for k in range(n_kernels):
        w.kernel(kernel_meta(k, f"triton_k{k:03d}", [], compact))
    for n in range(3 * n_kernels):
        k = n % n_kernels
        span = int(2_000 * (slower if k == 0 else 1))
        ctas = [{"smid": i % 8, "start_gt": g0 + n * 10**5 + 50 * i, "start_clk": c0 + n * 10**6 + 99 * i,
                 "units": [(0, g0 + n * 10**5 + 50 * i + span + 3 * i, c0 + n * 10**6 + 99 * i + 2 * span, [])]}
                for i in range(16)]
        w.launch(k, 0, n, (16, 1, 1), 16, 0, 0, launch_buffer(compact, ctas))
    w.end({"launches": 3 * n_kernels})
    w.close()
    return str(path)


def test_the_cli_draws_every_kernel_with_all(tmp_path, capsys):
    """`summary` of several captures and `diff` of 25 kernels: the kernels past 20 counted, and
    drawn with --all (through the command line's flags)."""
    from proton_lite.viewer import cli
    a = _many_kernel_capture(tmp_path / "a.plraw")
    b = _many_kernel_capture(tmp_path / "b.plraw", slower=3.0)

    def run(*args):
        assert cli.main([str(x) for x in args]) == 0
        return capsys.readouterr().out
    text = run("diff", a, b)
    assert "triton_k000" in text and "24 kernel(s) with no clear change not shown" in text
    assert "triton_k024" in run("diff", a, b, "--all") and "not shown" not in run("diff", a, b, "--all")
    text = run("summary", a, b)
    assert "5 more kernels not shown" in text
    assert "more kernels not shown" not in run("summary", a, b, "--all")
