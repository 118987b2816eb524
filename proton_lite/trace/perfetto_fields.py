"""Field numbers of Perfetto's protos that the .pftrace writer and reader use, and packet framing.

From trace_packet.proto, track_event.proto, debug_annotation.proto, interned_data.proto,
track_descriptor.proto, counter_descriptor.proto and clock_snapshot.proto, checked against
the descriptors in the ``perfetto`` package.
"""
from __future__ import annotations

import numpy as np

from proton_lite.trace._proto import WIRE_LEN, Rows, field_bytes, field_varint, tag, varint

META_FIELD = 9001  # outside Perfetto's own fields (< 1000) and its extension range (1000-1999): skipped
SEQ_LAUNCHES = 1  # the sm layout's launch slices (trace/plan.py)
SEQ_CTAS = 2  # the CTA slices and the resident-CTA counters
FIRST_PIECE_SEQ = 3  # the intervals: piece k is sequence 3 + k (perfetto_pieces)
CLOCK_ID = 64  # first sequence-scoped clock id
BOOTTIME = 6
# TracePacket
P_CLOCK_SNAPSHOT, P_TIMESTAMP, P_SEQ_ID, P_TRACK_EVENT, P_INTERNED, P_FLAGS = 6, 8, 10, 11, 12, 13
P_COMPRESSED, P_DEFAULTS, P_TRACK_DESCRIPTOR = 50, 59, 60
SEQ_INCREMENTAL_STATE_CLEARED = 1
# TrackEvent, DebugAnnotation, InternedData, TracePacketDefaults, ClockSnapshot
TE_ANNOTATIONS, TE_TYPE, TE_NAME_IID, TE_TRACK_UUID, TE_NAME = 4, 9, 10, 11, 23
TE_EXTRA_COUNTER_VALUES, TE_EXTRA_COUNTER_TRACKS = 12, 31
TYPE_SLICE_BEGIN, TYPE_SLICE_END = 1, 2
DA_NAME_IID, DA_INT, DA_STRING_IID = 1, 4, 17
ID_EVENT_NAMES, ID_ANNOTATION_NAMES, ID_ANNOTATION_STRINGS = 2, 3, 29
TPD_CLOCK_ID = 58
CS_CLOCKS, CLK_ID, CLK_TS, CLK_INCREMENTAL = 1, 1, 2, 3
ANN_CYCLES, ANN_DEPTH, ANN_CTA, ANN_NOTE, ANN_LAUNCH, ANN_CTAS = 1, 2, 3, 4, 5, 6
ANNOTATION_NAMES = {ANN_CYCLES: "cycles", ANN_DEPTH: "depth", ANN_CTA: "cta", ANN_NOTE: "note", ANN_LAUNCH: "launch",
                    ANN_CTAS: "ctas"}
# TrackDescriptor, CounterDescriptor
TD_UUID, TD_NAME, TD_PARENT, TD_COUNTER, TD_CHILD_ORDERING, TD_RANK, TD_DESCRIPTION, TD_MERGE = 1, 2, 5, 8, 11, 12, 14, 15
CD_UNIT_NAME, CD_Y_AXIS_SHARE_KEY = 6, 7
CHILD_ORDERING_EXPLICIT, SIBLING_MERGE_NONE = 3, 2


def packet(*parts: bytes) -> bytes:
    """One ``Trace.packet`` holding ``parts`` (encoded TracePacket fields)."""
    return field_bytes(1, b"".join(parts))


def packet_field_head(num: int, length: int) -> bytes:
    """The bytes before a payload of ``length`` bytes in ``packet(field_bytes(num, payload))``:
    the payload is written after it as it is (the metadata's parts, never joined)."""
    inner = tag(num, WIRE_LEN) + varint(length)
    return tag(1, WIRE_LEN) + varint(len(inner) + length) + inner


def slice_event_start(r: Rows, seq_id: int, dts, is_end, track, wide: bool = False) -> tuple[int, int, int, int]:
    """The head every slice event shares: ``TracePacket { timestamp = dts; sequence id;
    track_event = TrackEvent { type = BEGIN/END; track_uuid ... } }`` up to the track uuid,
    the rest of the event to follow.  Returns the (packet, track event) length placeholders
    and their marks, for ``r.set_length`` once the event is complete (``wide``: lengths
    of up to 16,383 bytes, for events with long names)."""
    r.const(b"\x0a")
    plen = r.placeholder(wide)
    p0 = r.mark()
    r.const(tag(P_TIMESTAMP, 0))
    r.varint(dts)
    r.const(field_varint(P_SEQ_ID, seq_id) + tag(P_TRACK_EVENT, 2))
    tlen = r.placeholder(wide)
    t0 = r.mark()
    r.const(tag(TE_TYPE, 0))
    r.column(np.where(is_end, TYPE_SLICE_END, TYPE_SLICE_BEGIN).astype(np.uint8))
    r.const(tag(TE_TRACK_UUID, 0))
    r.varint(track)
    return plen, p0, tlen, t0
