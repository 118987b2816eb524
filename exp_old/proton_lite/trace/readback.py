"""Read a trace written by ``write_trace`` back into a ``Profile`` (both formats).

Why: the viewer summarizes and diffs trace files as well as raw captures, and the round
trip is how the writers are tested.  Everything comes from the file itself: slices give
times, tracks / args give launch, SM, unit and lane, debug args give cycles; the
embedded metadata gives kernels, launches, session and the per-CTA clocks.  A CTA slice
names its CTA in a ``cta`` arg; in a .pftrace an interval's CTA is the one whose extent on
the interval's slot holds its start (``rows.cta_by_time``, with the extents' starts from
the metadata), in a .json every slice has a ``cta`` arg.  A CTA's launch is its launch
track's, or in the sm layout (``plan``: SM groups shared by the launches of a GPU) the
``launch`` arg its slice carries; the launch slices of that layout are derived, not read.
The counters are derived from the CTA slices and not read.  Files not written by proton-lite are refused with a one-line
``ValueError``.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, Profile
from proton_lite.profile_merge import merged_captures
from proton_lite.trace.nesting import _argsort_keys
from proton_lite.trace.meta import _check_meta, _kernels_from_meta, _launches_from_meta, _unpack_columns, layout_of
from proton_lite.trace.tree import _launch_rank
from proton_lite.trace._proto import fields, read_varint
from proton_lite.trace import pairing_c, perfetto_fields as pf
from proton_lite.trace.readback_events import read_events
from proton_lite.trace.rows import cta_by_time


def load_trace(path: str | Path) -> Profile:
    data = Path(path).read_bytes()
    is_json = data[:4096].lstrip().startswith(b"{")
    try:
        if is_json:  # (our .pftrace starts 0x0a then a length >= 128: never JSON-looking)
            return _load_chrome(data, path)
        if data[:1] == b"\x0a":  # the tag of Trace.packet
            return _load_perfetto(data, path)
    except ValueError as e:
        msg = str(e)
        raise ValueError(msg if msg.startswith(str(path)) else f"{path}: {msg}") from None
    except (KeyError, IndexError, TypeError, zlib.error, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: damaged proton-lite trace ({type(e).__name__}: {e})") from None
    raise ValueError(f"{path}: not a proton-lite trace (neither Perfetto protobuf nor JSON)")


def _cta_table(meta: dict, ctas: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The CTA rows in the decoder's order (launch, CTA id), the metadata's per-CTA columns
    joined from the writers' order (launch or GPU, SM, ...: ``trace/plan.py``); returns (ctas,
    their extent starts, the index in ``ctas`` (the input) of each row)."""
    launches = _launches_from_meta(meta)
    cols = {k: np.asarray(ctas[k]) for k in ("launch", "cta", "smid", "start_ns", "end_ns")}
    lr = _launch_rank(launches, cols["launch"], "CTA slices")
    _, top = layout_of(meta)  # the sm layout orders CTAs by GPU, SM, launch (trace/plan.py)
    if top is not None and len(top) != len(launches):
        raise ValueError("the metadata's layout names a GPU for another number of launches")
    n = len(lr)
    if int(meta["ctas"]["rows"]) != n:
        raise ValueError(f"{n} CTA slices but metadata for {meta['ctas']['rows']} CTAs")
    # sorted by packed keys from the columns (a lexsort of the table's strided fields took 2.8 s
    # for 4.19 M CTAs): the writers' order, where the per-CTA columns lie, and the decoder's,
    # into which each column is gathered once (a table in the writers' order, sorted again as
    # rows, took 0.9 s more for those CTAs)
    keys = [lr, cols["smid"], cols["cta"]] if top is None else [np.asarray(top)[lr], cols["smid"], lr, cols["cta"]]
    writers = _argsort_keys(keys)
    del keys
    order = _argsort_keys([lr, cols["cta"]])
    del lr
    at = np.empty(n, np.int64)  # each row's place among the per-CTA columns
    at[writers] = np.arange(n)
    at = at[order]
    del writers
    c = np.zeros(n, CTA_DTYPE)
    for k, v in cols.items():
        c[k] = v[order]
    extras = _unpack_columns(meta["ctas"])
    lead = extras.pop("extent_lead_ns", None)
    for k, v in extras.items():
        c[k] = v[at]
    c["end_clock"] = c["start_clock"] + np.asarray(ctas["cycles"], np.int64)[order].view(np.uint64)
    if n > 1 and not np.all((c["launch"][1:] != c["launch"][:-1]) | (c["cta"][1:] != c["cta"][:-1])):
        raise ValueError("two CTA slices of one launch carry the same CTA id")
    return c, c["start_ns"] - (lead[at] if lead is not None else 0), order


