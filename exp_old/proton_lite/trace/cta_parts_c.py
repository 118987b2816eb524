"""C for cutting the CTA sequence into parts of time (``cta_sequence.CtaParts``; built into
``native_events``' extension): the events in part order, and each part's previous time and
its keys' resident counts before it.

Why: in numpy that was a counting sort in chunks and, per part, a dozen calls on its ~16 K
events (512 parts for 4 M CTAs: ~7,000 calls, 0.45 s on one thread of the CPU host), which
held the GIL beside the trace's other steps on the 16-core GPU host.  Here one call without
the GIL does both, with the numpy forms' results (``tests/test_cta_sequence.py``).
"""
from __future__ import annotations

import numpy as np

SOURCE = r"""
/* (slots_c's Heap as a plain list of (key, count before) pairs, grown by its pairs_room) */
static int key_counts_push(Heap *kc, int64_t key, int64_t before) {
    if (pairs_room(kc) < 0) return -1;
    kc->k[kc->n] = key; kc->v[kc->n++] = before;
    return 0;
}

static inline int64_t key_at(const void *col, int wide, Py_ssize_t i) {
    return wide ? ((const int64_t *)col)[i] : (int64_t)((const int32_t *)col)[i];
}

/* cta_part_cut(part, n_parts, start, end, shift, key0, wide0, n_keys0, key1, wide1, n_keys1,
                by_part_out, bounds_out, prev_t_out) -> (keys0, before0, first0, keys1, before1, first1)
   Events e < n are CTA e's BEGIN (at start[e]), e >= n CTA e - n's END (part[e] in [0, n_parts)).
   by_part: the events in part order, stable (int32); bounds: each part's first place and the
   end; prev_t: the latest time (+ shift) of the parts before (0 before the first).  Per key
   column (int64 where wide, else int32, keys in [0, n_keys)): the keys each part's events touch,
   in the order first touched, and each one's resident count before the part (bytes of int64),
   part j's from first[j] to first[j + 1]. */
static PyObject *cta_part_cut(PyObject *self, PyObject *args) {
    PyObject *o[8];
    Py_ssize_t n_parts;
    long long shift, n_keys[2];
    int wide[2];
    if (!PyArg_ParseTuple(args, "OnOOLOpLOpLOOO", &o[0], &n_parts, &o[1], &o[2], &shift, &o[3], &wide[0], &n_keys[0],
                          &o[4], &wide[1], &n_keys[1], &o[5], &o[6], &o[7]))
        return NULL;
    Py_buffer v[8];
    if (take_buffers(o, v, 8, 5, 8) < 0) return NULL;
    Py_ssize_t n = v[1].len / 8;
    int bad = v[0].len != 2 * n * 2 || v[2].len != n * 8 || v[3].len != n * (wide[0] ? 8 : 4) ||
              v[4].len != n * (wide[1] ? 8 : 4) || v[5].len != 2 * n * 4 || v[6].len != (n_parts + 1) * 8 ||
              v[7].len != n_parts * 8 || n_parts < 1 || n_keys[0] < 0 || n_keys[1] < 0 || 2 * n > INT32_MAX;
    Heap kc[2] = {{0}, {0}};
    int64_t *first[2] = {NULL, NULL};
    if (!bad) {
        const uint16_t *part = v[0].buf;
        const int64_t *start = v[1].buf, *end = v[2].buf;
        const void *key[2] = {v[3].buf, v[4].buf};
        int32_t *by_part = v[5].buf;
        int64_t *bounds = v[6].buf, *prev_t = v[7].buf;
        Py_BEGIN_ALLOW_THREADS
        int64_t *run[2], *seen[2];  /* per key: the count so far; 1 + the last part that touched it */
        for (int c = 0; c < 2 && !bad; c++) {
            run[c] = calloc((size_t)n_keys[c] + 1, 8);
            seen[c] = calloc((size_t)n_keys[c] + 1, 8);
            first[c] = malloc((size_t)(n_parts + 1) * 8);
            if (!run[c] || !seen[c] || !first[c]) bad = 2;
        }
        int64_t *place = calloc((size_t)n_parts + 1, 8);
        if (!place) bad = 2;
        for (Py_ssize_t e = 0; e < 2 * n && !bad; e++) {
            if (part[e] >= n_parts) { bad = 3; break; }
            place[part[e] + 1]++;
        }
        for (Py_ssize_t j = 0; j < n_parts && !bad; j++) place[j + 1] += place[j];
        for (Py_ssize_t j = 0; j <= n_parts && !bad; j++) bounds[j] = place[j];
        for (Py_ssize_t e = 0; e < 2 * n && !bad; e++) by_part[place[part[e]]++] = (int32_t)e;
        int64_t last = 0;
        for (Py_ssize_t j = 0; j < n_parts && !bad; j++) {
            prev_t[j] = last;
            int64_t t_max = INT64_MIN;
            for (int c = 0; c < 2; c++) first[c][j] = kc[c].n;
            /* the keys' counts before the part, then their changes over it */
            for (Py_ssize_t p = bounds[j]; p < bounds[j + 1] && !bad; p++) {
                Py_ssize_t ev = by_part[p], cta = ev < n ? ev : ev - n;
                int64_t t = ev < n ? start[cta] : end[cta];
                if (t > t_max) t_max = t;
                for (int c = 0; c < 2; c++) {
                    int64_t k = key_at(key[c], wide[c], cta);
                    if (k < 0 || k >= n_keys[c]) { bad = 3; break; }
                    if (seen[c][k] != j + 1) {
                        seen[c][k] = j + 1;
                        if (key_counts_push(&kc[c], k, run[c][k]) < 0) { bad = 2; break; }
                    }
                }
            }
            for (Py_ssize_t p = bounds[j]; p < bounds[j + 1] && !bad; p++) {
                Py_ssize_t ev = by_part[p], cta = ev < n ? ev : ev - n;
                for (int c = 0; c < 2; c++) run[c][key_at(key[c], wide[c], cta)] += ev < n ? 1 : -1;
            }
            if (bounds[j + 1] > bounds[j]) last = t_max + shift;  /* parts hold disjoint, increasing times */
        }
        for (int c = 0; c < 2 && !bad; c++) first[c][n_parts] = kc[c].n;
        for (int c = 0; c < 2; c++) { free(run[c]); free(seen[c]); }
        free(place);
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 8);
    PyObject *out = NULL;
    if (bad == 1) PyErr_SetString(PyExc_ValueError, "cta_part_cut: array lengths do not fit");
    else if (bad == 2) PyErr_NoMemory();
    else if (bad == 3) PyErr_SetString(PyExc_IndexError, "cta_part_cut: a part or key outside its range");
    else {
        static const char none[8] = {0};  /* (y# makes None of a NULL buffer) */
#define KC_BYTES(p) ((p) ? (const char *)(p) : none)
        out = Py_BuildValue("y#y#y#y#y#y#", KC_BYTES(kc[0].k), kc[0].n * 8, KC_BYTES(kc[0].v), kc[0].n * 8,
                            (const char *)first[0], (n_parts + 1) * 8, KC_BYTES(kc[1].k), kc[1].n * 8,
                            KC_BYTES(kc[1].v), kc[1].n * 8, (const char *)first[1], (n_parts + 1) * 8);
#undef KC_BYTES
    }
    for (int c = 0; c < 2; c++) { free(kc[c].k); free(kc[c].v); free(first[c]); }
    return out;
}
"""

