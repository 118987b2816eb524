"""The code of a kernel without scopes: its CTA's and units' lifetimes, nothing between.

A mixin of ``ptx_emit._Emitter`` (its ``layout``, ``param``, ``unit_threads`` and
``start_at_exit``).  Such a kernel has capacity 0 (``layout_choice.choose_layout``).  Each
unit's leader computes its block at exit and writes its header there.  The CTA header:

- ``start_at_exit`` (straight-line kernels): every thread reads the low halves of the start
  pair (``%globaltimer_lo``, ``%clock``) as the kernel's first two instructions and keeps
  them in two registers; thread 0 rebuilds the 64-bit pair at exit from its end pair (the
  end minus the low halves' difference, exact for a CTA shorter than 2^32 cycles, 2.1 s at
  1.98 GHz, which a kernel without loops does not reach) and writes the whole CTA header
  there.  The entry costs two reads with nothing to wait for.  Two registers, not four:
  with the 64-bit pair kept, Triton 3.6's ptxas delayed kernels' loads to stay within its
  register count (design.md).
- kernels with loops (pass 22, ``LOOP_START``): thread 0 alone reads them (the timer from
  bit 5 with ``gt5``) and keeps them across the loops; the same exit.
- otherwise (kernels with ``setmaxnreg``, or where ptxas spilled for those two registers:
  register_cap.build_best; ``LOOP_START`` "entry"): thread 0 computes its CTA block and
  writes the header at entry, about 100 cycles on warp 0's path before its first instruction of the kernel,
  and no register of ours lives across the kernel.

With one unit per CTA and the header at exit the layout is ``compact`` (layout.py): thread 0
writes everything above as one 32-byte lifetime block, two 16-byte stores of its SM, its end
pair and the start pair's differences to it, where the leader's header and the CTA header
took seven stores over 56 bytes; on the H100 that took liger-kernel's 20 kernels from
1.024-1.028x plain to 1.021-1.023x (design.md).

Kernels with scopes and without loops (``ptx_emit._Emitter.prologue``/``epilogue``) keep the
halves the same way since pass 17: thread 0 writes the CTA header after its unit's header,
so that only the unit's address arithmetic and the first record come before the kernel's
first instructions, not thread 0's header and its branch as well.

Why: design.md, "The fixed cost of instrumenting a kernel".
"""
from __future__ import annotations

import os

from proton_lite.layout import CTA_HEADER_BYTES, CTA_MAGIC, LAYOUT_VERSION, LIFETIME_TAG, LOOP_TIMER_SHIFT, UNIT_MAGIC

# The exit of a straight-line kernel without scopes as a call to a ``.func`` of its own
# (``exit_function``), which ptxas does not inline: the kernel's body is then scheduled as
# if our exit were not there.  In Triton 3.6's SASS this keeps the loads of liger's DyT and
# softmax forwards as the plain kernel issues them, where the inline exit made some of them
# wait for others' data.  On the H100 it took DyT's forward from 1.067x plain to 1.037x, but
# made SwiGLU's and GeGLU's forwards and GeGLU's backward 1-1.3 points slower, RMS and layer
# norm's forwards too: liger's 20 kernels 1.0287x mean against 1.0274x inline, in one run
# (design.md).  So it is not the rule for every kernel: since pass 21 the cubin stage builds
# both forms of a compact kernel and keeps the call where the inline build's SASS shows its
# loads held back (exit_choice.py; ``EXIT_CHOSEN``).  ``PROTON_LITE_EXIT_CALL=1`` makes every
# such kernel call (``EXIT_IN_FUNCTION``), ``=0`` none.  The switches change the PTX, so they
# are part of the compile options' mode string (config.InstrumentConfig.to_mode): set them
# before a session starts or a kernel is compiled.
_EXIT_CALL = os.environ.get("PROTON_LITE_EXIT_CALL", "auto").strip().lower()
EXIT_IN_FUNCTION = _EXIT_CALL not in ("0", "", "auto")
EXIT_CHOSEN = _EXIT_CALL == "auto"

