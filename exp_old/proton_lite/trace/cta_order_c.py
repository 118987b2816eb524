"""C for the CTAs' launch ranks and the plan's CTA order (built into ``native_events``'
extension), with the calls that use it where it is built.

Why: a capture of kernels without scopes is nothing but CTA lifetimes, and for 4 M of them the
plan's numpy steps (each CTA's launch rank, the SMs per launch that choose the layout, the
order by (top group, SM, launch, CTA id), the view's gathered columns, the check that no CTA
comes twice) were ~0.8 s of the stop on one thread and held the GIL for most of it, ~20
passes over 4 M elements with a temporary each.  A decoded capture's CTA rows already come in
(launch, CTA id) order, so two passes over the rows and a counting sort by (top group, SM)
give the same order (a counting sort is stable); where the rows come otherwise (a trace read
back, a profile built by hand) the numpy forms do it, and give the same result
(``tests/test_cta_order.py``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proton_lite.trace.cta_view import GATHER_ROWS  # rows per part of the gather, as the view's own

SOURCE = r"""
static inline uint32_t row_u32(const uint8_t *rows, Py_ssize_t size, Py_ssize_t i, Py_ssize_t off) {
    uint32_t x; memcpy(&x, rows + i * size + off, 4); return x;
}

static inline int64_t row_i64(const uint8_t *rows, Py_ssize_t size, Py_ssize_t i, Py_ssize_t off) {
    int64_t x; memcpy(&x, rows + i * size + off, 8); return x;
}

#define CTA_SM_LIMIT 65536  /* SM ids at or above it: not a GPU's, the numpy forms take them */

/* launch_ranks(rows, size, off_launch, off_cta, off_smid, table, lr_out, sms_out)
   -> (state, largest SM id): each CTA's launch rank (table[launch id], -1 for none) and, where
   the rows come in strictly increasing (launch rank, CTA id) order (state 0), the distinct SMs
   of each launch rank in sms_out; state 1: not in that order, or an SM id of CTA_SM_LIMIT or
   more (sms_out not filled); -1 - i: row i's launch is not in the table */
static PyObject *launch_ranks(PyObject *self, PyObject *args) {
    PyObject *o[4];
    Py_ssize_t size, off_launch, off_cta, off_smid;
    if (!PyArg_ParseTuple(args, "OnnnnOOO", &o[0], &size, &off_launch, &off_cta, &off_smid, &o[1], &o[2], &o[3]))
        return NULL;
    Py_buffer v[4];
    if (take_buffers(o, v, 4, 2, 4) < 0) return NULL;
    Py_ssize_t n = size > 0 ? v[0].len / size : 0, n_table = v[1].len / 8, n_launches = v[3].len / 8;
    int bad = size <= 0 || v[0].len != n * size || v[2].len != n * 8 || off_launch < 0 || off_cta < 0 ||
              off_smid < 0 || off_launch + 4 > size || off_cta + 4 > size || off_smid + 4 > size;
    Py_ssize_t state = 0;
    int64_t top_sm = -1;
    if (!bad) {
        const uint8_t *rows = v[0].buf;
        const int64_t *table = v[1].buf;
        int64_t *lr = v[2].buf, *sms = v[3].buf;
        Py_BEGIN_ALLOW_THREADS
        int64_t *seen = calloc(CTA_SM_LIMIT, sizeof(int64_t));  /* 1 + the last launch rank that ran on each SM */
        if (!seen) bad = 2;
        for (Py_ssize_t k = 0; k < n_launches && !bad; k++) sms[k] = 0;
        int64_t prev_lr = -1, prev_cta = -1;
        for (Py_ssize_t i = 0; i < n && !bad; i++) {
            uint32_t id = row_u32(rows, size, i, off_launch);
            int64_t r = (Py_ssize_t)id < n_table ? table[id] : -1;
            if (r < 0 || r >= n_launches) { state = -1 - i; break; }
            lr[i] = r;
            int64_t cta = row_u32(rows, size, i, off_cta), sm = row_u32(rows, size, i, off_smid);
            if (sm > top_sm) top_sm = sm;
            if (state == 0) {
                if (r < prev_lr || (r == prev_lr && cta <= prev_cta) || sm >= CTA_SM_LIMIT) state = 1;
                else if (seen[sm] != r + 1) { seen[sm] = r + 1; sms[r]++; }
            }
            prev_lr = r; prev_cta = cta;
        }
        free(seen);
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 4);
    if (bad == 1) {
        PyErr_SetString(PyExc_ValueError, "launch_ranks: array lengths or offsets do not fit");
        return NULL;
    }
    if (bad == 2) return PyErr_NoMemory();
    return Py_BuildValue("nL", state, (long long)top_sm);
}

/* cta_order(rows, size, off_smid, lr, top, n_top, width, order_out) -> identity (0 or 1)
   For rows in strictly increasing (launch rank, CTA id) order (launch_ranks' state 0): the
   order (top[launch rank], SM, launch rank, CTA id), or where top is empty (launch, SM, CTA
   id), by a counting sort (stable); 1 where that order is the rows' own.  Top groups lie in
   [0, n_top), SM ids in [0, width). */
