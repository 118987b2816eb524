"""Where a session's added time per call lands on the launching thread (issue 22; GPU needed).

Triton's ``JITFunction.run`` and each binary's launcher (``CompiledKernel._run``) are timed
from outside, and inside a session the profile allocator and the launch-exit hook too, so a
call's added wall time splits into: our two hooks, the rest of the launcher (Triton's and the
driver's launch), the rest of Triton's run, and *outside Triton* (the program's own Python
and torch).  The GPU hosts' plain speed moves by up to 2x between blocks, so blocks come in
pairs, plain and session back to back in alternating order, and each number is the median
of the pairs' differences.  ``--probe`` adds session variants that test two explanations:
the drain's host work skipped (no checksum, file write or zeroing of the pinned buffers:
records are lost, a measurement aid only), the drain's events made with
``CU_EVENT_BLOCKING_SYNC`` (its waits sleep instead of spinning on a core), *one chunk per
block* (256 MiB chunks, 1 GiB of pinned memory: no chunk switch and no drain work while the
block runs, our hooks unchanged), *64 MiB chunks*, *drain held* (chunks switch, but sealed
chunks reach the drain threads only after the block), *GIL-holding enqueue calls* (copies,
memsets, event records and waits through ``ctypes.PyDLL``: fewer turns at the GIL per chunk
for the drain threads), *Python drain threads* (the copier and writer threads a session used
before the C drain, ``runtime/drain_native.py``; the variants that patch those threads use
them too), and *Triton's path only*: the instrumented binaries launched with a profile
allocator that returns one fixed device buffer and no exit hook (what any allocator-based
profiler pays through Triton's launcher before doing anything; records are not kept).
For the C drain: *C drain held* (sealed chunks reach its thread only after the block), *C drain
1 (2) CRC thread(s)*, *C drain no host work* (copied back, not written or zeroed: records are
lost), and *warm pools* (timed after 1,000 calls in the session, its pools grown; also with
32 and 64 MiB chunks).

Workloads: ``launch_loops.py``'s (a 4,096-CTA scope-less add, liger's rms_norm forward) and
``host_scale.py``'s rms_norm forward with autograd on.

Usage (from the repository root): python tests/benchmarks/launch_where.py [--pairs 12] [--probe [--variants A,B]]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "benchmarks"))
import torch  # noqa: E402
from triton.runtime import jit as J  # noqa: E402

import proton_lite  # noqa: E402
from host_scale import liger_cases  # noqa: E402
from launch_loops import voluntary_switches, workloads  # noqa: E402
from proton_lite import compat, native_drain  # noqa: E402
from proton_lite.runtime import buffers, cuda_api, drain, drain_native  # noqa: E402

pc = time.perf_counter_ns
acc = dict(jit=0, launch=0, alloc=0, exit=0)
_run = J.JITFunction.run


def _timed_launcher(inner):
    def launch(*a, **k):
        t = pc()
        try:
            return inner(*a, **k)
        finally:
            acc["launch"] += pc() - t
    launch.inner = inner
    return launch


def _timed_run(self, *a, **k):
    t = pc()
    try:
        kernel = _run(self, *a, **k)
        r = getattr(kernel, "_run", None)
        if r is not None and not hasattr(r, "inner"):
            kernel._run = _timed_launcher(r)  # from this binary's next launch on
        return kernel
    finally:
        acc["jit"] += pc() - t


WARM = {"calls": 20}  # calls before a block is timed ("warm pools" variants raise it for their session)


def block(fn, n: int) -> dict:
    for _ in range(WARM["calls"]):
        fn()
    torch.cuda.synchronize()
    for k in acc:
        acc[k] = 0
    v0, t0, c0 = voluntary_switches(), time.perf_counter(), time.thread_time()
    for _ in range(n):
        fn()
    cpu = time.thread_time() - c0
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / n * 1e6
    per = {k: v / n / 1e3 for k, v in acc.items()}
    return dict(wall=wall, cpu=cpu / n * 1e6, **per, outside=wall - per["jit"], switches=(voluntary_switches() - v0) / n)


_PYTHON_DRAIN = (drain_native, "ENABLED", False)  # the variants that patch the Python drain threads use them


def _no_drain_work():
    def no_write(self, chunk, host_buf, rows=None):
        return None

    def give_unzeroed(self, buf):
        with self._cond:
            self._put((buf.capacity, ), buf)
            self._in_use -= buf.capacity
            self._cond.notify_all()
    return [(drain.Drain, "_write", no_write), (buffers.PinnedPool, "give", give_unzeroed), _PYTHON_DRAIN]


def _blocking_events():
    cu = cuda_api.cu
    flags = cu.CUevent_flags.CU_EVENT_DISABLE_TIMING | cu.CUevent_flags.CU_EVENT_BLOCKING_SYNC
    return [(cuda_api, "event_create", lambda: cuda_api.check(cu.cuEventCreate(flags), "cuEventCreate"))]


def _timed_hooks_block(s, fn, n: int) -> dict:
    """``block`` with the session's allocator and exit hook timed (a wrapper of ~0.3 µs each)."""
    alloc = compat.get_profile_allocator()
    hooks = compat.get_knob("runtime", "launch_exit_hook")
    exit_hook = s._hooks._hooks[1]

    def timed_alloc(size, align, stream):
        t = pc()
        r = alloc(size, align, stream)
        acc["alloc"] += pc() - t
        return r

    def timed_exit(metadata):
        t = pc()
        r = exit_hook(metadata)
        acc["exit"] += pc() - t
        return r
    compat.set_profile_allocator(timed_alloc)
    hooks.remove(exit_hook)
    hooks.add(timed_exit)
    try:
        return block(fn, n)
    finally:
        hooks.remove(timed_exit)
        hooks.add(exit_hook)
        compat.set_profile_allocator(alloc)


