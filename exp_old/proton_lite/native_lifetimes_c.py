"""C source of the expansion of lifetime blocks (``cta_blocks.expand_lifetimes``), compiled into
``native_decode``'s extension.

Why: in numpy the expansion was a dozen passes over a batch's blocks, each a field of a
structured array (0.20 of a 4 M-lifetime capture's 1.0 s decode on one thread of the CPU
host), holding the GIL between them on the decode's threads.  Here one pass without the GIL,
the same bytes (integer copies and subtractions only; ``tests/test_decode_native.py``).
"""

LIFETIMES_C = r"""
/* expand_lifetimes(blocks, out, offsets, tag, cta_magic, unit_magic) -> 0: each 32-byte lifetime
   block (format.md §1.2a) whose tag is ``tag`` as the CTA header and unit header that ``out``'s
   rows hold (stride len(out) / n), at the offsets given (magic, smid, start_gt, start_clk,
   version, units, unit magic, unit end_gt, unit end_clk); rows of blocks without the tag are
   left as they are (zero: a missing CTA) */
static PyObject *expand_lifetimes(PyObject *self, PyObject *args) {
    PyObject *o[2];
    Py_ssize_t off[9];
    unsigned long tag, cta_magic, unit_magic;
    if (!PyArg_ParseTuple(args, "OO(nnnnnnnnn)kkk", &o[0], &o[1], &off[0], &off[1], &off[2], &off[3], &off[4],
                          &off[5], &off[6], &off[7], &off[8], &tag, &cta_magic, &unit_magic))
        return NULL;
    Py_buffer v[2];
    if (take_buffers(o, v, 2, 1, 2) < 0) return NULL;
    Py_ssize_t n = v[0].len / 32, stride = n ? v[1].len / n : 0;
    int bad = v[0].len != n * 32 || (n && v[1].len != n * stride);
    static const Py_ssize_t width[9] = {4, 4, 8, 8, 4, 4, 4, 8, 8};
    for (int f = 0; f < 9 && !bad; f++)
        if (off[f] < 0 || off[f] + width[f] > stride) bad = 1;
    if (!bad) {
        const uint8_t *in = v[0].buf;
        uint8_t *out = v[1].buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            const uint8_t *b = in + 32 * i;
            uint32_t tag_smid, gt_len, clk_len, magic = (uint32_t)cta_magic, umagic = (uint32_t)unit_magic, one = 1;
            uint64_t end_gt, end_clk, start_gt, start_clk;
            uint16_t version;
            memcpy(&tag_smid, b, 4);
            if ((tag_smid >> 16) != tag) continue;
            memcpy(&gt_len, b + 4, 4); memcpy(&end_gt, b + 8, 8); memcpy(&end_clk, b + 16, 8);
            memcpy(&clk_len, b + 24, 4); memcpy(&version, b + 28, 2);
            start_gt = end_gt - ((uint64_t)gt_len | ((uint64_t)b[30] << 32));
            start_clk = end_clk - ((uint64_t)clk_len | ((uint64_t)b[31] << 32));
            uint32_t smid = tag_smid & 0xFFFF, version32 = version;
            uint8_t *r = out + stride * i;
            memcpy(r + off[0], &magic, 4); memcpy(r + off[1], &smid, 4); memcpy(r + off[2], &start_gt, 8);
            memcpy(r + off[3], &start_clk, 8); memcpy(r + off[4], &version32, 4); memcpy(r + off[5], &one, 4);
            memcpy(r + off[6], &umagic, 4); memcpy(r + off[7], &end_gt, 8); memcpy(r + off[8], &end_clk, 8);
        }
        Py_END_ALLOW_THREADS
    }
    give_buffers(v, 2);
    if (bad) { PyErr_SetString(PyExc_ValueError, "expand_lifetimes: lengths or offsets do not fit"); return NULL; }
    Py_RETURN_NONE;
}
"""

LIFETIMES_METHODS = r"""
    {"expand_lifetimes", expand_lifetimes, METH_VARARGS, "lifetime blocks as CTA and unit headers, without the GIL"},
"""
