"""Decoder on buffers built to the documented layout."""
import numpy as np
import pytest

from proton_lite.decode import decode
from proton_lite.raw_format import read_raw

from synth import simple_capture


@pytest.mark.parametrize("gt0", [1_000_000_000, 1_763_800_000_123_456_789])
def test_decode_pairs_nested_scopes_with_exact_cycles(tmp_path, gt0):
    """gt0: a real %globaltimer is ns since 1970 (~1.8e18), where float64 steps by 256 ns."""
    path = str(tmp_path / "s.plraw")
    simple_capture(path, gt0=gt0)
    prof = decode(read_raw(path))
    assert len(prof.ctas) == 6 and prof.total_dropped == 0 and prof.total_unmatched == 0
    iv = prof.intervals
    assert len(iv) == 6 * 4 * 2
    a = iv[iv["scope"] == 0]
    b = iv[iv["scope"] == 1]
    assert (a["cycles"] == 3000).all() and (b["cycles"] == 1500).all()
    assert (a["depth"] == 0).all() and (b["depth"] == 1).all()
    # rate 1.5 cycles/ns -> 3000 cycles = 2000 ns (the per-SM fit spans two CTAs per SM)
    assert np.abs((a["end_ns"] - a["start_ns"]) - 2000).max() <= 1
    assert np.allclose(prof.ctas["cycles_per_ns"], 1.5, rtol=1e-3)


def test_lost_exit_is_unmatched_not_misattributed(tmp_path):
    path = str(tmp_path / "d.plraw")
    simple_capture(path, drop_last=1, cap=3)  # each unit tried 4 records, only 3 fit: outer exit lost
    prof = decode(read_raw(path))
    assert prof.total_dropped == 6 * 4 * 1
    assert prof.total_unmatched == 6 * 4 * 1  # the outer enter has no partner
    assert (prof.intervals["scope"] == 1).all()  # only the complete inner scope is kept


def test_short_ctas_use_the_pooled_rate_not_their_own_noisy_one(tmp_path):
    """CTAs of ~10 timer ticks: a two-point rate is off by up to 20%; the pooled one by < 1%."""
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    from synth import kernel_meta, launch_buffer

    rate, tick = 1.755, 32  # cycles per ns, ns
    rng = np.random.default_rng(0)
    layout = BufferLayout("warp", 1, 2, "shared")
    ctas = []
    for i in range(128):  # one CTA per SM: no per-SM fit possible
        start_ns = 5_000_000 + int(rng.integers(0, 2000))
        cycles = int(rng.integers(500, 700))
        clk0 = int(rng.integers(1 << 20, 1 << 40))
        q = lambda ns: (ns // tick) * tick  # noqa: E731  %globaltimer ticks every 32 ns
        end_ns = start_ns + cycles / rate
        recs = [(encode_tag(0, False), clk0 + 10), (encode_tag(0, True), clk0 + cycles - 10)]
        ctas.append({"smid": i, "start_gt": q(start_ns), "start_clk": clk0,
                     "units": [(2, q(int(end_ns)), clk0 + cycles, recs)]})
    path = str(tmp_path / "short.plraw")
    w = RawWriter(path, {"name": "short"})
    w.kernel(kernel_meta(0, "k", ["s"], layout))
    w.launch(0, 0, 0, (128, 1, 1), 128, 0, 0, launch_buffer(layout, ctas))
    w.end({})
    w.close()
    prof = decode(read_raw(path))
    own = (prof.ctas["end_clock"] - prof.ctas["start_clock"]) / \
        np.maximum([c["units"][0][1] - c["start_gt"] for c in ctas], 1)
    assert np.abs(own / rate - 1).max() > 0.05  # the two-point rates really are noisy here
    assert np.allclose(prof.ctas["cycles_per_ns"], rate, rtol=0.01)
    assert np.isnan(prof.ctas["measured_cycles_per_ns"]).all()  # too short to report their own rate


def test_record_a_few_cycles_before_the_start_anchor_is_not_unwrapped_a_wrap_late(tmp_path):
    """Warp 1 may record before thread 0 (warp 0) reads the CTA's start clock."""
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    from synth import kernel_meta, launch_buffer

    layout = BufferLayout("warp", 2, 2, "shared")
    clk0 = (7 << 32) + 5  # low 32 bits just above a wrap: a record 17 cycles earlier is below it
    recs = [(encode_tag(0, False), clk0 - 17), (encode_tag(0, True), clk0 + 300)]
    cta = {"smid": 0, "start_gt": 10**18, "start_clk": clk0,
           "units": [(2, 10**18 + 500, clk0 + 1000, recs), (2, 10**18 + 500, clk0 + 1000, recs)]}
    path = str(tmp_path / "early.plraw")
    w = RawWriter(path, {"name": "early"})
    w.kernel(kernel_meta(0, "k", ["s"], layout))
    w.launch(0, 0, 0, (1, 1, 1), 1, 0, 0, launch_buffer(layout, [cta]))
    w.end({})
    w.close()
    prof = decode(read_raw(path))
    assert (prof.intervals["cycles"] == 317).all()


@pytest.mark.parametrize("mode,hint", [("clamp", "loop_capacity=9 (or capacity=9)"), ("circular", "capacity=16")])
def test_dropped_records_name_the_capacity_that_keeps_them(tmp_path, mode, hint):
    """Each launch reports the most records one unit tried to write; the hint turns the busiest
    unit of any launch with drops into the start() option (a power of two when circular)."""
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    layout = BufferLayout("warp", 2, 4, "shared", mode)
    path = str(tmp_path / "d.plraw")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "k", ["a"], layout))
    pair = [(encode_tag(0, False), 1100), (encode_tag(0, True), 1200)]
    for index, counts in enumerate([(2, 2), (9, 4), (6, 2)]):  # records each unit tried to write
        ctas = [{"smid": 0, "start_gt": 10**9, "start_clk": 1000,
                 "units": [(c, 10**9 + 500, 1800, (pair * 5)[:c]) for c in counts]}]
        w.launch(0, 0, index, (1, 1, 1), 1, 0, 0, launch_buffer(layout, ctas))
    w.close()
    prof = decode(read_raw(path))
    assert prof.launches["unit_records_max"].tolist() == [2, 9, 6]
    assert prof.launches["dropped"].tolist() == [0, 5, 2]
    assert hint in prof.keep_all_hint() and "9 records" in prof.keep_all_hint()
    clean = prof.launches["dropped"] == 0
    prof.launches = prof.launches[clean]
    assert prof.keep_all_hint() is None


