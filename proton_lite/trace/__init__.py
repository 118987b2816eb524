"""Trace files from a decoded ``Profile``: Perfetto protobuf and Chrome JSON, and back.

``write_trace(profile, path, fmt)`` picks a writer; ``load_trace(path)`` reads either
format back into a ``Profile``.  The helpers below are shared by both writers and the
reader so that track order, names and the embedded metadata agree in one place; the
writers are imported lazily so that this module stays importable on its own.
"""
from __future__ import annotations

import json
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from proton_lite.json_values import plain
from proton_lite.profile_data import LAUNCH_DTYPE, KernelInfo, Profile

FORMATS = ("perfetto", "chrome")
EXTENSIONS = {"perfetto": ".pftrace", "chrome": ".json"}
META_FORMAT = "proton-lite-trace"  # marks files written here; the reader refuses others
META_VERSION = 2  # 2: CTAs packed into slots (trace/rows.py); 1: one track per CTA


def write_trace(profile: Profile, path: str | Path, fmt: str, progress=None) -> dict:
    """Write ``profile`` to ``path`` as ``fmt`` (one of FORMATS); returns the writer's stats.
    ``progress(done, total)``: called as the writer goes."""
    if fmt == "perfetto":
        from proton_lite.trace.perfetto import write_perfetto
        return write_perfetto(profile, path, progress=progress)
    if fmt == "chrome":
        from proton_lite.trace.chrome import write_chrome
        return write_chrome(profile, path, progress=progress)
    raise ValueError(f"unknown trace format {fmt!r}; valid formats: {', '.join(FORMATS)}")


def load_trace(path: str | Path) -> Profile:
    """Read a .pftrace or .json written by ``write_trace`` back into a ``Profile``."""
    from proton_lite.trace.readback import load_trace as _load
    return _load(path)


# ---------------------------------------------------------------------------------------
# Shared by the writers and the reader.

def _launch_title(kernel: KernelInfo, launch, show_device: bool = False) -> str:
    """Track / process title of one launch, e.g. ``#3 matmul grid=(32,32,1) warps=8``, and
    ``... GPU 1`` when the capture holds launches of more than one device."""
    title = (f"#{int(launch['launch'])} {kernel.name} "
             f"grid=({int(launch['grid_x'])},{int(launch['grid_y'])},{int(launch['grid_z'])}) "
             f"warps={kernel.num_warps}")
    return title + f" GPU {int(launch['device'])}" if show_device else title


def _several_devices(launches) -> bool:
    return len(launches) > 0 and len(np.unique(launches["device"])) > 1


def _time_shift(profile: Profile) -> int:
    """ns added to every time so that none is negative (trace timestamps are unsigned).

    Times are relative to the earliest CTA start, but a unit may record a scope a few ns
    before thread 0 stamps the CTA header; the shift is stored in the metadata and undone
    by the reader.
    """
    lows = [0]
    for arr, fields in ((profile.ctas, ("start_ns", "end_ns")),
                        (profile.intervals, ("start_ns", "end_ns")),
                        (profile.launches, ("start_ns", "end_ns"))):
        if len(arr):
            lows += [int(arr[f].min()) for f in fields]
    return -min(lows)


def _sorted_launches(profile: Profile) -> np.ndarray:
    """Launch rows in launch order; checks that kernel indices are valid."""
    launches = np.sort(profile.launches, order="launch") if len(profile.launches) else profile.launches
    if len(launches) and int(launches["kernel"].max()) >= len(profile.kernels):
        raise ValueError("a launch refers to a kernel index outside profile.kernels")
    if len(np.unique(launches["launch"])) != len(launches):
        raise ValueError("profile.launches has duplicate launch indices")
    return launches


def _dense_limit(*arrays) -> int:
    """Largest lookup table worth building instead of a binary search."""
    return 4 * sum(len(a) for a in arrays) + (1 << 16)


