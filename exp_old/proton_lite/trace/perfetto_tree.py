"""The .pftrace's track tree and its CTA sequence (layout: ``rows``).

Tracks: one counter track per launch (resident CTAs on the GPU) > one counter track per SM
(resident CTAs on it; the SMs of a launch share one y axis) > one track per slot (the
lifetime slices of the CTAs packed into it) > one per unit and lane.  A track with
children draws its own slices or counter in its header row, also while collapsed, which
is what makes waves and the tail visible with every SM group collapsed (checked in the
Perfetto UI v52 that ``open --offline`` serves).  Tracks carry their identity in
``sibling_order_rank`` (launch index, SM id, slot, unit << 16 | lane), which also orders
them (``child_ordering = EXPLICIT``); ``sibling_merge_behavior = NONE``.

Sequence 2 holds the CTA slices, in a layout of their own so that the interval packets of
sequence 1 (millions) keep their short fixed one; the counters ride on the CTA slices.
"""
from __future__ import annotations

import threading

import numpy as np

from proton_lite.profile_data import Profile
from proton_lite.profile_merge import capture_titles
from proton_lite.trace.nesting import _argsort_keys
from proton_lite.trace.plan import LaunchSpans, TracePlan, lane_name, launch_names
from proton_lite.trace._proto import Rows, field_bytes, field_varint, tag
from proton_lite.trace.perfetto_fields import (ANN_CTA, ANN_CTAS, ANN_CYCLES, ANN_LAUNCH, CD_UNIT_NAME,
                                               CD_Y_AXIS_SHARE_KEY, CHILD_ORDERING_EXPLICIT, DA_INT, DA_NAME_IID,
                                               P_TRACK_DESCRIPTOR, SEQ_CTAS, SEQ_LAUNCHES, SIBLING_MERGE_NONE,
                                               TD_CHILD_ORDERING, TD_COUNTER, TD_DESCRIPTION, TD_MERGE, TD_NAME,
                                               TD_PARENT, TD_RANK, TD_UUID, TE_ANNOTATIONS, TE_EXTRA_COUNTER_TRACKS,
                                               TE_EXTRA_COUNTER_VALUES, TE_NAME, TE_NAME_IID, packet,
                                               slice_event_start)
from proton_lite.trace import native_events
from proton_lite.trace.cta_events_c import cta_packets, part_packets
from proton_lite.trace.cta_sequence import CtaParts, CtaSequence, planned_parts
from proton_lite.trace.perfetto_pieces import deflated, finish
from proton_lite.trace.rows import SLOT_NAME, SlotLayout, cta_name, grid_of_launches, unit_names

CHUNK = 1 << 18  # descriptors encoded per task
COUNTER_UNIT = "CTAs"
LAUNCH_DESCRIPTION = ("CTAs resident on the GPU over time. Inside: one group per SM with the CTAs resident on "
                      "it, then its slots: CTAs of the SM that never overlap share a slot, one track per warp "
                      "(or warp group) below it.")
GPU_DESCRIPTION = ("CTAs resident on the GPU over time, all launches. Inside: the launches (one slice per launch), "
                   "then one group per SM with the CTAs resident on it, then its slots: CTAs of the SM that never "
                   "overlap share a slot, whatever their launch, one track per warp (or warp group) below it.")


def _rank(rank) -> np.ndarray:
    """sibling_order_rank is an int32: larger values wrap (the reader masks them back)."""
    return np.asarray(rank, np.int64).astype(np.uint32).view(np.int32).astype(np.int64)


def _descriptor(uuid: int, name: str, rank: int, extra: bytes = b"") -> bytes:
    """A track that has children (a launch; a merged capture above its launches)."""
    d = (field_varint(TD_UUID, uuid) + field_bytes(TD_NAME, name) + extra +
         field_varint(TD_CHILD_ORDERING, CHILD_ORDERING_EXPLICIT) + field_varint(TD_RANK, int(_rank([rank])[0])) +
         field_varint(TD_MERGE, SIBLING_MERGE_NONE))
    return packet(field_bytes(P_TRACK_DESCRIPTOR, d))