@pytest.mark.parametrize("overflow", ["sink", "last", "drop"])
def test_records_past_the_capacity_of_global_staging_go_to_its_sink_slots(tmp_path, overflow):
    """Global staging (clamp) stores a record past the capacity in the unit's two sink slots
    after the capacity, which the decoder never reads: a unit keeps min(count, capacity), and
    the records in the sinks are not taken for kept ones. Captures from 2026-11-23 ("last")
    stored it over the unit's last slot, so a unit that overflowed keeps capacity - 1 and the
    last slot's newest record is not taken for the one that was there. Captures from before
    that (no "overflow" in the layout) kept every slot."""
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    layout = BufferLayout("warp", 2, 4, "global", overflow=overflow)
    assert BufferLayout.from_json(layout.to_json()) == layout
    assert ("overflow" in layout.to_json()) == (overflow != "drop")  # old captures read as "drop"
    assert layout.unit_bytes == 24 + 8 * (4 + (2 if overflow == "sink" else 0))
    path = str(tmp_path / "o.plraw")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "k", ["a"], layout))
    steps = [(encode_tag(0, False), 1100 + 200 * i) for i in range(5)]
    recs = [r for i, e in enumerate(steps) for r in (e, (encode_tag(0, True), e[1] + 50 + i))]  # 10 records
    ctas = [{"smid": 0, "start_gt": 10**9, "start_clk": 1000,
             "units": [(4, 10**9 + 2000, 3500, recs[:4]), (9, 10**9 + 2000, 3500, recs[:9])]}]
    w.launch(0, 0, 0, (1, 1, 1), 1, 0, 0, launch_buffer(layout, ctas))
    w.close()
    prof = decode(read_raw(path))
    kept = 4 + (3 if overflow == "last" else 4)
    assert prof.launches["records"].tolist() == [kept] and prof.launches["dropped"].tolist() == [4 + 9 - kept]
    unit1 = prof.intervals[prof.intervals["unit"] == 1]
    # "last": the first pair, then an enter whose exit was dropped; the newest record (the 9th,
    # an enter at 1900) sat in slot 3 and is not paired with slot 2's enter
    assert unit1["cycles"].tolist() == [50, 51][:1 if overflow == "last" else 2]


def test_a_unit_that_ends_before_thread_0_read_the_start_anchor_keeps_its_cta(tmp_path):
    """Other warps can run, and a short one finish, before thread 0 of their CTA reads the
    start anchor: on the H100 bench.py's vector add (300 ns CTAs) lost one CTA per launch this
    way, counted missing though every record was there. An end anchor a little before the
    start (as records may be) keeps the CTA; one far before it (a corrupt one) does not."""
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    layout = BufferLayout("warp", 2, 2, "shared")
    ok = [(encode_tag(0, False), 1100), (encode_tag(0, True), 1200)]
    early = [(encode_tag(0, False), 1000 - 40), (encode_tag(0, True), 1000 - 10)]
    profiles = []
    for before_ns in (32, 10**8):  # one globaltimer tick; 100 ms (corrupt)
        path = str(tmp_path / f"e{before_ns}.plraw")
        w = RawWriter(path, {"name": "synth"})
        w.kernel(kernel_meta(0, "k", ["a"], layout))
        ctas = []
        for i in range(64):
            gt0 = 10**9 + 1000 * i
            units = [(2, gt0 + 500, 1800, ok), (2, gt0 + 500, 1800, ok)]
            if i == 5:  # unit 1 finished before thread 0 read the start anchor
                units[1] = (2, gt0 - before_ns, 990, early)
            ctas.append({"smid": i % 4, "start_gt": gt0, "start_clk": 1000, "units": units})
        w.launch(0, 0, 0, (64, 1, 1), 64, 0, 0, launch_buffer(layout, ctas))
        w.close()
        profiles.append(decode(read_raw(path)))
    kept, corrupt = profiles
    assert kept.launches[["records", "dropped", "missing_ctas"]].tolist() == [(256, 0, 0)]
    cta5 = kept.ctas[kept.ctas["cta"] == 5][0]
    assert cta5["end_ns"] >= cta5["start_ns"]
    early_scope = kept.intervals[(kept.intervals["cta"] == 5) & (kept.intervals["unit"] == 1)]
    assert early_scope["cycles"].tolist() == [30] and early_scope["start_ns"][0] < cta5["start_ns"]
    assert corrupt.launches[["records", "missing_ctas"]].tolist() == [(252, 1)]


