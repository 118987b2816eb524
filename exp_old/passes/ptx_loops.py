"""The loop transforms of the record code (design.md §2): a tight loop's two records stored
together (and with global staging the body unrolled twice), the loop's own bookkeeping moved
above a body's last record, and that record's store deferred to the next record."""
from __future__ import annotations

import re

from proton_lite.passes.ptx_scan import (_BRA_RE, _COND_BRA_RE, _DEBUG_LABEL_RE, _LABEL_RE, _RET_RE, PtxScan, _gap,
                                         _is_instruction)


def _pair_tight_loops(lines: list[str], info: PtxScan, unroll: bool) -> dict[int, tuple[int, int]]:
    """In a tight loop the body's two records are stored together, by the second one; with
    global staging (``unroll``) the body is also unrolled twice.

    In a tight loop (the body's two records close to each other and to the back edge, so that
    _link_close_sites linked them both ways) each record's store sat between timer reads, and
    the `xor`s that keep the two register sets apart sat in the loop too.

    Shared staging: the first record only reads the clock (set 0); the second reads it (set 1)
    and stores both, at the saturating pointer and the slot after it, and the pointer
    advances by two slots (the sink has two, staged_slots). Both sets are live until that
    store anyway, so no `xor` is needed, and ptxas unrolls the loop again. On the H100,
    bench.py's tightest loop (1 FMA per element) went from 12.10 to 10.38-10.43 cycles per
    record (two processes each).

    Global staging: a global store reads its registers ~20 cycles after it issues, and in a
    loop the next iteration's timer read reached them sooner, whichever record stored what
    (19.5 cycles per record, docs/benchmarks.md). So the body is emitted twice: the first
    copy's back edge becomes an exit (``@!p bra`` past the second copy), the second copy keeps
    the back edge. Each copy has its own registers (Emitter.unrolled_prologue) and its own
    address, computed by the other copy, so a copy's stores have the whole other copy to
    read theirs. The loop computes what it computed: the body is one basic block whose only
    way out is the back edge's fall-through, and each copy ends with the original exit test.
    Nothing is pending when the loop is left, from either copy. On the H100 bench.py's
    tightest loop went from 19.5 to 11.7 cycles per record ("Record sequence, seventh
    version").

    Only tight loops: with 8 and 32 FMAs per iteration pairing measured 17.2 and 16.5
    against 8.2 and 7.0 with shared staging (the next iteration's first timer read waits for
    the pair's store to read its registers); those loops keep one store per record and
    _defer_loop_tails. Only for a loop with one back edge whose body has exactly two
    records, in one basic block; unrolled only if the back edge is conditional and the only
    branch to the loop's head (the entry code before the head is then reached on the way in).
    Marks the sites; the records no longer keep each other's registers alive. Returns, for
    the loops unrolled, {back edge line: (loop number, head line)}."""
    unrolled: dict[int, tuple[int, int]] = {}
    for head, branch, body, single in info.loop_bodies():
        if len(body) != 2 or not single or not (body[0].keeps_other and body[1].keeps_other):
            continue  # not linked both ways: not a tight loop
        if _gap(lines, body[0].line, body[1].line) is None:
            continue
        if unroll:
            label = _LABEL_RE.match(lines[head]).group(1)
            branches_in = sum(1 for line in lines for m in [_BRA_RE.search(line)] if m and m.group(1) == label)
            if not _COND_BRA_RE.match(lines[branch]) or branches_in != 1 or \
                    _gap(lines, head, body[0].line) is None or _gap(lines, body[1].line, branch) is None:
                continue  # left as it is: the deferral of _defer_loop_tails
            n = len(unrolled)
            unrolled[branch] = (n, head)
            body[0].unrolled = body[1].unrolled = n
        body[0].pairs, body[1].stores_pair = True, True
        body[0].keeps_other = body[1].keeps_other = False
    return unrolled


# register-only instructions that may move above a record: no memory, no barrier, no call
_MOVABLE_RE = re.compile(r"^\s*(?:add|sub|mul|mad|setp|selp|and|or|xor|not|shl|shr|min|max|neg|cvt|mov)(?:\.\w+)*\s")