def _launch_rank(launches: np.ndarray, launch_ids: np.ndarray, what: str) -> np.ndarray:
    """Position in ``launches`` (sorted) of each launch id; unknown ids are an error."""
    if not len(launch_ids):
        return np.zeros(0, np.int64)
    keys = launches["launch"].astype(np.int64)
    ids = launch_ids.astype(np.int64)
    top = int(keys.max()) if len(keys) else -1
    if 0 <= top < _dense_limit(keys):  # launch indices are small: a table lookup
        table = np.full(top + 2, -1, np.int64)
        table[keys] = np.arange(len(keys))
        pos = table[np.minimum(ids, top + 1)]
        if pos.min() < 0:
            raise ValueError(f"{what} refer to a launch missing from profile.launches")
        return pos
    pos = np.searchsorted(keys, ids)
    pos_c = np.minimum(pos, max(len(keys) - 1, 0))
    if not len(keys) or not np.array_equal(keys[pos_c], ids):
        raise ValueError(f"{what} refer to a launch missing from profile.launches")
    return pos_c.astype(np.int64)


def _cta_layout(profile: Profile, launches: np.ndarray):
    """CTAs sorted launch-major, then SM, then CTA id; and each interval's CTA rank.

    Returns (ctas_sorted, cta_launch_rank, interval_cta_rank).  Intervals usually come in
    runs of one CTA (the decoder and the reader write them so): each run is looked up
    once and the ranks repeated over it.
    """
    ctas = profile.ctas
    lr = _launch_rank(launches, ctas["launch"], "CTAs")
    order = np.lexsort((ctas["cta"], ctas["smid"], lr)) if len(ctas) else np.zeros(0, np.int64)
    ctas_s, lr_s = ctas[order], lr[order]
    iv = profile.intervals
    i_launch, i_cta = iv["launch"], iv["cta"]
    run = np.flatnonzero(np.r_[True, (i_launch[1:] != i_launch[:-1]) | (i_cta[1:] != i_cta[:-1])]) if len(iv) else \
        np.zeros(0, np.int64)
    rank = _cta_rank(launches, ctas_s, lr_s, i_launch[run], i_cta[run], run)
    return ctas_s, lr_s, np.repeat(rank, np.diff(np.r_[run, len(iv)]))


def _cta_rank(launches, ctas_s, lr_s, launch_ids, cta_ids, first):
    """Rank (in ``ctas_s``) of the CTA of each (launch id, CTA id); ``first``: the interval
    each pair comes from, for the error."""
    cid = ctas_s["cta"].astype(np.int64)
    # a table indexed by base[launch rank] + CTA id when the ids are dense, else a search
    width = np.zeros(len(launches) + 1, np.int64)
    if len(ctas_s):
        np.maximum.at(width, lr_s + 1, cid + 1)
    base = np.cumsum(width)[:-1]
    ilr = _launch_rank(launches, launch_ids, "intervals")
    icid = cta_ids.astype(np.int64)
    if len(ctas_s) and int(width.sum()) <= _dense_limit(cid, icid):
        table = np.full(int(width.sum()), -1, np.int64)
        slot = base[lr_s] + cid
        table[slot] = np.arange(len(ctas_s))
        if not np.array_equal(table[slot], np.arange(len(ctas_s))):
            raise ValueError("profile.ctas has duplicate (launch, cta) rows")
        ok = icid < width[ilr + 1]
        rank = np.where(ok, table[np.where(ok, base[ilr] + icid, 0)], -1)
        if not len(rank) or rank.min() >= 0:
            return rank
        bad = int(np.flatnonzero(rank < 0)[0])
    else:  # look (launch rank, cta id) up among the CTAs sorted by that key
        key = (lr_s << 32) | cid
        by_key = np.argsort(key, kind="stable")
        if len(key) and np.any(np.diff(key[by_key]) == 0):
            raise ValueError("profile.ctas has duplicate (launch, cta) rows")
        ikey = (ilr << 32) | icid
        pos = np.minimum(np.searchsorted(key[by_key], ikey), max(len(key) - 1, 0))
        if not len(ikey) or (len(key) and np.array_equal(key[by_key][pos], ikey)):
            return by_key[pos].astype(np.int64) if len(ikey) else np.zeros(0, np.int64)
        bad = int(np.flatnonzero(~np.isin(ikey, key))[0])
    raise ValueError(f"interval {int(first[bad])} refers to launch {int(launch_ids[bad])} CTA {int(cta_ids[bad])}, "
                     "which is missing from profile.ctas")