def test_a_launch_whose_buffer_does_not_match_its_grid_is_named(tmp_path):
    """A LAUNCH chunk with fewer bytes than its CTAs need (a corrupted or hand-edited file) is
    refused with the launch and the sizes, before any of it is read."""
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout
    from proton_lite.raw_format import RawFormatError, RawWriter
    layout = BufferLayout("warp", 2, 4, "shared")
    path = str(tmp_path / "bad.plraw")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "k", ["a"], layout))
    cta = {"smid": 0, "start_gt": 10**9, "start_clk": 1000, "units": [(0, 10**9 + 5, 1100, [])] * 2}
    w.launch(0, 0, 0, (3, 1, 1), 3, 0, 0, launch_buffer(layout, [cta]))  # 3 CTAs, bytes for 1
    w.close()
    with pytest.raises(RawFormatError, match=rf"bad.plraw: launch 0: buffer holds {layout.stride} bytes, expected 3 CTAs x "
                                             rf"{layout.stride} bytes"):
        decode(read_raw(path))


@pytest.mark.parametrize("shift_ns", [2 * 3600 * 10**9, (1 << 63) - 10**18, -(10**18)])
def test_a_cta_whose_start_anchor_is_far_from_its_launch_is_counted_missing(tmp_path, shift_ns):
    """A scribbled start anchor (hours or years away from the launch's other CTAs, its end
    anchors moved with it so they still look plausible) must not set the launch's time axis
    or overflow int64 ns: the CTA is counted missing, the others decode as before."""
    import warnings
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    layout = BufferLayout("warp", 1, 2, "shared")
    gt0 = 1_795_000_000_000_000_000
    recs = [(encode_tag(0, False), 1100), (encode_tag(0, True), 1700)]
    ctas = [{"smid": c % 4, "start_gt": gt0 + 400 * c, "start_clk": 1000 + 800 * c,
             "units": [(2, gt0 + 400 * c + 500, 1000 + 800 * c + 1000, recs)]} for c in range(8)]
    ctas[3]["start_gt"] += shift_ns
    ctas[3]["units"] = [(2, ctas[3]["start_gt"] + 500, 3400 + 1000, recs)]
    path = str(tmp_path / "far.plraw")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "k", ["a"], layout))
    w.launch(0, 0, 0, (8, 1, 1), 8, 0, 0, launch_buffer(layout, ctas))
    w.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast of an impossible time
        prof = decode(read_raw(path))
    assert prof.launches["missing_ctas"].tolist() == [1]
    assert sorted(prof.ctas["cta"].tolist()) == [0, 1, 2, 4, 5, 6, 7]
    assert prof.ctas["start_ns"].min() == 0 and prof.ctas["end_ns"].max() < 10_000


