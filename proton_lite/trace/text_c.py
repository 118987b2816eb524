"""C for the trace's long runs of small texts (built into ``native_events``' extension): an
integer column as a JSON list, and names interned as protobuf messages.

Why: a capture of many small launches (65,536 launches of 64 CTAs) carries a launch table of
~1.4 M integers in the trace's metadata JSON and a name for each launch in two sequences; as
Python values (``json.dumps`` of lists, a loop of byte strings a name) they took ~0.5 s of one
thread holding the GIL, at the head of the file that every other step of the write waits
behind.  Here each is one call without the GIL; the bytes are the same as the Python forms'
(``tests/test_trace_text.py``).
"""
from __future__ import annotations

import json

import numpy as np

SOURCE = r"""
/* decimal_list(values, signed) -> bytes: b"[v0,v1,...]" for 8-byte integers (int64 where signed, else uint64),
   as json.dumps writes a list of ints with separators (",", ":") */
static PyObject *decimal_list(PyObject *self, PyObject *args) {
    Py_buffer v;
    int is_signed;
    if (!PyArg_ParseTuple(args, "y*p", &v, &is_signed)) return NULL;
    if (v.len % 8) { PyBuffer_Release(&v); PyErr_SetString(PyExc_ValueError, "decimal_list: 8-byte values"); return NULL; }
    Py_ssize_t n = v.len / 8;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 2 + n * 21);  /* '-' and 20 digits, or a comma, a value */
    if (!out) { PyBuffer_Release(&v); return NULL; }
    char *start = PyBytes_AS_STRING(out), *p = start;
    const uint64_t *u = v.buf;
    Py_BEGIN_ALLOW_THREADS
    *p++ = '[';
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) *p++ = ',';
        uint64_t x = u[i];
        if (is_signed && (int64_t)x < 0) { *p++ = '-'; x = (uint64_t)0 - x; }
        char digits[20];
        int k = 0;
        do { digits[k++] = (char)('0' + x % 10); x /= 10; } while (x);
        while (k) *p++ = digits[--k];
    }
    *p++ = ']';
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    if (_PyBytes_Resize(&out, p - start) < 0) return NULL;
    return out;
}

static inline int text_varint_len(uint64_t v) {
    int n = 1;
    while (v > 0x7F) { v >>= 7; n++; }
    return n;
}

static inline char *text_varint(char *p, uint64_t v) {
    while (v > 0x7F) { *p++ = (char)(v | 0x80); v >>= 7; }
    *p++ = (char)v;
    return p;
}

/* interned_names(tag, iids, blob, starts, ends) -> bytes: for each name i (blob[starts[i]:ends[i]]), the message
   tag + len(inner) + inner, inner = {1: iids[i] (varint), 2: the name (bytes)}; iids, starts and ends int64, iids >= 0 */
static PyObject *interned_names(PyObject *self, PyObject *args) {
    Py_buffer v[5];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*", &v[0], &v[1], &v[2], &v[3], &v[4])) return NULL;
    Py_ssize_t n = v[1].len / 8;
    const int64_t *iid = v[1].buf, *starts = v[3].buf, *ends = v[4].buf;
    int bad = v[1].len % 8 || v[3].len != v[1].len || v[4].len != v[1].len;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n && !bad; i++) {
        if (iid[i] < 0 || starts[i] < 0 || ends[i] < starts[i] || ends[i] > v[2].len) { bad = 1; break; }
        Py_ssize_t len = ends[i] - starts[i];
        Py_ssize_t inner = 2 + text_varint_len((uint64_t)iid[i]) + text_varint_len((uint64_t)len) + len;
        total += v[0].len + text_varint_len((uint64_t)inner) + inner;
    }
    PyObject *out = bad ? NULL : PyBytes_FromStringAndSize(NULL, total);
    if (out) {
        char *p = PyBytes_AS_STRING(out);
        const char *blob = v[2].buf, *tag = v[0].buf;
        Py_ssize_t tag_len = v[0].len;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t len = ends[i] - starts[i];
            Py_ssize_t inner = 2 + text_varint_len((uint64_t)iid[i]) + text_varint_len((uint64_t)len) + len;
            memcpy(p, tag, tag_len);
            p = text_varint(p + tag_len, (uint64_t)inner);
            *p++ = 0x08;
            p = text_varint(p, (uint64_t)iid[i]);
            *p++ = 0x12;
            p = text_varint(p, (uint64_t)len);
            memcpy(p, blob + starts[i], len);
            p += len;
        }
        Py_END_ALLOW_THREADS
    } else if (bad) {
        PyErr_SetString(PyExc_ValueError, "interned_names: negative iid, or a name's bounds out of order or past the names");
    }
    for (int i = 0; i < 5; i++) PyBuffer_Release(&v[i]);
    return out;
}
"""

METHODS = r"""
    {"decimal_list", decimal_list, METH_VARARGS, "an integer column as a JSON list, without the GIL"},
    {"interned_names", interned_names, METH_VARARGS, "names as interned-string messages, without the GIL"},
"""

LIST_MIN = 256  # shorter columns and name lists go the Python way (a call's set-up is not worth it)


def _module():
    from proton_lite.trace import native_events  # built with this file's C in it
    return native_events.module()


def int_list_json(values: np.ndarray) -> str:
    """``json.dumps(values.tolist(), separators=(",", ":"))`` for an integer array."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu":  # (bools are true/false in JSON)
        raise TypeError(f"int_list_json: an integer column, not {values.dtype}")
    mod = _module()
    if mod is None or len(values) < LIST_MIN:
        return json.dumps(values.tolist(), separators=(",", ":"))
    signed = values.dtype.kind == "i"
    return mod.decimal_list(np.ascontiguousarray(values, np.int64 if signed else np.uint64), signed).decode("ascii")


def interned_names(tag: bytes, items) -> bytes | None:
    """The interned-string messages of ``perfetto_pieces.interned_strings`` for ``items``
    ((iid, name) pairs, names str or bytes), or None where the extension is not built or the
    list is short."""
    mod = _module()
    if mod is None or len(items) < LIST_MIN:
        return None
    iids, names = zip(*items)
    table = NameTable(names)
    return mod.interned_names(tag, np.asarray(iids, np.int64), table.blob, table.starts, table.ends)


class NameTable:
    """A trace's names (iid ``i + 1`` for ``names[i]``; str or bytes), laid out once so that
    each sequence's interned-name messages are one C call on the iids it uses: a trace of 2,048
    kernels with scopes interned ~4 K names in each of its 128 pieces, 0.75 s of Python holding
    the GIL."""

    def __init__(self, names):
        self.names = names
        blobs = [n.encode() if isinstance(n, str) else n for n in names]
        lens = np.fromiter(map(len, blobs), np.int64, len(blobs))
        self.ends = np.cumsum(lens)
        self.starts = self.ends - lens
        self.blob = b"".join(blobs)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> str:
        return self.names[i]

    def messages(self, tag: bytes, iids: np.ndarray) -> bytes | None:
        """The interned-name messages of ``iids`` (ascending, >= 1) as ``interned_strings`` lays
        them out, or None where the extension is not built."""
        mod = _module()
        if mod is None:
            return None
        at = np.asarray(iids, np.int64) - 1
        return mod.interned_names(tag, at + 1, self.blob, self.starts[at], self.ends[at])
