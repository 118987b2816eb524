"""Protobuf wire format, written straight from numpy arrays and read back.

Why not the ``perfetto`` package's builders: they cost ~4 us per packet in Python, seconds
for a million slices.  Here every row of a table (one packet per row) is laid out as a
fixed sequence of columns -- constant bytes, varints split into 7-bit groups, strings
from a small table -- in a ``(n, width)`` byte matrix, and the bytes that a row does not
use (short varints, absent fields) are masked out in one compaction.  The reader side is
a plain loop over fields: only used by ``readback``.
"""
from __future__ import annotations

import numpy as np

WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5


# ---- scalar encoding (headers, descriptors of which there are few) --------------------------

def varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 -> two's complement, as protobuf does
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def tag(num: int, wire: int) -> bytes:
    return varint(num << 3 | wire)


def field_varint(num: int, value: int) -> bytes:
    return tag(num, WIRE_VARINT) + varint(value)


def field_bytes(num: int, payload: bytes | str) -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    return tag(num, WIRE_LEN) + varint(len(payload)) + payload


# ---- vectorized rows -----------------------------------------------------------------------

def varint_len(v: np.ndarray) -> np.ndarray:
    """Bytes of each uint64 as a varint (1..10)."""
    v = np.asarray(v, np.uint64)
    n = np.ones(len(v), np.int8)
    top = int(v.max()).bit_length() if len(v) else 0
    for k in range(1, min(10, (top + 6) // 7)):
        n += v >= np.uint64(1 << (7 * k))
    return n


class Rows:
    """One message per row, built column by column; ``tobytes`` concatenates the rows.

    Every column holds one byte per row (a scalar or an array) and, optionally, a bool
    array saying in which rows it is present.  ``mark()``/``length_since()`` give the
    byte count of the columns added after a mark, for length prefixes (filled in later
    with ``set_length``; each length must be < 128, or < 16,384 for a wide one, checked).
    """

    def __init__(self, n: int):
        self.n = n
        self.cols: list = []  # byte value: int or uint8 array
        self.present: list = []  # None (always) or bool array
        self.wide: set[int] = set()  # columns of two-byte length prefixes (``placeholder(wide=True)``)

    def const(self, data: bytes, present=None) -> None:
        for b in data:
            self.cols.append(b)
            self.present.append(present)

    def column(self, byte_per_row: np.ndarray, present=None) -> None:
        self.cols.append(byte_per_row)
        self.present.append(present)

    def varint(self, values, present=None) -> None:
        v = np.asarray(values).astype(np.uint64, copy=False)  # int64 -> two's complement
        n = varint_len(v) if len(v) else np.ones(0, np.int64)
        width = int(n.max()) if len(n) else 1
        for k in range(width):
            byte = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
            if k + 1 < width:
                byte |= np.where(n > k + 1, np.uint8(0x80), np.uint8(0))
            self.cols.append(byte)
            here = n > k if k else None
            if present is not None:
                here = present if here is None else (here & present)
            self.present.append(here)

    def table(self, strings: list[bytes], index: np.ndarray, present=None) -> None:
        """Per row, the bytes ``strings[index[row]]`` (a small table of distinct strings)."""
        lens = np.array([len(s) for s in strings], np.int64)
        width = int(lens.max()) if len(lens) else 0
        mat = np.zeros((len(strings), max(width, 1)), np.uint8)
        if int(lens.sum()):  # the strings joined, scattered into their rows at once (a launch's title each: 65 K)
            joined = np.frombuffer(b"".join(strings), np.uint8)
            row = np.repeat(np.arange(len(strings)), lens)
            mat[row, np.arange(len(joined)) - np.repeat(np.cumsum(lens) - lens, lens)] = joined
        row_len = lens[index]
        for k in range(width):
            self.cols.append(mat[index, k])
            here = row_len > k
            self.present.append(here if present is None else here & present)

    def decimal(self, values, present=None, signed: bool = False) -> None:
        """Integers as ASCII decimal digits (``signed``: a leading '-' where negative)."""
        v = np.asarray(values, np.int64)
        if signed:
            self.const(b"-", v < 0 if present is None else (v < 0) & present)
            v = np.abs(v)
        elif len(v) and int(v.min()) < 0:
            raise ValueError("decimal() of a negative number needs signed=True")
        top = int(v.max()) if len(v) else 0
        width = len(str(top))
        for k in range(width - 1, -1, -1):  # column for 10**k, leading zeros masked out
            p = 10 ** k
            self.cols.append((((v // p) % 10) + 48).astype(np.uint8) if k else ((v % 10) + 48).astype(np.uint8))
            here = v >= p if k else None
            if present is not None:
                here = present if here is None else here & present
            self.present.append(here)

    def digits3(self, values) -> None:
        """0..999 as exactly three ASCII digits (the ns part of a microsecond time)."""
        v = np.asarray(values, np.int64)
        for p in (100, 10, 1):
            self.cols.append(((v // p) % 10 + 48).astype(np.uint8))
            self.present.append(None)

    def mark(self) -> int:
        return len(self.cols)

    def placeholder(self, wide: bool = False) -> int:
        """Reserve a column for a length written later by ``set_length``: one byte (< 128),
        or with ``wide`` two, the second present only where the length needs it (< 16,384)."""
        self.cols.append(0)
        self.present.append(None)
        if wide:
            self.wide.add(len(self.cols) - 1)
            self.cols.append(0)
            self.present.append(np.zeros(self.n, bool))
            return len(self.cols) - 2
        return len(self.cols) - 1

    def length_since(self, mark: int) -> np.ndarray:
        masks = [p for p in self.present[mark:] if p is not None]
        fixed = len(self.present) - mark - len(masks)
        if len(masks) > 250 and not self.wide:
            raise ValueError("too many optional columns for a one-byte count")
        total = np.full(self.n, fixed, np.uint16 if self.wide else np.uint8)
        for p in masks:
            np.add(total, p, out=total, casting="unsafe")
        return total.astype(np.int64)

    def set_length(self, col: int, length: np.ndarray, present=None) -> None:
        if col in self.wide:
            if len(length) and int(length.max()) >= 1 << 14:
                raise ValueError("row message of 16,384 bytes or more: a two-byte length prefix does not fit")
            long = length > 127
            self.cols[col] = ((length & 0x7F) | np.where(long, 0x80, 0)).astype(np.uint8)
            self.present[col] = present
            self.cols[col + 1] = (length >> 7).astype(np.uint8)
            self.present[col + 1] = long if present is None else long & present
            return
        if len(length) and int(length.max()) > 127:
            raise ValueError("row message longer than 127 bytes: one-byte length prefix does not fit")
        self.cols[col] = length.astype(np.uint8)
        self.present[col] = present

    def row_lengths(self) -> np.ndarray:
        return self.length_since(0)

    def tobytes(self) -> bytes:
        """The rows, one after another, each the present bytes of its columns: in C without
        the GIL where ``native_events`` is built (``trace/rows_c.py``), else built row-major:
        the byte matrix and the mask of present bytes are compacted in memory order (a
        column-major build compacts with a stride of one row per byte: ~1.7x slower for the
        event tables)."""
        w = len(self.cols)
        if not self.n or not w:
            return b""
        from proton_lite.trace import native_events  # (C built at first use; None without a compiler)
        mod = native_events.module()
        if mod is not None:
            scalar = [not isinstance(c, np.ndarray) for c in self.cols]
            consts = np.array([int(c) & 0xFF if s else 0 for c, s in zip(self.cols, scalar)], np.uint8)
            arrays = tuple(None if s else np.ascontiguousarray(c).astype(np.uint8, copy=False)
                           for c, s in zip(self.cols, scalar))
            present = tuple(None if p is None else np.ascontiguousarray(p, np.bool_) for p in self.present)
            return mod.rows_bytes(int(self.n), consts, arrays, present)
        return self.tobytes_numpy()

    def tobytes_numpy(self) -> bytes:
        """``tobytes`` by numpy alone (where the extension is not built; the tests' reference)."""
        w = len(self.cols)
        if not self.n or not w:
            return b""
        mat = np.empty((self.n, w), np.uint8)
        keep = None
        for j, (c, p) in enumerate(zip(self.cols, self.present)):
            mat[:, j] = c
            if p is not None:
                if keep is None:
                    keep = np.ones((self.n, w), bool)
                keep[:, j] = p
        return mat[keep].tobytes() if keep is not None else mat.tobytes()


# ---- reading -------------------------------------------------------------------------------

def read_varint(buf: bytes, i: int) -> tuple[int, int]:
    b = buf[i]
    if b < 0x80:
        return b, i + 1
    result, shift = b & 0x7F, 7
    i += 1
    while True:
        b = buf[i]
        result |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return result, i
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def fields(buf: bytes, start: int = 0, end: int | None = None):
    """Yield (field number, wire type, value) of one message; LEN values are (start, end)."""
    i = start
    end = len(buf) if end is None else end
    while i < end:
        key, i = read_varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == WIRE_VARINT:
            v, i = read_varint(buf, i)
        elif wire == WIRE_LEN:
            n, i = read_varint(buf, i)
            v = (i, i + n)
            i += n
        elif wire == WIRE_I64:
            v = int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wire == WIRE_I32:
            v = int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if i > end:
            raise ValueError("protobuf field runs past the end of its message")
        yield num, wire, v


def signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


# ---- vectorized reading (many messages of one type at once) ---------------------------------

def read_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints starting at byte offsets ``pos`` of ``buf`` (uint8); returns (values, lengths)."""
    b = buf[pos].astype(np.uint64)
    value = b & np.uint64(0x7F)
    length = np.ones(len(pos), np.int64)
    more = np.flatnonzero(b >= 0x80)
    k = 1
    while len(more):
        if k >= 10:
            raise ValueError("varint longer than 10 bytes")
        at = pos[more] + k
        if at.max() >= len(buf):
            raise ValueError("varint runs past the end of the data")
        b = buf[at].astype(np.uint64)
        value[more] |= (b & np.uint64(0x7F)) << np.uint64(7 * k)
        length[more] += 1
        more = more[b >= 0x80]
        k += 1
    return value, length


def parse_messages(buf: np.ndarray, start: np.ndarray, end: np.ndarray, wanted: dict[int, int],
                   keep: str = "last") -> dict:
    """Decode fields of many messages at once: one field per message per step.

    ``wanted`` maps field number -> wire type (0 varint, 2 length-delimited).  Returns
    {field: (has, value)} with value uint64 (varint) or (payload start, payload end) int64
    arrays; a field repeated in one message keeps its last occurrence (``keep="first"``: its first).
    """
    n = len(start)
    out = {}
    for f, w in wanted.items():
        has = np.zeros(n, bool)
        out[f] = (has, np.zeros(n, np.uint64)) if w == WIRE_VARINT else (has, np.zeros(n, np.int64),
                                                                         np.zeros(n, np.int64))
    cur = np.asarray(start, np.int64).copy()
    end = np.asarray(end, np.int64)
    active = np.flatnonzero(cur < end)
    while len(active):
        key, klen = read_varints(buf, cur[active])
        num = (key >> np.uint64(3)).astype(np.int64)
        wire = (key & np.uint64(7)).astype(np.int64)
        p = cur[active] + klen
        nxt = np.empty(len(active), np.int64)
        val = np.zeros(len(active), np.uint64)
        vw = (wire == WIRE_VARINT) | (wire == WIRE_LEN)
        if vw.any():
            v, vl = read_varints(buf, p[vw])
            val[vw] = v
            nxt[vw] = p[vw] + vl + np.where(wire[vw] == WIRE_LEN, v.astype(np.int64), 0)
            p[vw] += np.where(wire[vw] == WIRE_LEN, vl, 0)  # payload start of LEN fields
        nxt[wire == WIRE_I64] = p[wire == WIRE_I64] + 8
        nxt[wire == WIRE_I32] = p[wire == WIRE_I32] + 4
        if np.any((wire == 3) | (wire == 4) | (wire > 5)):
            raise ValueError("unsupported protobuf wire type")
        if np.any(nxt > end[active]):
            raise ValueError("a protobuf field runs past the end of its message")
        for f, w in wanted.items():
            m = (num == f) & (wire == w)
            if keep == "first":
                m &= ~out[f][0][active]
            if m.any():
                rows = active[m]
                out[f][0][rows] = True
                if w == WIRE_VARINT:
                    out[f][1][rows] = val[m]
                else:
                    out[f][1][rows] = p[m]
                    out[f][2][rows] = nxt[m]
        cur[active] = nxt
        active = active[nxt < end[active]]
    return out


def packet_bounds(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Payload (start, end) of each ``Trace.packet`` in a packet stream.

    Every byte 0x0a may start a packet; its successor (start + tag + length varint +
    length) is computed for all of them at once, and only the chain from offset 0 is
    then walked, one list step per packet.
    """
    from array import array
    buf = np.frombuffer(data, np.uint8)
    n = len(buf)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cand = np.flatnonzero(buf == 0x0A)
    if not len(cand) or cand[0] != 0:
        raise ValueError("not a stream of TracePackets (no packet tag at offset 0)")
    # length varint after each candidate (up to 5 bytes: packets < 32 GiB)
    ln = np.zeros(len(cand), np.int64)
    width = np.zeros(len(cand), np.int64)
    more = np.ones(len(cand), bool)
    for k in range(5):
        at = np.minimum(cand + 1 + k, n - 1)
        b = buf[at].astype(np.int64)
        ln |= np.where(more, (b & 0x7F) << (7 * k), 0)
        width += more
        more &= (b >= 0x80) & (cand + 1 + k < n)
    payload = cand + 1 + width
    nxt = payload + ln
    at = np.searchsorted(cand, nxt)
    hit = (at < len(cand)) & (cand[np.minimum(at, len(cand) - 1)] == nxt) & ~more & (cand + 1 < n)
    jump = np.where(hit, at, np.where((nxt == n) & ~more & (cand + 1 < n), -2, -1)).astype(np.int64)
    steps = memoryview(jump)
    path = array("q")
    push = path.append
    k = 0
    while k >= 0:
        push(k)
        k = steps[k]
    if k == -1:
        raise ValueError("truncated or damaged: a packet runs past the end of the file or into garbage")
    idx = np.frombuffer(path, np.int64)
    return payload[idx], nxt[idx]
