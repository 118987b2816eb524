"""``NAME.json``: the Chrome Trace Event Format, for tools that do not read Perfetto protobuf.

Same tree as the .pftrace (see ``rows``), in the only two levels JSON has: per launch one
process named by its title (``_launch_title``) holding a ``resident CTAs`` counter (on
the GPU) and a ``launch`` thread with one slice over the launch (what its row shows while
collapsed: Perfetto's UI draws a collapsed process as a summary of its threads' slices),
then one process per (launch, SM) named ``<launch title> SM <id>`` with the same counter
for that SM; pids in launch, then SM order.  In the sm layout (``plan``) the top processes
are GPUs (``GPU 0 · 1,024 launches of 3 kernels``, with ``launches`` threads of launch
slices), the SM processes ``GPU 0 SM 12``, and every slice has a ``launch`` arg.  In an
SM's process, one thread per slot (``slot 2``: the lifetime slices of the CTAs packed into
it) and per (slot, unit, lane) (``slot 2 warp 3``), sorted slot by slot.  pids and tids
are small integers, tids unique over the file and never equal to a pid (a thread whose tid
equals its pid is drawn first as the main thread).  Every slice is an ``X`` event with ``ts``/``dur`` in microseconds
written as ``us.nnn`` (exact ns, relative, non-negative); CTA and scope slices carry
args ``cycles``, ``sm``, ``cta``, and scopes ``unit``, ``depth`` (plus ``lane`` > 0,
and ``scope`` where the name alone would not give the scope id back); a CTA slice is
named ``CTA 37`` (``CTA 37 (5,1,0)`` in a 2-D grid).  Counters are ``C`` events.  The
``_metadata`` JSON sits in ``otherData.proton_lite``, which the trace processor ignores.

Why the lines are built as byte columns (``_proto.Rows``) rather than with ``%``: string
formatting costs microseconds per event in Python, several seconds per million slices.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from proton_lite.profile_data import Profile
from proton_lite.stop_threads import stop_threads
from proton_lite.trace.meta import _cta_extras, _meta_json, _metadata, layout_meta
from proton_lite.trace.nesting import _nesting
from proton_lite.profile_merge import capture_titles, launch_captures
from proton_lite.trace.plan import lane_name, launch_names, launch_spans, plan_trace
from proton_lite.trace.tree import _scope_names, _scope_note, _sorted_launches, _time_shift, launch_titles
from proton_lite.trace.workers import _run_ordered
from proton_lite.trace._proto import Rows
from proton_lite.trace.rows import SLOT_NAME, cta_name, grid_of_ctas, resident_changes, unit_names, unit_tracks

CHUNK = 1 << 16  # lines per encoding task
COUNTER_NAME, COUNTER_ARG = "resident", "CTAs"  # the importer names the track "resident CTAs"


def _json(value) -> str:
    """JSON with text as UTF-8, not ``\\u`` escapes: Perfetto's JSON importer (v52) shows
    those as written (``\\u00b7`` for ``·``)."""
    return json.dumps(value, ensure_ascii=False)


def _times(r: Rows, key: bytes, ns: np.ndarray) -> None:
    """``,"key":<us>.<nnn>`` from integer ns."""
    r.const(b',"' + key + b'":')
    r.decimal(ns // 1000)
    r.const(b".")
    r.digits3(ns % 1000)


def _us(ns: int) -> str:
    """µs with exact ns, for a few lines written by hand (what ``_times`` writes)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _int(r: Rows, key: bytes, values, present=None, signed=False) -> None:
    r.const(b',"' + key + b'":', present)
    r.decimal(values, present, signed=signed)