def _pack(keys: list[np.ndarray]) -> np.ndarray | None:
    """Pack non-negative integer keys (major first) into one int64, or None if > 63 bits."""
    shift, packed = 0, None
    for k in reversed(keys):
        k = np.asarray(k, np.int64)
        width = int(k.max()).bit_length() if len(k) else 0
        if len(k) and int(k.min()) < 0:
            return None
        if shift + width > 63:
            return None
        packed = k << shift if packed is None else packed | (k << shift)
        shift += width
    return packed


def _argsort_keys(major: list[np.ndarray], minor) -> np.ndarray:
    """Stable order by ``major`` keys then ``minor`` keys (both most significant first).

    The major keys are packed into one int64; with the row index in the low bits the keys
    are unique, so a plain ``np.sort`` (SIMD, ~10x a stable argsort on shuffled input) gives
    the stable order.  ``minor(idx)`` returns the minor keys of rows ``idx`` only: they
    reorder runs of equal major keys, which are rare, so they are computed for those alone.
    """
    n = len(major[0]) if major else 0
    packed = _pack(major)
    if packed is None:
        m = minor(np.arange(n))
        return np.lexsort(tuple(reversed(m)) + tuple(reversed(major)))
    pos_bits = max(n.bit_length(), 1)
    top = int(packed.max()).bit_length() if n else 0
    if top + pos_bits <= 63:
        order = np.sort((packed << pos_bits) | np.arange(n, dtype=np.int64)) & ((1 << pos_bits) - 1)
    else:
        order = np.argsort(packed, kind="stable")
    if n < 2:
        return order
    ps = packed[order]
    eq = ps[1:] == ps[:-1]
    if eq.any():
        tie = np.zeros(n, bool)
        tie[1:] |= eq
        tie[:-1] |= eq
        at = np.flatnonzero(tie)
        sub = order[at]
        order[at] = sub[np.lexsort(tuple(reversed(minor(sub))) + (ps[at],))]
    return order


def _event_sequence(track_keys: list[np.ndarray], start: np.ndarray, end: np.ndarray,
                    depth: np.ndarray):
    """Order the BEGIN/END events of intervals so that every track nests properly.

    Per track, by time; at equal time ENDs come first (innermost first), then BEGINs
    (outermost first).  A zero-length interval keeps its END right after its BEGIN (an END
    sorted before it would close its parent instead).  Events are numbered 0..n-1 (the
    BEGINs of intervals 0..n-1) and n..2n-1 (their ENDs); returns (event ids in order,
    time of each event id).
    """
    n = len(start)
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    zero = end <= start
    ts = np.concatenate([start, np.where(zero, start, end)])
    phase = np.concatenate([np.ones(n, np.int64), zero.astype(np.int64)])
    d = np.asarray(depth, np.int64)

    def minor(ev):  # tie-breakers of events ``ev`` (see the docstring)
        i, is_end = ev % max(n, 1), ev >= n
        z = zero[i]
        as_end = is_end & ~z  # a real END: innermost (latest start, deepest, last) first
        return [np.where(as_end, -start[i], -end[i]), np.where(as_end, -d[i], d[i]),
                np.where(as_end, -i, i), (is_end & z).astype(np.int64)]

    major = [np.concatenate([k, k]) for k in track_keys] + [ts, phase]
    return _argsort_keys(major, minor), ts


def _event_order(track_keys: list[np.ndarray], start: np.ndarray, end: np.ndarray,
                 depth: np.ndarray):
    """``_event_sequence`` as (interval index, is_end) per event, in order."""
    n = len(start)
    order, _ = _event_sequence(track_keys, start, end, depth)
    return order % max(n, 1), order >= n