TRITON_ONLY = "triton-only"  # a variant, not patches: see _triton_path_block


def _triton_path_block(s, fn, n: int) -> dict:
    """``block`` with the session's hooks replaced by a fixed buffer and no exit hook."""
    scratch = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")  # any launch here fits
    ptr = scratch.data_ptr()
    alloc = compat.get_profile_allocator()
    hooks = compat.get_knob("runtime", "launch_exit_hook")
    exit_hook = s._hooks._hooks[1]
    compat.set_profile_allocator(lambda size, align, stream: ptr)
    hooks.remove(exit_hook)
    try:
        return block(fn, n)
    finally:
        torch.cuda.synchronize()
        hooks.add(exit_hook)
        compat.set_profile_allocator(alloc)


def _chunks(mib: int, copy_every: int | None = None):
    """Chunks of ``mib`` MiB (pinned memory for four), and ``copy_every`` launches at most."""
    from proton_lite.runtime import chunks, collector
    extra = [("options", "copy_every", copy_every)] if copy_every else []
    return [(chunks, "CHUNK_BYTES", mib << 20), (collector, "CHUNK_BYTES", mib << 20),
            ("options", "host_buffer_mb", 4 * mib)] + extra


def _one_chunk():
    return _chunks(256, 1 << 20)


def _warm_pools(mib: int = 16):
    """Chunks of ``mib`` MiB, timed after 1,000 calls in the session: its device pool has
    grown to what the loop keeps in flight (a long session's steady state)."""
    return _chunks(mib) + [(WARM, "calls", 1000)]


def _gil_held_driver():
    """The calls that only enqueue work (copies, memsets, event records and waits) made through
    ``ctypes.PyDLL``, which keeps the GIL, instead of cuda-python, which lets it go in every
    call: a drain thread then takes the GIL about half as often per chunk."""
    import ctypes
    lib = ctypes.PyDLL("libcuda.so.1")
    vp, sz, u32, u8 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_ubyte

    def fn(name, *types):
        f = getattr(lib, name)
        f.argtypes, f.restype = list(types), ctypes.c_int

        def call(*args):
            err = f(*args)
            if err:
                raise cuda_api.CudaError(f"{name} failed: error {err}")
        return call
    memcpy = fn("cuMemcpyDtoHAsync_v2", vp, ctypes.c_uint64, sz, vp)
    memset8 = fn("cuMemsetD8Async", ctypes.c_uint64, u8, sz, vp)
    memset32 = fn("cuMemsetD32Async", ctypes.c_uint64, u32, sz, vp)
    record = fn("cuEventRecord", vp, vp)
    wait = fn("cuStreamWaitEvent", vp, vp, u32)
    return [(cuda_api, "memcpy_dtoh_async", lambda dst, src, size, stream: memcpy(dst, src, size, stream or None)),
            (cuda_api, "memset_d8_async", lambda ptr, value, size, stream: memset8(ptr, value, size, stream or None)),
            (cuda_api, "memset_d32_async", lambda ptr, value, n, stream: memset32(ptr, value, n, stream or None)),
            (cuda_api, "event_record", lambda event, stream: record(int(event), stream or None)),
            (cuda_api, "stream_wait_event", lambda stream, event: wait(stream or None, int(event), 0)), _PYTHON_DRAIN]


_held: list = []  # sealed chunks kept from the drain while a "drain held" block runs


def _drain_held():
    """Chunks switch as usual, but the drain threads get nothing until the block ends (its
    chunks wait on the device, new ones are allocated): the launching thread's own switch
    cost without the drain threads' turns at the GIL."""
    def held_submit(self, item):
        _held.append((self, item))
    return [(drain.Drain, "submit", held_submit), _PYTHON_DRAIN]


def _c_drain_held():
    """``_drain_held`` for the C drain: sealed chunks reach its thread only after the block."""
    def held_submit(self, item):
        _held.append((self, item))
    return [(drain_native.NativeDrain, "submit", held_submit)]


