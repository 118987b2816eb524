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
from proton_lite.trace import pairing_c
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
    """The CTA rows in the writers' order (launch, SM, CTA id: that of the metadata's
    per-CTA columns), those columns joined; returns (ctas, their extent starts, the index
    in ``ctas`` (the input) of each row)."""
    launches = _launches_from_meta(meta)
    cols = {k: np.asarray(ctas[k]) for k in ("launch", "cta", "smid", "start_ns", "end_ns")}
    lr = _launch_rank(launches, cols["launch"], "CTA slices")
    _, top = layout_of(meta)  # the sm layout orders CTAs by GPU, SM, launch (trace/plan.py)
    if top is not None and len(top) != len(launches):
        raise ValueError("the metadata's layout names a GPU for another number of launches")
    # sorted by packed keys from the columns (a lexsort of the table's strided fields took 2.8 s
    # for 4.19 M CTAs), then each column gathered into the table once
    keys = [lr, cols["smid"], cols["cta"]] if top is None else [np.asarray(top)[lr], cols["smid"], lr, cols["cta"]]
    order = _argsort_keys(keys)
    del keys, lr
    c = np.zeros(len(order), CTA_DTYPE)
    for k, v in cols.items():
        c[k] = v[order]
    if int(meta["ctas"]["rows"]) != len(c):
        raise ValueError(f"{len(c)} CTA slices but metadata for {meta['ctas']['rows']} CTAs")
    extras = _unpack_columns(meta["ctas"])
    lead = extras.pop("extent_lead_ns", np.zeros(len(c), np.int64))
    for k, v in extras.items():
        c[k] = v
    c["end_clock"] = c["start_clock"] + np.asarray(ctas["cycles"], np.int64)[order].view(np.uint64)
    if len(c) > 1 and not np.all((c["launch"][1:] != c["launch"][:-1]) | (c["cta"][1:] != c["cta"][:-1])):
        raise ValueError("two CTA slices of one launch carry the same CTA id")
    return c, c["start_ns"] - lead, order


def _interval_order(iv: np.ndarray) -> np.ndarray:
    """The decoder's order of intervals: by launch, CTA, unit, lane, start, end (later
    first), depth; the first four packed into one key (``nesting._argsort_keys``; seven keys
    took 6.5 s for 10.6 M intervals, 2026-11-29)."""
    return _argsort_keys([iv[k] for k in ("launch", "cta", "unit", "lane")],
                         lambda idx: [iv["start_ns"][idx], -iv["end_ns"][idx], iv["depth"][idx]])


def _profile(meta: dict, c: np.ndarray, iv: dict) -> Profile:
    """Assemble a Profile from the CTA table (``_cta_table``) and the interval columns (taken
    out of ``iv`` as they are copied: each column goes before the intervals are sorted)."""
    launches = _launches_from_meta(meta)
    lr = _launch_rank(launches, c["launch"], "CTA slices")
    c = c[np.lexsort((c["cta"], lr))]  # decode order: launch, then CTA id
    del lr
    out = np.zeros(len(iv["cta"]), INTERVAL_DTYPE)
    for k in INTERVAL_DTYPE.names:
        out[k] = iv.pop(k)
    out = out[_interval_order(out)] if len(out) else out
    return Profile(kernels=_kernels_from_meta(meta), launches=launches, ctas=c, intervals=out,
                   t0_ns=int(meta["t0_ns"]), session=meta.get("session") or {})


# ---- Perfetto ------------------------------------------------------------------------------

def _load_perfetto(data: bytes, path) -> Profile:
    # (the events' and slices' columns, ~100 bytes a slice, go before the profile is sorted)
    return _profile(*_perfetto_columns(data, path))


