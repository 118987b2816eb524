"""The .pftrace's interval events encoded and deflated by C code that does not hold the GIL.

Why: the numpy encoder (``perfetto_pieces.event_rows`` + ``finish``) makes ~100 array calls
per batch of events, and many of them hold the GIL; on the 16-core H100/H200 hosts 16
writer threads ran only ~3.5x faster than one (21 M records: 16.2 s -> 4.5 s), far from the
cores' worth.  Here one call per batch lays out the same packets byte for byte (the same
fields in the same order, see ``event_rows``), cuts them into the same ``compressed_packets``
batches and deflates them with ``trace/deflate.py``'s encoder (2-3x zlib level 1's speed), with
the GIL released throughout.  ``deflate`` gives the same encoder to the Python paths.

Built at first use (``proton_lite.native_build``); without a compiler, ``module()`` is None and
the numpy encoder writes the same packets (deflated by zlib: other bytes, the same content).
``PROTON_LITE_NATIVE_TRACE=0`` turns it off.
"""
from __future__ import annotations

import zlib

import numpy as np

from proton_lite.native_build import BUFFERS_C, ZlibExtension
from proton_lite.trace.deflate import C_SOURCE as DEFLATE_C, PY_C as DEFLATE_PY_C
from proton_lite.trace.rows_c import SOURCE as ROWS_C
from proton_lite.trace.slots_c import METHODS as SLOTS_METHODS, SOURCE as SLOTS_C
from proton_lite.trace.cta_events_c import METHODS as CTA_METHODS, SOURCE as CTA_C
from proton_lite.trace.event_order_c import METHODS as ORDER_METHODS, SOURCE as ORDER_C
from proton_lite.trace.cta_order_c import METHODS as CTA_ORDER_METHODS, SOURCE as CTA_ORDER_C
from proton_lite.trace.cta_parts_c import METHODS as CTA_PARTS_METHODS, SOURCE as CTA_PARTS_C
from proton_lite.trace.text_c import METHODS as TEXT_METHODS, SOURCE as TEXT_C

_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
""" + BUFFERS_C + DEFLATE_C + r"""

static inline unsigned char *put_varint(unsigned char *p, uint64_t v) {
    while (v > 0x7F) { *p++ = (unsigned char)(v | 0x80); v >>= 7; }
    *p++ = (unsigned char)v;
    return p;
}

static inline int varint_len(uint64_t v) {
    int n = 1;
    while (v > 0x7F) { v >>= 7; n++; }
    return n;
}

/* TracePacket { timestamp = dts; trusted_packet_sequence_id = seq; track_event = TrackEvent {
   type = BEGIN/END; track_uuid; [BEGIN] name_iid; [annotated] debug_annotations = {
   name_iid = cycles (END) / depth (BEGIN); int_value } } }, as perfetto_pieces.event_rows */
/* one event's packet at p; returns the end (at most 81 bytes on) */
static inline unsigned char *lay_one(unsigned char *p, Py_ssize_t k, uint64_t seq, int seq_len, const int64_t *ev_i,
                                     const uint8_t *ev_end, const int64_t *dts, const int64_t *track,
                                     const int64_t *iid, const int64_t *cycles, const int64_t *depth,
                                     const uint8_t *fix_depth, const int64_t *note, int64_t *ann_total) {
    int64_t i = ev_i[k];
    int end = ev_end[k] != 0;
    int ann = end || fix_depth[i];
    uint64_t tr = (uint64_t)track[i], name = (uint64_t)iid[i];
    uint64_t aval = (uint64_t)(end ? cycles[i] : depth[i]);
    int alen = ann ? 3 + varint_len(aval) : 0;
    int noted = !end && note[i] > 0;  /* the scope's note: {name_iid 4 (note), string_value_iid} */
    uint64_t nv = noted ? (uint64_t)note[i] : 0;
    int nlen = noted ? 4 + varint_len(nv) : 0;
    int te = 2 + 1 + varint_len(tr) + (end ? 0 : 1 + varint_len(name)) + (noted ? 2 + nlen : 0) +
             (ann ? 2 + alen : 0);
    int body = 1 + varint_len((uint64_t)dts[k]) + 1 + seq_len + 1 + 1 + te;
    *p++ = 0x0a;
    *p++ = (unsigned char)body;
    *p++ = 0x40;
    p = put_varint(p, (uint64_t)dts[k]);
    *p++ = 0x50;
    p = put_varint(p, seq);
    *p++ = 0x5a;
    *p++ = (unsigned char)te;
    *p++ = 0x48;
    *p++ = end ? 2 : 1;
    *p++ = 0x58;
    p = put_varint(p, tr);
    if (!end) { *p++ = 0x50; p = put_varint(p, name); }
    if (noted) {
        *p++ = 0x22;
        *p++ = (unsigned char)nlen;
        *p++ = 0x08;
        *p++ = 4;
        *p++ = 0x88;
        *p++ = 0x01;
        p = put_varint(p, nv);
        *ann_total += 2 + nlen;
    }
    if (ann) {
        *p++ = 0x22;
        *p++ = (unsigned char)alen;
        *p++ = 0x08;
        *p++ = end ? 1 : 2;
        *p++ = 0x20;
        p = put_varint(p, aval);
        *ann_total += 2 + alen;
    }
    return p;
}

