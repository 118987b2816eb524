"""The C source of the exit hook's trial check (``fastpath_source.py`` includes it).

A launch of a JIT function that an autotuner benchmark compiled may be a timing trial; the
Python hook decides by walking the frames above it (``trials._in_autotuner_benchmark``).
Every launch of such a function went to Python for that: every launch of an autotuned
library kernel (liger's DyT) or of a torch.compile kernel (Inductor marks them all).  This
is the same walk in C, for a user's launch (``helper=False``), on the module's own sets read
at each check (tests and ``add_trial_functions`` change them): where it finds no trial the
launch stays in C; where it finds one, or cannot tell, Python decides as before.

Before walking it asks the gate (``trials._GATE``, Python 3.12+): a thread that runs no
timing function now has no trial, without a walk, which materialised a frame object per
level (2-3.5 µs an Inductor launch).  Where the gate counted the thread yet the walk finds
nothing (a timing function left by an exception), ``trials.recount_thread`` sets it right;
it runs Python code, so the exit hook checks for trials before it looks at anything another
thread may change.
"""

TRIALS = r"""
/* 1 when code's id is in the set (a frozenset or set of ints), 0 when not, -1 on error */
static int has_id(PyObject *ids, PyCodeObject *code) {
    if (!ids || ids == Py_None || !PyAnySet_Check(ids)) return 0;
    PyObject *key = PyLong_FromVoidPtr(code);
    if (!key) return -1;
    int r = PySet_Contains(ids, key);
    Py_DECREF(key);
    return r;
}

/* trials._GATE on this thread: 0 no timing function runs on it, 1 some may, 2 no gate */
static int gate_says(FastPath *self) {
    PyObject *gate = PyObject_GetAttr(self->trials, s_gate);
    if (!gate) { PyErr_Clear(); return 2; }
    int r = 2;
    if (PyDict_CheckExact(gate)) {
        PyObject *tid = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
        r = tid ? PyDict_Contains(gate, tid) : -1;  /* an int key: hashing it runs no Python code */
        Py_XDECREF(tid);
        if (r < 0) { PyErr_Clear(); r = 1; }
    }
    Py_DECREF(gate);
    return r;
}

/* the frames from the exit hook's caller up, as trials._in_autotuner_benchmark(jid) walks
   them: 1 a trial (or Python must tell: codes not known yet), 0 not, -1 on error */
static int frames_say_trial(FastPath *self, PyObject *jid) {
    if (!self->trials) return 1;
    PyObject *codes = PyObject_GetAttr(self->trials, s_trial_codes);
    if (!codes) { PyErr_Clear(); return 1; }  /* a module without them: Python decides */
    if (!PyAnySet_Check(codes) || PySet_GET_SIZE(codes) == 0) {
        Py_DECREF(codes);
        return 1;  /* not known yet, or a Triton without Autotuner._bench (Python goes by names) */
    }
    int gate = gate_says(self);
    if (gate == 0) {  /* no timing function on this thread: no walk */
        Py_DECREF(codes);
        return 0;
    }
    PyObject *jit_run = PyObject_GetAttr(self->trials, s_jit_run);
    PyObject *wrappers = jit_run ? PyObject_GetAttr(self->trials, s_wrappers) : NULL;
    PyObject *helpers = wrappers ? PyObject_GetAttr(self->trials, s_tuner_helpers) : NULL;
    int result = 0;
    if (!helpers) { PyErr_Clear(); result = 1; }  /* a module without them: Python decides */
    else if (!PyAnySet_Check(helpers)) result = 1;
    if (result == 0) self->trial_walks++;
    PyFrameObject *f = result == 0 ? PyEval_GetFrame() : NULL;
    Py_XINCREF(f);
    for (int depth = 0; f && depth < 12 && result == 0; depth++) {
        PyCodeObject *code = PyFrame_GetCode(f);
        int in = has_id(codes, code);
        if (in) { result = in; Py_DECREF(code); break; }
        if ((PyObject *)code == jit_run) {  /* the caller of JITFunction.run decides */
            PyFrameObject *caller = PyFrame_GetBack(f);
            while (caller) {
                PyCodeObject *cc = PyFrame_GetCode(caller);
                int w = has_id(wrappers, cc);
                Py_DECREF(cc);
                if (w < 0) result = -1;
                if (w != 1) break;
                PyFrameObject *up = PyFrame_GetBack(caller);
                Py_DECREF(caller);
                caller = up;
            }
            if (caller && result == 0) {
                PyCodeObject *cc = PyFrame_GetCode(caller);
                result = has_id(codes, cc);
                Py_DECREF(cc);
            }
            if (result == 0) {
                int helper = PySet_Contains(helpers, jid);  /* a tuner's helper: go on up */
                if (helper <= 0) {  /* a user's launch: not a trial */
                    result = helper;
                    Py_XDECREF(caller);
                    Py_DECREF(code);
                    Py_DECREF(f);
                    f = NULL;
                    break;
                }
            }
            Py_DECREF(code);
            Py_DECREF(f);
            f = caller;
            continue;
        }
        Py_DECREF(code);
        PyFrameObject *up = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = up;
    }
    Py_XDECREF(f);
    Py_XDECREF(codes); Py_XDECREF(jit_run); Py_XDECREF(wrappers); Py_XDECREF(helpers);
    if (result == 0 && gate == 1) {  /* counted, yet none near: one left by an exception */
        PyObject *r = PyObject_CallMethodNoArgs(self->trials, s_recount);
        if (!r) PyErr_Clear();
        Py_XDECREF(r);
    }
    return result;
}
"""
