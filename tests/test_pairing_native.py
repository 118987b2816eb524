"""A .pftrace's BEGIN/END events paired per track in C (trace/pairing_c.py): the same slices
and depths as a plain stack per track written here and as the numpy pairing
(``readback._match``, ``readback._nest_level``), the same one-line errors, and the same
profile read back from a trace with the extension on or off."""
import numpy as np
import pytest

from proton_lite.trace import load_trace, pairing_c, readback
from proton_lite.trace.perfetto import write_perfetto
from synth import wave_profile
from test_trace import assert_same_profile


def _module_or_skip():
    if pairing_c._EXTENSION.module() is None:
        pytest.skip(f"the pairing extension is not built here: {pairing_c._EXTENSION.error}")


def _stream(rng, n_tracks: int, slices: int, max_depth: int):
    """Well-nested BEGIN/END events of ``n_tracks`` tracks (uuids spread over 64 bits), the
    tracks' events interleaved at random in file order."""
    uuids = np.unique(rng.integers(1, 1 << 62, n_tracks, dtype=np.int64))
    assert len(uuids) == n_tracks
    uuids = rng.permutation(uuids * rng.choice([1, -1], n_tracks))
    per_track = []
    for t in range(n_tracks):
        ev, depth = [], 0
        for _ in range(slices):
            if depth and (depth >= max_depth or rng.random() < 0.45):
                ev.append(1)
                depth -= 1
            else:
                ev.append(0)
                depth += 1
        ev += [1] * depth
        per_track.append(ev)
    order = rng.permutation(np.repeat(np.arange(n_tracks), [len(e) for e in per_track]))
    cursor = [0] * n_tracks
    track, is_end = [], []
    for t in order.tolist():
        track.append(uuids[t])
        is_end.append(per_track[t][cursor[t]])
        cursor[t] += 1
    return np.array(track, np.int64), np.array(is_end, bool), uuids


def _stack_pairs(track, is_end) -> set:
    """(BEGIN, END, depth) of every slice, by a stack per track."""
    open_, out = {}, set()
    for i, (t, end) in enumerate(zip(track.tolist(), is_end.tolist())):
        stack = open_.setdefault(t, [])
        if end:
            b = stack.pop()
            out.add((b, i, len(stack)))
        else:
            stack.append(i)
    return out


@pytest.mark.parametrize("seed,n_tracks,max_depth", [(0, 1, 1), (1, 7, 3), (2, 40, 6), (3, 300, 2)])
def test_pairs_and_depths_are_a_stack_per_track(seed, n_tracks, max_depth):
    _module_or_skip()
    rng = np.random.default_rng(seed)
    track, is_end, uuids = _stream(rng, n_tracks, 60, max_depth)
    b, e, level = pairing_c.pair(track, is_end, np.r_[uuids, uuids[:3]])  # (descriptors may repeat a uuid)
    got = set(zip(b.tolist(), e.tolist(), level.tolist()))
    assert got == _stack_pairs(track, is_end)
    nb, ne = readback._match(track, is_end)
    assert got == set(zip(nb.tolist(), ne.tolist(), readback._nest_level(track, nb, ne).tolist()))
    assert list(b) == sorted(b)  # in the BEGINs' order (a unit track's slices by time, outermost first)


@pytest.mark.parametrize("cut", ["end_first", "left_open"])
def test_unpaired_events_are_the_numpy_pairings_errors(cut):
    _module_or_skip()
    track, is_end, uuids = _stream(np.random.default_rng(5), 5, 30, 3)
    if cut == "end_first":  # an END before any BEGIN of its track
        track, is_end = np.r_[track[:1], track], np.r_[True, is_end]
    else:  # the last END dropped
        track, is_end = track[:-1], is_end[:-1]
    with pytest.raises(ValueError) as numpy_error:
        readback._match(track, is_end)
    with pytest.raises(ValueError) as c_error:
        pairing_c.pair(track, is_end, uuids)
    assert str(c_error.value) == str(numpy_error.value)


def test_a_track_without_a_descriptor_is_left_to_the_reader():
    _module_or_skip()
    track, is_end, uuids = _stream(np.random.default_rng(6), 4, 10, 2)
    assert pairing_c.pair(track, is_end, uuids[1:]) is None
    assert pairing_c.pair(np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int64)) is not None


@pytest.mark.parametrize("layout", ["launch", "sm"])
def test_a_trace_reads_back_the_same_with_the_extension_or_without(tmp_path, monkeypatch, layout):
    _module_or_skip()
    p = wave_profile(n_ctas=400, launches=3, sms=4, resident=3, early=0.05, late=0.05, touching=0.3, seed=4)
    path = tmp_path / "t.pftrace"
    write_perfetto(p, path, layout=layout)
    with_c = load_trace(path)
    monkeypatch.setattr(pairing_c, "pair", lambda *a: None)
    without = load_trace(path)
    assert_same_profile(with_c, without)
    assert_same_profile(p, with_c)
    for name in with_c.intervals.dtype.names:
        assert np.array_equal(with_c.intervals[name], without.intervals[name]), name


def test_tracks_numbered_one_to_n_are_ranked_without_a_search():
    """The writers number tracks 1..N: each event's rank is its uuid less the first; an event
    on a track outside them has no descriptor (None), as with uuids spread out."""
    keys = np.arange(5, 12, dtype=np.int64)
    track = np.array([5, 11, 7, 7, 9], np.int64)
    assert pairing_c.track_index(track, keys).tolist() == [0, 6, 2, 2, 4]
    assert pairing_c.track_index(np.r_[track, 12], keys) is None
    assert pairing_c.track_index(np.r_[track, 4], keys) is None
    spread = np.array([3, 40, 41], np.int64)  # not contiguous: searched
    assert pairing_c.track_index(np.array([41, 3, 40]), spread).tolist() == [2, 0, 1]
    assert pairing_c.track_index(np.array([41, 4]), spread) is None
