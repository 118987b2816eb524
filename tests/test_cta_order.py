"""The plan's CTA order in C (``trace/cta_order_c.py``) against the numpy forms it stands in
for: the same launch ranks, layout, order, gathered columns, slots and trace, on profiles
whose CTA rows come as the decoder writes them ((launch, CTA id) order) and otherwise."""
from __future__ import annotations

import base64
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
from proton_lite.trace import cta_order_c, meta, native_events
from proton_lite.trace import plan as plan_module
from proton_lite.trace.cta_view import KEPT
from proton_lite.trace.perfetto import write_perfetto
from proton_lite.trace.readback import load_trace
from proton_lite.trace.tree import _launch_table, _sorted_launches


def _ranks(ctas, launches):
    return cta_order_c.launch_ranks(ctas, _launch_table(launches["launch"].astype(np.int64)), len(launches))


def _native_or_skip():
    if native_events.module() is None:
        pytest.skip(f"the C extension did not build here: {native_events.error()}")


def _profile(rng, n_launches=7, sms=5, devices=1, scopes=False, missing=0.1) -> Profile:
    """Launches of 0-300 CTAs (ids with gaps: CTAs whose header was lost) on ``sms`` SMs in
    waves, rows in (launch, CTA id) order as the decoder writes them; launch ids not
    consecutive; launches alternate between ``devices`` GPUs."""
    launches = np.zeros(n_launches, LAUNCH_DTYPE)
    launches["launch"] = np.sort(rng.choice(np.arange(3 * n_launches), n_launches, replace=False))
    launches["device"] = np.arange(n_launches) % devices
    rows = []
    for la in launches["launch"].tolist():
        n = int(rng.integers(0, 300))
        cta = np.flatnonzero(rng.random(n) >= missing)
        c = np.zeros(len(cta), CTA_DTYPE)
        start = la * 10**5 + (np.arange(len(cta)) // (2 * sms)) * 700 + rng.integers(0, 5, len(cta)) * 10
        c["launch"], c["cta"], c["smid"] = la, cta, rng.integers(0, sms, len(cta))
        c["start_ns"], c["end_ns"] = start, start + rng.integers(0, 600, len(cta))
        c["start_clock"], c["end_clock"] = (1 << 40) + 2 * start, (1 << 40) + 2 * c["end_ns"]
        c["cycles_per_ns"], c["measured_cycles_per_ns"] = 2.0, rng.random(len(cta)) + 1.5
        c["finished_units"] = rng.integers(0, 9, len(cta))
        rows.append(c)
    ctas = np.concatenate(rows)
    launches["grid_x"] = [int(c["cta"].max()) + 1 if len(c) else 1 for c in rows]
    launches["grid_y"] = launches["grid_z"] = 1
    launches["num_ctas"] = [len(c) for c in rows]
    iv = np.zeros(0, INTERVAL_DTYPE)
    if scopes:  # an interval a CTA, in runs of one CTA (as decoded)
        iv = np.zeros(len(ctas), INTERVAL_DTYPE)
        iv["launch"], iv["cta"], iv["start_ns"] = ctas["launch"], ctas["cta"], ctas["start_ns"]
        iv["end_ns"] = ctas["start_ns"] + (ctas["end_ns"] - ctas["start_ns"]) // 2
        iv["cycles"] = 2 * (iv["end_ns"] - iv["start_ns"])
    kernel = KernelInfo(name="k", scopes=["s"] if scopes else [], num_warps=4, granularity="cta", unit_warps=4,
                        capacity=4 if scopes else 0)
    return Profile(kernels=[kernel], launches=launches, ctas=ctas, intervals=iv, t0_ns=0, session={})


def _plans(p: Profile, layout: str, monkeypatch):
    """(plan with the C order, plan with the numpy forms), on three threads each."""
    launches = _sorted_launches(p)
    with ThreadPoolExecutor(3) as pool:
        fast = plan_module.plan_trace(p, launches, layout, pool.map)
        with monkeypatch.context() as m:
            m.setattr(cta_order_c, "_module", lambda: None)
            slow = plan_module.plan_trace(p, launches, layout, pool.map)
    return fast, slow


def _same_plans(fast, slow):
    assert fast.layout == slow.layout
    assert np.array_equal(fast.cta_lr, slow.cta_lr)
    for name in CTA_DTYPE.names:
        assert np.array_equal(fast.ctas[name], slow.ctas[name]), name
    for name in ("group", "row", "row_group", "row_slot", "extent_lo"):
        assert np.array_equal(getattr(fast.lay, name), getattr(slow.lay, name)), name
    for a, b in zip(fast.runs, slow.runs):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("layout", ["launch", "sm", "auto"])
@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("scopes", [False, True])
def test_the_order_in_c_is_the_numpy_order(monkeypatch, layout, devices, scopes):
    """Rows as the decoder writes them: the C order (a counting sort by (GPU, SM) in the sm
    layout, by SM within each launch in the launch layout) gives the numpy plan exactly."""
    _native_or_skip()
    rng = np.random.default_rng(devices * 10 + scopes)
    p = _profile(rng, devices=devices, scopes=scopes)
    launches = _sorted_launches(p)
    ranks = _ranks(p.ctas, launches)
    assert ranks is not None and ranks.in_order
    # the SMs of each launch, counted in C, are those the CTAs name
    want = [len(np.unique(p.ctas["smid"][p.ctas["launch"] == la])) for la in launches["launch"]]
    assert ranks.sms.tolist() == want
    fast, slow = _plans(p, layout, monkeypatch)
    assert fast.ctas.order is not None  # (an order other than the rows' own: the gathered columns are compared)
    _same_plans(fast, slow)
    # the plan keeps them (the Chrome JSON's launch slices show them); without C, counted there
    from proton_lite.trace.chrome import _sms_of_launches
    assert fast.launch_sms.tolist() == want and slow.launch_sms is None
    assert _sms_of_launches(slow.cta_lr, slow.ctas, len(launches)).tolist() == want


def test_rows_out_of_order_take_the_numpy_forms(monkeypatch):
    """Rows shuffled (a trace read back, a profile built by hand): C gives the launch ranks
    but not the order, and the plan is the numpy plan."""
    _native_or_skip()
    rng = np.random.default_rng(3)
    p = _profile(rng, devices=2)
    p.ctas = p.ctas[rng.permutation(len(p.ctas))]
    launches = _sorted_launches(p)
    ranks = _ranks(p.ctas, launches)
    assert not ranks.in_order and ranks.sms is None
    assert cta_order_c.cta_order(p.ctas, ranks, None) is None
    assert np.array_equal(ranks.lr, np.searchsorted(launches["launch"], p.ctas["launch"]))
    for layout in ("launch", "sm"):
        _same_plans(*_plans(p, layout, monkeypatch))


def test_a_duplicate_cta_or_an_unknown_launch_is_refused_as_before(monkeypatch):
    """A CTA row twice breaks the strict (launch, CTA id) order, so the numpy forms look and
    refuse it; a CTA of a launch not in the profile is refused by C with the same message."""
    _native_or_skip()
    rng = np.random.default_rng(4)
    p = _profile(rng, scopes=False)
    twice = np.sort(np.r_[np.arange(len(p.ctas)), 17])
    p.ctas = p.ctas[twice]
    with pytest.raises(ValueError, match="duplicate"):
        plan_module.plan_trace(p, _sorted_launches(p), "sm")
    p = _profile(rng)
    p.launches = p.launches[p.launches["num_ctas"] > 0][1:]  # a launch that ran CTAs is gone
    for native in (True, False):
        with monkeypatch.context() as m:
            if not native:
                m.setattr(cta_order_c, "_module", lambda: None)
            with pytest.raises(ValueError, match="missing from profile.launches"):
                plan_module.plan_trace(p, _sorted_launches(p), "auto")


def test_the_layouts_track_bound_from_each_launchs_sms_is_the_count():
    """``launch_layout_tracks`` with each launch's SMs (from C) settles the comparison with a
    limit as the count from the CTAs does, at every limit around the bounds."""
    _native_or_skip()
    rng = np.random.default_rng(5)
    p = _profile(rng, n_launches=40, sms=9, scopes=True)
    launches = _sorted_launches(p)
    ranks = _ranks(p.ctas, launches)
    full = plan_module.launch_layout_tracks(p, launches)
    # the launches, the (launch, SM) groups, and a slot and a unit track for each group
    one_slot = len(launches) + 3 * int(ranks.sms.sum())
    for limit in sorted({1, one_slot - 1, one_slot, one_slot + 1, full - 1, full, full + 1, 10 * full}):
        got = plan_module.launch_layout_tracks(p, launches, limit, ranks.lr, ranks.sms)
        assert (got > limit) == (full > limit), (limit, got, full)
        if limit < one_slot:
            assert got == one_slot  # (the bound itself, without counting the slots)


def test_an_order_that_is_the_rows_own_keeps_views(monkeypatch):
    """A launch layout whose CTAs already come by SM within each launch: the C order is the
    identity, and the view reads the profile's own columns (no gathered copy)."""
    _native_or_skip()
    rng = np.random.default_rng(6)
    p = _profile(rng)
    for la in np.unique(p.ctas["launch"]):  # SMs ascending with the CTA id within each launch
        sel = p.ctas["launch"] == la
        p.ctas["smid"][sel] = np.sort(p.ctas["smid"][sel])
    launches = _sorted_launches(p)
    ranks = _ranks(p.ctas, launches)
    order, kept, lr_s = cta_order_c.cta_order(p.ctas, ranks, None)
    assert np.array_equal(order, np.arange(len(p.ctas))) and kept is None and lr_s is None
    fast, slow = _plans(p, "launch", monkeypatch)
    assert fast.ctas.order is None and np.shares_memory(fast.ctas["start_ns"], p.ctas)
    _same_plans(fast, slow)


def test_the_ctas_extras_read_in_blocks_of_rows_come_back(tmp_path, monkeypatch):
    """The per-CTA fields of the trace's metadata, each block of rows read once for all of them
    (``meta._cta_extras``), in many pieces: read back, every CTA's fields are the profile's."""
    rng = np.random.default_rng(7)
    p = _profile(rng, n_launches=30, devices=2)
    monkeypatch.setattr(meta, "PACK_PIECE", 4096)
    monkeypatch.setattr(meta, "PACK_ROWS", 333)
    write_perfetto(p, tmp_path / "t.pftrace", workers=3, layout="sm")
    mt = load_trace(tmp_path / "t.pftrace")
    packed = _trace_meta(tmp_path / "t.pftrace")["ctas"]
    assert isinstance(packed["data"], list) and len(packed["data"]) > 100
    key = lambda c: np.lexsort((c["cta"], c["launch"]))  # noqa: E731
    back, want = mt.ctas[key(mt.ctas)], p.ctas[key(p.ctas)]
    for name in ("start_clock", "cycles_per_ns", "measured_cycles_per_ns", "finished_units", "start_ns", "end_ns"):
        assert np.array_equal(back[name], want[name]), name


def _trace_meta(path) -> dict:
    from proton_lite.trace.perfetto_fields import META_FIELD
    from proton_lite.trace.readback import _first_packet_meta
    with open(path, "rb") as f:
        return _first_packet_meta(f.read(), META_FIELD, path)


def test_packed_planes_are_the_byte_planes():
    """``_pack_columns``' planes (a transpose of the little-endian words) are each word's byte b
    for plane b, written here by shifts: the packed bytes, inflated."""
    rng = np.random.default_rng(8)
    n = 1000
    cols = {"a": rng.integers(0, 1 << 62, n, dtype=np.uint64), "b": rng.random(n),
            "c": rng.integers(-9, 9, n, dtype=np.int32)}
    got = zlib.decompress(base64.b64decode(meta._pack_columns(cols)["data"]))
    want = b""
    for name in sorted(cols):
        w = cols[name].view(f"u{cols[name].dtype.itemsize}")
        if cols[name].dtype.kind in "iu":
            w = np.r_[w[:1], w[1:] - w[:-1]]
        want += b"".join(((w >> (8 * b)) & 0xFF).astype(np.uint8).tobytes() for b in range(w.dtype.itemsize))
    assert got == want


def test_launch_ids_past_a_table_or_sm_ids_past_a_gpus_take_the_numpy_forms(monkeypatch):
    """Launch ids too large for a lookup table (merged captures can number them so) and SM ids
    no GPU has: C declines (no ranks, or ranks without an order) and the plan is the numpy plan."""
    _native_or_skip()
    rng = np.random.default_rng(9)
    p = _profile(rng, devices=2)
    big = p.launches["launch"].astype(np.int64) + (1 << 30)
    p.ctas["launch"] = big[np.searchsorted(p.launches["launch"], p.ctas["launch"])]
    p.launches["launch"] = big
    launches = _sorted_launches(p)
    assert _ranks(p.ctas, launches) is None
    _same_plans(*_plans(p, "sm", monkeypatch))
    p = _profile(rng)
    p.ctas["smid"][::7] += 70_000
    launches = _sorted_launches(p)
    ranks = _ranks(p.ctas, launches)
    assert ranks is not None and not ranks.in_order and cta_order_c.cta_order(p.ctas, ranks, None) is None
    _same_plans(*_plans(p, "launch", monkeypatch))


def test_the_plan_runs_its_passes_over_the_intervals_on_the_pool_it_is_given():
    """With the order from C, the passes over every interval (the runs of one CTA's) still go to
    the writer's pool: run on the calling thread alone they made the 21.3 M-record capture's
    plan 0.08-0.1 s slower on the 16-core GPU host (docs/results/gpu-2026-11-29e, call 8)."""
    _native_or_skip()
    from proton_lite.trace import interval_runs
    rng = np.random.default_rng(10)
    p = _profile(rng, n_launches=20, scopes=True)
    calls = []

    def pmap(f, items):
        calls.append(f)
        return map(f, items)
    plan_module.plan_trace(p, _sorted_launches(p), "sm", pmap)
    assert any(getattr(f, "__qualname__", "").startswith(interval_runs.run_starts.__name__) for f in calls), \
        [getattr(f, "__qualname__", f) for f in calls]


def test_a_trace_whose_launch_names_one_cta_twice_on_two_sms_is_refused(tmp_path):
    """Read back, the CTA table is in the decoder's order (launch, CTA id), where two slices of
    one launch with the same CTA id lie side by side whatever their SMs (in the writers' order,
    SM first, such a pair on two SMs went unseen)."""
    import json

    from proton_lite.trace.chrome import write_chrome
    rng = np.random.default_rng(11)
    p = _profile(rng, n_launches=1, sms=4, missing=0)  # (one launch: every CTA slice is of it)
    assert len(p.ctas) > 10
    write_chrome(p, tmp_path / "t.json")
    assert len(load_trace(tmp_path / "t.json").ctas) == len(p.ctas)
    doc = json.loads((tmp_path / "t.json").read_text())
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "cta" in e.get("args", {})]
    a = slices[0]
    b = next(e for e in slices if e["args"]["sm"] != a["args"]["sm"])
    b["args"]["cta"] = a["args"]["cta"]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="same CTA id"):
        load_trace(tmp_path / "bad.json")