METHODS = r"""
    {"cta_part_cut", cta_part_cut, METH_VARARGS, "the CTA sequence's events in parts, with each part's carried counts"},
"""


def _module():
    from proton_lite.trace import native_events  # built with this file's C in it
    return native_events.module()


def part_cut(part: np.ndarray, n_parts: int, start: np.ndarray, end: np.ndarray, shift: int, keys: list,
             n_keys: list):
    """(events in part order (int32), each part's bounds, previous time, and per key column
    (keys touched, their counts before) per part), or None where not built or the inputs are
    not what the C reads: two key columns of int32 or int64, 16-bit part ids, times int64."""
    mod = _module()
    n = len(start)
    if mod is None or len(keys) != 2 or part.dtype != np.uint16 or 2 * n >= 2**31 or \
            any(np.dtype(k.dtype) not in (np.dtype(np.int32), np.dtype(np.int64)) for k in keys):
        return None
    c = np.ascontiguousarray
    by_part, bounds, prev_t = np.empty(2 * n, np.int32), np.empty(n_parts + 1, np.int64), np.empty(n_parts, np.int64)
    k0, k1 = (c(k) for k in keys)
    got = mod.cta_part_cut(c(part), int(n_parts), c(start, np.int64), c(end, np.int64), int(shift), k0,
                           k0.dtype == np.int64, int(n_keys[0]), k1, k1.dtype == np.int64, int(n_keys[1]), by_part,
                           bounds, prev_t)
    cols = [np.frombuffer(b, np.int64) for b in got]
    inits = [[(cols[3 * i][f[j]:f[j + 1]], cols[3 * i + 1][f[j]:f[j + 1]]) for i, f in
              enumerate((cols[2], cols[5]))] for j in range(n_parts)]
    return by_part, bounds, prev_t, inits
