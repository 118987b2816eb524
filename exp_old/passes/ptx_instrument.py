"""The PTX pass: turn proton_lite's scope markers into record-writing code.

Input is the PTX Triton generated for one kernel, in which every scope boundary is an
inline-asm marker (``// @@proton_lite enter|exit <hex name>``, see
``proton_lite.language``).  Output is PTX that

* at kernel entry: computes the recording unit of the thread (warp, warp group or CTA),
  its leader lane, a register write cursor, and this CTA's block in the profile buffer
  (Triton's last kernel parameter); thread 0 writes the CTA header: magic, ``%smid``,
  and the (``%globaltimer``, ``%clock64``) start pair;
* at every marker: reads the low 32 bits of the SM clock (``%clock``, or ``%clock64``'s
  low half for a record on its own) and stores one 8-byte record ``{tag, clock}`` at the
  cursor, then bumps the cursor (no fences; the cursor never leaves a register).  A record
  past the capacity costs no branch either: with shared staging it goes to a sink slot that
  is never copied out, with global staging over the unit's last slot (one ``min`` each).
  Records close behind another one use the other of two register sets
  (``_link_close_sites``).  A loop's own counter update and exit test, when they follow the
  body's last record, move above it (``_loop_bookkeeping``), and that last record's store
  waits for the next iteration's first record (``_defer_loop_tails``);
* before every ``ret``: reads the end pair, copies the unit's records from shared memory
  to the buffer with the whole leader warp, and writes the unit header (count, end pair).

A kernel sized at launch (``layout.sized_at_launch``: a loop bounded by kernel arguments)
reads its capacity from the buffer's launch prefix at CTA start and computes its strides
in registers; its records go straight to global memory (docs/format.md §1.1) or, where its
loops wait on memory, are staged in shared memory and copied in blocks (``ptx_blocks``).

The pass is a few modules: ``ptx_scan`` reads the PTX (kernel, parameter, markers, loops),
``ptx_emit`` writes the record code (``ptx_blocks``: the copies of records staged in
blocks), ``ptx_loops`` marks the loop transforms, and this one rewrites the kernel
(``rewrite``).

Why PTX: it is the last text level before ``ptxas``, so the markers sit exactly where
LLVM scheduled them, the kernel parameter and special registers are directly at hand,
and the rewrite needs no MLIR bindings that change between Triton versions.
"""
from __future__ import annotations

from proton_lite.layout import COPY_SCOPE, BufferLayout, encode_tag
from proton_lite.passes import ptx_lifetimes
from proton_lite.passes.config import CALIBRATION_KERNEL
from proton_lite.passes.pool import PoolPlan
# the scan and the emitter live in their own modules; their names are re-exported here, where
# the rest of the pass and the tests have always found them
from proton_lite.passes.ptx_emit import _Emitter  # noqa: F401
from proton_lite.passes.ptx_loop_code import _opaque_zero  # noqa: F401
from proton_lite.passes.ptx_loops import _defer_loop_tails, _loop_bookkeeping, _pair_tight_loops  # noqa: F401
from proton_lite.passes.ptx_staging import mark_block_checks, shared_bytes, staged_slots, staging_offset  # noqa: F401
from proton_lite.passes.ptx_scan import (_BRA_RE, _COND_BRA_RE, _ENTRY_RE, _LABEL_RE, _MARKER_RE,  # noqa: F401
                                         _RET_RE, _UNCOND_BRA_RE, CLOSE_GAP, MIN_CHAIN, RECORD_TAG_RE,
                                         SHARED_TOTAL_LIMIT, STAGING_ALIGN, UNROLLED_COPY, InstrumentationError,
                                         MarkerSite, PtxScan, _gap, _is_instruction, function_body, scan)


def lifetimes_only(info: PtxScan, layout: BufferLayout) -> bool:
    """A kernel without scopes: only its CTA's and units' lifetimes are written."""
    return not info.sites and layout.capacity == 0 and layout.staging == "global" and \
        layout.overflow == "drop" and not layout.sized_at_launch  # (layout_choice.choose_layout)


