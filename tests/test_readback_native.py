"""The C chunk parse (``trace/readback_c.py``) gives the numpy parse's columns exactly, and
refuses what it refuses.

Both paths run here: the C one as built at first use, the numpy one with the module switched
off.  Traces from the writer, read in many small chunks on one thread or several, and packet
streams built by hand (with this file's own encoder) with the corners of the wire format:
repeated fields, unknown fields of every wire type, long varints, events with no, one and
several annotations, sequence ids that are negative as int64.  Malformed streams give the
numpy parse's errors with the extension on.
"""
import zlib

import numpy as np
import pytest

from proton_lite.native_build import CExtension
from proton_lite.trace import perfetto_fields as pf, readback_c
from proton_lite.trace import readback_events as rbe
from synth import wave_profile

COLUMNS = ("t", "typ", "track", "iid", "an", "av", "first_an", "first_av", "t_uuid", "t_parent", "t_rank")


def _native_or_skip():
    if readback_c.module() is None:
        pytest.skip(f"the C readback is off or did not build here: {readback_c.error() or 'switched off'}")


# ---- an encoder of this file's own (not the code under test's) ----------------------------------

def vint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def fv(num: int, value: int) -> bytes:
    return vint(num << 3) + vint(value)


def fl(num: int, *parts: bytes) -> bytes:
    body = b"".join(parts)
    return vint(num << 3 | 2) + vint(len(body)) + body


def f64(num: int) -> bytes:
    return vint(num << 3 | 1) + bytes(range(8))


def f32(num: int) -> bytes:
    return vint(num << 3 | 5) + b"\xff\x0a\x80\x00"


def packet(*parts: bytes) -> bytes:
    return fl(1, *parts)


def event(ts, seq, *te, extra=b"") -> bytes:
    return packet(fv(pf.P_TIMESTAMP, ts), fv(pf.P_SEQ_ID, seq), fl(pf.P_TRACK_EVENT, *te), extra)


def ann(name: int, value: int, *extra: bytes) -> bytes:
    return fl(pf.TE_ANNOTATIONS, fv(pf.DA_NAME_IID, name), fv(pf.DA_INT, value), *extra)


def defaults(clock: int) -> bytes:
    return packet(fv(pf.P_SEQ_ID, 3), fl(pf.P_DEFAULTS, fv(pf.TPD_CLOCK_ID, clock)))


UNKNOWN = fv(99, 5) + f64(98) + fl(97, b"\x0a\x05xyz") + f32(96)  # each wire type, in a field not read
BIG = (1 << 64) - 3  # > 2^63: negative as int64


