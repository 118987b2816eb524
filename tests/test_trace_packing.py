"""CTA slots and occupancy counters (proton_lite/trace/rows.py) in both trace formats.

What is checked against references written here, not against the writers' own numbers:
the greedy slot rule and its slot count (a plain Python first-fit and a brute-force
overlap count), that no two CTAs on a slot overlap and every CTA is there exactly once
(read back through Perfetto's real importer), the resident-CTA counters (counted here CTA
by CTA), the track count of a layernorm-sized trace, and the exact round trip with units
that record before their CTA's start or after its end.
"""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trace_processor as tp
from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, Profile
from proton_lite.trace import load_trace, write_trace
from proton_lite.trace.tree import _time_shift
from proton_lite.trace.rows import pack_slots
from synth import wave_profile
from test_trace import FORMATS, _kernel, _packets, assert_same_profile

needs_tp = pytest.mark.skipif(tp.missing() is not None, reason=f"trace processor unavailable: {tp.missing()}")


# ---- references ---------------------------------------------------------------------------

def extents(p: Profile) -> dict:
    """(launch, cta) -> half-open [lo, hi): the CTA's lifetime and its intervals, a
    zero-length one counted as 1 ns."""
    out = {}
    for c in p.ctas:
        s, e = int(c["start_ns"]), int(c["end_ns"])
        out[int(c["launch"]), int(c["cta"])] = [s, max(e, s + 1)]
    for i in p.intervals:
        s, e = int(i["start_ns"]), int(i["end_ns"])
        x = out[int(i["launch"]), int(i["cta"])]
        x[0], x[1] = min(x[0], s), max(x[1], e, s + 1)
    return out


def first_fit(spans: list[tuple[int, int]]) -> list[int]:
    """Slot of each [lo, hi): in order of (lo, hi, index), the lowest-numbered slot whose
    last span ended at or before lo."""
    slot_end, out = [], [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda i: (spans[i][0], spans[i][1], i)):
        lo, hi = spans[i]
        k = next((k for k, end in enumerate(slot_end) if end <= lo), len(slot_end))
        if k == len(slot_end):
            slot_end.append(hi)
        slot_end[k] = hi
        out[i] = k
    return out


def max_overlap(spans: list[tuple[int, int]]) -> int:
    """The most half-open spans that hold one instant (brute force over their starts)."""
    return max((sum(lo <= a < hi for lo, hi in spans) for a, _ in spans), default=0)


def by_group(p: Profile) -> dict:
    """(launch, SM) -> {cta: extent}."""
    ext, out = extents(p), {}
    for c in p.ctas:
        key = (int(c["launch"]), int(c["smid"]))
        out.setdefault(key, {})[int(c["cta"])] = tuple(ext[int(c["launch"]), int(c["cta"])])
    return out


def edge_profile() -> Profile:
    """Hand-made edge cases on one SM: a CTA that starts in the ns another ends, a unit that
    records before its CTA's start and one after its end, zero-length CTAs and scopes."""
    launches = np.zeros(1, LAUNCH_DTYPE)
    launches[0]["grid_x"] = launches[0]["num_ctas"] = 7
    ctas, ivs = [], []
    for c, (s, e) in enumerate([(0, 100), (100, 200), (205, 300), (300, 300), (301, 400), (396, 500), (500, 500)]):
        ctas.append((0, c, 4, s, e, 1000 + s, 1000 + e, 1.0, 1.0, 2))
    for c, u, s, e in [(0, 0, 10, 90), (0, 1, 100, 100),  # zero-length at CTA 0's end, where CTA 1 starts
                       (1, 0, 100, 150), (2, 0, 201, 250),  # CTA 2 records 4 ns before its start
                       (2, 1, 300, 304),  # ... and after its end, past CTA 3's (zero-length) start
                       (4, 0, 301, 301), (5, 0, 396, 480), (6, 0, 500, 500)]:
        ivs.append((0, c, u, 0, 0, 0, s, e, e - s))
    return Profile([_kernel("edge", ["a"])], launches, np.array(ctas, CTA_DTYPE), np.array(ivs, INTERVAL_DTYPE))


def test_references_on_a_hand_made_case():
    assert first_fit([(0, 10), (5, 15), (10, 20), (15, 25), (12, 13)]) == [0, 1, 0, 1, 2]
    assert max_overlap([(0, 10), (5, 15), (10, 20), (15, 25), (12, 13)]) == 3
    ext = by_group(edge_profile())[0, 4]
    assert ext[0] == (0, 101) and ext[2] == (201, 304) and ext[3] == (300, 301)


