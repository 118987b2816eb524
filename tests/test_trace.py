"""Trace writers (.pftrace, .json) and the reader: exact round trip, determinism, what
Perfetto's real trace processor makes of the files, size per slice, and bad input."""
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trace_processor as tp
from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
from proton_lite.trace import load_trace, write_trace
from proton_lite.trace.nesting import _nesting
from proton_lite.trace._proto import Rows, packet_bounds, parse_messages, read_varints, varint

FORMATS = [("perfetto", ".pftrace"), ("chrome", ".json")]
needs_tp = pytest.mark.skipif(tp.missing() is not None, reason=f"trace processor unavailable: {tp.missing()}")


# ---- profiles built by hand ---------------------------------------------------------------

def _kernel(name, scopes, warps=4, gran="warp", unit_warps=1):
    return KernelInfo(name=name, scopes=scopes, num_warps=warps, granularity=gran, unit_warps=unit_warps,
                      capacity=64, meta={"kernel": name})


def synthetic_profile() -> Profile:
    """Every layout case: several launches and SMs, waves, a 2-D grid, nested, zero-length,
    identical-span and touching scopes, overlapping scopes on lane 1, a CTA without scopes,
    a scope before its CTA start (negative time), a duplicate scope name, a scope id past
    the kernel's table, large clocks and cycles, a nan rate."""
    kernels = [_kernel("matmul", ["load", "mma", "epilogue", "load"]),
               _kernel("attn", ["producer", "consumer"], warps=8, gran="warpgroup", unit_warps=4),
               _kernel("tiny", ["x"], warps=1, gran="cta", unit_warps=1)]
    launches = np.zeros(4, LAUNCH_DTYPE)
    for i, (k, grid) in enumerate([(0, (4, 1, 1)), (1, (2, 2, 1)), (0, (3, 1, 1)), (2, (1, 1, 1))]):
        launches[i] = (i, k, 0, *grid, int(np.prod(grid)), 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    ctas, ivs = [], []

    def cta(launch, c, sm, t0, t1):
        ctas.append((launch, c, sm, t0, t1, (1 << 45) + 3 * t0, (1 << 45) + 3 * t1, 1.5 + c / 8,
                     np.nan if c == 1 else 1.25, 4))

    def iv(launch, c, unit, scope, depth, t0, t1, lane=0, cycles=None):
        ivs.append((launch, c, unit, scope, depth, lane, t0, t1, (t1 - t0) * 3 // 2 if cycles is None else cycles))

    for c in range(4):  # launch 0: 4 CTAs on SMs 0 and 1, two waves
        sm, wave = c % 2, c // 2
        s = 1000 * wave
        cta(0, c, sm, s, s + 900)
        for w in range(2):
            iv(0, c, w, 0, 0, s + 10, s + 50)
            iv(0, c, w, 1, 0, s + 50, s + 400)  # touches the load before it
            iv(0, c, w, 0, 1, s + 60, s + 60)  # zero-length, nested
            iv(0, c, w, 3, 1, s + 70, s + 300)  # duplicate name "load", scope id 3
            iv(0, c, w, 2, 2, s + 100, s + 200, cycles=1 << 40)  # big cycles
            iv(0, c, w, 2, 0, s + 500, s + 800)  # identical spans, nested: epilogue > mma
            iv(0, c, w, 1, 1, s + 500, s + 800)
    iv(0, 0, 3, 0, 0, -5, 20)  # starts before the earliest CTA: times shift by 5
    for c in range(4):  # launch 1: 2-D grid, warpgroups, producer/consumer overlap on lane 1
        s = 5000 + 100 * c
        cta(1, c, 2 + c % 2, s, s + 2000)
        for g in range(2):
            iv(1, c, g, 0, 0, s + 0, s + 1000)
            iv(1, c, g, 1, 0, s + 500, s + 1500, lane=1)
            iv(1, c, g, 1, 1, s + 600, s + 700, lane=1)  # recorded depth 1 on lane 1
            iv(1, c, g, 0, 1, s + 1100, s + 1100, lane=1)  # zero-length on a lane
    for c in range(3):  # launch 2: CTA 2 has no scopes at all
        cta(2, c, 5, 9000 + 10 * c, 9500)
        if c != 2:
            iv(2, c, 0, 1, 0, 9000 + 10 * c, 9400)
    cta(3, 0, 7, 12000, 12000)  # launch 3: a zero-length CTA, a scope id past the table
    iv(3, 0, 0, 1, 0, 12000, 12000, cycles=0)
    launches["start_ns"] = [-5, 5000, 9000, 12000]
    launches["end_ns"] = [2900, 7300, 9500, 12000]
    return Profile(kernels=kernels, launches=launches, ctas=np.array(ctas, CTA_DTYPE),
                   intervals=np.array(ivs, INTERVAL_DTYPE), t0_ns=123_456_789_000,
                   session={"name": "synth", "timer_tick_ns": 32.0, "warnings": ["w1"]})


def big_profile(n_ctas=16384, warps=4, iters=0, sms=132, seed=0) -> Profile:
    """A kernel shaped like a real capture, built with numpy.

    iters=0: two scopes per warp (load, store: the vector-add shape, few slices per track);
    iters>0: a mainloop scope holding ``iters`` nested iteration scopes per warp.
    """
    rng = np.random.default_rng(seed)
    kern = _kernel("k", ["load", "store"] if not iters else ["mainloop", "iter"], warps=warps)
    launches = np.zeros(1, LAUNCH_DTYPE)
    launches[0] = (0, 0, 0, n_ctas, 1, 1, n_ctas, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    c = np.arange(n_ctas)
    span = 3000 if not iters else 400 * iters + 600
    start = (c // sms) * (span + 200) + rng.integers(0, 50, n_ctas)
    ctas = np.zeros(n_ctas, CTA_DTYPE)
    ctas["launch"], ctas["cta"], ctas["smid"] = 0, c, c % sms
    ctas["start_ns"], ctas["end_ns"] = start, start + span
    ctas["start_clock"] = (1 << 40) + (c % sms) * 10_000_000 + start * 3 // 2
    ctas["end_clock"] = ctas["start_clock"] + span * 3 // 2
    ctas["cycles_per_ns"], ctas["measured_cycles_per_ns"], ctas["finished_units"] = 1.5, 1.4999, warps
    per_warp = 2 if not iters else 1 + iters
    n = n_ctas * warps * per_warp
    iv = np.zeros(n, INTERVAL_DTYPE)
    cw = np.repeat(np.arange(n_ctas * warps), per_warp)
    k = np.tile(np.arange(per_warp), n_ctas * warps)
    base = start[cw // warps] + rng.integers(0, 30, n_ctas * warps)[cw]
    iv["cta"], iv["unit"] = cw // warps, cw % warps
    if not iters:
        iv["scope"] = k
        iv["start_ns"] = base + np.where(k == 0, 100, 2200) + rng.integers(0, 20, n)
        iv["end_ns"] = iv["start_ns"] + np.where(k == 0, 2000, 700) + rng.integers(0, 20, n)
    else:
        iv["scope"], iv["depth"] = np.minimum(k, 1), np.minimum(k, 1)
        iv["start_ns"] = base + np.where(k == 0, 100, 100 + 400 * np.maximum(k - 1, 0) + 10)
        iv["end_ns"] = np.where(k == 0, base + 100 + 400 * iters + 20, iv["start_ns"] + 380)
    iv["cycles"] = (iv["end_ns"] - iv["start_ns"]) * 3 // 2 + rng.integers(0, 3, n)
    return Profile(kernels=[kern], launches=launches, ctas=ctas, intervals=iv, t0_ns=10**12, session={})


def canon(a: np.ndarray, keys) -> np.ndarray:
    return a[np.lexsort(tuple(a[k] for k in reversed(keys)))]


IV_KEYS = ["launch", "cta", "unit", "lane", "start_ns", "end_ns", "depth", "scope", "cycles"]


def assert_same_profile(p: Profile, q: Profile) -> None:
    a, b = canon(p.intervals, IV_KEYS), canon(q.intervals, IV_KEYS)
    assert len(a) == len(b)
    for k in INTERVAL_DTYPE.names:
        assert np.array_equal(a[k], b[k]), k
    a, b = canon(p.ctas, ["launch", "cta"]), canon(q.ctas, ["launch", "cta"])
    assert len(a) == len(b)
    for k in CTA_DTYPE.names:
        assert np.array_equal(a[k], b[k], equal_nan=a.dtype[k].kind == "f"), k
    assert np.array_equal(p.launches, q.launches)
    assert [vars(k) for k in p.kernels] == [vars(k) for k in q.kernels]
    assert p.t0_ns == q.t0_ns and p.session == q.session


# ---- round trip and determinism ---------------------------------------------------------------

@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_round_trip_is_exact(tmp_path, fmt, ext):
    p = synthetic_profile()
    path = tmp_path / f"t{ext}"
    stats = write_trace(p, path, fmt)
    assert stats["slices"] == len(p.intervals) + len(p.ctas)
    assert_same_profile(p, load_trace(path))


def test_round_trip_of_a_decoded_capture(tmp_path):
    from proton_lite.decode import decode
    from proton_lite.raw_format import read_raw
    from synth import simple_capture
    simple_capture(str(tmp_path / "c.plraw"), n_ctas=9, n_sms=2, units=3)
    p = decode(read_raw(str(tmp_path / "c.plraw")))
    assert len(p.intervals) == 9 * 3 * 2
    for fmt, ext in FORMATS:
        write_trace(p, tmp_path / f"c{ext}", fmt)
        assert_same_profile(p, load_trace(tmp_path / f"c{ext}"))


def test_uncompressed_perfetto_round_trips_too(tmp_path):
    from proton_lite.trace.perfetto import write_perfetto
    p = synthetic_profile()
    write_perfetto(p, tmp_path / "u.pftrace", compress=False)
    write_perfetto(p, tmp_path / "c.pftrace", compress=True)
    assert (tmp_path / "u.pftrace").stat().st_size > (tmp_path / "c.pftrace").stat().st_size
    assert_same_profile(p, load_trace(tmp_path / "u.pftrace"))


@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_same_profile_gives_identical_bytes(tmp_path, fmt, ext):
    write_trace(synthetic_profile(), tmp_path / f"a{ext}", fmt)
    write_trace(synthetic_profile(), tmp_path / f"b{ext}", fmt)
    assert (tmp_path / f"a{ext}").read_bytes() == (tmp_path / f"b{ext}").read_bytes()


@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_bytes_do_not_depend_on_threads_chunks_or_input_order(tmp_path, monkeypatch, fmt, ext):
    import proton_lite.trace.chrome as chrome
    import proton_lite.trace.perfetto as pf
    write = {"perfetto": lambda p, path, w: pf.write_perfetto(p, path, workers=w, compress=False),
             "chrome": lambda p, path, w: chrome.write_chrome(p, path, workers=w)}[fmt]
    p = big_profile(n_ctas=2048, iters=0)
    write(p, tmp_path / f"one{ext}", 1)
    import proton_lite.trace.cta_sequence as cs
    monkeypatch.setattr(cs, "PART_EVENTS", 999)  # many tasks, out of step with everything
    monkeypatch.setattr(chrome, "CHUNK", 999)
    shuffled = np.random.default_rng(1).permutation(len(p.intervals))
    q = Profile(p.kernels, p.launches, p.ctas[::-1].copy(), p.intervals[shuffled], p.t0_ns, p.session)
    write(q, tmp_path / f"four{ext}", 4)
    assert (tmp_path / f"one{ext}").read_bytes() == (tmp_path / f"four{ext}").read_bytes()


@needs_tp
def test_many_small_compressed_batches_and_pieces(tmp_path, monkeypatch):
    """Small batches, and the intervals cut into many pieces (a sequence each): the trace
    processor imports them without an error and the profile reads back whole."""
    import proton_lite.trace.perfetto as pf
    import proton_lite.trace.perfetto_pieces as pieces
    import proton_lite.trace.cta_sequence as cs
    monkeypatch.setattr(cs, "PART_EVENTS", 50)
    monkeypatch.setattr(pieces, "CHUNK", 50)
    monkeypatch.setattr(pieces, "MAX_RAW_BATCH", 300)
    monkeypatch.setattr(pieces, "PIECE", 20)
    p = synthetic_profile()
    stats = pf.write_perfetto(p, tmp_path / "t.pftrace", workers=3)
    pb, packets, _ = _packets(tmp_path / "t.pftrace")
    assert sum(1 for k in packets if k.HasField("track_event")) == 2 * stats["slices"] == stats["events"]
    sequences = {k.trusted_packet_sequence_id for k in packets if k.HasField("track_event")}
    assert stats["pieces"] >= 4 and len(sequences) == 1 + stats["pieces"], (stats["pieces"], sequences)
    top = pb.Trace()
    top.ParseFromString(tmp_path.joinpath("t.pftrace").read_bytes())
    assert sum(k.HasField("compressed_packets") for k in top.packet) >= 10
    assert tp.bad_stats(str(tmp_path / "t.pftrace")) == []
    assert_same_profile(p, load_trace(tmp_path / "t.pftrace"))


@needs_tp
@pytest.mark.parametrize("seed", [5, 7])  # random profiles of 3 and 2 (launch, SM) groups
def test_pieces_import_as_one_sequence_would(tmp_path, monkeypatch, seed):
    """Intervals cut into a piece (a sequence) per (launch, SM) group import into the trace
    processor exactly as one piece does: same slices, same depths, on the same tracks, though
    zero-length slices and equal timestamps sit at the pieces' edges."""
    import proton_lite.trace.perfetto_pieces as pieces
    p = _random_profile(seed)
    q = big_profile(n_ctas=64, warps=2, iters=2, sms=4, seed=seed)
    sql = ("select s.ts, s.dur, s.name, s.depth, t.name as track, pt.name as parent from slice s "
           "join track t on s.track_id = t.id left join track pt on t.parent_id = pt.id "
           "order by s.ts, s.dur, s.name, s.depth, track, parent")
    seen = {}
    for piece in (1 << 30, 1):
        monkeypatch.setattr(pieces, "PIECE", piece)
        for name, prof in (("random", p), ("big", q)):
            path = tmp_path / f"{name}-{piece}.pftrace"
            stats = write_trace(prof, path, "perfetto")
            bad, slices = tp.query(str(path), [tp.BAD_STATS, sql])
            assert bad == []
            seen[name, piece] = (stats["pieces"], slices)
    for name in ("random", "big"):
        assert seen[name, 1 << 30][0] == 1 and seen[name, 1][0] > 1
        assert seen[name, 1][1] == seen[name, 1 << 30][1]


def _random_profile(seed: int) -> Profile:
    """Random properly nested scopes (lanes for overlaps), random ties and zero lengths."""
    rng = np.random.default_rng(seed)
    ivs, ctas = [], []
    for c in range(int(rng.integers(1, 4))):
        t0 = int(rng.integers(0, 50))
        ctas.append((0, c, int(rng.integers(0, 3)), t0, t0 + 100, 1000 * c, 1000 * c + 150, 1.5, 1.5, 2))
        for unit in range(2):
            for lane in range(int(rng.integers(1, 3))):
                def fill(lo, hi, depth):
                    t = lo
                    while t < hi and rng.random() < 0.7:
                        a = int(rng.integers(t, hi + 1))
                        b = int(rng.integers(a, hi + 1))
                        ivs.append((0, c, unit, int(rng.integers(0, 3)), depth, lane, a, b, int(rng.integers(-3, 9))))
                        if depth < 3:
                            fill(a, b, depth + 1)
                        t = b
                fill(t0 - 2, t0 + 100, 0)
    launches = np.zeros(1, LAUNCH_DTYPE)
    launches[0]["grid_x"] = launches[0]["num_ctas"] = 3
    return Profile([_kernel("r", ["a", "b"])], launches, np.array(ctas, CTA_DTYPE), np.array(ivs, INTERVAL_DTYPE))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_random_nested_profiles_round_trip(tmp_path_factory, seed):
    p = _random_profile(seed)
    d = tmp_path_factory.mktemp("r")
    for fmt, ext in FORMATS:
        write_trace(p, d / f"r{ext}", fmt)
        assert_same_profile(p, load_trace(d / f"r{ext}"))


# ---- the wire format, checked with the perfetto package's own protobuf classes --------------

def _packets(path):
    """All packets (compressed batches inflated) and the file's first packet."""
    return tp.pftrace_packets(path)


def test_pftrace_follows_perfettos_rules(tmp_path):
    p = synthetic_profile()
    write_trace(p, tmp_path / "t.pftrace", "perfetto")
    pb, packets, first = _packets(tmp_path / "t.pftrace")
    seq = [k for k in packets if k.trusted_packet_sequence_id]
    assert {k.trusted_packet_sequence_id for k in seq} == {2, 3}  # CTA slices and counters; one piece of intervals
    for s in (2, 3):
        head = next(k for k in seq if k.trusted_packet_sequence_id == s)
        assert head.sequence_flags == pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        assert {n.name for n in head.interned_data.debug_annotation_names} >= {"cycles", "cta"}
    head1 = next(k for k in seq if k.trusted_packet_sequence_id == 3)
    assert [n.name for n in head1.interned_data.event_names][:2] == ["load", "mma"]
    events = [k for k in packets if k.HasField("track_event")]
    assert len(events) == 2 * (len(p.intervals) + len(p.ctas))
    assert all(k.HasField("timestamp") and k.trusted_packet_sequence_id for k in events)
    begins = [k for k in events if k.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN]
    iv_begins = [k.track_event for k in begins if k.trusted_packet_sequence_id == 3]
    cta_begins = [k.track_event for k in begins if k.trusted_packet_sequence_id == 2]
    assert len(iv_begins) == len(p.intervals) and len(cta_begins) == len(p.ctas)
    assert all(e.name_iid > 0 and not e.HasField("name") for e in iv_begins)
    # each CTA slice names its CTA and carries its id as an arg
    assert all(e.name.startswith("CTA ") and not e.name_iid for e in cta_begins)
    assert sorted(int(e.name.split()[1]) for e in cta_begins) == sorted(p.ctas["cta"].tolist())
    assert all([a.int_value for a in e.debug_annotations] == [int(e.name.split()[1])] for e in cta_begins)
    assert "CTA 3 (1,1,0)" in {e.name for e in cta_begins}
    tracks = [k.track_descriptor for k in packets if k.HasField("track_descriptor")]
    parents = {t.parent_uuid for t in tracks}
    assert all(t.sibling_merge_behavior == pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE for t in tracks)
    assert all(t.child_ordering == pb.TrackDescriptor.EXPLICIT for t in tracks if t.uuid in parents)
    names = {t.name for t in tracks}
    assert {"#1 attn grid=(2,2,1) warps=8", "SM 3", "slot 0", "warpgroup 1 lane 1"} <= names
    # launches and SMs are counter tracks (resident CTAs); the SMs of a launch share a y axis
    counters = {t.name: t.counter for t in tracks if t.HasField("counter")}
    assert set(counters) == {t.name for t in tracks if t.name.startswith(("#", "SM "))}
    assert counters["SM 3"].y_axis_share_key == "SMs of #1" and counters["SM 3"].unit_name == "CTAs"
    # the first packet holds only the metadata, in a field number Perfetto does not know
    assert not first.ListFields() and first.ByteSize() > 1000


@given(st.lists(st.integers(-(2**63), 2**64 - 1), min_size=1, max_size=50))
def test_vectorized_varints_match_the_scalar_encoder(values):
    as_u64 = np.array([v & (2**64 - 1) for v in values], np.uint64)
    r = Rows(len(values))
    r.varint(as_u64)
    per_row = r.row_lengths()
    data = r.tobytes()
    assert data == b"".join(varint(v) for v in values)
    pos = np.r_[0, np.cumsum(per_row)[:-1]].astype(np.int64)
    got, n = read_varints(np.frombuffer(data, np.uint8), pos)
    assert np.array_equal(got, as_u64) and np.array_equal(n, per_row)


def test_packet_bounds_ignores_0x0a_bytes_inside_packets():
    payloads = [b"\x0a\x05\x0a\x0a", b"", b"\x0a" * 200, b"x\x0a\x02"]
    data = b"".join(b"\x0a" + varint(len(p)) + p for p in payloads)
    s, e = packet_bounds(data)
    assert [data[a:b] for a, b in zip(s, e)] == payloads
    with pytest.raises(ValueError, match="truncated|damaged"):
        packet_bounds(data[:-1])
    msg = b"\x08\x96\x01\x12\x03abc\x08\x05"  # field 1 twice: the last one wins
    got = parse_messages(np.frombuffer(msg, np.uint8), np.array([0]), np.array([len(msg)]), {1: 0, 2: 2})
    assert int(got[1][1][0]) == 5 and msg[got[2][1][0]:got[2][2][0]] == b"abc"


# ---- what Perfetto's trace processor makes of the files ---------------------------------------

def _cta_slice_name(p: Profile, launch: int, cta: int) -> str:
    la = p.launches[p.launches["launch"] == launch][0]
    gx, gy = int(la["grid_x"]), int(la["grid_y"])
    if gy * int(la["grid_z"]) == 1:
        return f"CTA {cta}"
    return f"CTA {cta} ({cta % gx},{cta // gx % gy},{cta // (gx * gy)})"


def _expected_slices(p: Profile, launch_spans: bool = False):
    """(ts, dur, name) of every slice, as the trace processor should report them; with
    ``launch_spans`` (the JSON) one per launch too, from its first CTA start to its last end."""
    from proton_lite.trace.tree import _scope_names, _time_shift
    shift = _time_shift(p)
    kern = dict(zip(p.launches["launch"].tolist(), p.launches["kernel"].tolist()))
    out = [(int(c["start_ns"]) + shift, int(c["end_ns"] - c["start_ns"]),
            _cta_slice_name(p, int(c["launch"]), int(c["cta"]))) for c in p.ctas]
    for la in p.launches if launch_spans else ():
        mine = p.ctas[p.ctas["launch"] == la["launch"]]
        k = p.kernels[int(la["kernel"])]
        title = f"#{la['launch']} {k.name} grid=({la['grid_x']},{la['grid_y']},{la['grid_z']}) warps={k.num_warps}"
        out.append((int(mine["start_ns"].min()) + shift, int(mine["end_ns"].max() - mine["start_ns"].min()), title))
    for i in p.intervals:
        k = p.kernels[kern[int(i["launch"])]]
        out.append((int(i["start_ns"]) + shift, int(i["end_ns"] - i["start_ns"]),
                    _scope_names(k, int(i["scope"]))[int(i["scope"])]))
    return sorted(out)


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_trace_processor_imports_without_errors_or_losses(tmp_path, fmt, ext):
    p = synthetic_profile()
    path = tmp_path / f"t{ext}"
    write_trace(p, path, fmt)
    arg = "debug.cycles" if fmt == "perfetto" else "args.cycles"
    bad, slices, cycles, tracks = tp.query(str(path), [
        tp.BAD_STATS,
        "select ts, dur, name from slice order by ts, dur, name",
        f"select count(*) as n, sum(a.int_value) as total from slice s join args a using (arg_set_id) "
        f"where a.key = '{arg}'",
        "select t.name as name, p.name as parent, g.name as grandparent from track t "
        "left join track p on t.parent_id = p.id left join track g on p.parent_id = g.id",
    ])
    assert bad == []
    n = len(p.intervals) + len(p.ctas)
    expected = _expected_slices(p, launch_spans=fmt == "chrome")
    assert sorted((s["ts"], s["dur"], s["name"]) for s in slices) == expected
    cta_cycles = (p.ctas["end_clock"] - p.ctas["start_clock"]).astype(np.int64).sum()
    assert cycles == [{"n": n, "total": int(p.intervals["cycles"].sum() + cta_cycles)}]
    if fmt == "perfetto":  # the launch > SM > slot > unit/lane tree
        tree = {(t["name"], t["parent"], t["grandparent"]) for t in tracks}
        assert ("warpgroup 1 lane 1", "slot 0", "SM 3") in tree
        assert ("SM 3", "#1 attn grid=(2,2,1) warps=8", None) in tree
        assert ("slot 2", "SM 5", "#2 matmul grid=(3,1,1) warps=4") in tree  # 3 CTAs at once, one without scopes


@needs_tp
def test_chrome_processes_and_threads_are_named_and_ordered(tmp_path):
    p = synthetic_profile()
    write_trace(p, tmp_path / "t.json", "chrome")
    rows, = tp.query(str(tmp_path / "t.json"), [
        "select p.pid as pid, p.name as process, t.tid as tid, t.name as thread from thread t "
        "join process p using (upid) where t.name is not null order by t.tid"])  # (+ an unnamed main thread each)
    names = {(r["process"], r["thread"]) for r in rows}
    assert ("#1 attn grid=(2,2,1) warps=8 SM 3", "slot 0 warpgroup 1 lane 1") in names
    assert ("#2 matmul grid=(3,1,1) warps=4 SM 5", "slot 2") in names  # 3 CTAs at once
    assert all(0 < r["pid"] < 2**31 and 0 < r["tid"] < 2**31 and r["pid"] != r["tid"] for r in rows)
    doc = json.loads((tmp_path / "t.json").read_text())
    kinds = [e["name"] for e in doc["traceEvents"] if e["ph"] == "M"]
    assert kinds.count("process_sort_index") == kinds.count("process_name") == len(p.launches) + len(
        {(int(c["launch"]), int(c["smid"])) for c in p.ctas})  # a process per launch and per (launch, SM)
    spans = {(r["process"], r["thread"]) for r in rows if r["thread"] == "launch"}
    assert spans == {(f"#{i} {k}", "launch") for i, k in [(0, "matmul grid=(4,1,1) warps=4"),
                                                         (1, "attn grid=(2,2,1) warps=8"),
                                                         (2, "matmul grid=(3,1,1) warps=4"),
                                                         (3, "tiny grid=(1,1,1) warps=1")]}
    assert kinds.count("thread_sort_index") == len(rows) - len(spans)  # slots and units, ordered


@needs_tp
@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_trace_processor_on_an_empty_profile(tmp_path, fmt, ext):
    p = synthetic_profile()
    empty = Profile(p.kernels, p.launches[:0], p.ctas[:0], p.intervals[:0])
    write_trace(empty, tmp_path / f"e{ext}", fmt)
    assert tp.bad_stats(str(tmp_path / f"e{ext}")) == []
    assert_same_profile(empty, load_trace(tmp_path / f"e{ext}"))


# ---- size ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("iters", [0, 16])
def test_pftrace_size_per_slice(tmp_path, iters):
    """<= 40 bytes per slice (slice = interval or CTA), all bytes of the file counted."""
    from proton_lite.trace.perfetto import write_perfetto
    p = big_profile(n_ctas=16384 if not iters else 2048, warps=4, iters=iters)
    n = len(p.intervals) + len(p.ctas)
    assert n >= 100_000
    stats = write_perfetto(p, tmp_path / "b.pftrace")
    assert stats["bytes"] == os.path.getsize(tmp_path / "b.pftrace")
    assert stats["bytes"] / n <= 40
    raw = write_perfetto(p, tmp_path / "u.pftrace", compress=False)
    events_per_slice = (raw["bytes"] - raw["descriptor_bytes"]) / n  # packets that carry the slices
    assert events_per_slice <= 40


# ---- bad input and bad profiles -------------------------------------------------------------------

def _one_line_error(path, *words):
    with pytest.raises(ValueError) as e:
        load_trace(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    for w in words:
        assert w in msg, msg


def test_foreign_and_damaged_files_are_refused(tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    _one_line_error(tmp_path / "empty.json", "not a proton-lite trace")
    (tmp_path / "noise.pftrace").write_bytes(bytes(range(256)) * 4)
    _one_line_error(tmp_path / "noise.pftrace", "not a proton-lite trace")
    (tmp_path / "other.json").write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}]}')
    _one_line_error(tmp_path / "other.json", "not a proton-lite trace")
    (tmp_path / "list.json").write_text("[1, 2]")
    _one_line_error(tmp_path / "list.json", "not a proton-lite trace")
    # a valid Perfetto trace from another writer
    other = b"\x0a\x06\x50\x01\x5a\x02\x48\x03"
    (tmp_path / "other.pftrace").write_bytes(other)
    _one_line_error(tmp_path / "other.pftrace", "not a proton-lite trace", "metadata")
    # ours, cut short, or from a future version
    write_trace(synthetic_profile(), tmp_path / "t.pftrace", "perfetto")
    data = (tmp_path / "t.pftrace").read_bytes()
    (tmp_path / "cut.pftrace").write_bytes(data[:len(data) - 7])
    _one_line_error(tmp_path / "cut.pftrace", "truncated")
    write_trace(synthetic_profile(), tmp_path / "t.json", "chrome")
    text = (tmp_path / "t.json").read_text()
    (tmp_path / "v9.json").write_text(text.replace('"version":2', '"version":9', 1))
    _one_line_error(tmp_path / "v9.json", "version 9", "proton-lite trace")
    (tmp_path / "cut.json").write_text(text[:len(text) // 2])
    _one_line_error(tmp_path / "cut.json", "invalid JSON")


@pytest.mark.parametrize("fmt,ext", FORMATS)
def test_crossing_scopes_on_one_lane_are_refused(tmp_path, fmt, ext):
    p = synthetic_profile()
    iv = p.intervals.copy()
    row = np.flatnonzero((iv["launch"] == 1) & (iv["lane"] == 1) & (iv["depth"] == 0))[0]
    iv["lane"][row] = 0  # consumer now crosses producer on lane 0
    bad = Profile(p.kernels, p.launches, p.ctas, iv, p.t0_ns, p.session)
    with pytest.raises(ValueError, match="overlap without nesting.*lanes"):
        write_trace(bad, tmp_path / f"x{ext}", fmt)


def test_nesting_check_finds_every_crossing():
    rng = np.random.default_rng(3)
    for _ in range(300):
        k = int(rng.integers(1, 6))
        a = rng.integers(0, 10, k)
        b = a + rng.integers(0, 10, k)
        crossing = any(a[i] < a[j] < b[i] < b[j] for i in range(k) for j in range(k))
        try:
            _nesting(np.zeros(k, np.int64), a, b, np.zeros(k, np.int64), str)
            assert not crossing, (a, b)
        except ValueError:
            assert crossing, (a, b)


@pytest.mark.parametrize("fmt, ext", [("perfetto", ".pftrace"), ("chrome", ".json")])
def test_launches_of_two_gpus_name_their_device(tmp_path, fmt, ext):
    """A session on two GPUs: each launch's track says which GPU ran it (one GPU: not said)."""
    p = synthetic_profile()
    p.launches["device"] = p.launches["launch"] % 2
    write_trace(p, tmp_path / f"t{ext}", fmt)
    if fmt == "perfetto":
        _, packets, _ = _packets(tmp_path / "t.pftrace")
        names = {k.track_descriptor.name for k in packets if k.HasField("track_descriptor")}
        assert {"#1 attn grid=(2,2,1) warps=8 GPU 1", "#2 matmul grid=(3,1,1) warps=4 GPU 0"} <= names
    else:
        doc = json.loads((tmp_path / "t.json").read_text())
        names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
        assert {"#1 attn grid=(2,2,1) warps=8 GPU 1 SM 3", "#2 matmul grid=(3,1,1) warps=4 GPU 0 SM 5"} <= names
    assert_same_profile(p, load_trace(tmp_path / f"t{ext}"))  # the device survives the round trip


@pytest.mark.parametrize("fmt", ["perfetto", "chrome"])
def test_writers_report_progress_and_write_the_same_bytes(tmp_path, monkeypatch, fmt):
    """The progress callback (behind `trace`'s progress bar) sees every batch, in order, and
    changes nothing in the file."""
    import proton_lite.trace.chrome as chrome_mod
    import proton_lite.trace.cta_sequence as cs
    import proton_lite.trace.perfetto_pieces as pieces_mod
    monkeypatch.setattr(cs, "PART_EVENTS", 256)
    monkeypatch.setattr(pieces_mod, "PIECE", 256)
    monkeypatch.setattr(chrome_mod, "CHUNK", 256)
    from proton_lite.decode import decode
    from proton_lite.raw_format import read_raw
    profile = decode(read_raw(os.path.join(os.path.dirname(__file__), "data", "softmax.plraw")))
    calls = []
    write_trace(profile, tmp_path / "a", fmt, progress=lambda done, total: calls.append((done, total)))
    write_trace(profile, tmp_path / "b", fmt)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()
    total = calls[-1][1]
    assert total > 4 and calls == [(i, total) for i in range(1, total + 1)]


def test_raw_to_traces_with_the_progress_bar_writes_the_same_trace(tmp_path, monkeypatch):
    """With progress on (an interactive `trace`), the bar shows from the first report here and
    the trace is the one written without it."""
    import shutil

    import proton_lite.pipeline as pipeline
    src = tmp_path / "softmax.plraw"
    shutil.copy(os.path.join(os.path.dirname(__file__), "data", "softmax.plraw"), src)
    shown = []
    real = pipeline._Bar

    class Eager(real):
        def __init__(self, label, after=1.0):
            super().__init__(label, after=0.0)
            shown.append(label)

    monkeypatch.setattr(pipeline, "_Bar", Eager)
    _, (with_bar, ) = pipeline.raw_to_traces(str(src), str(tmp_path / "a"), ["perfetto"], progress=True)
    _, (without, ) = pipeline.raw_to_traces(str(src), str(tmp_path / "b"), ["perfetto"], progress=False)
    assert open(with_bar, "rb").read() == open(without, "rb").read()
    assert shown == ["proton_lite: decoding", "proton_lite: writing a.pftrace"]  # none without progress


@pytest.mark.parametrize("with_intervals", [True, False])
def test_writers_refuse_duplicate_ctas_and_intervals_without_their_cta(tmp_path, with_intervals):
    p = synthetic_profile()
    ctas = p.ctas.copy()
    ctas[1]["launch"], ctas[1]["cta"], ctas[1]["smid"] = ctas[0]["launch"], ctas[0]["cta"], ctas[0]["smid"] + 1
    iv = p.intervals if with_intervals else p.intervals[:0]
    dup = Profile(p.kernels, p.launches, ctas, iv, p.t0_ns, p.session)
    for fmt in ("perfetto", "chrome"):
        with pytest.raises(ValueError, match=r"duplicate \(launch, cta\) rows"):
            write_trace(dup, tmp_path / f"dup.{fmt}", fmt)
    orphan = p.intervals.copy()
    orphan[-1]["cta"] = 999
    lost = Profile(p.kernels, p.launches, p.ctas, orphan, p.t0_ns, p.session)
    with pytest.raises(ValueError, match=f"interval {len(orphan) - 1} refers to launch .* CTA 999, which is missing"):
        write_trace(lost, tmp_path / "lost.pftrace", "perfetto")


def test_chrome_bytes_do_not_depend_on_the_c_extension(tmp_path, monkeypatch):
    """The JSON writer's pieces ordered and its counters counted in numpy where the C
    extension is missing (one part of time, the pieces' events by ``_nesting``): the same
    event lines (the metadata's packed columns are deflated by zlib then: other bytes, the
    same profile read back)."""
    import proton_lite.trace.cta_sequence as cs
    import proton_lite.trace.perfetto_pieces as pp
    from proton_lite.trace import native_events
    monkeypatch.setattr(pp, "PIECE", 200)
    monkeypatch.setattr(cs, "PART_EVENTS", 300)
    p = big_profile(n_ctas=1024, iters=2)
    with_c = write_trace(p, tmp_path / "c.json", "chrome")
    monkeypatch.setattr(native_events, "module", lambda: None)
    without = write_trace(p, tmp_path / "numpy.json", "chrome")
    assert with_c["pieces"] == without["pieces"] > 10
    events = [(tmp_path / name).read_bytes().split(b"\n", 1)[1] for name in ("c.json", "numpy.json")]
    assert events[0] == events[1] and events[0].count(b'"ph":"X"') == len(p.ctas) + len(p.intervals) + len(p.launches)
    assert_same_profile(load_trace(tmp_path / "c.json"), load_trace(tmp_path / "numpy.json"))


@needs_tp
@pytest.mark.parametrize("native,fmt", [(True, "perfetto"), (False, "perfetto"), (True, "chrome")])
def test_a_scopes_pipelining_note_rides_on_its_slices(tmp_path, monkeypatch, native, fmt):
    """A kernel's metadata note on a scope (passes/pipelining.py) becomes a `note` arg on that
    scope's slices, in both encoders, next to a `depth` arg where a lane needs one; the
    trace still reads back to the same profile."""
    from proton_lite.trace import native_events
    if not native:
        monkeypatch.setattr(native_events, "module", lambda: None)
    p = synthetic_profile()
    msg = "scope 'mma': its dot(s) (wgmma) run asynchronously"
    p.kernels[0].meta["pipelined"] = [{"scope": "mma", "message": msg}]
    p.kernels[1].meta["pipelined"] = [{"scope": "consumer", "message": msg + " (attn)"}]
    path = tmp_path / ("n.pftrace" if fmt == "perfetto" else "n.json")
    write_trace(p, path, fmt)
    key = "debug.note" if fmt == "perfetto" else "args.note"
    bad, rows = tp.query(str(path), [tp.BAD_STATS,
                                     "select s.name as name, a.string_value as note from slice s join args a "
                                     f"using (arg_set_id) where a.key = '{key}'"])
    assert bad == []
    scopes = {0: "mma", 1: "consumer"}
    kern = dict(zip(p.launches["launch"].tolist(), p.launches["kernel"].tolist()))
    expected = sum(1 for i in p.intervals if kern[int(i["launch"])] in scopes and
                   p.kernels[kern[int(i["launch"])]].scopes[int(i["scope"])] == scopes[kern[int(i["launch"])]])
    assert expected > 0 and len(rows) == expected
    assert {(r["name"], r["note"]) for r in rows} == {("mma", msg), ("consumer", msg + " (attn)")}
    assert_same_profile(p, load_trace(path))
