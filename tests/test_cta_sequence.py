"""The stop's CTA-lifetime steps in C and in parts of time give what their numpy definitions give.

``slots_c.pack_slots`` (a greedy sweep with heaps) against ``rows.pack_slots_numpy`` (pointer
doubling) and against the packing's own rule checked here; ``slots_c.resident_marks`` with
counts carried in from an earlier part; ``CtaParts`` cut into parts of time on several
threads against one sort and a count made here event by event; and a whole trace of CTA
lifetimes, sorted in parts, byte for byte the trace the numpy path writes.
"""
import base64
import zlib

import numpy as np
import pytest
from test_trace import _kernel

from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, Profile
from proton_lite.trace import cta_sequence as cs
from proton_lite.trace import meta, native_events, slots_c
from proton_lite.trace.cta_events_c import part_packets
from proton_lite.trace.nesting import _unique
from proton_lite.trace.perfetto import write_perfetto
from proton_lite.trace.readback import load_trace
from proton_lite.trace.rows import pack_slots_numpy, resident_changes


def _native_or_skip():
    if native_events.module() is None:
        pytest.skip(f"the C extension did not build here: {native_events.error()}")


def _spans(rng, n, horizon, longest):
    lo = rng.integers(0, horizon, n)
    return lo, lo + 1 + rng.integers(0, longest, n)


@pytest.mark.parametrize("seed", range(6))
def test_c_packing_is_the_numpy_packing_and_first_fit(seed):
    _native_or_skip()
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 4000))
    group = np.sort(rng.integers(0, int(rng.integers(1, 30)), n))  # in runs, CTAs not in time order within
    lo, hi = _spans(rng, n, int(rng.integers(5, 3000)), int(rng.integers(1, 400)))
    slot = slots_c.pack_slots(group, lo, hi)
    assert np.array_equal(slot, pack_slots_numpy(group, lo, hi))
    for g in np.unique(group):  # the rule itself: in (lo, hi, index) order, the lowest slot free at lo
        idx = np.flatnonzero(group == g)
        ends: list[int] = []
        for i in idx[np.lexsort((idx, hi[idx], lo[idx]))]:
            free = [s for s, e in enumerate(ends) if e <= lo[i]]
            if free:
                ends[free[0]] = hi[i]
            else:
                ends.append(hi[i])
            assert slot[i] == (free[0] if free else len(ends) - 1)


def test_c_packing_leaves_groups_out_of_runs_to_numpy():
    group = np.array([1, 0, 1])
    assert slots_c.pack_slots(group, np.zeros(3, np.int64), np.ones(3, np.int64)) is None


@pytest.mark.parametrize("seed", range(4))
def test_resident_counts_carried_into_a_later_part_are_those_of_the_whole(seed):
    _native_or_skip()
    rng = np.random.default_rng(seed)
    n, keys = 3000, 7
    start, end = _spans(rng, n, 500, 60)
    key = rng.integers(0, keys, n)
    t = np.r_[start, end]
    order = np.argsort(t, kind="stable")
    t, k, d = t[order], np.r_[key, key][order], np.r_[np.ones(n, np.int64), -np.ones(n, np.int64)][order]
    ev, value = resident_changes(k, t, d)
    has_all, v_all = slots_c.resident_marks(k, t, d)
    assert np.array_equal(np.flatnonzero(has_all), np.sort(ev)) and np.array_equal(v_all[np.sort(ev)],
                                                                                     value[np.argsort(ev)])
    cut = int(np.searchsorted(t, 250))  # a part boundary between two times
    init = np.bincount(k[:cut], weights=d[:cut], minlength=keys).astype(np.int64)
    has1, v1 = slots_c.resident_marks(k[:cut], t[:cut], d[:cut], np.zeros(keys, np.int64))
    has2, v2 = slots_c.resident_marks(k[cut:], t[cut:], d[cut:], init)
    assert np.array_equal(np.r_[has1, has2], has_all) and np.array_equal(np.r_[v1, v2], v_all)


