"""``NAME.pftrace``: Perfetto's native TrackEvent protobuf, written from numpy arrays.

Why written by hand: the ``perfetto`` package's builders cost ~4 us per packet; here the
packets are laid out column by column (``_proto.Rows``), in worker threads.

Size: the BEGIN/END packets of a slice take ~37 bytes with its ``cycles`` arg (~30
without); track descriptors add ~27 bytes per track, which dominates when tracks hold few
slices (2 scopes per warp: ~52 B/slice in all).  So by default packets go out in
deflated ``compressed_packets`` batches, which the trace processor inflates natively:
~13 B/slice for that shape, ~6 with many scopes per warp (``compress=False`` for plain).

Layout (same tree as the Chrome JSON): one track per launch (``_launch_title``) > one per
SM > one per CTA (holding a CTA-lifetime slice) > one per unit and lane.  Tracks carry
their identity in ``sibling_order_rank`` (launch index, SM id, CTA id, unit << 16 | lane),
which also orders them (``child_ordering = EXPLICIT``); ``sibling_merge_behavior = NONE``.

Stream: [metadata packet, field META_FIELD, the ``_metadata`` JSON] [track descriptors]
[sequence 1: SEQ_INCREMENTAL_STATE_CLEARED + interned names + TracePacketDefaults
(timestamp_clock_id = 64)] [ClockSnapshot: clock 64 is incremental, 0 = BOOTTIME 0]
[BEGIN/END packets in time order, each with a timestamp delta, track_uuid, and on BEGIN
an interned name; on END a ``cycles`` debug annotation, merged into the slice's args].
A ``depth`` annotation appears only where the track nesting differs from the recorded
depth (lanes > 0).  Field numbers are from Perfetto's protos (trace_packet.proto,
track_event.proto, track_descriptor.proto, interned_data.proto, clock_snapshot.proto),
checked against the descriptors in the ``perfetto`` package.
"""
from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from proton_lite.profile_data import Profile
from proton_lite.trace import (_cta_extras, _cta_layout, _cta_name, _launch_title, _meta_json, _metadata, _nesting,
                               _ordered, _scope_names, _several_devices, _sorted_launches, _time_shift, _unique,
                               _unit_tracks, _workers)
from proton_lite.trace._proto import Rows, field_bytes, field_varint, tag

META_FIELD = 9001  # outside Perfetto's own fields (< 1000) and its extension range (1000-1999): skipped
SEQ_ID = 1
CLOCK_ID = 64  # first sequence-scoped clock id
BOOTTIME = 6
CTA_SLICE_NAME = "CTA"
CHUNK = 1 << 18  # rows encoded per task (bounds the temporary byte matrices)
MAX_RAW_BATCH = 1 << 20  # bytes of packets per compressed_packets batch, before deflate

# TracePacket
P_CLOCK_SNAPSHOT, P_TIMESTAMP, P_SEQ_ID, P_TRACK_EVENT, P_INTERNED, P_FLAGS = 6, 8, 10, 11, 12, 13
P_COMPRESSED, P_DEFAULTS, P_TRACK_DESCRIPTOR = 50, 59, 60
SEQ_INCREMENTAL_STATE_CLEARED = 1
# TrackEvent, DebugAnnotation, InternedData, TracePacketDefaults, ClockSnapshot
TE_ANNOTATIONS, TE_TYPE, TE_NAME_IID, TE_TRACK_UUID = 4, 9, 10, 11
TYPE_SLICE_BEGIN, TYPE_SLICE_END = 1, 2
DA_NAME_IID, DA_INT = 1, 4
ID_EVENT_NAMES, ID_ANNOTATION_NAMES = 2, 3
TPD_CLOCK_ID = 58
CS_CLOCKS, CLK_ID, CLK_TS, CLK_INCREMENTAL = 1, 1, 2, 3
ANN_CYCLES, ANN_DEPTH = 1, 2
ANNOTATION_NAMES = {ANN_CYCLES: "cycles", ANN_DEPTH: "depth"}
# TrackDescriptor
TD_UUID, TD_NAME, TD_PARENT, TD_CHILD_ORDERING, TD_RANK, TD_MERGE = 1, 2, 5, 11, 12, 15
CHILD_ORDERING_EXPLICIT, SIBLING_MERGE_NONE = 3, 2


