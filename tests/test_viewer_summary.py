"""viewer.summary against numbers computed here, independently, from a hand-built Profile."""
import io
import json
import math

import numpy as np
import pytest
from rich.console import Console

from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
from proton_lite.viewer.render import fmt_cycles, fmt_ns, fmt_share
from proton_lite.viewer.summary import render_summary, summarize

MATMUL_SCOPES = ["load", "mma", "inner", "epilogue"]  # "inner" always runs nested in "mma"


def _cta_plan():
    """(launch, cta, smid, start, end) by hand: the concurrency and waves are known by construction."""
    plan = []
    # launch 0 (matmul, 12 CTAs, SMs 0-2): on each SM two CTAs at [0,1000), then two at [1000,2000):
    # touching lifetimes do not overlap, so at most 2 at once -> waves = ceil(12 / (3 * 2)) = 2
    cta = 0
    for sm in range(3):
        for start in (0, 0, 1000, 1000):
            plan.append((0, cta, sm, start, start + 1000))
            cta += 1
    # launch 1 (matmul, 8 CTAs, SMs 0-3): one at a time per SM with a gap -> waves = ceil(8 / 4) = 2
    cta = 0
    for sm in range(4):
        for start in (5000, 5800):
            plan.append((1, cta, sm, start, start + 600))
            cta += 1
    # launch 2 (softmax, grid of 4, one CTA header missing): SM 0 has two overlapping CTAs, SM 1 one
    # -> 2 SMs, 2 at once, waves = ceil(4 / (2 * 2)) = 1
    plan += [(2, 0, 0, 7000, 8000), (2, 1, 0, 7500, 8200), (2, 2, 1, 7000, 7400)]
    return plan


def make_profile(timer_tick_ns=32, rates=None):
    rng = np.random.default_rng(1234)
    kernels = [KernelInfo("matmul_kernel", MATMUL_SCOPES, num_warps=4, granularity="warp", unit_warps=1, capacity=64),
               KernelInfo("softmax_kernel", ["row"], num_warps=8, granularity="cta", unit_warps=8, capacity=8)]
    plan = _cta_plan()
    ctas = np.zeros(len(plan), CTA_DTYPE)
    for i, (launch, cta, sm, start, end) in enumerate(plan):
        ctas[i]["launch"], ctas[i]["cta"], ctas[i]["smid"] = launch, cta, sm
        ctas[i]["start_ns"], ctas[i]["end_ns"] = start, end
    ctas["cycles_per_ns"] = 1.755
    ctas["measured_cycles_per_ns"] = 1.755 if rates is None else rates

    launches = np.zeros(3, LAUNCH_DTYPE)
    launches["launch"] = [0, 1, 2]
    launches["kernel"] = [0, 0, 1]
    launches["grid_x"], launches["grid_y"], launches["grid_z"] = [12, 8, 2], [1, 1, 2], [1, 1, 1]
    launches["num_ctas"] = [12, 8, 4]
    for row in launches:
        mine = ctas[ctas["launch"] == row["launch"]]
        row["start_ns"], row["end_ns"] = mine["start_ns"].min(), mine["end_ns"].max()
    launches["dropped"] = [0, 7, 0]
    launches["unit_records_max"] = [3, 41, 2]
    launches["unmatched"] = [0, 2, 0]
    launches["missing_ctas"] = [0, 0, 1]

    rows = []
    for c in ctas:
        if c["launch"] == 2:  # softmax: one unit per CTA, one scope over most of the lifetime
            d = int(rng.integers(200, 390))
            rows.append((c["launch"], c["cta"], 0, 0, 0, 0, c["start_ns"], c["start_ns"] + d, int(d * 1.755)))
            continue
        for warp in range(4):
            t = int(c["start_ns"])
            d_load, d_mma, d_epi = (int(x) for x in rng.integers([50, 150, 20], [120, 300, 60]))
            d_inner = int(rng.integers(10, d_mma - 5))
            for scope, depth, start, dur in ((0, 0, t, d_load), (1, 0, t + d_load, d_mma),
                                             (2, 1, t + d_load + 3, d_inner),
                                             (3, 0, t + d_load + d_mma, d_epi)):
                cycles = int(round(dur * 1.755)) + int(rng.integers(-3, 4))
                rows.append((c["launch"], c["cta"], warp, scope, depth, 0, start, start + dur, cycles))
    intervals = np.array(rows, dtype=INTERVAL_DTYPE)
    return Profile(kernels, launches, ctas, intervals,
                   session={"name": "unit", "device": "H100 SXM", "timer_tick_ns": timer_tick_ns})