#define PACKET_MAX 88  /* a packet's bytes, at most (81, rounded up) */

/* every event's packet, one after another (uncompressed) */
static Py_ssize_t lay_out(unsigned char *out, uint64_t seq, Py_ssize_t n, const int64_t *ev_i,
                          const uint8_t *ev_end, const int64_t *dts, const int64_t *track, const int64_t *iid,
                          const int64_t *cycles, const int64_t *depth, const uint8_t *fix_depth,
                          const int64_t *note, int64_t *ann_bytes) {
    unsigned char *p = out;
    int seq_len = varint_len(seq);
    *ann_bytes = 0;
    for (Py_ssize_t k = 0; k < n; k++)
        p = lay_one(p, k, seq, seq_len, ev_i, ev_end, dts, track, iid, cycles, depth, fix_depth, note, ann_bytes);
    return p - out;
}

/* one compressed_packets batch of raw[0:len) at q; returns the end */
static unsigned char *put_batch(unsigned char *q, const unsigned char *raw, size_t len, unsigned char *scratch,
                                uint32_t *table, uint32_t *syms) {
    size_t zlen = fd_deflate(scratch, raw, len, table, syms);
    *q++ = 0x0a;
    q = put_varint(q, 2 + (uint64_t)varint_len(zlen) + zlen);
    *q++ = 0x92;
    *q++ = 0x03;
    q = put_varint(q, zlen);
    memcpy(q, scratch, zlen);
    return q + zlen;
}

/* the packets laid out a batch at a time into ``win`` (max_batch + 2 packets) and deflated into
   compressed_packets batches of at most max_batch bytes (a bigger packet alone), as
   perfetto_pieces.finish cuts them; returns the bytes written to dst.  A piece's packets are
   never all laid out at once: ~88 bytes an event, per writer thread (16 threads x 23 MB on a
   piece of 2^17 intervals), where its batches deflated are a few MB */
static Py_ssize_t deflated_batches(unsigned char *dst, unsigned char *win, uint64_t seq, Py_ssize_t n,
                                   const int64_t *ev_i, const uint8_t *ev_end, const int64_t *dts,
                                   const int64_t *track, const int64_t *iid, const int64_t *cycles,
                                   const int64_t *depth, const uint8_t *fix_depth, const int64_t *note,
                                   int64_t max_batch, unsigned char *scratch, uint32_t *table, uint32_t *syms,
                                   int64_t *ann_bytes) {
    unsigned char *q = dst;
    int seq_len = varint_len(seq);
    size_t len = 0;
    *ann_bytes = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        unsigned char *at = win + len;
        size_t plen = (size_t)(lay_one(at, k, seq, seq_len, ev_i, ev_end, dts, track, iid, cycles, depth, fix_depth,
                                       note, ann_bytes) - at);
        if (len && (int64_t)(len + plen) > max_batch) {  /* the batch is full: out, and this packet starts the next */
            q = put_batch(q, win, len, scratch, table, syms);
            memmove(win, at, plen);
            len = plen;
        } else {
            len += plen;
        }
    }
    if (len) q = put_batch(q, win, len, scratch, table, syms);
    return q - dst;
}