def test_launches_sized_at_launch_decode_with_their_own_capacity(tmp_path):
    """A kernel sized per launch (loop bound from an argument): each launch's buffer starts
    with its capacity word; launches of one kernel with different capacities decode apart."""
    from proton_lite.layout import LAUNCH_PREFIX_BYTES, BufferLayout, capacity_word, encode_tag
    from proton_lite.raw_format import RawWriter
    from synth import kernel_meta, launch_buffer

    base = BufferLayout("warp", 2, 4, "global", sized_at_launch=True)
    w = RawWriter(str(tmp_path / "z.plraw"), {"name": "synth"})
    w.kernel(kernel_meta(0, "k", ["it"], base))

    def ctas(iters):
        out = []
        for c in range(3):
            clk, gt = 1_000_000 * (c + 1), 5_000_000_000 + 10_000 * c
            recs = []
            for i in range(iters):
                recs += [(encode_tag(0, False), clk + 100 + 300 * i), (encode_tag(0, True), clk + 250 + 300 * i)]
            end = clk + 100 + 300 * iters
            out.append({"smid": c, "start_gt": gt, "start_clk": clk,
                        "units": [(2 * iters, gt + end - clk, end, recs)] * 2})
        return out

    def prefix(word):
        return word.to_bytes(4, "little") + bytes(LAUNCH_PREFIX_BYTES - 4)

    # launch 0: 5 iterations, capacity 10 (all kept); launch 1: 7 iterations sized 14;
    # launch 2: the host could not size it (word 0): no slots, all 2 x 3 counted dropped
    for i, (iters, cap, word) in enumerate([(5, 10, capacity_word(10)), (7, 14, capacity_word(14)), (3, 0, 0)]):
        layout = base.with_capacity(cap)
        w.launch(0, 0, i, (3, 1, 1), 3, 0, 0, prefix(word) + launch_buffer(layout, ctas(iters)))
    w.end({"launches": 3})
    w.close()
    prof = decode(read_raw(str(tmp_path / "z.plraw")))
    assert prof.launches["records"].tolist() == [3 * 2 * 10, 3 * 2 * 14, 0]
    assert prof.launches["dropped"].tolist() == [0, 0, 3 * 2 * 6]
    iv = prof.intervals
    assert len(iv) == 3 * 2 * (5 + 7) and (iv["cycles"] == 150).all()
    assert prof.keep_all_hint() is not None

    # a buffer that ends before its prefix, or whose size does not match its capacity, is named
    for bad, match in [(b"\x00" * 8, "launch prefix"), (prefix(capacity_word(11)) + launch_buffer(base.with_capacity(10), ctas(1)), "expected 3 CTAs")]:
        w = RawWriter(str(tmp_path / "bad.plraw"), {"name": "synth"})
        w.kernel(kernel_meta(0, "k", ["it"], base))
        w.launch(0, 0, 0, (3, 1, 1), 3, 0, 0, bad)
        w.end({"launches": 1})
        w.close()
        with pytest.raises(Exception, match=match):
            decode(read_raw(str(tmp_path / "bad.plraw")))


def test_batches_decoded_on_several_threads_give_the_same_bytes(tmp_path, monkeypatch):
    """Launches of different kernels are decoded as separate batches, several at once: the
    profile must not depend on that (or on which thread finishes first)."""
    import proton_lite.decode as D
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    from synth import kernel_meta, launch_buffer

    path = tmp_path / "k.plraw"
    w = RawWriter(path, {"name": "threads"})
    for kid, units in enumerate((1, 2, 4, 8)):
        layout = BufferLayout("warp", units, 4, "shared")
        w.kernel(kernel_meta(kid, f"k{kid}", ["a", "b"], layout))
        for li in range(3):
            ctas = []
            for c in range(24):
                clk, gt = 10_000_000 * (c % 5 + 1) + 7000 * li, 1_000_000_000 + 5000 * li + 40 * c
                recs = [(encode_tag(0, False), clk + 100), (encode_tag(1, False), clk + 200 + c),
                        (encode_tag(1, True), clk + 1700), (encode_tag(0, True), clk + 3100 + kid)]
                ctas.append({"smid": c % 5, "start_gt": gt, "start_clk": clk,
                             "units": [(4, gt + 2100, clk + 3200, recs)] * units})
            w.launch(kid, 0, 4 * li + kid, (24, 1, 1), 24, 0, 0, launch_buffer(layout, ctas))
    w.end({"launches": 12})
    w.close()
    capture = read_raw(path)
    monkeypatch.setattr(D, "DECODE_WORKERS", 1)
    serial = D.decode(capture)
    monkeypatch.setattr(D, "DECODE_WORKERS", 4)
    threaded = D.decode(capture)
    assert len(D._batches(list(capture.launches), [BufferLayout.from_json(capture.kernels[la.kernel_id]
                                                   ["proton_lite"]["layout"]) for la in capture.launches])) >= 4
    for name in ("launches", "ctas", "intervals"):
        assert getattr(serial, name).tobytes() == getattr(threaded, name).tobytes()
    assert len(serial.intervals) == 3 * 24 * 2 * (1 + 2 + 4 + 8)  # launches x CTAs x scopes x units