@pytest.fixture(scope="module")
def profile():
    return make_profile()


def brute_max_concurrency(starts, ends):
    """Largest number of [start, end) intervals alive at one instant, by checking every start."""
    return max(sum(1 for s, e in zip(starts, ends) if s <= t < e) for t in starts)


def brute_union(starts, ends):
    timeline = np.zeros(int(max(ends)) + 1, dtype=bool)
    for s, e in zip(starts, ends):
        timeline[s:e] = True
    return int(timeline.sum())


def test_launch_rows_match_hand_computed_values(profile):
    s = summarize(profile)
    assert [r["launch"] for r in s["launches"]] == [0, 1, 2]
    for row, launch in zip(s["launches"], profile.launches):
        mine = profile.ctas[profile.ctas["launch"] == launch["launch"]]
        k = profile.kernels[launch["kernel"]]
        sms = sorted(set(mine["smid"].tolist()))
        conc = max(brute_max_concurrency(mine["start_ns"][mine["smid"] == sm].tolist(),
                                         mine["end_ns"][mine["smid"] == sm].tolist()) for sm in sms)
        assert row["kernel"] == k.name
        assert row["grid"] == [launch["grid_x"], launch["grid_y"], launch["grid_z"]]
        assert row["warps"] == k.num_warps
        assert row["duration_ns"] == launch["end_ns"] - launch["start_ns"]
        assert row["ctas"] == launch["num_ctas"]
        assert row["ctas_recorded"] == len(mine)
        assert row["sms_used"] == len(sms)
        assert row["max_ctas_per_sm"] == conc
        assert row["waves"] == math.ceil(launch["num_ctas"] / (len(sms) * conc))
    # and the values the plan was built for
    assert [r["max_ctas_per_sm"] for r in s["launches"]] == [2, 1, 2]
    assert [r["waves"] for r in s["launches"]] == [2, 2, 1]
    assert [r["duration_ns"] for r in s["launches"]] == [2000, 1400, 1200]


def test_scope_statistics_match_numpy(profile):
    s = summarize(profile)
    rows = {(r["kernel"], r["scope"]): r for r in s["scopes"]}
    assert set(rows) == {("matmul_kernel", n) for n in MATMUL_SCOPES} | {("softmax_kernel", "row")}
    iv = profile.intervals
    kernel_of_launch = {0: 0, 1: 0, 2: 1}
    for (kname, sname), row in rows.items():
        kidx = [i for i, k in enumerate(profile.kernels) if k.name == kname][0]
        sidx = profile.kernels[kidx].scopes.index(sname)
        mask = np.array([kernel_of_launch[int(l)] == kidx for l in iv["launch"]]) & (iv["scope"] == sidx)
        d = (iv["end_ns"][mask] - iv["start_ns"][mask]).astype(float)
        c = iv["cycles"][mask].astype(float)
        assert row["count"] == mask.sum()
        assert row["total"] == d.sum()
        assert row["mean"] == pytest.approx(d.mean())
        assert row["min"] == d.min() and row["max"] == d.max()
        for q in (50, 90, 99):
            assert row[f"p{q}"] == pytest.approx(np.percentile(d, q))
            assert row["cycles"][f"p{q}"] == pytest.approx(np.percentile(c, q))
        assert row["cycles"]["mean"] == pytest.approx(c.mean())
        assert row["cycles"]["total"] == c.sum()
        assert row["cycles"]["min"] == c.min() and row["cycles"]["max"] == c.max()


