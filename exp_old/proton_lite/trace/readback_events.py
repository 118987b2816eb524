"""A .pftrace's packets read back chunk by chunk into the few columns the reader needs.

Why: parsed all at once, every packet's fields, their payload bounds and the inflated
stream itself took ~200 bytes a slice event: reading back the trace of 21.3 M records took
8.5 GB and 58 s on the CPU host (2026-11-29), four times the memory of its decode from the
raw capture.  Here the packets are inflated and parsed a chunk of about CHUNK_BYTES at a
time, on the stop's threads, and each chunk leaves only compact columns per slice event
(timestamp, type, track, name, its last annotation and, where asked, its first).

Timestamps: the writers use an incremental clock per sequence (TracePacketDefaults), so a
packet's time is the running sum of its sequence's timestamps up to it.  Each chunk sums
its own packets per sequence; the sums of the chunks before it are added afterwards.

A chunk is parsed in C without the GIL where that is built (``readback_c``, the same columns);
the numpy parse here reads it otherwise, and reads a malformed chunk to say what is wrong.
"""
from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from proton_lite.stop_threads import stop_threads
from proton_lite.trace import perfetto_fields as pf, readback_c
from proton_lite.trace._proto import packet_bounds, parse_messages

CHUNK_BYTES = 8 << 20  # packet bytes a chunk holds once inflated, about (~60 MB of its temporaries)
INFLATE_RATIO = 5  # a deflated batch's bytes, times this: its packets' bytes, about (perfetto.py: ~5x)
WANTED = {pf.P_TIMESTAMP: 0, pf.P_SEQ_ID: 0, pf.P_TRACK_EVENT: 2, pf.P_TRACK_DESCRIPTOR: 2, pf.P_DEFAULTS: 2,
          pf.P_COMPRESSED: 2}


@dataclass
class TraceEvents:
    """Each TrackEvent of the file, in file order, and the track descriptors."""
    t: np.ndarray  # timestamp (the writer's clock, ns)
    typ: np.ndarray  # SLICE_BEGIN / SLICE_END
    track: np.ndarray  # track uuid
    iid: np.ndarray  # interned name id (0: none)
    an: np.ndarray  # the last debug annotation's name id (0: none) and its int value
    av: np.ndarray
    first_an: np.ndarray | None  # the first annotation's, where asked
    first_av: np.ndarray | None
    t_uuid: np.ndarray  # track descriptors: uuid, parent uuid (-1: none), rank
    t_parent: np.ndarray
    t_rank: np.ndarray


def read_events(data: bytes, first_annotation: bool = False, workers: int | None = None) -> TraceEvents:
    """The events of the packet stream ``data`` (deflated batches inflated in place)."""
    starts, ends = packet_bounds(data)
    outer = parse_messages(np.frombuffer(data, np.uint8), starts, ends, {pf.P_COMPRESSED: 2})[pf.P_COMPRESSED]
    chunks = _chunks(starts, ends, outer)
    workers = stop_threads() if workers is None else workers
    task = lambda c: _chunk_events(data, starts, ends, outer, c, first_annotation)  # noqa: E731
    if workers > 1 and len(chunks) > 1:
        with ThreadPoolExecutor(min(workers, len(chunks))) as pool:
            parts = list(pool.map(task, chunks))
    else:
        parts = [task(c) for c in chunks]
    return _joined(parts, first_annotation)


