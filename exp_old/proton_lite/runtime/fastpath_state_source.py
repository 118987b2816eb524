"""The C source of the launch hooks' held state (``runtime/fastpath.py`` says why it is held).

The first half of the extension's one C file: its types, the chunks and launches it holds
between the Python hooks' turns, their write-back (``flush``), and the chunk switch into
chunks opened ahead; ``fastpath_source.py`` adds the two hooks and the Python object.
"""

STATE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <time.h>
#include <stdint.h>
#include <string.h>

typedef int (*cap_fn)(void *stream, int *status);  /* cuStreamIsCapturing */
typedef int (*dev_fn)(int *device);                 /* cuCtxGetDevice */
typedef int (*rec_fn)(unsigned long long event, unsigned long long stream);  /* cuEventRecord */

#define SLOTS 8     /* (device, stream) pairs whose open chunk is held here */
#define THREADS 16  /* launching threads with a launch between allocator and exit hook */
#define KERNELS 16  /* compiled kernels remembered by their metadata object */
#define SPARES 8    /* at most this many chunks opened ahead per stream (chunks.SPARE_CHUNKS says how many) */

typedef struct {  /* the open chunk of one (device, stream), its hot fields held here */
    PyObject *chunk, *entries;  /* NULL: nothing held */
    int device;
    unsigned long long stream;
    long long base, used, limit, inflight, last_ns;
    /* chunks the Python switch opened ahead (collector._spares[key]), each with an event: the
       next ones to switch to, from next_spare on */
    PyObject *spare[SPARES], *spare_entries[SPARES], *spare_event[SPARES];
    unsigned long long spare_handle[SPARES];
    long long spare_base[SPARES], spare_limit[SPARES];
    int spares, next_spare;
    /* chunks switched away from here, their event recorded after their launches: Python seals
       them (collector._c_sealed) when it takes them back */
    PyObject *sealed[SPARES], *sealed_event[SPARES];
    long long sealed_used[SPARES];
    int nsealed;
} Slot;

typedef struct {  /* one thread's launch between the allocator and its exit hook */
    unsigned long thread;
    PyObject *chunk;  /* NULL: none */
    long long offset, size, now;
    int python_item;  /* the Python allocator left the thread's launch in the collector's thread-local */
    int busy;  /* its thread is inside a hook: no other thread may take the entry over */
} Pending;

typedef struct {
    PyObject *metadata;  /* held: its address stays unique */
    long long kernel_id, per_block, scratch;
} Known;

typedef struct {
    PyObject_HEAD
    PyObject *col, *tls, *locked, *open, *last, *kernels, *autotuned, *launch_info_type;
    PyObject *slow_alloc, *slow_exit;
    PyObject *spares, *sealed;  /* collector._spares (key -> [(chunk, event, handle)]), collector._c_sealed */
    PyObject *trials;  /* runtime/trials.py: its code sets, read at each check (NULL: Python checks) */
    cap_fn cap; dev_fn dev;
    rec_fn rec;  /* NULL: a full chunk goes to the Python hooks (no chunk switch here) */
    long long idle_ns, copy_every;
    int skip_autotune;
    int benchmarking;  /* an autotuner benchmark ran the last launch checked: every exit goes to Python */
    long long fast_allocs, fast_exits;  /* launches served here, without the Python hooks */
    long long trial_walks;  /* launches whose frames were walked here for trials */
    long long switches;  /* chunk switches done here */
    Slot slots[SLOTS];
    Pending pending[THREADS];
    Known known[KERNELS];
    int known_next;
    int counters_held;
    long long launch_index, launches;
} FastPath;

static PyObject *s_item, *s_used, *s_limit, *s_inflight, *s_buf, *s_ptr, *s_extras, *s_jit_fn, *s_closed,
                *s_launch_index, *s_launches, *s_entries, *s_trial_codes, *s_jit_run, *s_wrappers,
                *s_tuner_helpers, *s_gate, *s_recount;

