"""The proton-lite metadata embedded in a trace (kernels, launches, session, time base, the
per-CTA clocks), so that ``summary`` and ``diff`` can read a trace back."""
from __future__ import annotations

import json
import secrets
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from proton_lite.json_values import plain
from proton_lite.profile_data import LAUNCH_DTYPE, KernelInfo, Profile
from proton_lite.trace.text_c import LIST_MIN, int_list_json

META_FORMAT = "proton-lite-trace"  # marks files written here; the reader refuses others
META_VERSION = 2  # 2: CTAs packed into slots (trace/rows.py); 1: one track per CTA


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
        "launches": {name: launches[name] for name in LAUNCH_DTYPE.names},  # (columns: _meta_json lists them)
    }
    meta.update(extra)
    return meta


def _meta_json(meta: dict) -> str:
    """Deterministic strict JSON (sorted keys; nan/inf become null, which JSON lacks): ``meta_json_parts`` joined."""
    return b"".join(meta_json_parts(meta)).decode()


def meta_json_parts(meta: dict) -> list[bytes]:
    """The metadata as deterministic strict JSON, in byte strings to write one after the other:
    the text of ``json.dumps(plain(meta), sort_keys=True, ...)``, its large parts made apart and
    never joined (``_Spots``): integer columns of a dict (the launch table: 65 K launches, ~1.4 M
    integers) by ``text_c``, and the packed CTA columns' streams (4 M CTAs: 42 MB of base64) as
    they are.  Through ``json.dumps`` and as one string encoded and framed, these took ~0.4 s of
    one thread holding the GIL at the head of the trace, which every other step waits behind.
    ``meta["ctas"]`` may be a function that returns the packed columns: the rest is laid out
    before it is called (the .pftrace writer's task, while the columns are still packed)."""
    spots = _Spots()
    meta = spots.columns(meta)
    if "ctas" in meta:
        ctas = meta["ctas"]
        meta["ctas"] = spots.spot(lambda: _packed_parts(ctas() if callable(ctas) else ctas))
    return spots.json_parts(meta)