def test_share_is_depth0_time_over_unit_cta_time(profile):
    s = summarize(profile)
    rows = {(r["kernel"], r["scope"]): r for r in s["scopes"]}
    mm = profile.ctas[profile.ctas["launch"] != 2]
    unit_time_mm = 4 * int((mm["end_ns"] - mm["start_ns"]).sum())  # 4 warps per CTA
    iv = profile.intervals[profile.intervals["launch"] != 2]
    for i, name in enumerate(MATMUL_SCOPES):
        sel = (iv["scope"] == i) & (iv["depth"] == 0)
        expected = (iv["end_ns"][sel] - iv["start_ns"][sel]).sum() / unit_time_mm
        assert rows[("matmul_kernel", name)]["share"] == pytest.approx(expected)
    assert rows[("matmul_kernel", "inner")]["share"] == 0  # only nested
    inner = iv["scope"] == 2
    assert rows[("matmul_kernel", "inner")]["inclusive_share"] == pytest.approx(
        (iv["end_ns"][inner] - iv["start_ns"][inner]).sum() / unit_time_mm)
    depth0_sum = sum(rows[("matmul_kernel", n)]["share"] for n in MATMUL_SCOPES)
    assert 0 < depth0_sum <= 1
    # softmax has CTA granularity: one unit per CTA
    sm = profile.ctas[profile.ctas["launch"] == 2]
    siv = profile.intervals[profile.intervals["launch"] == 2]
    assert rows[("softmax_kernel", "row")]["share"] == pytest.approx(
        (siv["end_ns"] - siv["start_ns"]).sum() / (sm["end_ns"] - sm["start_ns"]).sum())


def test_per_sm_busy_time_is_the_union_of_cta_lifetimes(profile):
    s = summarize(profile)
    ctas = profile.ctas
    assert [r["sm"] for r in s["sms"]] == sorted(set(ctas["smid"].tolist()))
    for r in s["sms"]:
        mine = ctas[ctas["smid"] == r["sm"]]
        assert r["ctas"] == len(mine)
        assert r["busy_ns"] == brute_union(mine["start_ns"].tolist(), mine["end_ns"].tolist())
    # SM 0: [0,2000) + [5000,5600) + [5800,6400) + [7000,8200)
    assert s["sms"][0]["busy_ns"] == 2000 + 600 + 600 + 1200


def test_kernel_and_scope_filters(profile):
    s = summarize(profile, kernel="SOFTMAX")
    assert [r["kernel"] for r in s["launches"]] == ["softmax_kernel"]
    assert {r["kernel"] for r in s["scopes"]} == {"softmax_kernel"}
    assert [r["sm"] for r in s["sms"]] == [0, 1]
    assert not [w for w in s["warnings"] if w["kind"] == "dropped"]  # the drops are in matmul
    s = summarize(profile, scope="mma")
    assert [(r["kernel"], r["scope"]) for r in s["scopes"]] == [("matmul_kernel", "mma")]
    s = summarize(profile, scope="mm")  # exact name only
    assert s["scopes"] == []
    assert any(w["kind"] == "filter" and "mma" in w["message"] for w in s["warnings"])
    s = summarize(profile, kernel="nope")
    assert s["launches"] == [] and s["scopes"] == [] and s["sms"] == []
    assert any(w["kind"] == "filter" and "matmul_kernel" in w["message"] for w in s["warnings"])


@pytest.mark.parametrize("key", ["total", "mean", "count", "p99", "name"])
def test_sort_keys_and_top(profile, key):
    rows = summarize(profile, sort=key)["scopes"]
    if key == "name":
        expected = sorted((r["kernel"], r["scope"]) for r in rows)
    else:
        expected = [(r["kernel"], r["scope"]) for r in sorted(rows, key=lambda r: (-r[key], r["kernel"], r["scope"]))]
    assert [(r["kernel"], r["scope"]) for r in rows] == expected
    top = summarize(profile, sort=key, top=2)
    assert [(r["kernel"], r["scope"]) for r in top["scopes"]] == expected[:2]
    assert top["scopes_total"] == len(expected) == 5


