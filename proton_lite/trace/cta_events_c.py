"""C for the CTA sequence's packets (built into ``native_events``' extension), and the call
that lays a batch of them out.

Why: ``CtaEvents.rows`` builds each batch as ~60 numpy byte columns (``_proto.Rows``): for a
capture of kernels without scopes, 4 M CTA lifetimes, that was 11-13 s of thread time on
the 16-core GPU host (2026-11-28), ~3 us an event, where the interval events' C encoder
takes ~0.4.  Here the columns that numpy computes well (times, tracks, counter samples) are
still made by numpy; the bytes are laid out in one C pass without the GIL, the same bytes
field for field (``tests/test_trace_native.py`` and ``tests/test_cta_sequence.py`` write whole
traces both ways).
"""
from __future__ import annotations

import numpy as np

SOURCE = r"""
static inline int decimal_len(uint64_t v) { int n = 1; while (v >= 10) { v /= 10; n++; } return n; }

static inline unsigned char *put_decimal(unsigned char *p, uint64_t v) {
    unsigned char tmp[24];
    int k = 0;
    do { tmp[k++] = (unsigned char)('0' + v % 10); v /= 10; } while (v);
    while (k) *p++ = tmp[--k];
    return p;
}

/* cta_packets(seq, by_launch, dts, begin, track, a, b, c, d, value, has1, uuid1, val1, has2, uuid2,
   val2, ends_out) -> bytes: TracePacket { timestamp = dts; sequence id; track_event = { type;
   track_uuid; [BEGIN] name "CTA a (a % b,a / b % c,a / (b * c))" (the grid part where d) if
   by_launch, else name_iid a and debug annotation launch = b; debug annotation cta (BEGIN) /
   cycles (END) = value; extra counter tracks uuid1, uuid2 and values val1, val2 where has } },
   as perfetto_tree.CtaEvents.rows lays them out; ends_out: each packet's end offset */
static PyObject *cta_packets(PyObject *self, PyObject *args) {
    long long seq;
    int by_launch;
    PyObject *o[16];
    if (!PyArg_ParseTuple(args, "LpOOOOOOOOOOOOOOO", &seq, &by_launch, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14]))
        return NULL;
    Py_buffer v[15];
    if (take_buffers(o, v, 15, 14, 15) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8;
    int bad = seq < 0 || v[1].len != n || v[8].len != n || v[11].len != n || v[14].len != n * 8;
    for (int i = 2; i < 14 && !bad; i++)
        if (i != 8 && i != 11 && v[i].len != n * 8) bad = 1;
    unsigned char *out = NULL;
    Py_ssize_t size = 0;
    if (!bad) {
        const int64_t *dts = v[0].buf, *track = v[2].buf, *a = v[3].buf, *b = v[4].buf, *c = v[5].buf,
                      *d = v[6].buf, *value = v[7].buf, *uuid1 = v[9].buf, *val1 = v[10].buf, *uuid2 = v[12].buf,
                      *val2 = v[13].buf;
        const uint8_t *begin = v[1].buf, *has1 = v[8].buf, *has2 = v[11].buf;
        int64_t *ends = v[14].buf;
        Py_BEGIN_ALLOW_THREADS
        int seq_len = varint_len((uint64_t)seq);
        out = malloc((size_t)n * 256 + 1);
        if (!out) bad = 2;
        unsigned char *p = out;
        for (Py_ssize_t i = 0; i < n && !bad; i++) {
            int beg = begin[i] != 0;
            uint64_t x = 0, y = 0, z = 0;
            int name = 0, multi = 0;
            if (beg && by_launch) {
                if (a[i] < 0 || (d[i] && (b[i] <= 0 || c[i] <= 0))) { bad = 3; break; }
                multi = d[i] != 0;
                name = 4 + decimal_len((uint64_t)a[i]);
                if (multi) {
                    x = (uint64_t)(a[i] % b[i]);
                    y = (uint64_t)(a[i] / b[i] % c[i]);
                    z = (uint64_t)(a[i] / (b[i] * c[i]));
                    name += 5 + decimal_len(x) + decimal_len(y) + decimal_len(z);
                }
            }
            int launch_ann = beg && !by_launch ? 3 + varint_len((uint64_t)b[i]) : 0;
            int ann = 3 + varint_len((uint64_t)value[i]);
            int te = 2 + 1 + varint_len((uint64_t)track[i]) +
                     (beg ? (by_launch ? 3 + name : 1 + varint_len((uint64_t)a[i]) + 2 + launch_ann) : 0) + 2 + ann +
                     (has1[i] ? 2 + varint_len((uint64_t)uuid1[i]) + 1 + varint_len((uint64_t)val1[i]) : 0) +
                     (has2[i] ? 2 + varint_len((uint64_t)uuid2[i]) + 1 + varint_len((uint64_t)val2[i]) : 0);
            int body = 1 + varint_len((uint64_t)dts[i]) + 1 + seq_len + 2 + te;
            if (name > 127 || te > 127 || body > 127) { bad = 4; break; }
            *p++ = 0x0a; *p++ = (unsigned char)body;
            *p++ = 0x40; p = put_varint(p, (uint64_t)dts[i]);
            *p++ = 0x50; p = put_varint(p, (uint64_t)seq);
            *p++ = 0x5a; *p++ = (unsigned char)te;
            *p++ = 0x48; *p++ = beg ? 1 : 2;
            *p++ = 0x58; p = put_varint(p, (uint64_t)track[i]);
            if (beg && by_launch) {
                *p++ = 0xba; *p++ = 0x01; *p++ = (unsigned char)name;
                memcpy(p, "CTA ", 4); p += 4;
                p = put_decimal(p, (uint64_t)a[i]);
                if (multi) {
                    *p++ = ' '; *p++ = '('; p = put_decimal(p, x); *p++ = ','; p = put_decimal(p, y); *p++ = ',';
                    p = put_decimal(p, z); *p++ = ')';
                }
            } else if (beg) {
                *p++ = 0x50; p = put_varint(p, (uint64_t)a[i]);
                *p++ = 0x22; *p++ = (unsigned char)launch_ann;
                *p++ = 0x08; *p++ = 5; *p++ = 0x20; p = put_varint(p, (uint64_t)b[i]);
            }
            *p++ = 0x22; *p++ = (unsigned char)ann;
            *p++ = 0x08; *p++ = beg ? 3 : 1; *p++ = 0x20; p = put_varint(p, (uint64_t)value[i]);
            if (has1[i]) { *p++ = 0xf8; *p++ = 0x01; p = put_varint(p, (uint64_t)uuid1[i]); }
            if (has2[i]) { *p++ = 0xf8; *p++ = 0x01; p = put_varint(p, (uint64_t)uuid2[i]); }
            if (has1[i]) { *p++ = 0x60; p = put_varint(p, (uint64_t)val1[i]); }
            if (has2[i]) { *p++ = 0x60; p = put_varint(p, (uint64_t)val2[i]); }
            ends[i] = p - out;
        }
        size = p - out;
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 15);
    PyObject *result = NULL;
    if (bad == 1) PyErr_SetString(PyExc_ValueError, "cta_packets: array lengths differ");
    else if (bad == 2) PyErr_NoMemory();
    else if (bad == 3) PyErr_SetString(PyExc_ValueError, "cta_packets: a negative CTA id or an empty grid");
    else if (bad == 4) PyErr_SetString(PyExc_ValueError, "row message longer than 127 bytes: one-byte length prefix "
                                                         "does not fit");
    else result = PyBytes_FromStringAndSize((const char *)out, size);
    free(out);
    return result;
}
"""

METHODS = r"""
    {"cta_packets", cta_packets, METH_VARARGS, "the CTA sequence's packets, laid out without the GIL"},
"""


def cta_packets(mod, seq_id: int, by_launch: bool, dts, begin, track, a, b, c, d, value, counters):
    """(packets, each one's end offset) by the C layout; ``counters``: (has, uuid, value) twice;
    ``a``..``d``: CTA id, grid x, grid y, multi-dimensional grid (``by_launch``), or the
    interned name and the launch number (else; ``c``, ``d`` unused)."""
    i64 = lambda x: np.ascontiguousarray(x, np.int64)  # noqa: E731
    u8 = lambda x: np.ascontiguousarray(x, np.uint8)  # noqa: E731
    (h1, u1, v1), (h2, u2, v2) = counters
    n = len(dts)
    c = c if c is not None else np.zeros(n, np.int64)
    d = d if d is not None else np.zeros(n, np.int64)
    ends = np.empty(n, np.int64)
    data = mod.cta_packets(int(seq_id), bool(by_launch), i64(dts), u8(begin), i64(track), i64(a), i64(b), i64(c),
                           i64(d), i64(value), u8(h1), i64(u1), i64(v1), u8(h2), i64(u2), i64(v2), ends)
    return data, ends
