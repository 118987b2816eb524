"""The collector's per-launch hooks in C, for the common case; Python for everything else.

Profiled on the H100 machine, the Python of our two hooks (the profile allocator and the
launch-exit hook) was 8 to 11 µs per launch, most of the host time a session adds.  This
module compiles, with Triton's own ``compile_module_from_src`` (what Triton builds its
launchers with, so a C compiler and Python's headers are there wherever Triton runs), a
small extension whose ``allocate`` and ``on_launch_exit`` do exactly what
``Collector.allocate`` / ``Collector.on_launch_exit`` do when nothing special happens: the
launch's stream has an open chunk with room, the stream was not idle, the kernel is known,
no sizing at launch, no autotuner, no exact sizing, nobody else in the collector's lock.
In every other case they call the Python methods, which stay the reference: the C code
only reads and writes the same Python objects (chunks, dicts, counters), so the two paths
mix freely, launch by launch.

The driver queries (capture status, device) are called through function pointers:
``libcuda``'s own in a session, stand-ins in the CPU tests.  The fast path never releases
the GIL and touches only plain Python objects, so while it runs no other Python thread can;
it goes the slow way whenever another thread holds the collector's lock.

``PROTON_LITE_FASTPATH=0`` turns it off; if the extension cannot be built, sessions run the
Python hooks (the session records which in its metadata).
"""
from __future__ import annotations

import ctypes
import os

from proton_lite import compat

_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>
#include <stdint.h>

typedef int (*cap_fn)(void *stream, int *status);  /* cuStreamIsCapturing */
typedef int (*dev_fn)(int *device);                 /* cuCtxGetDevice */

typedef struct {
    PyObject_HEAD
    PyObject *col, *tls, *lock, *open, *last, *kernels, *autotuned, *launch_info_type;
    PyObject *slow_alloc, *slow_exit;
    cap_fn cap; dev_fn dev;
    long long idle_ns, copy_every;
    int skip_autotune;
    long long fast_allocs, fast_exits;  /* launches served here, without the Python hooks */
} FastPath;

static PyObject *s_item, *s_used, *s_limit, *s_inflight, *s_buf, *s_ptr, *s_locked, *s_extras, *s_jit_fn,
                *s_launches, *s_closed, *s_sealed, *s_device, *s_stream, *s_launch_index, *s_n_launches,
                *s_close, *s_waiting, *s_discard, *s_seal, *s_entries;

static int intern_all(void) {
#define I(v, s) if (!(v = PyUnicode_InternFromString(s))) return -1;
    I(s_item, "item") I(s_used, "used") I(s_limit, "limit") I(s_inflight, "inflight") I(s_buf, "buf")
    I(s_ptr, "ptr") I(s_locked, "locked") I(s_extras, "extras") I(s_jit_fn, "jit_fn") I(s_launches, "launches")
    I(s_closed, "closed") I(s_sealed, "sealed") I(s_device, "device") I(s_stream, "stream")
    I(s_launch_index, "_launch_index") I(s_n_launches, "launches") I(s_close, "_close") I(s_waiting, "_waiting")
    I(s_discard, "discard") I(s_seal, "_seal") I(s_entries, "entries")
#undef I
    return 0;
}

/* the launch's BATCH entry (raw_format.BATCH_ENTRY, "<IIQIIIIQQQQ", 64 bytes) appended to
   chunk.entries, as the Python hook does with struct: the drain writes them without
   building an entry per row when the chunk is sealed */
