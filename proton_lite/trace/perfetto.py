"""``NAME.pftrace``: Perfetto's native TrackEvent protobuf, written from numpy arrays.

Why written by hand: the ``perfetto`` package's builders cost ~4 us per packet; here the
packets are laid out column by column (``_proto.Rows``), in worker threads.

Size: the BEGIN/END packets of a slice take ~37 bytes with its ``cycles`` arg (~30
without); track descriptors add ~27 bytes per track.  By default packets go out in
deflated ``compressed_packets`` batches, which the trace processor inflates natively
(``compress=False`` for plain).

Layout: launch (or GPU) > SM > slot > unit tracks, see ``plan`` and ``perfetto_tree`` (and
``rows`` for the slots).  Stream: [metadata packet, field META_FIELD, the ``_metadata`` JSON]
[track descriptors] [sequence 1, the sm layout only: the launch slices] [sequence 2: the CTA
slices with the resident-CTA counters] [sequences 3, 4, ...: the intervals, in pieces of
whole (launch or GPU, SM) groups, see ``perfetto_pieces``].  Each
sequence starts with SEQ_INCREMENTAL_STATE_CLEARED + interned names + TracePacketDefaults
(timestamp_clock_id = 64) + a ClockSnapshot (clock 64 is incremental, 0 = BOOTTIME 0);
its events are in time order, each with a timestamp delta and a track_uuid.  An
interval's BEGIN has an interned name (and a ``note`` annotation, an interned string, where
its scope has a pipelining note) and its END a ``cycles`` debug annotation, merged into the
slice's args.  A ``depth`` annotation appears only where the track nesting
differs from the recorded depth (lanes > 0).  Field numbers: ``perfetto_fields``.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from proton_lite.profile_data import Profile
from proton_lite.stop_threads import stop_threads
from proton_lite.trace.meta import _metadata, cta_extras_queued, layout_meta, meta_json_parts
from proton_lite.trace.tree import _scope_names, _scope_note, _sorted_launches, _time_shift, launch_titles
from proton_lite.trace.workers import _Done, _ordered
from proton_lite.trace import native_events
from proton_lite.trace.text_c import NameTable
from proton_lite.trace.perfetto_fields import (FIRST_PIECE_SEQ, META_FIELD, SEQ_CTAS, SEQ_LAUNCHES,
                                               packet_field_head)
from proton_lite.trace.perfetto_pieces import (IntervalColumns, Pieces, encode_piece, finish, number_pieces,
                                               piece_indexer, sequence_start)
from proton_lite.trace.perfetto_tree import CtaEvents, Tracks, launch_span_rows
from proton_lite.trace.plan import launch_spans, plan_trace


CTA_AHEAD = 8  # parts of the CTA sequence in flight per worker where the trace has no pieces


def write_perfetto(profile: Profile, path: str | Path, compress: bool = True, workers: int | None = None,
                   progress=None, layout: str = "auto") -> dict:
    """Write ``profile`` as a .pftrace; ``compress`` deflates packet batches (~5x smaller);
    ``progress(done, total)`` is called as pieces of the trace are written; ``layout``: the
    track tree (``plan``: a group per launch, or SMs shared by the launches of a GPU).

    Everything but the track layout runs in worker threads: the descriptors, the CTA
    sequence, the metadata and each piece of intervals (``pieces``); the bytes do not
    depend on ``workers``.
    """
    clock = _Phases()
    launches = _sorted_launches(profile)
    shift = _time_shift(profile)
    workers = stop_threads() if workers is None else workers
    pool = ThreadPoolExecutor(workers) if workers > 1 else None
    run = pool.submit if pool else (lambda f: _Done(f()))
    pmap = pool.map if pool else map
    try:
        plan = plan_trace(profile, launches, layout, pmap)
        ctas, cta_lr, lay = plan.ctas, plan.cta_lr, plan.lay
        spans = launch_spans(plan, len(launches)) if plan.layout == "sm" else None
        clock.mark("slots")
        iv = profile.intervals
        n_iv, n_cta = len(iv), len(ctas)
        cut = Pieces(lay.group, plan.runs, n_iv, lay.piece_ok)  # each piece's CTA ranks from the runs
        # the metadata's per-CTA columns, packed and deflated while the pieces are indexed (the head waits
        # for them); without pieces, after the CTA sequence's cut is queued, which every part of the
        # sequence waits for (below)
        extras = cta_extras_queued(ctas, lay.extent_lo, run) if n_iv else None
        clock.mark("pieces")
        # phase one, per piece on the workers: unit tracks and (kernel, scope) pairs
        piece_index, n_scopes = piece_indexer(iv, lay.row, cta_lr, launches["kernel"].astype(np.int64),
                                              len(profile.kernels), lay.n_rows)
        ut_first, unit_list, ut_number, pair_keys = number_pieces(cut, piece_index, run, lay.n_rows)
        clock.mark("index")
        tracks = Tracks(profile, launches, plan, spans, compress, finish, units=unit_list)
        descriptors = [run(t) for t in tracks.tasks]

        def launch_slice_bytes() -> bytes:  # (a title and a slice a launch: 65 K launches, 0.1 s of one thread)
            titles = [t.encode() for t in launch_titles(profile.kernels, launches)]
            return finish(launch_span_rows(spans, titles, launches["launch"].astype(np.int64), tracks.lane_uuid,
                                           shift), compress)
        launch_slices = run(launch_slice_bytes) if spans is not None else None
        # made after the index step, not beside it: its numpy calls took the GIL from the index step's threads
        cta_events = run(clock.busy("cta_parts", lambda: CtaEvents(launches, plan, shift, profile.kernels, workers)
                                    .after_units(len(unit_list[0]))))
        if extras is None:  # (queued before the cut, as they were until the thirty-sixth session, they held the
            # cut and the slots' packing back behind them on the pool: 4.19 M lifetimes on 16 threads, the write
            # 1.22-1.47 s against 1.26-1.60 s; docs/results/gpu-2026-11-29f/call4.txt, call5.txt)
            extras = cta_extras_queued(ctas, lay.extent_lo, run)

        # scope names interned per (kernel, scope): iid = 1 + the pair's index in ``names``
        names = [[int(k // n_scopes), int(k % n_scopes)] for k in pair_keys.tolist()]
        event_names = [_scope_names(profile.kernels[k], s)[s] for k, s in names]
        # laid out up to the per-CTA columns while they are packed (meta_json_parts calls ``extras`` last)
        meta = run(lambda: meta_json_parts(_metadata(profile, launches, shift, names=names, ctas=extras,
                                                     layout=layout_meta(plan))))
        note, notes = _scope_notes(profile, names, event_names)
        name_table = NameTable(event_names)  # (laid out once: each piece interns the names it uses in one call)
        columns = IntervalColumns(start=iv["start_ns"], end=iv["end_ns"], depth=iv["depth"], cycles=iv["cycles"],
                                  shift=shift, note=note, notes=notes)

        def where(i: int) -> str:
            return (f"launch {int(iv['launch'][i])} CTA {int(iv['cta'][i])} unit {int(iv['unit'][i])} "
                    f"lane {int(iv['lane'][i])}")

        def piece_task(k: int):
            def encode():
                sel = cut.sel(k)
                ut, pairs, pair_inv = piece_index(sel, cut.cta(k))
                iid = np.searchsorted(pair_keys, pairs)[pair_inv] + 1
                track = ut_number[ut_first[k] + ut[3]] + 1
                del ut, pairs, pair_inv
                return encode_piece(FIRST_PIECE_SEQ + k, sel, columns, name_table, compress, where, track, iid)
            return clock.busy("pieces", encode)

        def cta_task(task: tuple):
            def rows():
                events = cta_events.result()  # waited for outside the task's busy time
                return clock.busy("ctas", lambda: (events.packets(task, compress), 0))()
            return rows

        sizes = {"head": 0, "descriptors": 0, "events": 0}
        arg_bytes = 0
        with open(path, "wb") as f:
            def put(kind: str, data: bytes) -> None:
                f.write(data)
                sizes[kind] += len(data)
            # the CTA sequence last in the file, but encoded from the start, beside the pieces: its
            # events (one sort of every CTA's begin and end) would otherwise hold up the head of
            # the file, and its batches, queued after the pieces, ran after them as a tail with
            # fewer tasks than threads (2 threads: 0.12-0.16 s of a 0.7-0.8 s write).  Both run in
            # windows (``_ordered``): parts of the sequence all queued at once held every part's
            # bytes until the last piece was written (the whole sequence: 100 MB for 4 M CTAs)
            pieces = _ordered(run, [piece_task(k) for k in range(len(cut))], workers + 2)
            cta_tasks = [cta_task(task) for task in CtaEvents.tasks(n_cta)]
            # without pieces (kernels without scopes), the parts run ahead while the head waits for
            # the metadata: a finished part holds only its deflated bytes (~150 KB at PART_EVENTS)
            cta_parts = _ordered(run, cta_tasks, (2 if len(cut) else CTA_AHEAD) * workers)
            n_tasks = len(cut) + len(cta_tasks)
            meta_parts = meta.result()  # (42 MB for 4 M CTAs: written as made, never joined)
            put("head", packet_field_head(META_FIELD, sum(map(len, meta_parts))))
            for part in meta_parts:
                put("head", part)
            del meta_parts
            for d in descriptors:
                put("descriptors", d.result())
            if spans is not None:  # the sm layout's launch slices: a sequence of their own
                put("head", sequence_start(SEQ_LAUNCHES, {}))
                put("events", launch_slices.result())
            clock.mark("head")
            done = 0
            for results in (pieces, cta_parts):
                if results is cta_parts:  # declared also where there is no CTA
                    put("head", sequence_start(SEQ_CTAS, cta_events.result().names))
                for data, ab in results:
                    put("events", data)
                    arg_bytes += ab
                    done += 1
                    if progress is not None:
                        progress(done, n_tasks)
        n_samples = cta_events.result().n_samples
        clock.mark("events")
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
        native_events.release()  # this thread's encoder buffers, when it encoded (no workers)
    total = sum(sizes.values())
    n_slices = n_iv + n_cta
    return {"format": "perfetto", "path": str(path), "bytes": total, "slices": n_slices, "compressed": compress,
            "layout": plan.layout, "tracks": tracks.count, "slots": lay.n_rows, "pieces": len(cut),
            "events": 2 * n_slices,
            "counter_samples": n_samples, "descriptor_bytes": sizes["descriptors"],
            "event_bytes": sizes["events"], "arg_bytes_uncompressed": arg_bytes,
            "bytes_per_slice": total / n_slices if n_slices else 0.0, "phase_s": clock.spans}


def _scope_notes(profile: Profile, names: list, event_names: list[str]):
    """(note string iid per name iid, the notes): a scope's note from its kernel's metadata
    (``pipelined``: a scope that times a wait, passes/pipelining.py) rides on its slices."""
    note = np.zeros(len(names) + 1, np.int64)
    notes: list[str] = []
    for i, (k, _) in enumerate(names):
        text = _scope_note(profile.kernels[k], event_names[i])
        if text:
            if text not in notes:
                notes.append(text)
            note[i + 1] = notes.index(text) + 1
    return note, tuple(notes)


class _Phases:
    """Wall seconds of the writer's steps (``phase_s`` in its stats: where a large trace's time
    goes, for ``tests/benchmarks/decode_speed.py``): slots (the CTAs' order and packing,
    ``plan``), pieces and head on this thread (the first also on the workers), index and
    events wait for the workers; and ``busy_*``, the seconds the workers spent in each kind
    of task, summed (the pieces' events, the CTA slices made part by part of time, the cut
    into those parts), which tells a phase that waits on one long task from one whose tasks
    all got slower."""

    def __init__(self):
        self.spans: dict[str, float] = {}
        self._t = time.perf_counter()
        self._busy: dict[str, float] = {}
        self._lock = threading.Lock()

    def busy(self, kind: str, task):
        """``task`` timed into ``busy_<kind>`` when it runs (on any thread)."""
        def timed():
            t0 = time.perf_counter()
            try:
                return task()
            finally:
                with self._lock:
                    self._busy[kind] = self._busy.get(kind, 0.0) + time.perf_counter() - t0
        return timed

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.spans[name] = round(now - self._t, 4)
        self._t = now
        if name == "events":
            with self._lock:
                self.spans.update((f"busy_{k}", round(v, 4)) for k, v in sorted(self._busy.items()))