def _packet(*parts: bytes) -> bytes:
    return field_bytes(1, b"".join(parts))


def _descriptor(uuid: int, name: str, parent: int | None, rank: int, has_children: bool) -> bytes:
    d = field_varint(TD_UUID, uuid) + field_bytes(TD_NAME, name)
    if parent is not None:
        d += field_varint(TD_PARENT, parent)
    if has_children:
        d += field_varint(TD_CHILD_ORDERING, CHILD_ORDERING_EXPLICIT)
    d += field_varint(TD_RANK, int(np.int32(np.uint32(rank & 0xFFFFFFFF)))) + field_varint(TD_MERGE, SIBLING_MERGE_NONE)
    return _packet(field_bytes(P_TRACK_DESCRIPTOR, d))


def _descriptor_rows(uuid, parent, rank, name_fill, has_children: bool) -> Rows:
    """TrackDescriptor packets for many tracks; ``name_fill(rows, sel)`` adds the name bytes."""
    r = Rows(len(uuid))
    r.const(b"\x0a")
    plen = r.placeholder()
    p0 = r.mark()
    r.const(tag(P_TRACK_DESCRIPTOR, 2))
    dlen = r.placeholder()
    d0 = r.mark()
    r.const(tag(TD_UUID, 0))
    r.varint(uuid)
    r.const(tag(TD_NAME, 2))
    nlen = r.placeholder()
    n0 = r.mark()
    name_fill(r)
    r.set_length(nlen, r.length_since(n0))
    r.const(tag(TD_PARENT, 0))
    r.varint(parent)
    if has_children:
        r.const(field_varint(TD_CHILD_ORDERING, CHILD_ORDERING_EXPLICIT))
    r.const(tag(TD_RANK, 0))
    r.varint(np.asarray(rank, np.int64).astype(np.uint32).view(np.int32).astype(np.int64))
    r.const(field_varint(TD_MERGE, SIBLING_MERGE_NONE))
    r.set_length(dlen, r.length_since(d0))
    r.set_length(plen, r.length_since(p0))
    return r


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
        out.append(_packet(field_bytes(P_COMPRESSED, zlib.compress(data[lo:hi], 1))))
        lo = hi
    return b"".join(out)


