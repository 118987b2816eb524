"""The decoder's steps that run per record in C, without the GIL: records, pairing, rows.

Why: numpy made a pass per nesting level to pair records and ten strided passes (several
holding the GIL) to fill the 44-byte interval rows (``INTERVAL_DTYPE``): for 10.6 M intervals
the rows alone were the largest part of a decode (1.1 of 2.3 s on the 2-core dev VM,
2026-11-26).  Here ``records`` gathers the kept records, ``pair`` pairs them in one pass,
``pair_rows`` computes each pair's columns and writes its row straight to its launch's room
in the profile's array with the times raw (the session's time 0 is not known yet), and
``settle`` moves the launches together and finishes the times with the same arithmetic as
numpy: ``rint(t + offset)`` in double precision (``nearbyint`` in the default round-half-even
mode is numpy's ``rint``), an end never before its start, integer fields cast as numpy's
assignment casts them.  The rows are byte for byte those of the numpy path
(``tests/test_decode_native.py``, ``tests/test_decode_memory.py``); the rows' C source is in
``native_rows_c.py``.

Built at first use (``proton_lite.native_build``); without a compiler ``module()`` is None
and the numpy path does the work.  ``PROTON_LITE_NATIVE_DECODE=0`` turns it off.
"""
from __future__ import annotations

import numpy as np

from proton_lite import fresh_memory
from proton_lite.native_build import BUFFERS_C, CExtension
from proton_lite.native_fit_c import FIT_C
from proton_lite.native_lifetimes_c import LIFETIMES_C, LIFETIMES_METHODS
from proton_lite.native_rows_c import ROWS_C
from proton_lite.profile_data import INTERVAL_DTYPE

_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
""" + BUFFERS_C + r"""
""" + ROWS_C + FIT_C + LIFETIMES_C + r"""

/* pair(words, group, n_scopes, e_out, x_out, level_out) -> number of pairs.  words: the
   records (tag in the low 32 bits), group: each record's (CTA, unit), non-decreasing.  As
   decode_records._pair: per group a running level (+1 enter, -1 exit, 0 corrupt), a record's
   level is the sum so far plus 1 for an exit tag; an enter pairs with the next record of its
   group at its own level if that is the exit of its scope.  Pairs come out by enter. */
static PyObject *pair(PyObject *self, PyObject *args) {
    PyObject *objs[5];
    long long n_scopes;
    if (!PyArg_ParseTuple(args, "OOLOOO", &objs[0], &objs[1], &n_scopes, &objs[2], &objs[3], &objs[4])) return NULL;
    Py_buffer v[5];
    if (take_buffers(objs, v, 5, 2, 5) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8;
    long long found = -1;
    /* a pair takes one enter and one exit record, each in at most one pair: at most n / 2 pairs */
    if (v[1].len == n * 8 && v[2].len >= (n / 2 + 1) * 8 && v[3].len >= (n / 2 + 1) * 8 && v[4].len == n * 8) {
        const uint64_t *words = v[0].buf;
        const int64_t *group = v[1].buf;
        int64_t *e_out = v[2].buf, *x_out = v[3].buf, *level = v[4].buf;
        uint64_t limit = (uint64_t)(2 * n_scopes < 65536 ? 2 * n_scopes : 65536);
        uint64_t odd_low = (uint64_t)(2 * n_scopes + 1);
        Py_BEGIN_ALLOW_THREADS
        /* levels of a group lie in [-len, len + 1] (len: its records): one slot per level, holding
           the record that last wrote it (a slot written in an earlier group is stale: its record
           is before the group's first); sized for the longest group, not for all records */
        Py_ssize_t longest = 0, run = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            run = (i == 0 || group[i] != group[i - 1]) ? 1 : run + 1;
            if (run > longest) longest = run;
        }
        int64_t *last = malloc(sizeof(int64_t) * (2 * (size_t)longest + 3));
        int64_t *partner = malloc(sizeof(int64_t) * ((size_t)n + 1));
        if (last && partner) {
            for (Py_ssize_t i = 0; i < 2 * longest + 3; i++) last[i] = -1;
            int64_t sum = 0, g_first = 0;
            for (Py_ssize_t i = 0; i < n; i++) {
                if (i == 0 || group[i] != group[i - 1]) { sum = 0; g_first = i; }
                uint64_t tag = words[i] & 0xFFFFFFFFull;
                int corrupt = tag >= limit;
                int is_end = (int)(tag & 1);
                if (!corrupt) sum += is_end ? -1 : 1;
                int64_t lv = sum + is_end;
                level[i] = lv;
                partner[i] = -1;
                int64_t *slot = &last[lv + longest + 1];
                int64_t a = *slot;
                uint64_t low = corrupt ? odd_low : tag;
                if (a >= g_first) {
                    uint64_t ta = words[a] & 0xFFFFFFFFull;
                    uint64_t low_a = ta >= limit ? odd_low : ta;
                    if ((low_a & 1) == 0 && low == low_a + 1) partner[a] = i;
                }
                *slot = i;
            }
            long long k = 0;
            for (Py_ssize_t i = 0; i < n; i++)
                if (partner[i] >= 0) { e_out[k] = i; x_out[k] = partner[i]; k++; }
            found = k;
        }
        free(last);
        free(partner);
        Py_END_ALLOW_THREADS
        if (found < 0) PyErr_NoMemory();
    } else {
        PyErr_SetString(PyExc_ValueError, "pair: array lengths differ");
    }
    give_buffers(v, 5);
    if (found < 0) return NULL;
    return PyLong_FromLongLong(found);
}

