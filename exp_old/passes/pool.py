"""Records from a launch-wide pool, for loops whose trip counts are only known at run time.

A loop bounded by values loaded from memory (``range(start, end)`` from an offsets table),
a ``while`` loop or an early exit writes a number of records that no launch argument
predicts.  Such a kernel still gets a unit block of ``capacity`` records per unit in its
CTA block (the launch's capacity word, ``layout.py``), and, after the CTA blocks, a
*pool* of fixed-size chunks that units take, one atomic per chunk, when their current
region runs low (``docs/format.md`` §1.4).

Where units look: at the head of every loop that holds a record site (a *check*), a unit
compares ``cursor + headroom`` with the end of its current region and, when the region
cannot hold the records it may write before it reaches the next check, takes a chunk.
``headroom`` is the most records any path from that check writes before it reaches another
check or the end of the kernel, read from the PTX's control-flow graph (``plan``).  Every
cycle of the graph that holds a record passes through a check, so every path is bounded;
a kernel whose graph breaks that rule (an irreducible loop) is not given a pool.  The first
region (the unit block) must hold the records written before the first check: its size is
at least ``entry_records``.

The record code is that of a kernel sized at launch (``min(cursor, limit)``, two sink slots
per region): a chunk is a region whose base register points ``first`` records before its
first slot, so no record needs anything new.  A loop's deferred last record
(``_defer_loop_tails``) keeps its own address, so it lands in the region where its slot was
taken even when a check switched regions in between; the tricks that derive one record's
address from another's (stores by address, tight loops unrolled in pairs) are not used in
such kernels.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from proton_lite.layout import CHUNK_HEADER_BYTES, CHUNK_TAG, RECORD_BYTES, BufferLayout

_LABEL_RE = re.compile(r"^\s*([$\w]+):")
_BRA_RE = re.compile(r"^\s*(@!?%[\w]+\s+)?bra(?:\.uni)?\s+([$\w]+);")
_END_RE = re.compile(r"^\s*(@!?%[\w]+\s+)?(ret|exit|trap)(?:\.uni)?;")
_INDIRECT_RE = re.compile(r"\bbrx\.idx\b|\bcall\b")


@dataclass
class PoolPlan:
    """Where the checks go and how many records each must make room for."""

    checks: dict[int, int]  # PTX line of a loop head's label -> records it makes room for
    entry_records: int  # records any path writes before its first check
    max_headroom: int  # the most any check needs: a chunk must hold at least this many
    body_end: int  # PTX line of the kernel's closing brace: the refills go before it


class _Graph:
    """Basic blocks of the PTX function body: block starts (line numbers), record sites per
    block, successors, the block of each label."""

    def __init__(self, lines: list[str], body_start: int, body_end: int, site_lines: set[int]) -> None:
        starts = [body_start]
        for i in range(body_start, body_end):
            if _LABEL_RE.match(lines[i]) and i != starts[-1]:
                starts.append(i)
            elif (_BRA_RE.match(lines[i]) or _END_RE.match(lines[i])) and i + 1 < body_end:
                starts.append(i + 1)
        self.starts = sorted(set(starts))
        self.block_of_label: dict[str, int] = {}
        self.block_of_line: dict[int, int] = {}
        for b, start in enumerate(self.starts):
            end = self.starts[b + 1] if b + 1 < len(self.starts) else body_end
            for i in range(start, end):
                self.block_of_line[i] = b
            m = _LABEL_RE.match(lines[start])
            if m:
                self.block_of_label[m.group(1)] = b
        n = len(self.starts)
        self.weight = [0] * n
        for line in site_lines:
            self.weight[self.block_of_line[line]] += 1
        self.succ: list[list[int]] = [[] for _ in range(n)]
        for b, start in enumerate(self.starts):
            end = self.starts[b + 1] if b + 1 < n else body_end
            last = next((i for i in range(end - 1, start - 1, -1) if lines[i].strip() and
                         not lines[i].strip().startswith("//")), start)
            text = lines[last]
            if _INDIRECT_RE.search(text):
                raise ValueError("an indirect branch or a call")
            bm, em = _BRA_RE.match(text), _END_RE.match(text)
            if bm:
                target = self.block_of_label.get(bm.group(2))
                if target is None:
                    raise ValueError(f"a branch to an unknown label {bm.group(2)}")
                self.succ[b].append(target)
                if bm.group(1) and b + 1 < n:
                    self.succ[b].append(b + 1)
            elif em:
                if em.group(1) and b + 1 < n:
                    self.succ[b].append(b + 1)
            elif b + 1 < n:
                self.succ[b].append(b + 1)


def _sccs(n: int, succ: list[list[int]], removed: set[int]) -> list[list[int]]:
    """Strongly connected components of the graph without the ``removed`` nodes (Tarjan,
    iterative), in reverse topological order."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in range(n):
        if root in removed or root in index:
            continue
        work = [(root, 0)]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, i = work[-1]
            nxt = [w for w in succ[v] if w not in removed]
            if i < len(nxt):
                work[-1] = (v, i + 1)
                w = nxt[i]
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def _unbounded(graph: _Graph, checks: set[int]) -> bool:
    """Whether some cycle that avoids every check holds a record."""
    for comp in _sccs(len(graph.starts), graph.succ, checks):
        cyclic = len(comp) > 1 or comp[0] in graph.succ[comp[0]]
        if cyclic and any(graph.weight[b] for b in comp):
            return True
    return False