# ---- the packing rule ---------------------------------------------------------------------

spans_strategy = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(1, 15)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(spans_strategy)
def test_packing_is_first_fit_and_uses_as_many_slots_as_spans_overlap(items):
    group = np.array([g for g, _, _ in items], np.int64)
    lo = np.array([a for _, a, _ in items], np.int64)
    hi = lo + np.array([d for _, _, d in items], np.int64)
    slot = pack_slots(group, lo, hi)
    for g in set(group.tolist()):
        idx = np.flatnonzero(group == g)
        spans = [(int(lo[i]), int(hi[i])) for i in idx]
        assert slot[idx].tolist() == first_fit(spans)
        assert int(slot[idx].max()) + 1 == max_overlap(spans)


def test_packing_a_degenerate_group_still_ends():
    """Every CTA of a launch at once on one SM (a hand-made profile): one slot each."""
    n = 300
    slot = pack_slots(np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, 5, np.int64))
    assert sorted(slot.tolist()) == list(range(n))


# ---- what Perfetto's importer makes of packed traces -----------------------------------------

def _slot_rows(fmt: str) -> str:
    """SQL: (launch title, SM, slot track, cta id, ts, dur) of every CTA slice."""
    if fmt == "perfetto":
        q = ("select g.name as launch, p.name as sm, t.id as slot, a.int_value as cta, s.ts, s.dur from slice s "
             "join track t on s.track_id = t.id join track p on t.parent_id = p.id "
             "join track g on p.parent_id = g.id join args a on a.arg_set_id = s.arg_set_id "
             "where a.key = 'debug.cta' and t.name like 'slot %'")
    else:
        q = ("select pr.name as launch, '' as sm, t.utid as slot, a.int_value as cta, s.ts, s.dur from slice s "
             "join thread_track t on s.track_id = t.id join thread th using (utid) join process pr using (upid) "
             "join args a on a.arg_set_id = s.arg_set_id where a.key = 'args.cta' and th.name like 'slot %' "
             "and th.name not like 'slot % %'")
    return q


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_no_two_ctas_on_a_slot_overlap_and_every_cta_is_there_once(tmp_path, fmt, ext):
    p = wave_profile(n_ctas=1200, launches=2, sms=12, resident=5, early=0.05, late=0.03, touching=0.35, seed=3)
    path = tmp_path / f"w{ext}"
    write_trace(p, path, fmt)
    bad, rows, count = tp.query(str(path), [tp.BAD_STATS, _slot_rows(fmt),
                                            "select count(*) as n from slice where dur >= 0"])
    assert bad == []
    spans = len(p.launches) if fmt == "chrome" else 0  # the JSON's launch slices
    assert count == [{"n": len(p.ctas) + len(p.intervals) + spans}]  # none dropped (crossing slices would be)
    groups, shift = by_group(p), _time_shift(p)
    start = {(int(c["launch"]), int(c["cta"])): int(c["start_ns"]) for c in p.ctas}
    seen, on_slot, slots_of = {}, {}, {}
    for r in rows:
        launch = int(r["launch"].split()[0][1:])  # "#1 layer_norm_fwd ..." (+ " SM 3" in JSON)
        sm = int((r["sm"] or r["launch"]).rsplit(" ", 1)[1])
        assert r["cta"] in groups[launch, sm], (launch, sm, r["cta"])  # in its own SM's group
        assert r["ts"] - shift == start[launch, r["cta"]]
        seen[launch, r["cta"]] = seen.get((launch, r["cta"]), 0) + 1
        on_slot.setdefault(r["slot"], []).append(groups[launch, sm][r["cta"]])
        slots_of.setdefault((launch, sm), set()).add(r["slot"])
    assert seen == {k: 1 for k in start}  # every CTA, exactly once
    for extents_on_slot in on_slot.values():  # extents on one slot never overlap
        extents_on_slot.sort()
        assert all(a[1] <= b[0] for a, b in zip(extents_on_slot, extents_on_slot[1:])), extents_on_slot
    # slots per SM: the most CTAs (by extent) it held at once
    assert {k: len(v) for k, v in slots_of.items()} == {k: max_overlap(list(g.values())) for k, g in groups.items()}