def rich_stream(clock: int | None = pf.CLOCK_ID) -> bytes:
    """Every corner at once; the last TracePacketDefaults with ``clock`` (None: no defaults)."""
    def te(typ, track, iid):
        return fv(pf.TE_TYPE, typ) + fv(pf.TE_TRACK_UUID, track) + fv(pf.TE_NAME_IID, iid)
    return b"".join([
        defaults(pf.CLOCK_ID) if clock is not None else b"",
        packet(fv(pf.P_SEQ_ID, 3), fl(pf.P_TRACK_DESCRIPTOR, fv(pf.TD_UUID, BIG), fl(pf.TD_NAME, b"gpu"),
                                      fv(pf.TD_PARENT, 7), fv(pf.TD_RANK, (5 << 32) + 9), UNKNOWN)),
        packet(fl(pf.P_TRACK_DESCRIPTOR, fv(pf.TD_UUID, 7))),  # no parent, no rank, no sequence
        packet(UNKNOWN, fv(pf.P_TIMESTAMP, 11), UNKNOWN, fv(pf.P_SEQ_ID, 3), UNKNOWN,
               fl(pf.P_TRACK_EVENT, UNKNOWN, te(1, BIG, 2), UNKNOWN)),  # no annotation
        event(100, 3, te(2, 7, 0), ann(1, -5)),  # one, negative
        event(1 << 40, BIG, te(1, 8, 1 << 35), ann(2, 1, UNKNOWN), ann(3, -(1 << 62), fv(pf.DA_INT, 4)),
              ann(4, (1 << 63) + 17), fv(pf.TE_TYPE, 2)),  # several; a DA_INT and the type repeated
        packet(fv(pf.P_TIMESTAMP, 3), fl(pf.P_TRACK_EVENT, te(1, 9, 9), ann((1 << 32) + 6, 0))),  # no sequence id
        packet(fv(pf.P_TIMESTAMP, 1), fv(pf.P_SEQ_ID, 4), fv(pf.P_TIMESTAMP, 50), fv(pf.P_SEQ_ID, 3),
               fl(pf.P_TRACK_EVENT, te(1, 1, 1)), fl(pf.P_TRACK_EVENT, te(2, 2, 2), ann(6, 6))),  # last wins
        packet(fv(pf.P_TIMESTAMP, 7), fv(pf.P_SEQ_ID, 4)),  # a timestamp, no event: still counted in the sums
        packet(fv(pf.P_SEQ_ID, 4), fl(pf.P_TRACK_EVENT - 1, b"\x08\x01")),  # no timestamp, no event
        event(BIG, 4, te(1, 3, 3), ann(1, 1)),  # a step that wraps the sum
        event(2, 4, fl(pf.TE_TYPE, b"\x01"), vint(pf.TE_ANNOTATIONS << 3) + vint(3), fv(pf.TE_TRACK_UUID, 5)),
        event(0, 1 << 63, b""),  # an empty TrackEvent; a sequence id of -2^63
        packet(vint(pf.P_TIMESTAMP << 3 | 1) + bytes(8), fv(pf.P_SEQ_ID, 3),  # a timestamp of another wire type
               fl(pf.P_TRACK_DESCRIPTOR, fv(pf.TD_UUID, 1), fv(pf.TD_UUID, 2), fv(pf.TD_PARENT, 0))),
        b"\x0a" + b"\x84\x80\x80\x80\x00" + fv(pf.P_TIMESTAMP, 0) + fl(pf.P_TRACK_EVENT, b""),  # 5-byte length
        event(9, 3, b"\x48\x81\x80\x80\x80\x80\x80\x80\x80\x80\x01", ann(1, 2)),  # a 10-byte type (bits past 64)
        packet(fv(pf.P_SEQ_ID, 5), fl(pf.P_DEFAULTS, fv(pf.TPD_CLOCK_ID, 1), UNKNOWN, fv(pf.TPD_CLOCK_ID, clock)))
        if clock is not None else packet(fv(pf.P_SEQ_ID, 5)),
    ])


def random_stream(rng, n: int) -> bytes:
    """Valid packets of random fields, in random order."""
    big = lambda: int(rng.integers(0, 1 << 63)) << int(rng.integers(0, 2)) if rng.random() < 0.3 else \
        int(rng.integers(0, 300))  # noqa: E731
    out = []
    for _ in range(n):
        parts = []
        for _ in range(int(rng.integers(0, 6))):
            kind = rng.integers(0, 8)
            if kind == 0:
                parts.append(fv(pf.P_TIMESTAMP, big()))
            elif kind == 1:
                parts.append(fv(pf.P_SEQ_ID, int(rng.choice([0, 3, 4, BIG, 1 << 63]))))
            elif kind == 2:
                parts.append(fl(pf.P_TRACK_DESCRIPTOR, *[fv(int(rng.choice([1, 5, 12, 2])), big())
                                                         for _ in range(int(rng.integers(0, 4)))]))
            elif kind == 3:
                clock = int(rng.choice([pf.CLOCK_ID, 6, -1]))
                parts.append(fl(pf.P_DEFAULTS, fv(pf.TPD_CLOCK_ID, clock) if clock >= 0 else UNKNOWN))
            elif kind == 4:
                parts.append(UNKNOWN)
            else:
                te = [fv(int(rng.choice([pf.TE_TYPE, pf.TE_TRACK_UUID, pf.TE_NAME_IID, 77])), big())
                      for _ in range(int(rng.integers(0, 4)))]
                te += [ann(big(), big() - 150) for _ in range(int(rng.integers(0, 4)))]
                rng.shuffle(te)
                parts.append(fv(pf.P_TIMESTAMP, big()) + fl(pf.P_TRACK_EVENT, *te))
        rng.shuffle(parts)
        out.append(packet(*parts))
    return b"".join(out)


# ---- the two paths -------------------------------------------------------------------------------