def test_bad_sort_key_is_refused(profile):
    with pytest.raises(ValueError, match="sort"):
        summarize(profile, sort="fastest")


def test_warnings_dropped_unmatched_missing(profile):
    w = {x["kind"]: x for x in summarize(profile)["warnings"]}
    assert w["dropped"]["count"] == 7 and w["dropped"]["launches"] == 1
    # the option that keeps them, with the number the busiest unit needed (launch 1: 41)
    for word in ("loop_capacity=41", "capacity=41", 'buffer_mode="circular"'):
        assert word in w["dropped"]["hint"]
    assert w["dropped"]["keep_all_records"] == 41
    assert "7" in w["dropped"]["message"]
    assert w["unmatched"]["count"] == 2
    assert w["missing_ctas"]["count"] == 1
    assert "coarse_timer" not in w  # 32 ns tick
    assert "clock_rate" not in w  # all CTAs at the same plausible rate


def test_coarse_timer_warning():
    w = {x["kind"]: x for x in summarize(make_profile(timer_tick_ns=1000))["warnings"]}
    assert w["coarse_timer"]["timer_tick_ns"] == 1000
    assert "1000 ns" in w["coarse_timer"]["message"]
    assert "coarse_timer" not in {x["kind"] for x in summarize(make_profile(timer_tick_ns=100))["warnings"]}


def test_clock_rate_anomalies():
    n = len(_cta_plan())
    rates = np.full(n, 1.75)
    smid = np.array([p[2] for p in _cta_plan()])
    on_sm1 = np.flatnonzero(smid == 1)
    rates[on_sm1[0]] = 1.90  # 8.6% above its SM's median (1.75): flagged
    rates[on_sm1[1]] = 1.80  # 2.9% above: fine
    rates[np.flatnonzero(smid == 2)[0]] = 2.5  # outside [0.3, 2.2]: flagged
    rates[np.flatnonzero(smid == 3)[0]] = np.nan  # too short to measure: ignored
    w = {x["kind"]: x for x in summarize(make_profile(rates=rates))["warnings"]}["clock_rate"]
    assert w["count"] == 2
    assert w["out_of_range"] == 1
    assert w["checked"] == n - 1
    flagged = {(e["launch"], e["cta"]) for e in w["examples"]}
    plan = _cta_plan()
    assert flagged == {plan[on_sm1[0]][:2], plan[np.flatnonzero(smid == 2)[0]][:2]}
    assert w["examples"][0]["measured_cycles_per_ns"] == 2.5  # out of range first


def test_summary_is_json_and_deterministic(profile):
    a = json.dumps(summarize(profile, sort="p99", top=3), allow_nan=False)
    b = json.dumps(summarize(profile, sort="p99", top=3), allow_nan=False)
    assert a == b
    assert json.loads(a)["scopes"][0]["scope"] == summarize(profile, sort="p99")["scopes"][0]["scope"]


def test_session_warnings_are_passed_through():
    p = make_profile()
    p.session["warnings"] = ["clock64 wrapped in launch 3"]
    msgs = [w["message"] for w in summarize(p)["warnings"] if w["kind"] == "session"]
    assert msgs == ["clock64 wrapped in launch 3"]


def test_kernels_that_lost_scopes_at_compile_are_named_with_the_reason():
    p = make_profile()
    p.kernels[1].meta = {"lost_scopes": {"scopes": ["qk", "pv"], "reason": "Triton's warp specialization removed "
                                         "their markers", "fix": "move them outside the loop"}}
    lost = [w for w in summarize(p)["warnings"] if w["kind"] == "lost_scopes"]
    assert [(w["kernel"], w["scopes"]) for w in lost] == [("softmax_kernel", ["qk", "pv"])]
    assert "'qk', 'pv' have no records: Triton's warp specialization" in lost[0]["message"]
    assert "move them outside the loop" in _render(summarize(p), width=200)
    assert not [w for w in summarize(make_profile())["warnings"] if w["kind"] == "lost_scopes"]


