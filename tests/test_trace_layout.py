"""The two track trees (proton_lite/trace/plan.py): a group per launch, or SM rows shared by
every launch of a GPU ("sm"), and ``auto`` choosing between them.

Checked against references written here: with the sm layout, Perfetto's real importer finds
every CTA once, on a slot of its own SM, named after its launch, with no two CTAs of any
launches overlapping on a slot and as many slots per SM as CTAs of the whole session
overlapped on it; one launch slice per launch over its CTAs' span, on rows where no two
overlap; resident-CTA counters counted here CTA by CTA; the exact round trip in both
formats (hand-made profiles with every layout case, merged captures, two GPUs); the track
count of 1,024 launches bounded by the GPU instead of the program; ``auto``'s choice; and
events too long for one-byte lengths (launch titles of long kernel names).
"""
import os
import sys

import numpy as np
import pytest

import trace_processor as tp
from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, Profile
from proton_lite.trace import load_trace, write_trace
from proton_lite.trace._proto import Rows, read_varint
from proton_lite.trace.plan import AUTO_TRACKS, launch_layout_tracks, most_at_once, plan_trace
from proton_lite.trace.rows import pack_slots
from proton_lite.trace.tree import _sorted_launches, _time_shift
from synth import wave_profile
from test_trace import FORMATS, _kernel, assert_same_profile, synthetic_profile
from test_trace_packing import extents, max_overlap

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "benchmarks"))
needs_tp = pytest.mark.skipif(tp.missing() is not None, reason=f"trace processor unavailable: {tp.missing()}")

KERNELS = [_kernel("rms_norm_fwd", ["load", "reduce"], warps=4),
           _kernel("attn_fwd", ["producer", "consumer"], warps=8, gran="warpgroup", unit_warps=4),
           _kernel("copy_rows", [], warps=4, gran="cta")]