/* records(buf, rows_at, counts, kept, words_out, group_out, first_out, stride_w, head_w, unit_w,
           unit_head_w, cap, circular) -> number of non-empty groups: the kept records of every
   (CTA row, unit) in (CTA, unit, age) order, as decode_records._records. */
static PyObject *records(PyObject *self, PyObject *args) {
    PyObject *o[7];
    long long stride_w, head_w, unit_w, unit_head_w, cap;
    int circular;
    if (!PyArg_ParseTuple(args, "OOOOOOOLLLLLp", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &stride_w, &head_w,
                          &unit_w, &unit_head_w, &cap, &circular)) return NULL;
    Py_buffer v[7];
    if (take_buffers(o, v, 7, 4, 7) < 0) return NULL;
    Py_ssize_t n_words = v[0].len / 8, m = v[1].len / 8, n_groups = v[2].len / 8;
    Py_ssize_t units = m ? n_groups / m : 0, total = v[4].len / 8;
    long long n_first = -1;
    int bad = v[3].len != v[2].len || (m && n_groups != units * m) || v[5].len != v[4].len || cap <= 0 ||
              v[6].len < n_groups * 8;
    if (!bad) {
        const uint64_t *buf = v[0].buf;
        const int64_t *rows_at = v[1].buf, *counts = v[2].buf, *kept = v[3].buf;
        uint64_t *words = v[4].buf;
        int64_t *group = v[5].buf, *first = v[6].buf;
        Py_BEGIN_ALLOW_THREADS
        Py_ssize_t out = 0, ng = 0;
        for (Py_ssize_t g = 0; g < n_groups && !bad; g++) {
            int64_t k = kept[g];
            if (k <= 0) continue;
            int64_t base = rows_at[g / units] * stride_w + head_w + (g % units) * unit_w + unit_head_w;
            if (k > cap || base < 0 || base + cap > n_words || out + k > total) { bad = 2; break; }
            int64_t oldest = 0;
            if (circular && counts[g] > cap) oldest = counts[g] % cap;
            first[ng++] = out;
            for (int64_t j = 0; j < k; j++) {
                words[out + j] = buf[base + (circular ? (j + oldest) % cap : j)];
                group[out + j] = g;
            }
            out += k;
        }
        if (!bad && out != total) bad = 2;
        n_first = ng;
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 7);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "records: array lengths differ"); return NULL; }
    if (bad == 2) { PyErr_SetString(PyExc_IndexError, "records: a unit block lies outside the buffer"); return NULL; }
    return PyLong_FromLongLong(n_first);
}