def _whole(start, end, track, keys, workers=1, part_events=None, shift=0, track_ids=None) -> cs.CtaSequence:
    """The whole sequence, ``CtaParts``' parts laid end to end (the writer asks part by part)."""
    parts = cs.CtaParts(start, end, track, keys, workers, part_events, shift, track_ids)
    seqs = [parts.part(j) for j in range(parts.n_parts)]
    cat = lambda f: np.concatenate([f(s) for s in seqs])  # noqa: E731
    return cs.CtaSequence(cat(lambda s: s.begin), cat(lambda s: s.cta), cat(lambda s: s.track), cat(lambda s: s.t),
                          [(cat(lambda s, i=i: s.marks[i][0]), cat(lambda s, i=i: s.marks[i][1]))
                           for i in range(len(keys))])


def _reference(start, end, track, keys):
    """The sequence by one lexsort and the counts by walking the events one by one."""
    n = len(start)
    t = np.r_[start, end]
    phase = np.r_[np.ones(n, np.int64), np.where(end <= start, 2, 0)]
    ev = np.lexsort((np.arange(2 * n), np.r_[track, track], phase, t))
    marks = []
    for key in keys:
        k = np.r_[key, key][ev]
        count: dict = {}
        has, value = np.zeros(2 * n, bool), np.zeros(2 * n, np.int64)
        for j in range(2 * n):
            count[k[j]] = count.get(k[j], 0) + (1 if ev[j] < n else -1)
            last_of_time = all(not (k[i] == k[j]) for i in range(j + 1, 2 * n) if t[ev[i]] == t[ev[j]])
            before = count[k[j]] - sum((1 if ev[i] < n else -1) for i in range(j + 1) if k[i] == k[j] and
                                       t[ev[i]] == t[ev[j]])
            if last_of_time and count[k[j]] != before:
                has[j], value[j] = True, count[k[j]]
        marks.append((has, value))
    return ev, t[ev], marks


