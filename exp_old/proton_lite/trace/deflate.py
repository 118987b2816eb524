"""A fast deflate for the .pftrace's ``compressed_packets`` batches (C source, compiled into
``native_events``).

Why: deflating the events was most of a stop's CPU time.  zlib at level 1 moves ~155 MB/s
of our packets per core (CPU host, 2026-11-27), and on the 16-core H100 host the events
step of the 21 M-record capture stayed at 1.0 s of a 2.4 s stop with every core busy.
This encoder does the least that still compresses these packets well: greedy LZ77 matches
found through one 4-byte hash table (no chains, no lazy matching), then one Huffman block
per batch, built from the batch's own symbol counts (length-limited to 15 bits by halving
counts), or the fixed code when that comes out smaller.  On trace packets it runs at 2.2-2.9x
zlib level 1's speed for a 1-2% smaller output (``tests/benchmarks/deflate_speed.py``;
docs/design.md §6, "Our own deflate").

The output is a zlib stream (RFC 1950 header, RFC 1951 blocks, Adler-32 of the input) that
any inflater reads: Perfetto's trace processor, Python's ``zlib.decompress``; not byte for
byte what zlib writes (``tests/test_deflate.py`` inflates it with zlib).

Work buffers (the hash table, the symbols) come from the caller: ``native_events`` passes
the thread's own (``work_buf``); ``PY_C``, the Python-callable ``deflate``, is placed after
``work_buf`` in that module's source.
"""

