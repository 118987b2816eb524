"""C source of the decoder's per-SM clock fits, compiled into ``native_decode``'s extension.

``sm_fit`` is ``decode_batch.sm_fits``'s arithmetic in four passes over the points without the
GIL, where numpy made ~30 passes, several holding it (``bincount``, ``ufunc.at``): 40 ms per
batch of 176 K CTA lifetimes on the CPU host, a quarter of a lifetime capture's decode.  The
sums run in the points' order, each a double as numpy's ``bincount`` adds them, the products
and quotients in numpy's order (the extension is built without fused multiply-add), so the
fits are numpy's to the bit (``tests/test_decode_native.py``).
"""

FIT_C = r"""
/* sm_fit(inv, clk, gt, c_ref, g_ref, slope, intercept, rmax) -> 0: per group g (inv's values,
   0 <= g < len(c_ref)): c_ref = min clk, g_ref = min gt, and over its points x = (double)
   (int64)(clk - c_ref), y = (double)(gt - g_ref): the least-squares line y = intercept +
   slope * x (slope NaN where the x do not vary) and the largest |y - line| (NaN as infinity,
   from 0), as decode_batch.sm_fits computes them with numpy */
static PyObject *sm_fit(PyObject *self, PyObject *args) {
    PyObject *o[8];
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7])) return NULL;
    Py_buffer v[8];
    if (take_buffers(o, v, 8, 3, 8) < 0) return NULL;
    Py_ssize_t n = v[0].len / 8, k = v[3].len / 8;
    int bad = v[1].len != n * 8 || v[2].len != n * 8;
    for (int i = 4; i < 8 && !bad; i++)
        if (v[i].len != k * 8) bad = 1;
    if (!bad) {
        const int64_t *inv = v[0].buf, *gt = v[2].buf;
        const uint64_t *clk = v[1].buf;
        uint64_t *c_ref = v[3].buf;
        int64_t *g_ref = v[4].buf;
        double *slope = v[5].buf, *intercept = v[6].buf, *rmax = v[7].buf;
        Py_BEGIN_ALLOW_THREADS
        double *acc = malloc((size_t)(k ? k : 1) * 5 * sizeof(double));
        if (!acc) bad = 2;
        else {
            double *cnt = acc, *mx = acc + k, *my = acc + 2 * k, *sxx = acc + 3 * k, *sxy = acc + 4 * k;
            for (Py_ssize_t g = 0; g < k; g++) {
                c_ref[g] = UINT64_MAX; g_ref[g] = INT64_MAX;
                cnt[g] = mx[g] = my[g] = sxx[g] = sxy[g] = 0.0; rmax[g] = 0.0;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                int64_t g = inv[i];
                if (g < 0 || g >= k) { bad = 3; break; }
                if (clk[i] < c_ref[g]) c_ref[g] = clk[i];
                if (gt[i] < g_ref[g]) g_ref[g] = gt[i];
                cnt[g] += 1.0;
            }
            if (!bad) {
                for (Py_ssize_t i = 0; i < n; i++) {
                    int64_t g = inv[i];
                    mx[g] += (double)(int64_t)(clk[i] - c_ref[g]);
                    my[g] += (double)(gt[i] - g_ref[g]);
                }
                for (Py_ssize_t g = 0; g < k; g++) { mx[g] = mx[g] / cnt[g]; my[g] = my[g] / cnt[g]; }
                for (Py_ssize_t i = 0; i < n; i++) {
                    int64_t g = inv[i];
                    double xc = (double)(int64_t)(clk[i] - c_ref[g]) - mx[g], yc = (double)(gt[i] - g_ref[g]) - my[g];
                    sxx[g] += xc * xc;
                    sxy[g] += xc * yc;
                }
                for (Py_ssize_t g = 0; g < k; g++) {
                    slope[g] = sxx[g] > 0 ? sxy[g] / sxx[g] : NAN;
                    intercept[g] = my[g] - slope[g] * mx[g];
                }
                for (Py_ssize_t i = 0; i < n; i++) {
                    int64_t g = inv[i];
                    double x = (double)(int64_t)(clk[i] - c_ref[g]), y = (double)(gt[i] - g_ref[g]);
                    double r = fabs(y - (intercept[g] + slope[g] * x));
                    if (isnan(r)) r = INFINITY;
                    if (r > rmax[g]) rmax[g] = r;
                }
            }
            free(acc);
        }
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 8);
    if (bad == 1) { PyErr_SetString(PyExc_ValueError, "sm_fit: array lengths differ"); return NULL; }
    if (bad == 2) return PyErr_NoMemory();
    if (bad == 3) { PyErr_SetString(PyExc_IndexError, "sm_fit: a group outside [0, k)"); return NULL; }
    Py_RETURN_NONE;
}
"""
