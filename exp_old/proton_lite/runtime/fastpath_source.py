"""The C source of the launch hooks' extension (``runtime/fastpath.py`` builds it and says why).

The two hooks (the profile allocator and the launch-exit hook) and the Python object, after
the state they change (``fastpath_state_source.py``): one C file, in two parts.
"""
from proton_lite.runtime.fastpath_state_source import STATE
from proton_lite.runtime.fastpath_trials_source import TRIALS

SOURCE = STATE + TRIALS + r"""
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
    if (!self->skip_autotune) return 0;
    if (self->benchmarking) return 1;  /* a tuner's own kernels (its cache flush) may launch now */
    if (PySet_GET_SIZE(self->autotuned) == 0) return 0;
    PyObject *jit = PyObject_GetAttr(launch_info, s_jit_fn);
    if (!jit) return -1;
    int maybe = 0;
    if (jit != Py_None) {
        PyObject *jid = PyLong_FromVoidPtr(jit);
        maybe = jid ? PySet_Contains(self->autotuned, jid) : -1;
        if (maybe == 1) maybe = frames_say_trial(self, jid);  /* autotuned: a trial only if the frames say so */
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
    /* first: the check may run Python code (trials.recount_thread), and with it other threads'
       hooks, which change the known kernels and the slots */
    int trial = maybe_trial(self, PyTuple_GET_ITEM(entry, 0));
    if (trial < 0) goto error;
    if (trial) goto slow;
    Known *k = known_kernel(self, PyTuple_GET_ITEM(fargs, 1));
    if (!k) { if (PyErr_Occurred()) goto error; goto slow; }
    Slot *s = NULL;
    for (int i = 0; i < SLOTS; i++) if (self->slots[i].chunk == p->chunk) s = &self->slots[i];
    if (!s) goto slow;  /* its chunk went back to Python meanwhile */
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
    Py_XDECREF(self->spares); Py_XDECREF(self->sealed); Py_XDECREF(self->trials);
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

static PyObject *fp_trial_walks(FastPath *self, PyObject *unused) {
    return PyLong_FromLongLong(self->trial_walks);
}

static PyObject *fp_switches(FastPath *self, PyObject *unused) {
    return PyLong_FromLongLong(self->switches);
}

static PyObject *fp_set_benchmarking(FastPath *self, PyObject *on) {
    int v = PyObject_IsTrue(on);
    if (v < 0) return NULL;
    self->benchmarking = v;
    Py_RETURN_NONE;
}

static PyObject *fp_set_trials(FastPath *self, PyObject *module) {  /* None: Python checks */
    if (module == Py_None) { Py_CLEAR(self->trials); Py_RETURN_NONE; }
    Py_INCREF(module);
    Py_XSETREF(self->trials, module);
    Py_RETURN_NONE;
}

static PyObject *fp_set_idle_ns(FastPath *self, PyObject *value) {
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return NULL;
    self->idle_ns = v;
    Py_RETURN_NONE;
}

static PyObject *fp_flush(FastPath *self, PyObject *unused) {
    if (flush(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef fp_methods[] = {
    {"counts", (PyCFunction)fp_counts, METH_NOARGS, "(allocations, exit hooks) served without the Python hooks"},
    {"trial_walks", (PyCFunction)fp_trial_walks, METH_NOARGS, "launches whose frames the exit hook walked for trials"},
    {"switches", (PyCFunction)fp_switches, METH_NOARGS, "chunk switches done here, without Python"},
    {"flush", (PyCFunction)fp_flush, METH_NOARGS, "what is held here written back to the Python objects"},
    {"set_benchmarking", (PyCFunction)fp_set_benchmarking, METH_O,
     "while true, every exit hook goes to Python (an autotuner benchmark may launch its own kernels)"},
    {"set_trials", (PyCFunction)fp_set_trials, METH_O, "runtime/trials.py, whose frame check the exit hook does in C"},
    {"set_idle_ns", (PyCFunction)fp_set_idle_ns, METH_O, "the idle time after which a launch goes to Python"},
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