def _resident_at(p: Profile, key_of, t: int, key) -> int:
    c = p.ctas
    return int(sum(1 for row in c if key_of(row) == key and row["start_ns"] <= t < row["end_ns"]))


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_resident_cta_counters_match_a_count_made_here(tmp_path, fmt, ext):
    p = wave_profile(n_ctas=400, launches=2, sms=6, resident=4, early=0.05, touching=0.35, seed=5)
    p.ctas["end_ns"][7] = p.ctas["start_ns"][7]  # a zero-length CTA: never resident
    path = tmp_path / f"w{ext}"
    write_trace(p, path, fmt)
    if fmt == "perfetto":
        q = ("select c.ts, c.value, t.name as name, par.name as parent from counter c join track t "
             "on c.track_id = t.id left join track par on t.parent_id = par.id order by t.name, c.ts")
    else:
        q = ("select c.ts, c.value, pr.name as name, null as parent from counter c join process_counter_track t "
             "on c.track_id = t.id join process pr using (upid) where t.name = 'resident CTAs' order by pr.name, c.ts")
    samples, = tp.query(str(path), [q])
    shift = _time_shift(p)
    series = {}
    for s in samples:
        title = s["parent"] or s["name"]  # a launch counter: its own title; an SM's: its launch's
        launch = int(title.split()[0][1:])
        sm = int(s["name"].rsplit(" ", 1)[1]) if " SM " in f" {s['name']}" else None
        series.setdefault((launch, sm), []).append((s["ts"] - shift, int(s["value"])))
    want_keys = {(int(c["launch"]), int(c["smid"])) for c in p.ctas} | {(int(x), None) for x in p.launches["launch"]}
    assert set(series) == want_keys
    for (launch, sm), points in series.items():
        def key_of(row):
            return (int(row["launch"]), int(row["smid"]) if sm is not None else None)
        # the count at every sample, and a sample wherever the count changes
        for t, v in points:
            assert v == _resident_at(p, key_of, t, (launch, sm)), (launch, sm, t)
        mine = [row for row in p.ctas if key_of(row) == (launch, sm)]
        times = sorted({int(r["start_ns"]) for r in mine} | {int(r["end_ns"]) for r in mine})
        counts = [_resident_at(p, key_of, t, (launch, sm)) for t in times]
        changes = [t for t, a, b in zip(times, counts, [0] + counts[:-1]) if a != b]
        assert [t for t, _ in points] == changes, (launch, sm)


@needs_tp
def test_collapsed_launch_and_sm_rows_are_counter_tracks_with_children(tmp_path):
    """What the UI draws in a group's header row while it is collapsed: its own counter."""
    p = wave_profile(n_ctas=300, launches=2, sms=4, resident=3, seed=1)
    write_trace(p, tmp_path / "w.pftrace", "perfetto")
    tracks, = tp.query(str(tmp_path / "w.pftrace"), [
        "select t.id, t.name, t.type, t.parent_id, (select count(*) from track c where c.parent_id = t.id) as kids, "
        "(select count(*) from counter c where c.track_id = t.id) as values_ from track t"])
    launches = [t for t in tracks if t["name"].startswith("#")]
    sms = [t for t in tracks if t["name"].startswith("SM ")]
    slots = [t for t in tracks if t["name"].startswith("slot ")]
    assert len(launches) == 2 and len(sms) == 8 and slots
    for t in launches + sms:
        assert t["type"] == "global_counter_track_event" and t["kids"] > 0 and t["values_"] > 0, t
    assert all(t["kids"] == 4 for t in slots)  # warp 0..3 below each slot
    assert {t["parent_id"] for t in sms} == {t["id"] for t in launches}


# ---- scale --------------------------------------------------------------------------------

