"""Which buffer layout a kernel gets (``choose_layout``): its capacity (exact, per launch, a
launch pool, or a fixed one), where its records are staged (shared memory, global memory, or
shared memory copied in blocks) and its unit (warp, warp group, CTA)."""
from __future__ import annotations

from dataclasses import replace

from proton_lite.layout import DEFAULT_CHUNK_SLOTS, BufferLayout
from proton_lite.passes import ptx_staging
from proton_lite.passes.config import CALIBRATION_KERNEL, InstrumentConfig
from proton_lite.passes.pool import PoolPlan, chunk_slots_for
from proton_lite.passes.ptx_scan import InstrumentationError, PtxScan
from proton_lite.passes.ptx_staging import staging_fits


def choose_layout(info: PtxScan, config: InstrumentConfig, num_warps: int, triton_shared: int,
                  bound=None, pool_plan: PoolPlan | None = None, sparse_loops=lambda: True) -> BufferLayout:
    """Size the buffer from the code: exact for straight-line scopes and for loops whose trip
    counts are compile-time constants, per launch for loops bounded by launch arguments and
    program ids (``bound``: the TTIR's record bound, ``record_bound_expr``), and with a
    launch-wide pool for loops bounded at run time (``pool_plan``, passes/pool.py); else
    (an explicit capacity, circular mode, control flow the pool cannot bound) the capacity.
    ``sparse_loops``: asked only for a kernel sized per launch (it scans the PTX)."""
    if config.granularity == "warpgroup" and num_warps % 4:
        raise InstrumentationError(f"proton_lite: granularity='warpgroup' needs num_warps divisible by 4 "
                                   f"(kernel {info.kernel} has {num_warps}); use 'warp' or 'cta'")
    if not info.sites and config.capacity is None:
        # no scope at all: only the CTA's and units' lifetimes are written, at entry and exit;
        # nothing to stage, no record slot, no sink, no ring to wrap (design.md, "The fixed cost")
        return BufferLayout(config.granularity, num_warps, 0, "global", "clamp")
    if config.capacity is not None and info.kernel != CALIBRATION_KERNEL:  # the record-cost launch keeps its size
        capacity = config.capacity
    elif info.loop_sites:
        if bound is not None and bound[0] == "const":
            capacity = max(1, bound[1])
        elif bound is not None and config.buffer_mode == "clamp":
            # sized per launch; the compiled capacity is the fallback when the arguments cannot
            # be read (at least 2, so that a buffer proton_lite did not allocate is never overrun);
            # records staged in shared memory in blocks where the loops' records are sparse
            # (``sparse_loops``: their iterations wait on memory, few records per instruction)
            # and a block costs no resident CTA (ptx_staging.FLUSH_SLOTS), else stored
            # straight to global memory
            direct = BufferLayout(config.granularity, num_warps, max(2, config.loop_capacity), "global",
                                  config.buffer_mode, sized_at_launch=True, overflow="sink")
            blocks = replace(direct, staging="shared", flush_slots=ptx_staging.FLUSH_SLOTS)
            return blocks if blocks.flush_slots and staging_fits(blocks, triton_shared) and sparse_loops() else direct
        elif pool_plan is not None and config.buffer_mode == "clamp":
            # a unit block of loop_capacity records (at least what comes before the first check),
            # then chunks of the launch's pool
            return BufferLayout(config.granularity, num_warps, max(2, config.loop_capacity, pool_plan.entry_records),
                                "global", config.buffer_mode, sized_at_launch=True, overflow="sink", pool=True,
                                chunk_slots=chunk_slots_for(pool_plan, DEFAULT_CHUNK_SLOTS))
        else:
            capacity = config.loop_capacity
    else:
        capacity = max(1, info.straight_line_records)
    if config.buffer_mode == "circular":
        capacity = 1 << (capacity - 1).bit_length()
    for staging in ("shared", "global"):
        # global staging in clamp mode: a record past the capacity goes to the unit's sink slots
        # (one min, no per-record predicate: design.md §2); shared staging has its own sinks
        overflow = "sink" if staging == "global" and config.buffer_mode == "clamp" else "drop"
        layout = BufferLayout(config.granularity, num_warps, capacity, staging, config.buffer_mode, overflow=overflow)
        if staging == "global" or staging_fits(layout, triton_shared):
            return layout
    raise AssertionError("unreachable")