def _track_tasks(profile: Profile, launches, ctas, cta_lr, iv_cta, compress: bool):
    """Track uuids and the tasks that encode their descriptors.

    uuids: unit/lane tracks first (1..U, the smallest varints: most events refer to
    them), then CTAs, SMs, launches.  Returns (interval track uuid, CTA track uuids,
    number of tracks, list of callables returning descriptor packet bytes).
    """
    kernels = profile.kernels
    k_of_launch = launches["kernel"].astype(np.int64)
    ut_cta, ut_unit, ut_lane, iv_track = _unit_tracks(profile, iv_cta, len(ctas))
    n_units = len(ut_cta)
    ut_rank = (ut_unit << 16) | ut_lane
    cta_uuid0 = n_units + 1
    new_sm = np.ones(len(ctas), bool)
    new_sm[1:] = (cta_lr[1:] != cta_lr[:-1]) | (ctas["smid"][1:] != ctas["smid"][:-1])
    sm_first = np.flatnonzero(new_sm)
    cta_sm = np.cumsum(new_sm) - 1  # SM track index of each CTA
    sm_uuid0 = cta_uuid0 + len(ctas)
    launch_uuid0 = sm_uuid0 + len(sm_first)
    sm_id = ctas["smid"][sm_first].astype(np.int64)
    sm_parent = launch_uuid0 + cta_lr[sm_first]

    show_device = _several_devices(launches)

    def launch_rows() -> bytes:
        return b"".join(_descriptor(launch_uuid0 + i, _launch_title(kernels[int(la["kernel"])], la, show_device),
                                    None, int(la["launch"]), True) for i, la in enumerate(launches))

    def sm_rows(sel: slice) -> bytes:  # not deflated: few, and they go out with the launches'
        def name(r: Rows) -> None:
            r.const(b"SM ")
            r.decimal(sm_id[sel])
        return _finish(_descriptor_rows(sm_uuid0 + np.arange(len(sm_first))[sel], sm_parent[sel], sm_id[sel], name,
                                        True), False)
    cid = ctas["cta"].astype(np.int64)
    grid = np.maximum(np.stack([launches["grid_x"], launches["grid_y"], launches["grid_z"]], 1).astype(np.int64), 1)
    gx, gy, gz = (grid[cta_lr, k] for k in range(3))

    def cta_rows(sel: slice) -> bytes:
        c, x, y = cid[sel], gx[sel], gy[sel]
        m = y * gz[sel] > 1

        def name(r: Rows) -> None:
            _cta_name(r, c, x, y, m)
        return _finish(_descriptor_rows(cta_uuid0 + np.arange(len(ctas))[sel], sm_uuid0 + cta_sm[sel], c, name,
                                        True), compress)

    gran = np.array([{"warp": 0, "warpgroup": 1, "cta": 2}[k.granularity] for k in kernels] or [0], np.int64)
    ut_gran = gran[k_of_launch[cta_lr[ut_cta]]] if n_units else np.zeros(0, np.int64)
    name_keys, name_idx = np.unique((ut_gran << 32) | ut_rank, return_inverse=True)
    unit_names = []
    for k in name_keys.tolist():
        g, u, lane = k >> 32, (k >> 16) & 0xFFFF, k & 0xFFFF
        name = ("warp {}", "warpgroup {}", "cta")[g].format(u) + (f" lane {lane}" if lane else "")
        unit_names.append(name.encode())

    def unit_rows(sel: slice) -> bytes:
        return _finish(_descriptor_rows(np.arange(1, n_units + 1)[sel], cta_uuid0 + ut_cta[sel], ut_rank[sel],
                                        lambda r: r.table(unit_names, name_idx[sel]), False), compress)

    tasks = [launch_rows]
    tasks += [lambda sel=slice(lo, lo + CHUNK): sm_rows(sel) for lo in range(0, len(sm_first), CHUNK)]
    tasks += [lambda sel=slice(lo, lo + CHUNK): cta_rows(sel) for lo in range(0, len(ctas), CHUNK)]
    tasks += [lambda sel=slice(lo, lo + CHUNK): unit_rows(sel) for lo in range(0, n_units, CHUNK)]
    n_tracks = n_units + len(ctas) + len(sm_first) + len(launches)
    return iv_track + 1, cta_uuid0 + np.arange(len(ctas)), n_tracks, tasks


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
        iv_uuid, cta_uuid, n_tracks, track_tasks = _track_tasks(profile, launches, ctas, cta_lr, iv_cta, compress)
        descriptors = [run(t) for t in track_tasks]

        # slices: intervals, then CTA lifetimes; names interned per (kernel, scope)
        iv_kernel = launches["kernel"].astype(np.int64)[cta_lr[iv_cta]] if n_iv else np.zeros(0, np.int64)
        n_scopes = int(iv["scope"].max()) + 1 if n_iv else 1
        pair_keys, pair_idx = _unique(iv_kernel * n_scopes + iv["scope"], len(profile.kernels) * n_scopes)
        names = [[int(k // n_scopes), int(k % n_scopes)] for k in pair_keys.tolist()]
        event_names = [CTA_SLICE_NAME] + [_scope_names(profile.kernels[k], s)[s] for k, s in names]
        track = np.concatenate([iv_uuid, cta_uuid]).astype(np.int64)
        start = np.concatenate([iv["start_ns"], ctas["start_ns"]]).astype(np.int64) + shift
        end = np.concatenate([iv["end_ns"], ctas["end_ns"]]).astype(np.int64) + shift
        depth = np.concatenate([iv["depth"], np.zeros(n_cta, np.uint16)]).astype(np.int64)
        iid = np.concatenate([pair_idx + 2, np.ones(n_cta, np.int64)])
        cta_cycles = (ctas["end_clock"] - ctas["start_clock"]).view(np.int64)
        cycles = np.concatenate([iv["cycles"].astype(np.int64), cta_cycles])

        def where(i: int) -> str:
            if i >= n_iv:
                return f"launch {int(ctas['launch'][i - n_iv])} CTA {int(ctas['cta'][i - n_iv])}"
            return (f"launch {int(iv['launch'][i])} CTA {int(iv['cta'][i])} unit {int(iv['unit'][i])} "
                    f"lane {int(iv['lane'][i])}")
        seq_order, ev_time, nest = _nesting(track, start, end, depth, where)
        ev, dts = _time_order(seq_order, ev_time)
        ev_end = ev >= len(start)
        ev_i = ev - np.where(ev_end, len(start), 0)
        fix_depth = depth != nest  # only on lanes > 0: the track nests them differently

        meta = _metadata(profile, launches, shift, names=names, cta_slice_name=CTA_SLICE_NAME,
                         ctas=_cta_extras(ctas))
        arg_bytes = [0]

        def event_task(sel: slice):
            def encode() -> bytes:
                rows, ab = _event_rows(ev_i[sel], ev_end[sel], dts[sel], track, iid, cycles, depth, fix_depth)
                arg_bytes.append(ab)
                return _finish(rows, compress)
            return encode

        sizes = {"head": 0, "descriptors": 0, "events": 0}
        with open(path, "wb") as f:
            def put(kind: str, data: bytes) -> None:
                f.write(data)
                sizes[kind] += len(data)
            put("head", _packet(field_bytes(META_FIELD, _meta_json(meta))))
            for d in descriptors:
                put("descriptors", d.result())
            put("head", _sequence_start(event_names))
            chunks = (event_task(slice(lo, lo + CHUNK)) for lo in range(0, len(ev), CHUNK))
            total = -(-len(ev) // CHUNK)
            for done, data in enumerate(_ordered(run, chunks, 2 * workers), start=1):
                put("events", data)
                if progress is not None:
                    progress(done, total)
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    total = sum(sizes.values())
    n_slices = n_iv + n_cta
    return {"format": "perfetto", "path": str(path), "bytes": total, "slices": n_slices, "compressed": compress,
            "tracks": n_tracks, "events": 2 * n_slices, "descriptor_bytes": sizes["descriptors"],
            "event_bytes": sizes["events"], "arg_bytes_uncompressed": sum(arg_bytes),
            "bytes_per_slice": total / n_slices if n_slices else 0.0}


class _Done:
    """A finished computation with the ``result()`` of a future (no thread pool)."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def _sequence_start(event_names: list[str]) -> bytes:
    """First packets of sequence 1: cleared state, interned names, defaults, the clock."""
    interned = b"".join(field_bytes(ID_EVENT_NAMES, field_varint(1, i + 1) + field_bytes(2, n))
                        for i, n in enumerate(event_names))
    interned += b"".join(field_bytes(ID_ANNOTATION_NAMES, field_varint(1, k) + field_bytes(2, v))
                         for k, v in ANNOTATION_NAMES.items())
    seq = field_varint(P_SEQ_ID, SEQ_ID)
    clocks = (field_bytes(CS_CLOCKS, field_varint(CLK_ID, CLOCK_ID) + field_varint(CLK_TS, 0) +
                          field_varint(CLK_INCREMENTAL, 1)) +
              field_bytes(CS_CLOCKS, field_varint(CLK_ID, BOOTTIME) + field_varint(CLK_TS, 0)))
    return (_packet(seq, field_varint(P_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED), field_bytes(P_INTERNED, interned),
                    field_bytes(P_DEFAULTS, field_varint(TPD_CLOCK_ID, CLOCK_ID))) +
            _packet(seq, field_bytes(P_CLOCK_SNAPSHOT, clocks)))


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