def _interval_order(iv) -> np.ndarray:
    """The decoder's order of intervals: by launch, CTA, unit, lane, start, end (later
    first), depth; the first four packed into one key (``nesting._argsort_keys``; seven keys
    took 6.5 s for 10.6 M intervals, 2026-11-29)."""
    return _argsort_keys([iv[k] for k in ("launch", "cta", "unit", "lane")],
                         lambda idx: [iv["start_ns"][idx], -iv["end_ns"][idx], iv["depth"][idx]])


def _profile(meta: dict, c: np.ndarray, iv: dict) -> Profile:
    """Assemble a Profile from the CTA table (``_cta_table``) and the interval columns (taken
    out of ``iv`` as they are copied: ordered from the columns, then each gathered into the
    intervals' rows in that order and freed; sorted as rows, the 48-byte rows were read by
    column and copied whole once more)."""
    launches = _launches_from_meta(meta)  # (``c`` is in the decoder's order already: launch, then CTA id)
    n = len(iv["cta"])
    order = _interval_order(iv) if n else np.zeros(0, np.int64)
    out = np.zeros(n, INTERVAL_DTYPE)
    for k in INTERVAL_DTYPE.names:
        out[k] = iv.pop(k)[order]
    del order
    return Profile(kernels=_kernels_from_meta(meta), launches=launches, ctas=c, intervals=out,
                   t0_ns=int(meta["t0_ns"]), session=meta.get("session") or {})


# ---- Perfetto ------------------------------------------------------------------------------

def _load_perfetto(data: bytes, path) -> Profile:
    # (the events' and slices' columns, ~100 bytes a slice, go before the profile is sorted)
    return _profile(*_perfetto_columns(data, path))


def _perfetto_columns(data: bytes, path) -> tuple[dict, np.ndarray, dict]:
    """The metadata, the CTA table and the interval columns of a .pftrace (``_profile``'s input)."""
    meta = _first_packet_meta(data, pf.META_FIELD, path)
    by_gpu = layout_of(meta)[0] == "sm"
    # every TrackEvent's columns, read chunk by chunk (the counter values on the CTA slices are
    # derived from them: not read); in the sm layout also each one's first annotation
    events = read_events(data, first_annotation=by_gpu)
    del data
    t_rank = events.t_rank
    c, u, sl = _slices(events, meta, by_gpu)  # (the events' columns go: ~45 bytes an event)
    del events
    ranked = np.r_[t_rank, 0]  # a descriptor's rank; index -1 (above the root) the 0 at the end

    def rank(i: np.ndarray) -> np.ndarray:  # (one gather where a where of a clipped gather made three passes)
        if len(i) and int(i.min()) < -1:
            raise ValueError("a track's ancestor index below -1")
        return ranked[i]
    start, end, cycles = sl.pop("start"), sl.pop("end"), sl.pop("cycles")
    table, lo_ns, order = _cta_table(meta, {"launch": sl.pop("cta_launch") if by_gpu else rank(sl.pop("launch_c")),
                                            "smid": rank(sl.pop("sm_c")), "cta": sl.pop("cta_c"),
                                            "start_ns": start[c], "end_ns": end[c], "cycles": cycles[c]})
    # an interval's CTA: the one whose extent on its slot holds the interval's start
    start_u = start[u]
    owner = cta_by_time(sl.pop("slot_c")[order], lo_ns, sl.pop("slot_u"), start_u)
    if len(owner) and owner.min() < 0:
        raise ValueError("an interval starts before every CTA of its slot")
    u_rank = rank(sl.pop("unit_u"))
    names = np.array([s for _, s in meta["names"]] or [0], np.int64)
    iv = {"launch": table["launch"][owner], "cta": table["cta"][owner], "unit": u_rank >> 16,
          "lane": u_rank & 0xFFFF, "scope": names[np.clip(sl.pop("iid_u") - 1, 0, len(names) - 1)],
          "depth": sl.pop("depth")[u], "start_ns": start_u, "end_ns": end[u], "cycles": cycles[u]}
    return meta, table, iv