def _render(summary, width=80):
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    render_summary(summary, console)
    return console.export_text()


def test_render_fits_80_columns_and_shows_key_numbers(profile):
    s = summarize(profile)
    text = _render(s)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    mma = next(r for r in s["scopes"] if r["scope"] == "mma")
    for needle in (fmt_ns(mma["p99"]), fmt_ns(mma["p50"]), fmt_ns(mma["total"]), fmt_ns(mma["mean"]),
                   fmt_cycles(mma["cycles"]["p99"]), fmt_share(mma["share"]), "matmul_kernel", "epilogue",
                   "7 records dropped", "loop_capacity"):
        assert needle in text, needle
    launch0 = next(line for line in lines if line.lstrip().startswith("0 ") and "matmul" in line)
    assert "12x1x1" in launch0 and "2.00 µs" in launch0 and launch0.rstrip().endswith("2")  # 2 waves


def test_render_stays_in_80_columns_with_long_names_and_many_sms():
    p = make_profile()
    p.kernels[0].name = "fused_attention_forward_kernel_with_a_very_long_autotuned_name_BLOCK_M128_N64"
    p.kernels[0].scopes = [n + "_stage_with_a_long_descriptive_name" for n in MATMUL_SCOPES]
    p.ctas["smid"] = np.arange(len(p.ctas)) * 5 % 132  # many SMs
    text = _render(summarize(p))
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "SMs (23 used)" in text


def test_human_units():
    assert fmt_ns(850) == "850 ns"
    assert fmt_ns(12.25) == "12.2 ns" or fmt_ns(12.25) == "12.3 ns"
    assert fmt_ns(12_345) == "12.3 µs"
    assert fmt_ns(999_700) == "1.00 ms"
    assert fmt_ns(2_500_000_000) == "2.50 s"
    assert fmt_cycles(1234) == "1.23k" and fmt_cycles(999) == "999" and fmt_cycles(4.2e6) == "4.20M"
    assert fmt_ns(None) == "-"


def test_scopes_of_kernels_that_lost_records_are_marked_incomplete():
    p = make_profile()  # launch 1 (matmul_kernel) dropped 7 records; softmax_kernel lost a CTA header
    rows = summarize(p)["scopes"]
    assert {r["kernel"]: r["incomplete"] for r in rows} == {"matmul_kernel": True, "softmax_kernel": True}
    p.launches["missing_ctas"] = 0
    rows = summarize(p)["scopes"]
    assert {r["kernel"]: r["incomplete"] for r in rows} == {"matmul_kernel": True, "softmax_kernel": False}
    text = _render(summarize(p), width=120)
    assert "load *" in text and "row *" not in text and text.count("* incomplete: records or launches behind") == 1
    p.launches["dropped"] = 0
    p.launches["unmatched"] = 0
    assert not any(r["incomplete"] for r in summarize(p)["scopes"])
    assert "incomplete" not in _render(summarize(p), width=120)


def test_replays_of_cuda_graphs_are_counted_named_and_their_overruns_warned():
    """Launches 1 and 2 as replays 0 and 1 of graph 1 (what the decoder fills from a capture's
    REPLAYS rows), and 5 replays of the softmax that found their ring full (END chunk)."""
    prof = make_profile()
    prof.launches["graph"] = [0, 1, 1]
    prof.launches["graph_node"] = [0, 0, 1]
    prof.launches["replay"] = [0, 0, 1]
    prof.session["graph_overruns"] = {"softmax_kernel": 5}
    s = summarize(prof)
    assert (s["session"]["graph_replays"], s["session"]["graphs"]) == (2, 1)
    assert [(r["graph"], r["replay"]) for r in s["launches"]] == [(0, 0), (1, 0), (1, 1)]
    (w, ) = [w for w in s["warnings"] if w["kind"] == "graph_overruns"]
    assert w["count"] == 5 and "softmax_kernel (5)" in w["message"] and "graph_slots=" in w["hint"]
    buf = io.StringIO()
    render_summary(s, Console(file=buf, width=120))
    text = buf.getvalue()
    assert "launches: 3 (2 replays of 1 CUDA graph)" in text
    assert "softmax_kernel (graph 1 replay 1)" in text
    assert "softmax_kernel" in s["incomplete"] and "CUDA graph replay" in " ".join(s["incomplete"]["softmax_kernel"])
    eager = summarize(make_profile())
    assert eager["session"]["graph_replays"] == 0 and not [w for w in eager["warnings"] if w["kind"] == "graph_overruns"]