def test_a_layernorm_of_8192_ctas_twice_has_under_about_8000_tracks(tmp_path):
    """The issue's example: 8,192 CTAs x 2 launches of 4 warps on 132 SMs gave 82,186 tracks
    (one per CTA and per warp).  Packed, an SM has as many slots as it held CTAs at once;
    at the 6 resident CTAs per SM that the issue's estimate of <= ~8,000 implies:
    2 + 264 x (1 + 6 x 5) = 8,186."""
    p = wave_profile()  # 8,192 CTAs x 2, 132 SMs, <= 6 resident per SM, 4 warps recording
    stats = write_trace(p, tmp_path / "w.pftrace", "perfetto")
    _, packets, _ = _packets(tmp_path / "w.pftrace")
    n_tracks = sum(k.HasField("track_descriptor") for k in packets)
    groups = by_group(p)
    slots = sum(max_overlap(list(g.values())) for g in groups.values())
    assert n_tracks == stats["tracks"] == 2 + len(groups) + slots * (1 + 4)
    assert n_tracks <= 8_200, n_tracks
    assert n_tracks * 10 < 2 + len(groups) + len(p.ctas) * (1 + 4)  # what one track per CTA gave
    doc = json.loads(write_trace(p, tmp_path / "w.json", "chrome") and (tmp_path / "w.json").read_text())
    threads = sum(e["ph"] == "M" and e["name"] == "thread_name" for e in doc["traceEvents"])
    assert threads == slots * (1 + 4) + 2  # + each launch's span


@needs_tp
def test_the_importer_loads_a_layernorm_sized_trace_whole(tmp_path):
    p = wave_profile()
    write_trace(p, tmp_path / "w.pftrace", "perfetto")
    bad, count = tp.query(str(tmp_path / "w.pftrace"), [tp.BAD_STATS, "select count(*) as n from slice"])
    assert bad == [] and count == [{"n": len(p.ctas) + len(p.intervals)}]


# ---- round trip and determinism -----------------------------------------------------------------

@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_round_trip_with_early_late_and_touching_records(tmp_path, fmt, ext):
    for i, p in enumerate([edge_profile(), wave_profile(n_ctas=900, launches=2, sms=8, resident=4, early=0.1,
                                                        late=0.1, touching=0.5, seed=9)]):
        write_trace(p, tmp_path / f"{i}{ext}", fmt)
        assert_same_profile(p, load_trace(tmp_path / f"{i}{ext}"))


@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_packed_bytes_do_not_depend_on_input_order(tmp_path, fmt, ext):
    p = wave_profile(n_ctas=700, launches=2, sms=8, resident=4, early=0.05, touching=0.3, seed=2)
    write_trace(p, tmp_path / f"a{ext}", fmt)
    rng = np.random.default_rng(0)
    q = Profile(p.kernels, p.launches, p.ctas[rng.permutation(len(p.ctas))],
                p.intervals[rng.permutation(len(p.intervals))], p.t0_ns, p.session)
    write_trace(q, tmp_path / f"b{ext}", fmt)
    assert (tmp_path / f"a{ext}").read_bytes() == (tmp_path / f"b{ext}").read_bytes()