def _slices(events, meta: dict, by_gpu: bool) -> tuple[np.ndarray, np.ndarray, dict]:
    """Each slice's BEGIN and END paired, and what the reader takes of its events, the slices
    split by their track: (CTA slices' mask, intervals' mask, columns), the columns per slice
    (times, cycles, depth) or per CTA slice (``_c``) or interval (``_u``).  The launch slices
    of the sm layout, on the rows right below a GPU's track, are in neither mask: derived, not
    read (not filtered out of every column: 2 s of a 21 M-record trace's 20 s on the CPU host).
    Each of the events' columns is dropped from ``events`` once read (~45 bytes an event)."""
    typ, track = events.typ, events.track
    if np.any((typ != pf.TYPE_SLICE_BEGIN) & (typ != pf.TYPE_SLICE_END)):
        raise ValueError("a TrackEvent that is neither SLICE_BEGIN nor SLICE_END")
    is_end = typ == pf.TYPE_SLICE_END
    events.typ = typ = None
    tracks = pairing_c.dense_tracks(track, events.t_uuid)  # (each event's track numbered: pairing and ancestors)
    # in C, with each slice's depth (a track without a descriptor: the numpy forms, which say so)
    got = pairing_c.pair(track, is_end, events.t_uuid, tracks) if tracks is not None else None
    b, e, level = got if got is not None else (*_match(track, is_end), None)
    del is_end, got
    an, av = events.an, events.av
    out = {"depth": np.where(an[b] == pf.ANN_DEPTH, av[b], level if level is not None else _nest_level(track, b, e))}
    del level
    slice_track = track[b] if tracks is None else None
    dense = None if tracks is None else (tracks[0], tracks[1][b])
    events.track = track = tracks = None
    shift = int(meta["shift_ns"])
    out["start"], out["end"] = events.t[b] - shift, events.t[e] - shift
    events.t = None
    out["cycles"] = np.where(an[e] == pf.ANN_CYCLES, av[e], np.where(an[b] == pf.ANN_CYCLES, av[b], 0))
    del e
    iid = events.iid[b]
    events.iid = None
    # each slice's track: a slot (parent SM, grandparent launch) or a unit track one level down;
    # in a trace of merged captures each launch has its capture's track above it
    merged = merged_captures(meta.get("session") or {}) is not None
    own, above = _ancestors(events.t_uuid, events.t_parent, slice_track, 4, dense)
    del slice_track, dense
    n_up = (sum((x >= 0).astype(np.int64) for x in above[1:]) - int(merged))[own]  # (per descriptor, then slice)
    c, u = n_up == 2, n_up == 3
    other = ~c & ~u
    if by_gpu:
        other &= n_up != 1
    if np.any(other):
        raise ValueError("slices on a track that is neither a CTA slot nor a unit track")
    del other, n_up
    if np.any(c & (an[b] != pf.ANN_CTA)) or np.any(u & (iid < 1)):
        raise ValueError("slice args do not match their tracks (a CTA slot's slices carry a 'cta' arg)")
    out["iid_u"] = iid[u]
    del iid
    b_c = b[c]
    del b
    out["cta_c"] = av[b_c]
    events.an = events.av = an = av = None
    if by_gpu:  # a CTA slice's BEGIN carries its launch first, its CTA id last: its first one
        if np.any(events.first_an[b_c] != pf.ANN_LAUNCH):
            raise ValueError("a CTA slice without its 'launch' arg in a trace laid out by GPU")
        out["cta_launch"] = events.first_av[b_c]
    events.first_an = events.first_av = None
    own_c, own_u = own[c], own[u]
    del own, b_c
    out["slot_c"], out["sm_c"], out["launch_c"] = (x[own_c] for x in above[:3])  # its slot's, SM's, launch's tracks
    out["unit_u"], out["slot_u"] = (x[own_u] for x in above[:2])  # an interval's unit track and slot
    return c, u, out


