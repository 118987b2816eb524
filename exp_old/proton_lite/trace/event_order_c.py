"""C for a piece's event order (built into ``native_events``' extension): the nesting order
of its BEGINs and ENDs, their time order and the level before each BEGIN, in one call.

Why: a piece of the .pftrace (``perfetto_pieces``) made its event order with some fifty numpy
calls (``nesting._nesting``, ``perfetto_pieces.time_order``), and each returns to the GIL. On
the 16-core GPU host 16 writer threads then waited on the GIL 3-5 times as long as they
computed, and the more pieces, the slower the write (21.3 M records: 1.65-1.80 s in pieces of
2^15 intervals, 1.11-1.20 s in pieces of 2^17, the same CPU time), so small pieces, which hold
less memory, cost time.  The order is a total order on each event's keys (no tie is left to a
sort's stability), so this gives the numpy forms' events exactly (``tests/test_trace_native.py``):
by (track, time, phase) in a radix sort, the rare runs of equal keys ordered by the tie-breakers
of ``nesting._event_sequence``, then a stable radix sort by time.
"""
from __future__ import annotations

import numpy as np

from proton_lite.trace.nesting import check_ends, crossing_error

SOURCE = r"""
/* LSD radix sort of (key, idx) pairs by key's low ``bits`` bits, 11 bits a pass; stable. The
   result is in k/x (tk/tx: scratch of the same size) */
static void radix_pairs(uint64_t *k, int64_t *x, uint64_t *tk, int64_t *tx, Py_ssize_t n, int bits) {
    Py_ssize_t count[2048];
    for (int shift = 0; shift < bits; shift += 11) {
        memset(count, 0, sizeof(count));
        for (Py_ssize_t j = 0; j < n; j++) count[(k[j] >> shift) & 2047]++;
        Py_ssize_t at = 0;
        for (int d = 0; d < 2048; d++) { Py_ssize_t c = count[d]; count[d] = at; at += c; }
        for (Py_ssize_t j = 0; j < n; j++) {
            Py_ssize_t to = count[(k[j] >> shift) & 2047]++;
            tk[to] = k[j]; tx[to] = x[j];
        }
        memcpy(k, tk, (size_t)n * 8); memcpy(x, tx, (size_t)n * 8);
    }
}

typedef struct { const int64_t *track, *start, *end, *depth; Py_ssize_t n; } Events;

static inline int64_t ev_time(const Events *E, int64_t e) {
    int64_t i = e % E->n;
    return e >= E->n && E->end[i] > E->start[i] ? E->end[i] : E->start[i];
}

/* nesting._event_sequence's order: (track, time, phase), then for equal ones a real END
   innermost first (latest start, deepest, last), else outermost first, a zero-length END last */
static int ev_cmp(const Events *E, int64_t a, int64_t b) {
    int64_t n = E->n, i = a % n, j = b % n;
    int64_t ka[7], kb[7];
    int64_t ea = a >= n, eb = b >= n, za = E->end[i] <= E->start[i], zb = E->end[j] <= E->start[j];
    int64_t ra = ea && !za, rb = eb && !zb;  /* real ENDs */
    ka[0] = E->track[i]; kb[0] = E->track[j];
    ka[1] = ev_time(E, a); kb[1] = ev_time(E, b);
    ka[2] = !ea || za; kb[2] = !eb || zb;
    ka[3] = ra ? -E->start[i] : -E->end[i]; kb[3] = rb ? -E->start[j] : -E->end[j];
    ka[4] = ra ? -E->depth[i] : E->depth[i]; kb[4] = rb ? -E->depth[j] : E->depth[j];
    ka[5] = ra ? -i : i; kb[5] = rb ? -j : j;
    ka[6] = ea && za; kb[6] = eb && zb;
    for (int f = 0; f < 7; f++)
        if (ka[f] != kb[f]) return ka[f] < kb[f] ? -1 : 1;
    return 0;
}

static void ev_insertion(const Events *E, int64_t *x, Py_ssize_t n) {
    for (Py_ssize_t j = 1; j < n; j++) {
        int64_t v = x[j];
        Py_ssize_t k = j;
        while (k > 0 && ev_cmp(E, x[k - 1], v) > 0) { x[k] = x[k - 1]; k--; }
        x[k] = v;
    }
}

static void ev_merge_sort(const Events *E, int64_t *x, int64_t *t, Py_ssize_t n) {
    if (n <= 16) { ev_insertion(E, x, n); return; }
    Py_ssize_t h = n / 2;
    ev_merge_sort(E, x, t, h);
    ev_merge_sort(E, x + h, t, n - h);
    Py_ssize_t a = 0, b = h, o = 0;
    while (a < h && b < n) t[o++] = ev_cmp(E, x[b], x[a]) < 0 ? x[b++] : x[a++];
    while (a < h) t[o++] = x[a++];
    while (b < n) t[o++] = x[b++];
    memcpy(x, t, (size_t)n * 8);
}

static int bits_of(uint64_t v) { int b = 0; while (v) { b++; v >>= 1; } return b; }

/* piece_events(track, start, end, depth, ev_out, dts_out, nest_out) -> -1, or the first interval
   whose slices cross on its track; -2: no memory. ev_out/dts_out: 2n events in time order (ids
   0..n-1 BEGINs, n..2n-1 ENDs) and their time deltas; nest_out: the level before each BEGIN */
static PyObject *piece_events(PyObject *self, PyObject *args) {
    PyObject *o[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6])) return NULL;
    Py_buffer v[7];
    if (take_buffers(o, v, 7, 4, 7) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8, m = 2 * n;
    long long result = -1;
    int bad = v[1].len != n * 8 || v[2].len != n * 8 || v[3].len != n * 8 || v[4].len != m * 8 ||
              v[5].len != m * 8 || v[6].len != n * 8;
    if (!bad && n) {
        Events E = {v[0].buf, v[1].buf, v[2].buf, v[3].buf, n};
        int64_t *ev = v[4].buf, *dts = v[5].buf, *nest = v[6].buf;
        Py_BEGIN_ALLOW_THREADS
        uint64_t *k = malloc((size_t)m * 8), *tk = malloc((size_t)m * 8);
        int64_t *x = malloc((size_t)m * 8), *tx = malloc((size_t)m * 8);
        if (!k || !tk || !x || !tx) result = -2;
        else {
            int64_t t_lo = INT64_MAX, t_hi = INT64_MIN, tr_lo = INT64_MAX, tr_hi = INT64_MIN;
            for (Py_ssize_t i = 0; i < n; i++) {
                if (E.track[i] < tr_lo) tr_lo = E.track[i];
                if (E.track[i] > tr_hi) tr_hi = E.track[i];
                int64_t a = E.start[i], b = E.end[i] > a ? E.end[i] : a;
                if (a < t_lo) t_lo = a;
                if (b > t_hi) t_hi = b;
            }
            int t_bits = bits_of((uint64_t)(t_hi - t_lo)), tr_bits = bits_of((uint64_t)(tr_hi - tr_lo));
            for (Py_ssize_t e = 0; e < m; e++) x[e] = e;
            if (tr_bits + t_bits + 1 <= 64) {  /* (track, time, phase) in one key; equal keys after */
                for (Py_ssize_t e = 0; e < m; e++) {
                    int64_t i = e % n;
                    int phase = e < n || E.end[i] <= E.start[i];
                    k[e] = ((((uint64_t)(E.track[i] - tr_lo) << t_bits) | (uint64_t)(ev_time(&E, e) - t_lo)) << 1) |
                           (uint64_t)phase;
                }
                radix_pairs(k, x, tk, tx, m, tr_bits + t_bits + 1);
                for (Py_ssize_t a = 0; a < m;) {
                    Py_ssize_t b = a + 1;
                    while (b < m && k[b] == k[a]) b++;
                    if (b - a > 1) ev_merge_sort(&E, x + a, tx, b - a);
                    a = b;
                }
            } else ev_merge_sort(&E, x, tx, m);
            /* the level after each event, in nesting order; before a BEGIN: the one after it - 1 */
            int64_t level = 0, *after = tx;
            for (Py_ssize_t p = 0; p < m; p++) { level += x[p] < n ? 1 : -1; after[x[p]] = level; }
            for (Py_ssize_t i = 0; i < n; i++) {
                nest[i] = after[i] - 1;
                if (nest[i] != after[n + i] && result == -1) result = i;
            }
            /* time order, ties in nesting order (a stable sort by time) */
            for (Py_ssize_t p = 0; p < m; p++) { k[p] = (uint64_t)(ev_time(&E, x[p]) - t_lo); }
            radix_pairs(k, x, tk, tx, m, t_bits);
            int64_t prev = 0;
            for (Py_ssize_t p = 0; p < m; p++) {
                int64_t t = (int64_t)k[p] + t_lo;
                ev[p] = x[p]; dts[p] = t - prev; prev = t;
            }
        }
        free(k); free(tk); free(x); free(tx);
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 7);
    if (bad) { PyErr_SetString(PyExc_ValueError, "piece_events: array lengths differ"); return NULL; }
    if (result == -2) return PyErr_NoMemory();
    return PyLong_FromLongLong(result);
}
"""

METHODS = r"""
    {"piece_events", piece_events, METH_VARARGS, "a piece's nesting and time order of events, without the GIL"},
"""


def piece_events(track, start, end, depth, what):
    """(events in time order, their time deltas, the level before each BEGIN) of a piece's
    intervals, as ``nesting._nesting`` then ``perfetto_pieces.time_order`` give them; None where
    the extension is not built.  ``what(i)`` names interval ``i``'s track for the errors."""
    from proton_lite.trace import native_events  # built with this file's C in it
    mod = native_events.module()
    if mod is None:
        return None
    c = np.ascontiguousarray
    track, start, end, depth = c(track, np.int64), c(start, np.int64), c(end, np.int64), c(depth, np.int64)
    check_ends(start, end, what)
    n = len(start)
    ev, dts, nest = np.empty(2 * n, np.int64), np.empty(2 * n, np.int64), np.empty(n, np.int64)
    bad = mod.piece_events(track, start, end, depth, ev, dts, nest)
    if bad >= 0:
        raise crossing_error(bad, start, end, what)
    return ev, dts, nest