def _chunk(stream: bytes, first: bool, monkeypatch, native: bool):
    """``_chunk_events`` of ``stream`` (deflated into one compressed packet, as the writer's batches
    are), by the C parse or the numpy one; an error as ("error", its type, message)."""
    data = packet(fl(pf.P_COMPRESSED, zlib.compress(stream)))
    starts, ends = rbe.packet_bounds(data)
    outer = rbe.parse_messages(np.frombuffer(data, np.uint8), starts, ends, {pf.P_COMPRESSED: 2})[pf.P_COMPRESSED]
    if not native:
        monkeypatch.setattr(readback_c, "module", lambda: None)
    try:
        return rbe._chunk_events(data, starts, ends, outer, (0, 1), first)
    except (ValueError, IndexError) as e:
        return ("error", type(e), str(e))
    finally:
        monkeypatch.undo()


def _assert_same(c, py):
    if isinstance(py, tuple):
        assert c == py
        return
    assert list(c) == list(py)
    for k, v in py.items():
        if v is None or isinstance(v, bool):
            assert c[k] is v, k
        else:
            assert c[k].dtype == v.dtype and c[k].shape == v.shape and np.array_equal(c[k], v), k


@pytest.mark.parametrize("first", [True, False])
def test_hand_built_streams_give_the_numpy_columns(monkeypatch, first):
    _native_or_skip()
    streams = [rich_stream(), rich_stream(clock=6), rich_stream(clock=None), b"", defaults(6),
               event(1, 1, fv(pf.TE_TYPE, 1)), rich_stream() + packet(fl(pf.P_DEFAULTS, UNKNOWN))]
    rng = np.random.default_rng(0)
    streams += [random_stream(rng, int(rng.integers(1, 60))) for _ in range(60)]
    ids = [int(x) for x in rng.integers(0, 1 << 63, 300, dtype=np.uint64) * 2 + 1] + list(range(300))
    streams.append(b"".join(event(int(rng.integers(0, 1000)), ids[int(rng.integers(0, 600))], fv(pf.TE_TYPE, 1))
                            for _ in range(3000)))  # many sequences (the table grows), in any order
    for k, s in enumerate(streams):
        py = _chunk(s, first, monkeypatch, False)
        assert not isinstance(py, tuple), (k, py)
        assert readback_c.chunk_columns(s, first) is not None, k  # (the C parse ran, and did not refuse)
        _assert_same(_chunk(s, first, monkeypatch, True), py)
    assert len(_chunk(streams[-1], first, monkeypatch, True)["seqs"]) > 500
    rich = _chunk(streams[0], first, monkeypatch, True)
    assert rich["clock"] is True and _chunk(streams[1], first, monkeypatch, True)["clock"] is False
    assert _chunk(streams[2], first, monkeypatch, True)["clock"] is None
    assert _chunk(streams[6], first, monkeypatch, True)["clock"] is False  # (defaults without a clock id)
    assert list(rich["seqs"]) == [-(1 << 63), -3, 0, 3, 4, 5] and len(rich["ts"]) == 10 and len(rich["t_uuid"]) == 3
    assert list(rich["an"][:5]) == [0, 1, 4, 6, 6] and rich["av"][2] == (1 << 63) + 17 - (1 << 64)


def test_malformed_streams_give_the_numpy_errors(monkeypatch):
    _native_or_skip()
    good = rich_stream()
    ts = fv(pf.P_TIMESTAMP, 1 << 40)
    cases = {
        "varint runs past the end": good + b"\x0a\x03" + ts[:3],  # cut inside a varint, at the chunk's end
        "runs past the end of its message": good + b"\x0a\x03" + ts[:3] + good,  # ... at its packet's end
        "runs past the end of its message ": good + packet(fv(pf.P_SEQ_ID, 1), vint(pf.P_TRACK_EVENT << 3 | 2) +
                                                           b"\x09" + fv(pf.TE_TYPE, 1)),  # LEN past the packet
        "wire type": good + packet(fv(pf.P_SEQ_ID, 1), vint(pf.P_TIMESTAMP << 3 | 3)),
        "wire type ": event(1, 1, fv(pf.TE_TYPE, 1), fl(pf.TE_ANNOTATIONS, b"\x0c")) + good,  # in an annotation
        "wire type  ": good + packet(fl(pf.P_DEFAULTS, b"\x0f")),
        "without a timestamp": good + packet(fl(pf.P_TRACK_EVENT, fv(pf.TE_TYPE, 1))),
        "compressed packets inside": packet(fl(pf.P_COMPRESSED, b"x")) + good,
        "damaged": good + b"\x0a\x85",  # a packet length cut short
        "damaged ": good + b"\x0b\x00",  # no packet tag
        "damaged  ": b"\x0a\x80\x80\x80\x80\x80\x00",  # a 6-byte packet length
        "damaged   ": good + b"\x0a\x05\x08",  # a packet past the end
        "longer than 10 bytes": good + packet(vint(pf.P_TIMESTAMP << 3) + b"\xff" * 10 + b"\x01"),
    }
    for match, s in cases.items():
        py = _chunk(s, True, monkeypatch, False)
        assert isinstance(py, tuple) and match.strip() in py[2], (match, py)
        assert readback_c.chunk_columns(s, True) is None, match
        assert _chunk(s, True, monkeypatch, True) == py, match
    with pytest.raises(ValueError, match="inside compressed packets"):  # (read_events' own message)
        rbe.read_events(packet(fl(pf.P_COMPRESSED, zlib.compress(cases["compressed packets inside"]))), workers=1)