def test_the_buffer_copies_own_records_are_intervals_of_their_scope_not_the_kernel_s_records(tmp_path):
    """A kernel staged in blocks (layout.flush_slots): each copy of a block wrote an enter and
    an exit of the copy scope, the table's last (docs/format.md §1.8). They decode as
    intervals of that scope, nested where the copy ran, and a launch counts only the
    kernel's own records."""
    from proton_lite.layout import COPY_SCOPE, BufferLayout, encode_tag
    from synth import RawWriter, kernel_meta, launch_buffer
    layout = BufferLayout("warp", 2, 8, "shared", overflow="sink", flush_slots=4)
    path = str(tmp_path / "b.plraw")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "k", ["a", "b", COPY_SCOPE], layout))
    ctas = []
    for i in range(3):
        clk = 1_000_000 * (i + 1)
        recs = [(encode_tag(0, False), clk + 100), (encode_tag(1, False), clk + 200), (encode_tag(1, True), clk + 300),
                (encode_tag(1, False), clk + 400), (encode_tag(2, False), clk + 500), (encode_tag(2, True), clk + 800),
                (encode_tag(1, True), clk + 900), (encode_tag(0, True), clk + 1000)]
        ctas.append({"smid": i, "start_gt": 10**9 + 1000 * i, "start_clk": clk,
                     "units": [(8, 10**9 + 1000 * i + 800, clk + 1200, recs)] * 2})
    w.launch(0, 0, 0, (3, 1, 1), 3, 0, 0, launch_buffer(layout, ctas))
    w.end({"launches": 1})
    w.close()
    prof = decode(read_raw(path))
    assert prof.launches["records"].tolist() == [3 * 2 * 6]  # the kernel's own: 8 per unit, less the copy's pair
    assert prof.total_dropped == 0 and prof.total_unmatched == 0
    iv = prof.intervals
    copies = iv[iv["scope"] == 2]
    assert len(copies) == 3 * 2 and (copies["cycles"] == 300).all() and (copies["depth"] == 2).all()
    assert (iv[iv["scope"] == 1]["cycles"] == [100, 500] * 6).all()  # the second b spans the copy


def test_ctas_living_past_the_32_bit_clock_window_place_every_record(tmp_path):
    """A persistent CTA of 3 s at 2 cycles/ns: its records' 32-bit clocks wrap once or twice
    after its start (every 2^32 cycles, ~2.15 s), and each unit is unwrapped back from its
    64-bit end clock.  Unit 1 records its first scope 2.5 s in (after a wrap).  A short CTA
    beside it decodes as before."""
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    from synth import kernel_meta, launch_buffer

    layout = BufferLayout("warp", 2, 8, "shared")
    clk0, gt0 = (3 << 32) + 123, 10**18
    enter, leave = encode_tag(0, False), encode_tag(0, True)
    inner_in, inner_out = encode_tag(1, False), encode_tag(1, True)
    unit0_at = [1000, 1_500_000_000, 3_000_000_000, 4_500_000_000, 5_000_000_000, 5_900_000_000]
    unit0 = [(enter, clk0 + unit0_at[0]), (inner_in, clk0 + unit0_at[1]), (inner_out, clk0 + unit0_at[2]),
             (inner_in, clk0 + unit0_at[3]), (inner_out, clk0 + unit0_at[4]), (leave, clk0 + unit0_at[5])]
    unit1 = [(enter, clk0 + 5_000_000_000), (leave, clk0 + 5_000_400_000)]  # its first record after a wrap
    end_clk, end_gt = clk0 + 6_000_000_000, gt0 + 3_000_000_000
    long_cta = {"smid": 0, "start_gt": gt0, "start_clk": clk0,
                "units": [(6, end_gt, end_clk, unit0), (2, end_gt, end_clk, unit1)]}
    c1 = 7 << 32  # another SM's clock; a CTA of 1 ms
    short = [(enter, c1 + 100), (leave, c1 + 1_000_100)]
    short_cta = {"smid": 1, "start_gt": gt0, "start_clk": c1,
                 "units": [(2, gt0 + 1_000_000, c1 + 2_000_000, short)] * 2}
    path = str(tmp_path / "long.plraw")
    w = RawWriter(path, {"name": "long"})
    w.kernel(kernel_meta(0, "persistent", ["outer", "inner"], layout))
    w.launch(0, 0, 0, (2, 1, 1), 2, 0, 0, launch_buffer(layout, [long_cta, short_cta]))
    w.end({})
    w.close()
    prof = decode(read_raw(path))
    assert prof.total_unmatched == 0
    iv = np.sort(prof.intervals, order=["cta", "unit", "start_ns"])
    long_iv = iv[iv["cta"] == 0]
    got = [(int(r["unit"]), int(r["scope"]), int(r["cycles"]), round(float(r["start_ns"]) / 1e3, 1))
           for r in long_iv]  # start in µs after the CTA's start
    assert got == [(0, 0, 5_899_999_000, 0.5), (0, 1, 1_500_000_000, 750_000.0), (0, 1, 500_000_000, 2_250_000.0),
                   (1, 0, 400_000, 2_500_000.0)], got
    assert (iv[iv["cta"] == 1]["cycles"] == 1_000_000).all()