def _longest(graph: _Graph, checks: set[int]) -> list[int]:
    """Per block, the most records a path from its start writes before it enters a check
    block or ends (the block's own records included; a check block counts its own only)."""
    n = len(graph.starts)
    comps = _sccs(n, graph.succ, checks)  # reverse topological: successors come first
    comp_of = {b: c for c, comp in enumerate(comps) for b in comp}
    best = [0] * len(comps)
    for c, comp in enumerate(comps):
        own = sum(graph.weight[b] for b in comp)  # records only in single-block components (_unbounded)
        after = 0
        for b in comp:
            for s in graph.succ[b]:
                if s in checks or comp_of[s] == c:
                    continue
                after = max(after, best[comp_of[s]])
        best[c] = own + after
    out = [0] * n
    for b in range(n):
        if b in checks:  # removed from the components: its own records, then its successors'
            out[b] = graph.weight[b] + max([best[comp_of[s]] for s in graph.succ[b] if s not in checks],
                                           default=0)
        else:
            out[b] = best[comp_of[b]]
    return out


def plan(lines: list[str], body_start: int, body_end: int, site_lines: set[int],
         back_edges: list[tuple[int, int]]) -> PoolPlan | None:
    """Checks at the heads of the loops that hold records, and each one's headroom; None when
    the control flow cannot be bounded that way (then the kernel keeps ``loop_capacity``)."""
    try:
        graph = _Graph(lines, body_start, body_end, site_lines)
    except ValueError:
        return None
    heads = [head for head, branch in back_edges if any(head <= s <= branch for s in site_lines)]
    checks = {graph.block_of_line[h] for h in heads}
    if _unbounded(graph, checks):
        checks |= {graph.block_of_line[h] for h, _ in back_edges}  # every loop head
        heads = [h for h, _ in back_edges]
        if _unbounded(graph, checks):
            return None
    longest = _longest(graph, checks)
    head_of_block = {graph.block_of_line[h]: h for h in heads}
    room = {head_of_block[b]: longest[b] for b in checks}
    return PoolPlan(room, longest[0], max(room.values(), default=0), body_end)


def chunk_slots_for(plan_: PoolPlan, default: int) -> int:
    """Record slots per chunk: ``default``, or more when a check needs more room; odd, so that
    a chunk (16-byte header, slots, one sink slot) stays a multiple of 16 bytes."""
    slots = max(default, 2 * plan_.max_headroom)
    return slots | 1


