"""The C event encoder (``trace/native_events.py``) writes exactly the numpy encoder's bytes.

Both paths run here: the C one as built at first use, the numpy one with the module switched
off (but the C deflate kept: without the module, zlib deflates, to other bytes); traces of
several shapes must come out byte for byte the same, deflated or not, in one batch per chunk
or many, in one piece or many.
"""
import numpy as np
import pytest
from test_trace import _random_profile, big_profile, synthetic_profile

from proton_lite.trace import native_events
from proton_lite.trace.perfetto import write_perfetto


def _native_or_skip():
    if native_events.module() is None:
        pytest.skip(f"the C encoder did not build here: {native_events.error()}")


def _write(profile, path, monkeypatch, native: bool, compress: bool) -> bytes:
    if not native:
        monkeypatch.setattr(native_events, "deflate", native_events.module().deflate)
        monkeypatch.setattr(native_events, "module", lambda: None)
    write_perfetto(profile, path, compress=compress, workers=2)
    monkeypatch.undo()
    return path.read_bytes()


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("small", [False, True])
def test_c_encoder_writes_the_numpy_encoders_bytes(tmp_path, monkeypatch, compress, small):
    _native_or_skip()
    import proton_lite.trace.perfetto_pieces as pp
    noted = synthetic_profile()  # notes on scopes (passes/pipelining.py): an extra annotation on BEGINs
    noted.kernels[0].meta["pipelined"] = [{"scope": "mma", "message": "scope 'mma': a note"}]
    noted.kernels[1].meta["pipelined"] = [{"scope": "consumer", "message": "scope 'consumer': another"}]
    profiles = [synthetic_profile(), noted, _random_profile(5), _random_profile(7),
                big_profile(n_ctas=300, warps=4, iters=3, sms=16, seed=1), big_profile(n_ctas=500, sms=20, seed=2)]
    for k, p in enumerate(profiles):
        if small:  # many pieces, many chunks per piece, many batches per chunk
            for name, value in (("PIECE", 64), ("CHUNK", 100), ("MAX_RAW_BATCH", 300)):
                monkeypatch.setattr(pp, name, value)
        c = _write(p, tmp_path / f"c{k}.pftrace", monkeypatch, True, compress)
        if small:
            for name, value in (("PIECE", 64), ("CHUNK", 100), ("MAX_RAW_BATCH", 300)):
                monkeypatch.setattr(pp, name, value)
        py = _write(p, tmp_path / f"py{k}.pftrace", monkeypatch, False, compress)
        assert len(c) > 1000 and c == py, f"profile {k}: {len(c)} vs {len(py)} bytes"


def test_c_encoder_refuses_events_of_no_interval():
    _native_or_skip()
    z = np.zeros(3, np.int64)
    with pytest.raises(IndexError, match="event of no interval"):
        native_events.encode(3, np.array([0, 5]), np.zeros(2, np.uint8), np.zeros(2, np.int64), z, z, z, z,
                             np.zeros(3, np.uint8), z, True, 1 << 20)
    with pytest.raises(ValueError, match="different lengths"):
        native_events.encode(3, np.array([0]), np.zeros(1, np.uint8), np.zeros(1, np.int64), z, z[:2], z, z,
                             np.zeros(3, np.uint8), z, True, 1 << 20)