def _crowded_profile(seed: int) -> Profile:
    """Random CTAs crowding two SMs (many at once), units recording before / after their CTA,
    zero-length CTAs and scopes, shared start and end times."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 25))
    launches = np.zeros(2, LAUNCH_DTYPE)
    launches["launch"], launches["grid_x"], launches["grid_y"], launches["num_ctas"] = [0, 1], n, 1, n
    ctas, ivs = [], []
    for la in range(2):
        for c in range(n):
            s = int(rng.integers(0, 60)) // 5 * 5
            e = s + int(rng.integers(0, 4)) * 10
            ctas.append((la, c, int(rng.integers(0, 2)), s, e, 100 + s, 100 + e, 1.0, 1.0, 1))
            for u in range(int(rng.integers(0, 3))):
                a = s + int(rng.integers(-3, 4)) if rng.random() < 0.3 else s + int(rng.integers(0, max(e - s, 1)))
                b = a + int(rng.integers(0, 12))
                ivs.append((la, c, u, 0, 0, 0, a, b, b - a))
    return Profile([_kernel("c", ["x"])], launches, np.array(ctas, CTA_DTYPE), np.array(ivs, INTERVAL_DTYPE))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_crowded_random_profiles_round_trip(tmp_path_factory, seed):
    p = _crowded_profile(seed)
    d = tmp_path_factory.mktemp("c")
    for fmt, ext in FORMATS:
        write_trace(p, d / f"c{ext}", fmt)
        assert_same_profile(p, load_trace(d / f"c{ext}"))


@pytest.mark.parametrize("grouped", [True, False])
def test_pieces_order_intervals_by_cta_and_cut_between_groups(monkeypatch, grouped):
    """``Pieces``: intervals in stable (launch, SM, CTA) order whether the profile's
    intervals come in runs per CTA (the decoder's order: runs put in order) or not (a
    sort); cuts only where the (launch, SM) group changes, about every PIECE intervals."""
    import proton_lite.trace.perfetto_pieces as pp
    monkeypatch.setattr(pp, "PIECE", 50)
    rng = np.random.default_rng(7 + grouped)
    n_ctas = 300
    cta_group = np.sort(rng.integers(0, 40, n_ctas))  # CTA ranks are in group order
    per_cta = rng.integers(0, 6, n_ctas)
    iv_cta = np.repeat(np.arange(n_ctas), per_cta)
    if grouped:  # runs of one CTA, the runs in shuffled order
        runs = np.split(iv_cta, np.flatnonzero(np.diff(iv_cta)) + 1)
        iv_cta = np.concatenate([runs[i] for i in rng.permutation(len(runs))])
    else:
        iv_cta = rng.permutation(iv_cta)
    group = cta_group[iv_cta]
    first = np.flatnonzero(np.r_[True, iv_cta[1:] != iv_cta[:-1]])  # runs of one CTA, as the plan gives them
    cut = pp.Pieces(cta_group, (first, iv_cta[first]), len(iv_cta))
    order, bounds = np.concatenate([cut.sel(k) for k in range(len(cut))]), cut.bounds
    assert np.array_equal(order, np.argsort(iv_cta, kind="stable"))
    for k in range(len(cut)):  # each piece's CTA ranks, made from the runs: the intervals' own
        assert np.array_equal(cut.cta(k), iv_cta[cut.sel(k)])
    g = group[order]
    assert bounds[0] == 0 and bounds[-1] == len(iv_cta) and np.all(np.diff(bounds) > 0)
    inner = bounds[1:-1]
    assert np.all(g[inner] != g[inner - 1]), "a cut inside a (launch, SM) group"
    sizes = np.diff(bounds)
    biggest_group = np.bincount(group).max()
    assert len(bounds) - 1 >= len(iv_cta) // (50 + biggest_group)
    assert sizes.max() <= 50 + biggest_group


def _safe_cut(row, lo, hi, i: int) -> bool:
    """Reference: a piece may begin at CTA ``i`` if every row with CTAs on both sides has
    those before ending strictly before those after begin (brute force)."""
    for r in set(row.tolist()):
        before = [k for k in range(i) if row[k] == r]
        after = [k for k in range(i, len(row)) if row[k] == r]
        if before and after and max(hi[before]) >= min(lo[after]):
            return False
    return True


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans(), st.booleans())
def test_piece_starts_are_the_safe_cuts(seed, ordered, far):
    """``rows.piece_starts`` lets a piece begin exactly where the brute-force rule above says
    it is safe, whether each row's CTAs come in time order or some rows' are shuffled; gaps
    that touch (one CTA ends in the ns the next on its row begins) are never cut.  With times
    too far apart for its one running max (``far``: a CTA 2^61 ns on), it still never allows an
    unsafe cut, and where the rows run in time order it finds every safe one."""
    from proton_lite.trace.rows import piece_starts
    rng = np.random.default_rng(seed)
    n, n_rows = int(rng.integers(1, 40)), int(rng.integers(1, 5))
    row = rng.integers(0, n_rows, n)
    lo, hi = np.zeros(n, np.int64), np.zeros(n, np.int64)
    t = np.zeros(n_rows, np.int64)
    for k in range(n):  # each row's CTAs one after another, some touching the one before
        lo[k] = t[row[k]] + (0 if rng.random() < 0.3 else int(rng.integers(1, 20)))
        hi[k] = lo[k] + int(rng.integers(1, 30))
        t[row[k]] = hi[k]
    if far:
        lo[-1:] += 1 << 61
        hi[-1:] += 1 << 61
    if not ordered:  # some rows' CTAs shuffled in time (not in the order the plan lists them)
        for r in range(n_rows):
            if rng.random() < 0.5:
                idx = np.flatnonzero(row == r)
                perm = rng.permutation(len(idx))
                lo[idx], hi[idx] = lo[idx][perm], hi[idx][perm]
    ok = piece_starts(row, lo, hi)
    safe = np.array([_safe_cut(row, lo, hi, i) for i in range(n)])
    assert not np.any(ok & ~safe), "a cut where a row's CTAs on both sides are not apart in time"
    if ordered or not far or n_rows * (1 << 61) < 1 << 62:
        assert np.array_equal(ok, safe)


@pytest.mark.parametrize("grouped", [True, False])
def test_pieces_begin_inside_a_group_only_at_a_ctas_first_interval_where_allowed(monkeypatch, grouped):
    """With ``piece_ok`` (each CTA rank: may a piece begin there), a piece begins at a group's
    first CTA or at an allowed CTA, never inside one CTA's intervals, and pieces stay near
    PIECE where cuts are allowed: a group of 40 CTAs where every CTA is allowed is cut, one
    where none is stays one piece."""
    import proton_lite.trace.perfetto_pieces as pp
    monkeypatch.setattr(pp, "PIECE", 50)
    rng = np.random.default_rng(3 + grouped)
    cta_group = np.r_[np.zeros(40), np.ones(40), 2 + np.repeat(np.arange(20), 3)].astype(np.int64)
    piece_ok = np.r_[np.ones(40, bool), np.zeros(40, bool), rng.random(60) < 0.5]
    group_start = np.r_[True, cta_group[1:] != cta_group[:-1]]
    per_cta = rng.integers(1, 8, len(cta_group))
    iv_cta = np.repeat(np.arange(len(cta_group)), per_cta)
    if not grouped:
        iv_cta = rng.permutation(iv_cta)
    first = np.flatnonzero(np.r_[True, iv_cta[1:] != iv_cta[:-1]])
    cut = pp.Pieces(cta_group, (first, iv_cta[first]), len(iv_cta), piece_ok)
    whole = pp.Pieces(cta_group, (first, iv_cta[first]), len(iv_cta))
    order = np.concatenate([cut.sel(k) for k in range(len(cut))])
    assert np.array_equal(order, np.argsort(iv_cta, kind="stable"))
    for k in range(len(cut)):
        assert np.array_equal(cut.cta(k), iv_cta[cut.sel(k)])
    cta_at = iv_cta[order]
    inner = cut.bounds[1:-1]
    assert np.all(cta_at[inner] != cta_at[inner - 1]), "a piece begins inside a CTA's intervals"
    assert np.all(piece_ok[cta_at[inner]] | group_start[cta_at[inner]])
    sizes = np.diff(cut.bounds)
    assert len(cut) > len(whole) and sizes[0] <= 50 + per_cta.max() < int(per_cta[:40].sum())
    assert len({k for k in range(len(cut)) if np.isin(cut.cta(k), np.arange(40, 80)).any()}) == 1


def _slice_rows(path) -> list:
    """(track path, name, ts, dur, depth) of every slice, as Perfetto's importer reads them."""
    q = ("select coalesce(gp.name, '') || '/' || coalesce(p.name, '') || '/' || t.name as track, s.name, s.ts, "
         "s.dur, s.depth from slice s join track t on s.track_id = t.id left join track p on t.parent_id = p.id "
         "left join track gp on p.parent_id = gp.id")
    bad, rows, tracks = tp.query(str(path), [tp.BAD_STATS, q, "select count(*) as n from track"])
    assert bad == []
    return sorted((r["track"], r["name"], r["ts"], r["dur"], r["depth"]) for r in rows), tracks