static int intern_all(void) {
#define I(v, s) if (!(v = PyUnicode_InternFromString(s))) return -1;
    I(s_item, "item") I(s_used, "used") I(s_limit, "limit") I(s_inflight, "inflight") I(s_buf, "buf")
    I(s_ptr, "ptr") I(s_extras, "extras") I(s_jit_fn, "jit_fn") I(s_closed, "closed")
    I(s_launch_index, "_launch_index") I(s_launches, "_launches") I(s_entries, "entries")
    I(s_trial_codes, "_trial_codes") I(s_jit_run, "_JIT_RUN") I(s_wrappers, "_WRAPPERS")
    I(s_tuner_helpers, "_TUNER_HELPERS") I(s_gate, "_GATE") I(s_recount, "recount_thread")
#undef I
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

/* 1 when a thread holds the collector's lock (Python is changing what is held here), -1 on error */
static int lock_taken(FastPath *self) {
    PyObject *r = PyObject_CallNoArgs(self->locked);
    if (!r) return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* -- what is held here goes back to the Python objects --------------------------------- */
/* The slot is emptied before anything is written back: building the key tuple may run the
   garbage collector, and with it Python code and other threads, which must find it empty. */
static int release_slot(FastPath *self, Slot *s) {
    if (!s->chunk) return 0;
    Slot was = *s;
    memset(s, 0, sizeof *s);
    int r = set_ll(was.chunk, s_used, was.used);
    if (r == 0) r = set_ll(was.chunk, s_inflight, was.inflight);
    PyObject *key = Py_BuildValue("(iK)", was.device, was.stream);
    if (r == 0) {
        PyObject *now = PyLong_FromLongLong(was.last_ns);
        r = key && now ? PyDict_SetItem(self->last, key, now) : -1;
        Py_XDECREF(now);
    }
    for (int i = 0; i < was.nsealed && r == 0; i++) {  /* in the order they were switched away from */
        PyObject *t = Py_BuildValue("(OOL)", was.sealed[i], was.sealed_event[i], was.sealed_used[i]);
        r = t ? PyList_Append(self->sealed, t) : -1;
        Py_XDECREF(t);
    }
    if (r == 0 && was.next_spare > 0) {  /* switched here: the open chunk, and the spares used go */
        r = key ? PyDict_SetItem(self->open, key, was.chunk) : -1;
        PyObject *list = r == 0 ? PyDict_GetItemWithError(self->spares, key) : NULL;  /* as it was held */
        r = list && PyList_Check(list) ? PyList_SetSlice(list, 0, was.next_spare, NULL) : -1;
        if (r < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "the spares' list changed while held");
    }
    Py_XDECREF(key);
    Py_DECREF(was.chunk); Py_XDECREF(was.entries);
    for (int j = was.next_spare; j < was.spares; j++) {
        Py_XDECREF(was.spare[j]); Py_XDECREF(was.spare_entries[j]); Py_XDECREF(was.spare_event[j]);
    }
    for (int i = 0; i < was.nsealed; i++) { Py_XDECREF(was.sealed[i]); Py_XDECREF(was.sealed_event[i]); }
    return r;
}

static int flush(FastPath *self) {
    int r = 0;
    for (int i = 0; i < SLOTS; i++) if (release_slot(self, &self->slots[i]) < 0) r = -1;
    if (self->counters_held) {
        self->counters_held = 0;  /* (first: see release_slot) */
        if (set_ll(self->col, s_launch_index, self->launch_index) < 0 ||
            set_ll(self->col, s_launches, self->launches) < 0) r = -1;
    }
    return r;
}

/* Other threads can run whenever a call may run Python code: a call into Python, and, through
   the garbage collector, any allocation of a tuple or other container.  So the hooks do such
   calls first, then check the collector's lock, and from there on read and change what they
   hold with calls that cannot (dict lookups with int keys, slot attributes, ints). */

static Slot *held(FastPath *self, int device, unsigned long long stream) {  /* no Python code */
    for (int i = 0; i < SLOTS; i++) {
        Slot *t = &self->slots[i];
        if (t->chunk && t->device == device && t->stream == stream) return t;
    }
    return NULL;
}

static int make_room(FastPath *self) {  /* a free slot, the first one written back if none; may run Python code */
    for (int i = 0; i < SLOTS; i++) if (!self->slots[i].chunk) return 0;
    return release_slot(self, &self->slots[0]);
}

/* the spares Python opened for the slot's stream, held with it (reads only what the Python
   switch made: slot attributes, ints, a bytearray; none is a spare after a problem) */
static void hold_spares(FastPath *self, Slot *s, PyObject *key) {
    PyObject *list = PyDict_GetItemWithError(self->spares, key);  /* borrowed */
    if (!list || !PyList_Check(list)) { PyErr_Clear(); return; }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list) && s->spares < SPARES; i++) {
        PyObject *t = PyList_GET_ITEM(list, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) break;
        PyObject *chunk = PyTuple_GET_ITEM(t, 0);
        int ok = 1;
        long long limit = get_ll(chunk, s_limit, &ok), used = get_ll(chunk, s_used, &ok);
        PyObject *buf = ok ? PyObject_GetAttr(chunk, s_buf) : NULL;
        long long base = buf ? get_ll(buf, s_ptr, &ok) : 0;
        Py_XDECREF(buf);
        unsigned long long handle = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 2));
        PyObject *entries = buf && ok && !PyErr_Occurred() ? PyObject_GetAttr(chunk, s_entries) : NULL;
        if (!entries || !PyByteArray_Check(entries) || PyByteArray_GET_SIZE(entries) || used) {
            Py_XDECREF(entries);
            break;
        }
        int j = s->spares++;
        Py_INCREF(chunk); Py_INCREF(PyTuple_GET_ITEM(t, 1));
        s->spare[j] = chunk; s->spare_entries[j] = entries; s->spare_event[j] = PyTuple_GET_ITEM(t, 1);
        s->spare_handle[j] = handle; s->spare_base[j] = base; s->spare_limit[j] = limit;
    }
    PyErr_Clear();
}

/* the open chunk of (device, stream) (``key``), held from now on; NULL with no error: none to
   hold.  Runs no Python code; only while the collector's lock is free. */