static PyMethodDef methods[] = {
    {"records", records, METH_VARARGS, "the kept records of every (CTA, unit), without the GIL"},
    {"pair_rows", pair_rows, METH_VARARGS, "each pair's row straight into the output, without the GIL"},
    {"settle", settle, METH_VARARGS, "launches' raw rows moved together and their times finished, without the GIL"},
    {"pair", pair, METH_VARARGS, "enter/exit records paired per (CTA, unit) and level, without the GIL"},
    {"sm_fit", sm_fit, METH_VARARGS, "decode_batch.sm_fits's per-group line fits, without the GIL"},
""" + LIFETIMES_METHODS + r"""    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proton_lite_native_decode", NULL, -1, methods};

PyMODINIT_FUNC PyInit_proton_lite_native_decode(void) { return PyModule_Create(&module); }
"""

_EXTENSION = CExtension(_SOURCE, "proton_lite_native_decode", "PROTON_LITE_NATIVE_DECODE")
_LAYOUT = [("launch", 0), ("cta", 4), ("unit", 8), ("scope", 12), ("depth", 16), ("lane", 18), ("start_ns", 20),
           ("end_ns", 28), ("cycles", 36)]


def module():
    """The compiled extension, or None (the numpy path fills the same rows then)."""
    return _EXTENSION.module()


def error() -> str | None:
    return _EXTENSION.error


def fits(out: np.ndarray) -> bool:
    """Whether ``out`` is an array of rows the C code writes: ``INTERVAL_DTYPE`` as it lays it
    out (checked, not assumed), contiguous."""
    dt = out.dtype
    return (dt == INTERVAL_DTYPE and dt.itemsize == 44 and out.flags.c_contiguous and out.flags.writeable and
            all(dt.fields[name][1] == off for name, off in _LAYOUT))


def pair_rows(words, group, level, e_idx, x_idx, units: int, before: int, start_clk, base_gt, ns_per_cycle, lrow,
              row_cta, out, dest, room, launch_id):
    """``decode_records._pair_columns`` and ``decode_assemble.write_intervals`` in one pass: each
    pair's row written straight to ``out`` at its batch launch's ``dest`` (at most ``room`` rows
    each), its times raw.  Returns
    (pairs per CTA row, rows written per launch, unplaceable pairs per launch, the first launch
    whose pairs did not fit its room or -1) (``module()`` must not be None)."""
    c = np.ascontiguousarray
    m, n_l = len(start_clk), len(dest)
    per_row, written, unplaceable = np.empty(m, np.int64), np.empty(n_l, np.int64), np.empty(n_l, np.int64)
    over = _EXTENSION.module().pair_rows(
        c(words, np.uint64), c(group, np.int64), c(level, np.int64), c(e_idx, np.int64), c(x_idx, np.int64),
        int(units), int(before), c(start_clk, np.uint64), c(base_gt, np.float64), c(ns_per_cycle, np.float64),
        c(lrow, np.int64), c(row_cta, np.uint32), out, c(dest, np.int64), c(room, np.int64), c(launch_id, np.uint32),
        per_row, written, unplaceable)
    return per_row, written, unplaceable, over


def settle(out, first, rows, offset, keep) -> int:
    """Move each kept launch's raw rows (at ``first[i]``, ``rows[i]`` of them) down after the
    previous kept launch's, in launch order, and finish their times: ``rint(t + offset[i])``,
    an end never before its start.  Returns the rows kept (``module()`` must not be None)."""
    c = np.ascontiguousarray
    return _EXTENSION.module().settle(out, c(first, np.int64), c(rows, np.int64), c(offset, np.float64),
                                      c(keep, np.uint8))


def pair(words: np.ndarray, group: np.ndarray, n_scopes: int):
    """``decode_records._pair`` in C: (enter index, exit index, level of each record), pairs in
    enter order, from the records as 8-byte words (tag in the low half) and each record's
    (CTA, unit) group, non-decreasing (``module()`` must not be None)."""
    words = np.ascontiguousarray(words, np.uint64)
    group = np.ascontiguousarray(group, np.int64)
    n = len(words)
    # at most n // 2 pairs (the C code checks it): room for those, returned as views, not copied
    # (16 bytes a record and a copy of the pairs before: a batch of records' largest step);
    # mapped on their own, so that the decode's threads do not each keep their high-water mark
    e_idx, x_idx = fresh_memory.empty(n // 2 + 1, np.int64), fresh_memory.empty(n // 2 + 1, np.int64)
    level = fresh_memory.empty(n, np.int64)
    k = _EXTENSION.module().pair(words, group, int(n_scopes), e_idx, x_idx, level)
    return e_idx[:k], x_idx[:k], level


def records(buf, layout, rows_at, counts, kept):
    """``decode_records._records`` in C: (records as 8-byte words, (CTA row, unit) group of
    each, index of the first record of each non-empty group) (``module()`` must not be None)."""
    from proton_lite.layout import CTA_HEADER_BYTES, RECORD_BYTES, UNIT_HEADER_BYTES
    kept = np.ascontiguousarray(kept, np.int64).ravel()
    counts = np.ascontiguousarray(counts, np.int64).ravel()
    total = int(kept.sum())
    words, group = fresh_memory.empty(total, np.uint64), fresh_memory.empty(total, np.int64)
    first = np.empty(len(kept), np.int64)
    n_words = len(buf) // RECORD_BYTES
    data = np.frombuffer(buf, dtype="<u8", count=n_words)
    ng = _EXTENSION.module().records(data, np.ascontiguousarray(rows_at, np.int64), counts, kept, words, group, first,
                                     layout.stride // RECORD_BYTES, CTA_HEADER_BYTES // RECORD_BYTES,
                                     layout.unit_bytes // RECORD_BYTES, UNIT_HEADER_BYTES // RECORD_BYTES,
                                     layout.capacity, layout.mode == "circular")
    return words, group, first[:ng].copy()


def sm_fit(inv: np.ndarray, k: int, clk: np.ndarray, gt: np.ndarray):
    """``decode_batch.sm_fits``'s sums in C (``native_fit_c``): per group, (c_ref, g_ref, slope,
    intercept, the largest residual) (``module()`` must not be None)."""
    c_ref, g_ref = np.empty(k, np.uint64), np.empty(k, np.int64)
    slope, intercept, rmax = np.empty(k), np.empty(k), np.empty(k)
    _EXTENSION.module().sm_fit(np.ascontiguousarray(inv, np.int64), np.ascontiguousarray(clk, np.uint64),
                               np.ascontiguousarray(gt, np.int64), c_ref, g_ref, slope, intercept, rmax)
    return c_ref, g_ref, slope, intercept, rmax


def expand_lifetimes(parts: list, out: np.ndarray) -> bool:
    """``cta_blocks.expand_lifetimes`` in C: the 32-byte lifetime blocks of ``parts`` (bytes-like,
    one launch's each) into ``out``'s rows in turn (zeros, its one-unit header dtype, a row a
    block); False where the extension is not built (the numpy form fills it then)."""
    mod = module()
    if mod is None:
        return False
    from proton_lite.layout import CTA_MAGIC, LIFETIME_TAG, UNIT_MAGIC
    f = out.dtype.fields
    unit_at, unit = f["unit"][1], f["unit"][0].base.fields
    offsets = (f["magic"][1], f["smid"][1], f["start_gt"][1], f["start_clk"][1], f["version"][1], f["units"][1],
               unit_at + unit["magic"][1], unit_at + unit["end_gt"][1], unit_at + unit["end_clk"][1])
    at = 0
    for part in parts:
        k = min(len(part) // 32, len(out) - at)
        mod.expand_lifetimes(np.frombuffer(part, np.uint8, 32 * k), out[at:at + k].view(np.uint8), offsets,
                             LIFETIME_TAG, CTA_MAGIC, UNIT_MAGIC)
        at += k
    if at != len(out):  # (decode._check_size has checked each launch's buffer: not reached)
        raise ValueError(f"lifetime blocks for {at} CTAs where {len(out)} were expected")
    return True