def test_the_buffer_copies_of_a_kernel_staged_in_blocks_are_named_with_their_time(tmp_path):
    """A kernel whose records were staged in blocks: the summary says how often its warps
    copied them to the buffer and how long that took, so that the scopes those copies sat
    in are read knowing it; the copy scope is a row of its own."""
    from proton_lite.decode import decode
    from proton_lite.layout import COPY_SCOPE, BufferLayout, encode_tag
    from proton_lite.raw_format import read_raw
    from synth import RawWriter, kernel_meta, launch_buffer
    layout = BufferLayout("warp", 1, 6, "shared", overflow="sink", flush_slots=4)
    path = str(tmp_path / "c.plraw")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "rows", ["row", COPY_SCOPE], layout))
    clk = 1_000_000
    recs = [(encode_tag(0, False), clk + 100), (encode_tag(1, False), clk + 200), (encode_tag(1, True), clk + 1700),
            (encode_tag(0, True), clk + 3100)]
    w.launch(0, 0, 0, (2, 1, 1), 2, 0, 0, launch_buffer(layout, [
        {"smid": i, "start_gt": 10**9, "start_clk": clk, "units": [(4, 10**9 + 2200, clk + 3300, recs)]}
        for i in range(2)]))
    w.end({"launches": 1})
    w.close()
    s = summarize(decode(read_raw(path)))
    (note, ) = [x for x in s["warnings"] if x["kind"] == "buffer_copies"]
    assert note["count"] == 2 and note["kernel"] == "rows" and note["ns"] == 2 * 1000  # 1,500 cycles at 1.5/ns
    assert COPY_SCOPE in note["message"]
    assert {r["scope"] for r in s["scopes"]} >= {"row", COPY_SCOPE}


def test_the_clock_rate_check_takes_each_sms_median_of_its_measured_ctas():
    """``summary``'s clock check (``summary_checks.clock_warning``): CTAs whose measured rate is
    off their SM's median, against the median of each SM's measured CTAs taken one by one."""
    from proton_lite.profile_data import CTA_DTYPE
    from viewer.summary_checks import CLOCK_RATE_SM_TOLERANCE, clock_warning
    rng = np.random.default_rng(3)
    n = 20_000
    ctas = np.zeros(n, CTA_DTYPE)
    ctas["smid"] = rng.integers(0, 9, n)
    rate = 1.98 + rng.normal(0, 0.002, n) + 0.05 * (ctas["smid"] == 4)  # SM 4 runs faster: not off its median
    rate[rng.random(n) < 0.01] *= 0.8  # off their SM's median
    rate[rng.random(n) < 0.3] = np.nan  # too short to measure
    ctas["measured_cycles_per_ns"] = rate
    medians = {s: np.median(rate[(ctas["smid"] == s) & ~np.isnan(rate)]) for s in range(9)}
    off = [i for i in range(n) if not np.isnan(rate[i])
           and abs(rate[i] - medians[int(ctas["smid"][i])]) / medians[int(ctas["smid"][i])] > CLOCK_RATE_SM_TOLERANCE]
    w = clock_warning(ctas)
    assert w["checked"] == int((~np.isnan(rate)).sum()) and w["off_sm_median"] == len(off) > 100
    for e in w["examples"]:
        assert e["sm_median"] == medians[e["sm"]]