@pytest.mark.parametrize("seed", range(4))
def test_the_cta_sequence_in_parts_is_one_sort_and_a_count_by_hand(seed, monkeypatch):
    _native_or_skip()
    if seed % 2:  # the counting sort by part in chunks of events, on several threads
        monkeypatch.setattr(cs, "CUT_CHUNK", 53)
    rng = np.random.default_rng(seed)
    n = 300
    start, end = _spans(rng, n, 120, 40)  # many equal times: ties between ends, begins and tracks
    end = np.where(rng.random(n) < 0.1, start, end)  # zero-length CTAs
    track, sm = rng.integers(0, 9, n), rng.integers(0, 5, n)
    seq = _whole(start, end, track, [sm, sm // 3], workers=3, part_events=37)
    ev, t, marks = _reference(start, end, track, [sm, sm // 3])
    assert np.array_equal(seq.begin, ev < n) and np.array_equal(seq.cta, ev % n) and np.array_equal(seq.t, t)
    assert np.array_equal(seq.track, np.r_[track, track][ev])
    for (has, value), (r_has, r_value) in zip(seq.marks, marks):
        assert np.array_equal(has, r_has) and np.array_equal(np.where(has, value, 0), r_value)
    # narrow columns as the writer gives them: tracks as rows of a uuid table, keys as int32/uint16
    ids = np.cumsum(rng.integers(1, 1000, 9)) + (1 << 40)
    narrow = _whole(start, end, track.astype(np.int32), [sm.astype(np.int32), (sm // 3).astype(np.uint16)],
                    workers=3, part_events=37, track_ids=ids)
    assert np.array_equal(narrow.track, ids[np.r_[track, track][ev]]) and np.array_equal(narrow.cta, seq.cta)
    for (has, value), (n_has, n_value) in zip(seq.marks, narrow.marks):
        assert np.array_equal(has, n_has) and np.array_equal(np.where(has, value, 0), np.where(has, n_value, 0))


def test_parts_left_empty_by_equal_times_are_written_as_nothing():
    """CTAs that all start at one instant leave most parts of time empty: the sequence and its
    counts are still one sort and a count by hand, and each part starts after the time of the
    last event before it (its timestamps are deltas from it)."""
    _native_or_skip()
    n = 300
    start = np.zeros(n, np.int64)
    start[:5] = 7
    end = start + np.where(np.arange(n) % 3 == 0, 0, 50)  # a third of zero length
    track, sm = np.arange(n) % 4, np.arange(n) % 5
    parts = cs.CtaParts(start, end, track, [sm, sm // 2], workers=2, part_events=20, shift=1000)
    assert parts.n_parts == 30 and (np.diff(parts.bounds) == 0).sum() >= 25
    seqs = [parts.part(j) for j in range(parts.n_parts)]
    last = 0
    for seq in seqs:
        assert seq.prev_t == last
        last = int(seq.t[-1]) if len(seq.t) else last
    ev, t, marks = _reference(start, end, track, [sm, sm // 2])
    whole = _whole(start, end, track, [sm, sm // 2], workers=2, part_events=20, shift=1000)
    assert np.array_equal(whole.cta, ev % n) and np.array_equal(whole.t, t + 1000)
    for (has, value), (r_has, r_value) in zip(whole.marks, marks):
        assert np.array_equal(has, r_has) and np.array_equal(np.where(has, value, 0), r_value)


def _lifetimes_profile(n_ctas=6000, sms=16, seed=0) -> Profile:
    """Two launches of a kernel without scopes: CTA lifetimes only, in waves with equal times;
    the second launch's grid is 3-D (its CTAs are named with coordinates), and one CTA's
    clock ran backwards (its cycles, negative, take a 10-byte varint)."""
    rng = np.random.default_rng(seed)
    launches = np.zeros(2, LAUNCH_DTYPE)
    launches["launch"], launches["grid_x"], launches["grid_y"], launches["grid_z"] = [0, 1], [n_ctas, 100], \
        [1, n_ctas // 200], [1, 2]
    c = np.arange(n_ctas)
    ctas = np.zeros(2 * n_ctas, CTA_DTYPE)
    for la in range(2):
        part = ctas[la * n_ctas:(la + 1) * n_ctas]
        start = la * 10**6 + (c // (4 * sms)) * 900 + rng.integers(0, 4, n_ctas) * 10
        part["launch"], part["cta"], part["smid"] = la, c, rng.permutation(c) % sms
        part["start_ns"], part["end_ns"] = start, start + 800 + rng.integers(0, 3, n_ctas) * 50
        part["start_clock"] = (1 << 40) + start * 2
        part["end_clock"] = part["start_clock"] + (part["end_ns"] - start) * 2
        part["cycles_per_ns"], part["measured_cycles_per_ns"], part["finished_units"] = 2.0, 1.999, 1
    ctas["end_clock"][7] = ctas["start_clock"][7] - 5
    return Profile(kernels=[_kernel("k", [], warps=8, gran="cta")], launches=launches, ctas=ctas,
                   intervals=np.zeros(0, INTERVAL_DTYPE), t0_ns=10**12, session={})


@pytest.mark.parametrize("layout", ["launch", "sm"])
def test_a_trace_of_lifetimes_sorted_in_parts_is_the_numpy_paths_trace(tmp_path, monkeypatch, layout):
    """Cut into parts of time, each sorted, counted and laid out in C (``cta_events_c``) by the
    task that encodes it: the packets of the numpy path, which makes the sequence in one
    piece (deflated, the batches are cut at other packets: the same trace read back)."""
    _native_or_skip()
    import proton_lite.trace.perfetto_tree as pt
    p = _lifetimes_profile()
    monkeypatch.setattr(cs, "PART_EVENTS", 1000)  # 24 parts
    assert cs.planned_parts(len(p.ctas)) == 24
    fused = []  # each part sorted, counted and laid out in one C call (``cta_events_c.part_packets``)

    def counted(*args):
        got = part_packets(*args)
        fused.append(got is not None)
        return got
    monkeypatch.setattr(pt, "part_packets", counted)
    for compress in (False, True):
        write_perfetto(p, tmp_path / f"parts{compress}.pftrace", workers=3, layout=layout, compress=compress)
    with monkeypatch.context() as m:
        m.setattr(native_events, "deflate", native_events.module().deflate)
        m.setattr(native_events, "module", lambda: None)  # one part, numpy packing and counts
        for compress in (False, True):
            write_perfetto(p, tmp_path / f"numpy{compress}.pftrace", workers=3, layout=layout, compress=compress)
    assert (tmp_path / "partsFalse.pftrace").read_bytes() == (tmp_path / "numpyFalse.pftrace").read_bytes()
    assert fused == [True] * (2 * 24)
    a, b = load_trace(tmp_path / "partsTrue.pftrace"), load_trace(tmp_path / "numpyTrue.pftrace")
    for name in ("ctas", "launches", "intervals"):
        assert getattr(a, name).tobytes() == getattr(b, name).tobytes()
    assert np.array_equal(np.sort(a.ctas["start_ns"]), np.sort(p.ctas["start_ns"]))


def test_the_writer_holds_a_window_of_the_sequences_parts_not_every_part(tmp_path, monkeypatch):
    """Each part of the CTA sequence is encoded ahead of the file only within a window of a
    few parts per thread: queued all at once, every part's bytes were held until the file
    took them (the whole sequence: 100 MB for 4 M CTA lifetimes)."""
    _native_or_skip()
    from proton_lite.trace.perfetto_tree import CtaEvents
    live = {"now": 0, "most": 0, "made": 0}

    class Counted(bytes):
        def __del__(self):
            live["now"] -= 1

    made = CtaEvents.packets

    def counted(self, task, compress):
        data = Counted(made(self, task, compress))
        live["now"] += 1
        live["made"] += 1
        live["most"] = max(live["most"], live["now"])
        return data
    monkeypatch.setattr(CtaEvents, "packets", counted)
    monkeypatch.setattr(cs, "PART_EVENTS", 200)
    p = _lifetimes_profile()
    write_perfetto(p, tmp_path / "w.pftrace", workers=2, layout="sm")
    assert live["made"] == cs.planned_parts(len(p.ctas)) >= 100
    from proton_lite.trace.perfetto import CTA_AHEAD  # (a trace without pieces: CTA_AHEAD parts a worker)
    assert live["most"] <= (CTA_AHEAD + 1) * 2 + 2 < live["made"] / 4, live
    back = load_trace(tmp_path / "w.pftrace")
    assert np.array_equal(np.sort(back.ctas["start_ns"]), np.sort(p.ctas["start_ns"]))


def test_packed_columns_in_pieces_read_back_exactly(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    n = 50_000
    rows = np.zeros(n, CTA_DTYPE)  # fields of a structured array: strided views, packed without a copy
    rows["start_clock"], rows["finished_units"] = rng.integers(0, 1 << 62, n, dtype=np.uint64), rng.integers(0, 9, n)
    cols = {"clock": rng.integers(0, 1 << 62, n, dtype=np.uint64), "rate": rng.random(n),
            "big": rng.integers(-5, 5, n).astype(">i4"), "nan": np.full(n, np.nan),
            "strided": rows["start_clock"], "strided_u4": rows["finished_units"]}
    one = meta._pack_columns(cols)
    monkeypatch.setattr(meta, "PACK_PIECE", 4096)
    monkeypatch.setattr(meta, "PACK_ROWS", 4096)
    pieces = meta._pack_columns(cols, workers=3)
    assert isinstance(one["data"], bytes) and isinstance(pieces["data"], list) and len(pieces["data"]) > 50
    inflate = lambda data: b"".join(zlib.decompress(base64.b64decode(d)) for d in data)  # noqa: E731
    assert inflate(pieces["data"]) == inflate([one["data"]])  # the same bytes, in streams of byte planes
    for packed in (one, pieces):
        back = meta._unpack_columns(packed)
        for name, a in cols.items():
            assert np.array_equal(back[name], a, equal_nan=True) and back[name].dtype == a.dtype.newbyteorder("<")
    p = _lifetimes_profile(n_ctas=3000)  # and through a trace: the CTAs' extras come back
    write_perfetto(p, tmp_path / "t.pftrace", workers=2)
    back = load_trace(tmp_path / "t.pftrace").ctas
    assert np.array_equal(np.sort(back["start_clock"]), np.sort(p.ctas["start_clock"]))


def test_unique_by_a_presence_table_is_numpys_unique():
    rng = np.random.default_rng(1)
    for bound in (1, 7, 1000, 1 << 20):
        keys = rng.integers(0, bound, 5000)
        for got, want in zip(_unique(keys, bound), np.unique(keys, return_inverse=True)):
            assert np.array_equal(got, want)


def test_the_cta_view_reads_what_a_sorted_copy_holds(monkeypatch):
    """``CtaView`` in place of a sorted copy of the CTA rows: every column, any rows of it and
    a lazy column's slices are the copy's (the kept columns gathered row by row in parts on
    threads); in the profile's own order, views of its array."""
    from concurrent.futures import ThreadPoolExecutor

    from proton_lite.trace import cta_view
    from proton_lite.trace.cta_view import CtaView
    monkeypatch.setattr(cta_view, "GATHER_ROWS", 97)  # several parts, the last one short
    rng = np.random.default_rng(2)
    p = _lifetimes_profile(n_ctas=700)
    for order in (rng.permutation(len(p.ctas)), np.arange(len(p.ctas))):
        with ThreadPoolExecutor(3) as pool:
            copy, view = p.ctas[order], CtaView(p.ctas, order, pool.map)
        idx = rng.integers(0, len(order), 50)
        for name in CTA_DTYPE.names:
            assert np.array_equal(view[name], copy[name]) and np.array_equal(view.take(name, idx), copy[name][idx])
            assert np.array_equal(view.column(name)[100:333], copy[name][100:333])
        assert len(view) == len(copy)
        assert np.shares_memory(view["cta"], p.ctas) == (view.order is None)
    assert CtaView(p.ctas, np.arange(len(p.ctas))).order is None


@pytest.mark.parametrize("layout", ["launch", "sm"])
def test_parts_in_c_with_a_launch_whose_ctas_are_all_missing(tmp_path, monkeypatch, layout):
    """A launch without a CTA row (every header missing) has a top group in the launch layout
    but no key in the CTAs' columns: the parts made in C still give the numpy path's trace."""
    _native_or_skip()
    p = _lifetimes_profile(n_ctas=3000)
    launches = np.zeros(3, LAUNCH_DTYPE)
    launches[:2] = p.launches
    launches[2]["launch"], launches[2]["grid_x"], launches[2]["num_ctas"], launches[2]["missing_ctas"] = 2, 64, 64, 64
    p = Profile(p.kernels, launches, p.ctas, p.intervals, p.t0_ns, p.session)
    monkeypatch.setattr(cs, "PART_EVENTS", 1000)
    write_perfetto(p, tmp_path / "parts.pftrace", workers=2, layout=layout, compress=False)
    with monkeypatch.context() as m:
        m.setattr(native_events, "deflate", native_events.module().deflate)
        m.setattr(native_events, "module", lambda: None)
        write_perfetto(p, tmp_path / "numpy.pftrace", workers=2, layout=layout, compress=False)
    assert (tmp_path / "parts.pftrace").read_bytes() == (tmp_path / "numpy.pftrace").read_bytes()


@pytest.mark.parametrize("seed", range(3))
def test_the_parts_cut_in_c_are_the_numpy_cut(seed, monkeypatch):
    """``CtaParts`` cut in one C call (``cta_parts_c``): the events' part order, each part's
    bounds, previous time and every key's count before it are those of the numpy cut, with
    keys of both widths, many parts left empty and zero-length CTAs."""
    _native_or_skip()
    from proton_lite.trace import cta_parts_c
    rng = np.random.default_rng(seed)
    n = 2000
    start, end = _spans(rng, n, 300 if seed else 5, 40)  # seed 0: few times, most parts empty
    end = np.where(rng.random(n) < 0.1, start, end)
    keys = [rng.integers(0, 40, n), rng.integers(0, 3, n).astype(np.int32)]

    used = []

    def cut(native: bool):
        with monkeypatch.context() as m:
            real = cta_parts_c.part_cut
            m.setattr(cta_parts_c, "part_cut", (lambda *a: used.append(real(*a)) or used[-1]) if native else
                      (lambda *a: None))
            return cs.CtaParts(start, end, np.zeros(n, np.int64), keys, workers=2, part_events=64, shift=77)
    fast, slow = cut(True), cut(False)
    assert used and used[0] is not None and fast.n_parts == slow.n_parts > 50
    if not seed:
        assert (np.diff(slow.bounds) == 0).sum() > 10
    for name in ("by_part", "bounds", "prev_t"):
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name
    for j in range(fast.n_parts):
        for a, b in zip(fast.counts_before(j), slow.counts_before(j)):
            assert np.array_equal(a, b), j
