"""The decoder's C steps (``proton_lite/native_decode.py``) against its numpy steps on the same
inputs: the same pairs and levels, the same rows byte for byte, the same profile from the
real H100 captures with the C steps on and off."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from proton_lite import native_decode
from proton_lite.decode_records import _pair
from proton_lite.profile_data import INTERVAL_DTYPE

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(native_decode.module() is None,
                                reason=f"C extension not built here: {native_decode.error()}")


def _records(rng, n_groups, n_scopes, corrupt_rate, deep=False):
    """Per group a random walk of enters and exits (some unmatched, some corrupt tags)."""
    tags, group = [], []
    for g in range(n_groups):
        stack = []
        for _ in range(int(rng.integers(0, 40 if not deep else 300))):
            r = rng.random()
            if r < corrupt_rate:
                tags.append(int(rng.integers(2 * n_scopes, 2 * n_scopes + 9)))  # scope outside the table
            elif stack and (r < 0.55 or deep and r < 0.2):
                s = stack.pop() if rng.random() < 0.9 else int(rng.integers(0, n_scopes))  # sometimes the wrong scope
                tags.append(2 * s + 1)
            else:
                s = int(rng.integers(0, n_scopes))
                stack.append(s)
                tags.append(2 * s)
            group.append(g * 3)  # groups need not be dense
    tags = np.array(tags, np.uint64)
    clocks = rng.integers(0, 1 << 32, len(tags)).astype(np.uint64)
    return tags | (clocks << np.uint64(32)), np.array(group, np.int64)


@pytest.mark.parametrize("seed,deep,corrupt", [(0, False, 0.0), (1, False, 0.05), (2, True, 0.02), (3, True, 0.3)])
def test_pairs_and_levels_match_the_numpy_pairing(seed, deep, corrupt):
    rng = np.random.default_rng(seed)
    words, group = _records(rng, 200, 5, corrupt, deep)
    tags = words.view("<u4")[0::2]
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(group) else np.zeros(0, np.int64)
    e, x, level = _pair(tags, group, first, 5)
    ce, cx, clevel = native_decode.pair(words, group, 5)
    assert len(e) > 100 and np.array_equal(ce, e) and np.array_equal(cx, x) and np.array_equal(clevel, level)


def test_pairs_fit_in_half_the_records_and_nothing_is_written_past_them():
    """``pair`` gives the C code room for n/2 + 1 pairs (a pair takes one enter and one exit
    record): over random streams of every kind (unmatched, wrong scopes, corrupt tags, all
    enters, all exits, perfect nesting) the pairs never pass n/2 and the slots past them are
    untouched; a buffer too short for n/2 + 1 is refused, not overrun."""
    mod = native_decode.module()
    rng = np.random.default_rng(7)
    streams = [_records(rng, int(rng.integers(1, 30)), int(rng.integers(1, 6)), rate, deep)
               for rate in (0.0, 0.1, 0.5) for deep in (False, True) for _ in range(40)]
    for kind in (0, 1):  # every record an enter, then every record an exit
        streams.append((np.full(50, kind, np.uint64), np.zeros(50, np.int64)))
    perfect = np.tile(np.array([0, 2, 3, 1], np.uint64), 30)  # enter a, enter b, exit b, exit a
    streams.append((perfect, np.repeat(np.arange(30, dtype=np.int64), 4)))
    for words, group in streams:
        n = len(words)
        e, x = np.full(n + 8, -7, np.int64), np.full(n + 8, -7, np.int64)
        k = mod.pair(words, group, 6, e, x, np.empty(n, np.int64))
        assert k <= n // 2 and (e[k:] == -7).all() and (x[k:] == -7).all(), (n, k)
    assert k == 60  # the perfect nesting pairs every record
    words, group = streams[-1]
    with pytest.raises(ValueError, match="array lengths differ"):
        mod.pair(words, group, 6, np.empty(len(words) // 2, np.int64), np.empty(len(words) // 2, np.int64),
                 np.empty(len(words), np.int64))


def test_no_records():
    e, x, level = native_decode.pair(np.zeros(0, np.uint64), np.zeros(0, np.int64), 3)
    assert len(e) == len(x) == len(level) == 0


_DIGEST = """
import hashlib, sys, numpy as np
from proton_lite.raw_format import read_raw
from proton_lite.decode import decode
from proton_lite import native_decode
p = decode(read_raw(sys.argv[1]))
m = hashlib.sha256()
for a in (p.launches, p.ctas, p.intervals):
    m.update(np.ascontiguousarray(a).tobytes())