def test_compact_lifetime_blocks_decode_as_the_headers_they_replace(tmp_path, monkeypatch):
    """A kernel without scopes or loops and one unit per CTA writes a 32-byte lifetime block
    per CTA (format.md §1.2a): the same CTAs written as CTA and unit headers and as lifetime
    blocks decode to the same lifetimes, SMs and cycles, also when several launches share a
    batch (expanded batch by batch, on several threads); a CTA that never wrote its block, or
    wrote another layout version, is missing in both."""
    import proton_lite.decode as D
    monkeypatch.setattr(D, "BATCH_BYTES", 3 * 12 * 32 + 1)  # lifetime blocks: three launches a batch, then two
    from dataclasses import replace
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout
    from proton_lite.raw_format import RawWriter
    headers = BufferLayout("cta", 8, 0, "global")
    compact = replace(headers, compact=True)
    assert compact.stride == 32 and compact.to_json()["compact"] is True and "compact" not in headers.to_json()
    g0, c0 = 1_764_000_000_000_000_000, 5_000_000_000
    ctas = [{"smid": i % 5, "start_gt": g0 + 900 * i, "start_clk": c0 + 1_780 * i,
             "units": [(0, g0 + 900 * i + 1_500 + 7 * i, c0 + 1_780 * i + 2_970 + 13 * i, [])]} for i in range(12)]
    ctas[3] = None  # never ran
    wrap = (1 << 32) * 7 - 40  # low halves that wrap inside the CTA's life
    ctas[5] = {"smid": 2, "start_gt": g0 + wrap % 10**6, "start_clk": wrap,
               "units": [(0, g0 + wrap % 10**6 + 1_000, wrap + 1_990, [])]}
    # a CTA of a loop kernel living past 2^32 ns and cycles (the lengths' bits 32-39 in the version word)
    ctas[8] = {"smid": 1, "start_gt": g0, "start_clk": c0, "units": [(0, g0 + (5 << 32) + 77, c0 + (11 << 32) + 3, [])]}
    profiles = []
    for layout in (headers, compact):
        path = str(tmp_path / f"{layout.stride}.plraw")
        w = RawWriter(path, {"name": "synth"})
        w.kernel(kernel_meta(0, "k", [], layout))
        for n in range(5):  # later launches later by 1 ms
            later = [c and {**c, "start_gt": c["start_gt"] + n * 10**6,
                            "units": [(0, c["units"][0][1] + n * 10**6, *c["units"][0][2:])]} for c in ctas]
            w.launch(0, 0, n, (12, 1, 1), 12, 0, 0, launch_buffer(layout, later))
        w.close()
        profiles.append(decode(read_raw(path)))
    a, b = (p.ctas for p in profiles)
    assert len(a) == 5 * 11 and a.tobytes() == b.tobytes()
    assert profiles[1].launches["missing_ctas"].tolist() == [1] * 5
    assert b["cta"].tolist() == [i for i in range(12) if i != 3] * 5
    cycles = {i: 1_990 if i == 5 else (11 << 32) + 3 if i == 8 else 2_970 + 13 * i for i in range(12) if i != 3}
    assert (b["end_clock"] - b["start_clock"]).tolist() == [cycles[int(c)] for c in b["cta"]]
    assert len(D._batches(read_raw(path).launches, [compact] * 5)) == 2
    raw = bytearray(launch_buffer(compact, ctas))
    raw[32 * 7 + 28] = 2  # a layout version this decoder does not know
    path = str(tmp_path / "v2.plraw")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "k", [], compact))
    w.launch(0, 0, 0, (12, 1, 1), 12, 0, 0, bytes(raw))
    w.close()
    assert 7 not in decode(read_raw(path)).ctas["cta"].tolist()


def test_start_readings_sorted_per_launch_by_packed_keys_are_the_lexsorts_order():
    """``decode_batch._sorted_by_launch`` (the launch medians that keep a scribbled anchor out)
    packs (launch, offset) into one int64 where it fits and falls back to a lexsort where an
    anchor lies years away: both give the lexsort's values."""
    from proton_lite.decode_batch import _sorted_by_launch
    rng = np.random.default_rng(0)
    for trial in range(60):
        n = rng.integers(1, 300, int(rng.integers(1, 40)))
        launch = np.repeat(np.arange(len(n)), n)
        gt = np.uint64(1_764_000_000_000_000_000) + rng.integers(0, 10**9, len(launch)).astype(np.uint64)
        if trial % 3 == 0:
            gt[rng.integers(0, len(gt))] = np.uint64(rng.integers(0, 2**63))
        assert np.array_equal(_sorted_by_launch(gt, launch), gt[np.lexsort((gt, launch))])