def _metadata(profile: Profile, launches: np.ndarray, shift: int, **extra) -> dict:
    """What the reader needs beyond the slices: kernels, launches, session, time base."""
    meta = {
        "format": META_FORMAT,
        "version": META_VERSION,
        "t0_ns": int(profile.t0_ns),
        "shift_ns": int(shift),
        "session": profile.session,
        "kernels": [{"name": k.name, "scopes": list(k.scopes), "num_warps": k.num_warps,
                     "granularity": k.granularity, "unit_warps": k.unit_warps,
                     "capacity": k.capacity, "meta": k.meta} for k in profile.kernels],
        "launches": {name: launches[name].tolist() for name in LAUNCH_DTYPE.names},
    }
    meta.update(extra)
    return meta


def _meta_json(meta: dict) -> str:
    """Deterministic strict JSON (sorted keys; nan/inf become null, which JSON lacks)."""
    return json.dumps(plain(meta), sort_keys=True, allow_nan=False,
                      separators=(",", ":"), ensure_ascii=False)


def _check_meta(meta, path) -> dict:
    if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
        raise ValueError(f"{path}: not a proton-lite trace (no proton-lite metadata found)")
    if meta.get("version") != META_VERSION:
        raise ValueError(f"{path}: proton-lite trace version {meta.get('version')!r} is not supported "
                         f"(this reader knows version {META_VERSION}); write it again from the capture "
                         "with `proton-lite trace CAPTURE.plraw`")
    return meta


def _kernels_from_meta(meta: dict) -> list[KernelInfo]:
    return [KernelInfo(name=k["name"], scopes=list(k["scopes"]), num_warps=k["num_warps"],
                       granularity=k["granularity"], unit_warps=k["unit_warps"],
                       capacity=k["capacity"], meta=k["meta"]) for k in meta["kernels"]]


def _launches_from_meta(meta: dict) -> np.ndarray:
    cols = meta["launches"]
    n = len(cols["launch"])
    out = np.zeros(n, LAUNCH_DTYPE)
    for name in LAUNCH_DTYPE.names:
        if n and name in cols:  # traces written before a column existed leave it 0
            out[name] = np.asarray(cols[name], dtype=LAUNCH_DTYPE[name])
    return out


def _scope_names(kernel: KernelInfo, max_scope: int) -> list[str]:
    """The kernel's scope names, padded with ``scope N`` for ids beyond its table."""
    names = list(kernel.scopes)
    return names + [f"scope {s}" for s in range(len(names), max_scope + 1)]


def _nesting(track: np.ndarray, start: np.ndarray, end: np.ndarray, depth: np.ndarray, what):
    """Per-track event sequence (see ``_event_sequence``) and the nesting level at each BEGIN.

    Both formats need the slices of one track to nest: Perfetto's SLICE_END closes the
    innermost open slice, and crossing Chrome ``X`` events are dropped.  An interval nests
    iff the level before its BEGIN equals the level after its END (the first END that does
    not close the innermost open slice leaves that one open).  ``what(i)`` names the track
    of interval ``i`` for the error.  Returns (event ids in order, time of each event id,
    level before each interval's BEGIN).
    """
    n = len(start)
    if np.any(end < start):
        bad = int(np.flatnonzero(end < start)[0])
        raise ValueError(f"{what(bad)}: a slice ends before it starts ({int(start[bad])} > {int(end[bad])} ns)")
    order, ts = _event_sequence([track], start, end, depth)
    level = np.empty(2 * n, np.int64)  # level after each event
    level[order] = np.cumsum(np.where(order >= n, -1, 1))
    before_begin = level[:n] - 1
    crossing = before_begin != level[n:]
    if crossing.any():
        bad = int(np.flatnonzero(crossing)[0])
        raise ValueError(f"{what(bad)}: scopes overlap without nesting on one track "
                         f"(interval [{int(start[bad])}, {int(end[bad])}] ns); they need distinct lanes")
    return order, ts, before_begin


