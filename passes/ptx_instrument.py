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
in registers; its records go straight to global memory (docs/format.md §1.1).

Why PTX: it is the last text level before ``ptxas``, so the markers sit exactly where
LLVM scheduled them, the kernel parameter and special registers are directly at hand,
and the rewrite needs no MLIR bindings that change between Triton versions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from proton_lite.markers import MARKER_TAG
from proton_lite.passes.config import CALIBRATION_KERNEL
from proton_lite.passes.pool import PoolCode, PoolPlan
from proton_lite.layout import (CTA_HEADER_BYTES, CTA_MAGIC, LAUNCH_CAPACITY_TAG, LAUNCH_PREFIX_BYTES, LAYOUT_VERSION,
                                MAX_LAUNCH_CAPACITY, MAX_SCOPES, RECORD_BYTES, UNIT_HEADER_BYTES, UNIT_MAGIC,
                                BufferLayout, encode_tag)

_MARKER_RE = re.compile(r"^\s*mov\.u32\s+%r\d+,\s*0;\s*//\s*" + re.escape(MARKER_TAG) + r"\s+(enter|exit)\s+([0-9a-f]+)\s*$")
_ENTRY_RE = re.compile(r"^\.visible\s+\.entry\s+([\w$]+)\(")
_PARAM_RE = re.compile(r"^\s*\.param\s+\.u64\s+(?:\.ptr\s+)?(?:\.global\s+)?(?:\.align\s+\d+\s+)?([\w$]+)\s*,?\s*$")
_RET_RE = re.compile(r"^(\s*)(@!?%p\d+\s+)?ret(\.uni)?;\s*$")
_LABEL_RE = re.compile(r"^\s*([$\w]+):")
_BRA_RE = re.compile(r"\bbra(?:\.uni)?\s+([$\w]+);")
_COND_BRA_RE = re.compile(r"^(\s*)@(!?)(%[\w]+)\s+bra(?:\.uni)?\s+([$\w]+);\s*$")
_UNCOND_BRA_RE = re.compile(r"^\s*bra(?:\.uni)?\s+([$\w]+);\s*$")

# the tag a record stores, as the record code sets it (read back by `proton-lite compile`)
RECORD_TAG_RE = re.compile(r"(?:mov\.u32\s+%pl_tag\d,\s*|// proton_lite: tag )(\d+)")
UNROLLED_COPY = "// proton_lite: unrolled copy of a record"  # a record site's second copy (_pair_tight_loops)

STAGING_ALIGN = 128  # bytes; start of the staging area within the dynamic shared memory
SHARED_TOTAL_LIMIT = 227 * 1024  # opt-in dynamic + static shared per CTA on Hopper


class InstrumentationError(Exception):
    """The kernel cannot be instrumented as asked; the message says why and what to change."""


@dataclass
class MarkerSite:
    line: int  # index into the PTX lines
    kind: str  # "enter" | "exit"
    name: str
    in_loop: bool = False
    reg_set: int = 0  # which of the two register sets the record uses
    keeps_other: bool = False  # keeps the other set's clock (and address) live (_link_close_sites)
    followed: bool = False  # the next record is close behind this one
    defers: bool = False  # last record of a loop body: stored by the next record (_defer_loop_tails)
    flushes: bool = False  # first record of such a loop body: stores the deferred record too
    loop: int = -1  # the deferring loop's number (its pending predicate %pl_pd<loop>), for both records
    by_address: bool = False  # global: the deferred record is stored at the first record's address - 8
    pairs: bool = False  # first record of a tight loop body: stored by the next one (_pair_tight_loops)
    stores_pair: bool = False  # second record of such a body: stores both
    unrolled: int = -1  # global staging: the number of the tight loop unrolled twice around the pair


@dataclass
class PtxScan:
    """What the pass learned about a kernel's PTX before rewriting it."""

    kernel: str
    profile_param: str
    sites: list[MarkerSite] = field(default_factory=list)
    scopes: list[str] = field(default_factory=list)
    back_edges: list[tuple[int, int]] = field(default_factory=list)  # (loop head's label line, branch line)

    @property
    def loop_sites(self) -> int:
        return sum(s.in_loop for s in self.sites)

    @property
    def keeps_alive(self) -> bool:
        return any(s.keeps_other for s in self.sites)

    @property
    def straight_line_records(self) -> int:
        """Upper bound on records per unit when no marker is inside a loop."""
        return len(self.sites)

    def loop_bodies(self):
        """(head label line, back edge line, the record sites between them, whether this is
        the head's only back edge) for every back edge, in order."""
        heads = [head for head, _ in self.back_edges]
        for head, branch in self.back_edges:
            yield head, branch, [s for s in self.sites if head < s.line < branch], heads.count(head) == 1


CLOSE_GAP = 8  # PTX instructions: a record at most this far behind another one is "close"
MIN_CHAIN = 3  # outside loops, runs of close records shorter than this keep one register set


def _is_instruction(line: str) -> bool:
    t = line.strip()
    return t.endswith(";") and not t.startswith((".", "//"))