@pytest.mark.parametrize("form,range_ns", [("gt5", 1 << 37), ("halves", 1 << 32)])
def test_a_loop_kernel_s_start_is_placed_only_where_its_cta_lived_less_than_the_kept_range(form, range_ns, tmp_path):
    """A kernel without scopes with loops keeps its CTA's start in 32 bits (gt5: the timer
    from bit 5, 137 s; halves: its low half, 4.3 s), so a CTA living longer would show a start
    one range late.  The decoder bounds each CTA's life by its launch's host time and the
    session's end (proton_lite/start_range.py): a CTA that ended within the range (less the
    1 s margin) of its launch is placed; one ending later is counted, and its kernel's numbers
    are marked incomplete.  A kernel writing its header at entry is never counted, nor are
    kernels of a capture whose END bounds nothing past the range; a capture cut off before its
    END bounds nothing: every CTA of such a kernel is counted."""
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout
    from proton_lite.raw_format import RawWriter
    from viewer.completeness import kernel_losses
    layout = BufferLayout("cta", 4, 0, "global", compact=True)
    g0 = 1_764_000_000_000_000_000

    def cta(end, length=1_000):
        return {"smid": 1, "start_gt": end - length, "start_clk": 10**9, "units": [(0, end, 10**9 + 2 * length, [])]}

    def capture(ended: bool, late_ns: int):
        path = str(tmp_path / f"{form}_{ended}_{late_ns}.plraw")
        w = RawWriter(path, {"name": "synth"})
        for kid, (name, header) in enumerate((("loop", "exit"), ("entry_kernel", "entry"))):
            meta = kernel_meta(kid, name, [], layout)
            meta["proton_lite"]["cta_header"] = header
            if header == "exit":
                meta["proton_lite"]["loop_start"] = form
            w.kernel(meta)
        # launch 0: two CTAs ending 1 ms after it was queued; launch 1: one of them, and one ending late_ns after
        for n, (kid, ends) in enumerate([(0, [g0 + 10**6, g0 + 10**6]), (0, [g0 + 10**6, g0 + late_ns]),
                                         (1, [g0 + late_ns])]):
            w.launch(kid, 0, n, (len(ends), 1, 1), len(ends), 0, g0, launch_buffer(layout, [cta(e) for e in ends]))
        if ended:  # the session ends 1 s after the last CTA
            w.end({"host_end_ns": g0 + late_ns + 10**9})
        w.close()
        return decode(read_raw(path))

    # the late CTA ends last: the timer's offset to the host clock is at least its end - host_end, so
    # it lived at most late_ns + 1 s (the end's slack) + 1 s (the margin): placed below the range
    for late_ns, unsure in ((range_ns - 2 * 10**9 - 1, {}), (range_ns - 2 * 10**9, {"loop": 1})):
        prof = capture(True, late_ns)
        assert prof.session["uncertain_starts"] == unsure, (late_ns, prof.session["uncertain_starts"])
        reasons = kernel_losses(prof)
        assert any("CTA start(s) not placed" in r for r in reasons["loop"]) == bool(unsure)
        assert reasons.get("entry_kernel") == []
    assert capture(False, 10**6).session["uncertain_starts"] == {"loop": 4}


