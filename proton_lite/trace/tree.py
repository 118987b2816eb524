"""Where every launch, CTA and interval of a profile sits in a trace, shared by both writers
and the reader: launches in order, CTAs by (launch, SM, CTA id) (by GPU first in the sm
layout, ``plan``) with each interval's CTA,
the launch titles, the time shift that keeps timestamps unsigned, scope names."""
from __future__ import annotations

import numpy as np

from proton_lite.profile_data import KernelInfo, Profile
from proton_lite.trace import cta_order_c
from proton_lite.trace.cta_view import CtaView
from proton_lite.trace.interval_runs import key_parts, run_starts

CTA_PART = 1 << 16  # CTAs per part sorted on a worker


def launch_titles(kernels: list[KernelInfo], launches) -> list[str]:
    """Every launch's track / process title, e.g. ``#3 matmul grid=(32,32,1) warps=8``, ``...
    graph 1 replay 17`` for a replay of a CUDA graph, and ``... GPU 1`` where the launches ran
    on several GPUs; made from the columns as lists (a numpy row's fields read one by one took
    ~5 us a launch)."""
    show_device = _several_devices(launches)
    if not len(launches):
        return []
    cols = [launches[name].tolist() for name in ("launch", "kernel", "grid_x", "grid_y", "grid_z", "graph", "replay",
                                                 "device")]
    out = []
    for launch, k, gx, gy, gz, graph, replay, device in zip(*cols):
        title = f"#{launch} {kernels[k].name} grid=({gx},{gy},{gz}) warps={kernels[k].num_warps}"
        if graph:
            title += f" graph {graph} replay {replay}"
        out.append(title + f" GPU {device}" if show_device else title)
    return out


def _several_devices(launches) -> bool:
    return len(launches) > 0 and bool((launches["device"] != launches["device"][0]).any())


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
    launches = profile.launches[np.argsort(profile.launches["launch"], kind="stable")]  # (order=: every field compared)
    if len(launches) and int(launches["kernel"].max()) >= len(profile.kernels):
        raise ValueError("a launch refers to a kernel index outside profile.kernels")
    if len(launches) > 1 and (launches["launch"][1:] == launches["launch"][:-1]).any():  # (sorted: neighbours)
        raise ValueError("profile.launches has duplicate launch indices")
    return launches


def _dense_limit(*arrays) -> int:
    """Largest lookup table worth building instead of a binary search."""
    return 4 * sum(len(a) for a in arrays) + (1 << 16)


def _launch_table(keys: np.ndarray) -> np.ndarray | None:
    """Each launch id's position in ``keys`` (the sorted launch ids) as a table indexed by id:
    -1 for ids no launch has, and one -1 past the largest (for ids above it, clipped); None
    where the ids are too large for a table."""
    top = int(keys.max()) if len(keys) else -1
    if not 0 <= top < _dense_limit(keys):
        return None
    table = np.full(top + 2, -1, np.int64)
    table[keys] = np.arange(len(keys))
    return table


def _launch_rank(launches: np.ndarray, launch_ids: np.ndarray, what: str) -> np.ndarray:
    """Position in ``launches`` (sorted) of each launch id; unknown ids are an error."""
    if not len(launch_ids):
        return np.zeros(0, np.int64)
    keys = launches["launch"].astype(np.int64)
    table = _launch_table(keys) if launch_ids.dtype.kind == "u" else None
    if table is not None:  # small indices: a table lookup
        pos = table[np.minimum(launch_ids, len(table) - 1)]  # (no 64-bit copy of a column per CTA first)
        if pos.min() < 0:
            raise ValueError(f"{what} refer to a launch missing from profile.launches")
        return pos
    ids = launch_ids.astype(np.int64)
    pos = np.searchsorted(keys, ids)
    pos_c = np.minimum(pos, max(len(keys) - 1, 0))
    if not len(keys) or not np.array_equal(keys[pos_c], ids):
        raise ValueError(f"{what} refer to a launch missing from profile.launches")
    return pos_c.astype(np.int64)