/* Each writer thread keeps its work buffers from one call to the next (freed when the thread
   ends).  Allocated and freed per call, they were unmapped and faulted in again every time,
   and with 16 threads every unmap also stops the others.  Kept, they must stay small: a
   compressed piece touches one batch's window (0), the deflated output (2), the batch's
   scratch (3), hash table (4) and symbols (5); slot 1 is unused since the packets stopped being
   laid out whole (a piece's ~88 bytes an event, kept by every thread). */
typedef struct { void *p[6]; size_t cap[6]; } Work;
static pthread_key_t work_key;
static int work_key_ok;

static void work_free(void *w) {
    Work *work = w;
    for (int i = 0; i < 6; i++) free(work->p[i]);
    free(work);
}

static void *work_buf(int i, size_t size) {  /* this thread's buffer i, at least size bytes */
    Work *w = work_key_ok ? pthread_getspecific(work_key) : NULL;
    if (!w) {
        if (!work_key_ok || !(w = calloc(1, sizeof(Work)))) return NULL;
        if (pthread_setspecific(work_key, w) != 0) { free(w); return NULL; }
    }
    if (w->cap[i] < size) {
        size_t cap = size + size / 4;
        free(w->p[i]);  /* nothing in it is kept: no realloc copy */
        w->p[i] = NULL;
        w->cap[i] = 0;
        void *p = malloc(cap);
        if (!p) return NULL;
        w->p[i] = p;
        w->cap[i] = cap;
    }
    return w->p[i];
}

static int get(PyObject *obj, Py_buffer *view, Py_ssize_t item) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->len % item) { PyBuffer_Release(view); PyErr_SetString(PyExc_ValueError, "bad array"); return -1; }
    return 0;
}

/* encode(seq, ev_i, ev_end, dts, track, iid, cycles, depth, fix_depth, note, compress, max_batch)
   -> (bytes, annotation bytes); int64 arrays but ev_end and fix_depth (uint8) */
