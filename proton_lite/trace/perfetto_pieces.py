"""The .pftrace's intervals in independent pieces, each a packet sequence of its own.

Why: one sequence for all intervals needs one global sort of every BEGIN and END by time,
and one nesting pass over all tracks, on one core: at 21 M records that serial work took
longer than encoding and deflating everything else.  A track's events only need to nest and
be in time order within the track, and the trace processor sorts the events of all
sequences into one timeline when it loads a file (its sorter merges sequences; the
writers' two-sequence traces have relied on that since the CTA slices moved to their own).
So the intervals are cut into pieces in the tree's order (launch or GPU, SM, CTA), about
``PIECE`` intervals each, between SM groups or inside one where every slot row with CTAs on
both sides has them strictly apart in time (``rows.piece_starts``): a unit track split
between pieces never has events of two pieces at one timestamp, so the order of one track's
events at equal timestamps is still the file order within one sequence (END before BEGIN),
and each piece is nested, sorted, encoded and deflated by one worker thread on its own; the
writer numbers unit tracks across pieces (``track_numbers``).  A piece's sequence clears its
state, interns the scope names it uses under the trace-wide ids (1 + the (kernel, scope)
pair's index in the metadata's ``names``), and has its own incremental clock.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proton_lite.trace import event_order_c, native_events, text_c
from proton_lite.trace._proto import WIRE_LEN, Rows, field_bytes, field_varint, tag, varint
from proton_lite.trace.nesting import _nesting, _unique
from proton_lite.trace.rows import unit_tracks_of
from proton_lite.trace.perfetto_fields import (ANNOTATION_NAMES, ANN_CYCLES, ANN_DEPTH, ANN_NOTE, BOOTTIME, CLK_ID,
                                               CLK_INCREMENTAL, CLK_TS, CLOCK_ID, CS_CLOCKS, DA_INT, DA_NAME_IID,
                                               DA_STRING_IID, ID_ANNOTATION_NAMES, ID_ANNOTATION_STRINGS,
                                               ID_EVENT_NAMES, P_CLOCK_SNAPSHOT, P_COMPRESSED, P_DEFAULTS, P_FLAGS,
                                               P_INTERNED, P_SEQ_ID, SEQ_INCREMENTAL_STATE_CLEARED, TE_ANNOTATIONS,
                                               TE_NAME_IID, TPD_CLOCK_ID, packet, slice_event_start)

# intervals per piece, about (cut where ``rows.piece_starts`` allows).  Each writer thread
# holds one piece's temporaries (~190 bytes an interval), and its heap keeps that much after;
# but each piece also makes its thread take the GIL back some hundred times, and on 16 threads
# the waits grow with the number of pieces (H200 host, 21.3 M records, 16 threads: the write
# 1.65-1.80 s at 2^15, 1.30-1.41 s at 2^16, 1.11-1.20 s at 2^17, for a stop peak of 3.2x, 3.3x
# and 4.1x its raw size; 85 M records: 5.1 s and 2.4-2.5x at 2^16, 4.4 s and 2.6-2.7x at 2^17).
# With the event order in C (``event_order_c``) 2^16 writes in 1.29-1.42 s, 2^15 1.35-1.44 s,
# for the same peak (the decode's batches in flight set it there)
PIECE = 1 << 16
CHUNK = 1 << 18  # events encoded at once (bounds the temporary byte matrices)
MAX_RAW_BATCH = 1 << 20  # bytes of packets per compressed_packets batch, before deflate


@dataclass
class IntervalColumns:
    """What the events of an interval need, trace-wide, indexed by interval (its track and
    name ids are numbered per piece: ``index_piece``)."""
    start: np.ndarray  # ns, before ``shift``
    end: np.ndarray
    depth: np.ndarray
    cycles: np.ndarray
    shift: int  # ns added to every time (trace timestamps are unsigned)
    note: np.ndarray | None = None  # per name iid: the iid of its scope's note in ``notes`` (0: none)
    notes: tuple[str, ...] = ()  # notes on scopes (passes/pipelining.py), string iid = index + 1


class Pieces:
    """The intervals in the tree's CTA order, cut about every ``PIECE`` intervals:
    ``len(pieces)`` pieces, ``pieces.sel(k)`` the intervals of piece k and ``pieces.cta(k)``
    their CTA ranks.

    Built from ``cta_group`` (each CTA's group) and ``runs`` (first interval of each run of
    one CTA's intervals, that CTA's rank in ``_cta_layout`` order: launch or GPU, SM, ...;
    ``n`` intervals), so ordering by CTA rank orders by group.  A profile's intervals come
    in runs of one CTA (the decoder and the reader write them so): then only the runs are
    sorted and cut here, and each piece lists its own intervals (``sel``, on its worker
    thread); otherwise a stable sort, one run per interval.  Pieces begin at a group's first
    CTA, and with ``piece_ok`` (``rows.piece_starts``, per CTA rank) also at a CTA inside a
    group (an SM group of the sm layout holds an SM's every interval: whole groups made
    pieces of n / 132 intervals, each a thread's temporaries).
    """

    def __init__(self, cta_group: np.ndarray, runs: tuple, n: int, piece_ok: np.ndarray | None = None):
        first, run_cta = runs
        first, run_cta = np.asarray(first, np.int64), np.asarray(run_cta, np.int64)
        by_cta = np.argsort(run_cta, kind="stable")
        sorted_cta = run_cta[by_cta]
        if len(sorted_cta) > 1 and np.any(sorted_cta[1:] == sorted_cta[:-1]):  # a CTA in several runs
            cta = np.repeat(run_cta, np.diff(np.r_[first, n]))  # each interval's (this case only)
            self.first = np.argsort(cta, kind="stable")
            sorted_cta = cta[self.first]
            self.lens = np.ones(n, np.int64)
        else:
            self.lens = np.diff(np.r_[first, n])[by_cta]
            self.first = first[by_cta]
        self.run_cta = sorted_cta  # each run's CTA, in the output's order
        self.run_at = np.r_[0, np.cumsum(self.lens)]  # where each run starts in the output; n at the end
        g = np.asarray(cta_group, np.int64)[sorted_cta]
        may_start = np.r_[True, g[1:] != g[:-1]] if len(g) else np.zeros(0, bool)  # a group's first run
        if piece_ok is not None and len(g) > 1:  # at a CTA's first run only
            may_start[1:] |= np.asarray(piece_ok, bool)[sorted_cta[1:]] & (sorted_cta[1:] != sorted_cta[:-1])
        starts = np.flatnonzero(may_start)
        piece_of_start = self.run_at[starts] // PIECE
        self.cut_run = np.r_[starts[np.r_[True, piece_of_start[1:] != piece_of_start[:-1]]] if len(g) else
                             np.zeros(0, np.int64), len(g)]

    def __len__(self) -> int:
        return len(self.cut_run) - 1

    @property
    def bounds(self) -> np.ndarray:
        """Where each piece starts in the output order, and its end."""
        return self.run_at[self.cut_run]

    def sel(self, k: int) -> np.ndarray:
        r0, r1 = int(self.cut_run[k]), int(self.cut_run[k + 1])
        lens, at = self.lens[r0:r1], self.run_at[r0:r1]
        return np.repeat(self.first[r0:r1] - at, lens) + np.arange(int(self.run_at[r0]), int(self.run_at[r1]))

    def cta(self, k: int) -> np.ndarray:
        """The CTA rank of each interval of ``sel(k)``, in its order."""
        r0, r1 = int(self.cut_run[k]), int(self.cut_run[k + 1])
        return np.repeat(self.run_cta[r0:r1], self.lens[r0:r1])


def track_numbers(piece_tracks: list, units: int, lanes: int, n_rows: int):
    """Unit tracks numbered across pieces (a track may lie in several: ``rows.piece_starts``).

    ``piece_tracks``: each piece's (rows, units, lanes) of its tracks.  Returns the columns
    (row, unit, lane) of the distinct tracks in order of first appearance (where no track
    spans pieces, the pieces' lists joined), and the number of each piece's track in them,
    the pieces' lists joined (a piece's track ``t`` is ``numbers[first + t]``)."""
    cols = [np.concatenate([np.asarray(t[j], np.int64) for t in piece_tracks]) if piece_tracks else
            np.zeros(0, np.int64) for j in range(3)]
    row, unit, lane = cols
    keys = (row * units + unit) * lanes + lane if n_rows * units * lanes < 1 << 62 else \
        (row << 32) | (unit << 16) | lane
    _, first_at, inv = np.unique(keys, return_index=True, return_inverse=True)
    by_first = np.argsort(first_at, kind="stable")
    number = np.empty(len(first_at), np.int64)
    number[by_first] = np.arange(len(first_at))
    keep = first_at[by_first]
    return (row[keep], unit[keep], lane[keep]), number[inv.reshape(-1)]


def piece_indexer(iv: np.ndarray, row_of_cta: np.ndarray, cta_lr: np.ndarray, k_of_lr: np.ndarray, n_kernels: int,
                  n_rows: int):
    """``index_piece`` for the pieces of both writers: (a function of a piece's intervals and
    their CTA ranks, the scope ids' bound ``n_scopes``).  ``row_of_cta``: each CTA's slot
    row, ``cta_lr`` its launch rank, ``k_of_lr`` each launch rank's kernel; a (kernel, scope)
    pair's key is ``kernel * n_scopes + scope``."""
    n_iv = len(iv)
    n_scopes = int(iv["scope"].max()) + 1 if n_iv else 1
    units = int(iv["unit"].max()) + 1 if n_iv else 1
    lanes = int(iv["lane"].max()) + 1 if n_iv else 1

    def native_keys(sel, cta):  # both keys of a piece in one pass in C, where the extension is built
        if native_events.module() is None:
            return None
        return native_events.index_keys(sel, cta, row_of_cta, cta_lr, k_of_lr, iv, units, lanes, n_scopes)

    def pair_key(sel, cta):
        return k_of_lr[cta_lr[cta]] * n_scopes + iv["scope"][sel].astype(np.int64)

    def index(sel, cta):
        """A piece's unit tracks and (kernel, scope) pairs, each interval's index in both."""
        return index_piece(sel, cta, row_of_cta, iv["unit"], iv["lane"], units, lanes, n_rows, pair_key,
                           n_pairs=n_kernels * n_scopes, native_keys=native_keys)
    index.units, index.lanes = units, lanes
    return index, n_scopes


def number_pieces(cut: "Pieces", piece_index, run, n_rows: int):
    """Phase one of both writers, every piece's ``piece_index`` on the workers (``run``
    submits a task): (where each piece's tracks begin in the joined lists, the trace's unit
    tracks (row, unit, lane), each piece track's number among them, the sorted (kernel,
    scope) pair keys).  A piece's per-interval lists are made again when its events are (12
    bytes an interval, kept for every piece until then, were 0.4-0.8x a capture's raw size)."""
    def trace_wide(k: int):
        (rows, units_of, lanes_of, _), pairs, _ = piece_index(cut.sel(k), cut.cta(k))
        return (rows, units_of, lanes_of), pairs
    index = [f.result() for f in [run(lambda k=k: trace_wide(k)) for k in range(len(cut))]]
    ut_first = np.cumsum([0] + [len(ut[0]) for ut, _ in index])
    unit_list, ut_number = track_numbers([ut for ut, _ in index], piece_index.units, piece_index.lanes, n_rows)
    pair_keys = np.unique(np.concatenate([p for _, p in index])) if index else np.zeros(0, np.int64)
    return ut_first, unit_list, ut_number, pair_keys


def index_piece(sel: np.ndarray, cta: np.ndarray, row_of_cta, unit, lane, units: int, lanes: int, n_rows: int,
                pair_key, n_pairs: int | None = None, native_keys=None):
    """Phase one of a piece (its intervals ``sel``, their CTA ranks ``cta``), on a worker: its
    unit tracks (sorted (row, unit, lane), each interval's index among them) and its (kernel, scope) pairs
    (sorted, each interval's index); the writer numbers both trace-wide from all pieces'
    results.  ``n_pairs``: a bound on the pair keys (a table instead of a sort);
    ``native_keys(sel, cta)``: both keys from the C extension (or None), then numbered in C too;
    ``pair_key(sel, cta)`` otherwise."""
    got = native_keys(sel, cta) if native_keys is not None and n_pairs is not None else None
    if got is not None:
        tracks = native_events.dense_unique(got[0], n_rows * units * lanes)
        pairs = native_events.dense_unique(got[1], n_pairs)
        if tracks is not None and pairs is not None:
            keys, inv = tracks
            return (keys // (units * lanes), (keys // lanes) % units, keys % lanes, inv), pairs[0], pairs[1]
    ut = unit_tracks_of(row_of_cta[cta], unit[sel], lane[sel], units, lanes, n_rows)
    keys = pair_key(sel, cta)
    if n_pairs is not None:
        pairs, pair_inv = _unique(keys, n_pairs)
    else:
        pairs, pair_inv = np.unique(keys, return_inverse=True)
    return ut, pairs, pair_inv.reshape(-1)


def encode_piece(seq_id: int, sel: np.ndarray, cols: IntervalColumns, event_names: list[str], compress: bool,
                 where, track: np.ndarray, iid: np.ndarray) -> tuple[bytes, int]:
    """The packets of the intervals ``sel`` as sequence ``seq_id``: (bytes, annotation bytes
    before deflate).  ``where(i)`` names interval ``i``'s track for errors; ``track``/``iid``:
    the unit track uuid and name id of each interval of ``sel``."""
    track = np.asarray(track, np.int64)
    start = cols.start[sel].astype(np.int64, copy=False) + cols.shift  # the gathers are copies already
    end = cols.end[sel].astype(np.int64, copy=False) + cols.shift
    depth = cols.depth[sel].astype(np.int64)
    iid = np.asarray(iid, np.int64)
    cycles = cols.cycles[sel].astype(np.int64, copy=False)
    ordered = event_order_c.piece_events(track, start, end, depth, lambda i: where(int(sel[i])))
    if ordered is not None:  # one call without the GIL (16 threads waited on it between numpy's)
        ev, dts, nest = ordered
    else:
        seq_order, ev_time, nest = _nesting(track, start, end, depth, lambda i: where(int(sel[i])))
        ev, dts = time_order(seq_order, ev_time)
    n = len(sel)
    ev_end = ev >= n
    ev_i = ev - np.where(ev_end, n, 0)
    fix_depth = depth != nest  # only on lanes > 0: the track nests them differently
    used = np.flatnonzero(np.bincount(iid, minlength=len(event_names) + 1))
    note = cols.note[iid] if cols.note is not None else np.zeros(len(iid), np.int64)
    notes_used = {int(k): cols.notes[k - 1] for k in np.unique(note[note > 0]).tolist()}
    named = event_names.messages(tag(ID_EVENT_NAMES, WIRE_LEN), used) if isinstance(event_names, text_c.NameTable) \
        else None  # (a trace's names laid out once: one C call a piece)
    parts = [sequence_start(seq_id, named if named is not None else {int(i): event_names[i - 1] for i in used.tolist()},
                            notes_used)]
    arg_bytes = 0
    native = native_events.module() is not None
    for lo in range(0, len(ev), CHUNK):
        s = slice(lo, lo + CHUNK)
        if native:  # the same bytes, without the GIL
            data, ab = native_events.encode(seq_id, ev_i[s], ev_end[s], dts[s], track, iid, cycles, depth, fix_depth,
                                            note, compress, MAX_RAW_BATCH)
        else:
            rows, ab = event_rows(seq_id, ev_i[s], ev_end[s], dts[s], track, iid, cycles, depth, fix_depth, note)
            data = finish(rows, compress)
        parts.append(data)
        arg_bytes += ab
    return b"".join(parts), arg_bytes


def time_order(seq_order: np.ndarray, ev_time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Events by time, ties in ``seq_order`` order (per track nesting); returns (events, deltas)."""
    ts = ev_time[seq_order]
    n = len(seq_order)
    bits = max(n.bit_length(), 1)
    if n and int(ts.max()).bit_length() + bits > 63:
        pos = np.lexsort((np.arange(n), ts))
    else:
        pos = np.sort((ts << bits) | np.arange(n, dtype=np.int64)) & ((1 << bits) - 1)
    return seq_order[pos], np.diff(ts[pos], prepend=np.int64(0))


def finish(rows: Rows, compress: bool) -> bytes:
    """The rows' packets, or (compress) deflated into ``compressed_packets`` batches.

    The trace processor inflates field 50 and reads the packets inside as if they stood
    in the file; batches of <= 1 MiB of packets keep each one far below the 512 KiB
    compressed size Perfetto's own writers use.
    """
    data = rows.tobytes()
    if not compress or not data:
        return data
    return deflated(data, np.cumsum(rows.row_lengths()))


def deflated(data: bytes, ends: np.ndarray) -> bytes:
    """Packets ``data`` (each ending at an offset in ``ends``) deflated into
    ``compressed_packets`` batches of whole packets, at most MAX_RAW_BATCH bytes each (a
    packet larger than that alone)."""
    out, lo = [], 0
    while lo < len(data):
        hi = int(ends[np.searchsorted(ends, lo + MAX_RAW_BATCH, side="right") - 1])
        hi = hi if hi > lo else int(ends[np.searchsorted(ends, lo, side="right")])
        out.append(packet(field_bytes(P_COMPRESSED, native_events.deflate(data[lo:hi]))))
        lo = hi
    return b"".join(out)


def interned_strings(field: int, items) -> bytes:
    """``field`` messages {1: iid, 2: name} for each (iid, name): the same bytes as
    ``field_bytes(field, field_varint(1, iid) + field_bytes(2, name))``, without its three calls
    and six varints per name (a sm layout's CTA sequence interns a name per launch: 65 K
    launches took 0.47 s that way)."""
    head, out = tag(field, WIRE_LEN), bytearray()
    items = list(items)
    fast = text_c.interned_names(head, items)  # (one C call where there are many: 65 K names, 0.2 s -> 0.01 s)
    if fast is not None:
        return fast
    for i, n in items:
        b = n.encode() if isinstance(n, str) else n
        iid = bytes((i, )) if i < 0x80 else bytes((i & 0x7F | 0x80, i >> 7)) if i < 0x4000 else varint(i)
        inner = b"\x08" + iid + b"\x12" + (bytes((len(b), )) if len(b) < 0x80 else varint(len(b))) + b
        out += head
        out += bytes((len(inner), )) if len(inner) < 0x80 else varint(len(inner))
        out += inner
    return bytes(out)


def sequence_start(seq_id: int, event_names: dict[int, str] | bytes, notes: dict[int, str] | None = None) -> bytes:
    """First packets of a sequence: cleared state, interned names (iid -> name, or their
    messages laid out already: ``text_c.NameTable``) and note strings, defaults, the clock (64,
    incremental; its 0 is BOOTTIME 0)."""
    interned = bytes(event_names) if isinstance(event_names, (bytes, bytearray)) else \
        interned_strings(ID_EVENT_NAMES, sorted(event_names.items()))
    interned += interned_strings(ID_ANNOTATION_NAMES, ANNOTATION_NAMES.items())
    interned += interned_strings(ID_ANNOTATION_STRINGS, sorted((notes or {}).items()))
    seq = field_varint(P_SEQ_ID, seq_id)
    clocks = (field_bytes(CS_CLOCKS, field_varint(CLK_ID, CLOCK_ID) + field_varint(CLK_TS, 0) +
                          field_varint(CLK_INCREMENTAL, 1)) +
              field_bytes(CS_CLOCKS, field_varint(CLK_ID, BOOTTIME) + field_varint(CLK_TS, 0)))
    return (packet(seq, field_varint(P_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED), field_bytes(P_INTERNED, interned),
                   field_bytes(P_DEFAULTS, field_varint(TPD_CLOCK_ID, CLOCK_ID))) +
            packet(seq, field_bytes(P_CLOCK_SNAPSHOT, clocks)))


def event_rows(seq_id: int, ev_i, ev_end, dts, track, iid, cycles, depth, fix_depth, note=None) -> tuple[Rows, int]:
    """BEGIN/END TrackEvent packets for one batch of events; returns (rows, annotation bytes).

    Annotations: an END's ``cycles``; a BEGIN's ``note`` (its scope's note, interned string)
    and then its ``depth`` where the track nests it differently (the reader keeps the last
    annotation of an event, so ``depth`` goes last)."""
    begin = ~ev_end
    ann = ev_end | (begin & fix_depth[ev_i])
    noted = begin & ((note[ev_i] > 0) if note is not None else np.zeros(len(ev_i), bool))
    r = Rows(len(ev_i))
    plen, p0, tlen, t0 = slice_event_start(r, seq_id, dts, ev_end, track[ev_i])
    r.const(tag(TE_NAME_IID, 0), begin)
    r.varint(iid[ev_i], begin)
    a_start = r.mark()
    if noted.any():
        r.const(tag(TE_ANNOTATIONS, 2), noted)
        nlen = r.placeholder()
        n0 = r.mark()
        r.const(field_varint(DA_NAME_IID, ANN_NOTE) + tag(DA_STRING_IID, 0), noted)
        r.varint(note[ev_i], noted)
        r.set_length(nlen, r.length_since(n0), noted)
    r.const(tag(TE_ANNOTATIONS, 2), ann)
    alen = r.placeholder()
    a0 = r.mark()
    r.const(tag(DA_NAME_IID, 0), ann)
    r.column(np.where(ev_end, ANN_CYCLES, ANN_DEPTH).astype(np.uint8), ann)
    r.const(tag(DA_INT, 0), ann)
    r.varint(np.where(ev_end, cycles[ev_i], depth[ev_i]), ann)
    r.set_length(alen, r.length_since(a0), ann)
    ann_bytes = int(r.length_since(a_start).sum())
    r.set_length(tlen, r.length_since(t0))
    r.set_length(plen, r.length_since(p0))
    return r, ann_bytes