static Slot *hold_slot(FastPath *self, PyObject *key, int device, unsigned long long stream) {
    Slot *s = held(self, device, stream);
    if (s) return s;
    for (int i = 0; i < SLOTS && !s; i++) if (!self->slots[i].chunk) s = &self->slots[i];
    if (!s) return NULL;
    PyObject *chunk = PyDict_GetItemWithError(self->open, key);  /* borrowed */
    PyObject *last = chunk ? PyDict_GetItemWithError(self->last, key) : NULL;
    if (!chunk || !last) return NULL;
    int ok = 1;
    long long last_ns = PyLong_AsLongLong(last);
    if (last_ns == -1 && PyErr_Occurred()) return NULL;
    PyObject *closed = PyObject_GetAttr(chunk, s_closed);
    if (!closed) return NULL;
    int is_closed = PyObject_IsTrue(closed);
    Py_DECREF(closed);
    if (is_closed) return NULL;
    long long used = get_ll(chunk, s_used, &ok), limit = get_ll(chunk, s_limit, &ok);
    long long inflight = get_ll(chunk, s_inflight, &ok);
    PyObject *buf = ok ? PyObject_GetAttr(chunk, s_buf) : NULL;
    long long base = buf ? get_ll(buf, s_ptr, &ok) : 0;
    int have_buf = buf != NULL;
    Py_XDECREF(buf);
    PyObject *entries = ok && have_buf ? PyObject_GetAttr(chunk, s_entries) : NULL;
    if (!entries) return NULL;
    if (!PyByteArray_Check(entries)) { Py_DECREF(entries); PyErr_SetString(PyExc_TypeError, "entries"); return NULL; }
    Py_INCREF(chunk);
    memset(s, 0, sizeof *s);
    s->chunk = chunk; s->entries = entries; s->device = device; s->stream = stream;
    s->base = base; s->used = used; s->limit = limit; s->inflight = inflight; s->last_ns = last_ns;
    if (self->rec) hold_spares(self, s, key);
    return s;
}

/* what hold_slot needs that may run Python code, done before the lock is checked: a free
   slot and the key (new reference, or NULL with an error) */
static PyObject *slot_key(FastPath *self, int device, unsigned long long stream) {
    if (make_room(self) < 0) return NULL;
    return Py_BuildValue("(iK)", device, stream);
}

static Pending *pending_of(FastPath *self, int create) {
    unsigned long me = PyThread_get_thread_ident();
    Pending *free_one = NULL;
    for (int i = 0; i < THREADS; i++) {
        Pending *p = &self->pending[i];
        if (p->thread == me) return p;
        if (!p->chunk && !p->python_item && !p->busy && !free_one) free_one = p;
    }
    if (create && free_one) { free_one->thread = me; return free_one; }
    return NULL;
}

/* the thread's launch handed back to the Python hooks, as the item their allocator leaves */
static int to_python(FastPath *self, Pending *p) {
    if (!p || !p->chunk) return 0;
    PyObject *item = Py_BuildValue("(OLLOOL)", p->chunk, p->offset, p->size, Py_False, Py_None, p->now);
    Py_CLEAR(p->chunk);
    if (!item) return -1;
    int r = PyObject_SetAttr(self->tls, s_item, item);
    Py_DECREF(item);
    return r;
}

/* The chunk switch without Python: the full chunk's event is recorded after its launches (the
   seal's only driver call on the launching thread) and the stream goes on in the next spare;
   Python hands the recorded chunks to the drain when it next takes the state back.  NULL:
   Python switches (no spare that fits, a launch of another thread still in the chunk, a
   driver error, or, in the CPU tests, whose driver is Python code, another thread moved
   things while the event was recorded). */
static Slot *switch_chunk(FastPath *self, Slot *s, int device, unsigned long long stream, long long size) {
    int j = s->next_spare;
    if (!self->rec || s->inflight || j >= s->spares || size > s->spare_limit[j]) return NULL;
    PyObject *chunk = s->chunk;
    long long used = s->used;
    if (self->rec(s->spare_handle[j], stream) != 0) return NULL;  /* Python meets the error again */
    Slot *t = held(self, device, stream);
    if (t != s || s->chunk != chunk || s->used != used || s->next_spare != j || s->inflight) return NULL;
    int taken = lock_taken(self);
    if (taken != 0) { PyErr_Clear(); return NULL; }
    int i = s->nsealed++;  /* its references move: chunk to sealed, the spare's event with it */
    s->sealed[i] = chunk; s->sealed_event[i] = s->spare_event[j]; s->sealed_used[i] = used;
    Py_DECREF(s->entries);  /* (the chunk holds its own reference) */
    s->chunk = s->spare[j]; s->entries = s->spare_entries[j];
    s->spare[j] = s->spare_entries[j] = s->spare_event[j] = NULL;
    s->base = s->spare_base[j]; s->limit = s->spare_limit[j];
    s->used = 0; s->inflight = 0;
    s->next_spare = j + 1;
    self->switches++;
    return s;
}

"""