@needs_tp
@pytest.mark.parametrize("shape", ["waves", "steps"])
def test_unit_tracks_split_between_pieces_import_as_they_do_whole(tmp_path, monkeypatch, shape):
    """Pieces cut inside SM groups (the sm layout: an SM's every launch in one group), unit
    tracks shared by several pieces: the importer reads the same slices, on the same tracks,
    at the same depths as from a trace whose intervals are one sequence, and no track more;
    read back, the same profile.  Waves: CTAs touching on their rows, units recording before
    and after their CTA; steps: a kernel on a second stream running beside the others (rows
    whose CTAs are not in the plan's order in time)."""
    import proton_lite.trace.perfetto_pieces as pp
    from synth import steps_profile
    p = wave_profile(n_ctas=300, launches=6, sms=3, resident=3, early=0.05, late=0.05, touching=0.35, seed=5) \
        if shape == "waves" else steps_profile(steps=3, sms=4, seed=1)
    monkeypatch.setattr(pp, "PIECE", 1 << 30)
    whole = write_trace(p, tmp_path / "whole.pftrace", "perfetto", layout="sm")
    monkeypatch.setattr(pp, "PIECE", 64)
    cut = write_trace(p, tmp_path / "cut.pftrace", "perfetto", layout="sm")
    assert whole["pieces"] == 1 and cut["pieces"] > 50  # one sequence for all intervals, against many
    assert cut["tracks"] == whole["tracks"]
    rows_whole, tracks_whole = _slice_rows(tmp_path / "whole.pftrace")
    rows_cut, tracks_cut = _slice_rows(tmp_path / "cut.pftrace")
    assert len(rows_cut) == len(p.ctas) + len(p.intervals) + len(p.launches)
    assert rows_cut == rows_whole and tracks_cut == tracks_whole
    assert_same_profile(p, load_trace(tmp_path / "cut.pftrace"))