def session_profile(n_launches=24, sms=6, seed=0, overlap_every=4, kernels=KERNELS) -> Profile:
    """A session of many launches of three kernels (warp and warpgroup scopes, one without
    scopes), each of 3 to 20 CTAs dealt round-robin over ``sms`` SMs, at most 2 per SM at
    once; every ``overlap_every``-th launch starts while the one before still runs (another
    stream), so CTAs of two launches share SMs at once."""
    rng = np.random.default_rng(seed)
    la = np.zeros(n_launches, LAUNCH_DTYPE)
    ctas, ivs, t = [], [], 1000
    for li in range(n_launches):
        k = li % len(kernels)
        n = int(rng.integers(3, 21))
        la[li]["launch"], la[li]["kernel"], la[li]["grid_x"], la[li]["num_ctas"] = li, k, n, n
        la[li]["stream"] = 7 + (li % overlap_every == 0)
        start = t - 900 if li and li % overlap_every == 0 else t
        end = start
        for c in range(n):
            s = start + (c // (2 * sms)) * 700 + int(rng.integers(0, 50))
            e = s + int(rng.integers(300, 650))
            ctas.append((li, c, c % sms, s, e, 10 * s, 10 * e, 1.9, 1.9, 1))
            end = max(end, e)
            if kernels[k].scopes:
                units = kernels[k].num_warps // kernels[k].unit_warps
                for u in range(units):
                    a = s + int(rng.integers(0, 20))
                    m = a + int(rng.integers(10, 150))
                    ivs.append((li, c, u, 0, 0, 0, a, m, 2 * (m - a)))
                    ivs.append((li, c, u, 1, 0, 0, m, min(e, m + 100), 2 * (min(e, m + 100) - m)))
        la[li]["start_ns"], la[li]["end_ns"] = start, end
        t = max(t, end) + int(rng.integers(20, 200))
    return Profile(list(kernels), la, np.array(ctas, CTA_DTYPE), np.array(ivs, INTERVAL_DTYPE))


def by_sm(p: Profile) -> dict:
    """SM -> {(launch, cta): extent}: the CTAs of every launch that ran on it."""
    ext, out = extents(p), {}
    for c in p.ctas:
        key = (int(c["launch"]), int(c["cta"]))
        out.setdefault(int(c["smid"]), {})[key] = tuple(ext[key])
    return out


def _cta_rows(path, fmt: str) -> list[dict]:
    if fmt == "perfetto":
        q = ("select p.name as sm, t.id as slot, s.name, s.ts, s.dur, "
             "(select int_value from args a where a.arg_set_id = s.arg_set_id and a.key = 'debug.cta') as cta, "
             "(select int_value from args a where a.arg_set_id = s.arg_set_id and a.key = 'debug.launch') as launch "
             "from slice s join track t on s.track_id = t.id join track p on t.parent_id = p.id "
             "where t.name like 'slot %'")
    else:
        q = ("select pr.name as sm, t.utid as slot, s.name, s.ts, s.dur, "
             "(select int_value from args a where a.arg_set_id = s.arg_set_id and a.key = 'args.cta') as cta, "
             "(select int_value from args a where a.arg_set_id = s.arg_set_id and a.key = 'args.launch') as launch "
             "from slice s join thread_track t on s.track_id = t.id join thread th using (utid) "
             "join process pr using (upid) where th.name like 'slot %' and th.name not like 'slot % %'")
    return tp.query(str(path), [q])[0]


def _launch_rows(path, fmt: str) -> list[dict]:
    key = "debug" if fmt == "perfetto" else "args"
    if fmt == "perfetto":
        where = "from slice s join track t on s.track_id = t.id where t.name like 'launches%'"
    else:
        where = ("from slice s join thread_track t on s.track_id = t.id join thread th using (utid) "
                 "where th.name like 'launches%'")
    q = (f"select s.name, s.ts, s.dur, s.track_id as row, "
         f"(select int_value from args a where a.arg_set_id = s.arg_set_id and a.key = '{key}.launch') as launch, "
         f"(select int_value from args a where a.arg_set_id = s.arg_set_id and a.key = '{key}.ctas') as ctas "
         + where)
    return tp.query(str(path), [q])[0]


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_sm_rows_shared_by_launches_hold_every_cta_once_without_overlap(tmp_path, fmt, ext):
    p = session_profile()
    path = tmp_path / f"s{ext}"
    stats = write_trace(p, path, fmt, layout="sm")
    assert stats["layout"] == "sm"
    bad, count = tp.query(str(path), [tp.BAD_STATS, "select count(*) as n from slice"])
    assert bad == [] and count == [{"n": len(p.ctas) + len(p.intervals) + len(p.launches)}]  # + the launch slices
    rows, shift = _cta_rows(path, fmt), _time_shift(p)
    sms, names = by_sm(p), {i: k.name for i, k in enumerate(p.kernels)}
    kernel_of = {int(la["launch"]): names[int(la["kernel"])] for la in p.launches}
    start = {(int(c["launch"]), int(c["cta"])): int(c["start_ns"]) for c in p.ctas}
    seen, on_slot, slots_of = {}, {}, {}
    for r in rows:
        key, sm = (r["launch"], r["cta"]), int(r["sm"].rsplit(" ", 1)[1])
        assert r["sm"] == (f"SM {sm}" if fmt == "perfetto" else f"GPU 0 SM {sm}")  # the JSON's process: GPU and SM
        assert key in sms[sm], (key, sm)  # on its own SM's rows
        assert r["name"] == f"{kernel_of[key[0]]} #{key[0]}"  # named (and coloured) after its launch
        assert r["ts"] - shift == start[key]
        seen[key] = seen.get(key, 0) + 1
        on_slot.setdefault(r["slot"], []).append(sms[sm][key])
        slots_of.setdefault(sm, set()).add(r["slot"])
    assert seen == {k: 1 for k in start}
    for spans in on_slot.values():  # CTAs of any launches never overlap on one slot
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    # slots per SM: the most CTAs of the whole session it held at once
    assert {sm: len(v) for sm, v in slots_of.items()} == {sm: max_overlap(list(g.values())) for sm, g in sms.items()}
    assert max(len(v) for v in slots_of.values()) > 2  # the overlapping launches did share SMs at once


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_the_launch_row_has_one_slice_per_launch_over_its_ctas(tmp_path, fmt, ext):
    p = session_profile()
    path = tmp_path / f"s{ext}"
    write_trace(p, path, fmt, layout="sm")
    rows, shift = _launch_rows(path, fmt), _time_shift(p)
    assert sorted(r["launch"] for r in rows) == sorted(int(x) for x in p.launches["launch"])
    for r in rows:
        mine = p.ctas[p.ctas["launch"] == r["launch"]]
        assert r["ts"] - shift == int(mine["start_ns"].min())
        assert r["ts"] + r["dur"] - shift == int(mine["end_ns"].max())
        assert r["ctas"] == len(mine)
        la = p.launches[p.launches["launch"] == r["launch"]][0]
        assert r["name"].startswith(f"#{r['launch']} {p.kernels[int(la['kernel'])].name} grid=(")
    per_row = {}
    for r in rows:
        per_row.setdefault(r["row"], []).append((r["ts"], r["ts"] + r["dur"]))
    assert len(per_row) == 2  # the launches that start while another runs go to a second row
    for spans in per_row.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans


@needs_tp
def test_gpu_and_sm_counters_count_the_ctas_of_every_launch(tmp_path):
    p = session_profile(n_launches=12, sms=3)
    write_trace(p, tmp_path / "s.pftrace", "perfetto", layout="sm")
    samples, = tp.query(str(tmp_path / "s.pftrace"), [
        "select c.ts, c.value, t.name from counter c join track t on c.track_id = t.id order by t.name, c.ts"])
    shift = _time_shift(p)
    series = {}
    for s in samples:
        series.setdefault(s["name"], []).append((s["ts"] - shift, int(s["value"])))
    gpu = [n for n in series if n.startswith("GPU 0 · ")]
    assert gpu == ["GPU 0 · 12 launches of 3 kernels"] and set(series) - set(gpu) == {"SM 0", "SM 1", "SM 2"}
    for name, points in series.items():
        mine = p.ctas if name in gpu else p.ctas[p.ctas["smid"] == int(name.split()[1])]

        def resident(t):
            return int(((mine["start_ns"] <= t) & (t < mine["end_ns"])).sum())
        assert all(v == resident(t) for t, v in points), name
        times = sorted(set(mine["start_ns"].tolist()) | set(mine["end_ns"].tolist()))
        counts = [resident(t) for t in times]
        assert [t for t, _ in points] == [t for t, a, b in zip(times, counts, [0] + counts[:-1]) if a != b], name


@pytest.mark.parametrize("fmt,ext", FORMATS)
@pytest.mark.parametrize("make", [session_profile, synthetic_profile,
                                  lambda: wave_profile(n_ctas=500, launches=3, sms=6, resident=4, early=0.1,
                                                       late=0.05, touching=0.3, seed=2)],
                         ids=["session", "every-case", "waves"])
def test_the_sm_layout_round_trips_exactly(tmp_path, fmt, ext, make):
    p = make()
    path = tmp_path / f"r{ext}"
    write_trace(p, path, fmt, layout="sm")
    assert_same_profile(p, load_trace(path))


@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_two_gpus_and_merged_captures_get_a_group_each(tmp_path, fmt, ext):
    p = session_profile(n_launches=10)
    p.launches["device"][1::2] = 1  # every other launch on a second GPU
    path = tmp_path / f"d{ext}"
    stats = write_trace(p, path, fmt, layout="sm")
    q = load_trace(path)
    assert_same_profile(p, q)
    plan = plan_trace(p, _sorted_launches(p), "sm")
    assert plan.tops.titles == ["GPU 0 · 5 launches of 3 kernels", "GPU 1 · 5 launches of 3 kernels"]
    assert stats["layout"] == "sm"
    # a merge of two captures of one GPU each: a group per (capture, GPU)
    p.launches["device"] = 0
    p.session = {"merged_from": [{"name": "rank0", "rank": 0, "launches": [0, 4]},
                                 {"name": "rank1", "rank": 1, "launches": [4, 10]}]}
    write_trace(p, path, fmt, layout="sm")
    assert_same_profile(p, load_trace(path))
    tops = plan_trace(p, _sorted_launches(p), "sm").tops
    assert list(tops.capture) == [0, 1] and len(tops.titles) == 2


def test_auto_keeps_a_group_per_launch_until_the_trace_is_too_large_for_the_ui(tmp_path):
    few = wave_profile(n_ctas=600, launches=2, sms=8, resident=4)
    assert write_trace(few, tmp_path / "few.pftrace", "perfetto")["layout"] == "launch"
    from decode_speed import build_capture
    from proton_lite.pipeline import load_profile
    raw = str(tmp_path / "steps.plraw")
    build_capture(raw, "small")  # 1,024 launches x 64 CTAs x 4 warps recording
    many = load_profile(raw)
    auto = write_trace(many, tmp_path / "many.pftrace", "perfetto")
    by_launch = write_trace(many, tmp_path / "many_l.pftrace", "perfetto", layout="launch")
    assert auto["layout"] == "sm" and by_launch["layout"] == "launch"
    assert by_launch["tracks"] > AUTO_TRACKS
    sms = len(np.unique(many.ctas["smid"]))
    # GPU + its launch row + per SM: the SM, its slots, 4 warps per slot (CTAs run one at a time here)
    assert auto["tracks"] == 2 + sms * (1 + 1 + 4), auto["tracks"]
    assert auto["tracks"] * 1000 < by_launch["tracks"]
    assert write_trace(many, tmp_path / "many.json", "chrome")["layout"] == "sm"
    assert write_trace(few, tmp_path / "few.pftrace", "perfetto", layout="sm")["layout"] == "sm"
    with pytest.raises(ValueError, match="unknown trace layout 'gpu'; valid layouts: auto, launch, sm"):
        write_trace(few, tmp_path / "x.pftrace", "perfetto", layout="gpu")


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_slots_shared_by_kernels_name_their_unit_tracks(tmp_path, fmt, ext):
    """A slot holding CTAs of a warp kernel and a warpgroup kernel names its unit tracks
    ``unit N``; one holding a single kernel's, by that kernel's granularity."""
    p = session_profile(n_launches=6, sms=2)
    write_trace(p, tmp_path / f"u{ext}", fmt, layout="sm")
    if fmt == "perfetto":
        q = "select distinct t.name from track t join track s on t.parent_id = s.id where s.name like 'slot %'"
    else:
        q = "select distinct name from thread where name like 'slot % %'"
    names = {r["name"].split(" ", 2)[-1] if fmt == "chrome" else r["name"] for r in tp.query(str(tmp_path / f"u{ext}"),
                                                                                              [q])[0]}
    assert "unit 0" in names and "unit 1" in names, names  # warp 0 / warpgroup 0 share these tracks
    one = session_profile(n_launches=6, sms=2, kernels=[KERNELS[1]])
    write_trace(one, tmp_path / f"w{ext}", fmt, layout="sm")
    names = {r["name"].split(" ", 2)[-1] if fmt == "chrome" else r["name"] for r in tp.query(str(tmp_path / f"w{ext}"),
                                                                                              [q])[0]}
    assert names == {"warpgroup 0", "warpgroup 1"}, names


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_long_kernel_names_make_events_past_127_bytes_that_import_whole(tmp_path, fmt, ext):
    """The launch slices carry the whole title (two-byte lengths in the .pftrace), the CTA
    slices the whole kernel name (interned once per launch)."""
    long = "triton_per_fused__native_batch_norm_legit_functional_add_mul_rsqrt_sum_" * 3
    kernels = [_kernel(long, ["load", "reduce"], warps=4), KERNELS[1], KERNELS[2]]
    p = session_profile(n_launches=6, sms=2, kernels=kernels)
    path = tmp_path / f"n{ext}"
    write_trace(p, path, fmt, layout="sm")
    bad, count = tp.query(str(path), [tp.BAD_STATS, "select count(*) as n from slice"])
    assert bad == [] and count == [{"n": len(p.ctas) + len(p.intervals) + len(p.launches)}]
    cta_names = {r["name"] for r in _cta_rows(path, fmt)}
    assert f"{long} #0" in cta_names and f"{long} #3" in cta_names
    assert any(r["name"].startswith(f"#0 {long} grid=") for r in _launch_rows(path, fmt))  # the whole name
    assert_same_profile(p, load_trace(path))


@pytest.mark.parametrize("seed", range(5))
def test_the_sweep_that_sizes_auto_counts_the_slots_packing_makes(seed):
    """``auto`` sizes the launch layout by a sweep instead of packing: the same count per group
    as the packing's slots and as a brute-force overlap count (touching and zero-length spans)."""
    rng = np.random.default_rng(seed)
    group = np.sort(rng.integers(0, 6, 300))
    lo = rng.integers(0, 200, 300)
    hi = lo + np.where(rng.random(300) < 0.1, 0, rng.integers(1, 40, 300))
    hi = np.maximum(hi, lo + 1)  # as cta_extents gives them: at least 1 ns
    got = most_at_once(group, lo, hi, 6)
    slot = pack_slots(group, lo, hi)
    for g in range(6):
        m = group == g
        assert got[g] == (int(slot[m].max()) + 1 if m.any() else 0)
        assert got[g] == max_overlap(list(zip(lo[m].tolist(), hi[m].tolist())))


def test_auto_s_count_of_the_launch_layout_is_the_writer_s_and_its_bounds_agree(tmp_path):
    """Where every warp records and no unit records outside its CTA's lifetime, the count
    ``auto`` decides by is the launch layout's track count; with a limit, the bounds it
    tries first give the same answer to "over the limit?" as the full count."""
    for p in (session_profile(n_launches=30, sms=5), session_profile(n_launches=8, sms=3, seed=4),
              wave_profile(n_ctas=300, launches=3, sms=4, resident=3)):
        launches = _sorted_launches(p)
        full = launch_layout_tracks(p, launches)
        assert full == write_trace(p, tmp_path / "l.pftrace", "perfetto", layout="launch")["tracks"]
        for limit in (10, full // 3, full - 1, full, full + 1, 10 * full):
            assert (launch_layout_tracks(p, launches, limit) > limit) == (full > limit), (full, limit)


@pytest.mark.parametrize("length", [0, 1, 127, 128, 300, 16383])
def test_wide_length_prefixes_are_protobuf_varints(length):
    r = Rows(1)
    col = r.placeholder(wide=True)
    mark = r.mark()
    for _ in range(length):
        r.const(b"x")
    r.set_length(col, r.length_since(mark))
    data = r.tobytes()
    value, body = read_varint(data, 0)
    assert value == length and len(data) - body == length


def test_a_wide_length_of_16384_bytes_is_refused():
    r = Rows(1)
    col = r.placeholder(wide=True)
    with pytest.raises(ValueError, match="16,384"):
        r.set_length(col, np.array([1 << 14]))


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_a_profile_without_ctas_in_the_sm_layout(tmp_path, fmt, ext):
    p = synthetic_profile()
    p.ctas, p.intervals = np.zeros(0, CTA_DTYPE), np.zeros(0, INTERVAL_DTYPE)
    path = tmp_path / f"e{ext}"
    assert write_trace(p, path, fmt, layout="sm")["layout"] == "sm"
    assert tp.query(str(path), [tp.BAD_STATS]) == [[]]
    assert_same_profile(p, load_trace(path))


def test_launches_are_sorted_and_duplicate_ids_refused():
    """``tree._sorted_launches``: the launch rows in launch order (the other fields in any order),
    a duplicate launch id or a kernel index past the table refused."""
    import numpy as np
    import pytest
    from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
    from proton_lite.trace.tree import _sorted_launches
    kernels = [KernelInfo(name="k", scopes=[], num_warps=4, granularity="cta", unit_warps=4, capacity=0, meta={})]
    launches = np.zeros(5, LAUNCH_DTYPE)
    launches["launch"], launches["num_ctas"] = [3, 0, 4, 1, 2], [9, 8, 7, 6, 5]
    profile = Profile(kernels=kernels, launches=launches, ctas=np.zeros(0, CTA_DTYPE),
                      intervals=np.zeros(0, INTERVAL_DTYPE))
    got = _sorted_launches(profile)
    assert got["launch"].tolist() == [0, 1, 2, 3, 4] and got["num_ctas"].tolist() == [8, 6, 5, 9, 7]
    launches["launch"][2] = 0
    with pytest.raises(ValueError, match="duplicate launch indices"):
        _sorted_launches(profile)
    launches["launch"][2], launches["kernel"][4] = 4, 1
    with pytest.raises(ValueError, match="outside profile.kernels"):
        _sorted_launches(profile)
