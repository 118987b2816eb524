"""``NAME.pftrace``: Perfetto's native TrackEvent protobuf, written from numpy arrays.

Why written by hand: the ``perfetto`` package's builders cost ~4 us per packet; here the
packets are laid out column by column (``_proto.Rows``), in worker threads.

Size: the BEGIN/END packets of a slice take ~37 bytes with its ``cycles`` arg (~30
without); track descriptors add ~27 bytes per track.  By default packets go out in
deflated ``compressed_packets`` batches, which the trace processor inflates natively
(``compress=False`` for plain).

Layout: launch > SM > slot > unit tracks, see ``perfetto_tree`` (and ``rows`` for the
slots).  Stream: [metadata packet, field META_FIELD, the ``_metadata`` JSON] [track
descriptors] [the heads of sequence 1 (the intervals) and 2 (the CTA slices), each
SEQ_INCREMENTAL_STATE_CLEARED + interned names + TracePacketDefaults (timestamp_clock_id
= 64) + a ClockSnapshot: clock 64 is incremental, 0 = BOOTTIME 0] [sequence 2's events]
[sequence 1's events].  Each sequence's events are in time order, each with a timestamp
delta and a track_uuid; an interval's BEGIN has an interned name and its END a ``cycles``
debug annotation, merged into the slice's args.  A ``depth`` annotation appears only
where the track nesting differs from the recorded depth (lanes > 0).  Field numbers:
``perfetto_fields``.
"""
from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from proton_lite.profile_data import Profile
from proton_lite.trace import (_cta_extras, _cta_layout, _meta_json, _metadata, _nesting, _ordered, _scope_names,
                               _sorted_launches, _time_shift, _unique, _workers)
from proton_lite.trace._proto import Rows, field_bytes, field_varint, tag
from proton_lite.trace.perfetto_fields import (ANN_CYCLES, ANN_DEPTH, ANNOTATION_NAMES, BOOTTIME, CLK_ID,
                                               CLK_INCREMENTAL, CLK_TS, CLOCK_ID, CS_CLOCKS, DA_INT, DA_NAME_IID,
                                               ID_ANNOTATION_NAMES, ID_EVENT_NAMES, META_FIELD, P_CLOCK_SNAPSHOT,
                                               P_COMPRESSED, P_DEFAULTS, P_FLAGS, P_INTERNED, P_SEQ_ID, P_TIMESTAMP,
                                               P_TRACK_EVENT, SEQ_CTAS, SEQ_ID, SEQ_INCREMENTAL_STATE_CLEARED,
                                               TE_ANNOTATIONS, TE_NAME_IID, TE_TRACK_UUID, TE_TYPE, TPD_CLOCK_ID,
                                               TYPE_SLICE_BEGIN, TYPE_SLICE_END, packet)
from proton_lite.trace.perfetto_tree import CtaEvents, Tracks
from proton_lite.trace.rows import slot_layout

CHUNK = 1 << 18  # rows encoded per task (bounds the temporary byte matrices)
MAX_RAW_BATCH = 1 << 20  # bytes of packets per compressed_packets batch, before deflate


def _finish(rows: Rows, compress: bool) -> bytes:
    """The rows' packets, or (compress) deflated into ``compressed_packets`` batches.

    The trace processor inflates field 50 and reads the packets inside as if they stood
    in the file; batches of <= 1 MiB of packets keep each one far below the 512 KiB
    compressed size Perfetto's own writers use.
    """
    data = rows.tobytes()
    if not compress or not data:
        return data
    ends = np.cumsum(rows.row_lengths())
    out, lo = [], 0
    while lo < len(data):
        hi = int(ends[np.searchsorted(ends, lo + MAX_RAW_BATCH, side="right") - 1])
        hi = hi if hi > lo else int(ends[np.searchsorted(ends, lo, side="right")])
        out.append(packet(field_bytes(P_COMPRESSED, zlib.compress(data[lo:hi], 1))))
        lo = hi
    return b"".join(out)