def _c_drain_crc_threads(n: int):
    """The C drain checksumming each chunk on ``n`` threads instead of ``WRITE_THREADS``."""
    return [(native_drain, "WRITE_THREADS", n)]


def _c_drain_no_host_work():
    """The C drain copying each chunk back but writing nothing and leaving its pinned buffer
    unzeroed (records are lost: a measurement aid only)."""
    push = drain_native.NativeDrain._push

    def push_without_host_work(self, job):
        if job.kind == "chunk":
            job.parts, job.zero = (), None
        return push(self, job)
    return [(drain_native.NativeDrain, "_push", push_without_host_work)]


def _release_held() -> None:
    while _held:  # after the patches are taken away: the class's own submit
        owner, item = _held.pop(0)
        type(owner).submit(owner, item)


def session_block(fn, n: int, patches=()) -> dict:
    """One session: started with the variant's options, its patches in place while the block
    runs (and taken away before the session stops)."""
    triton_only = patches == TRITON_ONLY
    patches = () if triton_only else patches
    options = {name: value for obj, name, value in patches if obj == "options"}
    patches = [p for p in patches if p[0] != "options"]
    saved = [(obj, name, obj[name] if isinstance(obj, dict) else getattr(obj, name)) for obj, name, _ in patches]

    def restore():
        for obj, name, value in saved:
            if isinstance(obj, dict):
                obj[name] = value
            else:
                setattr(obj, name, value)
        _release_held()  # before stop, which drains what was submitted

    for obj, name, value in patches:
        if isinstance(obj, dict):
            obj[name] = value
        else:
            setattr(obj, name, value)
    try:
        with proton_lite.start("/tmp/launch_where", quiet=True, decode=False, calibrate=False, **options) as s:
            try:
                r = (_triton_path_block if triton_only else _timed_hooks_block)(s, fn, n)
            finally:
                restore()
        os.remove(s.result.raw_path)
        return r
    finally:
        restore()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--variants", help="with --probe: a comma-separated subset of the probe variants")
    a = ap.parse_args()
    J.JITFunction.run = _timed_run
    variants = {"session": ()}
    if a.probe:
        variants.update({"drain work skipped": _no_drain_work(), "blocking-sync events": _blocking_events(),
                         "one chunk per block": _one_chunk(), "Triton's path only": TRITON_ONLY,
                         "64 MiB chunks": _chunks(64), "drain held": _drain_held(),
                         "GIL-holding enqueue calls": _gil_held_driver(),
                         "Python drain threads": [_PYTHON_DRAIN],
                         "C drain held": _c_drain_held(), "C drain 1 CRC thread": _c_drain_crc_threads(1),
                         "C drain 2 CRC threads": _c_drain_crc_threads(2),
                         "C drain no host work": _c_drain_no_host_work(),
                         "warm pools": _warm_pools(), "warm pools 32 MiB": _warm_pools(32),
                         "warm pools 64 MiB": _warm_pools(64)})
        if a.variants:
            keep = {v.strip() for v in a.variants.split(",")} | {"session"}
            variants = {k: v for k, v in variants.items() if k in keep}
    work = dict(workloads(liger=True))
    cases = {label: call for label, _, call, _ in liger_cases()}
    if cases:
        work["liger rms_norm fwd, autograd"] = (lambda: cases["liger rms_norm 4096x4096 fwd, no sync"](1), 300)
    for name, (fn, n) in work.items():
        n = min(n, 600)
        session_block(fn, 50)  # compiles the instrumented binaries
        plains, runs = [], {v: [] for v in variants}
        for k in range(a.pairs):
            order = ["plain", *variants] if k % 2 == 0 else [*reversed(variants), "plain"]
            for v in order:
                if v == "plain":
                    plains.append(block(fn, n))
                else:
                    runs[v].append(session_block(fn, n, variants[v]))

        def med(rows, key):
            return statistics.median(r[key] for r in rows)
        for v, rows in runs.items():
            def added(key):
                return statistics.median(s[key] - p[key] for p, s in zip(plains, rows))
            hooks = med(rows, "alloc") + med(rows, "exit")
            print(f"{name:30s} {v:20s} plain {med(plains, 'wall'):6.1f} session {med(rows, 'wall'):6.1f} us/call; "
                  f"added (median of {a.pairs} pairs): wall {added('wall'):5.1f}, launching thread's CPU {added('cpu'):5.1f}; "
                  f"our hooks {hooks:4.1f} (allocator {med(rows, 'alloc'):.1f}, exit {med(rows, 'exit'):.1f}), rest of the "
                  f"launcher {added('launch') - hooks:4.1f}, rest of Triton's run {added('jit') - added('launch'):4.1f}, "
                  f"outside Triton {added('outside'):5.1f}; waits for the GIL per call {med(rows, 'switches'):.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