def _loop_bookkeeping(lines: list[str], info: PtxScan) -> tuple[dict[int, list[str]], set[int]]:
    """The loop's own counter update and exit test, when nothing else follows the last record
    of a loop body before its back edge: they move above that record.

    The exit test is then ready before the record instead of after it: ptxas had issued it
    last and stalled the back edge ~13 cycles on the predicate (a tight loop went from 13.8
    to 12.8 cycles per record, docs/benchmarks.md).  Only register arithmetic moves (no
    memory access, no special register such as the clock), within one basic block, and the
    record reads none of its registers; so the kernel computes the same, and the scope that
    ends at that record also spans these few instructions of loop control.
    Returns (line of the record -> lines to emit before it, lines moved)."""
    hoisted: dict[int, list[str]] = {}
    moved: set[int] = set()
    for _, branch, body, _ in info.loop_bodies():
        if not body:
            continue
        between = range(body[-1].line + 1, branch)
        instructions = [j for j in between if _is_instruction(lines[j])]
        if not instructions or any(not _MOVABLE_RE.match(lines[j]) or "%pl_" in lines[j] or
                                   re.search(r"%(clock|globaltimer)", lines[j]) for j in instructions):
            continue
        if any(_LABEL_RE.match(lines[j]) and not _DEBUG_LABEL_RE.match(lines[j]) for j in between):
            continue
        hoisted[body[-1].line] = [lines[j] for j in between]
        moved.update(between)
    return hoisted, moved


def _defer_loop_tails(lines: list[str], info: PtxScan, moved: set[int], shared: bool,
                      by_address: bool = True) -> dict[int, tuple[int, bool]]:
    """A loop body's last record leaves its store to the next record: the first record of
    the next iteration stores both, and so does one store after the loop's back edge on the
    way out.

    The timer read at the top of a loop overwrites registers of the previous iteration's
    records, and waited for the store issued just before the back edge to read its own: in
    every iteration, however long the body. With global stores it waits because ptxas
    tracks a loop's global stores with one scoreboard; with shared ones because ptxas gave
    the clock and the last store's address one register. Now no store sits between the
    body's last timer read and the back edge. On the H100, cycles per record in bench.py's
    loop with 1, 8 and 32 dependent FMAs per iteration: global 22.4, 18.7, 17.4 before,
    19.4, 17.2, 13.9 after; shared 10.7 and 9.0 before, 8.2 and 7.0 after for 8 and 32 FMAs,
    and in the tightest loop 12.3 before, 12.5 after: with shared staging a loop whose first
    record is close to its last one (linked by _link_close_sites) keeps its stores
    (docs/benchmarks.md, "Record sequence, fifth version").

    Only where every path that leaves the last record meets a store of it before any other
    record: the last record is followed by nothing but the back edge (after
    _loop_bookkeeping), that edge is conditional (its fall-through is the only way out of
    the body: no branch inside leaves it, no ``ret``), the first record is straight after
    the loop's head label, and the loop has one back edge.  The slot is taken at the
    record, as before, so a record is written where it always was, only a few cycles later.

    With global staging, outside tight loops (first record not linked to the last one), the
    last record does not even compute its address: the next iteration's first record stores
    it at its own address - 8 (their slots are consecutive; past the capacity the first record
    takes the second sink slot, so the deferred one lands in the first). ptxas had reused the
    deferred record's 64-bit address register right after that store and waited ~20 cycles
    for the store to read it: 17.2 / 14.0 -> 11.2 / 11.5 cycles per record with 8 / 32 FMAs
    per iteration (in the tightest loop it measured 23.3 against 19.5, so tight loops keep
    the address in set 2; docs/benchmarks.md, "Record sequence, sixth version"). Every
    deferring loop has its own pending predicate, cleared on the way out, so that a pending
    record is stored once, by its own loop.

    Marks the sites; returns {back edge line: (loop number, stored by address)}."""
    labels = {m.group(1): j for j, line in enumerate(lines) for m in [_LABEL_RE.match(line)] if m}
    flush_after: dict[int, tuple[int, bool]] = {}
    for head, branch, body, single in info.loop_bodies():
        if len(body) < 2 or not single or _gap(lines, head, body[0].line) is None:
            continue
        if body[0].pairs or (shared and body[0].keeps_other):
            continue  # a tight loop: its records are stored in pairs (shared staging), or left as they are
        if not re.match(r"\s*@!?%p\w+\s+bra", lines[branch]):
            continue  # an unconditional back edge: the loop is left from elsewhere
        if _gap(lines, body[-1].line, branch) is None or \
                any(_is_instruction(lines[j]) and j not in moved for j in range(body[-1].line + 1, branch)):
            continue  # something other than the loop's own bookkeeping follows the last record
        leaves = False
        for j in range(head + 1, branch):
            bm = _BRA_RE.search(lines[j])
            if (bm and not head <= labels.get(bm.group(1), -1) < branch) or _RET_RE.match(lines[j]):
                leaves = True
                break
        if not leaves:
            n, stored_by_address = len(flush_after), by_address and not shared and not body[0].keeps_other
            body[0].flushes, body[-1].defers = True, True
            for site in (body[0], body[-1]):
                site.loop, site.by_address = n, stored_by_address
            flush_after[branch] = (n, stored_by_address)
    return flush_after
