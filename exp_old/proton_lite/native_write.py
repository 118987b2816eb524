"""Raw-file chunks written by C code that does not hold the GIL: checksum and write in one call.

Why: while a session runs, the drain writes the records of thousands of CTAs per launch, and
each Python-level step of that work (a checksum block handed to a worker thread, its result
collected, the write) takes the GIL from the launching thread and gives it back.  Measured
on the H100 machine (``docs/design.md`` section 4), those hand-overs, not the bytes, were
what slowed launches: a loop of 1,024-CTA launches ran at 73-132 µs per call with the
writes and 47-54 µs without them.  Here one call per chunk releases the GIL once, computes
the CRC-32 on several threads (zlib's ``crc32`` and ``crc32_combine``, found in the
``libz`` that Python's own ``zlib`` module uses) and writes the chunk header and its parts
with ``writev``.  The result is byte for byte what ``RawWriter``'s Python path writes.

Built at first use (``native_build``); without a compiler or ``libz``, ``module()`` is None
and the Python path writes instead.
"""
from __future__ import annotations

import os

from proton_lite.native_build import ZlibExtension

CHUNK_WRITE_C = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

typedef unsigned long (*crc_fn)(unsigned long, const unsigned char *, unsigned int);
typedef unsigned long (*combine_fn)(unsigned long, unsigned long, long);
static crc_fn z_crc32;
static combine_fn z_combine;

#define MAX_PARTS 8
#define MAX_THREADS 16
#define IOV_GROUP 64

/* CRC-32 with zlib's polynomial, by folding with carry-less multiplies (x86-64 with PCLMULQDQ):
   the same values as zlib's crc32, 4-6 times its speed (docs/design.md section 4, "The
   checksum"), where zlib 1.2.x gave ~2.2 GB/s a core.  Four 16-byte lanes each fold onto the
   block 64 bytes ahead: a block A = H x^64 + L (H its first 8 bytes) moved D bits on is H
   (x^(D+64) mod P) + L (x^D mod P), under 96 bits; with the bits reflected (the first byte's
   lowest bit is the highest power, as loaded little-endian) a carry-less product of two 64-bit
   values comes out one bit low, which the constants, x^(D+32) and x^(D-32) mod P reflected in 32
   bits and shifted left by one, take up.  The last 16 bytes folded and the tail under 16 go to
   zlib: the folded block stands for everything before it. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define PL_FOLD(x, k, d) _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128((x), (k), 0x00), \
                                                     _mm_clmulepi64_si128((x), (k), 0x11)), (d))
__attribute__((target("pclmul,sse2")))
static unsigned long crc_folded(unsigned long crc, const unsigned char *p, size_t n) {  /* n >= 64 */
    const __m128i by64 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);  /* x^480, x^544 mod P */
    const __m128i by16 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);  /* x^96, x^160 mod P */
    __m128i x0 = _mm_loadu_si128((const __m128i *)p), x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32)), x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)(~crc & 0xFFFFFFFFul)));  /* the running CRC, as zlib keeps it */
    p += 64; n -= 64;
    for (; n >= 64; p += 64, n -= 64) {
        x0 = PL_FOLD(x0, by64, _mm_loadu_si128((const __m128i *)p));
        x1 = PL_FOLD(x1, by64, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = PL_FOLD(x2, by64, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = PL_FOLD(x3, by64, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    x1 = PL_FOLD(x0, by16, x1);
    x2 = PL_FOLD(x1, by16, x2);
    x3 = PL_FOLD(x2, by16, x3);
    for (; n >= 16; p += 16, n -= 16) x3 = PL_FOLD(x3, by16, _mm_loadu_si128((const __m128i *)p));
    unsigned char last[16];
    _mm_storeu_si128((__m128i *)last, x3);
    unsigned long c = z_crc32(0xFFFFFFFFul, last, 16);  /* no initial value: it is folded in */
    return n ? z_crc32(c, p, (unsigned int)n) : c;
}

static int folding_available(void) {
    unsigned int a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 1)) && (d & (1u << 26));  /* PCLMULQDQ, SSE2 */
}
#else
static unsigned long crc_folded(unsigned long crc, const unsigned char *p, size_t n) { return 0; }
static int folding_available(void) { return 0; }
#endif

static int crc_fold = -1;  /* -1: not checked yet; 0: zlib's crc32 alone; 1: folding for 128 bytes and more */

static int folding_wanted(void) {  /* PROTON_LITE_CRC_FOLDING=0: zlib's alone (the same checksums) */
    const char *v = getenv("PROTON_LITE_CRC_FOLDING");
    return folding_available() && !(v && v[0] == '0' && !v[1]);
}

static unsigned long crc_serial(unsigned long crc, const unsigned char *p, size_t n) {
    if (crc_fold < 0) crc_fold = folding_wanted();
    if (crc_fold && n >= 128) return crc_folded(crc, p, n);
    while (n) {
        unsigned int k = n > (1u << 30) ? (1u << 30) : (unsigned int)n;
        crc = z_crc32(crc, p, k);
        p += k; n -= k;
    }
    return crc;
}

typedef struct { const unsigned char *p; size_t n; unsigned long crc; } job_t;

static void *crc_job(void *arg) {
    job_t *j = (job_t *)arg;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "pl-crc");  /* what top and /proc show: our checksum's threads */
#endif
    j->crc = crc_serial(0, j->p, j->n);
    return NULL;
}

