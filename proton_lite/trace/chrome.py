"""``NAME.json``: the Chrome Trace Event Format, for tools that do not read Perfetto protobuf.

Same tree as the .pftrace, in the only two levels JSON has: one process per (launch, SM),
named ``<launch title> SM <id>`` and sorted in launch then SM order; one thread per CTA
(the CTA-lifetime slice) and per (CTA, unit, lane), sorted CTA by CTA.  pids and tids are
small integers, tids unique over the file and never equal to a pid (a thread whose tid
equals its pid is drawn first as the main thread).  Every slice is an ``X`` event with
``ts``/``dur`` in microseconds written as ``us.nnn`` (exact ns, relative, non-negative)
and args ``cycles``, ``sm``, ``cta``, ``unit``, ``depth`` (plus ``lane`` > 0, and ``scope``
where the name alone would not give the scope id back).  The ``_metadata`` JSON sits in
``otherData.proton_lite``, which the trace processor ignores.

Why the lines are built as byte columns (``_proto.Rows``) rather than with ``%``: string
formatting costs microseconds per event in Python, several seconds per million slices.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from proton_lite.profile_data import Profile
from proton_lite.trace import (_cta_extras, _cta_layout, _cta_name, _launch_title, _meta_json, _metadata, _nesting,
                               _run_ordered, _scope_names, _several_devices, _sorted_launches, _time_shift,
                               _unit_tracks, _workers)
from proton_lite.trace._proto import Rows

CTA_SLICE_NAME = "CTA"
CHUNK = 1 << 16  # lines per encoding task


def _times(r: Rows, key: bytes, ns: np.ndarray) -> None:
    """``,"key":<us>.<nnn>`` from integer ns."""
    r.const(b',"' + key + b'":')
    r.decimal(ns // 1000)
    r.const(b".")
    r.digits3(ns % 1000)


def _int(r: Rows, key: bytes, values, present=None, signed=False) -> None:
    r.const(b',"' + key + b'":', present)
    r.decimal(values, present, signed=signed)


def write_chrome(profile: Profile, path: str | Path, workers: int | None = None, progress=None) -> dict:
    from proton_lite.trace.readback import scope_lookup
    launches = _sorted_launches(profile)
    shift = _time_shift(profile)
    ctas, cta_lr, iv_cta = _cta_layout(profile, launches)
    iv = profile.intervals
    n_iv, n_cta = len(iv), len(ctas)
    kernels = profile.kernels
    k_of_launch = launches["kernel"].astype(np.int64)

    # processes: (launch, SM) in CTA order; threads: each CTA, then its unit/lane tracks
    new_sm = np.ones(n_cta, bool)
    new_sm[1:] = (cta_lr[1:] != cta_lr[:-1]) | (ctas["smid"][1:] != ctas["smid"][:-1])
    cta_pid = np.cumsum(new_sm)  # 1-based
    n_pid = int(cta_pid[-1]) if n_cta else 0
    ut_cta, ut_unit, ut_lane, iv_track = _unit_tracks(profile, iv_cta, n_cta)
    n_ut = len(ut_cta)
    units_before = np.searchsorted(ut_cta, np.arange(n_cta))  # unit tracks of earlier CTAs
    cta_tid = n_pid + 1 + np.arange(n_cta) + units_before  # tids above all pids
    ut_tid = n_pid + 2 + ut_cta + np.arange(n_ut)  # right after their CTA's tid
    first_tid = np.zeros(n_pid + 1, np.int64)
    first_tid[cta_pid[new_sm]] = cta_tid[new_sm]

    cid = ctas["cta"].astype(np.int64)
    sm = ctas["smid"].astype(np.int64)
    grid = np.maximum(np.stack([launches["grid_x"], launches["grid_y"], launches["grid_z"]], 1).astype(np.int64), 1)
    gx, gy, gz = (grid[cta_lr, k] for k in range(3))
    multi = gy * gz > 1
    head = []
    show_device = _several_devices(launches)
    for i in np.flatnonzero(new_sm).tolist():
        pid = int(cta_pid[i])
        la = launches[int(cta_lr[i])]
        title = _launch_title(kernels[int(la["kernel"])], la, show_device) + f" SM {int(sm[i])}"
        head.append(json.dumps({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": title}}))
        head.append(f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}')

    # threads (names need no JSON escaping): the CTA's, then one per unit and lane
    gran = np.array([{"warp": 0, "warpgroup": 1, "cta": 2}[k.granularity] for k in kernels] or [0], np.int64)
    ut_gran = gran[k_of_launch[cta_lr[ut_cta]]] if n_ut else np.zeros(0, np.int64)
    is_cta_t = np.r_[np.ones(n_cta, bool), np.zeros(n_ut, bool)]
    t_cta = np.r_[np.arange(n_cta), ut_cta].astype(np.int64)
    t_tid = np.r_[cta_tid, ut_tid].astype(np.int64)
    t_unit = np.r_[np.zeros(n_cta, np.int64), ut_unit]
    t_lane = np.r_[np.zeros(n_cta, np.int64), ut_lane]
    t_gran = np.r_[np.zeros(n_cta, np.int64), ut_gran]
    by_tid = np.argsort(t_tid, kind="stable")

    def thread_lines(sel: slice) -> bytes:
        o = by_tid[sel]
        c, pid, tid = t_cta[o], cta_pid[t_cta[o]], t_tid[o]
        unit, gr, lane = ~is_cta_t[o], t_gran[o], t_lane[o]
        r = Rows(len(o))
        r.const(b'{"ph":"M","name":"thread_name"')
        _int(r, b"pid", pid)
        _int(r, b"tid", tid)
        r.const(b',"args":{"name":"')
        _cta_name(r, cid[c], gx[c], gy[c], multi[c])
        r.const(b" warp ", unit & (gr == 0))
        r.const(b" warpgroup ", unit & (gr == 1))
        r.decimal(t_unit[o], unit & (gr < 2))
        r.const(b" cta", unit & (gr == 2))
        r.const(b" lane ", lane > 0)
        r.decimal(lane, lane > 0)
        r.const(b'"}},\n{"ph":"M","name":"thread_sort_index"')
        _int(r, b"pid", pid)
        _int(r, b"tid", tid)
        r.const(b',"args":{"sort_index":')
        r.decimal(tid - first_tid[pid])
        r.const(b"}},\n")
        return r.tobytes()

    # slices: check nesting per thread (crossing X events are dropped by the importer)
    track = np.r_[ut_tid[iv_track] if n_iv else np.zeros(0, np.int64), cta_tid].astype(np.int64)
    start = np.r_[iv["start_ns"], ctas["start_ns"]].astype(np.int64) + shift
    end = np.r_[iv["end_ns"], ctas["end_ns"]].astype(np.int64) + shift
    depth = np.r_[iv["depth"], np.zeros(n_cta, np.uint16)].astype(np.int64)

    def where(i: int) -> str:
        if i >= n_iv:
            return f"launch {int(ctas['launch'][i - n_iv])} CTA {int(ctas['cta'][i - n_iv])}"
        return (f"launch {int(iv['launch'][i])} CTA {int(iv['cta'][i])} unit {int(iv['unit'][i])} "
                f"lane {int(iv['lane'][i])}")
    seq, _, _ = _nesting(track, start, end, depth, where)
    order = seq[seq < len(start)]  # slices in BEGIN order: per thread, by time, outer first

    # names per (kernel, scope); an explicit scope arg where the reader's rule would miss
    iv_kernel = k_of_launch[cta_lr[iv_cta]] if n_iv else np.zeros(0, np.int64)
    n_scopes = int(iv["scope"].max()) + 1 if n_iv else 1
    pairs, pair_idx = np.unique(iv_kernel * n_scopes + iv["scope"].astype(np.int64), return_inverse=True)
    names, explicit = [json.dumps(CTA_SLICE_NAME).encode()], [False]
    for key in pairs.tolist():
        k, sc = divmod(key, n_scopes)
        name = _scope_names(kernels[k], sc)[sc]
        names.append(json.dumps(name).encode())
        try:
            explicit.append(scope_lookup(kernels[k])(name) != sc)
        except ValueError:
            explicit.append(True)
    name_idx = np.r_[pair_idx + 1, np.zeros(n_cta, np.int64)]
    explicit = np.array(explicit, bool)
    row = np.r_[iv_cta, np.arange(n_cta)].astype(np.int64)  # CTA of each slice
    cycles = np.r_[iv["cycles"].astype(np.int64), (ctas["end_clock"] - ctas["start_clock"]).view(np.int64)]
    unit = np.r_[iv["unit"], np.zeros(n_cta, np.uint32)].astype(np.int64)
    lane = np.r_[iv["lane"], np.zeros(n_cta, np.uint16)].astype(np.int64)
    scope = np.r_[iv["scope"], np.zeros(n_cta, np.uint32)].astype(np.int64)
    is_iv = np.arange(len(start)) < n_iv

    def slice_lines(sel: slice) -> bytes:
        o = order[sel]
        c, s = row[o], is_iv[o]
        r = Rows(len(o))
        r.const(b'{"ph":"X","name":')
        r.table(names, name_idx[o])
        _times(r, b"ts", start[o])
        _times(r, b"dur", end[o] - start[o])
        _int(r, b"pid", cta_pid[c])
        _int(r, b"tid", track[o])
        r.const(b',"args":{"cycles":')
        r.decimal(cycles[o], signed=True)
        _int(r, b"sm", sm[c])
        _int(r, b"cta", cid[c])
        _int(r, b"unit", unit[o], s)
        _int(r, b"depth", depth[o], s)
        _int(r, b"lane", lane[o], lane[o] > 0)
        _int(r, b"scope", scope[o], s & explicit[name_idx[o]])
        r.const(b"}},\n")
        return r.tobytes()

    processes = [[int(launches["launch"][int(cta_lr[i])]), int(sm[i])] for i in np.flatnonzero(new_sm)]
    meta = _metadata(profile, launches, shift, processes=processes, cta_slice_name=CTA_SLICE_NAME,
                     ctas=_cta_extras(ctas))
    # CTA slices first (their order puts CTAs after the intervals), then the intervals
    order = np.r_[order[order >= n_iv], order[order < n_iv]]
    tasks = [lambda sel=slice(lo, lo + CHUNK): thread_lines(sel) for lo in range(0, n_cta + n_ut, CHUNK)]
    tasks += [lambda sel=slice(lo, lo + CHUNK): slice_lines(sel) for lo in range(0, len(order), CHUNK)]
    workers = _workers() if workers is None else workers
    size, pending = 0, b""
    with open(path, "wb") as f:
        def put(data: bytes) -> None:  # one piece held back: the last line loses its comma
            nonlocal size, pending
            if data:
                f.write(pending)
                size += len(pending)
                pending = data
        put(('{"otherData":{"proton_lite":' + _meta_json(meta) + '},\n"traceEvents":[\n').encode())
        put("".join(line + ",\n" for line in head).encode())
        for done, data in enumerate(_run_ordered(tasks, workers), start=1):
            put(data)
            if progress is not None:  # (done, total) as batches of events are written
                progress(done, len(tasks))
        tail = (pending[:-2] + b"\n" if pending.endswith(b",\n") else pending) + b"]}\n"
        f.write(tail)
        size += len(tail)
    n_slices = n_iv + n_cta
    return {"format": "chrome", "path": str(path), "bytes": size, "slices": n_slices, "processes": n_pid,
            "threads": n_cta + n_ut, "bytes_per_slice": size / n_slices if n_slices else 0.0}