@needs_tp
@pytest.mark.parametrize("shape", ["waves", "steps"])
def test_chrome_json_in_pieces_and_parts_imports_as_it_does_whole(tmp_path, monkeypatch, shape):
    """The JSON writer's intervals in pieces of 64 (unit tracks split between pieces) and its
    counters in parts of 64 events of time: the importer reads the same slices, tracks, depths
    and counter values as from one piece and one part, and the file reads back as the profile."""
    import proton_lite.trace.cta_sequence as cs
    import proton_lite.trace.perfetto_pieces as pp
    from synth import steps_profile
    p = wave_profile(n_ctas=300, launches=6, sms=3, resident=3, early=0.05, late=0.05, touching=0.35, seed=5) \
        if shape == "waves" else steps_profile(steps=3, sms=4, seed=1)
    counters = ("select t.name as track, c.ts, c.value from counter c join counter_track t on c.track_id = t.id "
                "order by t.name, c.ts, c.value")
    got = {}
    for name, piece, part in (("whole", 1 << 30, 1 << 30), ("cut", 64, 64)):
        monkeypatch.setattr(pp, "PIECE", piece)
        monkeypatch.setattr(cs, "PART_EVENTS", part)
        stats = write_trace(p, tmp_path / f"{name}.json", "chrome", layout="sm")
        rows, tracks = _slice_rows(tmp_path / f"{name}.json")
        got[name] = stats, rows, tracks, tp.query(str(tmp_path / f"{name}.json"), [counters])[0]
    (whole, *read_whole), (cut, *read_cut) = got["whole"], got["cut"]
    assert whole["pieces"] == 1 and cut["pieces"] > 50
    assert cut["counter_events"] == whole["counter_events"] > 0
    assert len(read_cut[0]) == len(p.ctas) + len(p.intervals) + len(p.launches)
    assert read_cut == read_whole
    assert_same_profile(p, load_trace(tmp_path / "cut.json"))


@pytest.mark.parametrize("seed", [0, 1])
def test_resident_counts_change_where_a_brute_force_count_does_in_any_event_order(seed):
    """``rows.resident_changes`` (the SM and launch occupancy counters): the events where a
    key's count of resident CTAs changes and the count after each, as a running count per key
    finds them, whether the events come in time order (the CTA sequence's, sorted by position)
    or shuffled (sorted by time)."""
    from proton_lite.trace.rows import resident_changes
    rng = np.random.default_rng(seed)
    n = 3000
    key = rng.integers(0, 7, n)
    start = rng.integers(0, 10**12, n) // 1000 * 1000  # shared ns: ends and starts that touch
    end = start + rng.integers(0, 5, n) * 1000
    k, t, d = np.r_[key, key], np.r_[start, end], np.r_[np.ones(n, int), -np.ones(n, int)]
    by_time = np.lexsort((-d, t))  # at one ns: ends first, as the trace orders them
    k, t, d = k[by_time], t[by_time], d[by_time]
    want = {}
    for kk in range(7):
        count = 0
        sel = np.flatnonzero(k == kk)
        for tt in np.unique(t[sel]):
            after = count + int(d[sel][t[sel] == tt].sum())
            if after != count:
                want[(kk, int(tt))] = after
            count = after
    ev, value = resident_changes(k, t, d)
    assert {(int(k[e]), int(t[e])): int(v) for e, v in zip(ev, value)} == want
    perm = rng.permutation(len(k))
    ev2, value2 = resident_changes(k[perm], t[perm], d[perm])
    assert {(int(k[perm][e]), int(t[perm][e])): int(v) for e, v in zip(ev2, value2)} == want