def test_damaged_streams_never_read_what_numpy_refuses(monkeypatch):
    """Bytes flipped, cut or inserted at random: the C parse gives the numpy result or its error."""
    _native_or_skip()
    rng = np.random.default_rng(1)
    base = [rich_stream()] + [random_stream(rng, 20) for _ in range(5)]
    refused = 0
    for k in range(1500):
        s = bytearray(base[k % len(base)])
        for _ in range(int(rng.integers(1, 3))):
            at = int(rng.integers(0, len(s)))
            what = rng.integers(0, 3)
            if what == 0:
                s[at] = int(rng.choice([0x80, 0xFF, 0x0A, 0x00, 0x0B, 0x7F, int(rng.integers(0, 256))]))
            elif what == 1:
                del s[at:at + int(rng.integers(1, 4))]
            else:
                s[at:at] = bytes([int(rng.integers(0, 256))])
        s = bytes(s)
        py = _chunk(s, bool(k % 2), monkeypatch, False)
        refused += isinstance(py, tuple)
        _assert_same(_chunk(s, bool(k % 2), monkeypatch, True), py)
    assert 100 < refused < 1400  # (both kinds seen)
    good = rich_stream()
    for cut in range(len(good)):  # cut at every byte: inside varints, lengths, payloads and between packets
        _assert_same(_chunk(good[:cut], True, monkeypatch, True), _chunk(good[:cut], True, monkeypatch, False))


@pytest.mark.parametrize("compress, layout", [(True, "sm"), (False, "launch"), (True, "launch"), (False, "sm")])
def test_written_traces_read_the_same_in_c_and_numpy(tmp_path, monkeypatch, compress, layout):
    _native_or_skip()
    import proton_lite.trace.perfetto as pfw
    import proton_lite.trace.perfetto_pieces as pp
    p = wave_profile(n_ctas=500, launches=3, sms=4, resident=3, early=0.05, late=0.05, touching=0.3, seed=4)
    path = tmp_path / "w.pftrace"
    monkeypatch.setattr(pp, "PIECE", 64)  # many sequences
    monkeypatch.setattr(pp, "MAX_RAW_BATCH", 2048)  # many deflated batches
    pfw.write_perfetto(p, path, compress=compress, layout=layout)
    monkeypatch.undo()
    data = path.read_bytes()
    ran = []  # what the C parse gave each chunk (None: not built or refused)
    c_columns = readback_c.chunk_columns
    monkeypatch.setattr(readback_c, "chunk_columns", lambda *a: ran.append(c_columns(*a)) or ran[-1])
    monkeypatch.setattr(rbe, "CHUNK_BYTES", 4096)  # many chunks, sequences across them
    for first in (True, False):
        py = None
        for native, workers in ((False, 1), (True, 1), (True, 3)):
            if not native:
                monkeypatch.setattr(readback_c, "module", lambda: None)
            got = rbe.read_events(data, first_annotation=first, workers=workers)
            if not native:
                monkeypatch.setattr(readback_c, "module", readback_c._EXTENSION.module)
                py = got
                continue
            for name in COLUMNS:
                a, b = getattr(got, name), getattr(py, name)
                assert (a is None and b is None) or (a.dtype == b.dtype and np.array_equal(a, b)), name
    assert len(ran) > 60 and ran.count(None) == len(ran) // 3  # (the numpy runs' only)
    assert len(py.t) > 2000


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("PROTON_LITE_NATIVE_READBACK", "0")
    assert CExtension(readback_c.SOURCE, "proton_lite_readback", "PROTON_LITE_NATIVE_READBACK").module() is None
