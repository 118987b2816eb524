"""The C source of the exit hook's trial check (``fastpath_source.py`` includes it).

A launch of a JIT function that an autotuner benchmark compiled may be a timing trial; the
Python hook decides by walking the frames above it (``trials._in_autotuner_benchmark``).
Every launch of such a function went to Python for that: every launch of an autotuned
library kernel (liger's DyT) or of a torch.compile kernel (Inductor marks them all).  This
is the same walk in C, for a user's launch (``helper=False``), on the module's own sets read
at each check (tests and ``add_trial_functions`` change them): where it finds no trial the
launch stays in C; where it finds one, or cannot tell, Python decides as before.
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

/* the frames from the exit hook's caller up, as trials._in_autotuner_benchmark(jid) walks
   them: 1 a trial (or Python must tell: codes not known yet), 0 not, -1 on error */
static int frames_say_trial(FastPath *self, PyObject *jid) {
    if (!self->trials) return 1;
    PyObject *codes = PyObject_GetAttr(self->trials, s_trial_codes);
    PyObject *jit_run = codes ? PyObject_GetAttr(self->trials, s_jit_run) : NULL;
    PyObject *wrappers = jit_run ? PyObject_GetAttr(self->trials, s_wrappers) : NULL;
    PyObject *helpers = wrappers ? PyObject_GetAttr(self->trials, s_tuner_helpers) : NULL;
    int result = 0;
    if (!helpers) { PyErr_Clear(); result = 1; }  /* a module without them: Python decides */
    else if (!PyAnySet_Check(codes) || PySet_GET_SIZE(codes) == 0 || !PyAnySet_Check(helpers))
        result = 1;  /* not known yet, or a Triton without Autotuner._bench (Python goes by names) */
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
    return result;
}
"""