static PyObject *encode(PyObject *self, PyObject *args) {
    unsigned long long seq;
    PyObject *objs[9];
    int compress;
    long long max_batch;
    if (!PyArg_ParseTuple(args, "KOOOOOOOOOiL", &seq, &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &objs[6], &objs[7], &objs[8], &compress, &max_batch)) return NULL;
    static const Py_ssize_t item[9] = {8, 1, 8, 8, 8, 8, 8, 1, 8};
    Py_buffer v[9];
    int got = 0;
    for (; got < 9; got++)
        if (get(objs[got], &v[got], item[got]) < 0) break;
    PyObject *result = NULL;
    if (got < 9) goto done;
    /* v: 0 ev_i, 1 ev_end, 2 dts (per event); 3 track, 4 iid, 5 cycles, 6 depth, 7 fix_depth, 8 note (per interval) */
    Py_ssize_t n = v[0].len / 8, n_iv = v[3].len / 8;
    if (v[1].len != n || v[2].len / 8 != n || v[4].len / 8 != n_iv || v[5].len / 8 != n_iv || v[6].len / 8 != n_iv ||
        v[7].len != n_iv || v[8].len / 8 != n_iv) {
        PyErr_SetString(PyExc_ValueError, "event and interval arrays of different lengths");
        goto done;
    }
    if (max_batch < 1) { PyErr_SetString(PyExc_ValueError, "max_batch < 1"); goto done; }
    const int64_t *ev_i = (const int64_t *)v[0].buf;
    for (Py_ssize_t k = 0; k < n; k++)
        if (ev_i[k] < 0 || ev_i[k] >= n_iv) { PyErr_SetString(PyExc_IndexError, "event of no interval"); goto done; }
    /* a packet is at most 1+1+1+10+1+10+1+1 + (2+1+10+1+10+2+14+2+13) = 81 bytes (PACKET_MAX) */
    const uint8_t *ev_end = (const uint8_t *)v[1].buf, *fix_depth = (const uint8_t *)v[7].buf;
    const int64_t *dts = (const int64_t *)v[2].buf, *track = (const int64_t *)v[3].buf;
    const int64_t *iid = (const int64_t *)v[4].buf, *cycles = (const int64_t *)v[5].buf;
    const int64_t *depth = (const int64_t *)v[6].buf, *note = (const int64_t *)v[8].buf;
    unsigned char *out = NULL;
    Py_ssize_t size = 0;
    int64_t ann = 0;
    int failed = 0;
    if (!compress) {
        out = work_buf(0, (size_t)n * PACKET_MAX + 1);
        failed = !out;
        if (!failed) {
            Py_BEGIN_ALLOW_THREADS
            size = lay_out(out, seq, n, ev_i, ev_end, dts, track, iid, cycles, depth, fix_depth, note, &ann);
            Py_END_ALLOW_THREADS
        }
    } else {
        /* batches: at most one per packet, each a bound's worth of deflate plus a header (only
           what is written is touched) */
        size_t batch = (size_t)(max_batch > 128 ? max_batch : 128);  /* a larger packet (<= 88 bytes) goes alone */
        out = work_buf(2, fd_bound((size_t)n * PACKET_MAX) + (size_t)n * 48 + 64);
        unsigned char *win = work_buf(0, batch + 2 * PACKET_MAX);
        unsigned char *scratch = work_buf(3, fd_bound(batch + PACKET_MAX) + 64);
        uint32_t *table = work_buf(4, FD_TABLE_BYTES), *syms = work_buf(5, 4 * (batch + PACKET_MAX));
        failed = !out || !win || !scratch || !table || !syms;
        if (!failed) {
            Py_BEGIN_ALLOW_THREADS
            size = deflated_batches(out, win, seq, n, ev_i, ev_end, dts, track, iid, cycles, depth, fix_depth, note,
                                    max_batch, scratch, table, syms, &ann);
            Py_END_ALLOW_THREADS
        }
    }
    if (failed) PyErr_NoMemory();
    else {
        PyObject *data = PyBytes_FromStringAndSize((const char *)out, size);
        if (data) result = Py_BuildValue("(NL)", data, (long long)ann);
    }
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return result;
}

/* keys(sel, cta, row_of_cta, cta_lr, k_of_lr, ivbuf, itemsize, off_unit, off_lane, off_scope, units,
        lanes, n_scopes, track_key, pair_key) -> None: each selected interval's (sel[j], its CTA rank
   cta[j]) unit-track key
   ((row * units + unit) * lanes + lane) and (kernel, scope) key (kernel * n_scopes + scope);
   unit u4, lane u2, scope u4 read from the interval rows at their offsets */
static PyObject *keys(PyObject *self, PyObject *args) {
    PyObject *o[8];
    long long itemsize, off_unit, off_lane, off_scope, units, lanes, n_scopes;
    if (!PyArg_ParseTuple(args, "OOOOOOLLLLLLLOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &itemsize, &off_unit,
                          &off_lane, &off_scope, &units, &lanes, &n_scopes, &o[6], &o[7])) return NULL;
    Py_buffer v[8];
    if (take_buffers(o, v, 8, 6, 8) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8, n_iv = itemsize > 0 ? v[5].len / itemsize : 0, n_cta = v[2].len / 8,
               n_lr = v[4].len / 8;
    int bad = v[1].len != n * 8 || v[3].len != v[2].len || v[6].len != n * 8 || v[7].len != n * 8 || itemsize <= 0 ||
              off_unit + 4 > itemsize || off_lane + 2 > itemsize || off_scope + 4 > itemsize || units <= 0 ||
              lanes <= 0 || n_scopes <= 0;
    if (!bad) {
        const int64_t *sel = v[0].buf, *cta = v[1].buf, *row_of = v[2].buf, *lr_of = v[3].buf, *k_of = v[4].buf;
        const unsigned char *iv = v[5].buf;
        int64_t *tkey = v[6].buf, *pkey = v[7].buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t j = 0; j < n; j++) {
            int64_t i = sel[j];
            if (i < 0 || i >= n_iv) { bad = 2; break; }
            int64_t c = cta[j];
            if (c < 0 || c >= n_cta || lr_of[c] < 0 || lr_of[c] >= n_lr) { bad = 2; break; }
            uint32_t unit, scope;
            uint16_t lane;
            memcpy(&unit, iv + i * itemsize + off_unit, 4);
            memcpy(&lane, iv + i * itemsize + off_lane, 2);
            memcpy(&scope, iv + i * itemsize + off_scope, 4);
            if (unit >= units || lane >= lanes || scope >= n_scopes) { bad = 2; break; }
            tkey[j] = (row_of[c] * units + unit) * lanes + lane;
            pkey[j] = k_of[lr_of[c]] * n_scopes + scope;
        }
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 8);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "keys: array lengths or offsets do not fit"); return NULL; }
    if (bad == 2) { PyErr_SetString(PyExc_IndexError, "keys: an index or field lies outside its table"); return NULL; }
    Py_RETURN_NONE;
}

