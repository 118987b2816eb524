"""The PTX the pass emits (``_Emitter``): prologue, records, epilogue, unit copy-out, the
launch-prefix reads of kernels sized at launch (where records are staged: ``ptx_staging``;
the copies of staging in blocks: ``ptx_blocks``; the records of unrolled and deferring
loops: ``ptx_loop_code``)."""
from __future__ import annotations

from proton_lite.layout import (CTA_HEADER_BYTES, LAUNCH_CAPACITY_TAG, LAUNCH_PREFIX_BYTES, MAX_LAUNCH_CAPACITY,
                                RECORD_BYTES, UNIT_HEADER_BYTES, UNIT_MAGIC, BufferLayout)
from proton_lite.passes.pool import PoolCode
from proton_lite.passes.ptx_blocks import BLOCK_REGS, BlockCode
from proton_lite.passes.ptx_lifetimes import LifetimesCode
from proton_lite.passes.ptx_loop_code import LoopCode
from proton_lite.passes.ptx_scan import MarkerSite
from proton_lite.passes.ptx_staging import staged_slots


class _Emitter(LifetimesCode, BlockCode, LoopCode):
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
                 unrolled_tags: list[tuple[int, int]] | None = None, start_at_exit: bool = False,
                 copy_tags: tuple[int, int] = (0, 0), loop_start: str | None = None) -> None:
        self.layout = layout
        self.start_at_exit = start_at_exit or bool(loop_start)  # the CTA header is written at exit
        # ... from the start thread 0 alone kept across the kernel's loops (a kernel without
        # scopes: ptx_lifetimes.LOOP_START), not from the low halves every thread read
        self.loop_start = loop_start
        self.exit_function = None  # the name of the .func its exit calls (ptx_lifetimes.EXIT_IN_FUNCTION)
        self.pool = PoolCode(layout) if layout.pool else None  # records past the unit block: passes/pool.py
        self.param = param
        self.smem = smem_symbol
        self.smem_offset = smem_offset
        self.keeps_alive = keeps_alive  # some record folds the other set's clock into %pl_acc
        # records in loops (shared staging, clamp) store at a saturating pointer, which every
        # record then advances: one min per record instead of a min and a multiply-add before
        # the store (record_cost.py); records outside loops keep the index, which ptxas folds
        # staging in blocks (layout.flush_slots): every record at the pointer, and the unit's
        # first warp copies the block to global memory when a run of records finds no room
        self.blocks = layout.staging == "shared" and layout.flush_slots > 0
        self.uses_pointer = (loop_sites or self.blocks) and layout.staging == "shared" and layout.mode == "clamp"
        self.copy_tags = copy_tags  # the enter and exit tags of layout.COPY_SCOPE
        self._flushes = 0  # copy sites emitted so far (their labels)
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
        if self.blocks:  # the copies' own registers, live only inside a copy
            out += list(BLOCK_REGS)
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
        if self.lifetimes_only:
            return self.lifetimes_prologue()
        out = self._start_halves() if self.start_at_exit else []  # the CTA header waits for the exit
        out = out + [
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
            if self.uses_pointer:  # the sink is slot `capacity`; with blocks, the block's end
                out += ["mov.u32 %pl_ptr, %pl_r4;",
                        f"add.u32 %pl_sink, %pl_r4, {(L.flush_slots or L.capacity) * RECORD_BYTES};"]
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
        if self.start_at_exit:
            return out
        out += ["setp.eq.u32 %pl_p1, %pl_r0, 0;", "@!%pl_p1 bra $pl_prologue_done;"]
        return out + self._cta_header() + ["$pl_prologue_done:"]

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
                    f"add.u32 %pl_ptr, %pl_ptr, {2 * RECORD_BYTES};"] + \
                ([] if self.blocks else ["min.u32 %pl_ptr, %pl_ptr, %pl_sink;"]) + \
                ["add.u32 %pl_r3, %pl_r3, 1;"]
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
            elif site.in_loop or self.blocks:
                # the saturating pointer: ready before the record, one min after it (with
                # blocks every record takes the pointer, which a copy sets back to the start)
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
                if not self.blocks:
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

    def keep_alive_sink(self) -> list[str]:
        """Stores %pl_acc where nobody reads it, so that ptxas keeps the xor that keeps the
        register sets apart: the first sink slot, in shared or global memory."""
        L = self.layout
        if not self.keeps_alive:
            return []
        if L.staging == "shared":  # with blocks: the second spare slot (a pair may fill the first)
            slot = L.flush_slots + 1 if self.blocks else L.capacity
            return [f"st.shared.u32 [%pl_r4+{slot * RECORD_BYTES}], %pl_acc;"]
        out = ["cvt.u64.u32 %pl_d6, %pl_acc;", "xor.b64 %pl_accd, %pl_accd, %pl_d6;"]
        if L.mode == "circular":  # no sink: slot ``count``, if it is a free one
            return out + [f"setp.lt.u32 %pl_p6, %pl_r3, {self.capacity};", "mul.wide.u32 %pl_ga0, %pl_r3, 8;",
                          "add.s64 %pl_ga0, %pl_ga0, %pl_d3;", "@%pl_p6 st.global.u64 [%pl_ga0], %pl_accd;"]
        return out + [f"mul.wide.u32 %pl_ga0, {self.capacity}, 8;", "add.s64 %pl_ga0, %pl_ga0, %pl_d3;",
                      "st.global.u64 [%pl_ga0], %pl_accd;"]  # the first sink slot

    def epilogue(self, k: int) -> list[str]:
        L = self.layout
        if self.lifetimes_only:
            return self.lifetimes_epilogue(k)
        out = [
            "// proton_lite: epilogue",
            "mov.u64 %pl_d8, %globaltimer;",
            "mov.u64 %pl_d9, %clock64;",
        ] + self.keep_alive_sink()
        if self.blocks:
            out += self.block_copy(at_exit=True)
        elif L.staging == "shared":
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
        out += [f"@!%pl_p0 bra $pl_done_{k};"] + (["mov.u32 %pl_r10, %smid;"] if self.start_at_exit else []) + [
            f"mov.u32 %pl_r22, {UNIT_MAGIC};",
            "st.global.v2.u32 [%pl_d2], {%pl_r3, %pl_r22};",
            "st.global.u64 [%pl_d2+8], %pl_d8;",
            "st.global.u64 [%pl_d2+16], %pl_d9;",
        ]
        if self.start_at_exit:
            out += self.cta_header_after_unit(k)
        return out + [f"$pl_done_{k}:"]