C_SOURCE = r"""
/* ---- fast deflate (proton_lite/trace/deflate.py) ---- */
typedef unsigned long (*adler32_fn)(unsigned long, const unsigned char *, unsigned int);
static adler32_fn fd_adler32;

#define FD_HASH_BITS 14
#define FD_TABLE_BYTES (sizeof(uint32_t) << FD_HASH_BITS)
static uint16_t fd_len_sym[259];  /* match length 3..258 -> its symbol 257..285, extra bits, extra value */
static uint8_t fd_len_xbits[259];
static uint16_t fd_len_xval[259];
static uint8_t fd_dist_small[256], fd_dist_big[256];  /* distance - 1 < 256, else (distance - 1) >> 7 -> code */
static const uint16_t fd_dbase[30] = {1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769,
                                      1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t fd_dxbits[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11,
                                      12, 12, 13, 13};
static const uint16_t fd_lbase[29] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83,
                                      99, 115, 131, 163, 195, 227, 258};
static const uint8_t fd_lxbits[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5,
                                      5, 0};
static const uint8_t fd_cl_order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
static uint8_t fd_fixed_lens[288];

static void fd_init(void) {
    for (int c = 0; c < 29; c++) {
        int hi = c == 28 ? 258 : (c == 27 ? 257 : fd_lbase[c + 1] - 1);  /* 258 has a symbol of its own */
        for (int len = fd_lbase[c]; len <= hi; len++) {
            fd_len_sym[len] = (uint16_t)(257 + c);
            fd_len_xbits[len] = fd_lxbits[c];
            fd_len_xval[len] = (uint16_t)(len - fd_lbase[c]);
        }
    }
    for (int c = 0; c < 30; c++) {
        int hi = c == 29 ? 32768 : fd_dbase[c + 1] - 1;
        for (int d = fd_dbase[c]; d <= hi; d++) {
            if (d - 1 < 256) fd_dist_small[d - 1] = (uint8_t)c;
            else fd_dist_big[(d - 1) >> 7] = (uint8_t)c;
        }
    }
    for (int s = 0; s < 288; s++) fd_fixed_lens[s] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
}

static inline int fd_dcode(uint32_t d) { return d - 1 < 256 ? fd_dist_small[d - 1] : fd_dist_big[(d - 1) >> 7]; }

static uint32_t fd_rev(uint32_t v, int n) {
    uint32_t r = 0;
    for (int i = 0; i < n; i++) { r = (r << 1) | (v & 1); v >>= 1; }
    return r;
}

typedef struct { uint64_t bits; int n; unsigned char *p; } FdOut;

static inline void fd_put(FdOut *o, uint64_t v, int n) {  /* n <= 32 */
    o->bits |= v << o->n;
    o->n += n;
    if (o->n >= 32) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        uint32_t w = (uint32_t)o->bits;
        memcpy(o->p, &w, 4);
        o->p += 4;
        o->bits >>= 32;
#else
        for (int k = 0; k < 4; k++) { *o->p++ = (unsigned char)o->bits; o->bits >>= 8; }
#endif
        o->n -= 32;
    }
}

static inline uint32_t fd_load32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t fd_load64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* bytes fd_deflate may write for n bytes: the fixed code's worst (9 bits a literal) + framing */
static size_t fd_bound(size_t n) { return n + n / 8 + 16; }

typedef struct { uint64_t w; int id; } FdNode;

static int fd_cmp(const void *a, const void *b) {
    const FdNode *x = a, *y = b;
    return x->w < y->w ? -1 : x->w > y->w ? 1 : x->id - y->id;
}

/* Huffman code lengths of at most maxbits for n <= 288 symbol counts; at least two symbols
   get a code (a complete code: every inflater takes it) */
static void fd_lengths(const uint32_t *count, int n, int maxbits, uint8_t *lens) {
    uint64_t f[288];
    int used = 0;
    for (int i = 0; i < n; i++) used += (f[i] = count[i]) != 0;
    for (int i = 0; used < 2 && i < n; i++)
        if (!f[i]) { f[i] = 1; used++; }
    for (;;) {
        FdNode leaf[288];
        int m = 0;
        for (int i = 0; i < n; i++)
            if (f[i]) { leaf[m].w = f[i]; leaf[m].id = i; m++; }
        qsort(leaf, m, sizeof(FdNode), fd_cmp);
        /* two queues: leaves by weight, then internal nodes as made (in weight order) */
        uint64_t iw[288];
        int parent[576], li = 0, ii = 0, made = 0;
        for (int k = 0; k < m - 1; k++) {
            int pick[2];
            for (int t = 0; t < 2; t++) {
                if (li < m && (ii >= made || leaf[li].w <= iw[ii])) pick[t] = li++;
                else pick[t] = m + ii++;
            }
            uint64_t w = 0;
            for (int t = 0; t < 2; t++) {
                w += pick[t] < m ? leaf[pick[t]].w : iw[pick[t] - m];
                parent[pick[t]] = m + made;
            }
            iw[made++] = w;
        }
        int depth[576], deepest = 0;
        depth[2 * m - 2] = 0;
        for (int id = 2 * m - 3; id >= 0; id--) depth[id] = depth[parent[id]] + 1;
        memset(lens, 0, (size_t)n);
        for (int k = 0; k < m; k++) {
            lens[leaf[k].id] = (uint8_t)depth[k];
            if (depth[k] > deepest) deepest = depth[k];
        }
        if (deepest <= maxbits) return;
        for (int i = 0; i < n; i++)
            if (f[i]) f[i] = (f[i] >> 1) | 1;  /* flatter counts, shallower tree; still counted */
    }
}

static void fd_codes(const uint8_t *lens, int n, uint32_t *codes) {  /* canonical, bit-reversed for output */
    int count[16] = {0}, next[16];
    for (int i = 0; i < n; i++) count[lens[i]]++;
    count[0] = 0;
    int code = 0;
    for (int b = 1; b < 16; b++) { code = (code + count[b - 1]) << 1; next[b] = code; }
    for (int i = 0; i < n; i++) codes[i] = lens[i] ? fd_rev((uint32_t)next[lens[i]]++, lens[i]) : 0;
}

/* deflate src[0:n) into dst (fd_bound(n) bytes) as a zlib stream; table: FD_TABLE_BYTES,
   syms: 4 * n bytes.  Returns the bytes written. */
static size_t fd_deflate(unsigned char *dst, const unsigned char *src, size_t n, uint32_t *table, uint32_t *syms) {
    uint32_t lcount[286] = {0}, dcount[30] = {0};
    size_t ns = 0, i = 0;
    memset(table, 0, FD_TABLE_BYTES);
    while (i + 8 <= n) {  /* greedy matches of >= 4 bytes; a symbol: a byte, or length << 16 | distance */
        uint32_t x = fd_load32(src + i);
        uint32_t h = (x * 2654435761u) >> (32 - FD_HASH_BITS);
        size_t c = table[h];  /* position + 1; 0: none yet */
        table[h] = (uint32_t)(i + 1);
        if (c && i + 1 - c <= 32768 && fd_load32(src + c - 1) == x) {
            const unsigned char *a = src + c - 1 + 4, *b = src + i + 4;
            size_t len = 4, max = n - i < 258 ? n - i : 258;
            while (len + 8 <= max) {
                uint64_t d = fd_load64(a) ^ fd_load64(b);
                if (d) { len += (size_t)__builtin_ctzll(d) >> 3; goto found; }  /* little-endian loads */
                len += 8; a += 8; b += 8;
            }
            while (len < max && *a == *b) { len++; a++; b++; }
        found:;
            uint32_t dist = (uint32_t)(i + 1 - c);
            syms[ns++] = (uint32_t)len << 16 | dist;
            lcount[fd_len_sym[len]]++;
            dcount[fd_dcode(dist)]++;
            i += len;
        } else {
            lcount[src[i]]++;
            syms[ns++] = src[i++];
        }
    }
    for (; i < n; i++) { lcount[src[i]]++; syms[ns++] = src[i]; }
    lcount[256] = 1;

    /* the batch's own code */
    uint8_t llen[286], dlen[30], all[316], cllen[19];
    uint32_t lcode[288], dcode[30], clcode[19], clcount[19] = {0};
    fd_lengths(lcount, 286, 15, llen);
    fd_lengths(dcount, 30, 15, dlen);
    int hlit = 286, hdist = 30, hclen = 19, ncl = 0;
    while (hlit > 257 && !llen[hlit - 1]) hlit--;
    while (hdist > 1 && !dlen[hdist - 1]) hdist--;
    memcpy(all, llen, (size_t)hlit);
    memcpy(all + hlit, dlen, (size_t)hdist);
    uint16_t cl[316];  /* code-length symbols, run-length coded: symbol | extra value << 5 */
    for (int k = 0, total = hlit + hdist; k < total;) {
        int v = all[k], run = 1;
        while (k + run < total && all[k + run] == v) run++;
        int left = run;
        if (v == 0) {
            while (left >= 11) { int r = left < 138 ? left : 138; cl[ncl++] = 18 | (r - 11) << 5; left -= r; }
            if (left >= 3) { cl[ncl++] = 17 | (left - 3) << 5; left = 0; }
        } else {
            cl[ncl++] = (uint16_t)v;
            left--;
            while (left >= 3) { int r = left < 6 ? left : 6; cl[ncl++] = 16 | (r - 3) << 5; left -= r; }
        }
        while (left-- > 0) cl[ncl++] = (uint16_t)v;
        k += run;
    }
    for (int k = 0; k < ncl; k++) clcount[cl[k] & 31]++;
    fd_lengths(clcount, 19, 7, cllen);
    while (hclen > 4 && !cllen[fd_cl_order[hclen - 1]]) hclen--;

    /* sizes in bits of both codes; the smaller is written */
    static const int cl_extra[19] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 7};
    uint64_t dyn = 3 + 14 + 3 * (uint64_t)hclen, fix = 3;  /* extra bits: the same in both */
    for (int k = 0; k < ncl; k++) dyn += cllen[cl[k] & 31] + cl_extra[cl[k] & 31];
    for (int s = 0; s < 286; s++) {
        dyn += (uint64_t)lcount[s] * llen[s];
        fix += (uint64_t)lcount[s] * fd_fixed_lens[s];
    }
    for (int d = 0; d < 30; d++) {
        dyn += (uint64_t)dcount[d] * dlen[d];
        fix += (uint64_t)dcount[d] * 5;
    }
    int dynamic = dyn < fix;

    FdOut o = {0, 0, dst};
    *o.p++ = 0x78;  /* zlib header: deflate, 32 KiB window, "fastest" */
    *o.p++ = 0x01;
    if (dynamic) {
        fd_put(&o, 1 | 2 << 1, 3);  /* final block, dynamic Huffman */
        fd_put(&o, (uint64_t)(hlit - 257) | (uint64_t)(hdist - 1) << 5 | (uint64_t)(hclen - 4) << 10, 14);
        for (int k = 0; k < hclen; k++) fd_put(&o, cllen[fd_cl_order[k]], 3);
        fd_codes(cllen, 19, clcode);
        for (int k = 0; k < ncl; k++) {
            int s = cl[k] & 31;
            fd_put(&o, clcode[s], cllen[s]);
            if (cl_extra[s]) fd_put(&o, cl[k] >> 5, cl_extra[s]);
        }
        fd_codes(llen, 286, lcode);
        fd_codes(dlen, 30, dcode);
    } else {
        fd_put(&o, 1 | 1 << 1, 3);  /* final block, fixed Huffman */
        memcpy(llen, fd_fixed_lens, 286);
        fd_codes(fd_fixed_lens, 288, lcode);
        memset(dlen, 5, 30);
        for (int d = 0; d < 30; d++) dcode[d] = fd_rev((uint32_t)d, 5);
    }
    for (size_t k = 0; k < ns; k++) {
        uint32_t s = syms[k];
        if (s < 256) { fd_put(&o, lcode[s], llen[s]); continue; }
        uint32_t len = s >> 16, dist = s & 0xFFFF;  /* distances <= 32768 fit 16 bits */
        int ls = fd_len_sym[len], dc = fd_dcode(dist);
        fd_put(&o, lcode[ls] | (uint64_t)fd_len_xval[len] << llen[ls], llen[ls] + fd_len_xbits[len]);
        fd_put(&o, dcode[dc] | (uint64_t)(dist - fd_dbase[dc]) << dlen[dc], dlen[dc] + fd_dxbits[dc]);
    }
    fd_put(&o, lcode[256], llen[256]);
    while (o.n > 0) { *o.p++ = (unsigned char)o.bits; o.bits >>= 8; o.n -= 8; }
    unsigned long ad = 1;
    for (size_t k = 0; k < n; k += 1u << 30) {
        size_t part = n - k < (1u << 30) ? n - k : (1u << 30);
        ad = fd_adler32(ad, src + k, (unsigned int)part);
    }
    *o.p++ = (unsigned char)(ad >> 24);
    *o.p++ = (unsigned char)(ad >> 16);
    *o.p++ = (unsigned char)(ad >> 8);
    *o.p++ = (unsigned char)ad;
    return (size_t)(o.p - dst);
}
"""