/* dense_unique(keys, bound, uniq_out, inv_out) -> number of distinct keys: np.unique(keys,
   return_inverse=True) for keys in [0, bound), by a presence table instead of a sort */
static PyObject *dense_unique(PyObject *self, PyObject *args) {
    PyObject *o[3];
    long long bound;
    if (!PyArg_ParseTuple(args, "OLOO", &o[0], &bound, &o[1], &o[2])) return NULL;
    Py_buffer v[3];
    if (take_buffers(o, v, 3, 1, 3) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8;
    long long found = -1;
    int bad = bound < 0 || v[2].len != n * 8 || v[1].len < n * 8;
    if (!bad) {
        const int64_t *key = v[0].buf;
        int64_t *uniq = v[1].buf, *inv = v[2].buf;
        Py_BEGIN_ALLOW_THREADS
        int64_t *table = calloc((size_t)bound + 1, sizeof(int64_t));
        if (table) {
            for (Py_ssize_t j = 0; j < n; j++) {
                if (key[j] < 0 || key[j] >= bound) { bad = 2; break; }
                table[key[j]] = 1;
            }
            if (!bad) {
                int64_t rank = 0;
                for (int64_t k = 0; k < bound; k++)
                    if (table[k]) { uniq[rank] = k; table[k] = rank++; }
                for (Py_ssize_t j = 0; j < n; j++) inv[j] = table[key[j]];
                found = rank;
            }
            free(table);
        }
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 3);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "dense_unique: array lengths differ"); return NULL; }
    if (bad == 2) { PyErr_SetString(PyExc_IndexError, "dense_unique: a key outside [0, bound)"); return NULL; }
    if (found < 0) return PyErr_NoMemory();
    return PyLong_FromLongLong(found);
}

static PyObject *release(PyObject *self, PyObject *unused) {  /* this thread's work buffers, now */
    Work *w = work_key_ok ? pthread_getspecific(work_key) : NULL;
    if (w) { pthread_setspecific(work_key, NULL); work_free(w); }
    Py_RETURN_NONE;
}

