"""The trace's long runs of small texts made apart (``trace/text_c.py``, ``meta.meta_json_parts``):
the same bytes as the Python forms they replace (``json.dumps`` of the whole metadata, the
protobuf field builders), through the C path and the Python one."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from proton_lite.json_values import plain
from proton_lite.trace import meta, native_events, text_c
from proton_lite.trace._proto import field_bytes, field_varint, tag, WIRE_LEN
from proton_lite.trace.perfetto_fields import packet, packet_field_head
from proton_lite.trace.perfetto_pieces import interned_strings


def _native_or_skip():
    if native_events.module() is None:
        pytest.skip(f"the C extension did not build here: {native_events.error()}")


def _dumps(value) -> str:  # what the metadata's JSON was before: one json.dumps of the plain value
    return json.dumps(plain(value), sort_keys=True, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("dtype", ["<u4", "<i4", "<u8", "<i8", "<u2"])
@pytest.mark.parametrize("n", [0, 1, 255, 256, 5000])
def test_integer_columns_as_json_lists(dtype, n):
    """Every width and sign, the extremes included (uint64's top half, int64's most negative),
    on both sides of the C path's threshold."""
    _native_or_skip()
    info = np.iinfo(dtype)
    rng = np.random.default_rng(n)
    edges = [info.min, info.max, 0, 1, 9, 10, 99, 100, info.max - 1, info.min + 1] + ([-1, -10] if info.min else [])
    values = np.array((edges * (n // len(edges) + 1))[:n], dtype)
    if n > 20:
        values[20:] = rng.integers(info.min, info.max, n - 20, dtype=dtype, endpoint=True)
    assert text_c.int_list_json(values) == json.dumps(values.tolist(), separators=(",", ":"))
    strided = np.zeros(n, [("a", "<u4"), ("b", dtype)])
    strided["b"] = values  # (a launch table's field: a strided view)
    assert text_c.int_list_json(strided["b"]) == json.dumps(values.tolist(), separators=(",", ":"))


def test_integer_columns_refuse_other_kinds():
    with pytest.raises(TypeError, match="integer column"):
        text_c.int_list_json(np.ones(300, np.float64))
    with pytest.raises(TypeError, match="integer column"):
        text_c.int_list_json(np.ones(300, bool))


def _items(n: int) -> list:
    names = ["", "k", "matmul #3", "x" * 127, "y" * 128, "kernel é #9", "z" * 20000]
    iids = [0, 1, 127, 128, 300, 16383, 16384, 2**21 + 5, 2**40]
    return [(iids[i % len(iids)], names[i % len(names)]) for i in range(n)]


@pytest.mark.parametrize("n", [10, 300])
def test_interned_names_are_the_field_builders_bytes(n, monkeypatch):
    """Many names go to C (one call), few to the Python loop, and without the extension all go
    to the Python loop: each gives the bytes of ``_proto``'s field builders."""
    _native_or_skip()
    items = _items(n)
    want = b"".join(field_bytes(2, field_varint(1, i) + field_bytes(2, n)) for i, n in items)
    assert interned_strings(2, items) == want
    assert interned_strings(2, iter(items)) == want  # (a generator too)
    assert (text_c.interned_names(tag(2, WIRE_LEN), items) is None) == (n < text_c.LIST_MIN)
    monkeypatch.setattr(text_c, "_module", lambda: None)
    assert interned_strings(2, items) == want


def test_interned_names_refuse_bad_layouts():
    _native_or_skip()
    mod = native_events.module()
    iids = np.arange(3, dtype=np.int64)
    starts = np.array([0, 2, 4], np.int64)
    with pytest.raises(ValueError, match="out of order"):
        mod.interned_names(b"\x12", iids, b"abcdef", starts, np.array([2, 1, 6], np.int64))
    with pytest.raises(ValueError, match="past the names"):
        mod.interned_names(b"\x12", iids, b"abcdef", starts, np.array([2, 4, 7], np.int64))
    with pytest.raises(ValueError, match="negative"):
        mod.interned_names(b"\x12", np.array([0, -1, 2], np.int64), b"abcdef", starts, np.array([2, 4, 6], np.int64))


def test_a_name_table_interns_the_names_a_sequence_uses(monkeypatch):
    """``text_c.NameTable``: the names laid out once, any ascending subset of iids interned in
    one call, as ``perfetto_pieces.sequence_start`` lays out the same names from a dict; without
    the extension, None (the writer then goes the dict's way)."""
    _native_or_skip()
    from proton_lite.trace.perfetto_pieces import sequence_start
    from proton_lite.trace.perfetto_fields import ID_EVENT_NAMES
    names = [n for _, n in _items(3000)]
    table = text_c.NameTable(names)
    assert len(table) == 3000 and table[5] == names[5]
    rng = np.random.default_rng(1)
    for used in (np.array([], np.int64), np.array([1]), np.sort(rng.choice(np.arange(1, 3001), 700, replace=False)),
                 np.arange(1, 3001)):
        want = interned_strings(ID_EVENT_NAMES, [(int(i), names[i - 1]) for i in used.tolist()])
        got = table.messages(tag(ID_EVENT_NAMES, WIRE_LEN), used)
        assert got == want
        assert sequence_start(7, got, {1: "note"}) == sequence_start(7, {int(i): names[i - 1] for i in used.tolist()},
                                                                    {1: "note"})
    monkeypatch.setattr(text_c, "_module", lambda: None)
    assert table.messages(tag(ID_EVENT_NAMES, WIRE_LEN), np.array([1, 2])) is None


def _packed(monkeypatch, n: int, pieces: bool) -> tuple[dict, dict]:
    rng = np.random.default_rng(7)
    cols = {"start_clock": rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64),
            "cycles_per_ns": rng.random(n) + 1.5, "finished_units": rng.integers(0, 9, n).astype(np.uint32)}
    if pieces:  # several streams, a list
        monkeypatch.setattr(meta, "PACK_PIECE", 4096)
        monkeypatch.setattr(meta, "PACK_ROWS", 333)
    return cols, meta._pack_columns(cols, workers=2)


def _as_read(packed: dict) -> dict:  # its streams as JSON holds them (str), for the reference text
    data = packed["data"]
    return dict(packed, data=data.decode() if isinstance(data, bytes) else [d.decode() for d in data])


@pytest.mark.parametrize("pieces", [False, True])
@pytest.mark.parametrize("deferred", [False, True])
def test_metadata_parts_are_the_json_text(pieces, deferred, monkeypatch):
    """The metadata in parts, joined, is the text that ``json.dumps`` of the whole plain value
    gives (the format the reader and older writers share): long integer columns in dicts, the
    packed CTA columns as one stream or many, given or as a function called last, values of
    the user's that JSON escapes (quotes, backslashes, control and non-ASCII characters, a
    placeholder's look-alike), NaN, short columns and non-integer arrays."""
    _native_or_skip()
    cols, packed = _packed(monkeypatch, 5000, pieces)
    assert isinstance(packed["data"], list) == pieces
    rng = np.random.default_rng(3)
    launches = {"launch": np.arange(700, dtype=np.uint32), "stream": rng.integers(0, 2**64 - 1, 700, np.uint64),
                "start_ns": rng.integers(-2**62, 2**62, 700), "short": np.arange(5, dtype=np.uint32)}
    called = []

    def later():
        called.append(1)
        return packed
    value = {"format": "proton-lite-trace", "launches": launches, "ctas": later if deferred else packed,
             "session": {"name": 'a "quoted" \\ name\x00\x1f\u2028 é 漢', "rate": math.nan,
                         "look-alike": "\x00abc:0\x00", "rates": np.linspace(0, 1, 300)},
             "layout": {"name": "sm", "top": np.zeros(700, np.int64)}, "names": [[0, 1], [2, 3]]}
    parts = meta.meta_json_parts(value)
    assert all(isinstance(p, bytes) for p in parts)
    assert called == ([1] if deferred else [])
    text = b"".join(parts).decode()
    assert text == _dumps(dict(value, ctas=_as_read(packed)))
    back = json.loads(text)
    assert back["launches"]["stream"] == launches["stream"].tolist()
    assert back["session"]["name"] == value["session"]["name"]
    for name, col in meta._unpack_columns(back["ctas"]).items():
        np.testing.assert_array_equal(col, cols[name])


def test_packed_columns_without_streams_are_an_empty_list():
    packed = {"rows": 0, "columns": [["a", "<i8"]], "data": []}
    assert b"".join(meta._packed_parts(packed)).decode() == _dumps(packed)


def test_metadata_without_packed_columns_or_long_columns_is_one_dumps():
    value = {"format": "x", "launches": {"launch": np.arange(3, dtype=np.uint32)}, "t0_ns": 5}
    assert b"".join(meta.meta_json_parts(value)).decode() == _dumps(value)
    assert meta._meta_json(value) == _dumps(value)


@pytest.mark.parametrize("length", [0, 1, 127, 128, 16383, 16384, 2**21 + 3])
def test_packet_field_head_frames_a_payload_written_after_it(length):
    payload = b"\x07" * length
    assert packet_field_head(9001, length) + payload == packet(field_bytes(9001, payload))