def _time_order(seq_order: np.ndarray, ev_time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Events by time, ties in ``seq_order`` order (per track nesting); returns (events, deltas)."""
    ts = ev_time[seq_order]
    n = len(seq_order)
    bits = max(n.bit_length(), 1)
    if n and int(ts.max()).bit_length() + bits > 63:
        pos = np.lexsort((np.arange(n), ts))
    else:
        pos = np.sort((ts << bits) | np.arange(n, dtype=np.int64)) & ((1 << bits) - 1)
    return seq_order[pos], np.diff(ts[pos], prepend=np.int64(0))


def write_perfetto(profile: Profile, path: str | Path, compress: bool = True, workers: int | None = None,
                   progress=None) -> dict:
    """Write ``profile`` as a .pftrace; ``compress`` deflates packet batches (~5x smaller);
    ``progress(done, total)`` is called as batches of events are written.

    Track descriptors are encoded in worker threads while the events are being ordered;
    the bytes do not depend on ``workers``.
    """
    launches = _sorted_launches(profile)
    shift = _time_shift(profile)
    ctas, cta_lr, iv_cta = _cta_layout(profile, launches)
    iv = profile.intervals
    n_iv, n_cta = len(iv), len(ctas)
    workers = _workers() if workers is None else workers
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    run = pool.submit if pool else (lambda f: _Done(f()))
    try:
        lay = slot_layout(profile, ctas, cta_lr, iv_cta)
        tracks = Tracks(profile, launches, ctas, cta_lr, lay, compress, _finish)
        descriptors = [run(t) for t in tracks.tasks]
        cta_events = run(lambda: CtaEvents(launches, ctas, cta_lr, lay, tracks, shift))  # beside the sorting below

        # interval slices; names interned per (kernel, scope)
        iv_kernel = launches["kernel"].astype(np.int64)[cta_lr[iv_cta]] if n_iv else np.zeros(0, np.int64)
        n_scopes = int(iv["scope"].max()) + 1 if n_iv else 1
        pair_keys, pair_idx = _unique(iv_kernel * n_scopes + iv["scope"], len(profile.kernels) * n_scopes)
        names = [[int(k // n_scopes), int(k % n_scopes)] for k in pair_keys.tolist()]
        event_names = [_scope_names(profile.kernels[k], s)[s] for k, s in names]
        track = tracks.iv_uuid.astype(np.int64)
        start = iv["start_ns"].astype(np.int64) + shift
        end = iv["end_ns"].astype(np.int64) + shift
        depth = iv["depth"].astype(np.int64)
        iid = pair_idx + 1
        cycles = iv["cycles"].astype(np.int64)

        def where(i: int) -> str:
            return (f"launch {int(iv['launch'][i])} CTA {int(iv['cta'][i])} unit {int(iv['unit'][i])} "
                    f"lane {int(iv['lane'][i])}")
        seq_order, ev_time, nest = _nesting(track, start, end, depth, where)
        ev, dts = _time_order(seq_order, ev_time)
        ev_end = ev >= n_iv
        ev_i = ev - np.where(ev_end, n_iv, 0)
        fix_depth = depth != nest  # only on lanes > 0: the track nests them differently

        meta = _metadata(profile, launches, shift, names=names, ctas=_cta_extras(ctas, lay.extent_lo))
        arg_bytes = [0]

        def event_task(sel: slice):
            def encode() -> bytes:
                rows, ab = _event_rows(ev_i[sel], ev_end[sel], dts[sel], track, iid, cycles, depth, fix_depth)
                arg_bytes.append(ab)
                return _finish(rows, compress)
            return encode

        def cta_task(sel: slice):
            return lambda: _finish(cta_events.result().rows(sel), compress)

        sizes = {"head": 0, "descriptors": 0, "events": 0}
        with open(path, "wb") as f:
            def put(kind: str, data: bytes) -> None:
                f.write(data)
                sizes[kind] += len(data)
            put("head", packet(field_bytes(META_FIELD, _meta_json(meta))))
            for d in descriptors:
                put("descriptors", d.result())
            put("head", _sequence_start(SEQ_ID, event_names) + _sequence_start(SEQ_CTAS, []))
            chunks = [cta_task(slice(lo, lo + CHUNK)) for lo in range(0, 2 * n_cta, CHUNK)]
            chunks += [event_task(slice(lo, lo + CHUNK)) for lo in range(0, len(ev), CHUNK)]
            for done, data in enumerate(_ordered(run, chunks, 2 * workers), start=1):
                put("events", data)
                if progress is not None:
                    progress(done, len(chunks))
        n_samples = cta_events.result().n_samples
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    total = sum(sizes.values())
    n_slices = n_iv + n_cta
    return {"format": "perfetto", "path": str(path), "bytes": total, "slices": n_slices, "compressed": compress,
            "tracks": tracks.count, "slots": lay.n_rows, "events": 2 * n_slices,
            "counter_samples": n_samples, "descriptor_bytes": sizes["descriptors"],
            "event_bytes": sizes["events"], "arg_bytes_uncompressed": sum(arg_bytes),
            "bytes_per_slice": total / n_slices if n_slices else 0.0}


class _Done:
    """A finished computation with the ``result()`` of a future (no thread pool)."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def _sequence_start(seq_id: int, event_names: list[str]) -> bytes:
    """First packets of a sequence: cleared state, interned names, defaults, the clock."""
    interned = b"".join(field_bytes(ID_EVENT_NAMES, field_varint(1, i + 1) + field_bytes(2, n))
                        for i, n in enumerate(event_names))
    interned += b"".join(field_bytes(ID_ANNOTATION_NAMES, field_varint(1, k) + field_bytes(2, v))
                         for k, v in ANNOTATION_NAMES.items())
    seq = field_varint(P_SEQ_ID, seq_id)
    clocks = (field_bytes(CS_CLOCKS, field_varint(CLK_ID, CLOCK_ID) + field_varint(CLK_TS, 0) +
                          field_varint(CLK_INCREMENTAL, 1)) +
              field_bytes(CS_CLOCKS, field_varint(CLK_ID, BOOTTIME) + field_varint(CLK_TS, 0)))
    return (packet(seq, field_varint(P_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED), field_bytes(P_INTERNED, interned),
                    field_bytes(P_DEFAULTS, field_varint(TPD_CLOCK_ID, CLOCK_ID))) +
            packet(seq, field_bytes(P_CLOCK_SNAPSHOT, clocks)))


def _event_rows(ev_i, ev_end, dts, track, iid, cycles, depth, fix_depth) -> tuple[Rows, int]:
    """BEGIN/END TrackEvent packets for one batch of events; returns (rows, annotation bytes)."""
    begin = ~ev_end
    ann = ev_end | (begin & fix_depth[ev_i])
    r = Rows(len(ev_i))
    r.const(b"\x0a")
    plen = r.placeholder()
    p0 = r.mark()
    r.const(tag(P_TIMESTAMP, 0))
    r.varint(dts)
    r.const(field_varint(P_SEQ_ID, SEQ_ID) + tag(P_TRACK_EVENT, 2))
    tlen = r.placeholder()
    t0 = r.mark()
    r.const(tag(TE_TYPE, 0))
    r.column(np.where(ev_end, TYPE_SLICE_END, TYPE_SLICE_BEGIN).astype(np.uint8))
    r.const(tag(TE_TRACK_UUID, 0))
    r.varint(track[ev_i])
    r.const(tag(TE_NAME_IID, 0), begin)
    r.varint(iid[ev_i], begin)
    a_start = r.mark()
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
