"""C for ``readback_events._chunk_events``: one chunk's packets parsed in a single pass without
the GIL, into the same columns as the numpy parse.

Why: the numpy parse steps all of a chunk's messages one field at a time (``parse_messages``,
``read_varints``, ``packet_bounds``), dozens of array calls a step, each back to the GIL: reading
back the 22.3 M events of a 130 MB .pftrace took 12-14 s on a 2-core host, 2.2-4.3 s with this
(2026-11-29; its parse ~0.8 s of one core, the rest inflating and joining).  Here each packet is
read once, its TrackEvent, descriptor, defaults and annotations as they come, the running sums
of its sequence kept in a small hash table.

Any malformed input (a truncated varint, a field past its message, wire type 3, 4, 6 or 7, an
event without a timestamp, nested compressed packets, ...) is refused as a whole, no partial
result: ``chunk_columns`` gives None and the numpy parse runs, to raise its usual error.  Every
byte read is checked against the end of its message.  Built at first use
(``proton_lite.native_build``); ``PROTON_LITE_NATIVE_READBACK=0`` turns it off.
"""
from __future__ import annotations

import numpy as np

from proton_lite import fresh_memory
from proton_lite.native_build import BUFFERS_C, CExtension
from proton_lite.trace import perfetto_fields as pf

_FIELDS = ("P_TIMESTAMP", "P_SEQ_ID", "P_TRACK_EVENT", "P_TRACK_DESCRIPTOR", "P_DEFAULTS", "P_COMPRESSED",
           "TPD_CLOCK_ID", "CLOCK_ID", "TD_UUID", "TD_PARENT", "TD_RANK", "TE_TYPE", "TE_TRACK_UUID",
           "TE_NAME_IID", "TE_ANNOTATIONS", "DA_NAME_IID", "DA_INT")

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
""" + "".join(f"#define {k} {getattr(pf, k)}ULL\n" for k in _FIELDS) + BUFFERS_C + r"""

/* the varint at *p, before end: 1 and *p past it, 0 where it runs past end or is longer than
   10 bytes (read_varints' limit; bits beyond 64 dropped, as there) */
static inline int rb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    const uint8_t *q = *p;
    if (q < end && *q < 0x80) { *v = *q; *p = q + 1; return 1; }
    uint64_t r = 0;
    for (int k = 0; k < 10 && q < end; k++) {
        uint8_t b = *q++;
        r |= (uint64_t)(b & 0x7F) << (7 * k);
        if (b < 0x80) { *v = r; *p = q; return 1; }
    }
    return 0;
}

/* the next field of the message [*p, end): 1 (number, wire type, varint value, or the payload
   [*lo, *lo + *v) of a LEN field), 0 at the end, -1 malformed (a field past the end, wire
   type 3, 4, 6 or 7: parse_messages' errors) */
static inline int rb_field(const uint8_t **p, const uint8_t *end, uint64_t *num, int *wire, uint64_t *v,
                           const uint8_t **lo) {
    if (*p >= end) return 0;
    uint64_t key;
    if (!rb_varint(p, end, &key)) return -1;
    *num = key >> 3;
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: return rb_varint(p, end, v) ? 1 : -1;
    case 2:
        if (!rb_varint(p, end, v) || *v > (uint64_t)(end - *p)) return -1;
        *lo = *p; *p += *v;
        return 1;
    case 1: if (end - *p < 8) return -1; *p += 8; return 1;
    case 5: if (end - *p < 4) return -1; *p += 4; return 1;
    }
    return -1;
}

/* the varint fields f[0..k) of the message [p, end), the last of each (0 where absent; has[j]
   says found); 0 where the message is malformed */
static int rb_varints(const uint8_t *p, const uint8_t *end, const uint64_t *f, int k, uint64_t *val, int *has) {
    uint64_t num, v;
    int wire, r;
    const uint8_t *lo;
    for (int j = 0; j < k; j++) { val[j] = 0; has[j] = 0; }
    while ((r = rb_field(&p, end, &num, &wire, &v, &lo)) > 0)
        if (wire == 0)
            for (int j = 0; j < k; j++)
                if (num == f[j]) { val[j] = v; has[j] = 1; }
    return r == 0;
}

/* the next Trace.packet at *p (before end): its payload [*lo, *hi), *p at the next; 0 where
   damaged as packet_bounds refuses it (no tag 0x0a, a length of over 5 bytes, past the end) */