# Kernels with loops and without scopes: thread 0 alone reads its CTA's start (predicated, no
# branch) and keeps it in the two registers a straight-line kernel's threads keep, across the
# loops, and writes the whole lifetime block at exit, where until pass 21 it wrote the CTA
# header at entry (its block's address arithmetic and four stores, ~100 cycles, before its
# first load).  ``gt5``: the timer in its 32 ns ticks (bits 5-36, exact on GPUs whose timer
# ticks at 32 ns: H100, H200) and the clock's low half; a start is exact while its CTA lives
# less than 2^37 ns (137 s) and 2^32 cycles (2.2 s at 1.98 GHz: the clock's length past it is
# not known).  ``halves``: both low halves (4.3 s and 2.2 s), ~1 point cheaper on FlagGems'
# short loop kernels.  ``entry``: the header at entry (exact however long a CTA lives).  The
# decoder counts a start it cannot place (proton_lite/start_range.py).  More registers cost
# more: the 64-bit timer alone took liger's layer-norm backward from 1.03x to 1.37x plain.
# Why, with numbers: design.md, "Loop kernels keep their start".  ``PROTON_LITE_LOOP_START``
# picks one (part of the cache key: config.InstrumentConfig.to_mode).
LOOP_STARTS = ("gt5", "halves", "entry")
DEFAULT_LOOP_START = "gt5"
LOOP_START = os.environ.get("PROTON_LITE_LOOP_START", DEFAULT_LOOP_START).strip().lower()
if LOOP_START not in LOOP_STARTS:
    raise ValueError(f"proton_lite: PROTON_LITE_LOOP_START={LOOP_START!r} is not one of {', '.join(LOOP_STARTS)}")
TIMER_SHIFT = LOOP_TIMER_SHIFT  # the bits of %globaltimer below the kept 32 (layout.py)