static PyObject *cta_order(PyObject *self, PyObject *args) {
    PyObject *o[4];
    Py_ssize_t size, off_smid, n_top, width;
    if (!PyArg_ParseTuple(args, "OnnOOnnO", &o[0], &size, &off_smid, &o[1], &o[2], &n_top, &width, &o[3]))
        return NULL;
    Py_buffer v[4];
    if (take_buffers(o, v, 4, 3, 4) < 0) return NULL;
    Py_ssize_t n = size > 0 ? v[0].len / size : 0, n_lr_top = v[2].len / 8;
    int bad = size <= 0 || v[0].len != n * size || v[1].len != n * 8 || v[3].len != n * 4 || width <= 0 ||
              n_top < 0 || off_smid < 0 || off_smid + 4 > size;
    int identity = 1;
    if (!bad) {
        const uint8_t *rows = v[0].buf;
        const int64_t *lr = v[1].buf, *top = v[2].buf;
        int32_t *order = v[3].buf;
        Py_BEGIN_ALLOW_THREADS
        /* the sm layout: one sort by (top, SM) over all rows; else one by SM per launch's run */
        Py_ssize_t n_keys = n_lr_top ? n_top * width : width;
        int64_t *count = calloc((size_t)n_keys + 1, sizeof(int64_t));
        if (!count) bad = 2;
        for (Py_ssize_t a = 0, b; a < n && !bad; a = b) {
            if (n_lr_top) b = n;
            else for (b = a + 1; b < n && lr[b] == lr[a]; b++) {}
            for (Py_ssize_t i = a; i < b; i++) {
                int64_t sm = row_u32(rows, size, i, off_smid), key = sm;
                if (sm >= width) { bad = 3; break; }
                if (n_lr_top) {
                    int64_t t = lr[i] >= 0 && lr[i] < n_lr_top ? top[lr[i]] : -1;
                    if (t < 0 || t >= n_top) { bad = 3; break; }
                    key = t * width + sm;
                }
                count[key + 1]++;
            }
            if (bad) break;
            count[0] = a;  /* each key's first place, then its next */
            for (Py_ssize_t k = 1; k <= n_keys; k++) count[k] += count[k - 1];
            for (Py_ssize_t i = a; i < b; i++) {
                int64_t key = row_u32(rows, size, i, off_smid);
                if (n_lr_top) key += top[lr[i]] * width;
                order[count[key]++] = (int32_t)i;
            }
            memset(count, 0, ((size_t)n_keys + 1) * sizeof(int64_t));
        }
        free(count);
        for (Py_ssize_t k = 0; k < n && !bad && identity; k++) identity = order[k] == k;
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 4);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "cta_order: array lengths or offsets do not fit"); return NULL; }
    if (bad == 2) return PyErr_NoMemory();
    if (bad == 3) {
        PyErr_SetString(PyExc_IndexError, "cta_order: a top group or SM id outside its range");
        return NULL;
    }
    return PyLong_FromLong(identity);
}

/* cta_gather(rows, size, off_start, off_end, off_smid, off_cta, order, lr, start_out, end_out,
              smid_out, cta_out, lr_out) -> None: the rows ``order`` (a part of the plan's order)
   read once each into the start, end, SM and CTA id columns, and their launch ranks */
static PyObject *cta_gather(PyObject *self, PyObject *args) {
    PyObject *o[8];
    Py_ssize_t size, off_start, off_end, off_smid, off_cta;
    if (!PyArg_ParseTuple(args, "OnnnnnOOOOOOO", &o[0], &size, &off_start, &off_end, &off_smid, &off_cta, &o[1],
                          &o[2], &o[3], &o[4], &o[5], &o[6], &o[7]))
        return NULL;
    Py_buffer v[8];
    if (take_buffers(o, v, 8, 3, 8) < 0) return NULL;
    Py_ssize_t n = size > 0 ? v[0].len / size : 0, m = v[1].len / 4;
    int bad = size <= 0 || v[0].len != n * size || v[2].len != n * 8 || v[3].len != m * 8 || v[4].len != m * 8 ||
              v[5].len != m * 4 || v[6].len != m * 4 || v[7].len != m * 8 || off_start < 0 || off_end < 0 ||
              off_smid < 0 || off_cta < 0 || off_start + 8 > size || off_end + 8 > size || off_smid + 4 > size ||
              off_cta + 4 > size;
    if (!bad) {
        const uint8_t *rows = v[0].buf;
        const int32_t *order = v[1].buf;
        const int64_t *lr = v[2].buf;
        int64_t *start = v[3].buf, *end = v[4].buf, *lr_out = v[7].buf;
        uint32_t *smid = v[5].buf, *cta = v[6].buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < m; k++) {
            Py_ssize_t i = order[k];
            if (i < 0 || i >= n) { bad = 3; break; }
            start[k] = row_i64(rows, size, i, off_start);
            end[k] = row_i64(rows, size, i, off_end);
            smid[k] = row_u32(rows, size, i, off_smid);
            cta[k] = row_u32(rows, size, i, off_cta);
            lr_out[k] = lr[i];
        }
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 8);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "cta_gather: array lengths or offsets do not fit"); return NULL; }
    if (bad == 3) { PyErr_SetString(PyExc_IndexError, "cta_gather: a row outside the CTAs"); return NULL; }
    Py_RETURN_NONE;
}
"""

METHODS = r"""
    {"launch_ranks", launch_ranks, METH_VARARGS, "each CTA row's launch rank and each launch's SMs, without the GIL"},
    {"cta_order", cta_order, METH_VARARGS, "the plan's CTA order by a counting sort, without the GIL"},
    {"cta_gather", cta_gather, METH_VARARGS, "the plan's kept CTA columns for a part of its order, without the GIL"},