def _unique(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for non-negative keys below ``size``.

    With a small key space a presence table replaces the sort.
    """
    keys = np.asarray(keys, np.int64)
    if not len(keys) or size > _dense_limit(keys):
        return np.unique(keys, return_inverse=True)
    present = np.zeros(size, bool)
    present[keys] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present), rank[keys]


def _pack_columns(arrays: dict[str, np.ndarray]) -> dict:
    """Numeric columns as one compact JSON-able value (exact; dtypes kept).

    Integer columns are delta-coded (wrapping), every column byte-shuffled, the lot
    zlib-compressed and base64-encoded: per-CTA clocks and rates cost a few bytes each.
    """
    import base64
    import zlib
    parts, cols = [], []
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        a = a.astype(dt, copy=False)
        if a.dtype.kind in "iu" and len(a):
            u = a.view(f"u{a.dtype.itemsize}")
            a = np.concatenate([u[:1], u[1:] - u[:-1]])
        parts.append(a.view(np.uint8).reshape(len(a), a.dtype.itemsize).T.tobytes())
        cols.append([name, dt.str])
    blob = zlib.compress(b"".join(parts), 6)
    n = len(next(iter(arrays.values()))) if arrays else 0
    return {"rows": n, "columns": cols, "data": base64.b64encode(blob).decode("ascii")}


def _unpack_columns(packed: dict) -> dict[str, np.ndarray]:
    import base64
    import zlib
    raw = zlib.decompress(base64.b64decode(packed["data"]))
    n, off, out = int(packed["rows"]), 0, {}
    for name, dts in packed["columns"]:
        dt = np.dtype(dts)
        size = n * dt.itemsize
        a = np.frombuffer(raw[off:off + size], np.uint8).reshape(dt.itemsize, n).T.copy().view(dt).ravel()
        off += size
        if dt.kind in "iu" and n:
            a = np.cumsum(a.view(f"u{dt.itemsize}"), dtype=f"u{dt.itemsize}").view(dt)
        out[name] = a
    if off != len(raw):
        raise ValueError("packed columns: size mismatch")
    return out


def _cta_extras(ctas_sorted: np.ndarray, extent_lo: np.ndarray) -> dict:
    """The CTA fields that the slices do not carry, in ``_cta_layout`` order, and how long
    before its start each CTA's slot extent begins (the reader needs it to give intervals
    their CTA: ``rows.cta_by_time``; 0 unless a unit recorded before the CTA's start)."""
    return _pack_columns({"start_clock": ctas_sorted["start_clock"],
                          "cycles_per_ns": ctas_sorted["cycles_per_ns"],
                          "measured_cycles_per_ns": ctas_sorted["measured_cycles_per_ns"],
                          "finished_units": ctas_sorted["finished_units"],
                          "extent_lead_ns": ctas_sorted["start_ns"].astype(np.int64) - extent_lo})


def _ordered(submit, tasks, ahead: int):
    """Yield the results of ``tasks`` in order, submitting up to ``ahead`` beyond the one
    being waited for (``submit`` returns a future); the window bounds memory."""
    window = deque()
    for t in tasks:
        window.append(submit(t))
        if len(window) > ahead:
            yield window.popleft().result()
    while window:
        yield window.popleft().result()


def _run_ordered(tasks, workers: int):
    """Yield the results of ``tasks`` (callables) in order, a few computed ahead in threads.

    numpy's sorting, copying and masking and zlib release the GIL, so tasks really run
    in parallel.
    """
    if workers <= 1:
        for t in tasks:
            yield t()
        return
    with ThreadPoolExecutor(workers) as ex:
        yield from _ordered(ex.submit, tasks, 2 * workers)


def _workers() -> int:
    """Threads for a writer: every core, up to 16 (the work is numpy and zlib, which release
    the GIL; each thread holds one piece's temporaries, ~50 MB)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 16))
