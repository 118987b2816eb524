"""Where a GPU's ``%globaltimer`` stands against the host's clock: one anchor per device.

Records carry ``%globaltimer``, one clock per GPU. Whether two GPUs of one machine share
it, and how it relates to the host's clock (``host_now_ns``: ``CLOCK_MONOTONIC_RAW``, one
for every process of the machine, never stepped or slewed by time synchronisation, unlike
``time.time_ns()``), is measured here rather than assumed: captures of
several ranks, or one process's launches on several GPUs, are put on one axis from these
anchors (``proton_lite/clock_axis.py``).

How: a one-thread kernel (hand-written PTX below) waits in a loop on a request word in
pinned host memory; the host writes request ``i`` and spins until the kernel answers with
``i`` and its ``%globaltimer``. The host clock's reading before the write and after
the answer bound the instant the GPU read its timer, so ``globaltimer - (before + after)/2``
is the offset, within half the round trip (PCIe both ways, about 1-3 us). Of
``ROUNDS`` such pings the one with the shortest round trip is kept. The kernel gives up by
itself after ``TIMEOUT_NS`` without a request, and the host gives up on a GPU that does
not start the kernel within ``START_WAIT_S`` (busy with other work), so a probe never
hangs a program; a failed probe only leaves that device without an anchor.
"""
from __future__ import annotations

import ctypes
import time

from proton_lite.runtime import cuda_api, cuda_graph
from proton_lite.runtime.cuda_api import check, cu

KERNEL_NAME = "proton_lite_clock_probe"
ROUNDS = 48
TIMEOUT_NS = 200_000_000  # the kernel's own limit without a request
START_WAIT_S = 0.2  # the host's limit for the kernel to start
ABORT = 0xFFFFFFFF
READY, REQUEST, ANSWER, TIMER = 0, 4, 8, 16  # byte offsets in the mailbox (the PTX uses them)
MAILBOX_BYTES = 64