"""

ORDER_LIMIT = 2**31 - 1  # rows beyond it: the order is not int32, the numpy forms take them


def _module():
    from proton_lite.trace import native_events  # built with this file's C in it
    return native_events.module()


def _row_fields(ctas: np.ndarray):
    """Byte offsets of the fields the C reads, or None where ``ctas`` is not laid out so."""
    fields = ctas.dtype.fields or {}
    want = {"launch": "<u4", "cta": "<u4", "smid": "<u4", "start_ns": "<i8", "end_ns": "<i8"}
    if not ctas.flags.c_contiguous or len(ctas) > ORDER_LIMIT or \
            any(fields.get(name, (None,))[0] != np.dtype(dt) for name, dt in want.items()):
        return None
    return {name: fields[name][1] for name in want}


@dataclass
class LaunchRanks:
    """Each CTA's launch rank; where the rows come in strictly increasing (launch rank, CTA
    id) order (``in_order``), the distinct SMs of each launch (else None)."""
    lr: np.ndarray
    sms: np.ndarray | None
    in_order: bool
    width: int  # the largest SM id + 1


def launch_ranks(ctas: np.ndarray, table: np.ndarray | None, n_launches: int) -> LaunchRanks | None:
    """Each CTA's launch rank in C, from ``table`` (``tree._launch_table`` of the profile's
    ``n_launches`` launches), or None where not built, the rows are not laid out as CTA_DTYPE or
    there is no table (ids too large for one); a CTA of a launch not in it is a ValueError."""
    mod, off = _module(), _row_fields(ctas)
    if mod is None or off is None or table is None or not len(ctas):
        return None
    lr, sms = np.empty(len(ctas), np.int64), np.empty(n_launches, np.int64)
    state, top_sm = mod.launch_ranks(ctas.view(np.uint8).reshape(-1), ctas.dtype.itemsize, off["launch"], off["cta"],
                                     off["smid"], table, lr, sms)
    if state < 0:
        raise ValueError("CTAs refer to a launch missing from profile.launches")
    return LaunchRanks(lr, sms if state == 0 else None, state == 0, int(top_sm) + 1)


def cta_order(ctas: np.ndarray, ranks: LaunchRanks, top: np.ndarray | None, pmap=map):
    """The order of ``tree._cta_layout`` (``top``: each launch rank's top group, the sm
    layout; None: the launch layout) in C for rows ``in_order``: (order as int32, the
    ``cta_view.KEPT`` columns and the launch ranks in it, gathered in parts on ``pmap``, or
    None for both where the order is the rows' own), or None where it does not apply."""
    mod, off = _module(), _row_fields(ctas)
    if mod is None or off is None or not ranks.in_order:
        return None
    n, width = len(ctas), ranks.width
    n_top = int(top.max()) + 1 if top is not None and len(top) else 0
    top = np.zeros(0, np.int64) if top is None else np.ascontiguousarray(top, np.int64)
    # the counts' table (sm layout), or its prefix sums per launch (launch layout), within the rows' size
    if (n_top * width if len(top) else len(ranks.sms) * width) > 4 * n + (1 << 20):
        return None
    rows = ctas.view(np.uint8).reshape(-1)
    order = np.empty(n, np.int32)
    if mod.cta_order(rows, ctas.dtype.itemsize, off["smid"], ranks.lr, top, n_top, width, order):
        return order, None, None
    kept = {"start_ns": np.empty(n, np.int64), "end_ns": np.empty(n, np.int64), "smid": np.empty(n, np.uint32),
            "cta": np.empty(n, np.uint32)}
    lr_s = np.empty(n, np.int64)

    def part(a: int):
        e = a + GATHER_ROWS
        mod.cta_gather(rows, ctas.dtype.itemsize, off["start_ns"], off["end_ns"], off["smid"], off["cta"],
                       order[a:e], ranks.lr, kept["start_ns"][a:e], kept["end_ns"][a:e], kept["smid"][a:e],
                       kept["cta"][a:e], lr_s[a:e])
    for _ in pmap(part, range(0, n, GATHER_ROWS)):
        pass
    return order, kept, lr_s
