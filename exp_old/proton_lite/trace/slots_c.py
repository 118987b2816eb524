"""C for the slot packing and the resident-CTA counters of the CTA sequence (built into
``native_events``' extension), with the calls that use it where it is built.

Why: a capture of kernels without scopes is nothing but CTA lifetimes (a torch.compile program
records mostly those), and for 4 M of them the numpy forms were most of the stop on the
16-core GPU host (2026-11-28: 5.3-6.7 s of which the slot packing 1.1-2.0 s and the CTA
sequence's sort and counters 2.9 s on one thread): ``rows.pack_slots`` finds each slot level
by pointer doubling over every CTA left (levels x log n passes), and
``rows.resident_changes`` sorts every event by key.  Here the packing is the greedy sweep it
is defined by, with two heaps (O(n log slots)), and the counters one pass over the
time-ordered events with a count per key.  Both give the numpy forms' results exactly
(``tests/test_cta_sequence.py``), release the GIL, and fall back to numpy where the
extension is not built or the input is not in the order they need.
"""
from __future__ import annotations

import numpy as np

SOURCE = r"""
/* a binary min-heap of (key, value) pairs, ordered by key then value */
typedef struct { int64_t *k, *v; Py_ssize_t n, cap; } Heap;

/* room for one more pair in h's arrays, grown together (-1: no memory); cta_parts_c's lists of
   (key, count) pairs use it too */
static int pairs_room(Heap *h) {
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 64;
        int64_t *nk = realloc(h->k, (size_t)cap * 8), *nv;
        if (!nk) return -1;
        h->k = nk;
        if (!(nv = realloc(h->v, (size_t)cap * 8))) return -1;
        h->v = nv;
        h->cap = cap;
    }
    return 0;
}

static int heap_push(Heap *h, int64_t k, int64_t v) {
    if (pairs_room(h) < 0) return -1;
    Py_ssize_t i = h->n++;
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (h->k[p] < k || (h->k[p] == k && h->v[p] <= v)) break;
        h->k[i] = h->k[p]; h->v[i] = h->v[p];
        i = p;
    }
    h->k[i] = k; h->v[i] = v;
    return 0;
}

static void heap_pop(Heap *h) {  /* drops the least pair (the heap is not empty) */
    int64_t k = h->k[--h->n], v = h->v[h->n];
    Py_ssize_t i = 0;
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && (h->k[c + 1] < h->k[c] || (h->k[c + 1] == h->k[c] && h->v[c + 1] < h->v[c]))) c++;
        if (k < h->k[c] || (k == h->k[c] && v <= h->v[c])) break;
        h->k[i] = h->k[c]; h->v[i] = h->v[c];
        i = c;
    }
    h->k[i] = k; h->v[i] = v;
}

typedef struct { int64_t lo, hi, i; } SlotCta;

static inline int slot_cta_before(const SlotCta *x, const SlotCta *y) {  /* x strictly before y */
    return x->lo != y->lo ? x->lo < y->lo : x->hi != y->hi ? x->hi < y->hi : x->i < y->i;
}

/* merge sort of a[0, n) by (lo, hi, i) with tmp[n]: runs already in order (CTAs of one SM
   come mostly by start time) are merged by one comparison */
static void slot_cta_sort(SlotCta *a, SlotCta *tmp, Py_ssize_t n) {
    for (Py_ssize_t w = 1; w < n; w *= 2) {
        for (Py_ssize_t lo = 0; lo + w < n; lo += 2 * w) {
            Py_ssize_t mid = lo + w, hi = lo + 2 * w < n ? lo + 2 * w : n;
            if (!slot_cta_before(&a[mid], &a[mid - 1])) continue;
            Py_ssize_t i = lo, j = mid, k = 0;
            while (i < mid && j < hi) tmp[k++] = slot_cta_before(&a[j], &a[i]) ? a[j++] : a[i++];
            while (i < mid) tmp[k++] = a[i++];
            memcpy(a + lo, tmp, (size_t)(k) * sizeof(SlotCta));
        }
    }
}

/* pack_slots(group, lo, hi, slot_out) -> 0: the slot of each CTA as rows.pack_slots gives it;
   ``group`` in runs (each group's CTAs together).  Per run: the CTAs in (lo, hi, index)
   order each take the lowest-numbered slot whose last CTA ended at or before their lo */
static PyObject *pack_slots(PyObject *self, PyObject *args) {
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    Py_buffer v[4];
    if (take_buffers(o, v, 4, 3, 4) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8;
    int bad = v[1].len != n * 8 || v[2].len != n * 8 || v[3].len != n * 8;
    if (!bad) {
        const int64_t *group = v[0].buf, *lo = v[1].buf, *hi = v[2].buf;
        int64_t *slot = v[3].buf;
        Py_BEGIN_ALLOW_THREADS
        Heap busy = {0}, freed = {0};  /* (end, slot) of the slots in use; slot numbers free again */
        SlotCta *run = NULL;
        Py_ssize_t run_cap = 0;
        for (Py_ssize_t a = 0, b; a < n && !bad; a = b) {
            int sorted = 1;
            for (b = a + 1; b < n && group[b] == group[a]; b++)
                if (lo[b] < lo[b - 1] || (lo[b] == lo[b - 1] && hi[b] < hi[b - 1])) sorted = 0;
            if (!sorted) {
                if (b - a > run_cap) {  /* the run and the merge's room */
                    SlotCta *r = realloc(run, (size_t)(b - a) * 2 * sizeof(SlotCta));
                    if (!r) { bad = 2; break; }
                    run = r; run_cap = b - a;
                }
                for (Py_ssize_t j = a; j < b; j++) { run[j - a].lo = lo[j]; run[j - a].hi = hi[j]; run[j - a].i = j; }
                slot_cta_sort(run, run + (b - a), b - a);
            }
            busy.n = freed.n = 0;
            int64_t used = 0;
            for (Py_ssize_t j = a; j < b; j++) {
                Py_ssize_t i = sorted ? j : run[j - a].i;
                while (busy.n && busy.k[0] <= lo[i]) {
                    if (heap_push(&freed, busy.v[0], 0) < 0) { bad = 2; break; }
                    heap_pop(&busy);
                }
                int64_t s;
                if (freed.n) { s = freed.k[0]; heap_pop(&freed); }
                else s = used++;
                if (bad || heap_push(&busy, hi[i], s) < 0) { bad = 2; break; }
                slot[i] = s;
            }
        }
        free(run); free(busy.k); free(busy.v); free(freed.k); free(freed.v);
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 4);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "pack_slots: array lengths differ"); return NULL; }
    if (bad == 2) return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* resident_marks(key, t, delta, init, has_out, value_out) -> 0: for events in time order,
   the number of resident CTAs per key (``init[key]`` before the first event; len(init) keys)
   after all of a (key, time)'s events, set on the last of them where it differs from the
   number before them (rows.resident_changes's events) */
/* the sweep of resident_marks over events in time order: 0, 2 (no memory) or 3 (a key outside
   [0, n_keys)); without the GIL (cta_events_c's parts call it too) */
static int resident_sweep(Py_ssize_t n, const int64_t *key, const int64_t *t, const int64_t *delta,
                          const int64_t *init, int64_t n_keys, uint8_t *has, int64_t *value) {
    /* per key: the count now, the count before its current time, that time, its last event */
    int64_t *st = malloc((size_t)(n_keys + 1) * 4 * sizeof(int64_t));
    if (!st) return 2;
    int bad = 0;
    int64_t *count = st, *before = st + n_keys + 1, *at = st + 2 * (n_keys + 1), *last = st + 3 * (n_keys + 1);
    for (int64_t k = 0; k < n_keys; k++) { count[k] = before[k] = init[k]; at[k] = 0; last[k] = -1; }
    for (Py_ssize_t e = 0; e < n; e++) {
        int64_t k = key[e];
        if (k < 0 || k >= n_keys) { bad = 3; break; }
        if (last[k] >= 0 && t[e] != at[k]) {
            if (count[k] != before[k]) { has[last[k]] = 1; value[last[k]] = count[k]; }
            before[k] = count[k];
        }
        count[k] += delta[e];
        at[k] = t[e];
        last[k] = e;
    }
    for (int64_t k = 0; k < n_keys && !bad; k++)
        if (last[k] >= 0 && count[k] != before[k]) { has[last[k]] = 1; value[last[k]] = count[k]; }
    free(st);
    return bad;
}

static PyObject *resident_marks(PyObject *self, PyObject *args) {
    PyObject *o[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &o[0], &o[1], &o[2], &o[5], &o[3], &o[4])) return NULL;
    Py_buffer v[6];
    if (take_buffers(o, v, 6, 3, 5) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8;
    int64_t n_keys = v[5].len / 8;
    int bad = v[1].len != n * 8 || v[2].len != n * 8 || v[3].len != n || v[4].len != n * 8;
    if (!bad) {
        const int64_t *key = v[0].buf, *t = v[1].buf, *delta = v[2].buf, *init = v[5].buf;
        uint8_t *has = v[3].buf;
        int64_t *value = v[4].buf;
        Py_BEGIN_ALLOW_THREADS
        bad = resident_sweep(n, key, t, delta, init, n_keys, has, value);
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 6);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "resident_marks: array lengths differ"); return NULL; }
    if (bad == 2) return PyErr_NoMemory();
    if (bad == 3) { PyErr_SetString(PyExc_IndexError, "resident_marks: a key outside [0, n_keys)"); return NULL; }
    Py_RETURN_NONE;
}
"""