def _descriptor_rows(uuid, parent, rank, name_fill, has_children: bool, extra_fill=None) -> Rows:
    """TrackDescriptor packets for many tracks; ``name_fill(rows)`` adds the name bytes,
    ``extra_fill(rows)`` more fields (a counter descriptor)."""
    r = Rows(len(uuid))
    r.const(b"\x0a")
    plen = r.placeholder()
    p0 = r.mark()
    r.const(tag(P_TRACK_DESCRIPTOR, 2))
    dlen = r.placeholder()
    d0 = r.mark()
    r.const(tag(TD_UUID, 0))
    r.varint(uuid)
    r.const(tag(TD_NAME, 2))
    nlen = r.placeholder()
    n0 = r.mark()
    name_fill(r)
    r.set_length(nlen, r.length_since(n0))
    r.const(tag(TD_PARENT, 0))
    r.varint(parent)
    if extra_fill is not None:
        extra_fill(r)
    if has_children:
        r.const(field_varint(TD_CHILD_ORDERING, CHILD_ORDERING_EXPLICIT))
    r.const(tag(TD_RANK, 0))
    r.varint(_rank(rank))
    r.const(field_varint(TD_MERGE, SIBLING_MERGE_NONE))
    r.set_length(dlen, r.length_since(d0))
    r.set_length(plen, r.length_since(p0))
    return r


def layout_uuids(n_units: int, lay: SlotLayout, n_tops: int, n_lanes: int = 0):
    """The uuids of the slot, SM, top-group and launch-lane tracks after ``n_units`` unit
    tracks: each is ``n_units`` plus a number that does not depend on it (``CtaEvents.after_units``)."""
    n_rows, n_sms = lay.n_rows, lay.n_groups
    first_top = n_units + n_rows + n_sms + 1
    return (n_units + 1 + np.arange(n_rows), n_units + n_rows + 1 + np.arange(n_sms),
            first_top + np.arange(n_tops), first_top + n_tops + np.arange(n_lanes))