def _chunks(starts: np.ndarray, ends: np.ndarray, outer) -> list[tuple[int, int]]:
    """Runs [k0, k1) of the file's packets of about CHUNK_BYTES once inflated."""
    has, lo, hi = outer
    size = np.where(has, (hi - lo) * INFLATE_RATIO, ends - np.r_[0, ends[:-1]])
    cuts = np.searchsorted(np.cumsum(size), np.arange(CHUNK_BYTES, int(size.sum()), CHUNK_BYTES), side="right")
    bounds = np.unique(np.r_[0, cuts, len(starts)])
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def _chunk_events(data: bytes, starts, ends, outer, run: tuple[int, int], first_annotation: bool) -> dict:
    """One chunk's packets inflated and parsed: its events' columns, its descriptors, the
    running sums of its sequences' timestamps (from 0) and each sequence's total."""
    k0, k1 = run
    has, lo, hi = outer
    pieces, at = [], int(ends[k0 - 1]) if k0 else 0  # packets are contiguous: packet k ends where k + 1 begins
    for k in range(k0, k1):
        pieces.append(zlib.decompress(data[int(lo[k]):int(hi[k])]) if has[k] else data[at:int(ends[k])])
        at = int(ends[k])
    chunk = b"".join(pieces)
    del pieces
    cols = readback_c.chunk_columns(chunk, first_annotation)
    if cols is not None:
        return cols
    buf = np.frombuffer(chunk, np.uint8)
    p_lo, p_hi = packet_bounds(chunk)
    pk = parse_messages(buf, p_lo, p_hi, WANTED)
    if pk[pf.P_COMPRESSED][0].any():
        raise ValueError("compressed packets inside compressed packets")
    # the clock: the chunk's last TracePacketDefaults, if any
    clock = None
    d_has, d_lo, d_hi = pk[pf.P_DEFAULTS]
    for k in np.flatnonzero(d_has).tolist():
        d = parse_messages(buf, d_lo[k:k + 1], d_hi[k:k + 1], {pf.TPD_CLOCK_ID: 0})[pf.TPD_CLOCK_ID]
        clock = bool(d[0][0]) and int(d[1][0]) == pf.CLOCK_ID
    has_ts, ts = pk[pf.P_TIMESTAMP]
    seq = pk[pf.P_SEQ_ID][1].astype(np.int64)
    step = np.where(has_ts, ts, 0).astype(np.int64)
    seqs, inv = np.unique(seq, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")  # each sequence's packets, in file order
    running = np.empty(len(seq), np.int64)
    sums = np.cumsum(step[order])
    first = np.searchsorted(inv[order], np.arange(len(seqs)))
    running[order] = sums - np.repeat(np.r_[0, sums][first], np.diff(np.r_[first, len(seq)]))
    totals = np.add.reduceat(step[order], first) if len(first) else np.zeros(0, np.int64)
    # descriptors
    t_has, t_lo, t_hi = pk[pf.P_TRACK_DESCRIPTOR]
    td = parse_messages(buf, t_lo[t_has], t_hi[t_has], {pf.TD_UUID: 0, pf.TD_PARENT: 0, pf.TD_RANK: 0})
    # events
    e_has, e_lo, e_hi = pk[pf.P_TRACK_EVENT]
    if np.any(e_has & ~has_ts):
        raise ValueError("a TrackEvent packet without a timestamp")
    te_lo, te_hi = e_lo[e_has], e_hi[e_has]
    te = parse_messages(buf, te_lo, te_hi, {pf.TE_TYPE: 0, pf.TE_TRACK_UUID: 0, pf.TE_NAME_IID: 0,
                                            pf.TE_ANNOTATIONS: 2})
    out = {"ts": ts[e_has].astype(np.int64), "running": running[e_has], "seq": seq[e_has], "seqs": seqs,
           "totals": totals, "clock": clock,
           "typ": te[pf.TE_TYPE][1].astype(np.uint8), "track": te[pf.TE_TRACK_UUID][1].astype(np.int64),
           "iid": te[pf.TE_NAME_IID][1].astype(np.int64),
           "t_uuid": td[pf.TD_UUID][1].astype(np.int64),
           "t_parent": np.where(td[pf.TD_PARENT][0], td[pf.TD_PARENT][1].astype(np.int64), -1),
           "t_rank": (td[pf.TD_RANK][1] & np.uint64(0xFFFFFFFF)).astype(np.int64)}
    out["an"], out["av"] = _annotation(buf, te[pf.TE_ANNOTATIONS])
    if first_annotation:
        first = parse_messages(buf, te_lo, te_hi, {pf.TE_ANNOTATIONS: 2}, keep="first")[pf.TE_ANNOTATIONS]
        out["first_an"], out["first_av"] = _annotation(buf, first)
    return out


def _annotation(buf: np.ndarray, field) -> tuple[np.ndarray, np.ndarray]:
    """(name id, int value) of one DebugAnnotation per event (0, 0 where it has none)."""
    a_has, a_lo, a_hi = field
    ann = parse_messages(buf, a_lo[a_has], a_hi[a_has], {pf.DA_NAME_IID: 0, pf.DA_INT: 0})
    an, av = np.zeros(len(a_has), np.int32), np.zeros(len(a_has), np.int64)  # (name ids: a few)
    an[a_has] = ann[pf.DA_NAME_IID][1].astype(np.int32)
    av[a_has] = ann[pf.DA_INT][1].view(np.int64)
    return an, av


def _joined(parts: list, first_annotation: bool) -> TraceEvents:
    """The chunks' columns joined; each event's time from its sequence's sums before its chunk.
    Column by column, each chunk's part of it freed once copied: the chunks and the joined
    columns are never all held at once (~45 bytes an event each)."""
    clocks = [p["clock"] for p in parts if p["clock"] is not None]
    incremental = bool(clocks) and clocks[-1]  # (the file's last TracePacketDefaults, as a whole-file read)
    carried: dict[int, int] = {}
    for p in parts:  # the sums of each sequence's timestamps in the chunks before each chunk
        if incremental:
            p["before"] = np.array([carried.get(s, 0) for s in p["seqs"].tolist()], np.int64)
            for s, total in zip(p["seqs"].tolist(), p["totals"].tolist()):
                carried[s] = carried.get(s, 0) + total
    n = sum(len(p["typ"]) for p in parts)

    def time(p):
        ts, running, seq = p.pop("ts"), p.pop("running"), p.pop("seq")
        return running + p["before"][np.searchsorted(p["seqs"], seq)] if incremental else ts

    def column(key: str, dtype, value=None) -> np.ndarray:
        out = np.empty(n, dtype)
        at = 0
        for p in parts:
            v = p.pop(key) if value is None else value(p)
            out[at:at + len(v)] = v
            at += len(v)
        return out
    small = lambda key: np.concatenate([p[key] for p in parts]) if parts else np.zeros(0, np.int64)  # noqa: E731
    return TraceEvents(t=column("t", np.int64, time), typ=column("typ", np.uint8), track=column("track", np.int64),
                       iid=column("iid", np.int64), an=column("an", np.int32), av=column("av", np.int64),
                       first_an=column("first_an", np.int32) if first_annotation else None,
                       first_av=column("first_av", np.int64) if first_annotation else None,
                       t_uuid=small("t_uuid"), t_parent=small("t_parent"), t_rank=small("t_rank"))