static inline int rb_packet(const uint8_t **p, const uint8_t *end, const uint8_t **lo, const uint8_t **hi) {
    const uint8_t *q = *p;
    if (*q++ != 0x0A) return 0;
    uint64_t len = 0;
    for (int k = 0;; k++) {
        if (k == 5 || q >= end) return 0;
        uint8_t b = *q++;
        len |= (uint64_t)(b & 0x7F) << (7 * k);
        if (b < 0x80) break;
    }
    if (len > (uint64_t)(end - q)) return 0;
    *lo = q; *hi = *p = q + len;
    return 1;
}

/* the sequences of a chunk: id -> running sum of its steps (open addressing, grown at half full) */
typedef struct { uint64_t *key, *sum; uint8_t *used; size_t cap, n; } Seqs;

static inline size_t seq_hash(uint64_t k) { k ^= k >> 33; k *= 0xFF51AFD7ED558CCDULL; return (size_t)(k ^ (k >> 33)); }

/* the slot of sequence k (added with sum 0 where new); (size_t)-1: no memory */
static size_t seq_slot(Seqs *S, uint64_t k) {
    size_t m = S->cap - 1, i = seq_hash(k) & m;
    while (S->used[i]) { if (S->key[i] == k) return i; i = (i + 1) & m; }
    if (2 * (S->n + 1) > S->cap) {
        Seqs T = {calloc(2 * S->cap, 8), calloc(2 * S->cap, 8), calloc(2 * S->cap, 1), 2 * S->cap, S->n};
        if (!T.key || !T.sum || !T.used) { free(T.key); free(T.sum); free(T.used); return (size_t)-1; }
        for (size_t j = 0; j < S->cap; j++)
            if (S->used[j]) {
                size_t t = seq_hash(S->key[j]) & (T.cap - 1);
                while (T.used[t]) t = (t + 1) & (T.cap - 1);
                T.used[t] = 1; T.key[t] = S->key[j]; T.sum[t] = S->sum[j];
            }
        free(S->key); free(S->sum); free(S->used);
        *S = T;
        return seq_slot(S, k);
    }
    S->used[i] = 1; S->key[i] = k; S->sum[i] = 0; S->n++;
    return i;
}

static int pair_cmp(const void *a, const void *b) {
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return (x > y) - (x < y);
}

enum { C_TS, C_RUNNING, C_SEQ, C_TYP, C_TRACK, C_IID, C_AN, C_AV, C_FIRST_AN, C_FIRST_AV, N_COLS };

/* what a chunk gives besides its events' columns: the events, the clock (-1 no defaults, 0
   another, 1 the sequence clock), its descriptors as (uuid, parent, rank) triples and its
   sequences as (id, total) pairs, by id (malloc'd: few) */
typedef struct { Py_ssize_t ev, td, seqs; int clock; int64_t *desc, *pairs; } Chunk;

/* the chunk [buf, buf + n) parsed into the event columns (cap rows each; first_an/first_av
   only with first) and *out; 0 done, 1 malformed, 2 no memory */