def keeps_start_pair(ptx: str, info: PtxScan, layout: BufferLayout) -> bool:
    """Whether the CTA's start pair (its low halves) lives in registers until exit: a kernel
    without loops whose register count is fixed and whose buffer is sized at compile time
    (with or without scopes).  Loops: a persistent
    kernel (liger's DyT backward, 16 warps looping over rows) ran 1.25x plain with the 64-bit
    pair kept across its loop against 1.00x with the header at entry (H100, 2026-11-27): to
    stay at 32 registers ptxas issued each row's second load after the first one's math
    (design.md); a loop also lets a CTA live past the halves' wrap (2^32 cycles), and such
    CTAs are long, so the entry costs them nothing; with the low halves only, liger's
    cross-entropy (a loop over the vocabulary) still ran 1.044-1.056x against 1.026-1.029x at
    entry (H200, header_forms.py).  ``setmaxnreg`` lowers some warps' registers below what a
    value kept across it needs.  The session's record-cost kernel keeps the entry: at exit
    its measured cost rose from 14-15 to 18 cycles (H200), which would shift every duration
    compensated with it (runtime/calibrate.py).  Loops without scopes: thread 0 alone keeps
    them since pass 22 (``loop_start``)."""
    if info.kernel == CALIBRATION_KERNEL:
        return False
    return not layout.sized_at_launch and not info.back_edges and "setmaxnreg" not in ptx


def loop_start(ptx: str, info: PtxScan, layout: BufferLayout) -> str | None:
    """How thread 0 keeps the CTA's start until exit in a kernel without scopes, with loops
    (``keeps_start_pair`` keeps the others' low halves in every thread): the form of
    ``ptx_lifetimes.LOOP_START``, or None (the header at entry) where it is ``entry`` or the
    kernel's register count is not fixed (``setmaxnreg``)."""
    form = ptx_lifetimes.LOOP_START
    if form == "entry" or info.kernel == CALIBRATION_KERNEL or not info.back_edges \
            or not lifetimes_only(info, layout) or "setmaxnreg" in ptx:
        return None
    return form


def start_forms(ptx: str, info: PtxScan, layout: BufferLayout) -> tuple[bool, str | None]:
    """How the CTA's start waits for the exit, if it does: (every thread keeps its low halves,
    ``keeps_start_pair``; or thread 0 alone keeps a loop kernel's, ``loop_start``'s form)."""
    if keeps_start_pair(ptx, info, layout):
        return True, None
    return False, loop_start(ptx, info, layout)