def _gap(lines: list[str], start: int, end: int) -> int | None:
    """Instructions strictly between lines ``start`` and ``end`` if no label, branch or ret
    lies between them (one basic block), else None."""
    n = 0
    for line in lines[start + 1:end]:
        if _LABEL_RE.match(line) or _BRA_RE.search(line) or _RET_RE.match(line):
            return None
        n += _is_instruction(line)
    return n


def _link_close_sites(lines: list[str], sites: list[MarkerSite], back_edges: list[tuple[int, int]]) -> None:
    """Give records that follow each other closely different register sets.

    A store reads its registers several cycles after it issues (~12 on the H100); a timer
    read that writes a register the previous store still reads waits for it.  ptxas reuses
    the same registers for every record unless their values are live at the same time, so
    a close record (at most CLOSE_GAP instructions behind the previous one, in the same
    basic block, or at the top of a short loop whose previous iteration ended with a record)
    takes the other register set and folds the other set's clock (in loops also its
    address) into an accumulator (one ``xor``): both records' registers are then live
    together and ptxas keeps them apart.  On the H100 back-to-back records went from 14.2 to
    7.8 cycles and a tight loop from 25.6 to 13.6 (docs/benchmarks.md).  Records far apart
    gain nothing and keep set 0.  Outside loops, runs shorter than MIN_CHAIN keep set 0 too:
    a pair of records after bench.py's matmul K loop, given two sets, changed how ptxas
    scheduled the kernel's epilogue, and the matmul ran 3.5% slower for a few cycles saved.
    """
    chains: list[list[MarkerSite]] = []  # runs of records, each close behind the one before
    for site in sites:
        gap = _gap(lines, chains[-1][-1].line, site.line) if chains else None
        if gap is not None and gap <= CLOSE_GAP:
            chains[-1].append(site)
        else:
            chains.append([site])
    for chain in chains:
        # outside loops a short run gains a wait or two per unit and CTA, less than what a
        # different schedule around it may cost (design.md §2): only longer runs take turns
        if len(chain) < MIN_CHAIN and not any(s.in_loop for s in chain):
            continue
        for prev, site in zip(chain, chain[1:]):
            site.reg_set, site.keeps_other = 1 - prev.reg_set, True
            prev.followed = True
    # the first record of a short loop body follows the last record of the previous iteration
    for head, branch in back_edges:
        body = [s for s in sites if head < s.line < branch]
        if len(body) < 2 or body[0].keeps_other or body[0].reg_set == body[-1].reg_set:
            continue
        lead, tail = _gap(lines, head, body[0].line), _gap(lines, body[-1].line, branch)
        if lead is not None and tail is not None and lead + tail <= CLOSE_GAP:
            body[0].keeps_other = True
            body[-1].followed = True


def scan(ptx: str) -> PtxScan:
    lines = ptx.split("\n")
    kernel, param, params_open = None, None, False
    sites: list[MarkerSite] = []
    labels: dict[str, int] = {}
    back_edges: list[tuple[int, int]] = []
    for i, line in enumerate(lines):
        if kernel is None:
            m = _ENTRY_RE.match(line)
            if m:
                kernel, params_open = m.group(1), True
            continue
        if params_open:
            pm = _PARAM_RE.match(line)
            if pm:
                param = pm.group(1)
            if line.strip().startswith(")"):
                params_open = False
            continue
        mm = _MARKER_RE.match(line)
        if mm:
            sites.append(MarkerSite(i, mm.group(1), bytes.fromhex(mm.group(2)).decode("utf-8")))
            continue
        lm = _LABEL_RE.match(line)
        if lm:
            labels[lm.group(1)] = i
        bm = _BRA_RE.search(line)
        if bm and bm.group(1) in labels:
            back_edges.append((labels[bm.group(1)], i))
    if kernel is None or param is None:
        raise InstrumentationError("proton_lite: no kernel entry with a profile-scratch parameter found in the PTX; "
                                   "this Triton version is not supported (need 3.6 or newer)")
    for site in sites:
        site.in_loop = any(start <= site.line <= end for start, end in back_edges)
    if kernel != CALIBRATION_KERNEL:
        # the calibration kernel measures what a record adds inside a scope around real work,
        # where records are far apart: its back-to-back records stay on one register set
        _link_close_sites(lines, sites, back_edges)
    scopes: list[str] = []
    for site in sites:
        if site.name not in scopes:
            scopes.append(site.name)
    if len(scopes) > MAX_SCOPES:
        raise InstrumentationError(f"proton_lite: kernel {kernel} has {len(scopes)} distinct scopes; the record "
                                   f"format holds at most {MAX_SCOPES}. Merge scopes or remove some.")
    return PtxScan(kernel, param, sites, scopes, back_edges)


def _opaque_zero(reg: str) -> list[str]:
    """Sets ``reg`` to 0 in a way ptxas can neither compute nor rebuild from other registers,
    and that differs between the lanes of a warp as far as ptxas knows (so it stays off the
    uniform datapath): the top bit of the upper half of %clock64 (a cycle counter, 2^63 after
    more than a century) xor the thread index (below 2^31). Each call reads the counter
    again, so two such zeros are unrelated for ptxas."""
    return [f"mov.u32 {reg}, %clock_hi;", f"xor.b32 {reg}, {reg}, %pl_r0;", f"shr.u32 {reg}, {reg}, 31;"]