class Tracks:
    """Track uuids: unit/lane tracks first (1..U, the smallest varints: most events refer to
    them), then slots, SMs, top groups (launches, or GPUs: ``plan``), the sm layout's launch
    rows; and the tasks that encode their descriptors (``finish(rows, compress)`` turns a
    batch into the file's bytes)."""

    def __init__(self, profile: Profile, launches, plan: TracePlan, spans: LaunchSpans | None, compress: bool,
                 finish, units):
        """``units``: the (row, unit, lane) of every unit track, sorted (the writer finds them
        piece by piece, on its threads: ``perfetto_pieces.index_piece``)."""
        kernels, lay, tops = profile.kernels, plan.lay, plan.tops
        ut_row, ut_unit, ut_lane = units
        n_units, n_rows, n_sms, n_tops = len(ut_row), lay.n_rows, lay.n_groups, len(tops.titles)
        n_lanes = len(spans.row_top) if spans is not None else 0
        self.row_uuid, self.sm_uuid, self.top_uuid, self.lane_uuid = layout_uuids(n_units, lay, n_tops, n_lanes)
        self.count = n_units + n_rows + n_sms + n_tops + n_lanes
        # a profile merged from several captures (one per rank): a root track per capture above its top groups
        capture = tops.capture
        origins = (profile.session or {}).get("merged_from") or []
        capture_uuid = self.count + 1 + np.arange(len(origins)) if capture is not None else None
        if capture is not None:
            self.count += len(origins)
        sm_top = plan.tops.of_launch[plan.cta_lr[lay.group_first]]
        sm_id = plan.ctas.take("smid", lay.group_first).astype(np.int64)
        by_launch = tops.layout == "launch"
        top_rank = launches["launch"].astype(np.int64) if by_launch else np.arange(n_tops)
        axis_keys = [f"SMs of #{int(n)}".encode() for n in launches["launch"]] if by_launch else \
            [f"SMs of {t.split(' · ')[0]}{f' of capture {int(capture[g])}' if capture is not None else ''}".encode()
             for g, t in enumerate(tops.titles)]
        counter = field_bytes(TD_COUNTER, field_bytes(CD_UNIT_NAME, COUNTER_UNIT)) + \
            field_bytes(TD_DESCRIPTION, LAUNCH_DESCRIPTION if by_launch else GPU_DESCRIPTION)

        def top_rows() -> bytes:
            roots = b"" if capture is None else b"".join(
                _descriptor(int(capture_uuid[k]), title, k) for k, title in enumerate(capture_titles(origins)))
            return roots + b"".join(
                _descriptor(int(self.top_uuid[g]), title, int(top_rank[g]),
                            counter + (field_varint(TD_PARENT, int(capture_uuid[capture[g]])) if capture is not None
                                       else b""))
                for g, title in enumerate(tops.titles))

        def lane_rows() -> bytes:  # the sm layout's launch rows, above the SMs (negative ranks)
            lanes = [lane_name(int(k)).encode() for k in range(int(spans.row_lane.max()) + 1)]
            last = np.zeros(n_tops, np.int64)
            np.maximum.at(last, spans.row_top, spans.row_lane + 1)
            return finish(_descriptor_rows(self.lane_uuid, self.top_uuid[spans.row_top],
                                           spans.row_lane - last[spans.row_top],
                                           lambda r: r.table(lanes, spans.row_lane), False), False)

        def sm_rows(sel: slice) -> bytes:  # not deflated: few, and they go out with the top groups'
            def name(r: Rows) -> None:
                r.const(b"SM ")
                r.decimal(sm_id[sel])

            def shared_axis(r: Rows) -> None:  # the SMs of one top group share a y axis: comparable
                r.const(tag(TD_COUNTER, 2))
                clen = r.placeholder()
                c0 = r.mark()
                r.const(field_bytes(CD_UNIT_NAME, COUNTER_UNIT) + tag(CD_Y_AXIS_SHARE_KEY, 2))
                klen = r.placeholder()
                k0 = r.mark()
                r.table(axis_keys, sm_top[sel])
                r.set_length(klen, r.length_since(k0))
                r.set_length(clen, r.length_since(c0))
            return finish(_descriptor_rows(self.sm_uuid[sel], self.top_uuid[sm_top[sel]], sm_id[sel], name, True,
                                            shared_axis), False)

        def slot_rows(sel: slice) -> bytes:
            def name(r: Rows) -> None:
                r.const(SLOT_NAME.encode() + b" ")
                r.decimal(lay.row_slot[sel])
            return finish(_descriptor_rows(self.row_uuid[sel], self.sm_uuid[lay.row_group[sel]], lay.row_slot[sel],
                                            name, True), compress)

        ut_kernel = plan.row_kernel[ut_row] if n_units else ut_row
        unit_labels, name_idx = unit_names(kernels, ut_kernel, ut_unit, ut_lane)
        ut_rank = (ut_unit << 16) | ut_lane

        def unit_rows(sel: slice) -> bytes:
            return finish(_descriptor_rows(np.arange(1, n_units + 1)[sel], self.row_uuid[ut_row[sel]], ut_rank[sel],
                                            lambda r: r.table(unit_labels, name_idx[sel]), False), compress)

        self.tasks = [top_rows] + ([lane_rows] if n_lanes else [])
        self.tasks += [lambda sel=slice(lo, lo + CHUNK): sm_rows(sel) for lo in range(0, n_sms, CHUNK)]
        self.tasks += [lambda sel=slice(lo, lo + CHUNK): slot_rows(sel) for lo in range(0, n_rows, CHUNK)]
        self.tasks += [lambda sel=slice(lo, lo + CHUNK): unit_rows(sel) for lo in range(0, n_units, CHUNK)]


def launch_span_rows(spans: LaunchSpans, titles: list[bytes], launch_no: np.ndarray, lane_uuid: np.ndarray,
                     shift: int) -> Rows:
    """The sm layout's launch slices (sequence SEQ_LAUNCHES, in time order): each named by
    its launch's title, with ``launch`` on the BEGIN and its CTA count (``ctas``) on the END."""
    n = len(spans.launch)
    t = np.r_[spans.start, spans.end] + shift
    track = np.r_[spans.row, spans.row]
    phase = np.r_[np.full(n, 1), np.where(spans.end <= spans.start, 2, 0)]
    order = _argsort_keys([t, phase, track])
    begin, k = order < n, order % max(n, 1)
    r = Rows(2 * n)
    plen, p0, tlen, t0 = slice_event_start(r, SEQ_LAUNCHES, np.diff(t[order], prepend=np.int64(0)), ~begin,
                                           lane_uuid[track[order]], wide=True)
    r.const(tag(TE_NAME, 2), begin)
    nlen = r.placeholder(wide=True)
    n0 = r.mark()
    r.table(titles, spans.launch[k], begin)
    r.set_length(nlen, r.length_since(n0), begin)
    r.const(tag(TE_ANNOTATIONS, 2))
    alen = r.placeholder()
    a0 = r.mark()
    r.const(tag(DA_NAME_IID, 0))
    r.column(np.where(begin, ANN_LAUNCH, ANN_CTAS).astype(np.uint8))
    r.const(tag(DA_INT, 0))
    r.varint(np.where(begin, launch_no[spans.launch[k]], spans.ctas[k]))
    r.set_length(alen, r.length_since(a0))
    r.set_length(tlen, r.length_since(t0))
    r.set_length(plen, r.length_since(p0))
    return r