def rewrite(ptx: str, info: PtxScan, layout: BufferLayout, triton_shared: int = 0,
            pool_plan: PoolPlan | None = None, start_at_exit: bool = True, exit_call: bool | None = None) -> str:
    """Return instrumented PTX for ``info``'s kernel with the given buffer layout (and, for a
    layout with a pool, the checks of ``pool_plan``).  ``start_at_exit``: a kernel keeps
    its CTA's start pair in registers and writes the CTA header at exit (ptx_lifetimes.py),
    unless ``keeps_start_pair`` says no (a loop, ``setmaxnreg``, a buffer sized at launch).
    Marks ``info``'s sites for the loop transforms and, with staging in blocks, adds the
    copies' scope (``COPY_SCOPE``) to the end of its scope table.  ``exit_call``: a kernel
    without scopes exits through a call (True) or inline (False); None: as
    ``ptx_lifetimes.EXIT_IN_FUNCTION`` says (the cubin stage may build both: exit_choice.py)."""
    if layout.sized_at_launch and (layout.staging != "global" and not layout.flush_slots or layout.mode != "clamp"):
        raise InstrumentationError("proton_lite: a buffer sized at launch needs global staging (or staging in "
                                   "blocks) and clamp mode")
    if layout.flush_slots and (layout.staging != "shared" or layout.mode != "clamp" or layout.pool or
                               layout.flush_slots % 2 or layout.flush_slots < 4):
        raise InstrumentationError("proton_lite: internal error: staging in blocks needs shared staging, clamp "
                                   "mode, no pool and an even block of at least 4 records")
    if layout.pool != (pool_plan is not None) or (layout.pool and not layout.sized_at_launch):
        raise InstrumentationError("proton_lite: internal error: a pool needs its plan and a buffer sized at launch")
    # global unit blocks in clamp mode (written directly, or copied from blocks) have sink slots
    sinks = ((layout.staging == "global" or layout.flush_slots > 0) and layout.mode == "clamp") == \
        (layout.overflow == "sink")
    if not lifetimes_only(info, layout) and (not sinks or layout.capacity < 1):
        raise InstrumentationError(f"proton_lite: internal error: layout {layout} does not match the record code "
                                   "(global staging in clamp mode stores past the capacity in sink slots)")
    smem_symbol = f"__proton_lite_dyn_smem_{info.kernel}"  # aliases the dynamic shared base
    lines = ptx.split("\n")
    # with a pool a check may switch regions between two records: no record derives its
    # address from another one's (pairs, unrolled copies, stores by address; passes/pool.py)
    unrolled = _pair_tight_loops(lines, info, layout.staging == "global") \
        if layout.mode == "clamp" and not layout.pool else {}
    if layout.flush_slots:  # one check for room per straight run of records (after the pairs are known)
        mark_block_checks(lines, info.sites, layout.flush_run)
    keeps_alive = info.keeps_alive and (layout.staging == "shared" or layout.mode == "clamp")
    hoisted, moved = _loop_bookkeeping(lines, info)
    # clamp mode only: in a circular buffer a late store could land on a newer record's slot;
    # not with blocks: a copy between a deferred record's slot and its store would copy the
    # slot unwritten
    flush_after = _defer_loop_tails(lines, info, moved, layout.staging == "shared", by_address=not layout.pool) \
        if layout.mode == "clamp" and not layout.flush_slots else {}
    checks = {line: (n, room) for n, (line, room) in enumerate(sorted(pool_plan.checks.items()))} \
        if pool_plan is not None else {}
    body_end = pool_plan.body_end if pool_plan is not None else -1
    if layout.flush_slots and COPY_SCOPE not in info.scopes:
        # the copies record their time under a scope of their own, the last of the scan's
        # table, which the kernel's metadata lists (stage_hook.instrument_ptx)
        info.scopes.append(COPY_SCOPE)
    ids = {name: i for i, name in enumerate(info.scopes)}
    site_at = {s.line: s for s in info.sites}

    def tag(site: MarkerSite) -> int:
        return encode_tag(ids[site.name], site.kind == "exit")

    pair_tags = [tuple(tag(s) for s in info.sites if s.unrolled == n) for n in range(len(unrolled))]
    in_registers, kept = start_forms(ptx, info, layout) if start_at_exit else (False, None)
    emit = _Emitter(layout, info.profile_param, smem_symbol, staging_offset(triton_shared), keeps_alive,
                    info.loop_sites > 0, defers=len(flush_after), by_address=any(s.by_address for s in info.sites),
                    unrolled_tags=pair_tags, start_at_exit=in_registers,
                    copy_tags=(encode_tag(ids[COPY_SCOPE], False), encode_tag(ids[COPY_SCOPE], True))
                    if layout.flush_slots else (0, 0),
                    loop_start=kept)
    if (ptx_lifetimes.EXIT_IN_FUNCTION if exit_call is None else exit_call) and emit.start_at_exit \
            and lifetimes_only(info, layout):
        emit.exit_function = f"__proton_lite_exit_{info.kernel}"
    entries = {head: n for n, head in unrolled.values()}

    def body_line(i: int, copy: int = 0) -> list[str]:
        """Line ``i`` as emitted in copy ``copy`` of its loop body."""
        if i in moved:
            return []
        site = site_at.get(i)
        if site is None:
            return [lines[i]]
        record = emit.unrolled_record(site, tag(site), copy) if site.unrolled >= 0 else \
            emit.copy_before(site) + emit.record(site, tag(site))
        return hoisted.get(i, []) + ["\t" + r for r in record]

    out: list[str] = []
    in_body, regs_done, ret_count = False, False, 0
    entry_seen = False
    kernel_end = (info.body or function_body(lines))[1]  # past it: the module's noinline functions, as they are
    for i, line in enumerate(lines):
        if i > kernel_end:
            out.append(line)
            continue
        if i == body_end:  # the function's closing brace: the pool's refills go before it
            out += ["\t" + r for n in range(len(checks)) for r in emit.pool.refill(n)]
        if i in checks:  # a loop head: room for the records up to the next check (passes/pool.py)
            out.append(line)
            out += ["\t" + r for r in emit.pool.check(*checks[i])]
            continue
        if not entry_seen and _ENTRY_RE.match(line):
            entry_seen = True
            if layout.staging == "shared":
                out.append(f".extern .shared .align 16 .b8 {smem_symbol}[];")
            out.append(line)
            continue
        if entry_seen and not in_body:
            out.append(line)
            if line.strip() == "{":
                in_body = True
            continue
        if in_body and not regs_done:
            stripped = line.strip()
            if stripped.startswith(".reg") or stripped.startswith(".local") or stripped.startswith(".shared") or \
                    not stripped:
                out.append(line)
                continue
            out += ["\t" + r for r in emit.registers()]
            out += ["\t" + s for s in emit.prologue()]
            regs_done = True
        if i in entries:  # the head of a loop unrolled twice: its first address, on the way in
            out += ["\t" + s for s in emit.unrolled_entry(entries[i])]
        if i in unrolled:  # its back edge: leave after the first copy, or run the second one
            n, head = unrolled[i]
            m = _COND_BRA_RE.match(line)
            negated = "" if m.group(2) else "!"
            out.append(f"{m.group(1)}@{negated}{m.group(3)} bra $pl_unrolled_exit_{n};")
            for j in range(head + 1, i):
                out += body_line(j, copy=1)
            out += [line, f"$pl_unrolled_exit_{n}:"]
            continue
        if i in flush_after:  # the loop's back edge: on the way out, store its deferred record
            out += [line] + ["\t" + s for s in emit.loop_exit_store(*flush_after[i])]
            continue
        rm = _RET_RE.match(line) if regs_done else None
        if rm:
            indent, pred = rm.group(1), (rm.group(2) or "").strip()
            ret_count += 1
            if pred:  # `@%p ret;` -> skip epilogue and ret unless %p holds
                cond = pred[1:]
                negated = cond[1:] if cond.startswith("!") else "!" + cond
                out.append(f"{indent}@{negated} bra $pl_skip_{ret_count};")
            out += [indent + s for s in emit.epilogue(ret_count)]
            out.append(f"{indent}ret;")
            if pred:
                out.append(f"$pl_skip_{ret_count}:")
            continue
        out += body_line(i)
    if not regs_done or ret_count == 0:
        raise InstrumentationError(f"proton_lite: could not find the body or the exits of kernel {info.kernel} in "
                                   "its PTX; please report this with the kernel's PTX")
    if emit.exit_function:  # defined before the kernel that calls it
        at = next(n for n, line in enumerate(out) if _ENTRY_RE.search(line))
        out.insert(at, emit.exit_function_text())
    return "\n".join(out)