static int append_entry(PyObject *chunk, PyObject *row) {
    unsigned long long v[11];
    PyObject *grid = PyTuple_GET_ITEM(row, 3);
    PyObject *items[11] = {PyTuple_GET_ITEM(row, 0), PyTuple_GET_ITEM(row, 1), PyTuple_GET_ITEM(row, 2),
                           PyTuple_GET_ITEM(grid, 0), PyTuple_GET_ITEM(grid, 1), PyTuple_GET_ITEM(grid, 2),
                           PyTuple_GET_ITEM(row, 4), PyTuple_GET_ITEM(row, 5), PyTuple_GET_ITEM(row, 6),
                           PyTuple_GET_ITEM(row, 7), PyTuple_GET_ITEM(row, 8)};
    static const int width[11] = {4, 4, 8, 4, 4, 4, 4, 8, 8, 8, 8};
    for (int i = 0; i < 11; i++) {
        v[i] = PyLong_AsUnsignedLongLongMask(items[i]);
        if (PyErr_Occurred()) return -1;
    }
    PyObject *entries = PyObject_GetAttr(chunk, s_entries);
    if (!entries) return -1;
    if (!PyByteArray_Check(entries)) { Py_DECREF(entries); PyErr_SetString(PyExc_TypeError, "entries"); return -1; }
    Py_ssize_t at = PyByteArray_GET_SIZE(entries);
    if (PyByteArray_Resize(entries, at + 64) < 0) { Py_DECREF(entries); return -1; }
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(entries) + at;
    for (int i = 0; i < 11; i++)
        for (int b = 0; b < width[i]; b++) *out++ = (unsigned char)((v[i] >> (8 * b)) & 0xFF);
    Py_DECREF(entries);
    return 0;
}

static long long get_ll(PyObject *obj, PyObject *name, int *ok) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) { *ok = 0; return 0; }
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (r == -1 && PyErr_Occurred()) *ok = 0;
    return r;
}

static int set_ll(PyObject *obj, PyObject *name, long long value) {
    PyObject *v = PyLong_FromLongLong(value);
    if (!v) return -1;
    int r = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return r;
}

/* 1 when another thread holds the collector's lock (then: the slow path), -1 on error */
static int lock_taken(FastPath *self) {
    PyObject *r = PyObject_CallMethodNoArgs(self->lock, s_locked);
    if (!r) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

static PyObject *tls_item(FastPath *self) {  /* new reference, Py_None when unset */
    PyObject *v = PyObject_GetAttr(self->tls, s_item);
    if (!v) { PyErr_Clear(); Py_RETURN_NONE; }
    return v;
}

static PyObject *slow_alloc(FastPath *self, PyObject *const *args) {
    return PyObject_Vectorcall(self->slow_alloc, args, 3, NULL);
}

static PyObject *fp_allocate(FastPath *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "allocate(size, alignment, stream)"); return NULL; }
    long long size = PyLong_AsLongLong(args[0]);
    long long align = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred()) { PyErr_Clear(); return slow_alloc(self, args); }
    unsigned long long stream = 0;
    if (args[2] != Py_None) {
        stream = PyLong_AsUnsignedLongLong(args[2]);
        if (PyErr_Occurred()) { PyErr_Clear(); return slow_alloc(self, args); }
    }
    int status = 0, device = 0;
    if (align != 16 || self->cap((void *)(uintptr_t)stream, &status) != 0 || status != 0 ||
        self->dev(&device) != 0)
        return slow_alloc(self, args);  /* sized at launch, capturing (refused there), driver errors */
    PyObject *stale = tls_item(self);
    int has_stale = stale != Py_None;
    Py_DECREF(stale);
    int taken = lock_taken(self);
    if (taken < 0) return NULL;
    if (has_stale || taken) return slow_alloc(self, args);

    PyObject *key = Py_BuildValue("(iK)", device, stream);
    if (!key) return NULL;
    PyObject *chunk = PyDict_GetItemWithError(self->open, key);  /* borrowed */
    PyObject *last = chunk ? PyDict_GetItemWithError(self->last, key) : NULL;
    if (!chunk || !last) {
        Py_DECREF(key);
        if (PyErr_Occurred()) return NULL;
        return slow_alloc(self, args);
    }
    Py_INCREF(chunk);  /* held while we allocate (an allocation may run the garbage collector) */
    PyObject *result = NULL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    long long last_ns = PyLong_AsLongLong(last);
    int ok = 1;
    long long used = get_ll(chunk, s_used, &ok), limit = get_ll(chunk, s_limit, &ok);
    long long inflight = get_ll(chunk, s_inflight, &ok);
    if (!ok || PyErr_Occurred()) goto done;
    long long offset = (used + 255) / 256 * 256;
    if (now - last_ns > self->idle_ns || offset + size > limit) {
        result = slow_alloc(self, args);  /* the chunk is copied first: the Python path does that */
        goto done;
    }
    PyObject *buf = PyObject_GetAttr(chunk, s_buf);
    if (!buf) goto done;
    long long base = get_ll(buf, s_ptr, &ok);
    Py_DECREF(buf);
    if (!ok) goto done;
    PyObject *now_obj = PyLong_FromLongLong(now);
    if (!now_obj) goto done;
    if (PyDict_SetItem(self->last, key, now_obj) < 0 || set_ll(chunk, s_used, offset + size) < 0 ||
        set_ll(chunk, s_inflight, inflight + 1) < 0) {
        Py_DECREF(now_obj);
        goto done;
    }
    /* the same item the Python allocator leaves: (chunk, offset, size, idle, capacity, now) */
    PyObject *item = Py_BuildValue("(OLLOON)", chunk, offset, size, Py_False, Py_None, now_obj);
    if (!item) goto done;
    int r = PyObject_SetAttr(self->tls, s_item, item);
    Py_DECREF(item);
    if (r < 0) goto done;
    self->fast_allocs++;
    result = PyLong_FromLongLong(base + offset);
