"""Where a kernel's records are staged in shared memory: slots per unit (the capacity and two
sink slots, or a block copied whenever it fills), the bytes that takes, where the staging
area starts after Triton's own, and whether a block fits without costing the kernel
resident CTAs."""
from __future__ import annotations

import os
import re

from proton_lite.layout import RECORD_BYTES, BufferLayout
from proton_lite.passes.ptx_scan import SHARED_TOTAL_LIMIT, STAGING_ALIGN, MarkerSite, PtxScan, _gap, _is_instruction
from proton_lite.passes.register_cap import MAX_CTAS_PER_SM, THREADS_PER_SM

# Records per unit staged in shared memory before a unit copies them to its global block, in
# kernels whose loops are sized at launch (layout.flush_slots). On the H100 the grid-stride
# softmax of tests/benchmarks/loops.py (a scope per row) ran 5.6-5.7% over plain with each
# record stored to global memory and 1.7-1.8% with its records staged in shared memory
# (docs/benchmarks.md). 64 records are 528 bytes per warp with the two spare slots.
# PROTON_LITE_FLUSH_SLOTS=0 stores them to global memory as before (part of the cache key:
# config.InstrumentConfig.to_mode).
DEFAULT_FLUSH_SLOTS = 64


def flush_slots_setting() -> int:
    raw = os.environ.get("PROTON_LITE_FLUSH_SLOTS", "").strip()
    if not raw:
        return DEFAULT_FLUSH_SLOTS
    if not raw.isdigit() or int(raw) % 2 or int(raw) > 4096 or 0 < int(raw) < 4:
        raise ValueError(f"PROTON_LITE_FLUSH_SLOTS={raw!r}: use an even number of records from 4 to 4096, "
                         "or 0 to store the records of loops sized at launch straight to global memory")
    return int(raw)


FLUSH_SLOTS = flush_slots_setting()

# Blocks only for loops whose iterations wait on memory and whose records are not dense: a
# check per run and a copy per block cost a record 16-25 cycles more than a global store in
# bench.py's record-cost loops (arithmetic only, 2.5 to 33.5 PTX instructions per record:
# 36.5 / 32.8 / 28.0 cycles per record in blocks against 11.9 / 11.5 / 11.5 stored to global
# memory), where the grid-stride softmax of loops.py (a row's loads, stores and barriers per
# iteration, 56 PTX instructions and ~1,200 cycles per record) ran 1.9% over plain in blocks
# against 5.6% (H100, docs/benchmarks.md). Instructions alone do not tell the two apart
# (a softmax row is as few instructions per record as 32 dependent FMAs, 40 times longer).
DEFAULT_MIN_INSTRUCTIONS_PER_RECORD = 16
MIN_INSTRUCTIONS_PER_RECORD = DEFAULT_MIN_INSTRUCTIONS_PER_RECORD  # (another value is part of the cache key)

# Hopper's shared memory per SM, of which each resident CTA reserves 1 KB (CUDA C
# Programming Guide, "Compute Capability 9.0"); its limits on resident CTAs and threads are
# register_cap's
SHARED_PER_SM = 228 * 1024
SHARED_RESERVED_PER_CTA = 1024


def mark_block_checks(lines: list[str], sites: list[MarkerSite], run_limit: int) -> None:
    """With staging in blocks: which records check for room (``site.room``), and for how many.

    One check per straight run of records: the records of one basic block (no label, branch
    or ``ret`` between them), at most ``run_limit`` per check, a tight loop's pair never
    split. The check goes before the run's first record (ptx_emit.block_copy), so a loop
    whose body is one basic block checks once per iteration and its other records leave the
    kernel's code around them in one basic block for ptxas to schedule as before: with a
    check per record, the fidelity suite's pipelined=False matmul lost 7% of each K
    iteration to the gaps between its two scopes (design.md §2)."""
    ordered = sorted(sites, key=lambda s: s.line)
    run: list[MarkerSite] = []

    def close() -> None:
        start = 0
        while start < len(run):
            end = min(start + run_limit, len(run))
            if end < len(run) and run[end - 1].pairs:  # not between a pair's two records
                end -= 1
            run[start].room = end - start
            start = end
        run.clear()

    for site in ordered:
        if run and _gap(lines, run[-1].line, site.line) is None:  # another basic block
            close()
        run.append(site)
    close()