def _perfetto_columns(data: bytes, path) -> tuple[dict, np.ndarray, dict]:
    """The metadata, the CTA table and the interval columns of a .pftrace (``_profile``'s input)."""
    from proton_lite.trace import perfetto_fields as pf
    meta = _first_packet_meta(data, pf.META_FIELD, path)
    by_gpu = layout_of(meta)[0] == "sm"
    # every TrackEvent's columns, read chunk by chunk (the counter values on the CTA slices are
    # derived from them: not read); in the sm layout also each one's first annotation
    events = read_events(data, first_annotation=by_gpu)
    del data
    t_uuid, t_parent, t_rank = events.t_uuid, events.t_parent, events.t_rank
    t, typ, track, an, av = events.t, events.typ, events.track, events.an, events.av
    if np.any((typ != pf.TYPE_SLICE_BEGIN) & (typ != pf.TYPE_SLICE_END)):
        raise ValueError("a TrackEvent that is neither SLICE_BEGIN nor SLICE_END")
    got = pairing_c.pair(track, typ == pf.TYPE_SLICE_END, t_uuid)  # in C, with each slice's depth
    b, e, level = got if got is not None else (*_match(track, typ == pf.TYPE_SLICE_END), None)
    del got
    iid = events.iid[b]
    cycles = np.where(an[e] == pf.ANN_CYCLES, av[e], np.where(an[b] == pf.ANN_CYCLES, av[b], 0))
    shift = int(meta["shift_ns"])
    start, end = t[b] - shift, t[e] - shift
    depth = np.where(an[b] == pf.ANN_DEPTH, av[b], level if level is not None else _nest_level(track, b, e))
    del level

    # each slice's track: a slot (parent SM, grandparent launch) or a unit track one level down;
    # in a trace of merged captures each launch has its capture's track above it
    merged = merged_captures(meta.get("session") or {}) is not None
    up = _ancestors(t_uuid, t_parent, track[b], 4)
    n_up = sum((u >= 0).astype(np.int64) for u in up[1:]) - int(merged)
    if by_gpu:  # the launch slices, on the rows right below a GPU's track: derived, not read
        keep = n_up != 1
        b, e, iid, cycles, start, end, depth, n_up = (x[keep] for x in (b, e, iid, cycles, start, end, depth, n_up))
        up = [u[keep] for u in up]
    is_cta = n_up == 2
    if np.any((n_up != 2) & (n_up != 3)):
        raise ValueError("slices on a track that is neither a CTA slot nor a unit track")
    if np.any(is_cta & (an[b] != pf.ANN_CTA)) or np.any(~is_cta & (iid < 1)):
        raise ValueError("slice args do not match their tracks (a CTA slot's slices carry a 'cta' arg)")
    rank = lambda i: np.where(i >= 0, t_rank[np.maximum(i, 0)], 0)
    slot_i = np.where(is_cta, up[0], up[1])
    sm_i = np.where(is_cta, up[1], up[2])
    launch_i = np.where(is_cta, up[2], up[3])
    names = np.array([s for _, s in meta["names"]] or [0], np.int64)
    scope = names[np.clip(iid - 1, 0, len(names) - 1)]
    c, u = is_cta, ~is_cta
    if by_gpu:  # a CTA slice's BEGIN carries its launch first, its CTA id last: its first one
        ev = b[c]
        if np.any(events.first_an[ev] != pf.ANN_LAUNCH):
            raise ValueError("a CTA slice without its 'launch' arg in a trace laid out by GPU")
        cta_launch = events.first_av[ev]
    else:
        cta_launch = rank(launch_i)[c]
    table, lo_ns, order = _cta_table(meta, {"launch": cta_launch, "smid": rank(sm_i)[c], "cta": av[b][c],
                                               "start_ns": start[c], "end_ns": end[c], "cycles": cycles[c]})
    # an interval's CTA: the one whose extent on its slot holds the interval's start
    owner = cta_by_time(slot_i[c][order], lo_ns, slot_i[u], start[u])
    if len(owner) and owner.min() < 0:
        raise ValueError("an interval starts before every CTA of its slot")
    u_rank = rank(up[0])[u]
    iv = {"launch": table["launch"][owner], "cta": table["cta"][owner], "unit": u_rank >> 16,
          "lane": u_rank & 0xFFFF, "scope": scope[u], "depth": depth[u], "start_ns": start[u], "end_ns": end[u],
          "cycles": cycles[u]}
    return meta, table, iv


def _ancestors(t_uuid: np.ndarray, t_parent: np.ndarray, uuid: np.ndarray, levels: int) -> list[np.ndarray]:
    """[own descriptor index, parent's, grandparent's, ...] of each track uuid; -1 above the root.
    Each uuid is looked up once; the levels above follow each descriptor's parent, looked up
    once per descriptor (a few thousand), not once per slice and level."""
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
    up = [lookup(uuid)]
    for _ in range(levels):
        prev = up[-1]
        nxt = np.where(prev >= 0, parent[np.maximum(prev, 0)], -1)
        if np.any(nxt == -2):
            raise ValueError("slices on a track that has no TrackDescriptor")
        up.append(nxt)
    return up


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
