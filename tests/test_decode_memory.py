"""The decoder writes each batch's intervals straight to their place in the profile's one
array (``decode_assemble.write_intervals``), so that a decode holds the intervals once plus
the batches in flight; each launch's room comes from its units' counts
(``interval_bounds``) and ``_settle`` moves the launches together and finishes their times."""
import tracemalloc

import numpy as np
import pytest

import proton_lite.decode as D
import proton_lite.decode_assemble as A
from proton_lite import native_decode
from proton_lite.layout import BufferLayout, encode_tag
from proton_lite.profile_data import INTERVAL_DTYPE
from proton_lite.raw_format import RawWriter, read_raw
from synth import kernel_meta, launch_buffer


def _many_launches(path, kernels=4, launches=6, ctas=64, units=4, pairs=8, lose_exit_every=0):
    """Launches of several kernels (so several batches), each unit ``pairs`` sequential scopes;
    ``lose_exit_every``: every n-th unit loses its last exit (an unmatched enter)."""
    w = RawWriter(path, {"name": "many"})
    index = 0
    for kid in range(kernels):
        layout = BufferLayout("warp", units, 2 * pairs, "shared")
        w.kernel(kernel_meta(kid, f"k{kid}", ["a", "b"], layout))
    for li in range(launches):
        for kid in range(kernels):
            layout = BufferLayout("warp", units, 2 * pairs, "shared")
            blocks = []
            for c in range(ctas):
                clk, gt = 10_000_000 * (c % 7 + 1) + 90_000 * index, 1_000_000_000 + 45_000 * index + 33 * c
                us = []
                for u in range(units):
                    recs = []
                    for k in range(pairs):
                        recs += [(encode_tag(k % 2, False), clk + 100 + 300 * k + u),
                                 (encode_tag(k % 2, True), clk + 250 + 300 * k + 7 * c)]
                    if lose_exit_every and (c * units + u) % lose_exit_every == 0:
                        recs = recs[:-1]
                    us.append((len(recs), gt + 300 * pairs // 2 + 200, clk + 300 * pairs + 400, recs))
                blocks.append({"smid": c % 7, "start_gt": gt, "start_clk": clk, "units": us})
            w.launch(kid, 0, index, (ctas, 1, 1), ctas, 0, 0, launch_buffer(layout, blocks))
            index += 1
    w.end({"launches": index})
    w.close()
    return read_raw(path)


def _decoded_on_one_thread(capture, monkeypatch, batch_bytes: int):
    """The profile, and the memory tracemalloc saw held at the end and at its peak."""
    monkeypatch.setattr(D, "DECODE_WORKERS", 1)
    monkeypatch.setattr(D, "BATCH_BYTES", batch_bytes)
    tracemalloc.start()
    try:
        profile = D.decode(capture)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return profile, held, peak


def test_a_decode_holds_the_intervals_once_not_every_batchs_pairs_as_well(tmp_path, monkeypatch):
    capture = _many_launches(tmp_path / "m.plraw")
    profile, held, peak = _decoded_on_one_thread(capture, monkeypatch, 64 << 10)  # a batch per launch or two
    intervals = profile.intervals.nbytes
    assert len(profile.intervals) == 4 * 6 * 64 * 4 * 8
    # every batch's pairs (56 bytes an interval) held until all were decoded, as before, would
    # add more than the intervals themselves again; now: one small batch at a time
    assert peak - held < intervals / 4, (peak - held, intervals)


def test_units_that_lose_records_leave_no_gap_and_the_same_bytes_either_way(tmp_path, monkeypatch):
    """Launches whose units lost an exit hold fewer intervals than their room: the launches are
    moved together, in launch order, by the C code and by numpy alike."""
    capture = _many_launches(tmp_path / "g.plraw", kernels=3, launches=4, ctas=16, units=2, pairs=3,
                             lose_exit_every=3)
    monkeypatch.setattr(D, "BATCH_BYTES", 16 << 10)
    native = D.decode(capture)
    monkeypatch.setattr(native_decode, "module", lambda: None)
    plain = D.decode(capture)
    assert native.intervals.tobytes() == plain.intervals.tobytes()
    iv = native.intervals
    assert (np.diff(iv["launch"].astype(np.int64)) >= 0).all()  # launch order, no gap rows between
    lost = sum(1 for c in range(16) for u in range(2) if (c * 2 + u) % 3 == 0)
    assert len(iv) == 12 * (16 * 2 * 3 - lost)
    assert int(native.launches["unmatched"].sum()) == 12 * lost


def test_settle_moves_rows_and_rounds_times_as_numpy_does():
    """``native_decode.settle`` against ``_settle``'s numpy path on raw rows with gaps, a launch
    left out, exact halves (round half to even) with odd offsets, and ends before starts."""
    if native_decode.module() is None:
        pytest.skip(f"C extension not built here: {native_decode.error()}")
    rng = np.random.default_rng(3)
    rows = np.array([5, 0, 7, 3, 9], np.int64)
    room = rows + np.array([2, 1, 0, 4, 3])
    first = np.cumsum(room) - room
    raw = np.zeros(int(room.sum()), INTERVAL_DTYPE)
    raw["launch"] = np.repeat(np.arange(5), room)
    raw["cycles"] = rng.integers(0, 1 << 40, len(raw))
    start = np.round(rng.normal(1e5, 1e5, len(raw)) * 2) / 2
    raw["start_ns"].view(np.float64)[:] = start
    raw["end_ns"].view(np.float64)[:] = start + rng.normal(50, 100, len(raw))
    offset = np.array([0.0, 3.0, 1e9 + 1, 7.0, -5.0])
    keep = np.array([True, True, False, True, True])
    c_out, np_out = raw.copy(), raw.copy()
    n_c = native_decode.settle(c_out, first, rows, offset, keep)
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(native_decode, "module", lambda: None)
    try:
        n_np = A._settle(np_out, first, rows, offset, keep)
    finally:
        monkeypatch.undo()
    assert n_c == n_np == 5 + 3 + 9
    assert c_out[:n_c].tobytes() == np_out[:n_np].tobytes()
    got = c_out[:n_c]
    assert list(np.unique(got["launch"])) == [0, 3, 4] and (got["end_ns"] >= got["start_ns"]).all()
    expect = np.rint(raw["start_ns"].view(np.float64)[first[3]:first[3] + 3] + 7.0).astype(np.int64)
    assert (got["start_ns"][5:8] == expect).all()


def test_a_launch_with_more_intervals_than_its_room_is_an_error_not_an_overwrite(tmp_path, monkeypatch):
    capture = _many_launches(tmp_path / "e.plraw", kernels=1, launches=2, ctas=4, units=1, pairs=2)
    monkeypatch.setattr(D, "interval_bounds", lambda *a: A.interval_bounds(*a) - 1)
    with pytest.raises(RuntimeError, match="more than its units' counts allow"):
        D.decode(capture)


def _lifetimes(path, launches=8, ctas=40, missing=()):
    """Launches of a kernel without scopes (32-byte lifetime blocks, format.md §1.2a), each
    1 ms after the one before; the (launch, CTA) pairs in ``missing`` never ran."""
    from dataclasses import replace
    headers = BufferLayout("cta", 8, 0, "global")
    compact = replace(headers, compact=True)
    w = RawWriter(path, {"name": "lifetimes"})
    w.kernel(kernel_meta(0, "k", [], compact))
    g0, c0 = 1_764_000_000_000_000_000, 5_000_000_000
    for n in range(launches):
        blocks = [None if (n, i) in missing else
                  {"smid": i % 6, "start_gt": g0 + n * 10**6 + 700 * i, "start_clk": c0 + n * 1_980_000 + 1_386 * i,
                   "units": [(0, g0 + n * 10**6 + 700 * i + 2_000 + 11 * i,
                              c0 + n * 1_980_000 + 1_386 * i + 3_960 + 21 * i, [])]} for i in range(ctas)]
        w.launch(0, 0, n, (ctas, 1, 1), ctas, 0, 0, launch_buffer(compact, blocks))
    w.close()
    return read_raw(path)


def test_a_decode_holds_the_ctas_once_not_every_batchs_columns_as_well(tmp_path, monkeypatch):
    """Each batch writes its CTA rows at their launches' places in the profile's one CTA array
    as it is decoded (``write_ctas``): a capture of CTA lifetimes decoded in many batches holds
    the CTAs once plus one batch, not every batch's columns (~68 bytes a CTA) beside them."""
    capture = _lifetimes(tmp_path / "l.plraw", launches=160, ctas=1024)  # (the timer's tick is read from 64)
    profile, held, peak = _decoded_on_one_thread(capture, monkeypatch, 1024 * 32)  # a launch a batch
    assert len(profile.ctas) == 160 * 1024
    assert peak - held < profile.ctas.nbytes / 3, (peak - held, profile.ctas.nbytes)


def test_ctas_missing_in_some_launches_leave_no_gap_whatever_the_batches(tmp_path, monkeypatch):
    """CTAs that never ran leave their launch fewer rows than its room: the launches are moved
    together in launch order, and the rows (times on the session's axis) are the same whether
    the launches are decoded a batch each, all in one batch or on several threads, and the
    same as each launch decoded alone."""
    missing = {(0, 5), (2, 0), (2, 39), (3, 7), (3, 8), (6, 20)}
    capture = _lifetimes(tmp_path / "m.plraw", missing=missing)
    runs = []
    for batch_bytes, workers in ((1, 1), (1 << 30, 1), (3 * 40 * 32, 3)):
        monkeypatch.setattr(D, "BATCH_BYTES", batch_bytes)
        monkeypatch.setattr(D, "DECODE_WORKERS", workers)
        runs.append(D.decode(capture))
    first = runs[0].ctas
    assert all(p.ctas.tobytes() == first.tobytes() for p in runs[1:])
    assert first["launch"].tolist() == [n for n in range(8) for i in range(40) if (n, i) not in missing]
    assert first["cta"].tolist() == [i for n in range(8) for i in range(40) if (n, i) not in missing]
    assert runs[0].launches["missing_ctas"].tolist() == [1, 0, 2, 2, 0, 0, 1, 0]
    # each launch alone: the same absolute start and end times
    alone = []
    for n in range(8):
        sub = _lifetimes(tmp_path / f"a{n}.plraw", launches=n + 1, missing=missing)
        p = D.decode(sub)
        rows = p.ctas[p.ctas["launch"] == n]
        alone.append(np.stack([rows["start_ns"] + p.t0_ns, rows["end_ns"] + p.t0_ns]))
    assert (np.concatenate(alone, axis=1) == np.stack([first["start_ns"] + runs[0].t0_ns,
                                                       first["end_ns"] + runs[0].t0_ns])).all()


@pytest.mark.parametrize("span", [1, 7, 1 << 12])
def test_ctas_settle_launch_by_launch_or_many_launches_in_one_pass_alike(monkeypatch, span):
    """``_settle_ctas`` finishes runs of launches whose rows lie end to end in one pass (each
    row's launch offset repeated over its rows), launch by launch where rows are missing between
    them: the times are ``rint(t + offset)`` of every kept launch's rows, as one launch at a time
    gives them, and the kept rows end up together in launch order, whatever the span and parts."""
    from proton_lite.profile_data import CTA_DTYPE
    rng = np.random.default_rng(span)
    n_launch = 300
    room = rng.integers(1, 40, n_launch)
    rows = np.where(rng.random(n_launch) < 0.2, rng.integers(0, room + 1), room)  # some launches miss CTAs
    first = np.cumsum(room) - room
    out = np.zeros(int(room.sum()), CTA_DTYPE)
    out["start_ns"].view(np.float64)[:] = rng.random(len(out)) * 1e6
    out["end_ns"].view(np.float64)[:] = out["start_ns"].view(np.float64) + rng.random(len(out)) * 1e4
    out["cta"] = np.arange(len(out))
    offset = rng.integers(-10**9, 10**9, n_launch).astype(np.float64) + rng.random(n_launch)
    keep = rng.random(n_launch) < 0.9
    want = []
    for i in np.flatnonzero(keep & (rows > 0)).tolist():
        block = out[first[i]:first[i] + rows[i]].copy()
        for name in ("start_ns", "end_ns"):
            block[name] = np.rint(block[name].view(np.float64) + offset[i]).astype(np.int64)
        want.append(block)
    monkeypatch.setattr(A, "SETTLE_SPAN", span)
    monkeypatch.setattr(A, "SETTLE_ROWS", 97)
    n = A._settle_ctas(out, first, rows, offset, keep)
    assert out[:n].tobytes() == np.concatenate(want).tobytes()
