"""The drain's thread in C: waits for each sealed chunk's copy and writes it, never taking the GIL.

Why: measured on the H100 machine (``docs/design.md`` section 4, "Per-launch breakdown"), the
Python copier and writer threads cost a program that launches thousands of CTAs per call more
than everything else a session adds.  Each sealed chunk woke both threads, and each of their
steps (a queue hand-over, a driver call, a numpy call, the write) gave the GIL away and took it
back; the launching thread then waited for the GIL about once every ten calls.  With the drain's
work held back until a block of calls ended, liger-kernel's rms_norm forward gained 17.8 µs per
call instead of 36.6.  This thread does the same work with no Python at all: a launching
thread that seals a chunk takes a pinned buffer and an event and pushes a job; this thread
enqueues the chunk's copy, its clearing and the event on the drain's stream (and those of the
jobs queued behind it, so that their copies run while it writes), waits for the event, writes
the chunk (checksummed on several threads, ``native_write``), zeroes the pinned buffer for its
next copy, and puts the job on a done list that launching threads read when they seal the
next chunk, so no Python thread is woken per chunk.  (Enqueueing the copy on the launching
thread instead cost it 87 µs per chunk on the H100 machine, cuda-python's four calls.)

The driver functions come as addresses (``open``'s ``table``): libcuda's own in a session, a
simulated driver's in the CPU tests (``tests/sim_driver.py``), which therefore run this code.
Jobs run in the order pushed; after a job fails (a CUDA error: a kernel fault; or a write error)
every later job comes back unrun (``SKIPPED``), for the Python side to keep what it can in order.
"""
from __future__ import annotations

from proton_lite.native_build import ZlibExtension
from proton_lite.native_write import BLOCK, CHUNK_WRITE_C, INIT_ZLIB_C, THREADS

SKIPPED = -100000  # status of a job not run because an earlier one failed
NOT_LOADED = -100001  # a driver function the job needed was not given
NO_WRITE = 0xFFFFFFFF  # a job's kind when it only waits for its event (a chunk without launches)