/* crc of (what ``crc`` covers) followed by p[0:n], on up to ``threads`` threads */
static unsigned long crc_parallel(unsigned long crc, const unsigned char *p, size_t n, int threads,
                                  size_t min_block) {
    size_t parts = min_block ? n / min_block : 1;
    if (parts > (size_t)threads) parts = threads;
    if (parts > MAX_THREADS) parts = MAX_THREADS;
    if (parts < 2) return crc_serial(crc, p, n);
    job_t jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS] = {0};
    size_t step = n / parts, off = 0;
    for (size_t i = 0; i < parts; i++) {
        jobs[i].p = p + off;
        jobs[i].n = i == parts - 1 ? n - off : step;
        off += jobs[i].n;
        if (i > 0) started[i] = pthread_create(&tid[i], NULL, crc_job, &jobs[i]) == 0;
    }
    jobs[0].crc = crc_serial(0, jobs[0].p, jobs[0].n);  /* this thread's share (crc_job would rename it) */
    for (size_t i = 1; i < parts; i++) {
        if (started[i]) pthread_join(tid[i], NULL);
        else jobs[i].crc = crc_serial(0, jobs[i].p, jobs[i].n);  /* no thread to be had: this one does it */
    }
    for (size_t i = 0; i < parts; i++) crc = z_combine(crc, jobs[i].crc, (long)jobs[i].n);
    return crc;
}

/* a raw-file chunk: header "<IIQ" (kind, crc32 of the payload, payload bytes), then the n
   parts (any number), with writev; 0 or an errno.  Needs no GIL. */
static int write_parts(int fd, unsigned int kind, const unsigned char *const *p, const size_t *len, int n,
                       int threads, size_t min_block, unsigned long *crc_out) {
    unsigned long crc = z_crc32(0, NULL, 0);
    uint64_t size = 0;
    for (int i = 0; i < n; i++) {
        crc = crc_parallel(crc, p[i], len[i], threads, min_block);
        size += (uint64_t)len[i];
    }
    unsigned char header[16];
    uint32_t k32 = kind, c32 = (uint32_t)crc;
    for (int b = 0; b < 4; b++) { header[b] = (k32 >> (8 * b)) & 0xFF; header[4 + b] = (c32 >> (8 * b)) & 0xFF; }
    for (int b = 0; b < 8; b++) header[8 + b] = (size >> (8 * b)) & 0xFF;
    struct iovec iov[IOV_GROUP];
    int i = -1;  /* -1: the header */
    while (i < n) {  /* any number of parts, IOV_GROUP to a writev */
        int n_iov = 0;
        for (; i < n && n_iov < IOV_GROUP; i++) {
            size_t l = i < 0 ? 16 : len[i];
            if (!l) continue;
            iov[n_iov].iov_base = i < 0 ? (void *)header : (void *)p[i];
            iov[n_iov++].iov_len = l;
        }
        struct iovec *v = iov;
        while (n_iov > 0) {
            ssize_t w = writev(fd, v, n_iov);
            if (w < 0) { if (errno == EINTR) continue; return errno; }
            while (n_iov > 0 && (size_t)w >= v->iov_len) { w -= (ssize_t)v->iov_len; v++; n_iov--; }
            if (n_iov > 0) { v->iov_base = (char *)v->iov_base + w; v->iov_len -= (size_t)w; }
        }
    }
    if (crc_out) *crc_out = crc;
    return 0;
}
"""

# init_zlib(path): the crc32 and crc32_combine of the libz at path (ZlibExtension calls it)
INIT_ZLIB_C = r"""
static PyObject *init_zlib(PyObject *self, PyObject *arg) {
    const char *path = PyUnicode_AsUTF8(arg);
    if (!path) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { PyErr_SetString(PyExc_OSError, dlerror()); return NULL; }
    z_crc32 = (crc_fn)dlsym(h, "crc32");
    z_combine = (combine_fn)dlsym(h, "crc32_combine");
    if (!z_crc32 || !z_combine) { PyErr_SetString(PyExc_OSError, "crc32 or crc32_combine missing"); return NULL; }
    Py_RETURN_NONE;
}

