"""C for the CTA sequence's packets (built into ``native_events``' extension), and the call
that lays a batch of them out.

Why: ``CtaEvents.rows`` builds each batch as ~60 numpy byte columns (``_proto.Rows``): for a
capture of kernels without scopes, 4 M CTA lifetimes, that was 11-13 s of thread time on
the 16-core GPU host (2026-11-28), ~3 us an event, where the interval events' C encoder
takes ~0.4.  Here the columns that numpy computes well (times, tracks, counter samples) are
still made by numpy; the bytes are laid out in one C pass without the GIL, the same bytes
field for field (``tests/test_trace_native.py`` and ``tests/test_cta_sequence.py`` write whole
traces both ways).  Where the CTAs' events are cut into parts of time, ``part_packets`` makes a
whole part in one call, its sort, resident counts and columns too: made in numpy, a part held
~500 bytes an event on its thread and waited on the GIL between some forty calls (4.19 M CTA
lifetimes on the H200 host's 16 threads: the stop's peak 10.7x the raw size against 9.7x, the
write 1.87-1.90 s against 1.58-1.68 s).
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

/* one CTA event's TracePacket at *pp (at most 256 bytes), as cta_packets documents it; 0, or 3 (a
   negative CTA id or an empty grid) or 4 (a length over 127) */
static inline int lay_cta_event(unsigned char **pp, uint64_t seq, int seq_len, int by_launch, int beg, int64_t dt,
                                int64_t tr, int64_t a, int64_t b, int64_t c, int64_t d, int64_t value, int has1,
                                int64_t uuid1, int64_t val1, int has2, int64_t uuid2, int64_t val2) {
    unsigned char *p = *pp;
    uint64_t x = 0, y = 0, z = 0;
    int name = 0, multi = 0;
    if (beg && by_launch) {
        if (a < 0 || (d && (b <= 0 || c <= 0))) return 3;
        multi = d != 0;
        name = 4 + decimal_len((uint64_t)a);
        if (multi) {
            x = (uint64_t)(a % b);
            y = (uint64_t)(a / b % c);
            z = (uint64_t)(a / (b * c));
            name += 5 + decimal_len(x) + decimal_len(y) + decimal_len(z);
        }
    }
    int launch_ann = beg && !by_launch ? 3 + varint_len((uint64_t)b) : 0;
    int ann = 3 + varint_len((uint64_t)value);
    int te = 2 + 1 + varint_len((uint64_t)tr) +
             (beg ? (by_launch ? 3 + name : 1 + varint_len((uint64_t)a) + 2 + launch_ann) : 0) + 2 + ann +
             (has1 ? 2 + varint_len((uint64_t)uuid1) + 1 + varint_len((uint64_t)val1) : 0) +
             (has2 ? 2 + varint_len((uint64_t)uuid2) + 1 + varint_len((uint64_t)val2) : 0);
    int body = 1 + varint_len((uint64_t)dt) + 1 + seq_len + 2 + te;
    if (name > 127 || te > 127 || body > 127) return 4;
    *p++ = 0x0a; *p++ = (unsigned char)body;
    *p++ = 0x40; p = put_varint(p, (uint64_t)dt);
    *p++ = 0x50; p = put_varint(p, seq);
    *p++ = 0x5a; *p++ = (unsigned char)te;
    *p++ = 0x48; *p++ = beg ? 1 : 2;
    *p++ = 0x58; p = put_varint(p, (uint64_t)tr);
    if (beg && by_launch) {
        *p++ = 0xba; *p++ = 0x01; *p++ = (unsigned char)name;
        memcpy(p, "CTA ", 4); p += 4;
        p = put_decimal(p, (uint64_t)a);
        if (multi) {
            *p++ = ' '; *p++ = '('; p = put_decimal(p, x); *p++ = ','; p = put_decimal(p, y); *p++ = ',';
            p = put_decimal(p, z); *p++ = ')';
        }
    } else if (beg) {
        *p++ = 0x50; p = put_varint(p, (uint64_t)a);
        *p++ = 0x22; *p++ = (unsigned char)launch_ann;
        *p++ = 0x08; *p++ = 5; *p++ = 0x20; p = put_varint(p, (uint64_t)b);
    }
    *p++ = 0x22; *p++ = (unsigned char)ann;
    *p++ = 0x08; *p++ = beg ? 3 : 1; *p++ = 0x20; p = put_varint(p, (uint64_t)value);
    if (has1) { *p++ = 0xf8; *p++ = 0x01; p = put_varint(p, (uint64_t)uuid1); }
    if (has2) { *p++ = 0xf8; *p++ = 0x01; p = put_varint(p, (uint64_t)uuid2); }
    if (has1) { *p++ = 0x60; p = put_varint(p, (uint64_t)val1); }
    if (has2) { *p++ = 0x60; p = put_varint(p, (uint64_t)val2); }
    *pp = p;
    return 0;
}

/* the error of a layout's code: 1 (lengths: ``lengths``), 2, 3 (lay_cta_event's) or 4; NULL */
static PyObject *cta_error(int bad, const char *lengths) {
    if (bad == 2) return PyErr_NoMemory();
    PyErr_SetString(PyExc_ValueError, bad == 1 ? lengths : bad == 3 ? "cta_packets: a negative CTA id or an empty grid"
                    : "row message longer than 127 bytes: one-byte length prefix does not fit");
    return NULL;
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
            bad = lay_cta_event(&p, (uint64_t)seq, seq_len, by_launch, begin[i] != 0, dts[i], track[i], a[i], b[i],
                                c[i], d[i], value[i], has1[i], uuid1[i], val1[i], has2[i], uuid2[i], val2[i]);
            ends[i] = p - out;
        }
        size = p - out;
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 15);
    PyObject *result = bad ? cta_error(bad, "cta_packets: array lengths differ")
                           : PyBytes_FromStringAndSize((const char *)out, size);
    free(out);
    return result;
}

/* cta_part_packets(seq, by_launch, n_units, shift, prev_t, ev, start, end, row, row_uuid, key0, init0, key1,
   init1, sm_uuid, top_uuid, cid, src, itemsize, off_start_clock, off_end_clock, order, lr, gx, gy, multi,
   launch_no, ends_out) -> (bytes, counter samples): one part of the CTA sequence (``ev``: its events, e < n
   CTA e's BEGIN, else CTA e - n's END; int32) sorted by (time, phase, track, position), counted per key and
   laid out, as CtaParts.part, CtaEvents._columns / counters and cta_packets make them in numpy; per CTA:
   start, end, row, key0, lr (int64), key1 (int32), cid (uint32), and its clocks in ``src`` (the profile's
   rows, itemsize bytes each) at row order[c] (int32). None where time, phase and track do not fit one
   64-bit key (a part's time span times its tracks' range over ~2^62: an hour at a million tracks); the
   numpy path sorts those */
static PyObject *cta_part_packets(PyObject *self, PyObject *args) {
    long long seq, n_units, shift, prev_t, itemsize, off_s, off_e;
    int by_launch;
    PyObject *o[22];
    if (!PyArg_ParseTuple(args, "LpLLLOOOOOOOOOOOOOLLLOOOOOOO", &seq, &by_launch, &n_units, &shift, &prev_t,
                          &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11],
                          &o[12], &itemsize, &off_s, &off_e, &o[13], &o[14], &o[15], &o[16], &o[17], &o[18],
                          &o[19]))
        return NULL;
    Py_buffer v[20];
    if (take_buffers(o, v, 20, 19, 20) < 0) return NULL;
    Py_ssize_t m = v[0].len / 4, n = v[1].len / 8, n_rows = v[4].len / 8, nk0 = v[6].len / 8, nk1 = v[8].len / 8;
    Py_ssize_t n_src = itemsize > 0 ? v[12].len / itemsize : 0, n_l = v[15].len / 8;
    int bad = itemsize <= 0 || off_s < 0 || off_e < 0 || off_s + 8 > itemsize || off_e + 8 > itemsize ||
              v[2].len != n * 8 || v[3].len != n * 8 || v[5].len != n * 8 || v[7].len != n * 4 ||
              v[11].len != n * 4 || v[13].len != n * 4 || v[14].len != n * 8 || v[9].len < nk0 * 8 ||
              v[10].len < nk1 * 8 || v[16].len != n_l * 8 || v[17].len != n_l * 8 || v[18].len != n_l * 8 ||
              v[19].len != m * 8;
    unsigned char *out = NULL;
    Py_ssize_t size = 0;
    long long samples = 0;
    if (!bad) {
        const int32_t *ev = v[0].buf, *key1 = v[7].buf, *order = v[13].buf;
        const int64_t *start = v[1].buf, *end = v[2].buf, *row = v[3].buf, *row_uuid = v[4].buf, *key0 = v[5].buf,
                      *init0 = v[6].buf, *init1 = v[8].buf, *sm_uuid = v[9].buf, *top_uuid = v[10].buf,
                      *lr = v[14].buf, *gx = v[15].buf, *gy = v[16].buf, *multi = v[17].buf, *launch_no = v[18].buf;
        const uint32_t *cid = v[11].buf;
        const unsigned char *src = v[12].buf;
        int64_t *ends = v[19].buf;
        Py_BEGIN_ALLOW_THREADS
        /* per event: time, track, CTA, phase; then the order, the keys' marks */
        int64_t *t = malloc((size_t)m * 8 + 8), *track = malloc((size_t)m * 8 + 8), *cta = malloc((size_t)m * 8 + 8);
        int64_t *x = malloc((size_t)m * 8 + 8), *tx = malloc((size_t)m * 8 + 8), *k = malloc((size_t)m * 8 + 8);
        uint64_t *key = malloc((size_t)m * 8 + 8), *tkey = malloc((size_t)m * 8 + 8);
        uint8_t *phase = malloc((size_t)m ? (size_t)m : 1), *has = calloc((size_t)m * 2 + 1, 1);
        int64_t *val = calloc((size_t)m * 2 + 1, 8), *tt = malloc((size_t)m * 8 + 8);
        int64_t *delta = malloc((size_t)m * 8 + 8);
        if (!t || !track || !cta || !x || !tx || !k || !key || !tkey || !phase || !has || !val || !tt || !delta)
            bad = 2;
        int64_t t_lo = INT64_MAX, t_hi = INT64_MIN, tr_lo = INT64_MAX, tr_hi = INT64_MIN;
        for (Py_ssize_t e = 0; e < m && !bad; e++) {
            int64_t id = ev[e], c = id < n ? id : id - n;
            if (id < 0 || id >= 2 * n || row[c] < 0 || row[c] >= n_rows) { bad = 5; break; }
            int beg = id < n;
            cta[e] = c;
            t[e] = (beg ? start[c] : end[c]) + shift;
            phase[e] = beg ? 1 : (end[c] <= start[c] ? 2 : 0);
            track[e] = row_uuid[row[c]];
            if (t[e] < t_lo) t_lo = t[e];
            if (t[e] > t_hi) t_hi = t[e];
            if (track[e] < tr_lo) tr_lo = track[e];
            if (track[e] > tr_hi) tr_hi = track[e];
        }
        if (!bad && m) {
            for (Py_ssize_t e = 0; e < m; e++) x[e] = e;
            int t_bits = 0, tr_bits = 0;
            for (uint64_t r = (uint64_t)(t_hi - t_lo); r; r >>= 1) t_bits++;
            for (uint64_t r = (uint64_t)(tr_hi - tr_lo); r; r >>= 1) tr_bits++;
            if (t_bits + 2 + tr_bits <= 64) {  /* one key; the radix sort keeps positions in order */
                for (Py_ssize_t e = 0; e < m; e++)
                    key[e] = (((uint64_t)(t[e] - t_lo) << 2 | phase[e]) << tr_bits) | (uint64_t)(track[e] - tr_lo);
                radix_pairs(key, x, tkey, tx, m, t_bits + 2 + tr_bits);
            } else bad = 6;  /* a part spanning too long a time for one key: the numpy path sorts it */
            for (Py_ssize_t j = 0; j < m && !bad; j++) {
                int64_t e = x[j], c = cta[e];
                tt[j] = t[e]; delta[j] = ev[e] < n ? 1 : -1;
                if (key0[c] < 0 || key0[c] >= nk0 || key1[c] < 0 || key1[c] >= nk1 || lr[c] < 0 || lr[c] >= n_l ||
                    order[c] < 0 || order[c] >= n_src) { bad = 5; break; }
            }
            if (!bad) {
                for (Py_ssize_t j = 0; j < m; j++) k[j] = key0[cta[x[j]]];
                bad = resident_sweep(m, k, tt, delta, init0, nk0, has, val);
            }
            if (!bad) {
                for (Py_ssize_t j = 0; j < m; j++) k[j] = key1[cta[x[j]]];
                bad = resident_sweep(m, k, tt, delta, init1, nk1, has + m, val + m);
            }
        }
        if (!bad) {
            out = malloc((size_t)m * 256 + 1);
            if (!out) bad = 2;
        }
        unsigned char *p = out;
        int seq_len = varint_len((uint64_t)seq);
        int64_t before = prev_t;
        for (Py_ssize_t j = 0; j < m && !bad; j++) {
            int64_t e = x[j], c = cta[e];
            int beg = ev[e] < n;
            uint64_t s_clk, e_clk;
            memcpy(&s_clk, src + (size_t)order[c] * itemsize + off_s, 8);
            memcpy(&e_clk, src + (size_t)order[c] * itemsize + off_e, 8);
            int64_t cycles = (int64_t)(e_clk - s_clk), id = (int64_t)cid[c], l = lr[c];
            int sm_has = has[j], la_has = has[m + j];
            int64_t sm_v = val[j], la_v = val[m + j];
            int64_t sm_u = sm_uuid[key0[c]] + n_units, la_u = top_uuid[key1[c]] + n_units;
            int swap = !sm_has || (la_has && sm_v == 0);
            samples += sm_has + la_has;
            int64_t a = by_launch ? id : l + 1, b = by_launch ? gx[l] : launch_no[l];
            int64_t cc = by_launch ? gy[l] : 0, d = by_launch ? multi[l] : 0;
            bad = lay_cta_event(&p, (uint64_t)seq, seq_len, by_launch, beg, tt[j] - before, track[e] + n_units, a, b,
                                cc, d, beg ? id : cycles, sm_has || la_has, swap ? la_u : sm_u, swap ? la_v : sm_v,
                                sm_has && la_has, swap ? sm_u : la_u, swap ? sm_v : la_v);
            before = tt[j];
            ends[j] = p - out;
        }
        size = p ? p - out : 0;
        free(t); free(track); free(cta); free(x); free(tx); free(k); free(key); free(tkey); free(phase); free(has);
        free(val); free(tt); free(delta);
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 20);
    PyObject *result = NULL;
    if (bad == 5) PyErr_SetString(PyExc_IndexError, "cta_part_packets: an index lies outside its table");
    else if (bad == 6) { Py_INCREF(Py_None); result = Py_None; }
    else if (bad) cta_error(bad, "cta_part_packets: array lengths or offsets do not fit");
    else result = Py_BuildValue("y#L", out ? (const char *)out : "", size, samples);
    free(out);
    return result;
}
"""