PY_C = r"""
#define FD_KEEP_MAX ((size_t)4 << 20)  /* larger inputs (the metadata's CTA columns): buffers of their own */

static PyObject *py_deflate(PyObject *self, PyObject *arg) {  /* bytes-like -> zlib stream (trace/deflate.py) */
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    size_t n = (size_t)v.len, m = 0;
    /* the thread's kept buffers for batch-sized inputs (the writer's threads call this per
       batch); a large one-off input is not left holding ~5x its size until the thread ends */
    int own = n > FD_KEEP_MAX;
    unsigned char *out = own ? malloc(fd_bound(n)) : work_buf(2, fd_bound(n));
    uint32_t *table = own ? malloc(FD_TABLE_BYTES) : work_buf(4, FD_TABLE_BYTES);
    uint32_t *syms = own ? malloc(4 * n + 4) : work_buf(5, 4 * n + 4);
    PyObject *r = NULL;
    if (!out || !table || !syms) PyErr_NoMemory();
    else {
        Py_BEGIN_ALLOW_THREADS
        m = fd_deflate(out, v.buf, n, table, syms);
        Py_END_ALLOW_THREADS
        r = PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)m);
    }
    if (own) { free(out); free(table); free(syms); }
    PyBuffer_Release(&v);
    return r;
}
"""
