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


LAUNCH_C = r"""
/* the (k+1)-th smallest of a[0..n) (a is reordered): Hoare's selection */
static uint64_t kth_smallest(uint64_t *a, Py_ssize_t n, Py_ssize_t k) {
    Py_ssize_t lo = 0, hi = n - 1;
    while (lo < hi) {
        uint64_t pivot = a[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) { uint64_t t = a[i]; a[i] = a[j]; a[j] = t; i++; j--; }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return a[k];
    }
    return a[k];
}

typedef struct {
    uint64_t tag, version, units, max_cta_ns, limit_gt, early_gt, limit_clk, early_clk;
    double tick, min_span, floor;
} lt_consts;

typedef struct { Py_ssize_t m; uint64_t ref; double cta_min, cta_max; } lt_result;

/* A batch's working arrays, for its largest launch (n CTAs): allocated once, not per launch
   (at 4,096 CTAs a launch's ~800 KB would be mapped and faulted in afresh each time) */
typedef struct {
    uint64_t *sg, *sc, *eg, *ec, *tmp, *clk, *c_ref;
    uint32_t *row, *smid;
    int64_t *inv, *gt, *g_ref;
    double *d, *fits;
    uint8_t *steady;
    int32_t *group_of_sm;  /* 65,536 entries of -1, left so after each launch */
    uint8_t *mem;
} lt_scratch;

static int lt_scratch_init(lt_scratch *s, Py_ssize_t n) {
    size_t u = (size_t)(n ? n : 1);
    s->mem = malloc(u * (8 * 4 + 8 + 8 * 2 + 8 + 4 * 2 + 8 * 4 + 8 + 8 * 4 + 8 * 6 + 1) + 4 * 65536);
    if (!s->mem) return 2;
    uint8_t *p = s->mem;
    s->sg = (uint64_t *)p; s->sc = s->sg + u; s->eg = s->sg + 2 * u; s->ec = s->sg + 3 * u; p += 32 * u;
    s->tmp = (uint64_t *)p; p += 8 * u;
    s->clk = (uint64_t *)p; p += 16 * u;
    s->c_ref = (uint64_t *)p; p += 8 * u;
    s->inv = (int64_t *)p; s->gt = s->inv + 2 * u; p += 32 * u;
    s->g_ref = (int64_t *)p; p += 8 * u;
    s->d = (double *)p; p += 32 * u;
    s->fits = (double *)p; p += 48 * u;
    s->group_of_sm = (int32_t *)p; p += 4 * 65536;
    s->row = (uint32_t *)p; s->smid = s->row + u; p += 8 * u;
    s->steady = p;
    for (int i = 0; i < 65536; i++) s->group_of_sm[i] = -1;
    return 0;
}

static void put32(uint8_t *r, Py_ssize_t off, uint32_t x) { memcpy(r + off, &x, 4); }
static void put64(uint8_t *r, Py_ssize_t off, uint64_t x) { memcpy(r + off, &x, 8); }
static void putf(uint8_t *r, Py_ssize_t off, double x) { memcpy(r + off, &x, 8); }

/* One launch's lifetime blocks (format.md §1.2a) decoded as decode_batch._decode_batch decodes
   a compact layout's launch alone, its CTA rows written to ``out`` (CTA_DTYPE rows, field
   offsets ``off``: launch, cta, smid, start_ns, end_ns, start_clock, end_clock, cycles_per_ns,
   measured_cycles_per_ns, finished_units; times as float64 ns after the launch's reference).
   0; 1 where the launch needs numpy's path (the pooled rate of its short CTAs not exact);
   2 no memory.  ``s``: the batch's working arrays, room for n CTAs. */
static int lifetime_launch(const uint8_t *in, Py_ssize_t n, uint8_t *out, Py_ssize_t size, const Py_ssize_t *off,
                           uint32_t launch_id, const lt_consts *c, lt_scratch *s, lt_result *res) {
    res->m = 0; res->ref = 0; res->cta_min = res->cta_max = 0.0;
    uint64_t *sg = s->sg, *sc = s->sc, *eg = s->eg, *ec = s->ec;
    uint32_t *row = s->row, *smid = s->smid;
    int32_t *group_of_sm = s->group_of_sm;
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {  /* the blocks whose CTA counts: whole and plausible */
        const uint8_t *b = in + 32 * i;
        uint32_t tag_smid, gt_len, clk_len;
        uint16_t version;
        uint64_t end_gt, end_clk;
        memcpy(&tag_smid, b, 4);
        if ((tag_smid >> 16) != c->tag) continue;
        memcpy(&gt_len, b + 4, 4); memcpy(&end_gt, b + 8, 8); memcpy(&end_clk, b + 16, 8);
        memcpy(&clk_len, b + 24, 4); memcpy(&version, b + 28, 2);
        uint64_t start_gt = end_gt - ((uint64_t)gt_len | ((uint64_t)b[30] << 32));
        uint64_t start_clk = end_clk - ((uint64_t)clk_len | ((uint64_t)b[31] << 32));
        if ((uint64_t)version != c->version || c->units != 1) continue;
        if (!(end_gt - start_gt + c->early_gt < c->limit_gt) || !(end_clk - start_clk + c->early_clk < c->limit_clk))
            continue;
        row[m] = (uint32_t)i; smid[m] = tag_smid & 0xFFFF;
        sg[m] = start_gt; sc[m] = start_clk; eg[m] = end_gt; ec[m] = end_clk;
        m++;
    }
    if (m) {  /* near the median start of the launch's CTAs (a scribbled anchor is not one) */
        memcpy(s->tmp, sg, sizeof(uint64_t) * (size_t)m);
        uint64_t med = kth_smallest(s->tmp, m, m / 2);
        Py_ssize_t k = 0;
        for (Py_ssize_t j = 0; j < m; j++) {
            if (!((sg[j] - med) < c->max_cta_ns || (med - sg[j]) < c->max_cta_ns)) continue;
            row[k] = row[j]; smid[k] = smid[j]; sg[k] = sg[j]; sc[k] = sc[j]; eg[k] = eg[j]; ec[k] = ec[j];
            k++;
        }
        m = k;
    }
    res->m = m;
    if (!m) return 0;
    uint64_t ref = UINT64_MAX;
    for (Py_ssize_t j = 0; j < m; j++) if (sg[j] < ref) ref = sg[j];
    res->ref = ref;
    /* the fit's 2m points: each CTA's start, then each CTA's end, grouped by SM (groups are
       numbered as met: a group's values do not depend on its number) */
    int64_t *inv = s->inv, *gt = s->gt, *g_ref = s->g_ref;
    uint64_t *clk = s->clk, *c_ref = s->c_ref;
    double *d = s->d, *fits = s->fits;
    uint8_t *steady = s->steady;
    Py_ssize_t k = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        if (group_of_sm[smid[j]] < 0) group_of_sm[smid[j]] = (int32_t)k++;
        int64_t g = group_of_sm[smid[j]];
        uint64_t end_gt_abs = eg[j] > sg[j] ? eg[j] : sg[j];  /* never before its start */
        ec[j] = ec[j] > sc[j] ? ec[j] : sc[j];
        inv[j] = inv[m + j] = g;
        clk[j] = sc[j]; clk[m + j] = ec[j];
        gt[j] = (int64_t)(sg[j] - ref); gt[m + j] = (int64_t)(end_gt_abs - ref);
    }
    for (Py_ssize_t j = 0; j < m; j++) group_of_sm[smid[j]] = -1;  /* as it came */
    int status = fit_groups(2 * m, inv, clk, gt, k, c_ref, g_ref, fits, fits + k, fits + 2 * k);
    if (status == 0) {
        double *slope = fits, *intercept = fits + k, *rmax = fits + 2 * k, *lo = fits + 3 * k, *hi = fits + 4 * k;
        double *g_at = fits + 5 * k;
        for (Py_ssize_t g = 0; g < k; g++) { lo[g] = INFINITY; hi[g] = -INFINITY; }
        for (Py_ssize_t p = 0; p < 2 * m; p++) {
            double x = (double)gt[p];
            if (x > hi[inv[p]]) hi[inv[p]] = x;
            if (x < lo[inv[p]]) lo[inv[p]] = x;
        }
        for (Py_ssize_t g = 0; g < k; g++) {  /* a line within two ticks, over a span long enough */
            steady[g] = isfinite(slope[g]) && slope[g] > 0 && rmax[g] <= 2 * c->tick + 64 &&
                (hi[g] - lo[g]) >= c->min_span;
            g_at[g] = (double)g_ref[g] + intercept[g];
        }
        double *span_clk = d, *base = d + m, *npc = d + 2 * m, *own = d + 3 * m;
        int any_rest = 0;
        for (Py_ssize_t j = 0; j < m; j++) {
            int64_t g = inv[j];
            double span_gt = (double)(int64_t)((uint64_t)gt[m + j] - (uint64_t)gt[j]);
            span_clk[j] = (double)(int64_t)(ec[j] - sc[j]);
            own[j] = span_gt >= c->min_span ? span_clk[j] / span_gt : NAN;
            if (steady[g]) {  /* on its SM's line */
                double since = (double)(int64_t)(sc[j] - c_ref[g]);
                base[j] = g_at[g] + since * slope[g];
                npc[j] = slope[g];
            } else {  /* its own rate, where long enough to measure */
                base[j] = (double)gt[j];
                npc[j] = isfinite(own[j]) && own[j] > 0 ? 1.0 / own[j] : NAN;
            }
            if (!isfinite(npc[j])) any_rest = 1;
        }
        if (any_rest) {  /* short CTAs: the launch's pooled rate, from its spans' sums (exact below 2^53) */
            double total_gt = 0.0, total_clk = 0.0;
            for (Py_ssize_t j = 0; j < m; j++) {
                double span_gt = (double)(int64_t)((uint64_t)gt[m + j] - (uint64_t)gt[j]);
                if (span_clk[j] > 0 && span_gt >= 0) { total_gt += span_gt; total_clk += span_clk[j]; }
            }
            double pooled = total_clk > 0 && total_gt > 0 ? total_gt / total_clk : NAN;
            if (!(total_gt < 9007199254740992.0 && total_clk < 9007199254740992.0 && isfinite(pooled))) status = 1;
            else {
                if (c->floor > pooled) pooled = c->floor;
                for (Py_ssize_t j = 0; j < m; j++) if (!isfinite(npc[j])) npc[j] = pooled;
            }
        }
        if (status == 0) {
            double cmin = INFINITY, cmax = -INFINITY;
            for (Py_ssize_t j = 0; j < m; j++) {
                uint8_t *r = out + size * j;
                double end = base[j] + span_clk[j] * npc[j];
                if (base[j] < cmin) cmin = base[j];
                if (end > cmax) cmax = end;
                put32(r, off[0], launch_id); put32(r, off[1], row[j]); put32(r, off[2], smid[j]);
                putf(r, off[3], base[j]); putf(r, off[4], end);
                put64(r, off[5], sc[j]); put64(r, off[6], ec[j]);
                putf(r, off[7], 1.0 / npc[j]); putf(r, off[8], own[j]); put32(r, off[9], 1);
            }
            res->cta_min = cmin; res->cta_max = cmax;
        }
    }
    return status;
}

/* lifetime_launches(blocks list, out, size, offsets, first rows, launch ids, consts..., results) -> 0:
   lifetime_launch for each launch of a batch without the GIL, launch i's rows at row first[i] of
   ``out`` (CTA_DTYPE rows of ``size`` bytes); results (int64 [n, 3]: status, rows, reference;
   float64 [n, 2]: earliest start, latest end) */
static PyObject *lifetime_launches(PyObject *self, PyObject *args) {
    PyObject *blocks, *small[5];
    Py_ssize_t size, off[10];
    lt_consts c;
    if (!PyArg_ParseTuple(args, "OOn(nnnnnnnnnn)OOKKKKKKKKdddOO", &blocks, &small[0], &size, &off[0], &off[1],
                          &off[2], &off[3], &off[4], &off[5], &off[6], &off[7], &off[8], &off[9], &small[1],
                          &small[2], &c.tag, &c.version, &c.units, &c.max_cta_ns, &c.limit_gt, &c.early_gt,
                          &c.limit_clk, &c.early_clk, &c.tick, &c.min_span, &c.floor, &small[3], &small[4]))
        return NULL;
    if (!PyList_Check(blocks)) {
        PyErr_SetString(PyExc_TypeError, "lifetime_launches: a list of the launches' blocks");
        return NULL;
    }
    Py_ssize_t nl = PyList_GET_SIZE(blocks);
    for (int f = 0; f < 10; f++)
        if (size <= 0 || off[f] < 0 || off[f] + ((f >= 3 && f <= 8) ? 8 : 4) > size) {
            PyErr_SetString(PyExc_ValueError, "lifetime_launches: a field past the row");
            return NULL;
        }
    Py_buffer sv[5];  /* out (written), first rows, launch ids, results (written) */
    if (take_buffers(small, sv, 5, 0, 1) < 0) return NULL;
    Py_buffer ir, fr;
    if (PyObject_GetBuffer(small[3], &ir, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) { give_buffers(sv, 5); return NULL; }
    if (PyObject_GetBuffer(small[4], &fr, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&ir); give_buffers(sv, 5); return NULL;
    }
    Py_buffer *bv = calloc((size_t)(nl ? nl : 1), sizeof(Py_buffer));
    Py_ssize_t taken = 0, most = 0, rows_out = sv[0].len / size;
    const int64_t *first = sv[1].buf;
    int bad = !bv || sv[1].len != nl * 8 || sv[2].len != nl * 4 || ir.len != nl * 3 * 8 || fr.len != nl * 2 * 8;
    for (; !bad && taken < nl; taken++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(blocks, taken), &bv[taken], PyBUF_SIMPLE) < 0) { bad = 2; break; }
        Py_ssize_t n = bv[taken].len / 32;
        if (bv[taken].len % 32 || first[taken] < 0 || first[taken] + n > rows_out) { taken++; bad = 1; break; }
        if (n > most) most = n;
    }
    lt_scratch scratch = {0};
    if (!bad && lt_scratch_init(&scratch, most)) bad = 3;
    if (!bad) {
        const uint32_t *ids = sv[2].buf;
        int64_t *ires = ir.buf;
        double *fres = fr.buf;
        uint8_t *out = sv[0].buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < nl; i++) {
            lt_result r;
            int st = lifetime_launch(bv[i].buf, bv[i].len / 32, out + size * first[i], size, off, ids[i], &c,
                                     &scratch, &r);
            ires[3 * i] = st; ires[3 * i + 1] = r.m; ires[3 * i + 2] = (int64_t)r.ref;
            fres[2 * i] = r.cta_min; fres[2 * i + 1] = r.cta_max;
        }
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < taken && bv; i++)
        if (bv[i].obj) PyBuffer_Release(&bv[i]);
    free(bv);
    free(scratch.mem);
    PyBuffer_Release(&ir); PyBuffer_Release(&fr);
    give_buffers(sv, 5);
    if (bad == 3) return PyErr_NoMemory();
    if (bad == 2) return NULL;
    if (bad) { PyErr_SetString(PyExc_ValueError, "lifetime_launches: blocks or rows of the wrong size"); return NULL; }
    Py_RETURN_NONE;
}
"""

LIFETIMES_METHODS = r"""
    {"expand_lifetimes", expand_lifetimes, METH_VARARGS, "lifetime blocks as CTA and unit headers, without the GIL"},
    {"lifetime_launches", lifetime_launches, METH_VARARGS, "launches of lifetime blocks decoded to CTA rows, without the GIL"},
"""