class _Emitter:
    """Generates the PTX snippets; registers are prefixed %pl_ so they never clash with LLVM's."""

    REGS = (".reg .b32 %pl_r<26>;", ".reg .b64 %pl_d<13>;", ".reg .pred %pl_p<8>;",
            # one of each per register set (_link_close_sites); set 2 holds a deferred record
            # (_defer_loop_tails) until the next record stores it
            ".reg .b32 %pl_clk<3>;", ".reg .b32 %pl_tag<3>;", ".reg .b32 %pl_slot<3>;",
            ".reg .b32 %pl_sa<3>;", ".reg .b64 %pl_ga<3>;",
            ".reg .b32 %pl_acc;", ".reg .b64 %pl_accd;", ".reg .b32 %pl_ptr;", ".reg .b32 %pl_sink;",
            ".reg .b32 %pl_gs2;")

    def __init__(self, layout: BufferLayout, param: str, smem_symbol: str, smem_offset: int = 0,
                 keeps_alive: bool = False, loop_sites: bool = False, defers: int = 0, by_address: bool = False,
                 unrolled_tags: list[tuple[int, int]] | None = None) -> None:
        self.layout = layout
        self.pool = PoolCode(layout) if layout.pool else None  # records past the unit block: passes/pool.py
        self.param = param
        self.smem = smem_symbol
        self.smem_offset = smem_offset
        self.keeps_alive = keeps_alive  # some record folds the other set's clock into %pl_acc
        # records in loops (shared staging, clamp) store at a saturating pointer, which every
        # record then advances: one min per record instead of a min and a multiply-add before
        # the store (record_cost.py); records outside loops keep the index, which ptxas folds
        self.uses_pointer = loop_sites and layout.staging == "shared" and layout.mode == "clamp"
        self.defers = defers  # loops whose last record is stored by the next record (set 2)
        self.by_address = by_address  # some of them store it at the next record's address - 8 (global)
        # per tight loop unrolled twice (_pair_tight_loops, global staging): its two records' tags
        self.unrolled_tags = unrolled_tags or []

    @property
    def capacity(self) -> str:
        """The capacity operand of bound checks: a register for kernels sized at launch."""
        return "%pl_r24" if self.layout.sized_at_launch else str(self.layout.capacity)

    def registers(self) -> list[str]:
        """The declarations: REGS, one pending predicate per deferring loop, and per loop
        unrolled twice four tag and clock registers (one per record of each copy) and two
        addresses and counts of slots left (one per copy)."""
        out = list(self.REGS) + [f".reg .pred %pl_pd<{max(1, self.defers)}>;"]
        if self.pool is not None:
            out += list(self.pool.REGS)
        if self.unrolled_tags:
            n = len(self.unrolled_tags)
            out += [f".reg .b32 %pl_ut<{4 * n}>;", f".reg .b32 %pl_uc<{4 * n}>;", f".reg .b32 %pl_uo<{2 * n}>;",
                    f".reg .b64 %pl_up<{2 * n}>;", ".reg .b32 %pl_un;", ".reg .b32 %pl_ud;"]
        return out

    @property
    def unit_threads(self) -> int:
        return self.layout.unit_warps * 32

    def prologue(self) -> list[str]:
        L = self.layout
        shift = (self.unit_threads - 1).bit_length()
        out = [
            "// proton_lite: prologue",
            "mov.u32 %pl_r0, %tid.x;",
            f"shr.u32 %pl_r1, %pl_r0, {shift};",  # unit index
            f"and.b32 %pl_r2, %pl_r0, {self.unit_threads - 1};",  # thread within unit
            "setp.eq.u32 %pl_p0, %pl_r2, 0;",  # leader lane of the unit
            "mov.u32 %pl_r3, 0;",  # write cursor
            # CTA block in the profile buffer
            f"ld.param.u64 %pl_d0, [{self.param}];",
            "mov.u32 %pl_r5, %ctaid.x;",
            "mov.u32 %pl_r6, %ctaid.y;",
            "mov.u32 %pl_r7, %ctaid.z;",
            "mov.u32 %pl_r8, %nctaid.x;",
            "mov.u32 %pl_r9, %nctaid.y;",
            "mad.lo.u32 %pl_r6, %pl_r7, %pl_r9, %pl_r6;",
            "mad.lo.u32 %pl_r5, %pl_r6, %pl_r8, %pl_r5;",
        ]
        if L.sized_at_launch:
            # capacity from the launch prefix (layout.py); strides follow from it at run time
            out += [
                "ld.global.u32 %pl_r24, [%pl_d0];",
                "shr.u32 %pl_r25, %pl_r24, 24;",
                f"setp.eq.u32 %pl_p5, %pl_r25, {LAUNCH_CAPACITY_TAG};",
                f"and.b32 %pl_r24, %pl_r24, {MAX_LAUNCH_CAPACITY};",
                "selp.u32 %pl_r24, %pl_r24, 0, %pl_p5;",  # no tag: not our buffer, no records
            ]
            if self.pool is not None:
                out += self.pool.prologue()
            out += [
                f"add.s64 %pl_d0, %pl_d0, {LAUNCH_PREFIX_BYTES};",
                f"mul.wide.u32 %pl_d11, %pl_r24, {RECORD_BYTES};",
                f"add.s64 %pl_d11, %pl_d11, {UNIT_HEADER_BYTES + L.sink_slots * RECORD_BYTES};",  # unit_bytes
                f"mul.lo.u64 %pl_d12, %pl_d11, {L.units};",
                f"add.s64 %pl_d12, %pl_d12, {CTA_HEADER_BYTES};",  # stride
            ]
            if self.pool is not None:
                out += self.pool.pool_base()
            out += [
                "cvt.u64.u32 %pl_d1, %pl_r5;",
                "mul.lo.u64 %pl_d1, %pl_d1, %pl_d12;",
                "add.s64 %pl_d0, %pl_d0, %pl_d1;",
                "cvt.u64.u32 %pl_d1, %pl_r1;",
                "mul.lo.u64 %pl_d1, %pl_d1, %pl_d11;",
            ]
        else:
            out += [
                f"mul.wide.u32 %pl_d1, %pl_r5, {L.stride};",
                "add.s64 %pl_d0, %pl_d0, %pl_d1;",
                f"mul.wide.u32 %pl_d1, %pl_r1, {L.unit_bytes};",
            ]
        out += [
            # this unit's block: CTA block + header + unit * unit_bytes
            "add.s64 %pl_d2, %pl_d0, %pl_d1;",
            f"add.s64 %pl_d2, %pl_d2, {CTA_HEADER_BYTES};",
        ]
        if L.staging == "shared":
            out += [f"mov.u32 %pl_r4, {self.smem};",
                    f"add.u32 %pl_r4, %pl_r4, {self.smem_offset};",
                    f"mad.lo.u32 %pl_r4, %pl_r1, {staged_slots(L) * RECORD_BYTES}, %pl_r4;"]
            if self.uses_pointer:  # the sink is slot `capacity`
                out += ["mov.u32 %pl_ptr, %pl_r4;", f"add.u32 %pl_sink, %pl_r4, {L.capacity * RECORD_BYTES};"]
        else:
            out += [f"add.s64 %pl_d3, %pl_d2, {UNIT_HEADER_BYTES};"]  # records go straight to global
            if L.sized_at_launch:
                # the stores' predicate: capacity > 0 (and the unit's leader). The sink slots
                # would take the records of a capacity-0 launch too, but without this
                # predicate ptxas scheduled bench.py's per-K-iteration matmul differently and
                # it ran 4.6-4.7% over plain against 2.6-3.1% (docs/benchmarks.md, sixth version)
                leader = ", %pl_p0" if self.unit_threads > 32 else ""
                if self.pool is not None:  # with a pool, records may come after a unit block of 0
                    out.append("mov.pred %pl_p7, %pl_p0;" if leader else "setp.eq.u32 %pl_p7, 0, 0;")
                else:
                    out.append(f"setp.ne{'.and' if leader else ''}.u32 %pl_p7, %pl_r24, 0{leader};")
                if self.by_address:  # the second sink slot
                    out.append("add.u32 %pl_gs2, %pl_r24, 1;")
            out += self.unrolled_prologue()
        if self.defers:  # nothing deferred yet: the deferred stores store nothing
            out += [f"setp.ne.u32 %pl_pd{n}, 0, 0;" for n in range(self.defers)]
            out += ["mov.u32 %pl_tag2, 0;", "mov.u32 %pl_clk2, 0;",
                    "mov.u32 %pl_sa2, 0;" if L.staging == "shared" else "mov.u64 %pl_ga2, 0;"]
        if self.keeps_alive:  # defined on every path, also where a loop's first record reads them
            out += ["mov.u32 %pl_acc, 0;", "mov.u64 %pl_accd, 0;"]
            for k in range(2):
                out += [f"mov.u32 %pl_clk{k}, 0;", f"mov.u32 %pl_sa{k}, 0;", f"mov.u64 %pl_ga{k}, 0;"]
        out += [
            "setp.eq.u32 %pl_p1, %pl_r0, 0;",
            "@!%pl_p1 bra $pl_prologue_done;",
            "mov.u32 %pl_r10, %smid;",
            "mov.u64 %pl_d4, %globaltimer;",
            "mov.u64 %pl_d5, %clock64;",
            f"mov.u32 %pl_r11, {CTA_MAGIC};",
            "st.global.v2.u32 [%pl_d0], {%pl_r11, %pl_r10};",
            "st.global.u64 [%pl_d0+8], %pl_d4;",  # 8-byte aligned only: no v2.u64 (needs 16)
            "st.global.u64 [%pl_d0+16], %pl_d5;",
            f"mov.u32 %pl_r11, {LAYOUT_VERSION};",
            f"mov.u32 %pl_r12, {L.units};",
            "st.global.v2.u32 [%pl_d0+24], {%pl_r11, %pl_r12};",
            "$pl_prologue_done:",
        ]
        return out

    def record(self, site: MarkerSite, tag: int) -> list[str]:
        L = self.layout
        # set 2: a deferred record (_defer_loop_tails); a tight loop's pair: sets 0 and 1
        k = 2 if site.defers else 0 if site.pairs else 1 if site.stores_pair else \
            site.reg_set if self.keeps_alive else 0
        # a first record that stores the deferred one reads set 2 after its timer read, which
        # keeps set 2 live without an xor
        keep = site.keeps_other and self.keeps_alive and not site.flushes
        clk, tg, addr = f"%pl_clk{k}", f"%pl_tag{k}", f"%pl_sa{k}" if L.staging == "shared" else f"%pl_ga{k}"
        # %clock is the low half of %clock64 (PTX ISA); ptxas reads it with CS2R.32 straight into
        # the register the store takes, where the 64-bit read needs a move. That matters where
        # records are close together or in loops; a record on its own keeps the 64-bit read,
        # which leaves the code around it as it was (with %clock before bench.py's matmul K
        # loop, ptxas scheduled that loop differently; design.md §2)
        if site.pairs:  # its store comes with the next record's (_pair_tight_loops)
            return ["// proton_lite: record", f"mov.u32 {clk}, %clock;", f"mov.u32 {tg}, {tag};",
                    "add.u32 %pl_r3, %pl_r3, 1;"]
        if site.stores_pair:  # both records, at the saturating pointer and the slot after it
            return ["// proton_lite: record", f"mov.u32 {clk}, %clock;", f"mov.u32 {tg}, {tag};",
                    "@%pl_p0 st.shared.v2.u32 [%pl_ptr], {%pl_tag0, %pl_clk0};",
                    f"@%pl_p0 st.shared.v2.u32 [%pl_ptr+{RECORD_BYTES}], {{{tg}, {clk}}};",
                    f"add.u32 %pl_ptr, %pl_ptr, {2 * RECORD_BYTES};", "min.u32 %pl_ptr, %pl_ptr, %pl_sink;",
                    "add.u32 %pl_r3, %pl_r3, 1;"]
        if site.in_loop or keep or site.followed:
            out = ["// proton_lite: record", f"mov.u32 {clk}, %clock;"]
        else:
            out = ["// proton_lite: record", "mov.u64 %pl_d6, %clock64;", f"cvt.u32.u64 {clk}, %pl_d6;"]
        if keep:  # the tag shares a register pair with the clock; in loops the address counts too
            other = 1 - site.reg_set
            out.append(f"xor.b32 %pl_acc, %pl_acc, %pl_clk{other};")
            if site.in_loop:
                out.append(f"xor.b32 %pl_acc, %pl_acc, %pl_sa{other};" if L.staging == "shared" else
                           f"xor.b64 %pl_accd, %pl_accd, %pl_ga{other};")
        out.append(f"mov.u32 {tg}, {tag};")
        # Warp granularity: every lane of the warp stores the same record to the same address
        # (Triton's control flow is uniform within a warp), so the store needs no leader
        # predicate and ptxas may merge adjacent records into one wider store. Except in loops
        # with shared staging, where nothing merges and a store from the leader lane alone was
        # cheaper: 12.25 against 12.8 cycles per record in a tight loop (docs/benchmarks.md).
        # Larger units keep the leader lane: their other warps must not write the unit's slots.
        lane_stores = self.unit_threads == 32 and not (site.in_loop and L.staging == "shared")
        leader = "" if lane_stores else "%pl_p0"
        pred = f"@{leader} " if leader else ""
        if L.staging == "shared":
            if L.mode == "circular":
                out += [f"and.b32 %pl_slot{k}, %pl_r3, {L.capacity - 1};",
                        f"mad.lo.u32 {addr}, %pl_slot{k}, 8, %pl_r4;"]
            elif site.in_loop:
                # the saturating pointer: ready before the record, one min after it
                out.append(f"mov.u32 {addr}, %pl_ptr;")
                if site.flushes:
                    out.append(self.deferred_store(site.loop))
            else:
                # past the capacity: the sink slot, never copied out (staged_slots); with a
                # cursor known to ptxas (records before any loop) the address folds to base + offset
                out += [f"min.u32 %pl_slot{k}, %pl_r3, {L.capacity};", f"mad.lo.u32 {addr}, %pl_slot{k}, 8, %pl_r4;"]
            out.append(self._defer(pred, site.loop) if site.defers else
                       f"{pred}st.shared.v2.u32 [{addr}], {{{tg}, {clk}}};")
            if self.uses_pointer:
                out.append("add.u32 %pl_ptr, %pl_ptr, 8;")
                out.append("min.u32 %pl_ptr, %pl_ptr, %pl_sink;")
        else:
            if L.mode == "circular":
                out.append(f"and.b32 %pl_slot{k}, %pl_r3, {L.capacity - 1};")
            elif site.defers and site.by_address:  # its slot comes from the next record's address
                out.append(self._defer("@%pl_p7 " if L.sized_at_launch else pred, site.loop))
                out.append("add.u32 %pl_r3, %pl_r3, 1;")
                return out
            else:
                # past the capacity: the unit's sink slots (layout.overflow == "sink"), so that
                # no record needs a compare or a predicate of its own (the per-record compare
                # and predicated store cost a predicate's latency per record: 27 -> 22 cycles
                # in a tight loop, docs/benchmarks.md); the first record of a loop whose last
                # one is stored at this address - 8 takes the second sink slot, so that the
                # deferred record, one slot below, never lands on a kept one
                sink = self.capacity if not (site.flushes and site.by_address) else \
                    "%pl_gs2" if L.sized_at_launch else str(L.capacity + 1)
                out.append(f"min.u32 %pl_slot{k}, %pl_r3, {sink};")
                if L.sized_at_launch:
                    pred = "@%pl_p7 "  # capacity > 0 (and the unit's leader), from the prologue
            out += [f"mul.wide.u32 {addr}, %pl_slot{k}, 8;", f"add.s64 {addr}, {addr}, %pl_d3;"]
            if site.flushes:
                out.append(self.deferred_store(site.loop, f"{addr}+-8" if site.by_address else None))
            out.append(self._defer(pred, site.loop) if site.defers else
                       f"{pred}st.global.v2.u32 [{addr}], {{{tg}, {clk}}};")
        out.append("add.u32 %pl_r3, %pl_r3, 1;")
        return out

    def unrolled_prologue(self) -> list[str]:
        """Tags of the records in loops unrolled twice, each in a register of its own for the
        whole kernel.

        A store reads its {tag, clock} pair from two adjacent registers. With the tag a
        constant, ptxas put it into a register shared with other constants and rewrote it in
        every iteration, and the next write waited for the previous store to read it; and it
        gave both copies of a record one clock register. A tag that ptxas can neither compute
        nor derive from another register in one instruction stays in one register all along,
        and the clock beside it is then different for every record of the unrolled body. So
        each tag is the constant plus a zero of its own (``_opaque_zero``). (Tags computed
        from one shared zero, ``z + tag`` and ``tag - z``, were rebuilt in the loop from each
        other, with waits; a warp-uniform tag was copied from a uniform register into the
        store's in every iteration.)"""
        if not self.unrolled_tags:
            return []
        out = []
        for n, tags in enumerate(self.unrolled_tags):
            for k, tag in enumerate(tags + tags):
                t = f"%pl_ut{4 * n + k}"
                out += [*_opaque_zero(t), f"add.u32 {t}, {t}, {tag};"]
        return out

    def unrolled_entry(self, n: int) -> list[str]:
        """Before loop ``n``'s head (unrolled twice): the first copy's address, slot
        min(count, capacity), and the slots left after it before the sink slots. The second
        copy's address is moved on by the first copy before each of its pairs
        (unrolled_record), so it starts one step back: two slots before the first copy's,
        with two more slots left; the first step then puts it two slots after the first
        copy's, or at the sink slots."""
        a, b = 2 * n, 2 * n + 1
        return ["// proton_lite: unrolled loop entry",
                f"min.u32 %pl_un, %pl_r3, {self.capacity};", f"sub.u32 %pl_uo{a}, {self.capacity}, %pl_un;",
                f"mul.wide.u32 %pl_up{a}, %pl_un, {RECORD_BYTES};", f"add.s64 %pl_up{a}, %pl_up{a}, %pl_d3;",
                f"add.u32 %pl_uo{b}, %pl_uo{a}, 2;", f"add.s64 %pl_up{b}, %pl_up{a}, {-2 * RECORD_BYTES};"]

    def unrolled_record(self, site: MarkerSite, tag: int, copy: int) -> list[str]:
        """A record of loop ``site.unrolled``'s pair, in copy ``copy`` of the body. The first
        reads the clock; the second reads it, stores both records at this copy's address, and
        then moves the other copy's address on by four slots, or by the slots left before the
        sink slots, in place: to where the other copy stores next (the first copy moves the
        second's for this pass, the second the first's for the next pass). Each address is
        thus live all through the loop and written once per pass, a copy after its stores:
        ptxas can give its register to nothing else (it had shared one copy's address with
        the other copy's clock, and waited). The first copy is the record site (its tag is
        named in a comment: the code reads it from a register); the second is marked as a
        copy."""
        n = site.unrolled
        k = 4 * n + 2 * copy + site.stores_pair
        out = ["// proton_lite: record", f"// proton_lite: tag {tag}"] if copy == 0 else [UNROLLED_COPY]
        out.append(f"mov.u32 %pl_uc{k}, %clock;")
        if site.pairs:
            return out
        me, other = 2 * n + copy, 2 * n + 1 - copy
        # warp units: every lane stores the same record (record()); larger units: the leader
        pred = "" if self.unit_threads == 32 else "@%pl_p0 "
        return out + [
            f"{pred}st.global.v2.u32 [%pl_up{me}], {{%pl_ut{k - 1}, %pl_uc{k - 1}}};",
            f"{pred}st.global.v2.u32 [%pl_up{me}+{RECORD_BYTES}], {{%pl_ut{k}, %pl_uc{k}}};",
            "add.u32 %pl_r3, %pl_r3, 2;",
            # four slots on, or as many as are left before the sink slots
            f"min.u32 %pl_ud, %pl_uo{other}, 4;",
            f"sub.u32 %pl_uo{other}, %pl_uo{other}, %pl_ud;",
            f"mad.wide.u32 %pl_up{other}, %pl_ud, {RECORD_BYTES}, %pl_up{other};",
        ]

    @staticmethod
    def _defer(pred: str, loop: int) -> str:
        """In place of a deferred record's store: it is stored later under its loop's own
        predicate (%pl_pd<loop>). Under the stores' predicate, ptxas branched around both
        stores of the first record of the loop instead of predicating them."""
        return f"mov.pred %pl_pd{loop}, {pred.strip()[1:]};" if pred else f"setp.eq.u32 %pl_pd{loop}, 0, 0;"

    def deferred_store(self, loop: int, address: str | None = None) -> str:
        """The store of loop ``loop``'s deferred last record (set 2), at its own address (set
        2's) or at ``address``. %pl_pd<loop> holds the predicate the record would have stored
        under; it is false until that loop deferred a record, and again once the loop is left."""
        if self.layout.staging == "shared":
            return f"@%pl_pd{loop} st.shared.v2.u32 [%pl_sa2], {{%pl_tag2, %pl_clk2}};"
        return f"@%pl_pd{loop} st.global.v2.u32 [{address or '%pl_ga2'}], {{%pl_tag2, %pl_clk2}};"

    def loop_exit_store(self, loop: int, by_address: bool) -> list[str]:
        """After a deferring loop's back edge, on the way out: its pending record, then the
        predicate is cleared, so that no later loop (or this one, entered again) stores it
        again (at the next record's address - 8 that would be another record's slot). A
        record stored by address was the last one (slot count - 1, or the sink past the
        capacity)."""
        out = ["// proton_lite: deferred record"]
        if by_address:
            out += ["sub.u32 %pl_slot2, %pl_r3, 1;", f"min.u32 %pl_slot2, %pl_slot2, {self.capacity};",
                    "mul.wide.u32 %pl_ga2, %pl_slot2, 8;", "add.s64 %pl_ga2, %pl_ga2, %pl_d3;"]
        return out + [self.deferred_store(loop), f"setp.ne.u32 %pl_pd{loop}, 0, 0;"]

    def keep_alive_sink(self) -> list[str]:
        """Stores %pl_acc where nobody reads it, so that ptxas keeps the xor that keeps the
        register sets apart: the first sink slot, in shared or global memory."""
        L = self.layout
        if not self.keeps_alive:
            return []
        if L.staging == "shared":
            return [f"st.shared.u32 [%pl_r4+{L.capacity * RECORD_BYTES}], %pl_acc;"]
        out = ["cvt.u64.u32 %pl_d6, %pl_acc;", "xor.b64 %pl_accd, %pl_accd, %pl_d6;"]
        if L.mode == "circular":  # no sink: slot ``count``, if it is a free one
            return out + [f"setp.lt.u32 %pl_p6, %pl_r3, {self.capacity};", "mul.wide.u32 %pl_ga0, %pl_r3, 8;",
                          "add.s64 %pl_ga0, %pl_ga0, %pl_d3;", "@%pl_p6 st.global.u64 [%pl_ga0], %pl_accd;"]
        return out + [f"mul.wide.u32 %pl_ga0, {self.capacity}, 8;", "add.s64 %pl_ga0, %pl_ga0, %pl_d3;",
                      "st.global.u64 [%pl_ga0], %pl_accd;"]  # the first sink slot

    def epilogue(self, k: int) -> list[str]:
        L = self.layout
        out = [
            "// proton_lite: epilogue",
            "mov.u64 %pl_d8, %globaltimer;",
            "mov.u64 %pl_d9, %clock64;",
        ] + self.keep_alive_sink()
        if L.staging == "shared":
            # the leader warp of each unit copies its records, 32 lanes at a time
            out += [
                "setp.lt.u32 %pl_p3, %pl_r2, 32;",
                f"@!%pl_p3 bra $pl_done_{k};",
                "bar.warp.sync -1;",
                f"min.u32 %pl_r17, %pl_r3, {L.capacity};",
                "and.b32 %pl_r18, %pl_r0, 31;",
                f"$pl_copy_{k}:",
                "setp.ge.u32 %pl_p4, %pl_r18, %pl_r17;",
                f"@%pl_p4 bra $pl_copied_{k};",
                "mad.lo.u32 %pl_r19, %pl_r18, 8, %pl_r4;",
                "ld.shared.v2.u32 {%pl_r20, %pl_r21}, [%pl_r19];",
                "mul.wide.u32 %pl_d10, %pl_r18, 8;",
                "add.s64 %pl_d10, %pl_d10, %pl_d2;",
                f"st.global.v2.u32 [%pl_d10+{UNIT_HEADER_BYTES}], {{%pl_r20, %pl_r21}};",
                "add.u32 %pl_r18, %pl_r18, 32;",
                f"bra.uni $pl_copy_{k};",
                f"$pl_copied_{k}:",
            ]
        out += [
            f"@!%pl_p0 bra $pl_done_{k};",
            f"mov.u32 %pl_r22, {UNIT_MAGIC};",
            "st.global.v2.u32 [%pl_d2], {%pl_r3, %pl_r22};",
            "st.global.u64 [%pl_d2+8], %pl_d8;",
            "st.global.u64 [%pl_d2+16], %pl_d9;",
            f"$pl_done_{k}:",
        ]
        return out


