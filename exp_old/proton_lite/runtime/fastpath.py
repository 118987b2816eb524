"""The collector's per-launch hooks in C, for the common case; Python for everything else.

Profiled on the H100 machine, the Python of our two hooks (the profile allocator and the
launch-exit hook) was 8 to 11 µs per launch, most of the host time a session adds.  This
module compiles, with Triton's own ``compile_module_from_src`` (what Triton builds its
launchers with, so a C compiler and Python's headers are there wherever Triton runs), a
small extension whose ``allocate`` and ``on_launch_exit`` do what ``Collector.allocate`` /
``Collector.on_launch_exit`` do when nothing special happens: the launch's stream has an
open chunk with room, the stream was not idle, the kernel is known, no sizing at launch, no
autotuner trial, no exact sizing, the chunk is not filled by this launch, nobody else in the
collector's lock.  In every other case they call the Python methods, which stay the
reference.

The state they change lives in C while they serve launches: each stream's open chunk (its
fill level, launches in flight, last launch time), the launch counters, each thread's launch
between allocator and exit hook, and the kernels already seen.  A first version read and
wrote the same Python objects instead (attributes, dicts, a thread-local); in a real program,
whose own Python pushes those objects out of the core's caches between launches, that took
2-5 µs per hook (``tests/benchmarks/fastpath_cpu.py --between 16``: 2.3 and 2.6 µs, now 0.21
and 0.23).  ``flush`` writes it all back; ``Collector._sync`` calls it right after taking the
collector's lock, which every Python method that reads or changes that state holds, and the
C hooks hold nothing new while another thread has the lock.  Each launch's BATCH entry is
packed into its chunk's ``entries`` as it ends, the only record of it until the chunk is
sealed.

They also switch a full chunk to the next of the chunks the Python switch opened ahead for
its stream (``chunks.SPARE_CHUNKS``): the full chunk's event is recorded there
(``cuEventRecord``, the C drain's pointer) and the chunk waits in C until Python takes the
state back and hands it to the drain (``Collector._sync``).  A switch in Python ran about 110
Python calls on caches the program had emptied; now one Python switch in five does, for five
chunks at once.

The driver queries (capture status, device) are called through function pointers:
``libcuda``'s own in a session, stand-ins in the CPU tests.  The hooks never release the GIL
themselves, but another thread can run whenever a call may run Python code (a call into
Python, or the garbage collector that a new tuple can start): so they make such calls first,
then check the collector's lock, and from there on only read and change what they hold; and a
thread's entry is never taken over while that thread is inside a hook (a version without that
rule lost about one launch in 1,800 under six threads, ``test_collector.py``).

``PROTON_LITE_FASTPATH=0`` turns it off; if the extension cannot be built, sessions run the
Python hooks (the session records which in its metadata).
"""
from __future__ import annotations

import ctypes
import os

from proton_lite import compat
from proton_lite.runtime.fastpath_source import SOURCE as _SOURCE

_module = None
_build_error: str | None = None
C_SWITCH_MIN_COPY_EVERY = 16


def module():
    """The compiled extension, or None (built once per process; Triton caches the binary)."""
    global _module, _build_error
    if _module is None and _build_error is None:
        try:
            _module = compat.compile_module_from_src()(_SOURCE, "proton_lite_fastpath")
        except Exception as e:  # no compiler, no headers: the Python hooks do the same work
            _build_error = f"{type(e).__name__}: {e}"[:300]
    return _module


def driver_queries():
    """Addresses of libcuda's cuStreamIsCapturing and cuCtxGetDevice, or None without a driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return (ctypes.cast(lib.cuStreamIsCapturing, ctypes.c_void_p).value,
            ctypes.cast(lib.cuCtxGetDevice, ctypes.c_void_p).value)


def hooks_for(collector, queries=None):
    """The C hooks for ``collector`` (an object whose ``allocate`` / ``on_launch_exit`` it
    calls), or None: turned off, not built, no driver, or ``sizing="exact"`` (its exit hook
    must wait for each launch: the Python one does)."""
    from proton_lite.runtime import collector as collector_module
    if not enabled() or collector.resizer is not None:
        return None
    mod = module()
    queries = queries or driver_queries()
    if mod is None or queries is None:
        return None
    record = _event_record(collector)
    fast = mod.FastPath(collector, collector._tls, collector._lock, collector._open, collector._last_slice_ns,
                        collector._kernels, collector_module._AUTOTUNED, collector_module.LaunchInfo,
                        collector.allocate, collector.on_launch_exit, queries[0], queries[1], collector.idle_ns,
                        collector.copy_every, bool(collector.skip_autotune), collector._spares,
                        collector._c_sealed, record)
    from proton_lite.runtime import trials
    fast.set_trials(trials)  # launches of autotuned functions: the frame check in C
    collector._fast = fast  # Collector._sync writes back what it holds whenever Python takes the lock
    collector._c_switch = bool(record)
    return fast


def _event_record(collector) -> int:
    """The address of cuEventRecord for the C chunk switch, from the C drain's driver table, or
    0: no switch in C where each launch or a few are copied right after them (``copy_every``
    below ``C_SWITCH_MIN_COPY_EVERY``: the Python seal enqueues their copies on the launch's
    stream), with exact buffers (one launch per allocation, for compute-sanitizer), or
    without the C drain."""
    from proton_lite.runtime import cuda_api
    table = getattr(collector._drain, "_table", None)
    if table is None or collector.copy_every < C_SWITCH_MIN_COPY_EVERY or collector.device_pool.exact or \
            not collector.spare_chunks:
        return 0
    return table[cuda_api._DRAIN_FUNCTIONS.index("cuEventRecord")]


def enabled() -> bool:
    return os.environ.get("PROTON_LITE_FASTPATH", "1") not in ("0", "")


def build_error() -> str | None:
    return _build_error