class _Spots:
    """Placeholders in a value for ``json.dumps``, each replaced in its text by byte strings
    made apart (a list, or a function that returns one, called in the text's order)."""

    def __init__(self):
        self.token = f"\x00{secrets.token_hex(8)}:"  # (no value of the user's holds it)
        self.parts: dict[str, object] = {}

    def spot(self, parts) -> str:
        key = f"{self.token}{len(self.parts)}\x00"
        self.parts[json.dumps(key)] = parts  # (its JSON form: what the text holds)
        return key

    def columns(self, value):
        """``value`` with every long integer array in it, at any depth of dicts, a placeholder."""
        if isinstance(value, dict):
            return {k: self.columns(v) for k, v in value.items()}
        if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu" and len(value) >= LIST_MIN:
            return self.spot([int_list_json(value).encode()])
        return value

    def json_parts(self, value) -> list[bytes]:
        text = json.dumps(plain(value), sort_keys=True, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
        out, at = [], 0
        for where, key in sorted((text.index(key), key) for key in self.parts):
            parts = self.parts[key]
            out.append(text[at:where].encode())
            out += parts() if callable(parts) else parts
            at = where + len(key)
        out.append(text[at:].encode())
        return out


def _packed_parts(packed: dict) -> list[bytes]:
    """``_packing``'s value as JSON bytes: its streams (base64: nothing to escape) quoted as they are."""
    data = packed["data"]
    streams = [d.encode() if isinstance(d, str) else d for d in ([data] if isinstance(data, (str, bytes)) else data)]
    quoted = [b'"'] + [part for d in streams for part in (d, b'","')][:-1] + [b'"'] if streams else []
    spots = _Spots()
    rest = dict(packed, data=spots.spot(quoted if isinstance(data, (str, bytes)) else [b"["] + quoted + [b"]"]))
    return spots.json_parts(rest)


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


PACK_PIECE = 8 << 20  # shuffled bytes beyond which the packed columns are deflated in pieces
PACK_ROWS = 1 << 15  # rows per piece: a piece is one byte plane of that many rows


def _pack_columns(arrays: dict[str, np.ndarray], workers: int = 1, fetch=None) -> dict:
    """Numeric columns as one compact value (``_packing``'s, on ``workers`` threads)."""
    with ThreadPoolExecutor(max(1, workers)) as pool:
        return _packing(arrays, pool.submit, fetch)()


def _packing(arrays: dict[str, np.ndarray], submit, fetch=None):
    """Numeric columns as one compact value for the metadata's JSON (exact; dtypes kept; its streams
    base64 bytes, which ``meta_json_parts`` writes as they are): its blocks queued
    at once by ``submit`` (a zero-argument callable in, a future out), and a function that
    waits for them and returns the value.

    Integer columns are delta-coded (wrapping), every column byte-shuffled (its byte planes
    one after the other), the lot deflated (a zlib stream) and base64-encoded: per-CTA
    clocks and rates cost a few bytes each.  Beyond ``PACK_PIECE`` bytes, ``data`` is a list
    of streams whose contents, joined, are the same bytes: each one byte plane of PACK_ROWS
    rows, made a block of rows at a time (every column's planes) by the tasks queued, so
    that the whole (4 M CTAs: 144 MB) is never held.  ``fetch(lo, hi)``: the rows [lo, hi) of
    every column (in ``arrays``' sorted names' order) where the caller reads them at once (the
    CTA rows: each read once, not once a column); else each column is sliced.
    """
    import base64

    from proton_lite.trace.native_events import deflate

    names = sorted(arrays)
    little = [_little(np.dtype(arrays[name].dtype)) for name in names]
    n = len(arrays[names[0]]) if names else 0
    fetch = fetch or (lambda lo, hi: [arrays[name][lo:hi] for name in names])

    def planes(rows, i: int, a: int) -> list[bytes]:
        """Column i's ``rows`` (from row max(a - 1, 0)): each byte plane's bytes of the rows
        from ``a`` (little-endian, integers as deltas)."""
        w = np.asarray(rows).astype(little[i], copy=False).view(f"u{little[i].itemsize}")
        if little[i].kind in "iu":  # wrapping deltas, the first row kept
            w = w[1:] - w[:-1] if a else np.r_[w[:1], w[1:] - w[:-1]]
        elif a:
            w = w[1:]
        size = little[i].itemsize  # byte b of a little-endian word is its plane b: one transpose
        by_plane = np.ascontiguousarray(np.ascontiguousarray(w, f"<u{size}").view(np.uint8).reshape(-1, size).T)
        return [plane.tobytes() for plane in by_plane]

    def packed(data: bytes) -> bytes:  # trace/deflate.py: zlib's level 6 was 19% smaller, 5x slower than level 1
        return base64.b64encode(deflate(data))  # (bytes: meta_json_parts writes them as they are)
    cols = [[name, dt.str] for name, dt in zip(names, little)]
    if n * sum(dt.itemsize for dt in little) <= PACK_PIECE:
        def whole() -> dict:
            got = fetch(0, n)
            data = b"".join(b"".join(planes(got[i], i, 0)) for i in range(len(names)))
            return {"rows": n, "columns": cols, "data": packed(data)}
        one = submit(whole)
        return one.result

    def block(a: int) -> list[list[str]]:  # rows [a, a + PACK_ROWS): each column's planes
        got = fetch(max(a - 1, 0), min(a + PACK_ROWS, n))
        return [[packed(p) for p in planes(got[i], i, a)] for i in range(len(names))]
    starts = range(0, n, PACK_ROWS)
    blocks = [submit(lambda a=a: block(a)) for a in starts]

    def joined() -> dict:  # in the order of the shuffled bytes: column, byte plane, rows
        done = [f.result() for f in blocks]
        data = [done[k][i][b] for i, dt in enumerate(little) for b in range(dt.itemsize) for k in range(len(starts))]
        return {"rows": n, "columns": cols, "data": data}
    return joined


def _little(dt: np.dtype) -> np.dtype:
    return dt.newbyteorder("<") if dt.byteorder == ">" else dt


def _unpack_columns(packed: dict) -> dict[str, np.ndarray]:
    import base64
    import zlib
    data = packed["data"]
    raw = b"".join(zlib.decompress(base64.b64decode(d)) for d in ([data] if isinstance(data, (str, bytes)) else data))
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


def _cta_extras(ctas_sorted, extent_lo: np.ndarray, workers: int = 1) -> dict:
    """The CTA fields that the slices do not carry (``cta_extras_queued``), on ``workers`` threads."""
    with ThreadPoolExecutor(max(1, workers)) as pool:
        return cta_extras_queued(ctas_sorted, extent_lo, pool.submit)()


def cta_extras_queued(ctas_sorted, extent_lo: np.ndarray, submit):
    """The CTA fields that the slices do not carry, in ``_cta_layout`` order, and how long
    before its start each CTA's slot extent begins (the reader needs it to give intervals
    their CTA: ``rows.cta_by_time``; 0 unless a unit recorded before the CTA's start, and 0
    throughout where ``extent_lo`` is None: a profile without intervals): its
    blocks queued by ``submit`` at once (the .pftrace writer queues them on its pool ahead of
    the CTA sequence's parts, which would otherwise hold up the head of the file that waits for
    them, but behind the sequence's cut, which every part waits for), and a function that
    returns the packed value."""
    fields = ("cycles_per_ns", "finished_units", "measured_cycles_per_ns", "start_clock")  # (sorted, as packed)
    column = ctas_sorted.column  # ``plan.ctas``, a CtaView: the rows of a block read once for all its fields
    lo = column("start_ns") if extent_lo is None else extent_lo  # (without intervals an extent starts at its CTA)

    def fetch(lo: int, hi: int) -> list:
        got = ctas_sorted.take_rows(fields, slice(lo, hi))
        lead = np.zeros(hi - lo, np.int64) if extent_lo is None else \
            np.subtract(ctas_sorted.take("start_ns", slice(lo, hi)), extent_lo[lo:hi], dtype=np.int64)
        return [got["cycles_per_ns"], lead, got["finished_units"], got["measured_cycles_per_ns"], got["start_clock"]]
    return _packing({"start_clock": column("start_clock"),
                     "cycles_per_ns": column("cycles_per_ns"),
                     "measured_cycles_per_ns": column("measured_cycles_per_ns"),
                     "finished_units": column("finished_units"),
                     "extent_lead_ns": _Lead(column("start_ns"), lo)}, submit, fetch)


class _Lead:
    """start - extent_lo, made for the rows sliced (a whole column is 8 bytes a CTA, all 0
    where no unit recorded before its CTA's start)."""
    dtype = np.dtype(np.int64)

    def __init__(self, start, lo: np.ndarray):
        self.start, self.lo = start, lo

    def __len__(self) -> int:
        return len(self.lo)

    def __getitem__(self, rows: slice) -> np.ndarray:
        return np.subtract(self.start[rows], self.lo[rows], dtype=np.int64)


def layout_meta(plan) -> dict:
    """The track tree a trace was written in (``plan.TracePlan``): the reader's order of the
    per-CTA columns and where it finds a CTA's launch depend on it.  ``top``: in the sm
    layout, the top group (GPU) of each launch, in launch order."""
    out = {"name": plan.layout}
    if plan.layout == "sm":
        out["top"] = np.asarray(plan.tops.of_launch)  # (a column: meta_json_parts lists it)
    return out


def layout_of(meta: dict) -> tuple[str, np.ndarray | None]:
    """(layout name, top group of each launch or None) of a trace's metadata; traces written
    before there were two layouts are in the launch layout."""
    lay = meta.get("layout") or {"name": "launch"}
    if lay.get("name") not in ("launch", "sm"):
        raise ValueError(f"unknown track layout {lay.get('name')!r} in the trace's metadata")
    top = np.asarray(lay["top"], np.int64) if lay["name"] == "sm" else None
    return lay["name"], top