class PoolCode:
    """The PTX of the checks, the chunk refills and the pool's registers (``%pl_q*``)."""

    REGS = (".reg .b32 %pl_qn;", ".reg .b32 %pl_qe;", ".reg .b32 %pl_qlim;", ".reg .b32 %pl_qt;",
            ".reg .b64 %pl_qpool;", ".reg .b64 %pl_qctr;", ".reg .b64 %pl_qa;", ".reg .pred %pl_qp;")

    def __init__(self, layout: BufferLayout) -> None:
        self.layout = layout

    def prologue(self) -> list[str]:
        """After the capacity word is read (``%pl_r24``, its tag check in ``%pl_p5``) and before
        ``%pl_d0`` moves to the CTA block: the pool's chunk count and epoch, the counter's
        address, where the pool starts (after every CTA block) and the first region's limit."""
        return [
            "// proton_lite: pool",
            "ld.global.u32 %pl_qn, [%pl_d0+4];",
            "ld.global.u32 %pl_qe, [%pl_d0+8];",
            "selp.u32 %pl_qn, %pl_qn, 0, %pl_p5;",  # no tag: not our buffer, no pool either
            "add.s64 %pl_qctr, %pl_d0, 12;",
            "mov.u32 %pl_qt, %nctaid.x;",
            "mov.u32 %pl_r25, %nctaid.y;",
            "mul.lo.u32 %pl_qt, %pl_qt, %pl_r25;",
            "mov.u32 %pl_r25, %nctaid.z;",
            "mul.lo.u32 %pl_qt, %pl_qt, %pl_r25;",
            "cvt.u64.u32 %pl_qpool, %pl_qt;",
            "mov.u32 %pl_qlim, %pl_r24;",
        ]

    def pool_base(self) -> list[str]:
        """Once the stride (``%pl_d12``) is known and ``%pl_d0`` points past the prefix."""
        return ["mul.lo.u64 %pl_qpool, %pl_qpool, %pl_d12;", "add.s64 %pl_qpool, %pl_qpool, %pl_d0;"]

    @staticmethod
    def check(n: int, room: int) -> list[str]:
        return ["// proton_lite: pool check",
                f"add.u32 %pl_qt, %pl_r3, {room};",
                "setp.gt.u32 %pl_qp, %pl_qt, %pl_qlim;",
                f"@%pl_qp bra $pl_refill_{n};",
                f"$pl_refilled_{n}:"]

    def refill(self, n: int) -> list[str]:
        """Take the next chunk (the unit's leader, one atomic), make it the unit's region and
        write its header; when the pool is used up the unit keeps its region (records past its
        end go to its sink slots and are counted as dropped) and looks no more. Every lane of
        the leader's warp gets the chunk index from lane 0; the other warps of a larger unit
        get none and stop looking (they store nothing)."""
        slots = self.layout.chunk_slots
        chunk_bytes = self.layout.chunk_bytes
        return [f"$pl_refill_{n}:",
                "mov.u32 %pl_qt, -1;",
                "@%pl_p0 atom.global.add.u32 %pl_qt, [%pl_qctr], 1;",
                "shfl.sync.idx.b32 %pl_qt, %pl_qt, 0, 31, -1;",
                "setp.lt.u32 %pl_qp, %pl_qt, %pl_qn;",
                "@!%pl_qp mov.u32 %pl_qlim, -1;",
                f"@!%pl_qp bra.uni $pl_refilled_{n};",
                f"mul.wide.u32 %pl_qa, %pl_qt, {chunk_bytes};",
                "add.s64 %pl_qa, %pl_qa, %pl_qpool;",
                f"or.b32 %pl_qt, %pl_r1, {CHUNK_TAG << 16};",
                "@%pl_p0 st.global.v4.u32 [%pl_qa], {%pl_qt, %pl_qe, %pl_r5, %pl_r3};",
                f"add.s64 %pl_d3, %pl_qa, {CHUNK_HEADER_BYTES};",
                f"mul.wide.u32 %pl_qa, %pl_r3, {RECORD_BYTES};",
                "sub.s64 %pl_d3, %pl_d3, %pl_qa;",
                f"add.u32 %pl_r24, %pl_r3, {slots};",
                "mov.u32 %pl_qlim, %pl_r24;",
                f"bra.uni $pl_refilled_{n};"]