done:
    Py_DECREF(key);
    Py_DECREF(chunk);
    return result;
}

static PyObject *slow_exit(FastPath *self, PyObject *lm) {
    return PyObject_CallOneArg(self->slow_exit, lm);
}

static PyObject *fp_on_launch_exit(FastPath *self, PyObject *lm) {
    PyObject *item = tls_item(self);
    if (item == Py_None) { Py_DECREF(item); return slow_exit(self, lm); }  /* plain: counted by name in Python */
    PyObject *res = NULL, *extras = NULL, *grid = NULL, *row = NULL, *launches = NULL;
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 6 || PyTuple_GET_ITEM(item, 4) != Py_None)
        goto slow;  /* sized at launch */
    PyObject *chunk = PyTuple_GET_ITEM(item, 0), *idle = PyTuple_GET_ITEM(item, 3);
    extras = PyObject_GetAttr(lm, s_extras);
    if (!extras) { PyErr_Clear(); goto slow; }
    if (!PyList_Check(extras) || PyList_GET_SIZE(extras) < 1) goto slow;
    PyObject *entry = PyList_GET_ITEM(extras, 0);
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
        (PyObject *)Py_TYPE(PyTuple_GET_ITEM(entry, 0)) != self->launch_info_type) goto slow;
    PyObject *fargs = PyTuple_GET_ITEM(entry, 1);
    if (!PyTuple_Check(fargs) || PyTuple_GET_SIZE(fargs) != 3) goto slow;
    grid = PySequence_Tuple(PyTuple_GET_ITEM(fargs, 0));
    if (!grid) { PyErr_Clear(); goto slow; }
    PyObject *metadata = PyTuple_GET_ITEM(fargs, 1);
    PyObject *mid = PyLong_FromVoidPtr(metadata);
    if (!mid) goto error;
    PyObject *known = PyDict_GetItemWithError(self->kernels, mid);  /* borrowed: (metadata, kernel) */
    Py_DECREF(mid);
    if (!known) { if (PyErr_Occurred()) goto error; goto slow; }
    if (!PyTuple_Check(known) || PyTuple_GET_ITEM(known, 0) != metadata) goto slow;
    PyObject *kernel = PyTuple_GET_ITEM(known, 1);
    if (kernel == Py_None || !PyTuple_Check(kernel) || PyTuple_GET_SIZE(kernel) != 5) goto slow;
    if (self->skip_autotune) {  /* a function that may have trial launches: the Python check */
        PyObject *jit = PyObject_GetAttr(PyTuple_GET_ITEM(entry, 0), s_jit_fn);
        if (!jit) goto error;
        int maybe = 0;
        if (jit != Py_None) {
            PyObject *jid = PyLong_FromVoidPtr(jit);
            maybe = jid ? PySet_Contains(self->autotuned, jid) : -1;
            Py_XDECREF(jid);
        }
        Py_DECREF(jit);
        if (maybe < 0) goto error;
        if (maybe) goto slow;
    }
    Py_ssize_t gn = PyTuple_GET_SIZE(grid);
    if (gn < 1 || gn > 3) goto slow;
    long long g[3] = {1, 1, 1};
    for (Py_ssize_t i = 0; i < gn; i++) {
        g[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(grid, i));
        if (g[i] == -1 && PyErr_Occurred()) { PyErr_Clear(); goto slow; }
    }
    long long per_block = PyLong_AsLongLong(PyTuple_GET_ITEM(kernel, 1));
    long long scratch = PyLong_AsLongLong(PyTuple_GET_ITEM(kernel, 2));
    if (PyErr_Occurred()) { PyErr_Clear(); goto slow; }
    long long num_ctas = g[0] * g[1] * g[2] * per_block;
    int taken = lock_taken(self);
    if (taken < 0) goto error;
    if (taken) goto slow;

    int ok = 1;
    long long index = get_ll(self->col, s_launch_index, &ok), n = get_ll(self->col, s_n_launches, &ok);
    long long inflight = get_ll(chunk, s_inflight, &ok);
    PyObject *cdev = PyObject_GetAttr(chunk, s_device), *cstream = cdev ? PyObject_GetAttr(chunk, s_stream) : NULL;
    if (!ok || !cstream) { Py_XDECREF(cdev); Py_XDECREF(cstream); goto error; }
    row = Py_BuildValue("(ONL(LLL)LNOLL)", PyTuple_GET_ITEM(kernel, 0), cdev, index, g[0], g[1], g[2], num_ctas,
                        cstream, PyTuple_GET_ITEM(item, 5), PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1)),
                        num_ctas * scratch);
    if (!row) goto error;
    launches = PyObject_GetAttr(chunk, s_launches);
    if (!launches || PyList_Append(launches, row) < 0) goto error;
    if (append_entry(chunk, row) < 0) goto error;
    if (set_ll(self->col, s_launch_index, index + 1) < 0 || set_ll(self->col, s_n_launches, n + 1) < 0) goto error;
    if (PyObject_SetAttr(self->tls, s_item, Py_None) < 0) goto error;
    /* what the Python hook does next, through its own methods: copy the chunk when due */
    PyObject *closed = PyObject_GetAttr(chunk, s_closed);
    if (!closed) goto error;
    int is_closed = PyObject_IsTrue(closed);
    Py_DECREF(closed);
    if (!is_closed && (idle == Py_True || PyList_GET_SIZE(launches) >= self->copy_every)) {
        PyObject *r = PyObject_CallMethodOneArg(self->col, s_close, chunk);
        if (!r) goto error;
        Py_DECREF(r);
        inflight = get_ll(chunk, s_inflight, &ok);
        if (!ok) goto error;
    }
    if (set_ll(chunk, s_inflight, inflight - 1) < 0) goto error;
    closed = PyObject_GetAttr(chunk, s_closed);
    PyObject *sealed = closed ? PyObject_GetAttr(chunk, s_sealed) : NULL;
    if (!sealed) { Py_XDECREF(closed); goto error; }
    int now_due = PyObject_IsTrue(closed) && inflight - 1 == 0 && !PyObject_IsTrue(sealed);
    Py_DECREF(closed); Py_DECREF(sealed);
    if (now_due) {
        PyObject *waiting = PyObject_GetAttr(self->col, s_waiting);
        PyObject *r = waiting ? PyObject_CallMethodOneArg(waiting, s_discard, chunk) : NULL;
        Py_XDECREF(waiting);
        if (!r) goto error;
        Py_DECREF(r);
        r = PyObject_CallMethodOneArg(self->col, s_seal, chunk);
        if (!r) goto error;
        Py_DECREF(r);
    }
    self->fast_exits++;
    res = Py_None; Py_INCREF(res);
    goto done;
