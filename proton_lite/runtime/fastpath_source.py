"""The C source of the launch hooks' extension (``runtime/fastpath.py`` builds it and says why).

Kept apart from the Python that builds and wires it: this is the one place where the hooks'
C state (held chunks, pending launches, known kernels) and their write-back are defined.
"""

SOURCE = r"""
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
    cap_fn cap; dev_fn dev;
    rec_fn rec;  /* NULL: a full chunk goes to the Python hooks (no chunk switch here) */
    long long idle_ns, copy_every;
    int skip_autotune;
    long long fast_allocs, fast_exits;  /* launches served here, without the Python hooks */
    long long switches;  /* chunk switches done here */
    Slot slots[SLOTS];
    Pending pending[THREADS];
    Known known[KERNELS];
    int known_next;
    int counters_held;
    long long launch_index, launches;
} FastPath;

static PyObject *s_item, *s_used, *s_limit, *s_inflight, *s_buf, *s_ptr, *s_extras, *s_jit_fn, *s_closed,
                *s_launch_index, *s_launches, *s_entries;

static int intern_all(void) {
#define I(v, s) if (!(v = PyUnicode_InternFromString(s))) return -1;
    I(s_item, "item") I(s_used, "used") I(s_limit, "limit") I(s_inflight, "inflight") I(s_buf, "buf")
    I(s_ptr, "ptr") I(s_extras, "extras") I(s_jit_fn, "jit_fn") I(s_closed, "closed")
    I(s_launch_index, "_launch_index") I(s_launches, "_launches") I(s_entries, "entries")
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

/* -- the profile allocator ------------------------------------------------------------- */
static PyObject *slow_alloc(FastPath *self, PyObject *const *args, Pending *p, int device, unsigned long long stream,
                            int known_device) {
    if (to_python(self, p) < 0) return NULL;
    PyObject *r = PyObject_Vectorcall(self->slow_alloc, args, 3, NULL);
    Pending *mine = pending_of(self, 1);
    if (mine) mine->python_item = 1;  /* until the C hooks take the launch over, below */
    if (!r || !known_device) return r;
    /* the launch the Python allocator placed in the open chunk is held here again, so that
       its exit hook and the next launches take the C path */
    PyObject *item = PyObject_GetAttr(self->tls, s_item);
    if (!item) { PyErr_Clear(); return r; }
    if (PyTuple_Check(item) && PyTuple_GET_SIZE(item) == 6 && PyTuple_GET_ITEM(item, 3) == Py_False &&
        PyTuple_GET_ITEM(item, 4) == Py_None) {
        PyObject *key = held(self, device, stream) ? NULL : slot_key(self, device, stream);
        int taken = PyErr_Occurred() ? -1 : lock_taken(self);  /* from here: no Python code */
        Slot *s = taken == 0 ? (key ? hold_slot(self, key, device, stream) : held(self, device, stream)) : NULL;
        Py_XDECREF(key);
        if (mine && s && s->chunk == PyTuple_GET_ITEM(item, 0)) {
            mine->offset = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
            mine->size = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 2));
            mine->now = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 5));
            if (!PyErr_Occurred() && PyObject_SetAttr(self->tls, s_item, Py_None) == 0) {
                Py_INCREF(s->chunk);
                mine->chunk = s->chunk;
                mine->python_item = 0;
            }
        }
        if (PyErr_Occurred()) { Py_DECREF(item); Py_DECREF(r); return NULL; }
    }
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

static PyObject *allocate(FastPath *self, PyObject *const *args, Pending *p) {
    long long size = PyLong_AsLongLong(args[0]);
    long long align = PyLong_AsLongLong(args[1]);
    unsigned long long stream = 0;
    if (!PyErr_Occurred() && args[2] != Py_None) stream = PyLong_AsUnsignedLongLong(args[2]);
    if (PyErr_Occurred()) { PyErr_Clear(); return slow_alloc(self, args, p, 0, 0, 0); }
    int status = 0, device = 0;
    if (align != 16 || self->cap((void *)(uintptr_t)stream, &status) != 0 || status != 0 ||
        self->dev(&device) != 0)
        return slow_alloc(self, args, p, 0, 0, 0);  /* sized at launch, capturing, no context, driver errors */
    if (!p || p->chunk || p->python_item)  /* the last launch's exit hook never ran */
        return slow_alloc(self, args, p, device, stream, 1);
    Slot *s = held(self, device, stream);
    PyObject *key = s ? NULL : slot_key(self, device, stream);
    if (!s && !key) return NULL;
    int taken = lock_taken(self);  /* from here on: no call that may run Python code */
    if (taken <= 0 && !s) s = taken == 0 ? hold_slot(self, key, device, stream) : NULL;
    Py_XDECREF(key);
    if (taken < 0 || (!s && PyErr_Occurred())) return NULL;
    if (taken || !s)  /* another thread is changing the collector's state; or no open chunk: Python opens one */
        return slow_alloc(self, args, p, device, stream, 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    long long offset = (s->used + 255) / 256 * 256;
    if (now - s->last_ns > self->idle_ns)
        return slow_alloc(self, args, p, device, stream, 1);  /* the chunk is sealed first, eagerly: Python */
    if (offset + size > s->limit || (self->rec && PyByteArray_GET_SIZE(s->entries) / 64 >= self->copy_every)) {
        s = switch_chunk(self, s, device, stream, size);
        if (!s)  /* no spare for it, or another thread moved things meanwhile: Python seals and opens */
            return slow_alloc(self, args, p, device, stream, 1);
        offset = 0;
    }
    PyObject *ptr = PyLong_FromLongLong(s->base + offset);
    if (!ptr) return NULL;
    s->used = offset + size;
    s->inflight++;
    s->last_ns = now;
    Py_INCREF(s->chunk);
    p->chunk = s->chunk; p->offset = offset; p->size = size; p->now = now;
    self->fast_allocs++;
    return ptr;
}

static PyObject *fp_allocate(FastPath *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "allocate(size, alignment, stream)"); return NULL; }
    Pending *p = pending_of(self, 1);
    if (p) p->busy = 1;
    PyObject *r = allocate(self, args, p);
    if (p) p->busy = 0;
    return r;
}

/* -- the launch-exit hook -------------------------------------------------------------- */
static Known *known_kernel(FastPath *self, PyObject *metadata) {  /* NULL with no error: not ours */
    for (int i = 0; i < KERNELS; i++) if (self->known[i].metadata == metadata) return &self->known[i];
    PyObject *mid = PyLong_FromVoidPtr(metadata);
    if (!mid) return NULL;
    PyObject *entry = PyDict_GetItemWithError(self->kernels, mid);  /* borrowed: (metadata, kernel) */
    Py_DECREF(mid);
    if (!entry || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 || PyTuple_GET_ITEM(entry, 0) != metadata)
        return NULL;
    PyObject *kernel = PyTuple_GET_ITEM(entry, 1);
    if (kernel == Py_None || !PyTuple_Check(kernel) || PyTuple_GET_SIZE(kernel) != 5) return NULL;
    long long kid = PyLong_AsLongLong(PyTuple_GET_ITEM(kernel, 0));
    long long per_block = PyLong_AsLongLong(PyTuple_GET_ITEM(kernel, 1));
    long long scratch = PyLong_AsLongLong(PyTuple_GET_ITEM(kernel, 2));
    if (PyErr_Occurred()) { PyErr_Clear(); return NULL; }
    Known *k = &self->known[self->known_next];
    self->known_next = (self->known_next + 1) % KERNELS;
    Py_INCREF(metadata);
    Py_XSETREF(k->metadata, metadata);
    k->kernel_id = kid; k->per_block = per_block; k->scratch = scratch;
    return k;
}

/* 1 when the launch may be an autotuner's trial (the Python hook checks), -1 on error */
static int maybe_trial(FastPath *self, PyObject *launch_info) {
    if (!self->skip_autotune || PySet_GET_SIZE(self->autotuned) == 0) return 0;
    PyObject *jit = PyObject_GetAttr(launch_info, s_jit_fn);
    if (!jit) return -1;
    int maybe = 0;
    if (jit != Py_None) {
        PyObject *jid = PyLong_FromVoidPtr(jit);
        maybe = jid ? PySet_Contains(self->autotuned, jid) : -1;
        Py_XDECREF(jid);
    }
    Py_DECREF(jit);
    return maybe;
}

/* the launch's BATCH entry (raw_format.BATCH_ENTRY, "<IIQIIIIQQQQ", 64 bytes) appended to
   the chunk's entries, as the Python hook packs it */
static int append_entry(PyObject *entries, const unsigned long long v[11]) {
    static const int width[11] = {4, 4, 8, 4, 4, 4, 4, 8, 8, 8, 8};
    Py_ssize_t at = PyByteArray_GET_SIZE(entries);
    if (PyByteArray_Resize(entries, at + 64) < 0) return -1;
    unsigned char *out = (unsigned char *)PyByteArray_AS_STRING(entries) + at;
    for (int i = 0; i < 11; i++)
        for (int b = 0; b < width[i]; b++) *out++ = (unsigned char)((v[i] >> (8 * b)) & 0xFF);
    return 0;
}

static PyObject *slow_exit(FastPath *self, Pending *p, PyObject *lm) {
    if (to_python(self, p) < 0) return NULL;
    return PyObject_CallOneArg(self->slow_exit, lm);
}

static PyObject *launch_exit(FastPath *self, Pending *p, PyObject *lm) {
    if (!p || !p->chunk) return slow_exit(self, NULL, lm);  /* a plain launch, or one Python placed */
    Slot *s = NULL;
    for (int i = 0; i < SLOTS; i++) if (self->slots[i].chunk == p->chunk) s = &self->slots[i];
    if (!s) return slow_exit(self, p, lm);  /* its chunk went back to Python meanwhile */
    PyObject *extras = PyObject_GetAttr(lm, s_extras);
    if (!extras) { PyErr_Clear(); return slow_exit(self, p, lm); }
    PyObject *grid = NULL;
    if (!PyList_Check(extras) || PyList_GET_SIZE(extras) < 1) goto slow;
    PyObject *entry = PyList_GET_ITEM(extras, 0);
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
        (PyObject *)Py_TYPE(PyTuple_GET_ITEM(entry, 0)) != self->launch_info_type) goto slow;
    PyObject *fargs = PyTuple_GET_ITEM(entry, 1);
    if (!PyTuple_Check(fargs) || PyTuple_GET_SIZE(fargs) != 3) goto slow;
    grid = PyTuple_GET_ITEM(fargs, 0);  /* read in place: a new tuple could run the garbage collector */
    if (!PyTuple_Check(grid) && !PyList_Check(grid)) goto slow;
    Py_INCREF(grid);
    Known *k = known_kernel(self, PyTuple_GET_ITEM(fargs, 1));
    if (!k) { if (PyErr_Occurred()) goto error; goto slow; }
    int trial = maybe_trial(self, PyTuple_GET_ITEM(entry, 0));
    if (trial < 0) goto error;
    if (trial) goto slow;
    Py_ssize_t gn = PySequence_Fast_GET_SIZE(grid);
    if (gn < 1 || gn > 3) goto slow;
    long long g[3] = {1, 1, 1};
    for (Py_ssize_t i = 0; i < gn; i++) {
        PyObject *gi = PySequence_Fast_GET_ITEM(grid, i);
        if (!PyLong_CheckExact(gi)) goto slow;  /* (an int subclass's conversion could run Python code) */
        g[i] = PyLong_AsLongLong(gi);
        if (g[i] == -1 && PyErr_Occurred()) { PyErr_Clear(); goto slow; }
    }
    /* the launch that fills the chunk goes to Python, which closes it; unless chunks switch
       here: then the next launch's allocator does */
    if (!self->rec && PyByteArray_GET_SIZE(s->entries) / 64 + 1 >= self->copy_every) goto slow;
    int taken = lock_taken(self);
    if (taken < 0) goto error;
    if (taken) goto slow;
    if (!self->counters_held) {
        int ok = 1;
        self->launch_index = get_ll(self->col, s_launch_index, &ok);
        self->launches = get_ll(self->col, s_launches, &ok);
        if (!ok) goto error;
        self->counters_held = 1;
    }
    long long num_ctas = g[0] * g[1] * g[2] * k->per_block;
    unsigned long long v[11] = {(unsigned long long)k->kernel_id, (unsigned long long)s->device,
                                (unsigned long long)self->launch_index, g[0], g[1], g[2], num_ctas, s->stream,
                                p->now, p->offset, num_ctas * k->scratch};
    if (append_entry(s->entries, v) < 0) goto error;
    self->launch_index++;
    self->launches++;
    s->inflight--;
    Py_CLEAR(p->chunk);
    self->fast_exits++;
    Py_DECREF(extras); Py_DECREF(grid);
    Py_RETURN_NONE;
slow:
    Py_DECREF(extras); Py_XDECREF(grid);
    return slow_exit(self, p, lm);
error:
    Py_DECREF(extras); Py_XDECREF(grid);
    return NULL;
}

static PyObject *fp_on_launch_exit(FastPath *self, PyObject *lm) {
    Pending *p = pending_of(self, 0);
    if (!p) return slow_exit(self, NULL, lm);
    p->python_item = 0;  /* the Python hook reads (and clears) the thread-local, if set */
    p->busy = 1;
    PyObject *r = launch_exit(self, p, lm);
    p->busy = 0;
    return r;
}

/* -- the object ------------------------------------------------------------------------ */
static void fp_clear_held(FastPath *self) {
    for (int i = 0; i < SLOTS; i++) {
        Slot *s = &self->slots[i];
        Py_CLEAR(s->chunk); Py_CLEAR(s->entries);
        for (int j = 0; j < SPARES; j++) {
            Py_CLEAR(s->spare[j]); Py_CLEAR(s->spare_entries[j]); Py_CLEAR(s->spare_event[j]);
            Py_CLEAR(s->sealed[j]); Py_CLEAR(s->sealed_event[j]);
        }
        s->spares = s->next_spare = s->nsealed = 0;
    }
    for (int i = 0; i < THREADS; i++) Py_CLEAR(self->pending[i].chunk);
    for (int i = 0; i < KERNELS; i++) Py_CLEAR(self->known[i].metadata);
}

static void fp_dealloc(FastPath *self) {
    fp_clear_held(self);
    Py_XDECREF(self->col); Py_XDECREF(self->tls); Py_XDECREF(self->locked); Py_XDECREF(self->open);
    Py_XDECREF(self->last); Py_XDECREF(self->kernels); Py_XDECREF(self->autotuned);
    Py_XDECREF(self->launch_info_type); Py_XDECREF(self->slow_alloc); Py_XDECREF(self->slow_exit);
    Py_XDECREF(self->spares); Py_XDECREF(self->sealed);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int fp_init(FastPath *self, PyObject *args, PyObject *kw) {
    PyObject *col, *tls, *lock, *open, *last, *kernels, *autotuned, *lit, *sa, *se, *spares, *sealed;
    unsigned long long cap, dev, rec;
    long long idle_ns, copy_every;
    int skip;
    if (!PyArg_ParseTuple(args, "OOOO!O!O!O!OOOKKLLpO!O!K", &col, &tls, &lock, &PyDict_Type, &open, &PyDict_Type,
                          &last, &PyDict_Type, &kernels, &PySet_Type, &autotuned, &lit, &sa, &se, &cap, &dev, &idle_ns,
                          &copy_every, &skip, &PyDict_Type, &spares, &PyList_Type, &sealed, &rec))
        return -1;
    PyObject *locked = PyObject_GetAttrString(lock, "locked");
    if (!locked) return -1;
    fp_clear_held(self);
#define KEEP(f, v) Py_INCREF(v); Py_XSETREF(self->f, v);
    KEEP(col, col) KEEP(tls, tls) KEEP(open, open) KEEP(last, last) KEEP(kernels, kernels)
    KEEP(autotuned, autotuned) KEEP(launch_info_type, lit) KEEP(slow_alloc, sa) KEEP(slow_exit, se)
    KEEP(spares, spares) KEEP(sealed, sealed)
#undef KEEP
    Py_XSETREF(self->locked, locked);
    self->cap = (cap_fn)(uintptr_t)cap; self->dev = (dev_fn)(uintptr_t)dev; self->rec = (rec_fn)(uintptr_t)rec;
    self->idle_ns = idle_ns; self->copy_every = copy_every; self->skip_autotune = skip;
    self->counters_held = 0;
    return 0;
}

static PyObject *fp_counts(FastPath *self, PyObject *unused) {
    return Py_BuildValue("(LL)", self->fast_allocs, self->fast_exits);
}

static PyObject *fp_switches(FastPath *self, PyObject *unused) {
    return PyLong_FromLongLong(self->switches);
}

static PyObject *fp_flush(FastPath *self, PyObject *unused) {
    if (flush(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef fp_methods[] = {
    {"counts", (PyCFunction)fp_counts, METH_NOARGS, "(allocations, exit hooks) served without the Python hooks"},
    {"switches", (PyCFunction)fp_switches, METH_NOARGS, "chunk switches done here, without Python"},
    {"flush", (PyCFunction)fp_flush, METH_NOARGS, "what is held here written back to the Python objects"},
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

