"""A .pftrace's BEGIN and END events paired per track in C, one pass without the GIL.

Why: reading the trace of 21.3 M records back, the numpy pairing (``readback._match``: a
stable sort of every event by track, running levels, a second sort by (track, level)) and the
nesting depth of each slice (``readback._nest_level``, a third sort) took ~8 s of the
``summary``'s ~35 s on the CPU host.  Events nest per track, so a stack per track pairs them
in file order: each END closes the track's innermost open BEGIN, whose depth is the number of
slices open on the track when it began.  Tracks are given as dense numbers (``track_index``).

The pairs come in the order of their BEGINs (the numpy form gives them by (track, level,
position): the same set of pairs, which the reader sorts into the profile's order,
``tests/test_readback_native.py`` compares the profiles): a unit track's slices then come
in time order, outermost first, which is the profile's order within a unit, and the sort
leaves them as they are (``nesting._argsort_keys``).  Without a compiler ``pair`` is
None and the numpy forms do the work.  ``PROTON_LITE_NATIVE_PAIRING=0`` turns it off.
"""
from __future__ import annotations

import numpy as np

from proton_lite.arrays import distinct
from proton_lite.native_build import BUFFERS_C, CExtension

_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
""" + BUFFERS_C + r"""
/* pair(track, is_end, n_tracks, b, e, level) -> pairs, or -1 (an END with no open slice) / -2
   (a slice left open): track[i] in [0, n_tracks) per event in file order; writes each pair's
   BEGIN and END index and the BEGIN's depth (slices open on its track before it), the pairs
   in their BEGINs' order */
static PyObject *pair(PyObject *self, PyObject *args) {
    PyObject *o[6];
    Py_ssize_t n_tracks;
    if (!PyArg_ParseTuple(args, "OOnOOO", &o[0], &o[1], &n_tracks, &o[2], &o[3], &o[4])) return NULL;
    Py_buffer v[5];
    if (take_buffers(o, v, 5, 2, 5) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8;
    const int64_t *track = v[0].buf;
    const uint8_t *is_end = v[1].buf;
    int64_t *b = v[2].buf, *e = v[3].buf, *level = v[4].buf;
    if (v[1].len != n || v[2].len < (n / 2) * 8 || v[3].len < (n / 2) * 8 || v[4].len < (n / 2) * 8 || n_tracks < 0) {
        give_buffers(v, 5);
        PyErr_SetString(PyExc_ValueError, "pair: arrays of other lengths than the events'");
        return NULL;
    }
    int64_t *top = malloc((size_t)(n_tracks + 1) * 8), *depth = calloc((size_t)n_tracks + 1, 8);
    int64_t *below = malloc((size_t)(n / 2 + 1) * 8);  /* the open pair under each pair on its track */
    Py_ssize_t pairs = 0;
    int bad = 0;
    if (!top || !depth || !below) {
        free(top); free(depth); free(below); give_buffers(v, 5);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < n_tracks; t++) top[t] = -1;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        int64_t t = track[i];
        if (t < 0 || t >= n_tracks) { bad = -3; break; }
        if (!is_end[i]) {  /* a pair numbered at its BEGIN: the pairs come in their BEGINs' order */
            if (pairs >= n / 2) { bad = -2; break; }
            b[pairs] = i;
            level[pairs] = depth[t]++;
            below[pairs] = top[t];
            top[t] = pairs++;
            continue;
        }
        int64_t open = top[t];
        if (open < 0) { bad = -1; break; }
        e[open] = i;
        top[t] = below[open];
        depth[t]--;
    }
    if (!bad)
        for (Py_ssize_t t = 0; t < n_tracks; t++)
            if (top[t] >= 0) { bad = -2; break; }
    Py_END_ALLOW_THREADS
    free(top); free(depth); free(below);
    give_buffers(v, 5);
    if (bad == -3) { PyErr_SetString(PyExc_ValueError, "pair: a track number outside [0, n_tracks)"); return NULL; }
    return PyLong_FromSsize_t(bad ? bad : pairs);
}

static PyMethodDef methods[] = {
    {"pair", pair, METH_VARARGS, "BEGIN/END events paired per track"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proton_lite_pairing", NULL, -1, methods};

PyMODINIT_FUNC PyInit_proton_lite_pairing(void) { return PyModule_Create(&module); }
"""

_EXTENSION = CExtension(_SOURCE, "proton_lite_pairing", "PROTON_LITE_NATIVE_PAIRING")

NO_OPEN_SLICE = "a SLICE_END without an open slice on its track"
LEFT_OPEN = "BEGIN/END events do not pair up on their tracks (a slice left open)"


def track_index(track: np.ndarray, keys: np.ndarray) -> np.ndarray | None:
    """Each event's track as its rank among ``keys`` (the descriptors' distinct uuids, sorted),
    or None where an event's track has no descriptor (the numpy path reports it)."""
    if not len(keys):
        return None if len(track) else np.zeros(0, np.int64)
    if int(keys[-1]) - int(keys[0]) == len(keys) - 1:  # uuids 1..N, as the writers number tracks: no search
        if len(track) and (int(track.min()) < int(keys[0]) or int(track.max()) > int(keys[-1])):
            return None
        return track.astype(np.int64) - int(keys[0])
    at = np.minimum(np.searchsorted(keys, track), len(keys) - 1)
    if not np.array_equal(keys[at], track):
        return None
    return at.astype(np.int64)


def dense_tracks(track: np.ndarray, uuids: np.ndarray):
    """(the descriptors' distinct uuids sorted, each event's track as its rank among them), or
    None where an event's track has no descriptor (the numpy path reports it)."""
    keys = distinct(uuids)
    dense = track_index(track, keys)
    return None if dense is None else (keys, dense)


def pair(track: np.ndarray, is_end: np.ndarray, uuids: np.ndarray, tracks=None):
    """(BEGIN index, END index, depth) of every slice, the pairs in their BEGINs' order; None
    where the extension is not built or a track has no descriptor (the numpy forms then).
    ``tracks``: ``dense_tracks(track, uuids)``, where the caller has it."""
    mod = _EXTENSION.module()
    if mod is None:
        return None
    tracks = dense_tracks(track, uuids) if tracks is None else tracks
    if tracks is None:
        return None
    keys, dense = tracks
    n = len(dense)
    b, e, level = (np.empty(n // 2, np.int64) for _ in range(3))
    ends = is_end.view(np.uint8) if is_end.dtype == bool and is_end.flags.c_contiguous else \
        np.ascontiguousarray(is_end, np.uint8)
    got = mod.pair(dense, ends, len(keys), b, e, level)
    if got == -1:
        raise ValueError(NO_OPEN_SLICE)
    if got == -2 or 2 * got != n:
        raise ValueError(LEFT_OPEN)
    return b, e, level