slow:
    res = slow_exit(self, lm);
    goto done;
error:
    res = NULL;
done:
    Py_XDECREF(extras); Py_XDECREF(grid); Py_XDECREF(row); Py_XDECREF(launches);
    Py_DECREF(item);
    return res;
}

static void fp_dealloc(FastPath *self) {
    Py_XDECREF(self->col); Py_XDECREF(self->tls); Py_XDECREF(self->lock); Py_XDECREF(self->open);
    Py_XDECREF(self->last); Py_XDECREF(self->kernels); Py_XDECREF(self->autotuned);
    Py_XDECREF(self->launch_info_type); Py_XDECREF(self->slow_alloc); Py_XDECREF(self->slow_exit);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int fp_init(FastPath *self, PyObject *args, PyObject *kw) {
    PyObject *col, *tls, *lock, *open, *last, *kernels, *autotuned, *lit, *sa, *se;
    unsigned long long cap, dev;
    long long idle_ns, copy_every;
    int skip;
    if (!PyArg_ParseTuple(args, "OOOO!O!O!O!OOOKKLLp", &col, &tls, &lock, &PyDict_Type, &open, &PyDict_Type, &last,
                          &PyDict_Type, &kernels, &PySet_Type, &autotuned, &lit, &sa, &se, &cap, &dev, &idle_ns,
                          &copy_every, &skip))
        return -1;
#define KEEP(f, v) Py_INCREF(v); Py_XSETREF(self->f, v);
    KEEP(col, col) KEEP(tls, tls) KEEP(lock, lock) KEEP(open, open) KEEP(last, last) KEEP(kernels, kernels)
    KEEP(autotuned, autotuned) KEEP(launch_info_type, lit) KEEP(slow_alloc, sa) KEEP(slow_exit, se)
#undef KEEP
    self->cap = (cap_fn)(uintptr_t)cap; self->dev = (dev_fn)(uintptr_t)dev;
    self->idle_ns = idle_ns; self->copy_every = copy_every; self->skip_autotune = skip;
    return 0;
}

static PyObject *fp_counts(FastPath *self, PyObject *unused) {
    return Py_BuildValue("(LL)", self->fast_allocs, self->fast_exits);
}

static PyMethodDef fp_methods[] = {
    {"counts", (PyCFunction)fp_counts, METH_NOARGS, "(allocations, exit hooks) served without the Python hooks"},
    {"allocate", (PyCFunction)(void (*)(void))fp_allocate, METH_FASTCALL, "the profile allocator"},
    {"on_launch_exit", (PyCFunction)fp_on_launch_exit, METH_O, "the launch-exit hook"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "proton_lite_fastpath.FastPath", .tp_basicsize = sizeof(FastPath),
    .tp_flags = Py_TPFLAGS_DEFAULT, .tp_new = PyType_GenericNew, .tp_init = (initproc)fp_init,
    .tp_dealloc = (destructor)fp_dealloc, .tp_methods = fp_methods};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proton_lite_fastpath", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_proton_lite_fastpath(void) {
    if (intern_all() < 0 || PyType_Ready(&FastPathType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&FastPathType);
    if (PyModule_AddObject(m, "FastPath", (PyObject *)&FastPathType) < 0) return NULL;
    return m;
}
"""

_module = None
_build_error: str | None = None


def module():
    """The compiled extension, or None (built once per process; Triton caches the binary)."""
    global _module, _build_error
    if _module is None and _build_error is None:
        try:
            _module = compat.compile_module_from_src()(_SOURCE, "proton_lite_fastpath")
        except Exception as e:  # no compiler, no headers: the Python hooks do the same work
            _build_error = f"{type(e).__name__}: {e}"[:300]
    return _module


def driver_queries():
    """Addresses of libcuda's cuStreamIsCapturing and cuCtxGetDevice, or None without a driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return (ctypes.cast(lib.cuStreamIsCapturing, ctypes.c_void_p).value,
            ctypes.cast(lib.cuCtxGetDevice, ctypes.c_void_p).value)


def hooks_for(collector, queries=None):
    """The C hooks for ``collector`` (an object whose ``allocate`` / ``on_launch_exit`` it
    calls), or None: turned off, not built, no driver, or ``sizing="exact"`` (its exit hook
    must wait for each launch: the Python one does)."""
    from proton_lite.runtime import collector as collector_module
    if not enabled() or collector.resizer is not None:
        return None
    mod = module()
    queries = queries or driver_queries()
    if mod is None or queries is None:
        return None
    return mod.FastPath(collector, collector._tls, collector._lock, collector._open, collector._last_slice_ns,
                        collector._kernels, collector_module._AUTOTUNED, collector_module.LaunchInfo,
                        collector.allocate, collector.on_launch_exit, queries[0], queries[1], collector.idle_ns,
                        collector.copy_every, bool(collector.skip_autotune))


def enabled() -> bool:
    return os.environ.get("PROTON_LITE_FASTPATH", "1") not in ("0", "")


def build_error() -> str | None:
    return _build_error