_DRAIN_C = r"""
#include <stdlib.h>
#include <time.h>

typedef int (*ctx_set_fn)(uint64_t);
typedef int (*event_sync_fn)(uint64_t);
typedef int (*memcpy_fn)(uint64_t, uint64_t, size_t, uint64_t);
typedef int (*memset_fn)(uint64_t, unsigned char, size_t, uint64_t);
typedef int (*stream_sync_fn)(uint64_t);
typedef int (*capture_mode_fn)(int *);
typedef int (*wait_event_fn)(uint64_t, uint64_t, unsigned int);
typedef int (*record_fn)(uint64_t, uint64_t);

#if PY_VERSION_HEX >= 0x030D0000
#define IS_FINALIZING() Py_IsFinalizing()
#else
#define IS_FINALIZING() _Py_IsFinalizing()
#endif

#define AHEAD 16  /* queued jobs whose copies are enqueued before a job is written */
#define SKIPPED (-100000)
#define NOT_LOADED (-100001)
#define NO_WRITE 0xFFFFFFFFu  /* a job whose event is waited for, with nothing to write */

typedef struct job {
    struct job *next;
    long long id;
    unsigned int kind;  /* the raw chunk's kind; 0: stop the thread */
    uint64_t ctx, event;
    int n;  /* parts; room for one more (a pooled launch's chunks) */
    const unsigned char **p;
    size_t *len;
    Py_buffer *views;  /* parts given as Python objects: released in collect, with the GIL */
    int n_views;
    /* the chunk's copy, enqueued by this thread (``enqueue``): on ``stream``, after
       ``wait_event``, copy_bytes from src to dst, then clear_bytes at src cleared, then
       ``event`` recorded; else ``event`` follows a copy a launching thread enqueued */
    int enqueue, enqueued, early_error;
    uint64_t wait_event, dst, src, copy_bytes, clear_bytes, copy_stream;
    int pooled, head;  /* pooled: parts[head] is the copied prefix whose bytes 12..16 count the chunks taken */
    uint64_t dev, blocks, chunk_bytes, stream;
    uint32_t chunks;
    unsigned char *patch;  /* where the launch's buffer_bytes (u64, little-endian) is written */
    unsigned char *zero;
    size_t zero_len;
    int status;
    uint32_t taken;
    uint64_t extra;
    uint64_t sync_ns, write_ns;
} job;

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    job *head, *tail, *done_head, *done_tail;
    int fd, threads, failed, running;
    size_t min_block;
    uint64_t ctx;
    ctx_set_fn ctx_set;
    event_sync_fn event_sync;
    memcpy_fn memcpy_async;
    memset_fn memset_async;
    stream_sync_fn stream_sync;
    capture_mode_fn capture_mode;
    wait_event_fn wait_event;
    record_fn record;
    pthread_t tid;
} drain_t;

static void free_job(job *j);

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* the copy of the chunks a pooled launch's units took, then their clearing; 0 or an error */
static int copy_pool(drain_t *d, job *j, unsigned char **extra) {
    const unsigned char *c = j->p[j->head] + 12;
    j->taken = (uint32_t)c[0] | ((uint32_t)c[1] << 8) | ((uint32_t)c[2] << 16) | ((uint32_t)c[3] << 24);
    uint64_t nbytes = (uint64_t)(j->taken < j->chunks ? j->taken : j->chunks) * j->chunk_bytes;
    if (nbytes) {
        if (!d->memcpy_async || !d->memset_async || !d->stream_sync) return NOT_LOADED;
        *extra = (unsigned char *)malloc(nbytes);
        if (!*extra) return -ENOMEM;
        int e = d->memcpy_async((uint64_t)(uintptr_t)*extra, j->dev + j->blocks, nbytes, j->stream);
        if (!e) e = d->memset_async(j->dev + j->blocks, 0, nbytes, j->stream);
        if (!e) e = d->stream_sync(j->stream);
        if (e) return e;
        j->p[j->n] = *extra;
        j->len[j->n++] = nbytes;
    }
    j->extra = nbytes;
    uint64_t total = j->blocks + nbytes;
    for (int b = 0; b < 8; b++) j->patch[b] = (total >> (8 * b)) & 0xFF;
    return 0;
}

static int use_ctx(drain_t *d, uint64_t ctx) {
    if (!ctx || ctx == d->ctx) return 0;
    if (!d->ctx_set) return NOT_LOADED;
    int e = d->ctx_set(ctx);
    if (!e) d->ctx = ctx;
    return e;
}

/* the job's copy and clearing enqueued on its stream (once); an error is kept for its turn */
static void enqueue_copy(drain_t *d, job *j) {
    if (!j->enqueue || j->enqueued) return;
    j->enqueued = 1;
    int e = use_ctx(d, j->ctx);
    if (!e && (!d->wait_event || !d->record || !d->memcpy_async || !d->memset_async)) e = NOT_LOADED;
    if (!e) e = d->wait_event(j->copy_stream, j->wait_event, 0);
    if (!e && j->copy_bytes) e = d->memcpy_async(j->dst, j->src, j->copy_bytes, j->copy_stream);
    if (!e) e = d->memset_async(j->src, 0, j->clear_bytes, j->copy_stream);
    if (!e) e = d->record(j->event, j->copy_stream);
    j->early_error = e;
}

static int run_job(drain_t *d, job *j) {
    int e;
    enqueue_copy(d, j);
    if (j->early_error) return j->early_error;
    if ((e = use_ctx(d, j->ctx))) return e;
    uint64_t t0 = now_ns();
    if (j->event) {
        if (!d->event_sync) return NOT_LOADED;
        if ((e = d->event_sync(j->event))) return e;
    }
    unsigned char *extra = NULL;
    if (j->pooled) e = copy_pool(d, j, &extra);
    uint64_t t1 = now_ns();
    j->sync_ns = t1 - t0;
    if (!e && j->kind != NO_WRITE) {
        int w = write_parts(d->fd, j->kind, j->p, j->len, j->n, d->threads, d->min_block, NULL);
        e = w ? -w : 0;
    }
    if (!e && j->zero) memset(j->zero, 0, j->zero_len);  /* zero for the pinned buffer's next copy */
    free(extra);
    j->write_ns = now_ns() - t1;
    return e;
}

static void *drain_main(void *arg) {
    drain_t *d = (drain_t *)arg;
#ifdef __linux__
    pthread_setname_np(pthread_self(), "pl-drain");  /* what top and /proc show */
#endif
    if (d->capture_mode) { int mode = 2; d->capture_mode(&mode); }  /* relaxed: a capture elsewhere forbids nothing here */
    for (;;) {
        pthread_mutex_lock(&d->mu);
        while (!d->head) pthread_cond_wait(&d->work, &d->mu);
        job *j = d->head;
        d->head = j->next;
        if (!d->head) d->tail = NULL;
        int failed = d->failed;
        pthread_mutex_unlock(&d->mu);
        if (j->kind == 0) { free_job(j); return NULL; }
        if (!failed) {
            /* the copies of the jobs queued behind this one first: they run on the GPU while
               this one is written (a queued job is freed only after this thread ran it: the
               pointers stay valid) */
            job *ahead[AHEAD];
            int n_ahead = 0;
            pthread_mutex_lock(&d->mu);
            for (job *q = d->head; q && n_ahead < AHEAD; q = q->next)
                if (q->kind && q->enqueue && !q->enqueued) ahead[n_ahead++] = q;
            pthread_mutex_unlock(&d->mu);
            enqueue_copy(d, j);
            for (int i = 0; i < n_ahead; i++) enqueue_copy(d, ahead[i]);
        }
        j->status = failed ? SKIPPED : run_job(d, j);
        j->next = NULL;
        pthread_mutex_lock(&d->mu);
        if (j->status && j->status != SKIPPED) d->failed = 1;
        if (d->done_tail) d->done_tail->next = j; else d->done_head = j;
        d->done_tail = j;
        pthread_cond_broadcast(&d->done_cv);
        pthread_mutex_unlock(&d->mu);
    }
}

static void append(drain_t *d, job *j) {
    pthread_mutex_lock(&d->mu);
    if (d->tail) d->tail->next = j; else d->head = j;
    d->tail = j;
    pthread_cond_signal(&d->work);
    pthread_mutex_unlock(&d->mu);
}

static void stop_thread(drain_t *d) {
    if (!d->running) return;
    job *j = (job *)calloc(1, sizeof(job));
    if (!j) return;  /* cannot stop it: left running (the process is out of memory) */
    append(d, j);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(d->tid, NULL);
    Py_END_ALLOW_THREADS
    d->running = 0;
}

/* with the GIL held, unless the job holds no views (the stop job) */
static void free_job(job *j) {
    for (int i = 0; i < j->n_views; i++) PyBuffer_Release(&j->views[i]);
    free(j->views);
    free(j->p);
    free(j->len);
    free(j);
}

static void free_list(job *j) {
    while (j) { job *n = j->next; free_job(j); j = n; }
}

static void capsule_free(PyObject *cap) {
    drain_t *d = (drain_t *)PyCapsule_GetPointer(cap, "drain");
    if (!d) return;
    if (d->running && IS_FINALIZING()) return;  /* a session never stopped: the process ends it */
    stop_thread(d);
    free_list(d->head);
    free_list(d->done_head);
    free(d);
}

static drain_t *get(PyObject *cap) { return (drain_t *)PyCapsule_GetPointer(cap, "drain"); }

/* open(fd, threads, min_block, (ctx_set, event_sync, memcpy_async, memset_async, stream_sync,
   capture_mode, stream_wait_event, event_record)) -> handle: the driver functions as
   addresses, 0 where absent */
static PyObject *drain_open(PyObject *self, PyObject *args) {
    int fd, threads;
    Py_ssize_t min_block;
    unsigned long long f[8];
    if (!PyArg_ParseTuple(args, "iin(KKKKKKKK)", &fd, &threads, &min_block, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5],
                          &f[6], &f[7]))
        return NULL;
    drain_t *d = (drain_t *)calloc(1, sizeof(drain_t));
    if (!d) return PyErr_NoMemory();
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->work, NULL);
    pthread_cond_init(&d->done_cv, NULL);
    d->fd = fd; d->threads = threads; d->min_block = (size_t)min_block;
    d->ctx_set = (ctx_set_fn)(uintptr_t)f[0];
    d->event_sync = (event_sync_fn)(uintptr_t)f[1];
    d->memcpy_async = (memcpy_fn)(uintptr_t)f[2];
    d->memset_async = (memset_fn)(uintptr_t)f[3];
    d->stream_sync = (stream_sync_fn)(uintptr_t)f[4];
    d->capture_mode = (capture_mode_fn)(uintptr_t)f[5];
    d->wait_event = (wait_event_fn)(uintptr_t)f[6];
    d->record = (record_fn)(uintptr_t)f[7];
    if (pthread_create(&d->tid, NULL, drain_main, d)) { free(d); return PyErr_SetFromErrno(PyExc_OSError); }
    d->running = 1;
    PyObject *cap = PyCapsule_New(d, "drain", capsule_free);
    if (!cap) { stop_thread(d); free(d); }
    return cap;
}

/* push(handle, id, kind, ctx, event, parts, pooled, zero, copy): parts a tuple, each an
   object with the buffer protocol (held until the job is collected) or (address, length);
   pooled None or (head part, device address, blocks, chunks, chunk bytes, stream, patch part,
   offset of buffer_bytes in it; that part must be writable); zero None or (address, length); copy None or (stream, event to wait for,
   host address, device address, bytes to copy, bytes to clear): enqueued here, then ``event``
   recorded after it.  The caller keeps every address valid until the job comes back from
   collect. */
static PyObject *drain_push(PyObject *self, PyObject *args) {
    PyObject *cap, *parts, *pooled, *zero, *copy;
    long long id;
    unsigned int kind;
    unsigned long long ctx, event;
    if (!PyArg_ParseTuple(args, "OLIKKO!OOO", &cap, &id, &kind, &ctx, &event, &PyTuple_Type, &parts, &pooled, &zero,
                          &copy))
        return NULL;
    drain_t *d = get(cap);
    if (!d) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(parts);
    if (kind == 0) { PyErr_SetString(PyExc_ValueError, "kind 0 is reserved"); return NULL; }
    job *j = (job *)calloc(1, sizeof(job));
    if (j) {
        j->p = (const unsigned char **)calloc(n + 1, sizeof(*j->p));
        j->len = (size_t *)calloc(n + 1, sizeof(size_t));
        j->views = (Py_buffer *)calloc(n + 1, sizeof(Py_buffer));
    }
    if (!j || !j->p || !j->len || !j->views) { if (j) free_job(j); return PyErr_NoMemory(); }
    j->id = id; j->kind = kind; j->ctx = ctx; j->event = event; j->n = (int)n;
    int patch_part = -1;
    unsigned long long patch_at = 0;
    if (pooled != Py_None) {
        unsigned long long dev, blocks, chunk_bytes, stream;
        unsigned int chunks;
        if (!PyArg_ParseTuple(pooled, "iKKIKKiK", &j->head, &dev, &blocks, &chunks, &chunk_bytes, &stream,
                              &patch_part, &patch_at)) {
            free_job(j); return NULL;
        }
        j->pooled = 1; j->dev = dev; j->blocks = blocks; j->chunks = chunks; j->chunk_bytes = chunk_bytes;
        j->stream = stream;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *part = PyTuple_GET_ITEM(parts, i);
        if (PyTuple_Check(part)) {
            unsigned long long ptr, len;
            if (!PyArg_ParseTuple(part, "KK", &ptr, &len)) { free_job(j); return NULL; }
            j->p[i] = (const unsigned char *)(uintptr_t)ptr;
            j->len[i] = (size_t)len;
            continue;
        }
        Py_buffer *v = &j->views[j->n_views];
        int flags = i == patch_part ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS : PyBUF_C_CONTIGUOUS;
        if (PyObject_GetBuffer(part, v, flags) < 0) { free_job(j); return NULL; }
        j->n_views++;
        j->p[i] = (const unsigned char *)v->buf;
        j->len[i] = (size_t)v->len;
    }
    if (j->pooled) {
        if (j->head < 0 || j->head >= j->n || j->len[j->head] < 16) {
            free_job(j); PyErr_SetString(PyExc_ValueError, "pooled: the head part must hold at least 16 bytes"); return NULL;
        }
        if (patch_part < 0 || patch_part >= j->n || PyTuple_Check(PyTuple_GET_ITEM(parts, patch_part)) ||
            patch_at + 8 > j->len[patch_part]) {
            free_job(j); PyErr_SetString(PyExc_ValueError, "pooled: the patch must lie in a writable object part"); return NULL;
        }
        j->patch = (unsigned char *)j->p[patch_part] + patch_at;
    }
    if (zero != Py_None) {
        unsigned long long ptr, len;
        if (!PyArg_ParseTuple(zero, "KK", &ptr, &len)) { free_job(j); return NULL; }
        j->zero = (unsigned char *)(uintptr_t)ptr; j->zero_len = (size_t)len;
    }
    if (copy != Py_None) {
        unsigned long long stream, wait, dst, src, nbytes, clear;
        if (!PyArg_ParseTuple(copy, "KKKKKK", &stream, &wait, &dst, &src, &nbytes, &clear)) { free_job(j); return NULL; }
        j->enqueue = 1; j->copy_stream = stream; j->wait_event = wait; j->dst = dst; j->src = src;
        j->copy_bytes = nbytes; j->clear_bytes = clear;
    }
    append(d, j);
    Py_RETURN_NONE;
}

/* collect(handle) -> [(id, status, taken, extra bytes, sync ns, write ns)] of the jobs done */
static PyObject *drain_collect(PyObject *self, PyObject *cap) {
    drain_t *d = get(cap);
    if (!d) return NULL;
    pthread_mutex_lock(&d->mu);
    job *j = d->done_head;
    d->done_head = d->done_tail = NULL;
    pthread_mutex_unlock(&d->mu);
    PyObject *out = PyList_New(0);
    for (; j; ) {
        job *next = j->next;
        if (out) {
            PyObject *t = Py_BuildValue("(LiIKKK)", j->id, j->status, j->taken, (unsigned long long)j->extra,
                                        (unsigned long long)j->sync_ns, (unsigned long long)j->write_ns);
            if (!t || PyList_Append(out, t) < 0) { Py_CLEAR(out); }
            Py_XDECREF(t);
        }
        free_job(j);
        j = next;
    }
    return out;
}

/* wait(handle, seconds) -> whether a job is done (GIL released while waiting) */
static PyObject *drain_wait(PyObject *self, PyObject *args) {
    PyObject *cap;
    double seconds;
    if (!PyArg_ParseTuple(args, "Od", &cap, &seconds)) return NULL;
    drain_t *d = get(cap);
    if (!d) return NULL;
    int ready;
    Py_BEGIN_ALLOW_THREADS
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long long ns = (long long)(seconds * 1e9) + until.tv_nsec;
    until.tv_sec += ns / 1000000000ll;
    until.tv_nsec = ns % 1000000000ll;
    pthread_mutex_lock(&d->mu);
    while (!d->done_head) if (pthread_cond_timedwait(&d->done_cv, &d->mu, &until)) break;
    ready = d->done_head != NULL;
    pthread_mutex_unlock(&d->mu);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ready);
}

/* close(handle): run every job pushed, then end the thread */
static PyObject *drain_close(PyObject *self, PyObject *cap) {
    drain_t *d = get(cap);
    if (!d) return NULL;
    stop_thread(d);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init_zlib", init_zlib, METH_O, "load crc32 and crc32_combine from this zlib"},
    {"open", drain_open, METH_VARARGS, "start a drain thread writing to fd"},
    {"push", drain_push, METH_VARARGS, "queue a job"},
    {"collect", drain_collect, METH_O, "the jobs done since the last collect"},
    {"wait", drain_wait, METH_VARARGS, "wait for a job to be done"},
    {"close", drain_close, METH_O, "finish the queued jobs and end the thread"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "proton_lite_native_drain", NULL, -1, methods};

PyMODINIT_FUNC PyInit_proton_lite_native_drain(void) { return PyModule_Create(&module); }
"""

_EXTENSION = ZlibExtension(CHUNK_WRITE_C + INIT_ZLIB_C + _DRAIN_C, "proton_lite_native_drain",
                           "PROTON_LITE_NATIVE_DRAIN")
WRITE_THREADS, WRITE_BLOCK = THREADS, BLOCK


def module():
    """The compiled extension, or None (the Python copier and writer threads drain then)."""
    return _EXTENSION.module()


def error() -> str | None:
    return _EXTENSION.error