def _cta_layout(profile: Profile, launches: np.ndarray, pmap=map, top=None, lr=None, ranks=None):
    """CTAs sorted launch-major, then SM, then CTA id; and each interval's CTA rank.
    ``top`` (the top group of each launch rank, ``plan.top_groups``): sorted by (top group,
    SM, launch, CTA id) instead, the order of the layout whose SM groups span launches.

    Returns (ctas_sorted, cta_launch_rank, runs); ``ctas_sorted`` is a ``CtaView`` (columns
    gathered when asked, no sorted copy).  Intervals usually come in runs of one CTA (the
    decoder and the reader write them so): each run is looked up once; ``runs`` is (first
    interval of each run, its CTA rank), which every step works from (each interval's rank
    repeated over its run would be 8 bytes an interval; both writers take it piece by piece,
    ``perfetto_pieces.Pieces``).  ``pmap`` runs the passes over all intervals in
    chunks (``interval_runs``); ``lr``: each CTA's launch rank, where the caller has it, and
    ``ranks`` the ``cta_order_c.LaunchRanks`` it came from (rows in (launch, CTA id) order:
    the order by a counting sort in C).
    """
    ctas = profile.ctas
    lr = _launch_rank(launches, ctas["launch"], "CTAs") if lr is None else lr
    fast = cta_order_c.cta_order(ctas, ranks, None if top is None else np.asarray(top, np.int64), pmap) \
        if ranks is not None else None
    if fast is not None:
        order, kept, lr_s = fast
        return _cta_runs(profile, launches, CtaView(ctas, order, pmap, gathered=kept), lr if lr_s is None else lr_s,
                         pmap, distinct=True)  # (rows in strictly increasing (launch, CTA id) order)
    order = _cta_order(ctas, lr, pmap)
    if top is not None and len(order):  # (top, SM) first: a stable sort keeps (launch, CTA id) within,
        # and the launch order's runs (each launch's SMs ascending) make it a merge of sorted runs
        width = int(ctas["smid"].max()) + 1
        top = np.asarray(top, np.int64)
        # (GPU, SM) pairs: numpy's stable sort of 16-bit keys is a radix sort; made in parts, narrow
        key = np.empty(len(order), np.uint16 if (int(top.max()) + 1) * width <= 1 << 16 else np.int64)

        def part(a: int):
            sel = order[a:a + CTA_PART]
            key[a:a + CTA_PART] = top[lr[sel]] * width + ctas["smid"][sel]
        for _ in pmap(part, range(0, len(order), CTA_PART)):
            pass
        order = order[np.argsort(key, kind="stable")]
        del key
    return _cta_runs(profile, launches, CtaView(ctas, order, pmap), lr[order], pmap)


def _cta_runs(profile: Profile, launches: np.ndarray, ctas_s, lr_s: np.ndarray, pmap, distinct: bool = False):
    """``_cta_layout``'s result for CTAs in its order: the runs of one CTA's intervals and each
    run's CTA rank (``distinct``: no two CTA rows share a (launch, CTA id), known already)."""
    iv = profile.intervals
    i_launch, i_cta = iv["launch"], iv["cta"]
    run = run_starts(i_launch, i_cta, pmap)
    if len(iv) or not (distinct or _distinct_ctas(lr_s, ctas_s["cta"])):
        rank = _cta_rank(launches, ctas_s, lr_s, i_launch[run], i_cta[run], run)  # raises on duplicates
    else:  # no interval (kernels without scopes): nothing to look up
        rank = np.zeros(0, np.int64)
    return ctas_s, lr_s, (run, rank)


def _cta_order(ctas: np.ndarray, lr: np.ndarray, pmap=map) -> np.ndarray:
    """The order (launch rank, SM, CTA id) of the CTAs.  CTAs that already come in launch
    order (the decoder's) are sorted in parts of whole launches on ``pmap``."""
    n = len(ctas)
    if n <= CTA_PART or np.any(lr[1:] < lr[:-1]):
        return np.lexsort((ctas["cta"], ctas["smid"], lr)) if n else np.zeros(0, np.int64)
    out = np.empty(n, np.int64)

    def part(b):  # each part's order written in place (no list of parts joined: a second copy)
        a, e = b
        out[a:e] = np.lexsort((ctas["cta"][a:e], ctas["smid"][a:e], lr[a:e]))
        out[a:e] += a
    for _ in pmap(part, key_parts(lr, CTA_PART)):
        pass
    return out


def _distinct_ctas(lr: np.ndarray, cid: np.ndarray) -> bool:
    """Whether no two CTA rows share (launch rank, CTA id), counted in a table where the ids
    are dense enough (False otherwise: ``_cta_rank`` decides)."""
    if not len(lr):
        return True
    width = int(cid.max()) + 1
    bound = (int(lr.max()) + 1) * width
    if bound > _dense_limit(lr):
        return False
    return int(np.bincount(lr.astype(np.int64) * width + cid, minlength=1).max()) <= 1


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


def _scope_names(kernel: KernelInfo, max_scope: int) -> list[str]:
    """The kernel's scope names, padded with ``scope N`` for ids beyond its table."""
    names = list(kernel.scopes)
    return names + [f"scope {s}" for s in range(len(names), max_scope + 1)]


def _scope_note(kernel: KernelInfo, name: str) -> str | None:
    """The note the pass left on scope ``name`` of ``kernel`` (``pipelined``: the scope times
    a wait, passes/pipelining.py; ``unpipelined``: its loop was given one stage on request,
    passes/unpipeline.py), or None; both writers put it on the scope's slices."""
    notes = list(kernel.meta.get("pipelined") or ()) + list(kernel.meta.get("unpipelined") or ())
    return next((e["message"] for e in notes
                 if isinstance(e, dict) and e.get("scope") == name and e.get("message")), None)