static int rb_chunk(const uint8_t *buf, Py_ssize_t n, int first, void **col, Py_ssize_t cap, Chunk *out) {
    int64_t *ts = col[C_TS], *running = col[C_RUNNING], *seq_o = col[C_SEQ], *track = col[C_TRACK];
    int64_t *iid = col[C_IID], *av = col[C_AV], *first_av = col[C_FIRST_AV];
    uint8_t *typ = col[C_TYP];
    int32_t *an = col[C_AN], *first_an = col[C_FIRST_AN];
    static const uint64_t F_CLOCK[1] = {TPD_CLOCK_ID}, F_TD[3] = {TD_UUID, TD_PARENT, TD_RANK},
                          F_DA[2] = {DA_NAME_IID, DA_INT};
    Seqs S = {calloc(64, 8), calloc(64, 8), calloc(64, 1), 64, 0};
    Py_ssize_t td_cap = 16;
    out->desc = malloc(3 * 8 * td_cap);
    out->pairs = NULL;
    int status = (!S.key || !S.sum || !S.used || !out->desc) ? 2 : 0, has[3];
    uint64_t val[3], last_seq = 0;
    size_t last_slot = (size_t)-1;
    Py_ssize_t ne = 0, nd = 0, np_ = 0;
    const uint8_t *p = buf, *end = buf + n;
    out->clock = -1;
    while (!status && p < end) {
        const uint8_t *q, *hi, *lo, *te = NULL, *te_hi = NULL, *td = NULL, *td_hi = NULL, *df = NULL, *df_hi = NULL;
        uint64_t num, v, t = 0, sq = 0;
        int wire, r, has_ts = 0;
        if (!rb_packet(&p, end, &q, &hi) || np_++ >= cap) { status = 1; break; }
        while ((r = rb_field(&q, hi, &num, &wire, &v, &lo)) > 0) {
            if (wire == 0) {
                if (num == P_TIMESTAMP) { t = v; has_ts = 1; }
                else if (num == P_SEQ_ID) sq = v;
            } else if (wire == 2) {
                if (num == P_TRACK_EVENT) { te = lo; te_hi = lo + v; }
                else if (num == P_TRACK_DESCRIPTOR) { td = lo; td_hi = lo + v; }
                else if (num == P_DEFAULTS) { df = lo; df_hi = lo + v; }
                else if (num == P_COMPRESSED) r = -1;  /* compressed packets inside compressed packets */
            }
            if (r < 0) break;
        }
        if (r < 0 || (te && !has_ts)) { status = 1; break; }
        if (df) {
            if (!rb_varints(df, df_hi, F_CLOCK, 1, val, has)) { status = 1; break; }
            out->clock = has[0] && val[0] == CLOCK_ID;
        }
        if (last_slot == (size_t)-1 || sq != last_seq) {
            last_slot = seq_slot(&S, sq);
            last_seq = sq;
            if (last_slot == (size_t)-1) { status = 2; break; }
        }
        S.sum[last_slot] += has_ts ? t : 0;  /* (mod 2^64, as numpy's int64 sums) */
        if (td) {
            if (!rb_varints(td, td_hi, F_TD, 3, val, has)) { status = 1; break; }
            if (nd == td_cap) {
                int64_t *more = realloc(out->desc, 3 * 8 * 2 * td_cap);
                if (!more) { status = 2; break; }
                out->desc = more;
                td_cap *= 2;
            }
            int64_t *d = out->desc + 3 * nd++;
            d[0] = (int64_t)val[0];
            d[1] = has[1] ? (int64_t)val[1] : -1;
            d[2] = (int64_t)(val[2] & 0xFFFFFFFFULL);
        }
        if (!te) continue;
        const uint8_t *a = NULL, *a_hi = NULL, *f = NULL, *f_hi = NULL;
        uint64_t e_typ = 0, e_track = 0, e_iid = 0;
        while ((r = rb_field(&te, te_hi, &num, &wire, &v, &lo)) > 0) {
            if (wire == 0) {
                if (num == TE_TYPE) e_typ = v;
                else if (num == TE_TRACK_UUID) e_track = v;
                else if (num == TE_NAME_IID) e_iid = v;
            } else if (wire == 2 && num == TE_ANNOTATIONS) {
                a = lo; a_hi = lo + v;
                if (!f) { f = lo; f_hi = a_hi; }
            }
        }
        if (r < 0) { status = 1; break; }
        ts[ne] = (int64_t)t;
        running[ne] = (int64_t)S.sum[last_slot];
        seq_o[ne] = (int64_t)sq;
        typ[ne] = (uint8_t)e_typ;
        track[ne] = (int64_t)e_track;
        iid[ne] = (int64_t)e_iid;
        an[ne] = 0; av[ne] = 0;
        if (a) {
            if (!rb_varints(a, a_hi, F_DA, 2, val, has)) { status = 1; break; }
            an[ne] = (int32_t)(uint32_t)val[0]; av[ne] = (int64_t)val[1];
        }
        if (first) {
            first_an[ne] = 0; first_av[ne] = 0;
            if (f) {
                if (!rb_varints(f, f_hi, F_DA, 2, val, has)) { status = 1; break; }
                first_an[ne] = (int32_t)(uint32_t)val[0]; first_av[ne] = (int64_t)val[1];
            }
        }
        ne++;
    }
    if (!status) {  /* the sequences by id (as int64: np.unique's order) and their totals */
        int64_t *pairs = out->pairs = malloc(2 * S.n * 8 + 8);
        if (!pairs) status = 2;
        else {
            size_t k = 0;
            for (size_t j = 0; j < S.cap; j++)
                if (S.used[j]) { pairs[2 * k] = (int64_t)S.key[j]; pairs[2 * k + 1] = (int64_t)S.sum[j]; k++; }
            qsort(pairs, S.n, 16, pair_cmp);
        }
    }
    out->ev = ne; out->td = nd; out->seqs = (Py_ssize_t)S.n;
    free(S.key); free(S.sum); free(S.used);
    return status;
}

/* count_packets(chunk) -> the number of packets of the chunk, -1 where its framing is damaged */
static PyObject *count_packets(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_ssize_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *p = b.buf, *end = p + b.len, *lo, *hi;
    while (p < end)
        if (rb_packet(&p, end, &lo, &hi)) count++;
        else { count = -1; break; }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&b);
    return PyLong_FromSsize_t(count);
}