# what makes an iteration wait on memory: a global load, an asynchronous copy, a barrier, a
# tensor-core op (PTX ISA names)
_WAITS_RE = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:ld\.(?:volatile\.)?global|cp\.async|bar\.sync|barrier\.sync|"
                       r"wgmma|mbarrier\.try_wait|tcgen05)")


def loops_wait_on_memory(lines: list[str], info: PtxScan) -> bool:
    """Whether every loop that holds records waits on memory in its body."""
    return all(any(_WAITS_RE.match(lines[j]) for j in range(head, branch + 1))
               for head, branch, body, _ in info.loop_bodies() if body)


def instructions_per_loop_record(lines: list[str], info: PtxScan) -> float:
    """The fewest PTX instructions per record over the loops that hold records (a loop's
    body, its inner loops included, over its records): how sparse a kernel's records in loops are."""
    out = float("inf")
    for head, branch, body, _ in info.loop_bodies():
        if body:
            out = min(out, sum(_is_instruction(lines[j]) for j in range(head, branch + 1)) / len(body))
    return out


def sparse_loops(ptx: str, info: PtxScan) -> bool:
    """Whether staging in blocks pays for a kernel's records in loops (above). A threshold of
    0 (MIN_INSTRUCTIONS_PER_RECORD) stages any kernel sized at launch in blocks."""
    if MIN_INSTRUCTIONS_PER_RECORD <= 0:
        return True
    lines = ptx.split("\n")
    return loops_wait_on_memory(lines, info) and \
        instructions_per_loop_record(lines, info) >= MIN_INSTRUCTIONS_PER_RECORD


def staged_slots(layout: BufferLayout) -> int:
    """Record slots per unit in shared memory: the capacity (or the block, ``flush_slots``),
    then two spare slots (records past the capacity, a tight loop's pair stored at the sink
    or past the block's end, the keep-alive accumulator), rounded up to keep every unit's
    slots 16-byte aligned (ptxas merges two adjacent records into one 16-byte store)."""
    return ((layout.flush_slots or layout.capacity) + 3) & ~1


def resident_ctas(shared: int, num_warps: int) -> int:
    """CTAs of a kernel that fit on one SM by their shared memory and warps (registers aside)."""
    by_shared = SHARED_PER_SM // (max(shared, 0) + SHARED_RESERVED_PER_CTA)
    return min(by_shared, MAX_CTAS_PER_SM, THREADS_PER_SM // (32 * max(num_warps, 1)))


def staging_fits(layout: BufferLayout, triton_shared: int) -> bool:
    """Whether a staged layout fits a CTA's shared memory, and, for staging in blocks, leaves
    the kernel as many resident CTAs as it had: a block is a choice (global stores work as
    well), and a kernel limited by its shared memory would lose a whole CTA per SM."""
    total = staging_offset(triton_shared) + shared_bytes(layout)
    if total > SHARED_TOTAL_LIMIT:
        return False
    if not layout.flush_slots:
        return True
    return resident_ctas(total, layout.num_warps) >= resident_ctas(triton_shared, layout.num_warps)


def shared_bytes(layout: BufferLayout) -> int:
    return layout.units * staged_slots(layout) * RECORD_BYTES


def staging_offset(triton_shared: int) -> int:
    """Where the staging area starts in the dynamic shared memory: after Triton's own bytes.

    Appending to the dynamic region (and raising the kernel's ``shared`` size) leaves every
    address Triton uses unchanged; a static ``.shared`` array would instead move the dynamic
    region and break the 1024-byte alignment that swizzled wgmma/TMA tiles rely on.
    """
    return -(-max(triton_shared, 0) // STAGING_ALIGN) * STAGING_ALIGN
