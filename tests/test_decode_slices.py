"""One large launch's records are paired in slices of its CTAs (``decode_slices``): the profile
is byte for byte the one decoded whole, lost exits, dropped records and CTAs that never ran
included, and the decode holds less at its peak."""
import tracemalloc

import numpy as np
import pytest

import proton_lite.decode as D
from proton_lite import decode_slices, native_decode
from proton_lite.layout import BufferLayout, encode_tag
from proton_lite.raw_format import RawWriter, read_raw
from synth import kernel_meta, launch_buffer

pytestmark = pytest.mark.skipif(native_decode.module() is None, reason="the C decode steps do not build here")


def _one_launch(path, ctas=512, units=4, pairs=6, cap=20):
    """A launch of ``ctas`` CTAs: each unit ``pairs`` scopes (nested every third unit), every
    5th unit losing its last exit, every 7th writing more records than ``cap`` (dropped), every
    11th CTA never ran, and a second launch of another kernel beside it (its own batch)."""
    layout = BufferLayout("warp", units, cap, "shared")
    w = RawWriter(path, {"name": "slices"})
    w.kernel(kernel_meta(0, "big", ["a", "b"], layout))
    blocks = []
    for c in range(ctas):
        if c % 11 == 10:
            blocks.append(None)
            continue
        clk, gt = 50_000_000 + 3_000 * c + 1_000_000 * (c % 9), 1_000_000_000 + 1_500 * c
        us = []
        for u in range(units):
            recs = []
            t = clk + 40 + 3 * u
            for k in range(pairs):
                if u % 3 == 2 and k % 2 == 0:  # a then b nested in it
                    recs += [(encode_tag(0, False), t), (encode_tag(1, False), t + 20), (encode_tag(1, True), t + 60),
                             (encode_tag(0, True), t + 90)]
                else:
                    recs += [(encode_tag(k % 2, False), t), (encode_tag(k % 2, True), t + 50 + k)]
                t += 120
            g = c * units + u
            while g % 7 == 0 and len(recs) <= cap + 4:  # more than the buffer holds: dropped
                recs += [(encode_tag(0, False), t), (encode_tag(0, True), t + 30)]
                t += 120
            if g % 5 == 0:
                recs = recs[:-1]
            us.append((len(recs), gt + (t - clk) // 2 + 100, t + 80, recs))
        blocks.append({"smid": c % 9, "start_gt": gt, "start_clk": clk, "units": us})
    w.launch(0, 0, 0, (ctas, 1, 1), ctas, 0, 0, launch_buffer(layout, blocks))
    small = BufferLayout("warp", 1, 4, "shared")
    w.kernel(kernel_meta(1, "small", ["s"], small))
    w.launch(1, 0, 1, (2, 1, 1), 2, 0, 0, launch_buffer(small, [
        {"smid": s, "start_gt": 1_000_000_000 + 10_000 * ctas, "start_clk": 9_000_000_000,
         "units": [(2, 1_000_000_000 + 10_000 * ctas + 500, 9_000_001_000,
                    [(encode_tag(0, False), 9_000_000_100), (encode_tag(0, True), 9_000_000_400)])]}
        for s in range(2)]))
    w.end({"launches": 2})
    w.close()
    return read_raw(path)


def _decode(capture, monkeypatch, slice_records, calls=None, workers=1):
    monkeypatch.setattr(D, "DECODE_WORKERS", workers)
    monkeypatch.setattr(decode_slices, "SLICE_RECORDS", slice_records)
    if calls is not None:
        real = native_decode.records

        def counted(*a, **k):
            calls.append(len(a[2]))
            return real(*a, **k)
        monkeypatch.setattr(native_decode, "records", counted)
    tracemalloc.start()
    try:
        profile = D.decode(capture)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return profile, peak


@pytest.mark.parametrize("slice_records", [1, 97, 1000])
@pytest.mark.parametrize("workers", [1, 3])
def test_a_launch_paired_in_slices_decodes_to_the_same_profile(tmp_path, monkeypatch, slice_records, workers):
    """On one thread and on three (slices of a third as many records, written to parts of the
    launch's room and moved together)."""
    cap = _one_launch(tmp_path / "one.plraw")
    whole, _ = _decode(cap, monkeypatch, 1 << 40)
    calls = []
    sliced, _ = _decode(cap, monkeypatch, slice_records, calls, workers)
    # the small launch in one call, the large one's CTA rows each in exactly one slice
    assert len(calls) > 3 and sum(calls) == len(whole.ctas)
    assert whole.intervals.tobytes() == sliced.intervals.tobytes()
    assert whole.ctas.tobytes() == sliced.ctas.tobytes()
    assert whole.launches.tobytes() == sliced.launches.tobytes()
    lw = whole.launches[whole.launches["launch"] == 0][0]
    assert lw["dropped"] > 0 and lw["unmatched"] > 0 and lw["missing_ctas"] > 0  # the cases above are there


def test_slices_hold_less_than_the_whole_launch(tmp_path, monkeypatch):
    cap = _one_launch(tmp_path / "big.plraw", ctas=4096, units=4, pairs=8, cap=24)
    whole, peak_whole = _decode(cap, monkeypatch, 1 << 40)
    sliced, peak_sliced = _decode(cap, monkeypatch, 1 << 13)
    assert whole.intervals.tobytes() == sliced.intervals.tobytes()
    kept = whole.intervals.nbytes + whole.ctas.nbytes
    # the records' working arrays (~32 bytes a record, ~250k records) no longer sit beside the output
    assert peak_sliced - kept < 0.5 * (peak_whole - kept), (peak_whole, peak_sliced, kept)