METHODS = r"""
    {"cta_packets", cta_packets, METH_VARARGS, "the CTA sequence's packets, laid out without the GIL"},
    {"cta_part_packets", cta_part_packets, METH_VARARGS, "a part of the CTA sequence sorted, counted and laid out"},
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


def part_packets(mod, seq_id: int, by_launch: bool, n_units: int, parts, j: int, ctas, sm_uuid, top_uuid, lr,
                 launch_tables):
    """Part ``j`` of ``parts`` (a ``CtaParts`` cut into parts; its rows and two key columns, SM
    group and top group) sorted, counted and laid out in one C call: (packets, each one's end
    offset, counter samples), or None where the columns are not laid out as that call reads them
    (then ``CtaParts.part`` and ``cta_packets`` do it).  ``ctas``: the plan's ``CtaView``;
    ``launch_tables``: grid x, grid y, multi-dimensional (int64 each) and launch numbers."""
    src = ctas.source
    fields = src.dtype.fields or {}
    row, key1 = parts.track, parts.keys[1]
    cols = (parts.start, parts.end, row, parts.track_ids, parts.keys[0], lr)
    cid = ctas["cta"]
    if parts.by_part is None or parts.by_part.dtype != np.int32 or ctas.order is None or \
            ctas.order.dtype != np.int32 or parts.track_ids is None or not src.flags.c_contiguous or \
            any(fields.get(f, (None,))[0] != np.dtype("<u8") for f in ("start_clock", "end_clock")) or \
            any(c.dtype != np.int64 or not c.flags.c_contiguous for c in cols) or \
            key1.dtype != np.int32 or cid.dtype != np.uint32 or not cid.flags.c_contiguous:
        return None
    lo, hi = int(parts.bounds[j]), int(parts.bounds[j + 1])
    ends = np.empty(hi - lo, np.int64)
    init = parts.counts_before(j)
    gx, gy, multi, launch_no = launch_tables
    got = mod.cta_part_packets(
        int(seq_id), bool(by_launch), int(n_units), int(parts.shift), int(parts.prev_t[j]), parts.by_part[lo:hi],
        parts.start, parts.end, row, parts.track_ids, parts.keys[0], init[0], np.ascontiguousarray(key1),
        init[1], np.ascontiguousarray(sm_uuid, np.int64), np.ascontiguousarray(top_uuid, np.int64), cid,
        src.view(np.uint8).reshape(-1) if len(src) else np.zeros(0, np.uint8), src.dtype.itemsize,
        fields["start_clock"][1], fields["end_clock"][1], ctas.order, lr, gx, gy, multi, launch_no, ends)
    return None if got is None else (got[0], ends, got[1])