def staged_slots(layout: BufferLayout) -> int:
    """Record slots per unit in shared memory: the capacity, then two sink slots (records past
    the capacity, a tight loop's pair stored at the sink, the keep-alive accumulator), rounded
    up to keep every unit's slots 16-byte aligned (ptxas merges two adjacent records into one
    16-byte store)."""
    return (layout.capacity + 3) & ~1


def shared_bytes(layout: BufferLayout) -> int:
    return layout.units * staged_slots(layout) * RECORD_BYTES


def staging_offset(triton_shared: int) -> int:
    """Where the staging area starts in the dynamic shared memory: after Triton's own bytes.

    Appending to the dynamic region (and raising the kernel's ``shared`` size) leaves every
    address Triton uses unchanged; a static ``.shared`` array would instead move the dynamic
    region and break the 1024-byte alignment that swizzled wgmma/TMA tiles rely on.
    """
    return -(-max(triton_shared, 0) // STAGING_ALIGN) * STAGING_ALIGN


def rewrite(ptx: str, info: PtxScan, layout: BufferLayout, triton_shared: int = 0,
            pool_plan: PoolPlan | None = None) -> str:
    """Return instrumented PTX for ``info``'s kernel with the given buffer layout (and, for a
    layout with a pool, the checks of ``pool_plan``)."""
    if layout.sized_at_launch and (layout.staging != "global" or layout.mode != "clamp"):
        raise InstrumentationError("proton_lite: a buffer sized at launch needs global staging and clamp mode")
    if layout.pool != (pool_plan is not None) or (layout.pool and not layout.sized_at_launch):
        raise InstrumentationError("proton_lite: internal error: a pool needs its plan and a buffer sized at launch")
    if (layout.staging == "global" and layout.mode == "clamp") != (layout.overflow == "sink") or \
            layout.capacity < 1:
        raise InstrumentationError(f"proton_lite: internal error: layout {layout} does not match the record code "
                                   "(global staging in clamp mode stores past the capacity in sink slots)")
    smem_symbol = f"__proton_lite_dyn_smem_{info.kernel}"  # aliases the dynamic shared base
    lines = ptx.split("\n")
    # with a pool a check may switch regions between two records: no record derives its
    # address from another one's (pairs, unrolled copies, stores by address; passes/pool.py)
    unrolled = _pair_tight_loops(lines, info, layout.staging == "global") \
        if layout.mode == "clamp" and not layout.pool else {}
    keeps_alive = info.keeps_alive and (layout.staging == "shared" or layout.mode == "clamp")
    hoisted, moved = _loop_bookkeeping(lines, info)
    # clamp mode only: in a circular buffer a late store could land on a newer record's slot
    flush_after = _defer_loop_tails(lines, info, moved, layout.staging == "shared", by_address=not layout.pool) \
        if layout.mode == "clamp" else {}
    checks = {line: (n, room) for n, (line, room) in enumerate(sorted(pool_plan.checks.items()))} \
        if pool_plan is not None else {}
    body_end = pool_plan.body_end if pool_plan is not None else -1
    ids = {name: i for i, name in enumerate(info.scopes)}
    site_at = {s.line: s for s in info.sites}

    def tag(site: MarkerSite) -> int:
        return encode_tag(ids[site.name], site.kind == "exit")

    pair_tags = [tuple(tag(s) for s in info.sites if s.unrolled == n) for n in range(len(unrolled))]
    emit = _Emitter(layout, info.profile_param, smem_symbol, staging_offset(triton_shared), keeps_alive,
                    info.loop_sites > 0, defers=len(flush_after), by_address=any(s.by_address for s in info.sites),
                    unrolled_tags=pair_tags)
    entries = {head: n for n, head in unrolled.values()}

    def body_line(i: int, copy: int = 0) -> list[str]:
        """Line ``i`` as emitted in copy ``copy`` of its loop body."""
        if i in moved:
            return []
        site = site_at.get(i)
        if site is None:
            return [lines[i]]
        record = emit.unrolled_record(site, tag(site), copy) if site.unrolled >= 0 else emit.record(site, tag(site))
        return hoisted.get(i, []) + ["\t" + r for r in record]

    out: list[str] = []
    in_body, regs_done, ret_count = False, False, 0
    entry_seen = False
    for i, line in enumerate(lines):
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
    return "\n".join(out)


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
        if any(_LABEL_RE.match(lines[j]) for j in between):
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


def function_body(lines: list[str]) -> tuple[int, int]:
    """(first line inside the kernel's ``{``, line of its closing ``}``): braces counted on
    every line, so inline-asm blocks and vector operands nest."""
    depth, start = 0, None
    for i, line in enumerate(lines):
        if start is None:
            if _ENTRY_RE.match(line):
                start = -1
            continue
        code = line.split("//", 1)[0]
        opens, closes = code.count("{"), code.count("}")
        if start == -1:
            if opens:
                start, depth = i + 1, opens - closes
            continue
        depth += opens - closes
        if depth <= 0:
            return start, i
    raise InstrumentationError("proton_lite: could not find the end of the kernel's body in its PTX")


def strip_markers(ptx: str) -> str:
    """Remove the markers of a kernel that is compiled in a session but not selected for profiling."""
    return "\n".join(line for line in ptx.split("\n") if not _MARKER_RE.match(line))