def _ancestors(t_uuid: np.ndarray, t_parent: np.ndarray, uuid: np.ndarray | None, levels: int,
               dense=None) -> tuple[np.ndarray, list[np.ndarray]]:
    """(own descriptor index of each track uuid, [the descriptors' own index, their parents',
    grandparents', ...]), -1 above the root: a slice's ancestor at level k is ``above[k][own]``,
    gathered only for the slices that need it.  Each uuid is looked up once, or where
    ``dense`` gives them as (distinct uuids sorted, each one's rank among them), each distinct
    uuid; the levels follow each descriptor's parent (a few thousand), not each slice's."""
    by_uuid = np.argsort(t_uuid)

    def lookup(u, missing=None):
        if not len(by_uuid):
            if len(u) and missing is None:
                raise ValueError("slices on a track that has no TrackDescriptor")
            return np.full(len(u), missing if missing is not None else 0, np.int64)
        i = by_uuid[np.minimum(np.searchsorted(t_uuid, u, sorter=by_uuid), len(by_uuid) - 1)]
        found = t_uuid[i] == u
        if missing is not None:
            return np.where(found, i, missing)
        if not np.all(found):
            raise ValueError("slices on a track that has no TrackDescriptor")
        return i
    parent = np.full(len(t_uuid), -1, np.int64)  # each descriptor's parent's index; -2: a parent not described
    has = t_parent >= 0
    parent[has] = lookup(t_parent[has], missing=-2)
    own = lookup(uuid) if dense is None else lookup(dense[0])[dense[1]]
    above = [np.arange(len(t_uuid), dtype=np.int64)]
    for _ in range(levels):
        prev = above[-1]
        above.append(np.where(prev >= 0, parent[np.maximum(prev, 0)], -1))
    used = np.zeros(len(t_uuid), bool)
    used[own] = True  # (a parent not described matters only above a track that has slices)
    if any(np.any(level[used] == -2) for level in above):
        raise ValueError("slices on a track that has no TrackDescriptor")
    return own, above


def _first_packet_meta(data: bytes, meta_field: int, path) -> dict:
    try:
        ln, j = read_varint(data, 1)
        for num, wire, v in fields(data, j, j + ln):
            if num == meta_field and wire == 2:
                return _check_meta(json.loads(data[v[0]:v[1]]), path)
    except (IndexError, ValueError, UnicodeDecodeError):
        pass
    raise ValueError(f"{path}: not a proton-lite trace (no proton-lite metadata packet at its start)")


def _match(track: np.ndarray, is_end: np.ndarray):
    """Pair BEGIN/END events (in file order) per track; returns (begin index, end index).

    Per track the events nest, so a BEGIN entered at level d is closed by the next END that
    leaves level d: sorted by (track, level, position), pairs are adjacent.
    """
    n = len(track)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    by_track = np.argsort(track, kind="stable")  # (by track, then position)
    tr = track[by_track]
    end = is_end[by_track]
    step = np.where(end, -1, 1)
    after = np.cumsum(step)
    first = np.flatnonzero(np.r_[True, tr[1:] != tr[:-1]])
    run = np.diff(np.r_[first, n])
    lvl = after - np.repeat(after[first] - step[first], run)  # level after each event, per track
    key = np.where(end, lvl, lvl - 1)  # BEGIN: level it enters from; END: level it returns to
    if key.min() < 0:
        raise ValueError(pairing_c.NO_OPEN_SLICE)
    run_of = np.repeat(np.arange(len(first)), run)  # each event's track, numbered in order
    ev = by_track[_argsort_keys([run_of, key])]
    b, e = ev[0::2], ev[1::2]
    if len(b) != len(e) or np.any(is_end[b]) or np.any(~is_end[e]) or np.any(track[b] != track[e]):
        raise ValueError(pairing_c.LEFT_OPEN)
    return b, e