PTX = r"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry proton_lite_clock_probe(.param .u64 p_box, .param .u32 p_rounds)
{
    .reg .pred  %p<4>;
    .reg .b32   %r<8>;
    .reg .b64   %rd<8>;

    ld.param.u64        %rd1, [p_box];
    ld.param.u32        %r1, [p_rounds];
    mov.u64             %rd2, %globaltimer;
    mov.u32             %r2, 1;
    st.volatile.global.u32 [%rd1], %r2;          // ready
    membar.sys;
    mov.u32             %r3, 0;                  // the last request answered
WAIT:
    ld.volatile.global.u32 %r4, [%rd1+4];
    setp.ne.u32         %p1, %r4, %r3;
    @%p1 bra            ANSWER;
    mov.u64             %rd3, %globaltimer;
    sub.u64             %rd4, %rd3, %rd2;
    setp.gt.u64         %p2, %rd4, 200000000;    // TIMEOUT_NS without a request: give up
    @%p2 bra            DONE;
    bra.uni             WAIT;
ANSWER:
    setp.eq.u32         %p3, %r4, 0xFFFFFFFF;    // ABORT
    @%p3 bra            DONE;
    mov.u64             %rd5, %globaltimer;
    st.volatile.global.u64 [%rd1+16], %rd5;
    membar.sys;
    st.volatile.global.u32 [%rd1+8], %r4;
    membar.sys;
    mov.u32             %r3, %r4;
    mov.u64             %rd2, %rd5;
    setp.ge.u32         %p3, %r4, %r1;
    @%p3 bra            DONE;
    bra.uni             WAIT;
DONE:
    ret;
}
"""

_KERNEL = cuda_graph.PtxKernel(PTX, KERNEL_NAME)


HOST_CLOCK = "CLOCK_MONOTONIC_RAW" if hasattr(time, "CLOCK_MONOTONIC_RAW") else "CLOCK_MONOTONIC"
_HOST_CLOCK_ID = getattr(time, HOST_CLOCK, None)


def host_now_ns() -> int:
    """The host clock the anchors are taken on (``HOST_CLOCK``)."""
    return time.clock_gettime_ns(_HOST_CLOCK_ID) if _HOST_CLOCK_ID is not None else time.monotonic_ns()


def best_sample(samples: list[tuple[int, int, int]]) -> dict:
    """The anchor from ``(host before, globaltimer, host after)`` pings: the shortest round trip."""
    before, timer, after = min(samples, key=lambda s: s[2] - s[0])
    mid = (before + after) // 2
    trips = sorted(s[2] - s[0] for s in samples)
    return {"host_ns": mid, "globaltimer_ns": timer, "offset_ns": timer - mid,
            "uncertainty_ns": (after - before + 1) // 2, "pings": len(samples),
            "median_round_trip_ns": trips[len(trips) // 2]}


def gpu_id(device: int) -> str | None:
    """The GPU's UUID: device numbers differ between processes (``CUDA_VISIBLE_DEVICES``),
    the UUID tells whether two captures ran on one GPU, and so on one timer."""
    try:
        uuid = check(cu.cuDeviceGetUuid(cu.CUdevice(device)), "cuDeviceGetUuid")
        return bytes(uuid.bytes).hex()
    except Exception:
        return None


def probe(device: int, rounds: int = ROUNDS) -> dict:
    """One anchor for ``device`` (its context must be current on this thread): a dict with
    ``device``, ``host_ns`` (``host_now_ns()``), ``globaltimer_ns``, ``offset_ns``
    (globaltimer minus host), ``uncertainty_ns`` (half the best round trip), or with
    ``error`` where the GPU could not be asked."""
    _sweep(device)
    box = stream = None
    answered = False
    try:
        box, box_on_gpu = cuda_api.host_alloc_mapped(MAILBOX_BYTES)
        cuda_api.host_memset(box, 0, MAILBOX_BYTES)
        ready = ctypes.c_uint32.from_address(box + READY)
        request = ctypes.c_uint32.from_address(box + REQUEST)
        answer = ctypes.c_uint32.from_address(box + ANSWER)
        timer = ctypes.c_uint64.from_address(box + TIMER)
        stream = cuda_api.stream_create()
        check(cu.cuLaunchKernel(_KERNEL.function(device), 1, 1, 1, 1, 1, 1, 0, cu.CUstream(stream),
                                ((box_on_gpu, rounds), (ctypes.c_uint64, ctypes.c_uint32)), 0), "cuLaunchKernel")
        limit = time.perf_counter() + START_WAIT_S
        while ready.value != 1:
            if time.perf_counter() > limit:
                request.value = ABORT
                return {"device": device, "error": f"the probe kernel did not start within {START_WAIT_S} s "
                                                   "(the GPU was busy)"}
        samples = []
        for i in range(1, rounds + 1):
            before = host_now_ns()
            request.value = i
            limit = time.perf_counter() + 0.05
            while answer.value != i:
                if time.perf_counter() > limit:
                    request.value = ABORT
                    return {"device": device, "error": f"the probe kernel stopped answering at ping {i}"}
            after = host_now_ns()
            samples.append((before, int(timer.value), after))
        answered = True  # the kernel has returned after the last answer
        return dict(device=device, gpu=gpu_id(device), host_clock=HOST_CLOCK, **best_sample(samples))
    except Exception as e:  # no anchor for this device: merges fall back on the timers themselves
        return {"device": device, "error": f"{type(e).__name__}: {e}"}
    finally:
        _release(device, stream, box, wait=answered)


# (device, stream, mailbox) of probes given up on before their kernel ran: the kernel still
# reads the mailbox when it starts (it sees ABORT and returns), so they are freed only once
# their stream is done, at a later probe, never by waiting for the GPU's other work
_unfinished: list[tuple[int, int | None, int | None]] = []


def _release(device: int, stream, box, wait: bool) -> None:
    try:
        if stream is not None and not wait and not cuda_api.stream_done(stream):
            _unfinished.append((device, stream, box))
            return
        if stream is not None:
            cuda_api.stream_synchronize(stream)  # done or about to be: the kernel returned
            cuda_api.stream_destroy(stream)
        if box is not None:
            cuda_api.host_free(box)
    except Exception:  # noqa: BLE001  a context gone (fault, exit): the driver frees them
        pass


def _sweep(device: int) -> None:
    """Free what earlier probes of ``device`` (its context current) left to their kernels."""
    for entry in [e for e in _unfinished if e[0] == device]:
        _unfinished.remove(entry)
        _release(*entry, wait=False)


def probe_devices(contexts: dict, when: str) -> list[dict]:
    """An anchor per device of ``contexts`` (device -> context), each probed in its context
    and marked ``when`` (start, stop); the calling thread's context and capture mode are put
    back (a capture on another stream goes on: the probe runs beside it, on a stream of its own)."""
    if not contexts:
        return []
    anchors = []
    try:
        before = cuda_api.current_context()
        with cuda_api.relaxed_capture():
            try:
                for device, ctx in sorted(contexts.items()):
                    cuda_api.set_context(ctx)
                    anchors.append(dict(probe(device), when=when))
            finally:
                if before is not None:
                    cuda_api.set_context(before)
    except Exception as e:  # no driver, or a context gone: the session goes on without anchors
        anchors.append({"device": -1, "when": when, "error": f"{type(e).__name__}: {e}"})
    return anchors


def active_contexts() -> dict:
    """The primary context of every GPU that this process already uses (PyTorch and Triton
    use primary contexts), without creating one; empty where the driver is not started."""
    out = {}
    try:
        count = int(check(cu.cuDeviceGetCount(), "cuDeviceGetCount"))
        for device in range(count):
            _, active = check(cu.cuDevicePrimaryCtxGetState(cu.CUdevice(device)), "cuDevicePrimaryCtxGetState")
            if active:
                out[device] = check(cu.cuDevicePrimaryCtxRetain(cu.CUdevice(device)), "cuDevicePrimaryCtxRetain")
                check(cu.cuDevicePrimaryCtxRelease(cu.CUdevice(device)), "cuDevicePrimaryCtxRelease")  # still active
    except Exception:
        return {}
    return out