def test_lifetime_blocks_in_flight_are_shared_between_the_threads():
    """Batches of lifetime blocks (compact layouts) hold about COMPACT_IN_FLIGHT bytes across
    the threads that decode them at once (at most COMPACT_THREADS; each batch expands ~5x
    while it decodes), layouts with records RECORDS_IN_FLIGHT across every thread: more
    threads, smaller batches, never under 1 MiB nor over BATCH_BYTES."""
    from dataclasses import replace
    from types import SimpleNamespace
    import proton_lite.decode as D
    from proton_lite.layout import BufferLayout
    headers = BufferLayout("cta", 8, 0, "global")
    compact = replace(headers, compact=True)
    launches = [SimpleNamespace(kernel_id=0, buffer=bytes(256 << 10)) for _ in range(64)]  # 16 MiB in all
    sizes = {}
    for layout in (compact, headers):
        for threads in (1, 2, 16, 64):
            batches = D._batches(launches, [layout] * 64, threads)
            assert sorted(i for b in batches for i in b) == list(range(64))  # every launch, once
            sizes[layout.compact, threads] = max(len(b) for b in batches) * (256 << 10)
    assert sizes[True, 1] == sizes[True, 2] == D.BATCH_BYTES
    assert sizes[True, 16] == sizes[True, 64] == max(1 << 20, D.COMPACT_IN_FLIGHT // D.COMPACT_THREADS) < D.BATCH_BYTES
    assert sizes[False, 1] == sizes[False, 2] == D.BATCH_BYTES
    assert sizes[False, 16] == D.RECORDS_IN_FLIGHT // 16 < D.BATCH_BYTES and sizes[False, 64] == 1 << 20


@pytest.mark.parametrize("in_c", [True, False])
def test_launches_of_many_kernels_share_batches(tmp_path, monkeypatch, in_c):
    """Launches are batched by layout and number of scopes across kernels (a compiled model
    launches thousands of kernels a few times each): nine kernels interleaved, lifetime blocks
    of 4 and 8 warps, records of one scope (two kernels, one of them writing a record of a scope
    it does not have) and of two, CTA headers without records (a loop kernel's) make one batch per
    (layout, scopes); without the scope counts, launches with records are batched by kernel. The
    profile is the one decoded a launch a batch, in C and in numpy."""
    from dataclasses import replace
    import proton_lite.decode as D
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout, encode_tag
    from proton_lite.raw_format import RawWriter
    four, eight = (replace(BufferLayout("cta", w, 0, "global"), compact=True) for w in (4, 8))
    records, headers = BufferLayout("warp", 4, 4, "global"), BufferLayout("cta", 8, 0, "global")
    layouts = [four, eight, four, eight, four, records, records, records, headers]
    scopes = [[]] * 5 + [["s"], ["s"], ["s", "t"], []]
    g0, c0 = 1_764_000_000_000_000_000, 5_000_000_000
    path = str(tmp_path / "k.plraw")
    w = RawWriter(path, {"name": "synth"})
    for k, lay in enumerate(layouts):
        w.kernel(kernel_meta(k, f"k{k}", scopes[k], lay))
    for n in range(36):
        k, lay = n % 9, layouts[n % 9]

        def unit(i, u):
            clk = c0 + n * 10**6 + 1_780 * i
            recs = [(encode_tag(0, False), clk + 100 + u), (encode_tag(0, True), clk + 900 + 7 * u)] if lay is records \
                else []
            if k in (6, 7):  # scope 1: kernel 7's second scope; none of kernel 6's (not paired)
                recs += [(encode_tag(1, False), clk + 1_000), (encode_tag(1, True), clk + 1_200)]
            return (len(recs), g0 + n * 10**5 + 900 * i + 2_000 + 3 * u + k, clk + 3_960 + 5 * u, recs)
        ctas = [{"smid": (i + n) % 4, "start_gt": g0 + n * 10**5 + 900 * i, "start_clk": c0 + n * 10**6 + 1_780 * i,
                 "units": [unit(i, u) for u in range(lay.units)]} for i in range(8 + n % 5)]
        w.launch(k, 0, n, (len(ctas), 1, 1), len(ctas), 0, 0, launch_buffer(lay, ctas))
    w.close()
    capture = read_raw(path)
    monkeypatch.setattr(D, "LIFETIMES_IN_C", in_c)
    lays, counts = [layouts[la.kernel_id] for la in capture.launches], [len(scopes[la.kernel_id]) for la in capture.launches]

    def kernels_of(batches):
        return sorted(sorted({capture.launches[i].kernel_id for i in b}) for b in batches)
    assert kernels_of(D._batches(list(capture.launches), lays, 1, counts)) == [[0, 2, 4], [1, 3], [5, 6], [7], [8]]
    assert kernels_of(D._batches(list(capture.launches), lays)) == [[0, 2, 4], [1, 3], [5], [6], [7], [8]]
    together = decode(capture)
    monkeypatch.setattr(D, "BATCH_BYTES", 1)  # a launch a batch
    assert all(len(b) == 1 for b in D._batches(list(capture.launches), lays, 1, counts))
    alone = decode(capture)
    assert len(together.ctas) == sum(8 + n % 5 for n in range(36))
    assert together.ctas.tobytes() == alone.ctas.tobytes() and together.launches.tobytes() == alone.launches.tobytes()
    assert together.intervals.tobytes() == alone.intervals.tobytes()
    kernel_of = together.launches["kernel"][together.intervals["launch"]]
    assert set(together.intervals["scope"][kernel_of == 7].tolist()) == {0, 1}
    assert set(together.intervals["scope"][kernel_of == 6].tolist()) == {0}
    assert int(together.launches["unmatched"][together.launches["kernel"] == 6].sum()) > 0


def test_at_most_compact_threads_batches_of_lifetime_blocks_decode_at_once(tmp_path, monkeypatch):
    """Lifetime blocks' batches wait for one of COMPACT_THREADS slots (past that, their numpy
    calls wait for the GIL and hold their batches' memory): on 8 threads with 2 slots, never
    more than 2 at once, and the profile is the one decoded on one thread."""
    import threading
    import time
    from dataclasses import replace
    import proton_lite.decode as D
    from synth import kernel_meta, launch_buffer
    from proton_lite.layout import BufferLayout
    from proton_lite.raw_format import RawWriter
    compact = replace(BufferLayout("cta", 8, 0, "global"), compact=True)
    g0, c0 = 1_764_000_000_000_000_000, 5_000_000_000
    path = str(tmp_path / "c.plraw")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "k", [], compact))
    for n in range(12):
        ctas = [{"smid": i % 4, "start_gt": g0 + n * 10**6 + 900 * i, "start_clk": c0 + 1_780 * i,
                 "units": [(0, g0 + n * 10**6 + 900 * i + 2_000, c0 + 1_780 * i + 3_960, [])]} for i in range(16)]
        w.launch(0, 0, n, (16, 1, 1), 16, 0, 0, launch_buffer(compact, ctas))
    w.close()
    monkeypatch.setattr(D, "LIFETIMES_IN_C", False)  # (the limit is the numpy path's: C decodes without the GIL)
    monkeypatch.setattr(D, "DECODE_WORKERS", 1)
    one = decode(read_raw(path))
    monkeypatch.setattr(D, "BATCH_BYTES", 16 * 32)  # a launch a batch
    monkeypatch.setattr(D, "DECODE_WORKERS", 8)
    monkeypatch.setattr(D, "COMPACT_THREADS", 2)
    running, most, lock = [0], [0], threading.Lock()
    inner = D._decode_batch

    def counted(*a, **k):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        try:
            return inner(*a, **k)
        finally:
            with lock:
                running[0] -= 1
    monkeypatch.setattr(D, "_decode_batch", counted)
    many = decode(read_raw(path))
    assert most[0] == 2
    assert many.ctas.tobytes() == one.ctas.tobytes() and len(one.ctas) == 12 * 16