def _nest_level(track: np.ndarray, b: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Nesting depth of each slice on its track (number of enclosing open slices)."""
    n = len(track)
    is_end = np.zeros(n, bool)
    is_end[e] = True
    by_track = np.argsort(track, kind="stable")  # (by track, then position)
    step = np.where(is_end[by_track], -1, 1)
    after = np.cumsum(step)
    level = np.empty(n, np.int64)
    level[by_track] = after  # tracks balance, so the running sum is 0 between tracks
    return level[b] - 1


# ---- Chrome JSON ---------------------------------------------------------------------------

def scope_lookup(kernel):
    """Scope id from a slice name: first index in the kernel's table, else ``scope N``.

    The Chrome writer adds an explicit ``scope`` arg wherever this rule would be wrong.
    """
    first: dict[str, int] = {}
    for s, nm in enumerate(kernel.scopes):
        first.setdefault(nm, s)

    def lookup(name: str) -> int:
        if name in first:
            return first[name]
        if name.startswith("scope ") and name[6:].isdigit():
            return int(name[6:])
        raise ValueError(f"slice name {name!r} is not a scope of kernel {kernel.name!r}")
    return lookup

def _load_chrome(data: bytes, path) -> Profile:
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise ValueError(f"{path}: not a proton-lite trace (invalid JSON: {e})") from None
    meta = doc.get("otherData", {}).get("proton_lite") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: not a proton-lite trace (no otherData.proton_lite metadata)")
    _check_meta(meta, path)
    kernels = _kernels_from_meta(meta)
    launch_of_pid = {i + 1: la for i, (la, _) in enumerate(meta["processes"])}
    kernel_of_launch = dict(zip(meta["launches"]["launch"], meta["launches"]["kernel"]))
    scope_ids = [scope_lookup(k) for k in kernels]
    shift = int(meta["shift_ns"])
    xs = [ev for ev in doc.get("traceEvents", ()) if ev.get("ph") == "X" and "cta" in ev.get("args", ())]
    args = [ev["args"] for ev in xs]
    is_cta = np.array(["unit" not in a for a in args], bool)
    launch = np.array([a["launch"] if "launch" in a else launch_of_pid[ev["pid"]] for ev, a in zip(xs, args)],
                      np.int64)
    start = np.rint(np.array([ev["ts"] for ev in xs], np.float64) * 1000).astype(np.int64) - shift
    end = start + np.rint(np.array([ev["dur"] for ev in xs], np.float64) * 1000).astype(np.int64)
    cycles = np.array([a["cycles"] for a in args], np.int64)
    sm = np.array([a["sm"] for a in args], np.int64)
    cta = np.array([a["cta"] for a in args], np.int64)
    c, u = is_cta, ~is_cta
    ctas = {"launch": launch[c], "smid": sm[c], "cta": cta[c], "start_ns": start[c], "end_ns": end[c],
            "cycles": cycles[c]}
    ua = [a for a, x in zip(args, is_cta.tolist()) if not x]
    un = [ev["name"] for ev, x in zip(xs, is_cta.tolist()) if not x]
    kern = [kernel_of_launch[la] for la in launch[u].tolist()]
    iv = {"launch": launch[u], "cta": cta[u], "unit": np.array([a["unit"] for a in ua], np.int64),
          "lane": np.array([a.get("lane", 0) for a in ua], np.int64),
          "scope": np.array([a["scope"] if "scope" in a else scope_ids[k](nm) for a, k, nm in zip(ua, kern, un)],
                            np.int64),
          "depth": np.array([a["depth"] for a in ua], np.int64), "start_ns": start[u], "end_ns": end[u],
          "cycles": cycles[u]}
    return _profile(meta, _cta_table(meta, ctas)[0], iv)
