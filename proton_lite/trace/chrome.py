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

Why in pieces: the JSON importer sorts the events itself (at one timestamp the longer ``X``
event first: Perfetto's trace processor v52 nests two slices that start together whichever
comes first in the file), so no order over the whole file is needed.  The intervals are
written in the .pftrace's pieces (``perfetto_pieces``: whole unit tracks, or tracks cut
where their slices are apart in time), each checked for crossing slices (which the importer
drops) and laid out on a worker thread, a track's slices by time; the CTA slices in runs of
CTAs (a slot's CTAs never overlap); the resident-CTA counters in the CTA sequence's parts of
time (``cta_sequence``).  Whole columns over every slice, one sort of them all and one
nesting pass took 8-14x a capture's raw size and most of the write on one core (21.3 M
records: 14.9 s, +2.4 GiB on the CPU host's 2 threads, 2026-11-29; design.md §6).
"""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from proton_lite.arrays import distinct
from proton_lite.profile_data import Profile
from proton_lite.stop_threads import stop_threads
from proton_lite.trace import event_order_c
from proton_lite.trace.cta_sequence import CtaParts
from proton_lite.trace.meta import _cta_extras, _metadata, layout_meta, meta_json_parts
from proton_lite.trace.nesting import _nesting
from proton_lite.profile_merge import capture_titles, launch_captures
from proton_lite.trace.perfetto_pieces import Pieces, number_pieces, piece_indexer, time_order
from proton_lite.trace.plan import lane_name, launch_names, launch_spans, plan_trace
from proton_lite.trace.tree import _scope_names, _scope_note, _sorted_launches, _time_shift, launch_titles
from proton_lite.trace.workers import _Done, _ordered
from proton_lite.trace._proto import Rows
from proton_lite.trace.rows import SLOT_NAME, cta_name, grid_of_launches, unit_names

CHUNK = 1 << 16  # lines per task of thread names and of CTA slices
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
    """Write ``profile`` as Chrome JSON (the module's docstring); the lines are made on
    ``workers`` threads (the bytes do not depend on how many) and written in order."""
    workers = stop_threads() if workers is None else workers
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    try:
        return _write(profile, path, workers, pool, progress, layout)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def _write(profile: Profile, path, workers: int, pool, progress, layout: str) -> dict:
    """The file: the head (processes, launch slices), then in order the tasks' lines (thread
    names, counters, CTA slices, the pieces' intervals), each task run ahead on ``pool``."""
    run = pool.submit if pool else (lambda f: _Done(f()))
    pmap = pool.map if pool else map
    launches = _sorted_launches(profile)
    shift = _time_shift(profile)
    plan = plan_trace(profile, launches, layout, pmap)
    ctas, cta_lr, lay, tops = plan.ctas, plan.cta_lr, plan.lay, plan.tops
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
    group_sm = ctas.take("smid", lay.group_first).astype(np.int64)
    head, processes = [], []
    titles = _after_capture(profile, tops.titles, tops.capture)
    for g in range(n_tops):
        title = titles[g]
        pids = [(int(top_pid[g]), title, -1)]
        owner = title if by_launch else title.split(" · ")[0]  # "#3 matmul ... SM 12", or "GPU 0 SM 12"
        pids += [(int(group_pid[k]), f"{owner} SM {int(group_sm[k])}", int(group_sm[k]))
                 for k in range(group_bounds[g], group_bounds[g + 1])]
        for pid, name, smid in pids:
            head.append(_json({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}))
            head.append(f'{{"ph":"M","name":"process_sort_index","pid":{pid},"tid":0,"args":{{"sort_index":{pid}}}}}')
            processes.append([int(launch_no[g]) if by_launch else -1, smid])

    # the intervals' pieces (perfetto_pieces), phase one on the workers: their unit tracks and
    # (kernel, scope) pairs, numbered trace-wide here
    cut = Pieces(lay.group, plan.runs, n_iv, lay.piece_ok)
    piece_index, n_scopes = piece_indexer(iv, lay.row, cta_lr, k_of_launch, len(kernels), lay.n_rows)
    ut_first, (ut_row, ut_unit, ut_lane), ut_number, pair_keys = number_pieces(cut, piece_index, run, lay.n_rows)

    # threads (names need no JSON escaping): each slot, then its unit/lane tracks in (unit,
    # lane) order; tids above all pids
    by_track = np.lexsort((ut_lane, ut_unit, ut_row))
    ut_row, ut_unit, ut_lane = ut_row[by_track], ut_unit[by_track], ut_lane[by_track]
    n_rows, n_ut = lay.n_rows, len(ut_row)
    units_before = np.searchsorted(ut_row, np.arange(n_rows))  # unit tracks of earlier slots
    row_tid = n_pid + 1 + np.arange(n_rows) + units_before
    ut_tid = np.empty(n_ut, np.int64)  # by the tracks' trace-wide number
    ut_tid[by_track] = n_pid + 2 + ut_row + np.arange(n_ut)  # right after their slot's tid
    row_pid = group_pid[lay.row_group]
    first_tid = np.zeros(n_pid + 1, np.int64)
    first_tid[row_pid[lay.row_slot == 0]] = row_tid[lay.row_slot == 0]
    unit_labels, ut_name = unit_names(kernels, plan.row_kernel[ut_row], ut_unit, ut_lane)
    is_row_t = np.r_[np.ones(n_rows, bool), np.zeros(n_ut, bool)]
    t_row = np.r_[np.arange(n_rows), ut_row].astype(np.int64)
    t_tid = np.r_[row_tid, ut_tid[by_track]].astype(np.int64)
    t_name = np.r_[np.zeros(n_rows, np.int64), ut_name]
    by_tid = np.argsort(t_tid, kind="stable")

    def thread_lines(sel: slice):
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
        return r.tobytes(), 0

    names, explicit, notes = _scope_tables(kernels, pair_keys, n_scopes)
    noted = any(notes)
    grid = grid_of_launches(launches)  # (grid x, grid y, multi-dimensional) per launch rank
    launch_names_json = [_json(name)[1:-1].encode() for name in launch_names(kernels, launches)]

    def piece_lines(k: int):
        """The intervals of piece ``k``, by time; an error where two cross on a track."""
        sel, c = cut.sel(k), cut.cta(k)
        ut, pairs, pair_inv = piece_index(sel, c)
        track = ut_tid[ut_number[ut_first[k] + ut[3]]]
        name = np.searchsorted(pair_keys, pairs)[pair_inv] + 1
        del ut, pairs, pair_inv
        start = iv["start_ns"][sel].astype(np.int64) + shift
        end = iv["end_ns"][sel].astype(np.int64) + shift
        depth = iv["depth"][sel].astype(np.int64)

        def where(i: int) -> str:
            j = int(sel[i])
            return (f"launch {int(iv['launch'][j])} CTA {int(iv['cta'][j])} unit {int(iv['unit'][j])} "
                    f"lane {int(iv['lane'][j])}")
        ordered = event_order_c.piece_events(track, start, end, depth, where)
        ev = ordered[0] if ordered is not None else time_order(*_nesting(track, start, end, depth, where)[:2])[0]
        o = ev[ev < len(sel)]  # the BEGINs in time order (at one time the outer slice first)
        s, co = sel[o], c[o]
        lane, scope = iv["lane"][s].astype(np.int64), iv["scope"][s].astype(np.int64)
        r = Rows(len(o))
        r.const(b'{"ph":"X","name":')
        r.table(names, name[o])
        _times(r, b"ts", start[o])
        _times(r, b"dur", end[o] - start[o])
        _int(r, b"pid", group_pid[lay.group[co]])
        _int(r, b"tid", track[o])
        r.const(b',"args":{"cycles":')
        r.decimal(iv["cycles"][s].astype(np.int64), signed=True)
        _int(r, b"sm", ctas.take("smid", co))
        _int(r, b"cta", ctas.take("cta", co))
        if not by_launch:  # SM groups shared by the launches: each slice names its own
            _int(r, b"launch", launch_no[cta_lr[co]])
        _int(r, b"unit", iv["unit"][s])
        _int(r, b"depth", depth[o])
        _int(r, b"lane", lane, lane > 0)
        _int(r, b"scope", scope, explicit[name[o]])
        if noted:
            r.table(notes, name[o])
        r.const(b"}},\n")
        return r.tobytes(), 0

    def cta_lines(lo: int, hi: int):
        """The lifetime slices of the CTAs of ranks [lo, hi), on their slots."""
        s = slice(lo, hi)
        lr = cta_lr[s]
        start = ctas.take("start_ns", s).astype(np.int64) + shift
        end = ctas.take("end_ns", s).astype(np.int64) + shift
        cid = ctas.take("cta", s).astype(np.int64)
        r = Rows(hi - lo)
        r.const(b'{"ph":"X","name":"')
        if by_launch:  # "CTA 37"
            cta_name(r, cid, grid[0][lr], grid[1][lr], grid[2][lr])
        else:  # "matmul #3": the CTAs of a launch alike (and coloured alike)
            r.table(launch_names_json, lr)
        r.const(b'"')
        _times(r, b"ts", start)
        _times(r, b"dur", end - start)
        _int(r, b"pid", group_pid[lay.group[s]])
        _int(r, b"tid", row_tid[lay.row[s]])
        r.const(b',"args":{"cycles":')
        r.decimal((ctas.take("end_clock", s) - ctas.take("start_clock", s)).view(np.int64), signed=True)
        _int(r, b"sm", ctas.take("smid", s))
        _int(r, b"cta", cid)
        if not by_launch:
            _int(r, b"launch", launch_no[lr])
        r.const(b"}},\n")
        return r.tobytes(), 0

    # counters: resident CTAs per SM group and per top group (on the GPU), part by part of time
    parts = CtaParts(ctas["start_ns"], ctas["end_ns"], lay.row, [lay.group, cta_top], workers, shift=shift)

    def counter_lines(j: int):
        """Part j's changes of the counts, in the sequence's time order (a top group's before
        its SM group's at one event), so that the lines do not depend on where parts end."""
        seq = parts.part(j)
        (g_has, g_value), (t_has, t_value) = seq.marks
        at = np.sort(np.r_[2 * np.flatnonzero(t_has), 2 * np.flatnonzero(g_has) + 1])
        e, of_group = at >> 1, (at & 1).astype(bool)
        c = seq.cta[e]
        pid = np.where(of_group, group_pid[lay.group[c]], top_pid[cta_top[c]])
        return _counter_lines(pid, seq.t[e], np.where(of_group, g_value[e], t_value[e])), len(at)

    # each launch's span, on a thread of its top group's process: drawn in its row while collapsed
    spans = launch_spans(plan, len(launches))
    sms = plan.launch_sms if plan.launch_sms is not None else _sms_of_launches(cta_lr, ctas, len(launches))
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

    meta = _metadata(profile, launches, shift, processes=processes, ctas=_cta_extras(ctas, lay.extent_lo, workers),
                     layout=layout_meta(plan))
    tasks = [lambda sel=slice(lo, lo + CHUNK): thread_lines(sel) for lo in range(0, n_rows + n_ut, CHUNK)]
    tasks += [lambda j=j: counter_lines(j) for j in range(parts.n_parts)]
    tasks += [lambda lo=lo: cta_lines(lo, min(lo + CHUNK, n_cta)) for lo in range(0, n_cta, CHUNK)]
    tasks += [lambda k=k: piece_lines(k) for k in range(len(cut))]
    size, pending, n_counter = 0, b"", 0
    with open(path, "wb") as f:
        def put(data: bytes) -> None:  # one piece held back: the last line loses its comma
            nonlocal size, pending
            if data:
                f.write(pending)
                size += len(pending)
                pending = data
        put(b'{"otherData":{"proton_lite":')
        for part in meta_json_parts(meta):  # (the per-CTA columns' 42 MB for 4 M CTAs: written as made)
            put(part)
        put(b'},\n"traceEvents":[\n')
        put("".join(line + ",\n" for line in head).encode())
        for done, (data, counted) in enumerate(_ordered(run, tasks, 2 * workers + 1), start=1):
            put(data)
            n_counter += counted
            if progress is not None:  # (done, total) as batches of events are written
                progress(done, len(tasks))
        tail = (pending[:-2] + b"\n" if pending.endswith(b",\n") else pending) + b"]}\n"
        f.write(tail)
        size += len(tail)
    n_slices = n_iv + n_cta
    return {"format": "chrome", "path": str(path), "bytes": size, "slices": n_slices, "layout": plan.layout,
            "processes": n_pid, "threads": n_rows + n_ut, "slots": n_rows, "counter_events": n_counter,
            "pieces": len(cut), "bytes_per_slice": size / n_slices if n_slices else 0.0}


def _scope_tables(kernels, pair_keys: np.ndarray, n_scopes: int):
    """Per (kernel, scope) pair (entry 0: none): its name as JSON, whether a slice needs an
    explicit ``scope`` arg (the reader's rule would give another id), its note arg."""
    from proton_lite.trace.readback import scope_lookup
    names, explicit, notes = [b""], [False], [b""]
    for key in pair_keys.tolist():
        k, sc = divmod(key, n_scopes)
        name = _scope_names(kernels[k], sc)[sc]
        names.append(_json(name).encode())
        note = _scope_note(kernels[k], name)
        notes.append(b',"note":' + _json(note).encode() if note else b"")  # passes/pipelining.py
        try:
            explicit.append(scope_lookup(kernels[k])(name) != sc)
        except ValueError:
            explicit.append(True)
    return names, np.array(explicit, bool), notes


def _sms_of_launches(cta_lr: np.ndarray, ctas, n_launches: int) -> np.ndarray:
    """How many SMs ran CTAs of each launch (the launch slices' ``sms`` arg): its distinct
    (launch, SM) pairs."""
    sms = np.zeros(n_launches, np.int64)
    if len(cta_lr):
        width = int(ctas["smid"].max()) + 1
        np.add.at(sms, distinct(cta_lr.astype(np.int64) * width + ctas["smid"]) // width, 1)
    return sms