""" + DEFLATE_PY_C + ROWS_C + SLOTS_C + ORDER_C + CTA_C + CTA_ORDER_C + CTA_PARTS_C + TEXT_C + r"""
static PyObject *init_zlib(PyObject *self, PyObject *arg) {
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { PyErr_SetString(PyExc_OSError, dlerror()); return NULL; }
    fd_adler32 = (adler32_fn)dlsym(h, "adler32");
    if (!fd_adler32) { PyErr_SetString(PyExc_OSError, "adler32 missing"); return NULL; }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init_zlib", init_zlib, METH_O, "load adler32 from this zlib"},
    {"deflate", py_deflate, METH_O, "a zlib stream of the bytes, by trace/deflate.py's encoder, without the GIL"},
    {"release", release, METH_NOARGS, "free the calling thread's work buffers (other threads' go when they end)"},
    {"encode", encode, METH_VARARGS, "interval events as (deflated) TracePackets, without the GIL"},
    {"keys", keys, METH_VARARGS, "unit-track and (kernel, scope) keys of a piece's intervals, without the GIL"},
    {"dense_unique", dense_unique, METH_VARARGS, "np.unique with inverse by a presence table, without the GIL"},
    {"rows_bytes", rows_bytes, METH_VARARGS, "Rows.tobytes: the present bytes of the rows, without the GIL"},
""" + SLOTS_METHODS + CTA_METHODS + ORDER_METHODS + CTA_ORDER_METHODS + CTA_PARTS_METHODS + TEXT_METHODS + r"""    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proton_lite_native_events", NULL, -1, methods};

PyMODINIT_FUNC PyInit_proton_lite_native_events(void) {
    work_key_ok = pthread_key_create(&work_key, work_free) == 0;  /* without it: work_buf says no memory */
    fd_init();
    return PyModule_Create(&module);
}
"""

_EXTENSION = ZlibExtension(_SOURCE, "proton_lite_native_events", "PROTON_LITE_NATIVE_TRACE")


def module():
    """The compiled extension, or None (the numpy encoder writes the same bytes then)."""
    return _EXTENSION.module()


def release() -> None:
    """Free the calling thread's encoder buffers (a worker thread's are freed when it ends):
    the writer's own thread encodes when it has no workers, and it is the user's thread."""
    mod = module()
    if mod is not None:
        mod.release()


def deflate(data) -> bytes:
    """A zlib stream of ``data`` (``zlib.decompress`` reads it): ``trace/deflate.py``'s encoder,
    or zlib at level 1 where the extension is not built."""
    mod = module()
    return mod.deflate(data) if mod is not None else zlib.compress(data, 1)


def error() -> str | None:
    return _EXTENSION.error


def encode(seq_id: int, ev_i, ev_end, dts, track, iid, cycles, depth, fix_depth, note, compress: bool,
           max_batch: int) -> tuple[bytes, int]:
    """What ``finish(event_rows(...))`` gives, from the C encoder (``module()`` must not be None)."""
    c = np.ascontiguousarray
    return _EXTENSION.module().encode(int(seq_id), c(ev_i, np.int64), c(ev_end, np.uint8), c(dts, np.int64), c(track, np.int64),
                          c(iid, np.int64), c(cycles, np.int64), c(depth, np.int64), c(fix_depth, np.uint8),
                          c(note, np.int64), int(bool(compress)), int(max_batch))


DENSE_MAX = 1 << 26  # the largest key space a presence table is used for (8 bytes a key)


def index_keys(sel, cta, row_of_cta, cta_lr, k_of_lr, intervals, units: int, lanes: int, n_scopes: int):
    """(unit-track key, (kernel, scope) key) of the intervals ``sel`` (``cta``: the CTA rank of
    each), or None where the rows are not laid out as ``INTERVAL_DTYPE`` (``module()`` must not
    be None)."""
    fields = intervals.dtype.fields or {}
    if not intervals.flags.c_contiguous or any(name not in fields for name in ("unit", "lane", "scope")) or \
            (fields["unit"][0], fields["lane"][0], fields["scope"][0]) != (np.dtype("<u4"), np.dtype("<u2"),
                                                                            np.dtype("<u4")):
        return None
    c = np.ascontiguousarray
    n = len(sel)
    tkey, pkey = np.empty(n, np.int64), np.empty(n, np.int64)
    _EXTENSION.module().keys(c(sel, np.int64), c(cta, np.int64), c(row_of_cta, np.int64), c(cta_lr, np.int64),
                             c(k_of_lr, np.int64), intervals.view(np.uint8).reshape(-1) if len(intervals) else
                             np.zeros(0, np.uint8), intervals.dtype.itemsize, fields["unit"][1], fields["lane"][1],
                             fields["scope"][1], int(units), int(lanes), int(n_scopes), tkey, pkey)
    return tkey, pkey


def dense_unique(keys: np.ndarray, bound: int):
    """``np.unique(keys, return_inverse=True)`` for keys in [0, ``bound``), or None where
    ``bound`` is too large for a table."""
    if bound > DENSE_MAX:
        return None
    keys = np.ascontiguousarray(keys, np.int64)
    uniq, inv = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
    k = _EXTENSION.module().dense_unique(keys, int(bound), uniq, inv)
    return uniq[:k].copy(), inv