print(native_decode.module() is not None, m.hexdigest())
"""


@pytest.mark.parametrize("name", ["matmul.plraw", "nested.plraw", "loop_scopes_sinks.plraw", "softmax.plraw"])
def test_real_captures_decode_the_same_with_and_without_the_c_steps(name):
    path = ROOT / "tests" / "data" / name
    out = {}
    for switch in ("1", "0"):
        env = dict(os.environ, PROTON_LITE_NATIVE_DECODE=switch, PYTHONPATH=str(ROOT))
        r = subprocess.run([sys.executable, "-c", _DIGEST, str(path)], env=env, capture_output=True, text=True,
                           check=True)
        out[switch] = r.stdout.split()
    assert out["1"][0] == "True" and out["0"][0] == "False"
    assert out["1"][1] == out["0"][1]


def _pair_inputs(seed: int, units: int = 4):
    """Paired records of CTA rows in three launches: clocks that wrap past 2^32 and clocks a
    little before the CTA's start, and every 17th CTA without a finite rate."""
    rng = np.random.default_rng(seed)
    words, group = _records(rng, 300, 6, 0.02)
    e, x, level = native_decode.pair(words, group, 6)
    m = int(group.max()) // units + 1
    start_clk = rng.integers(0, 1 << 40, m).astype(np.uint64)
    lo = (start_clk[group // units] & np.uint64(0xFFFFFFFF)).astype(np.int64)
    clocks = (lo + rng.integers(-(1 << 20), 1 << 31, len(words))) % (1 << 32)  # some before the start, some wrap
    words = (words & np.uint64(0xFFFFFFFF)) | (clocks.astype(np.uint64) << np.uint64(32))
    base, rate = rng.normal(1e6, 1e5, m), rng.uniform(0.4, 0.6, m)
    rate[::17] = np.nan  # CTAs whose times cannot be placed
    lrow = np.minimum(np.arange(m) * 3 // m, 2)  # three launches, CTA rows in order
    row_cta = rng.integers(0, 1 << 20, m).astype(np.uint32)
    return words, group, level, e, x, start_clk, base, rate, lrow, row_cta


def test_pair_rows_write_the_numpy_rows(monkeypatch):
    """``pair_rows`` (each pair's columns and raw row in one pass in C, straight to its launch's
    room) and then ``settle`` give the numpy path's rows byte for byte (``_pair_columns``,
    ``write_intervals``, ``_settle``): the same unmatched counts, the pairs of CTAs without a
    finite rate skipped and counted, pairs whose end lies before their start (negative cycles)
    included; a launch whose pairs overflow its room is reported, not written past.  Exact
    halves and odd offsets in ``settle``: ``test_decode_memory.py``."""
    from proton_lite.decode_assemble import _settle, write_intervals
    from proton_lite.decode_records import _BEFORE_START, _pair_columns
    from proton_lite.layout import BufferLayout
    words, group, level, e, x, start_clk, base, rate, lrow, row_cta = _pair_inputs(11)
    layout = BufferLayout("warp", 4, 16, "global", "clamp")
    launch_id = np.array([7, 8, 4000000000], np.uint32)
    records = np.bincount(lrow[group // layout.units], minlength=3)
    pairs, unmatched = _pair_columns(words, group, level, e, x, layout, start_clk, base, rate, lrow, records, 3)
    counts = np.bincount(lrow[pairs["cta_row"]], minlength=3)
    room = counts + np.array([3, 0, 5])
    dest = np.cumsum(room) - room
    expected = np.zeros(int(room.sum()), INTERVAL_DTYPE)
    write_intervals({"pairs": pairs, "ctas": {"launch": lrow, "cta": row_cta}}, [0, 1, 2], expected, dest, room,
                    launch_id)
    got = np.zeros(int(room.sum()), INTERVAL_DTYPE)
    assert native_decode.fits(got) and not native_decode.fits(got[::2])
    per_row, written, unplaceable, over = native_decode.pair_rows(
        words, group, level, e, x, layout.units, _BEFORE_START, start_clk, base, rate, lrow, row_cta, got, dest, room,
        launch_id)
    assert over == -1 and (written == counts).all() and unplaceable.sum() > 0
    assert (records - 2 * np.bincount(lrow, weights=per_row, minlength=3).astype(np.int64) + 2 * unplaceable
            == unmatched).all()
    assert got.tobytes() == expected.tobytes()
    assert (pairs["cycles"] < 0).any()  # clocks before the start and past a wrap were in the mix
    offset = np.array([0.0, 0.5, 1e9 + 1])  # exact halves, an odd offset
    keep = np.ones(3, bool)
    n_c = native_decode.settle(got, dest, counts, offset, keep)
    monkeypatch.setattr(native_decode, "module", lambda: None)
    n_np = _settle(expected, dest, counts, offset, keep)
    assert n_c == n_np == counts.sum() and got[:n_c].tobytes() == expected[:n_np].tobytes()
    assert (got["end_ns"][:n_c] >= got["start_ns"][:n_c]).all()
    monkeypatch.undo()
    small = room.copy()
    small[1] = counts[1] - 1
    assert native_decode.pair_rows(words, group, level, e, x, layout.units, _BEFORE_START, start_clk, base, rate, lrow,
                                   row_cta, np.zeros(int(room.sum()), INTERVAL_DTYPE), dest, small, launch_id)[3] == 1


def test_pair_rows_refuse_an_index_out_of_range():
    words, group, level, e, x, start_clk, base, rate, lrow, row_cta = _pair_inputs(12)
    bad = e.copy()
    bad[3] = len(words) + 5
    out = np.zeros(len(e), INTERVAL_DTYPE)
    with pytest.raises(IndexError, match="out of range"):
        native_decode.pair_rows(words, group, level, bad, x, 4, 1 << 24, start_clk, base, rate, lrow, row_cta, out,
                                np.zeros(3, np.int64), np.full(3, len(e)), np.zeros(3, np.uint32))


@pytest.mark.parametrize("mode", ["clamp", "circular"])
def test_records_are_the_numpy_records(mode):
    """Every (CTA row, unit) block's kept records, in age order (a circular block that wrapped
    starts at its oldest record), gathered from a buffer of random words."""
    from proton_lite.decode_records import _records
    from proton_lite.layout import BufferLayout
    layout = BufferLayout("warp", 4, 8, "global", mode)
    rng = np.random.default_rng(3)
    n_ctas = 30
    buf = rng.integers(0, 1 << 63, n_ctas * layout.stride // 8, dtype=np.int64).tobytes()
    rows_at = np.sort(rng.choice(n_ctas, 20, replace=False)).astype(np.int64)  # some CTAs missing
    counts = rng.integers(0, 3 * layout.capacity, (len(rows_at), layout.units)).astype(np.int64)
    counts[0] = 0  # a CTA with no records
    kept = layout.kept(counts)
    expected = _records(buf, layout, rows_at, counts, kept)
    got = native_decode.records(buf, layout, rows_at, counts, kept)
    for e, g in zip(expected, got):
        assert g.tobytes() == np.asarray(e, g.dtype).tobytes()
    assert (counts > layout.capacity).any() and len(got[0]) == int(kept.sum())


@pytest.mark.parametrize("seed", range(4))
def test_sm_fits_are_the_numpy_fits_to_the_bit(seed):
    """``native_decode.sm_fit`` against ``decode_batch._sm_fit_numpy``: per group the same
    reference clock and timer, slope, intercept and largest residual, bit for bit; groups whose
    clock never moves (no line: NaN) and a clock reading past 2**63 (wrapping) included."""
    from proton_lite.decode_batch import _dense_unique, _sm_fit_numpy
    rng = np.random.default_rng(seed)
    for trial in range(40):
        m, groups = int(rng.integers(1, 4000)), int(rng.integers(1, 300))
        uniq, inv = _dense_unique(rng.integers(0, groups, m))
        clk = np.uint64(10**12) + rng.integers(0, 10**9, m).astype(np.uint64)
        gt = (1_764_000_000_000_000_000 + (clk.astype(np.int64) - 10**12) / rng.uniform(0.5, 2.5)
              + rng.integers(-40, 40, m)).astype(np.int64)
        if trial % 5 == 0:
            clk[:] = clk[0]
        if trial % 7 == 0:
            clk[rng.integers(0, m)] = np.uint64(2**64 - 5)
        got, want = native_decode.sm_fit(inv, len(uniq), clk, gt), _sm_fit_numpy(inv, len(uniq), clk, gt)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_lifetime_blocks_expand_in_c_as_in_numpy(monkeypatch):
    """Lifetime blocks written byte by byte to format.md §1.2a (tag and SM, the two lengths with
    their bits 32-39, the end anchors, the version), a fifth without the tag: the C expansion
    gives the numpy expansion's bytes, and the headers read the start as end - length."""
    import struct

    from proton_lite.cta_blocks import _ONE_UNIT, expand_lifetimes
    from proton_lite.layout import CTA_MAGIC, LIFETIME_TAG, UNIT_MAGIC
    rng = np.random.default_rng(3)
    n = 500
    blocks, want = b"", []
    for i in range(n):
        tagged = i % 5 != 2
        smid, version = int(rng.integers(0, 1 << 16)), int(rng.integers(0, 1 << 16))
        gt_len, clk_len = int(rng.integers(0, 1 << 40)), int(rng.integers(0, 1 << 40))
        end_gt, end_clk = int(rng.integers(0, 1 << 64, dtype=np.uint64)), int(rng.integers(0, 1 << 64, dtype=np.uint64))
        tag = LIFETIME_TAG if tagged else (LIFETIME_TAG + 1) & 0xFFFF
        blocks += struct.pack("<IIQQIHBB", (tag << 16) | smid, gt_len & 0xFFFFFFFF, end_gt, end_clk,
                              clk_len & 0xFFFFFFFF, version, gt_len >> 32, clk_len >> 32)
        want.append((tagged, smid, version, (end_gt - gt_len) % (1 << 64), (end_clk - clk_len) % (1 << 64), end_gt,
                     end_clk))
    fast = expand_lifetimes(blocks, n).view(_ONE_UNIT)
    monkeypatch.setattr(native_decode, "module", lambda: None)
    slow = expand_lifetimes(blocks, n).view(_ONE_UNIT)
    assert fast.tobytes() == slow.tobytes()
    for row, (tagged, smid, version, start_gt, start_clk, end_gt, end_clk) in zip(fast, want):
        if not tagged:
            assert row.tobytes() == bytes(_ONE_UNIT.itemsize)
            continue
        assert (int(row["magic"]), int(row["smid"]), int(row["version"]), int(row["units"])) == \
            (CTA_MAGIC, smid, version, 1)
        assert (int(row["start_gt"]), int(row["start_clk"])) == (start_gt, start_clk)
        unit = row["unit"][0]
        assert (int(unit["magic"]), int(unit["end_gt"]), int(unit["end_clk"]), int(unit["count"])) == \
            (UNIT_MAGIC, end_gt, end_clk, 0)


def _lifetimes_capture(path, rng, session: dict):
    """Launches of lifetime blocks (format.md §1.2a, written by ``synth.launch_buffer`` from
    its byte offsets) of every shape the decoder treats apart, as ``(path, launches whose short
    CTAs' pooled rate is not finite)``: CTAs on steady SM clocks; short CTAs on SMs whose clock
    jumps (no fit, too short for their own rate: the launch's pooled rate); CTAs of zero cycles
    (no pooled rate: numpy's path); a launch whose blocks were never written; CTAs missing, of
    another layout version, or with an end anchor hours from the others'."""
    from dataclasses import replace
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout
    from proton_lite.raw_format import RawWriter
    layout = replace(BufferLayout("cta", 4, 0, "global"), compact=True)
    g0, c0 = 1_764_000_000_000_000_000, 7_000_000_000
    w = RawWriter(path, session)
    w.kernel(kernel_meta(0, "k", [], layout))
    odd = []
    for n in range(14):
        shape = n % 7
        n_ctas = int(rng.integers(1, 400))
        t = g0 + n * 10**7
        ctas = []
        for i in range(n_ctas):
            sm = int(rng.integers(0, 9 if shape else 132))
            start = t + 32 * int(rng.integers(0, 3_000)) + 32 * i
            span = 32 * int(rng.integers(1, 4_000)) if shape not in (1, 2) else 32 * int(rng.integers(0, 40))
            rate = 1.98 if shape != 3 else 1.2 + 0.1 * sm
            clk = c0 + sm * 10**9 + int((start - g0) * rate)
            if shape == 1:  # the SM's clock jumps between CTAs: no steady line
                clk += int(rng.integers(0, 10**6))
            if shape == 3:  # readings off the SM's line by up to ~4 timer ticks: some SMs steady, some not
                clk += int(rng.integers(0, 300))
            cycles = 0 if shape == 2 else int(span * rate) + int(rng.integers(0, 3))
            ctas.append({"smid": sm, "start_gt": start, "start_clk": clk, "units": [(0, start + span, clk + cycles, [])]})
        if shape == 4:  # some never ran, one anchored hours away
            for i in rng.integers(0, n_ctas, n_ctas // 3):
                ctas[i] = None
            far = 0 if n == 4 else int(rng.integers(0, n_ctas))  # (the first CTA: not the launch's reference)
            if ctas[far] is not None:
                ctas[far] = {**ctas[far], "start_gt": ctas[far]["start_gt"] + 5 * 3600 * 10**9,
                             "units": [(0, ctas[far]["units"][0][1] + 5 * 3600 * 10**9, *ctas[far]["units"][0][2:])]}
        if shape == 5:
            ctas = [None] * n_ctas
        raw = bytearray(launch_buffer(layout, ctas))
        if shape == 6 and n_ctas > 2:
            raw[32 * 1 + 28] = 2  # a layout version this decoder does not know
        if shape == 2:
            odd.append(n)
        w.launch(0, 0, n, (n_ctas, 1, 1), n_ctas, 0, 0, bytes(raw))
    w.close()
    return odd


@pytest.mark.parametrize("threads,batch", [(1, 8 << 20), (3, 2048)])
def test_lifetime_launches_decode_in_c_as_in_numpy(tmp_path, monkeypatch, threads, batch):
    """A capture of lifetime blocks decodes in C (``decode_batch.decode_lifetime_launches``, a
    batch a call without the GIL) to the profile of the numpy path, byte for byte: the CTA rows,
    each launch's row and the session's time 0, with and without a rate floor from the GPU's
    highest clock, whole batches and batches of one launch on several threads; a launch whose
    CTAs all have zero cycles goes to numpy's path alone (its pooled rate is not finite), and
    only such launches do."""
    import proton_lite.decode as D
    from proton_lite.decode import decode
    from proton_lite.raw_format import read_raw
    monkeypatch.setattr(D, "DECODE_WORKERS", threads)
    monkeypatch.setattr(D, "BATCH_BYTES", batch)
    for seed, session in enumerate(({"name": "s"}, {"name": "s", "sm_clock_max_khz": 1_980_000})):
        path = str(tmp_path / f"{seed}.plraw")
        odd = _lifetimes_capture(path, np.random.default_rng(seed), session)
        monkeypatch.setattr(D, "LIFETIMES_IN_C", False)
        want = decode(read_raw(path))
        monkeypatch.setattr(D, "LIFETIMES_IN_C", True)
        alone, inner = [], D._decode_batch

        def counted(batch_, *a, **k):
            alone.extend(la.launch_index for la in batch_)
            return inner(batch_, *a, **k)
        monkeypatch.setattr(D, "_decode_batch", counted)
        got = decode(read_raw(path))
        monkeypatch.setattr(D, "_decode_batch", inner)
        assert sorted(alone) == odd and odd
        assert got.ctas.tobytes() == want.ctas.tobytes() and len(want.ctas) > 1000
        assert got.launches.tobytes() == want.launches.tobytes() and got.t0_ns == want.t0_ns
        assert got.session == want.session
        missing = want.launches["missing_ctas"]
        assert (missing == want.launches["num_ctas"]).any() and ((missing > 0) & (missing < want.launches["num_ctas"])).any()
        assert np.isfinite(want.ctas["measured_cycles_per_ns"]).any() and np.isnan(want.ctas["measured_cycles_per_ns"]).any()