class LifetimesCode:
    @property
    def lifetimes_only(self) -> bool:
        """A kernel without scopes: capacity 0, compiled (layout_choice.choose_layout)."""
        return self.layout.capacity == 0 and not self.layout.sized_at_launch

    def _block_address(self, param: str | None = None) -> list[str]:
        """%pl_d0 = this CTA's block, %pl_d2 = its unit's, from the parameter and %ctaid, in
        place (nothing kept alive across the kernel: a kernel without scopes needs them only
        at entry, by thread 0, and at exit, by each unit's leader)."""
        L = self.layout
        return [f"ld.param.u64 %pl_d0, [{param or self.param}];",
                "mov.u32 %pl_r5, %ctaid.x;", "mov.u32 %pl_r6, %ctaid.y;", "mov.u32 %pl_r7, %ctaid.z;",
                "mov.u32 %pl_r8, %nctaid.x;", "mov.u32 %pl_r9, %nctaid.y;",
                "mad.lo.u32 %pl_r6, %pl_r7, %pl_r9, %pl_r6;", "mad.lo.u32 %pl_r5, %pl_r6, %pl_r8, %pl_r5;",
                f"mul.wide.u32 %pl_d1, %pl_r5, {L.stride};", "add.s64 %pl_d0, %pl_d0, %pl_d1;"]

    def _start_pair(self) -> list[str]:
        return ["mov.u64 %pl_d4, %globaltimer;", "mov.u64 %pl_d5, %clock64;"]

    def _start_halves(self) -> list[str]:
        """The start pair's low halves, kept until exit (%pl_r13, %pl_r14)."""
        return ["mov.u32 %pl_r13, %globaltimer_lo;", "mov.u32 %pl_r14, %clock;"]

    def _loop_start_reads(self) -> list[str]:
        """A loop kernel's start (``loop_start``), read by thread 0 alone: predicated, not
        branched around, so that the kernel's first block stays whole."""
        timer = ["mov.u64 %pl_d4, %globaltimer;", f"shr.u64 %pl_d4, %pl_d4, {TIMER_SHIFT[self.loop_start]};",
                 "cvt.u32.u64 %pl_r13, %pl_d4;"] if TIMER_SHIFT[self.loop_start] else ["mov.u32 %pl_r13, %globaltimer_lo;"]
        return ["mov.u32 %pl_r0, %tid.x;", "setp.eq.u32 %pl_p1, %pl_r0, 0;"] + \
            ["@%pl_p1 " + r for r in timer + ["mov.u32 %pl_r14, %clock;"]]

    def _timer_since_start(self) -> list[str]:
        """%pl_r15 = the end timer (%pl_d8) less the kept start (%pl_r13), in 32 bits of the
        kept form: ticks of 2^shift ns (``gt5``) or ns."""
        shift = TIMER_SHIFT.get(self.loop_start, 0)
        return ([f"shr.u64 %pl_d6, %pl_d8, {shift};", "cvt.u32.u64 %pl_r15, %pl_d6;"] if shift else
                ["cvt.u32.u64 %pl_r15, %pl_d8;"]) + ["sub.u32 %pl_r15, %pl_r15, %pl_r13;"]

    def _start_rebuilt(self) -> list[str]:
        """%pl_d4/%pl_d5 = the start pair, from its kept halves (%pl_r13: the timer's 32 bits
        from bit ``shift``, %pl_r14: the clock's low half) and the end pair (%pl_d8/%pl_d9)."""
        shift = TIMER_SHIFT.get(self.loop_start, 0)
        out = self._timer_since_start() + ["cvt.u64.u32 %pl_d6, %pl_r15;"]
        out += [f"shl.b64 %pl_d6, %pl_d6, {shift};"] if shift else []
        out += ["sub.u64 %pl_d4, %pl_d8, %pl_d6;",
                "cvt.u32.u64 %pl_r15, %pl_d9;", "sub.u32 %pl_r15, %pl_r15, %pl_r14;",
                "cvt.u64.u32 %pl_d6, %pl_r15;", "sub.u64 %pl_d5, %pl_d9, %pl_d6;"]
        return out

    def _cta_header(self) -> list[str]:
        """Thread 0's CTA header at %pl_d0 (format.md §1.2); at exit the start pair comes from
        entry and %smid was read with the end pair (its latency hidden by the unit's stores)."""
        L = self.layout
        return ((self._start_rebuilt() if self.start_at_exit else ["mov.u32 %pl_r10, %smid;"] + self._start_pair()) + [
                f"mov.u32 %pl_r11, {CTA_MAGIC};",
                "st.global.v2.u32 [%pl_d0], {%pl_r11, %pl_r10};",
                "st.global.u64 [%pl_d0+8], %pl_d4;",  # 8-byte aligned only: no v2.u64 (needs 16)
                "st.global.u64 [%pl_d0+16], %pl_d5;",
                f"mov.u32 %pl_r11, {LAYOUT_VERSION};",
                f"mov.u32 %pl_r12, {L.units};",
                "st.global.v2.u32 [%pl_d0+24], {%pl_r11, %pl_r12};"])

    def cta_header_after_unit(self, k: int) -> list[str]:
        """In a kernel with scopes, after a unit leader's header at exit: thread 0 (unit 0's
        leader, whose unit block %pl_d2 follows the CTA header) writes the CTA header."""
        return (["mov.u32 %pl_r15, %tid.x;", "setp.ne.u32 %pl_p1, %pl_r15, 0;", f"@%pl_p1 bra $pl_done_{k};",
                 f"sub.s64 %pl_d0, %pl_d2, {CTA_HEADER_BYTES};"] + self._cta_header())

    def lifetimes_prologue(self) -> list[str]:
        if self.start_at_exit:
            return ["// proton_lite: prologue (lifetimes only: the start pair, stored at exit)"] + (
                self._loop_start_reads() if self.loop_start else self._start_halves())
        return (["// proton_lite: prologue (lifetimes only)", "mov.u32 %pl_r0, %tid.x;",
                 "setp.eq.u32 %pl_p1, %pl_r0, 0;", "@!%pl_p1 bra $pl_prologue_done;"]
                + self._block_address() + self._cta_header() + ["$pl_prologue_done:"])

    def exit_call(self) -> list[str]:
        """The exit as a call of ``exit_function`` with the buffer and the start halves."""
        return ["{", ".param .b64 %pl_fa0;", ".param .b32 %pl_fa1;", ".param .b32 %pl_fa2;",
                f"ld.param.u64 %pl_d0, [{self.param}];", "st.param.b64 [%pl_fa0], %pl_d0;",
                "st.param.b32 [%pl_fa1], %pl_r13;", "st.param.b32 [%pl_fa2], %pl_r14;",
                f"call.uni {self.exit_function}, (%pl_fa0, %pl_fa1, %pl_fa2);", "}"]

    def exit_function_text(self) -> str:
        """The ``.func`` that ``exit_call`` calls: the inline exit, its buffer and start
        halves taken from its parameters."""
        return "\n".join([f".func {self.exit_function}(.param .b64 pl_buf, .param .b32 pl_gt0, .param .b32 pl_clk0)",
                          "{"] + ["\t" + r for r in self.registers()]
                         + ["\tld.param.u32 %pl_r13, [pl_gt0];", "\tld.param.u32 %pl_r14, [pl_clk0];"]
                         + ["\t" + line for line in self._exit_code(0, "pl_buf")] + ["\tret;", "}", ""])

    def lifetimes_epilogue(self, k: int) -> list[str]:
        """The exit at the ``k``-th ``ret``: inline, or a call of ``exit_function``."""
        return self.exit_call() if self.exit_function else self._exit_code(k, self.param)

    def _lifetime_block(self, k: int, param: str) -> list[str]:
        """A compact layout's exit: thread 0 writes its CTA's lifetime block (layout.py), the
        start pair as 32-bit differences to the end pair read here."""
        if not self.start_at_exit:
            raise ValueError("a compact layout keeps its start pair until exit (stage_hook.compact_layout)")
        return (["// proton_lite: epilogue (lifetimes only, one block)", "mov.u32 %pl_r0, %tid.x;",
                 "setp.ne.u32 %pl_p0, %pl_r0, 0;", f"@%pl_p0 bra $pl_done_{k};",
                 "mov.u64 %pl_d8, %globaltimer;", "mov.u64 %pl_d9, %clock64;", "mov.u32 %pl_r10, %smid;"]
                + self._block_address(param) + self._lengths()
                + [f"or.b32 %pl_r10, %pl_r10, {LIFETIME_TAG << 16};",
                   "mov.b64 {%pl_r17, %pl_r18}, %pl_d8;", "mov.b64 {%pl_r19, %pl_r20}, %pl_d9;",
                   "st.global.v4.u32 [%pl_d0], {%pl_r10, %pl_r15, %pl_r17, %pl_r18};",
                   "st.global.v4.u32 [%pl_d0+16], {%pl_r19, %pl_r20, %pl_r16, %pl_r21};", f"$pl_done_{k}:"])

    def _lengths(self) -> list[str]:
        """A lifetime block's lengths (%pl_r15: ns, %pl_r16: cycles) and version word (%pl_r21):
        end minus start in 32 bits; a timer kept in ticks (``gt5``) gives the ns length's
        bits 32-36 too, in the version word's third byte (format.md §1.2a)."""
        shift = TIMER_SHIFT.get(self.loop_start, 0)
        clock = ["cvt.u32.u64 %pl_r16, %pl_d9;", "sub.u32 %pl_r16, %pl_r16, %pl_r14;"]
        if not shift:
            return self._timer_since_start() + clock + [f"mov.u32 %pl_r21, {LAYOUT_VERSION};"]
        return self._timer_since_start() + [f"shr.u32 %pl_r22, %pl_r15, {32 - shift};",
                                            f"shl.b32 %pl_r15, %pl_r15, {shift};"] + clock + \
            ["shl.b32 %pl_r22, %pl_r22, 16;", f"or.b32 %pl_r21, %pl_r22, {LAYOUT_VERSION};"]

    def _exit_code(self, k: int, param: str) -> list[str]:
        """Each unit's leader: its end pair and header, its block computed again (the buffer
        from ``param``); then thread 0 (the leader of unit 0) the CTA header, if the start
        pair was kept from entry.  A compact layout: thread 0's lifetime block."""
        L = self.layout
        if L.compact:
            return self._lifetime_block(k, param)
        shift = (self.unit_threads - 1).bit_length()
        return (["// proton_lite: epilogue (lifetimes only)", "mov.u32 %pl_r0, %tid.x;",
                 f"and.b32 %pl_r2, %pl_r0, {self.unit_threads - 1};", "setp.eq.u32 %pl_p0, %pl_r2, 0;",
                 f"@!%pl_p0 bra $pl_done_{k};",
                 "mov.u64 %pl_d8, %globaltimer;", "mov.u64 %pl_d9, %clock64;"]
                + (["mov.u32 %pl_r10, %smid;"] if self.start_at_exit else [])
                + self._block_address(param)
                + [f"shr.u32 %pl_r1, %pl_r0, {shift};",
                   f"mul.wide.u32 %pl_d1, %pl_r1, {L.unit_bytes};", "add.s64 %pl_d2, %pl_d0, %pl_d1;",
                   f"mov.u32 %pl_r22, {UNIT_MAGIC};", "mov.u32 %pl_r3, 0;",
                   f"st.global.v2.u32 [%pl_d2+{CTA_HEADER_BYTES}], {{%pl_r3, %pl_r22}};",
                   f"st.global.u64 [%pl_d2+{CTA_HEADER_BYTES + 8}], %pl_d8;",
                   f"st.global.u64 [%pl_d2+{CTA_HEADER_BYTES + 16}], %pl_d9;"]
                + (["setp.ne.u32 %pl_p1, %pl_r0, 0;", f"@%pl_p1 bra $pl_done_{k};"] + self._cta_header()
                   if self.start_at_exit else [])
                + [f"$pl_done_{k}:"])
