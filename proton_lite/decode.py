"""Raw buffers -> intervals on one nanosecond axis, vectorized with numpy.

Steps per launch (see docs/design.md, "Decoding" and "Time alignment"):

1. View the buffer as one structured record per CTA (layout in ``proton_lite.layout``).
2. Per SM, fit ``globaltimer = a + b * clock64`` over the (globaltimer, clock64) pairs
   taken at every CTA's start and end on that SM: ``%clock64`` is one counter per SM, so
   the fit spans many CTAs and averages away the 32 ns ticks of ``%globaltimer``.  When
   an SM's pairs do not lie on one line (the clock changed speed) or span too little
   time, each CTA falls back to its own two-point rate, and a CTA too short for that to
   the launch's pooled rate.  Cycles are never converted with a nominal frequency.
3. Unwrap each record's 32-bit clock against its CTA's 64-bit start clock.
4. Pair enter/exit records per recording unit by nesting level, so a lost record leaves
   its partner *unmatched* (counted and reported) instead of being paired wrong.

Speed: launches of one kernel are decoded together (``_decode_batch``: one set of arrays,
fits keyed by (launch, SM)), so a session of many small launches costs no per-launch
Python; records are gathered by count (never over the buffer's full capacity) and paired
level by level without a sort.  Every result is the same as decoding launch by launch.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from proton_lite.clock_axis import align_devices
from proton_lite.decode_assemble import assemble, interval_bounds, write_ctas, write_intervals
from proton_lite.cta_blocks import cta_block_dtype, expand_lifetimes, start_end_gt  # noqa: F401  (public)
from proton_lite import native_decode
from proton_lite.decode_batch import _decode_batch, decode_lifetime_launches
from proton_lite.decode_pool import PoolState, read_prefix
from proton_lite.layout import LAUNCH_PREFIX_BYTES, BufferLayout, read_capacity_word
from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, KernelInfo, Profile
from proton_lite.raw_format import RawCapture, RawFormatError
from proton_lite.stop_threads import stop_threads


def kernel_info(meta: dict, layout: BufferLayout | None = None) -> KernelInfo:
    pl = meta["proton_lite"]
    layout = BufferLayout.from_json(pl["layout"]) if layout is None else layout
    return KernelInfo(name=meta.get("name", pl.get("kernel", "?")), scopes=list(pl["scopes"]),
                      num_warps=layout.num_warps, granularity=layout.granularity, unit_warps=layout.unit_warps,
                      capacity=layout.capacity, meta=pl)


def estimate_tick_ns(values: np.ndarray) -> float:
    """The %globaltimer update period, from the smallest step between distinct readings."""
    d = np.diff(np.sort(values))
    d = d[d != 0]
    return float(d.min()) if d.size else float("nan")


def _check_size(launch, layout: BufferLayout, where: str = "", pool: PoolState | None = None) -> None:
    chunks = pool.used if pool is not None else 0
    if len(launch.buffer) != launch.num_ctas * layout.stride + chunks * layout.chunk_bytes:
        more = f" + {chunks} pool chunks x {layout.chunk_bytes} bytes" if pool is not None else ""
        raise RawFormatError(f"{where}launch {launch.launch_index}: buffer holds {len(launch.buffer)} bytes, "
                             f"expected {launch.num_ctas} CTAs x {layout.stride} bytes{more}")


# Launches of one kernel are decoded together up to this many buffer bytes (they are
# copied into one buffer); a launch at least half this size is decoded alone, in place.
# Small enough that a large capture gives every thread several batches: at 32 MiB the
# 307 MB capture of decode_speed.py made 13 batches for 16 threads, the largest setting the pace.
DECODE_WORKERS: int | None = None  # threads decoding batches at once; None: stop_threads()
BATCH_BYTES = 8 << 20
# Lifetime blocks (32 bytes a CTA, no records) are expanded to headers and each CTA gets ~20
# columns of 8 bytes while its batch decodes: 8 MiB of them held ~40 MiB per thread, and 16
# threads at once 5.8x the capture (4.19 M lifetimes on the H200 host). At most COMPACT_THREADS
# batches of them decode at once, sharing COMPACT_IN_FLIGHT bytes: their ~600 numpy calls a
# batch hold the GIL, and past 8 threads they wait for it (H200 host, 16 cores: 16 threads of
# 1 MiB batches 0.95-1.05 s, 8 of 2 MiB 0.57-0.61 s, the 8 MiB batches on 16 threads before
# 0.58 s at twice the memory; tests/benchmarks/decode_batches.py).
COMPACT_IN_FLIGHT = 16 << 20
COMPACT_THREADS = 8
# Launches with records, shared among the threads the same way: batches of many small launches
# (a kernel's launches, or since the thirty-seventh session several kernels' of one layout) hold
# ~3x their bytes while they decode, 16 of 8 MiB ~0.4 GB (a launch of half a batch or more is
# decoded alone, its records in slices past decode_slices.SLICE_RECORDS).
RECORDS_IN_FLIGHT = 32 << 20
# Since the thirty-sixth session such batches decode in one C call without the GIL
# (decode_batch.decode_lifetime_launches), on every thread; the numpy path, where the
# extension is not built or this is False, keeps the limit above.
LIFETIMES_IN_C = True


def _batches(launches: list, launch_layouts: list, threads: int = 1, scope_counts: list | None = None):
    """Launch indices grouped by layout, in launch order, each group small enough to copy
    (lifetime blocks: their share of COMPACT_IN_FLIGHT among ``threads``, at most
    COMPACT_THREADS); a launch with a pool alone.  Launches are grouped across kernels: nothing
    of a kernel but its layout and its number of scopes (``scope_counts``, a launch's kernel's;
    without it, launches with records are grouped by kernel) decodes them, and a large compiled
    model launches thousands of kernels a few times each (4,096 kernels' 65,536 launches of 64
    CTAs made 4,096 batches of 32 KB, each a call's set-up: the decode 1.1-1.5 s against
    0.7-0.9 s for as many launches of 48 kernels, CPU host)."""
    by_kernel: dict = {}
    same: dict = {}  # (layout, scopes) -> its number (equal ones of several kernels: one number)
    seen: dict = {}  # (id of a layout object, scopes) -> its key: a layout hashed once, not once a launch (65 K: 0.1 s)
    for i, launch in enumerate(launches):
        lay = launch_layouts[i]
        if lay.pool:
            key = (launch.kernel_id, lay.capacity, i)
        elif lay.compact and not lay.capacity or scope_counts is not None:
            scopes = scope_counts[i] if scope_counts is not None else 0
            key = seen.get((id(lay), scopes))
            if key is None:
                key = seen[id(lay), scopes] = ("layout", same.setdefault((lay, scopes), len(same)))
        else:
            key = (launch.kernel_id, lay.capacity, -1)
        by_kernel.setdefault(key, []).append(i)
    out = []
    for idx in by_kernel.values():
        cur, size = [], 0
        limit = min(BATCH_BYTES, max(1 << 20, COMPACT_IN_FLIGHT // max(min(threads, COMPACT_THREADS), 1))) \
            if launch_layouts[idx[0]].compact else min(BATCH_BYTES, max(1 << 20, RECORDS_IN_FLIGHT // max(threads, 1)))
        for i in idx:
            b = len(launches[i].buffer)
            if cur and (size + b > limit or 2 * b >= limit):
                out.append(cur)
                cur, size = [], 0
            cur.append(i)
            size += b
        if cur:
            out.append(cur)
    return out


def _sized_at_launch(launch, layout: BufferLayout, where: str):
    """A launch of a kernel sized at launch: its own layout (capacity from its prefix), the
    launch with the prefix taken off its buffer (layout.py), and its pool's state (None
    without a pool)."""
    pool = read_prefix(launch.buffer, where, launch.launch_index)
    word = int(np.frombuffer(launch.buffer, "<u4", 1)[0])
    capacity = read_capacity_word(word)
    # no tag: the host could not size this launch and left the word 0; the kernel kept no records
    layout = layout.with_capacity(0 if capacity is None else capacity)
    if capacity is None:
        pool = PoolState(0, 0, 0)  # nor a pool
    return layout, replace(launch, buffer=launch.buffer[LAUNCH_PREFIX_BYTES:]), pool if layout.pool else None


def decode(capture: RawCapture, progress=None) -> Profile:
    """Decode a whole raw capture into a Profile (deterministic: same file, same arrays)."""
    kernel_ids = sorted(capture.kernels)
    layouts, kinfo = {}, {}
    for kid in kernel_ids:  # each kernel's layout is parsed once
        layouts[kid] = BufferLayout.from_json(capture.kernels[kid]["proton_lite"]["layout"])
        kinfo[kid] = kernel_info(capture.kernels[kid], layouts[kid])
    index_of = {kid: i for i, kid in enumerate(kernel_ids)}
    where = f"{capture.path}: " if capture.path else ""
    launches_in = list(capture.launches)
    launch_layouts = [layouts[launch.kernel_id] for launch in launches_in]
    pools: list[PoolState | None] = [None] * len(launches_in)
    for i, launch in enumerate(launches_in):  # the first broken launch, in launch order, is the one reported
        if launch_layouts[i].sized_at_launch:
            launch_layouts[i], launches_in[i], pools[i] = _sized_at_launch(launch, launch_layouts[i], where)
        _check_size(launches_in[i], launch_layouts[i], where, pools[i])

    # the timer tick, from all start anchors of the capture (needs several CTAs)
    samples = []
    for launch, layout in zip(launches_in[:64], launch_layouts[:64]):
        samples.extend(start_end_gt(launch.buffer, layout, launch.num_ctas))
    tick = estimate_tick_ns(np.concatenate(samples)) if samples else float("nan")

    max_khz = capture.session.get("sm_clock_max_khz")
    max_rate = max_khz / 1e6 if isinstance(max_khz, (int, float)) and max_khz > 0 else np.inf  # cycles per ns
    threads = DECODE_WORKERS or stop_threads()
    batches = _batches(launches_in, launch_layouts, threads, [len(kinfo[la.kernel_id].scopes) for la in launches_in])

    # the intervals' one array, each launch's room in it from its units' counts: every batch
    # writes its rows there as it is decoded, so no batch's pairs wait for the others
    bounds = interval_bounds(launches_in, launch_layouts, pools)
    first = np.cumsum(bounds) - bounds
    out = np.empty(int(bounds.sum()), INTERVAL_DTYPE)
    launch_ids = np.array([launch.launch_index for launch in launches_in], np.uint32)
    # and the CTAs' (room for every CTA of every launch; a CTA whose header is missing leaves a gap)
    cta_room = np.array([launch.num_ctas for launch in launches_in], np.int64)
    cta_first = np.cumsum(cta_room) - cta_room
    cta_out = np.empty(int(cta_room.sum()), CTA_DTYPE)

    compact_slots = threading.BoundedSemaphore(COMPACT_THREADS)

    lifetimes_in_c = LIFETIMES_IN_C and native_decode.module() is not None

    def decode_one(idx):
        if launch_layouts[idx[0]].compact and not lifetimes_in_c:
            with compact_slots:
                return decode_batch(idx)
        return decode_batch(idx)

    def decode_batch(idx):
        at = np.asarray(idx, np.int64)
        if launch_layouts[idx[0]].compact and lifetimes_in_c:  # lifetime blocks: one call in C per batch
            r = decode_lifetime_launches([launches_in[i] for i in idx], launch_layouts[idx[0]], tick, max_rate, cta_out,
                                         cta_first[at], launch_ids[at], lambda j: decode_batch_numpy([idx[j]]))
            if r is not None:
                return r
        return decode_batch_numpy(idx)

    def decode_batch_numpy(idx):
        kid = launches_in[idx[0]].kernel_id
        at = np.asarray(idx, np.int64)
        r = _decode_batch([launches_in[i] for i in idx], launch_layouts[idx[0]], len(kinfo[kid].scopes), tick,
                          max_rate, pools[idx[0]], sink=(out, first[at], bounds[at], launch_ids[at]), threads=threads)
        write_intervals(r, idx, out, first, bounds, launch_ids)  # where the C steps did not write them
        write_ctas(r, idx, cta_out, cta_first, launch_ids)
        return r

    # batches are independent and numpy releases the GIL in their large array work: several at
    # once on several cores; results are taken in batch order, so the arrays do not depend on it
    workers = min(len(batches), threads)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="proton_lite-decode") if workers > 1 else None
    try:
        return align_devices(assemble(capture, batches, launches_in, pools, kernel_ids, kinfo, index_of, tick,
                                      decode_one, pool, progress, out, first, cta_out, cta_first))
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
