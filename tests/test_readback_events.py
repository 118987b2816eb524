"""A .pftrace read back chunk by chunk (trace/readback_events.py): cut into many small chunks,
with sequences and deflated batches spread over several, on one thread or several, compressed
or not, the same events and the same profile as read in one chunk."""
import numpy as np
import pytest

from proton_lite.trace import load_trace, write_trace
from proton_lite.trace import readback_events as rbe
from synth import wave_profile
from test_trace import assert_same_profile


@pytest.mark.parametrize("compress, layout", [(True, "sm"), (False, "launch")])
def test_small_chunks_read_the_same_events_and_profile_as_one(tmp_path, monkeypatch, compress, layout):
    import proton_lite.trace.perfetto as pf
    import proton_lite.trace.perfetto_pieces as pp
    p = wave_profile(n_ctas=600, launches=4, sms=4, resident=3, early=0.05, late=0.05, touching=0.3, seed=2)
    path = tmp_path / "w.pftrace"
    monkeypatch.setattr(pp, "PIECE", 64)  # many sequences
    monkeypatch.setattr(pp, "MAX_RAW_BATCH", 2048)  # many deflated batches
    pf.write_perfetto(p, path, compress=compress, layout=layout)
    data = path.read_bytes()
    monkeypatch.setattr(rbe, "CHUNK_BYTES", 1 << 40)
    whole = rbe.read_events(data, first_annotation=layout == "sm", workers=1)
    monkeypatch.setattr(rbe, "CHUNK_BYTES", 4096)
    starts, ends = rbe.packet_bounds(data)
    outer = rbe.parse_messages(np.frombuffer(data, np.uint8), starts, ends, {rbe.pf.P_COMPRESSED: 2})[rbe.pf.P_COMPRESSED]
    assert len(rbe._chunks(starts, ends, outer)) > 10
    for workers in (1, 3):
        cut = rbe.read_events(data, first_annotation=layout == "sm", workers=workers)
        for name in ("t", "typ", "track", "iid", "an", "av", "first_an", "first_av", "t_uuid", "t_parent", "t_rank"):
            a, b = getattr(whole, name), getattr(cut, name)
            assert (a is None and b is None) or np.array_equal(a, b), name
    assert len(whole.t) == 2 * (len(p.ctas) + len(p.intervals) + (len(p.launches) if layout == "sm" else 0))
    assert_same_profile(p, load_trace(path))


def test_a_damaged_batch_is_a_one_line_error(tmp_path):
    p = wave_profile(n_ctas=200, launches=2, sms=2, resident=2, seed=3)
    path = tmp_path / "d.pftrace"
    write_trace(p, path, "perfetto")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside a deflated batch
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="d.pftrace"):
        load_trace(path)


def test_each_slices_track_and_its_ancestors_are_found_or_named_missing():
    from proton_lite.trace.readback import _ancestors
    t_uuid = np.array([30, 10, 20, 40, 50], np.int64)  # 10 > 20 > 30 > 40; 50's parent 99 is not described
    t_parent = np.array([20, -1, 10, 30, 99], np.int64)
    own, above = _ancestors(t_uuid, t_parent, np.array([40, 20, 30], np.int64), 4)
    assert [level[own].tolist() for level in above] == \
        [[3, 2, 0], [0, 1, 2], [2, -1, 1], [1, -1, -1], [-1, -1, -1]]
    # the same found from the distinct uuids and each slice's rank among them (the reader's way)
    keys = np.array([20, 30, 40], np.int64)
    own2, above2 = _ancestors(t_uuid, t_parent, None, 4, (keys, np.array([2, 0, 1])))
    assert own2.tolist() == own.tolist() and all(np.array_equal(x, y) for x, y in zip(above, above2))
    with pytest.raises(ValueError, match="no TrackDescriptor"):
        _ancestors(t_uuid, t_parent, np.array([20, 60], np.int64), 2)  # a slice's own track
    with pytest.raises(ValueError, match="no TrackDescriptor"):
        _ancestors(t_uuid, t_parent, np.array([50], np.int64), 2)  # its parent
    assert len(_ancestors(t_uuid, t_parent, np.array([20], np.int64), 2)[0]) == 1  # 50 unused: no error


@pytest.mark.parametrize("span", [10**6, 1 << 61])  # times packed beside the slot as they are, or as ranks
def test_an_interval_finds_its_cta_by_slot_and_time(span):
    """``rows.cta_by_time``: the last CTA on the interval's slot whose extent starts at or before
    the interval's start, -1 where none does, against a loop written here."""
    from proton_lite.trace.rows import cta_by_time
    rng = np.random.default_rng(7)
    cta_row = rng.integers(0, 6, 300)
    cta_lo = rng.integers(-span, span, 300)
    iv_row = np.r_[rng.integers(0, 7, 1990), cta_row[:10]]  # slot 6 has no CTA
    iv_start = np.r_[rng.integers(-span, span, 1990), cta_lo[:10]]  # some start exactly at their CTA's
    got = cta_by_time(cta_row, cta_lo, iv_row, iv_start)
    for i in range(len(iv_row)):
        mine = [(cta_lo[j], j) for j in range(len(cta_row)) if cta_row[j] == iv_row[i] and cta_lo[j] <= iv_start[i]]
        assert got[i] == (max(mine)[1] if mine else -1), i