class CtaEvents:
    """Sequence 2: each CTA's lifetime slice on its slot track, in time order (at equal
    times: ends, begins, then the end of a zero-length slice).  The resident-CTA counters of
    the SMs and top groups ride on these events (``extra_counter_values``, ~7 bytes a
    sample where a packet of its own would take ~14).  In the sm layout a CTA slice is
    named after its launch, ``kernel #launch`` (interned: ``names``, so that the UI colours
    the CTAs of a launch alike), and its BEGIN carries ``launch`` before ``cta``."""

    def __init__(self, launches, plan: TracePlan, shift: int, kernels, workers: int = 1):
        """Made before the unit tracks are counted (on a worker, beside the writer's index
        step): the track uuids are those after 0 unit tracks until ``after_units``;
        ``workers``: threads for cutting the events into parts of time (``CtaParts``).  Only
        the parts are cut here; each part's events, fields and bytes are made by ``packets``,
        one task of the writer's per part (``tasks``), and dropped once encoded."""
        ctas, lay = plan.ctas, plan.lay
        row_uuid, self.sm_uuid, self.top_uuid, _ = layout_uuids(0, lay, len(plan.tops.titles))
        self.keys = (lay.group, plan.cta_top)
        self.parts = CtaParts(ctas["start_ns"], ctas["end_ns"], lay.row, list(self.keys), workers, shift=shift,
                              track_ids=row_uuid)
        self.n_units = 0
        self.ctas, self.lr = ctas, plan.cta_lr  # each part's fields are gathered from these
        self.gx, self.gy, self.multi = grid_of_launches(launches)
        self.launch_tables = tuple(np.ascontiguousarray(a, np.int64) for a in
                                   (self.gx, self.gy, self.multi, launches["launch"]))
        self.n_samples = 0  # counter samples written, summed as the parts are encoded
        self._lock = threading.Lock()
        self.by_launch = plan.layout == "launch"
        self.launch_no = launches["launch"].astype(np.int64)
        self.names = {} if self.by_launch else dict(enumerate(launch_names(kernels, launches), start=1))

    @staticmethod
    def tasks(n_ctas: int) -> list[tuple[int, slice]]:
        """The writer's tasks for ``n_ctas`` CTAs, known before the events are cut: (part, its
        events): a part each where the parts are made in C, else slices of CHUNK events of
        the one part."""
        parts = planned_parts(n_ctas)
        if parts > 1:
            return [(j, slice(None)) for j in range(parts)]
        return [(0, slice(lo, lo + CHUNK)) for lo in range(0, 2 * n_ctas, CHUNK)]

    def after_units(self, n_units: int) -> "CtaEvents":
        """The uuids once ``n_units`` unit tracks come first (``layout_uuids``); call once."""
        self.n_units = n_units
        return self

    def _part(self, j: int) -> CtaSequence:
        if self.parts.n_parts > 1:
            return self.parts.part(j)
        with self._lock:  # the one part, made once and shared by the slices of it
            if not hasattr(self, "_whole"):
                self._whole = self.parts.part(0)
            return self._whole

    def counters(self, seq: CtaSequence, sel: slice, c: np.ndarray) -> list:
        """The events' counter samples, (has, counter track uuid, value) twice: the SM's and
        the top group's resident CTAs, where the event changes them."""
        (sm_has, sm_v), (la_has, la_v) = ((has[sel], v[sel]) for has, v in seq.marks)
        sm_uuid = self.sm_uuid[self.keys[0][c]] + self.n_units
        la_uuid = self.top_uuid[self.keys[1][c]] + self.n_units
        # Perfetto's importer (v52) reads the value after a leading 0 in extra_counter_values
        # as 0 too: an event with two samples puts a 0 last
        swap = ~sm_has | (la_has & (sm_v == 0))
        with self._lock:
            self.n_samples += int(sm_has.sum()) + int(la_has.sum())
        return [(sm_has | la_has, np.where(swap, la_uuid, sm_uuid), np.where(swap, la_v, sm_v)),
                (sm_has & la_has, np.where(swap, sm_uuid, la_uuid), np.where(swap, sm_v, la_v))]

    def packets(self, task: tuple[int, slice], compress: bool) -> bytes:
        """The events of ``task`` (``tasks``) as the file's bytes (deflated batches where
        ``compress``): laid out in C where the extension is built (``cta_events_c``), else by
        ``rows``."""
        mod = native_events.module()
        if mod is not None and self.parts.n_parts > 1:  # a part in one C call, where its columns allow
            j = task[0]
            got = part_packets(mod, SEQ_CTAS, self.by_launch, self.n_units, self.parts, j, self.ctas, self.sm_uuid,
                               self.top_uuid, self.lr, self.launch_tables)
            if got is not None:
                data, ends, samples = got
                with self._lock:
                    self.n_samples += samples
                return deflated(data, ends) if compress and data else data
        seq, sel = self._part(task[0]), task[1]
        if mod is None:
            return finish(self.rows(seq, sel), compress)
        begin, c, cid, lr, dts, track, value = self._columns(seq, sel)
        if self.by_launch:
            a, b, cc, d = cid, self.gx[lr], self.gy[lr], self.multi[lr]
        else:
            a, b, cc, d = lr + 1, self.launch_no[lr], None, None
        data, ends = cta_packets(mod, SEQ_CTAS, self.by_launch, dts, begin, track, a, b, cc, d, value,
                                 self.counters(seq, sel, c))
        return deflated(data, ends) if compress and data else data

    def _columns(self, seq: CtaSequence, sel: slice):
        """(BEGIN or not, CTA, its CTA id, its launch rank, timestamp delta, track uuid, the arg:
        CTA id or cycles) of the events ``sel`` of a part, the fields both layouts of a packet
        share (each gathered once)."""
        begin, c = seq.begin[sel], seq.cta[sel]
        lo = sel.start or 0
        dts = np.diff(seq.t[sel], prepend=seq.t[lo - 1] if lo > 0 else np.int64(seq.prev_t))
        cid = self.ctas.take("cta", c).astype(np.int64)
        cycles = (self.ctas.take("end_clock", c) - self.ctas.take("start_clock", c)).view(np.int64)
        return begin, c, cid, self.lr[c].astype(np.int64), dts, seq.track[sel] + self.n_units, \
            np.where(begin, cid, cycles)

    def rows(self, seq: CtaSequence, sel: slice) -> Rows:
        """The events ``sel`` of a part as numpy byte columns (where the C layout is not built)."""
        begin, c, cid, lr, dts, track, value = self._columns(seq, sel)
        r = Rows(len(begin))
        plen, p0, tlen, t0 = slice_event_start(r, SEQ_CTAS, dts, ~begin, track)
        if self.by_launch:  # "CTA 37"
            r.const(tag(TE_NAME, 2), begin)
            nlen = r.placeholder()
            n0 = r.mark()
            cta_name(r, cid, self.gx[lr], self.gy[lr], self.multi[lr], begin)
            r.set_length(nlen, r.length_since(n0), begin)
        else:  # the launch's interned name (``names``): one varint
            r.const(tag(TE_NAME_IID, 0), begin)
            r.varint(lr + 1, begin)
        if not self.by_launch:  # the reader keeps an event's last annotation: the CTA id goes after
            r.const(tag(TE_ANNOTATIONS, 2), begin)
            llen = r.placeholder()
            l0 = r.mark()
            r.const(tag(DA_NAME_IID, 0) + bytes([ANN_LAUNCH]) + tag(DA_INT, 0), begin)
            r.varint(self.launch_no[lr], begin)
            r.set_length(llen, r.length_since(l0), begin)
        r.const(tag(TE_ANNOTATIONS, 2))  # BEGIN: the CTA id; END: its cycles
        alen = r.placeholder()
        a0 = r.mark()
        r.const(tag(DA_NAME_IID, 0))
        r.column(np.where(begin, ANN_CTA, ANN_CYCLES).astype(np.uint8))
        r.const(tag(DA_INT, 0))
        r.varint(value)
        r.set_length(alen, r.length_since(a0))
        counters = self.counters(seq, sel, c)
        for has, uuid, _ in counters:  # the tracks of the samples, then their values (in that order)
            r.const(tag(TE_EXTRA_COUNTER_TRACKS, 0), has)
            r.varint(uuid, has)
        for has, _, value in counters:
            r.const(tag(TE_EXTRA_COUNTER_VALUES, 0), has)
            r.varint(value, has)
        r.set_length(tlen, r.length_since(t0))
        r.set_length(plen, r.length_since(p0))
        return r