def _counter_lines(pid: np.ndarray, t: np.ndarray, value: np.ndarray) -> bytes:
    """``C`` events: the resident-CTA count of process ``pid`` from time ``t`` (ns) on."""
    r = Rows(len(pid))
    r.const(b'{"ph":"C","name":"' + COUNTER_NAME.encode() + b'"')
    _int(r, b"pid", pid)
    _times(r, b"ts", t)
    r.const(b',"args":{"' + COUNTER_ARG.encode() + b'":')
    r.decimal(value)
    r.const(b"}},\n")
    return r.tobytes()


def _after_capture(profile: Profile, titles: list[str], capture) -> list[str]:
    """``titles`` after the name of their capture (``capture``: the capture of each) in a
    merge of several captures (one per rank), where a process must say which; as they are else."""
    if capture is None:
        return titles
    names = capture_titles(profile.session["merged_from"])
    return [f"{names[int(c)]} {t}" for c, t in zip(capture, titles)]


def write_chrome(profile: Profile, path: str | Path, workers: int | None = None, progress=None,
                 layout: str = "auto") -> dict:
    from proton_lite.trace.readback import scope_lookup
    launches = _sorted_launches(profile)
    shift = _time_shift(profile)
    plan = plan_trace(profile, launches, layout)
    ctas, cta_lr, iv_cta, lay, tops = plan.ctas, plan.cta_lr, plan.iv_cta, plan.lay, plan.tops
    by_launch = plan.layout == "launch"
    iv = profile.intervals
    n_iv, n_cta = len(iv), len(ctas)
    kernels = profile.kernels
    k_of_launch = launches["kernel"].astype(np.int64)
    launch_no = launches["launch"].astype(np.int64)
    n_tops = len(tops.titles)

    # processes: each top group (a launch, or a GPU), then its (top group, SM) groups; pids 1..
    cta_top = plan.cta_top
    group_top = cta_top[lay.group_first]
    group_pid = np.arange(lay.n_groups) + group_top + 2
    group_bounds = np.searchsorted(group_top, np.arange(n_tops + 1))  # each top group's SM groups
    top_pid = np.arange(n_tops) + 1 + group_bounds[:-1]
    n_pid = n_tops + lay.n_groups
    sm = ctas["smid"].astype(np.int64)
    head, processes = [], []
    titles = _after_capture(profile, tops.titles, tops.capture)
    for g in range(n_tops):
        title = titles[g]
        pids = [(int(top_pid[g]), title, -1)]
        owner = title if by_launch else title.split(" · ")[0]  # "#3 matmul ... SM 12", or "GPU 0 SM 12"
        pids += [(int(group_pid[k]), f"{owner} SM {int(sm[lay.group_first[k]])}", int(sm[lay.group_first[k]]))
                 for k in range(group_bounds[g], group_bounds[g + 1])]
        for pid, name, smid in pids:
            head.append(_json({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}))
            head.append(f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}')
            processes.append([int(launch_no[g]) if by_launch else -1, smid])

    # threads (names need no JSON escaping): each slot, then its unit/lane tracks; tids above all pids
    ut_row, ut_unit, ut_lane, iv_track = unit_tracks(profile, lay.iv_row, lay.n_rows)
    n_rows, n_ut = lay.n_rows, len(ut_row)
    units_before = np.searchsorted(ut_row, np.arange(n_rows))  # unit tracks of earlier slots
    row_tid = n_pid + 1 + np.arange(n_rows) + units_before
    ut_tid = n_pid + 2 + ut_row + np.arange(n_ut)  # right after their slot's tid
    row_pid = group_pid[lay.row_group]
    first_tid = np.zeros(n_pid + 1, np.int64)
    first_tid[row_pid[lay.row_slot == 0]] = row_tid[lay.row_slot == 0]
    unit_labels, ut_name = unit_names(kernels, plan.row_kernel[ut_row], ut_unit, ut_lane)
    is_row_t = np.r_[np.ones(n_rows, bool), np.zeros(n_ut, bool)]
    t_row = np.r_[np.arange(n_rows), ut_row].astype(np.int64)
    t_tid = np.r_[row_tid, ut_tid].astype(np.int64)
    t_name = np.r_[np.zeros(n_rows, np.int64), ut_name]
    by_tid = np.argsort(t_tid, kind="stable")

    def thread_lines(sel: slice) -> bytes:
        o = by_tid[sel]
        row, pid, tid, unit = t_row[o], row_pid[t_row[o]], t_tid[o], ~is_row_t[o]
        r = Rows(len(o))
        r.const(b'{"ph":"M","name":"thread_name"')
        _int(r, b"pid", pid)
        _int(r, b"tid", tid)
        r.const(b',"args":{"name":"' + SLOT_NAME.encode() + b" ")
        r.decimal(lay.row_slot[row])
        r.const(b" ", unit)
        r.table(unit_labels or [b""], t_name[o], unit)
        r.const(b'"}},\n{"ph":"M","name":"thread_sort_index"')
        _int(r, b"pid", pid)
        _int(r, b"tid", tid)
        r.const(b',"args":{"sort_index":')
        r.decimal(tid - first_tid[pid])
        r.const(b"}},\n")
        return r.tobytes()

    # slices: check nesting per thread (crossing X events are dropped by the importer)
    track = np.r_[ut_tid[iv_track] if n_iv else np.zeros(0, np.int64), row_tid[lay.row]].astype(np.int64)
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
    names, explicit, notes = [b""], [False], [b""]
    for key in pairs.tolist():
        k, sc = divmod(key, n_scopes)
        name = _scope_names(kernels[k], sc)[sc]
        names.append(_json(name).encode())
        note = _scope_note(kernels[k], name)
        notes.append(b',"note":' + _json(note).encode() if note else b"")  # passes/pipelining.py
        try:
            explicit.append(scope_lookup(kernels[k])(name) != sc)
        except ValueError:
            explicit.append(True)
    name_idx = np.r_[pair_idx + 1, np.zeros(n_cta, np.int64)]
    explicit = np.array(explicit, bool)
    slice_cta = np.r_[iv_cta, np.arange(n_cta)].astype(np.int64)
    cid = ctas["cta"].astype(np.int64)
    gx, gy, multi = grid_of_ctas(launches, cta_lr)
    launch_names_json = [_json(name)[1:-1].encode() for name in launch_names(kernels, launches)]
    cycles = np.r_[iv["cycles"].astype(np.int64), (ctas["end_clock"] - ctas["start_clock"]).view(np.int64)]
    unit = np.r_[iv["unit"], np.zeros(n_cta, np.uint32)].astype(np.int64)
    lane = np.r_[iv["lane"], np.zeros(n_cta, np.uint16)].astype(np.int64)
    scope = np.r_[iv["scope"], np.zeros(n_cta, np.uint32)].astype(np.int64)

    def slice_lines(sel: slice, of_ctas: bool) -> bytes:
        """Lines of the slices ``order[sel]``: all CTA lifetimes, or all intervals (each kind
        with only its own columns)."""
        o = order[sel]
        c = slice_cta[o]
        r = Rows(len(o))
        r.const(b'{"ph":"X","name":')
        if of_ctas:
            r.const(b'"')
            if by_launch:  # "CTA 37"
                cta_name(r, cid[c], gx[c], gy[c], multi[c])
            else:  # "matmul #3": the CTAs of a launch alike (and coloured alike)
                r.table(launch_names_json, cta_lr[c])
            r.const(b'"')
        else:
            r.table(names, name_idx[o])
        _times(r, b"ts", start[o])
        _times(r, b"dur", end[o] - start[o])
        _int(r, b"pid", group_pid[lay.group[c]])
        _int(r, b"tid", track[o])
        r.const(b',"args":{"cycles":')
        r.decimal(cycles[o], signed=True)
        _int(r, b"sm", sm[c])
        _int(r, b"cta", cid[c])
        if not by_launch:  # SM groups shared by the launches: each slice names its own
            _int(r, b"launch", launch_no[cta_lr[c]])
        if not of_ctas:
            _int(r, b"unit", unit[o])
            _int(r, b"depth", depth[o])
            _int(r, b"lane", lane[o], lane[o] > 0)
            _int(r, b"scope", scope[o], explicit[name_idx[o]])
            if any(notes):
                r.table(notes, name_idx[o])
        r.const(b"}},\n")
        return r.tobytes()

    # counters: resident CTAs per top group (on the GPU) and per SM
    c_t = np.r_[start[n_iv:], end[n_iv:]]
    c_delta = np.r_[np.ones(n_cta, np.int64), -np.ones(n_cta, np.int64)]
    lev, lv = resident_changes(np.r_[cta_top, cta_top], c_t, c_delta)
    gev, gv = resident_changes(np.r_[lay.group, lay.group], c_t, c_delta)
    c_pid = np.r_[top_pid[cta_top[lev % max(n_cta, 1)]], group_pid[lay.group[gev % max(n_cta, 1)]]]
    c_t, c_v = np.r_[c_t[lev], c_t[gev]], np.r_[lv, gv]

    # each launch's span, on a thread of its top group's process: drawn in its row while collapsed
    spans = launch_spans(plan, len(launches))
    sms = np.zeros(len(launches), np.int64)
    if n_cta:
        np.add.at(sms, np.unique(np.stack([cta_lr, sm]), axis=1)[0], 1)
    span_tid = n_pid + 1 + n_rows + n_ut + (spans.row_top[spans.row] if by_launch else spans.row)
    titles_of_launch = _after_capture(profile, launch_titles(kernels, launches),
                                      launch_captures(profile.session, launches["launch"]))
    named = set()
    for k in np.argsort(spans.launch, kind="stable").tolist():
        li, pid, tid = int(spans.launch[k]), int(top_pid[spans.row_top[spans.row[k]]]), int(span_tid[k])
        t0, t1 = int(spans.start[k]) + shift, int(spans.end[k]) + shift
        if tid not in named:
            named.add(tid)
            row = "launch" if by_launch else lane_name(int(spans.lane[k]))
            head.append(f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":"{row}"}}}}')
        which = "" if by_launch else f'"launch":{int(launch_no[li])},'
        head.append(f'{{"ph":"X","name":{_json(titles_of_launch[li])},"ts":{_us(t0)},"dur":{_us(t1 - t0)},'
                    f'"pid":{pid},"tid":{tid},"args":{{{which}"ctas":{int(spans.ctas[k])},"sms":{int(sms[li])}}}}}')

    meta = _metadata(profile, launches, shift, processes=processes, ctas=_cta_extras(ctas, lay.extent_lo),
                     layout=layout_meta(plan))
    # CTA slices first (their order puts CTAs after the intervals), then the intervals
    order = np.r_[order[order >= n_iv], order[order < n_iv]]
    tasks = [lambda sel=slice(lo, lo + CHUNK): thread_lines(sel) for lo in range(0, n_rows + n_ut, CHUNK)]
    tasks += [lambda sel=slice(lo, lo + CHUNK): _counter_lines(c_pid[sel], c_t[sel], c_v[sel])
              for lo in range(0, len(c_pid), CHUNK)]
    tasks += [lambda sel=slice(lo, min(lo + CHUNK, n_cta)): slice_lines(sel, True) for lo in range(0, n_cta, CHUNK)]
    tasks += [lambda sel=slice(lo, lo + CHUNK): slice_lines(sel, False) for lo in range(n_cta, len(order), CHUNK)]
    workers = stop_threads() if workers is None else workers
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
    return {"format": "chrome", "path": str(path), "bytes": size, "slices": n_slices, "layout": plan.layout,
            "processes": n_pid,
            "threads": n_rows + n_ut, "slots": n_rows, "counter_events": len(c_pid),
            "bytes_per_slice": size / n_slices if n_slices else 0.0}