def fold_exit_branches(ptx: str) -> str:
    """``@%p bra $exit; bra.uni $head; $exit:`` becomes ``@!%p bra $head; $exit:``.

    LLVM ends some loops that way (Triton 3.6: the first of two loops in a kernel): a
    conditional exit, then an unconditional back edge, the exit block next. Both jump to the
    same places for either value of ``%p``, but only the second form has the conditional back
    edge that _pair_tight_loops and _defer_loop_tails need. Applied to kernels that are
    instrumented only, before ``scan``."""
    lines = ptx.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = _COND_BRA_RE.match(lines[i])
        if m and i + 1 < len(lines):
            u = _UNCOND_BRA_RE.match(lines[i + 1])
            nxt = next((line for line in lines[i + 2:] if _is_instruction(line) or _LABEL_RE.match(line)), "")
            label = _LABEL_RE.match(nxt)
            if u and label and label.group(1) == m.group(4):
                out.append(f"{m.group(1)}@{'' if m.group(2) else '!'}{m.group(3)} bra {u.group(1)};")
                i += 2
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)


def strip_markers(ptx: str) -> str:
    """Remove the markers of a kernel that is compiled in a session but not selected for profiling."""
    return "\n".join(line for line in ptx.split("\n") if not _MARKER_RE.match(line))