METHODS = r"""
    {"pack_slots", pack_slots, METH_VARARGS, "rows.pack_slots for groups in runs, by a greedy sweep, without the GIL"},
    {"resident_marks", resident_marks, METH_VARARGS, "resident-CTA counts on time-ordered events, without the GIL"},
"""


def _module():
    from proton_lite.trace import native_events  # built with this file's C in it
    return native_events.module()


def pack_slots(group: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray | None:
    """``rows.pack_slots`` in C, or None where it is not built or ``group`` is not in runs
    (non-decreasing; the numpy form takes any order)."""
    mod = _module()
    group = np.ascontiguousarray(group, np.int64)
    if mod is None or (len(group) > 1 and not (group[1:] >= group[:-1]).all()):
        return None
    slot = np.empty(len(group), np.int64)
    mod.pack_slots(group, np.ascontiguousarray(lo, np.int64), np.ascontiguousarray(hi, np.int64), slot)
    return slot


def resident_marks(key: np.ndarray, t: np.ndarray, delta: np.ndarray, init: np.ndarray | None = None):
    """(whether each event carries a change of its key's resident count, the count after it),
    for events in time order, in C; ``init``: each key's count before them (0).  None where
    not built, ``t`` is not in order or a key lies outside [0, len(init))."""
    mod = _module()
    t = np.ascontiguousarray(t, np.int64)
    if mod is None or (len(t) > 1 and not (t[1:] >= t[:-1]).all()):
        return None
    key = np.ascontiguousarray(key, np.int64)
    if init is None:
        init = np.zeros(int(key.max()) + 1 if len(key) else 0, np.int64)
    if len(key) and (int(key.min()) < 0 or int(key.max()) >= len(init)):
        return None
    has, value = np.zeros(len(key), np.uint8), np.zeros(len(key), np.int64)
    mod.resident_marks(key, t, np.ascontiguousarray(delta, np.int64), np.ascontiguousarray(init, np.int64), has,
                       value)
    return has.view(bool), value