def test_piece_keys_and_their_numbering_match_numpy():
    """The C index step: each interval's unit-track and (kernel, scope) keys, numbered by a
    presence table, as ``unit_tracks_of`` and ``np.unique`` number them."""
    from proton_lite.profile_data import INTERVAL_DTYPE
    from proton_lite.trace.rows import unit_tracks_of
    if native_events.module() is None:
        pytest.skip(f"C extension not built here: {native_events.error()}")
    rng = np.random.default_rng(5)
    n, n_cta, n_rows, units, lanes, n_scopes = 3000, 40, 12, 8, 2, 5
    iv = np.zeros(n, INTERVAL_DTYPE)
    iv["unit"], iv["lane"] = rng.integers(0, units, n), rng.integers(0, lanes, n)
    iv["scope"] = rng.integers(0, n_scopes, n)
    iv_cta = rng.integers(0, n_cta, n)
    row_of_cta, cta_lr = rng.integers(0, n_rows, n_cta), rng.integers(0, 3, n_cta)
    k_of_lr = np.array([0, 2, 1])
    sel = np.sort(rng.choice(n, 1000, replace=False))
    tkey, pkey = native_events.index_keys(sel, iv_cta[sel], row_of_cta, cta_lr, k_of_lr, iv, units, lanes, n_scopes)
    keys, inv = native_events.dense_unique(tkey, n_rows * units * lanes)
    expected = unit_tracks_of(row_of_cta[iv_cta[sel]], iv["unit"][sel], iv["lane"][sel], units, lanes, n_rows)
    got = (keys // (units * lanes), (keys // lanes) % units, keys % lanes, inv)
    assert all(np.array_equal(g, e) for g, e in zip(got, expected))
    pairs, pair_inv = native_events.dense_unique(pkey, 3 * n_scopes)
    e_pairs, e_inv = np.unique(k_of_lr[cta_lr[iv_cta[sel]]] * n_scopes + iv["scope"][sel], return_inverse=True)
    assert np.array_equal(pairs, e_pairs) and np.array_equal(pair_inv, e_inv.reshape(-1))
    with pytest.raises(IndexError):  # a scope outside the table is an error, not a wrong key
        native_events.index_keys(sel, iv_cta[sel], row_of_cta, cta_lr, k_of_lr, iv, units, lanes, 2)
    with pytest.raises(ValueError):  # CTA ranks not one per selected interval
        native_events.index_keys(sel, iv_cta, row_of_cta, cta_lr, k_of_lr, iv, units, lanes, n_scopes)
    with pytest.raises(IndexError):
        native_events.dense_unique(np.array([3, 9]), 5)
    assert native_events.dense_unique(tkey, native_events.DENSE_MAX + 1) is None
    other = np.zeros(n, [("unit", "<u8"), ("lane", "<u2"), ("scope", "<u4")])  # not the rows the C code reads
    assert native_events.index_keys(sel, iv_cta[sel], row_of_cta, cta_lr, k_of_lr, other, units, lanes,
                                    n_scopes) is None


def _events(n: int, seed: int):
    """``native_events.encode``'s arguments for n intervals on 3 tracks (BEGIN then END each)."""
    rng = np.random.default_rng(seed)
    ev_i = np.repeat(np.arange(n, dtype=np.int64), 2)
    ev_end = np.tile(np.array([0, 1], np.uint8), n)
    dts = rng.integers(0, 5000, 2 * n).astype(np.int64)
    track, iid = rng.integers(1, 4, n).astype(np.int64), rng.integers(1, 3, n).astype(np.int64)
    cycles, depth = rng.integers(0, 1 << 20, n).astype(np.int64), np.zeros(n, np.int64)
    return ev_i, ev_end, dts, track, iid, cycles, depth, np.zeros(n, np.uint8), np.zeros(n, np.int64)


@pytest.mark.parametrize("compress", [True, False])
def test_a_threads_reused_buffers_give_the_bytes_of_fresh_ones(compress):
    """Each thread keeps its encoder buffers from call to call (unmapping and faulting them in
    again per call cost system time): a small batch after a large one, and a large one after
    that, come out exactly as from fresh buffers (``release`` frees this thread's)."""
    _native_or_skip()
    sizes = (20_000, 30, 50_000, 1)
    fresh = []
    for k, n in enumerate(sizes):
        native_events.release()
        fresh.append(native_events.encode(5, *_events(n, k), compress, 1 << 12))
    native_events.release()
    reused = [native_events.encode(5, *_events(n, k), compress, 1 << 12) for k, n in enumerate(sizes)]
    native_events.release()
    assert reused == fresh and len(fresh[2][0]) > len(fresh[0][0]) > len(fresh[1][0]) > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_are_laid_out_in_c_as_numpy_lays_them_out(seed):
    """``Rows.tobytes`` in C (``trace/rows_c.py``): constants, varints of every width, optional
    columns, tables of strings, decimals, one- and two-byte lengths, scalar numpy bytes: the
    bytes of the numpy form, row for row; columns of another length are refused."""
    _native_or_skip()
    from proton_lite.trace._proto import Rows
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    r = Rows(n)
    r.const(b"\x0a\x80")
    r.varint(rng.integers(0, 1 << 62, n))
    some = rng.random(n) < 0.3
    r.varint(rng.integers(-5, 300, n), some)
    wide = r.placeholder(wide=True)
    at = r.mark()
    r.table([b"", b"abc", b"x" * 200], rng.integers(0, 3, n), ~some)
    r.decimal(rng.integers(-10**6, 10**6, n), signed=True)
    r.set_length(wide, r.length_since(at))
    short = r.placeholder()
    at = r.mark()
    r.column(rng.integers(0, 256, n).astype(np.uint8), some)
    r.cols.append(np.uint8(7))  # a numpy scalar byte, as a constant
    r.present.append(None)
    r.set_length(short, r.length_since(at), ~some)
    assert r.tobytes() == r.tobytes_numpy() and len(r.tobytes()) > n
    mod = native_events.module()
    with pytest.raises(ValueError, match="another length than the rows"):
        mod.rows_bytes(n, np.zeros(1, np.uint8), (np.zeros(n + 1, np.uint8), ), (None, ))
    with pytest.raises(ValueError, match="one constant per column"):
        mod.rows_bytes(n, np.zeros(2, np.uint8), (None, ), (None, ))


def _nested_intervals(rng, n_tracks: int, per_track: int, t_scale: int):
    """Intervals that nest on each track, with shared times: touching, zero-length, equal
    starts and ends, children ending with their parent, a span twice (ties for every
    tie-breaker)."""
    track, start, end, depth = [], [], [], []
    for tr in range(n_tracks):
        t = 0
        for _ in range(per_track):
            a = t + int(rng.integers(0, 3)) * t_scale
            b = a + int(rng.integers(0, 4)) * t_scale
            track.append(tr + 1), start.append(a), end.append(b), depth.append(0)
            c = a
            for _ in range(int(rng.integers(0, 3))):  # children one after another in [a, b], some at its edges
                c = c + int(rng.integers(0, b - c + 1)) if b > c else c
                d = c + int(rng.integers(0, b - c + 1)) if b > c else c
                track.append(tr + 1), start.append(c), end.append(d), depth.append(1)
                c = d
            if rng.random() < 0.2:  # the same span twice on the track (it nests: one in the other)
                track.append(tr + 1), start.append(a), end.append(b), depth.append(0)
            t = b
    perm = rng.permutation(len(start))
    return tuple(np.asarray(x, np.int64)[perm] for x in (track, start, end, depth))


@pytest.mark.parametrize("seed", range(6))
def test_a_pieces_event_order_in_c_is_numpys(seed):
    """``event_order_c.piece_events`` gives ``_nesting`` + ``time_order``'s events, deltas and
    levels exactly, on pieces full of ties, with times small and near 2^62, and with one track
    2^61 ns after the others (one key no longer holds track, time and phase: the comparison
    sort of every event)."""
    _native_or_skip()
    from proton_lite.trace.event_order_c import piece_events
    from proton_lite.trace.nesting import _nesting
    from proton_lite.trace.perfetto_pieces import time_order
    rng = np.random.default_rng(seed)
    track, start, end, depth = _nested_intervals(rng, int(rng.integers(1, 6)), int(rng.integers(1, 60)),
                                                 int(rng.integers(1, 4)))
    far = np.where(track == 1, 1 << 61, 0)  # track 1 far later: the comparison sort's case
    for offset in (0, 1 << 62 if seed % 2 else 10**15, far):
        s, e = start + offset, end + offset
        seq, ts, nest = _nesting(track, s, e, depth, str)
        want_ev, want_dts = time_order(seq, ts)
        ev, dts, nest_c = piece_events(track, s, e, depth, str)
        assert np.array_equal(ev, want_ev) and np.array_equal(dts, want_dts) and np.array_equal(nest_c, nest)


def test_a_pieces_event_order_in_c_names_crossing_scopes_as_numpy_does():
    _native_or_skip()
    from proton_lite.trace.event_order_c import piece_events
    from proton_lite.trace.nesting import _nesting
    track = np.array([1, 1, 2], np.int64)
    start, end, depth = np.array([0, 5, 0], np.int64), np.array([10, 15, 3], np.int64), np.zeros(3, np.int64)
    for f in (lambda: _nesting(track, start, end, depth, lambda i: f"interval {i}"),
              lambda: piece_events(track, start, end, depth, lambda i: f"interval {i}")):
        with pytest.raises(ValueError, match=r"interval 0: scopes overlap without nesting .*\[0, 10\]"):
            f()
    with pytest.raises(ValueError, match="interval 2: a slice ends before it starts"):
        piece_events(track, start, np.array([10, 15, -1], np.int64), depth, lambda i: f"interval {i}")


def test_interned_strings_are_the_field_builders_bytes():
    """``perfetto_pieces.interned_strings`` lays out each (iid, name) message by hand: the same
    bytes as ``_proto``'s field builders give, for iids and names of one, two and three varint
    bytes, ASCII and not."""
    from proton_lite.trace._proto import field_bytes, field_varint
    from proton_lite.trace.perfetto_pieces import interned_strings
    items = [(i, n) for i in (0, 1, 127, 128, 300, 16383, 16384, 2**21 + 5)
             for n in ("", "k", "matmul #3", "x" * 127, "y" * 128, "kernel é #9", "z" * 20000)]
    want = b"".join(field_bytes(2, field_varint(1, i) + field_bytes(2, n)) for i, n in items)
    assert interned_strings(2, items) == want