"""

_MODULE_C = r"""
/* write_chunk(fd, kind, parts, threads, min_block) -> crc: write_parts, GIL released */
static PyObject *write_chunk(PyObject *self, PyObject *args) {
    int fd, threads;
    unsigned int kind;
    Py_ssize_t min_block;
    PyObject *parts;
    if (!PyArg_ParseTuple(args, "iIO!in", &fd, &kind, &PyTuple_Type, &parts, &threads, &min_block)) return NULL;
    Py_ssize_t np = PyTuple_GET_SIZE(parts);
    if (np > MAX_PARTS) { PyErr_SetString(PyExc_ValueError, "too many parts"); return NULL; }
    Py_buffer views[MAX_PARTS];
    Py_ssize_t got = 0;
    for (; got < np; got++)
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(parts, got), &views[got], PyBUF_SIMPLE) < 0) break;
    if (got < np) { for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]); return NULL; }
    const unsigned char *p[MAX_PARTS];
    size_t len[MAX_PARTS];
    for (Py_ssize_t i = 0; i < np; i++) { p[i] = (const unsigned char *)views[i].buf; len[i] = (size_t)views[i].len; }
    unsigned long crc = 0;
    int err;
    Py_BEGIN_ALLOW_THREADS
    err = write_parts(fd, kind, p, len, (int)np, threads, (size_t)min_block, &crc);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < np; i++) PyBuffer_Release(&views[i]);
    if (err) { errno = err; return PyErr_SetFromErrno(PyExc_OSError); }
    return PyLong_FromUnsignedLong(crc & 0xFFFFFFFFul);
}

static PyObject *crc32_of(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned long value;
    int threads;
    Py_ssize_t min_block;
    if (!PyArg_ParseTuple(args, "y*kin", &view, &value, &threads, &min_block)) return NULL;
    unsigned long crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc_parallel(value, (const unsigned char *)view.buf, (size_t)view.len, threads, (size_t)min_block);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc & 0xFFFFFFFFul);
}

/* use_folding(flag) -> whether it was on: folding (where the CPU has it) or zlib's crc32 alone */
static PyObject *use_folding(PyObject *self, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    if (crc_fold < 0) crc_fold = folding_wanted();
    int was = crc_fold;
    crc_fold = on && folding_available();
    return PyBool_FromLong(was);
}

static PyMethodDef methods[] = {
    {"use_folding", use_folding, METH_O, "CRC-32 by carry-less folding (True, where the CPU has it) or zlib alone"},
    {"init_zlib", init_zlib, METH_O, "load crc32 and crc32_combine from this zlib"},
    {"write_chunk", write_chunk, METH_VARARGS, "write a raw-file chunk without the GIL"},
    {"crc32", crc32_of, METH_VARARGS, "zlib.crc32 on several threads without the GIL"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proton_lite_native_write", NULL, -1, methods};

PyMODINIT_FUNC PyInit_proton_lite_native_write(void) { return PyModule_Create(&module); }
"""

BLOCK = 256 << 10  # bytes per thread at least (smaller payloads: one thread is as fast)
THREADS = max(1, min(8, os.cpu_count() or 1))

_EXTENSION = ZlibExtension(CHUNK_WRITE_C + INIT_ZLIB_C + _MODULE_C, "proton_lite_native_write", "PROTON_LITE_NATIVE_WRITE")


def module():
    """The compiled extension, or None (RawWriter's Python path writes then)."""
    return _EXTENSION.module()


def error() -> str | None:
    return _EXTENSION.error
