"""C for ``_proto.Rows.tobytes``: the rows' present bytes, one row after another, in one pass
without the GIL (built into ``native_events``' extension).

Why: the numpy form fills an (n, width) byte matrix and a mask column by column and then
compacts it; for the CTA slices of a capture of kernels without scopes (a million CTAs, ~40
columns a row) that was a second per million rows on one core, a quarter of the trace's
writing, and it held the GIL for much of it.  The bytes are the numpy form's, row for row
(``tests/test_trace_native.py``).
"""

SOURCE = r"""
/* rows_bytes(n, consts, arrays, present) -> bytes: for each row i, for each column j whose
   present[j] is None or true at i, the byte arrays[j][i] (consts[j] where arrays[j] is None) */
static PyObject *rows_bytes(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *consts_o, *arrays, *present;
    if (!PyArg_ParseTuple(args, "nOO!O!", &n, &consts_o, &PyTuple_Type, &arrays, &PyTuple_Type, &present))
        return NULL;
    Py_ssize_t w = PyTuple_GET_SIZE(arrays);
    if (n < 0 || PyTuple_GET_SIZE(present) != w) {
        PyErr_SetString(PyExc_ValueError, "rows_bytes: a column list of another length");
        return NULL;
    }
    Py_buffer cv;
    if (PyObject_GetBuffer(consts_o, &cv, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_buffer *bufs = calloc((size_t)(2 * w + 1), sizeof(Py_buffer));
    const uint8_t **col = calloc((size_t)w + 1, sizeof(uint8_t *)), **has = calloc((size_t)w + 1, sizeof(uint8_t *));
    unsigned char *out = NULL;
    PyObject *result = NULL;
    Py_ssize_t held = 0, size = 0;
    int bad = !bufs || !col || !has;
    if (bad) PyErr_NoMemory();
    else if (cv.len != w) { PyErr_SetString(PyExc_ValueError, "rows_bytes: one constant per column"); bad = 1; }
    for (Py_ssize_t j = 0; j < w && !bad; j++) {
        PyObject *pair[2] = {PyTuple_GET_ITEM(arrays, j), PyTuple_GET_ITEM(present, j)};
        for (int k = 0; k < 2 && !bad; k++) {
            if (pair[k] == Py_None) continue;
            if (PyObject_GetBuffer(pair[k], &bufs[held], PyBUF_C_CONTIGUOUS) < 0) { bad = 1; break; }
            if (bufs[held].len != n) {
                PyErr_SetString(PyExc_ValueError, "rows_bytes: a column of another length than the rows");
                bad = 1;
            }
            if (k == 0) col[j] = bufs[held].buf; else has[j] = bufs[held].buf;
            held++;
        }
    }
    if (!bad && (out = malloc((size_t)(n * w) + 1)) == NULL) { PyErr_NoMemory(); bad = 1; }
    if (!bad) {
        const uint8_t *cst = cv.buf;
        Py_BEGIN_ALLOW_THREADS
        unsigned char *p = out;
        for (Py_ssize_t i = 0; i < n; i++)
            for (Py_ssize_t j = 0; j < w; j++)
                if (!has[j] || has[j][i]) *p++ = col[j] ? col[j][i] : cst[j];
        size = p - out;
        Py_END_ALLOW_THREADS
        result = PyBytes_FromStringAndSize((const char *)out, size);
    }
    free(out);
    for (Py_ssize_t k = 0; k < held; k++) PyBuffer_Release(&bufs[k]);
    PyBuffer_Release(&cv);
    free(bufs); free(col); free(has);
    return result;
}
"""