/* chunk_columns(chunk, first, *event columns) -> (events, clock, descriptor triples, sequence
   pairs: bytes of int64), or None where the chunk is malformed */
static PyObject *chunk_columns(PyObject *self, PyObject *args) {
    PyObject *o[1 + N_COLS];
    int first;
    if (!PyArg_ParseTuple(args, "OpOOOOOOOOOO", &o[0], &first, &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10]))
        return NULL;
    Py_buffer v[1 + N_COLS];
    if (take_buffers(o, v, 1 + N_COLS, 1, 1 + N_COLS) < 0) return NULL;
    static const int size[N_COLS] = {8, 8, 8, 1, 8, 8, 4, 8, 4, 8};
    Py_ssize_t cap = v[1].len / 8;
    void *col[N_COLS];
    int bad = 0;
    for (int j = 0; j < N_COLS; j++) {
        col[j] = v[1 + j].buf;
        if (v[1 + j].len != ((j == C_FIRST_AN || j == C_FIRST_AV) && !first ? 0 : cap * size[j])) bad = 1;
    }
    if (bad) {
        give_buffers(v, 1 + N_COLS);
        PyErr_SetString(PyExc_ValueError, "chunk_columns: columns of different lengths");
        return NULL;
    }
    Chunk c;
    int status;
    Py_BEGIN_ALLOW_THREADS
    status = rb_chunk(v[0].buf, v[0].len, first, col, cap, &c);
    Py_END_ALLOW_THREADS
    give_buffers(v, 1 + N_COLS);
    PyObject *result = NULL;
    if (status == 2) PyErr_NoMemory();
    else if (status) result = Py_NewRef(Py_None);
    else result = Py_BuildValue("niy#y#", c.ev, c.clock, (const char *)c.desc, 24 * c.td, (const char *)c.pairs,
                                16 * c.seqs);
    free(c.desc); free(c.pairs);
    return result;
}

static PyMethodDef methods[] = {
    {"count_packets", count_packets, METH_O, "the packets of a chunk, without the GIL"},
    {"chunk_columns", chunk_columns, METH_VARARGS, "a chunk's packets parsed into columns, without the GIL"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "proton_lite_readback", NULL, -1, methods};

PyMODINIT_FUNC PyInit_proton_lite_readback(void) { return PyModule_Create(&module_def); }
"""

_EXTENSION = CExtension(SOURCE, "proton_lite_readback", "PROTON_LITE_NATIVE_READBACK")
_EVENT_COLUMNS = (("ts", np.int64), ("running", np.int64), ("seq", np.int64), ("typ", np.uint8),
                  ("track", np.int64), ("iid", np.int64), ("an", np.int32), ("av", np.int64), ("first_an", np.int32),
                  ("first_av", np.int64))


def module():
    """The compiled extension, or None (the numpy parse reads the chunks then)."""
    return _EXTENSION.module()


def error() -> str | None:
    return _EXTENSION.error


def chunk_columns(chunk: bytes, first_annotation: bool) -> dict | None:
    """``readback_events._chunk_events``' columns of the packet stream ``chunk``, the same
    dtypes and values; None where the extension is not built or the chunk is malformed."""
    mod = module()
    if mod is None:
        return None
    n = mod.count_packets(chunk)  # (the events' columns are sized by it: nearly all packets are events)
    if n < 0:
        return None
    # mapped on their own (``fresh_memory``): each goes back to the system as the chunks are joined,
    # where in a worker thread's heap it stayed beside the joined columns
    cols = {k: fresh_memory.empty(0 if k.startswith("first_") and not first_annotation else n, t)
            for k, t in _EVENT_COLUMNS}
    got = mod.chunk_columns(chunk, bool(first_annotation), *cols.values())
    if got is None:
        return None
    ev, clock, desc, pairs = got
    fit = lambda k: cols[k][:ev] if 8 * ev >= 7 * n else cols[k][:ev].copy()  # noqa: E731 (else free the rest)
    desc, pairs = np.frombuffer(desc, np.int64).reshape(-1, 3), np.frombuffer(pairs, np.int64).reshape(-1, 2)
    out = {"ts": fit("ts"), "running": fit("running"), "seq": fit("seq"), "seqs": pairs[:, 0].copy(),
           "totals": pairs[:, 1].copy(), "clock": None if clock < 0 else bool(clock)}
    out.update({k: fit(k) for k in ("typ", "track", "iid")})
    out.update({k: desc[:, j].copy() for j, k in enumerate(("t_uuid", "t_parent", "t_rank"))})
    out.update({k: fit(k) for k in ("an", "av")})
    if first_annotation:
        out.update({k: fit(k) for k in ("first_an", "first_av")})
    return out
