"""Cycles per record of candidate record sequences, measured on the GPU in one process.

Each candidate is a PTX snippet for one record (what the pass emits at a scope boundary).
The script builds small PTX kernels around it, assembles them with the ``ptxas`` inside
the triton wheel (so the SASS is inspectable on a machine without a GPU: ``--sass DIR``),
and on a GPU launches one CTA of 4 warps per SM and reads each warp's ``%clock64`` span:

* ``straight``: 32 back-to-back records (the calibration kernel's pattern);
* ``loop``: 1024 iterations of {enter record, 8 dependent FMAs, exit record}, the
  pattern of a scope inside a K loop, against the same loop without records. Both loops
  carry ``.pragma "nounroll"``: until 2026-11-23 (evening) ptxas unrolled the loop without
  records completely and some loops with records not at all, which charged the loop
  overhead to the records.

The pass's own sequence is measured in real Triton kernels by ``bench.py`` (calibration
kernel, and a loop with shared or global staging); this script compares candidates.

cycles per record = (span with records - span without) / records, median over warps.

Usage: python tests/benchmarks/record_cost.py [--sass DIR] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

WARPS = 4
CAP = 4096  # records per warp in shared memory (loop: 2048 used)
SLOTS = CAP + 2  # per warp: CAP slots, the sink slot of the "sink" candidates, and one more to keep 16-byte alignment
STRAIGHT = 32
ITERS = 1024
GLOBAL_SCRATCH_OFFSET = 1 << 20  # records of the "global" candidate sit this far into the output buffer

REGS = """
 .reg .b32 %r<40>; .reg .b64 %rd<20>; .reg .pred %p<10>; .reg .f32 %f<8>;
 .reg .b32 %pl_r<24>; .reg .b64 %pl_d<12>; .reg .pred %pl_p<8>;
"""


def _variants():
    """name -> (setup lines, record(tag, bounded) -> lines, finish lines giving %pl_r3 = cursor)."""
    v = {}

    # the pass until 2026-11-23: index cursor, lane 0 of the warp stores
    def cur(tag, bounded):
        out = ["mov.u64 %pl_d6, %clock64;", "cvt.u32.u64 %pl_r13, %pl_d6;", f"mov.u32 %pl_r14, {tag};"]
        if bounded:
            out += ["mov.u32 %pl_r15, %pl_r3;", f"setp.lt.and.u32 %pl_p2, %pl_r3, {CAP}, %pl_p0;"]
        else:
            out += ["mov.u32 %pl_r15, %pl_r3;", "mov.pred %pl_p2, %pl_p0;"]
        out += ["mad.lo.u32 %pl_r16, %pl_r15, 8, %pl_r4;", "@%pl_p2 st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};",
                "add.u32 %pl_r3, %pl_r3, 1;"]
        return out
    v["leader"] = (["mov.u32 %pl_r3, 0;"], cur, [])

    def cur_all(tag, bounded):  # as leader, but every lane stores (no leader predicate): the pass now
        out = ["mov.u64 %pl_d6, %clock64;", "cvt.u32.u64 %pl_r13, %pl_d6;", f"mov.u32 %pl_r14, {tag};",
               "mad.lo.u32 %pl_r16, %pl_r3, 8, %pl_r4;"]
        if bounded:
            out += [f"setp.lt.u32 %pl_p2, %pl_r3, {CAP};", "@%pl_p2 st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};"]
        else:
            out += ["st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};"]
        return out + ["add.u32 %pl_r3, %pl_r3, 1;"]
    v["all_lanes"] = (["mov.u32 %pl_r3, 0;"], cur_all, [])

    def cur_all_clock32(tag, bounded):  # as all_lanes, reading the 32-bit %clock (ptxas may use CS2R.32)
        out = cur_all(tag, bounded)
        return ["mov.u32 %pl_r13, %clock;"] + out[2:]
    v["all_lanes_clock32"] = (["mov.u32 %pl_r3, 0;"], cur_all_clock32, [])

    def cur_tag_first(tag, bounded):  # as leader, the tag is in its register before the timer read
        out = cur(tag, bounded)
        return [out[2], out[0], out[1]] + out[3:]
    v["leader_tag_first"] = (["mov.u32 %pl_r3, 0;"], cur_tag_first, [])

    # byte-address cursor; the end bound is 0 for non-leader lanes, so one compare covers both
    def ptr_setup():
        return ["mov.u32 %pl_r5, %pl_r4;",  # cursor (byte address)
                f"add.u32 %pl_r6, %pl_r4, {CAP * 8};", "selp.u32 %pl_r6, %pl_r6, 0, %pl_p0;"]
    all_setup = ["mov.u32 %pl_r5, %pl_r4;", f"add.u32 %pl_r7, %pl_r4, {CAP * 8};"]  # same end for every lane
    fin = ["sub.u32 %pl_r3, %pl_r5, %pl_r4;", "shr.u32 %pl_r3, %pl_r3, 3;"]

    def guarded(store: str, bounded: bool, all_lanes: bool) -> list[str]:
        """The store at the byte cursor (bounds-checked in loops), then the cursor bump."""
        if bounded:
            end = "%pl_r7" if all_lanes else "%pl_r6"
            out = [f"setp.lt.u32 %pl_p2, %pl_r5, {end};", f"@%pl_p2 {store}"]
        else:
            out = [store if all_lanes else f"@%pl_p0 {store}"]
        return out + ["add.u32 %pl_r5, %pl_r5, 8;"]

    timer_tag = lambda tag: ["mov.u64 %pl_d6, %clock64;", "cvt.u32.u64 %pl_r13, %pl_d6;",  # noqa: E731
                             f"mov.u32 %pl_r14, {tag};"]
    v2 = "st.shared.v2.u32 [%pl_r5], {%pl_r14, %pl_r13};"
    u64 = "st.shared.u64 [%pl_r5], %pl_d7;"
    v["ptr"] = (ptr_setup(), lambda tag, b: timer_tag(tag) + guarded(v2, b, False), fin)
    # the record as one 64-bit value built from the two words
    v["ptr64"] = (ptr_setup(), lambda tag, b: timer_tag(tag) + ["mov.b64 %pl_d7, {%pl_r14, %pl_r13};"]
                  + guarded(u64, b, False), fin)
    # every lane stores the same record to the same address (no leader predicate when unbounded)
    v["ptr_all"] = (all_setup, lambda tag, b: timer_tag(tag) + guarded(v2, b, True), fin)

    # the clock first: a 64-bit store of {clock_lo, tag} made from the %clock64 pair
    def clock_first(tag):
        return ["mov.u64 %pl_d6, %clock64;", "mov.b64 {%pl_r13, %pl_r12}, %pl_d6;", f"mov.u32 %pl_r14, {tag};",
                "mov.b64 %pl_d7, {%pl_r13, %pl_r14};"]
    v["pair_clk_first"] = (ptr_setup(), lambda tag, b: clock_first(tag) + guarded(u64, b, False), fin)
    v["pair_all"] = (all_setup, lambda tag, b: clock_first(tag) + guarded(u64, b, True), fin)

    # delayed store: a record's timer is read at its site, but it is stored at the next site
    # (or at the end), so the store never waits on the register the next timer read writes.
    # Slot 0 takes the dummy first store.
    def delayed(all_lanes: bool):
        def rec(tag, bounded):
            out = ["mov.u64 %pl_d6, %clock64;"]
            store = "st.shared.v2.u32 [%pl_r5], {%pl_r14, %pl_r13};"
            if bounded:
                out += ["setp.lt.u32 %pl_p2, %pl_r5, %pl_r7;" if all_lanes else "setp.lt.u32 %pl_p2, %pl_r5, %pl_r6;",
                        "@%pl_p2 " + store]
            else:
                out += [store if all_lanes else "@%pl_p0 " + store]
            out += ["add.u32 %pl_r5, %pl_r5, 8;", "cvt.u32.u64 %pl_r13, %pl_d6;", f"mov.u32 %pl_r14, {tag};"]
            return out
        setup = ["mov.u32 %pl_r5, %pl_r4;", f"add.u32 %pl_r7, %pl_r4, {CAP * 8};",
                 f"add.u32 %pl_r6, %pl_r4, {CAP * 8};", "selp.u32 %pl_r6, %pl_r6, 0, %pl_p0;",
                 "mov.u32 %pl_r13, 0;", "mov.u32 %pl_r14, 0;"]
        end = ["st.shared.v2.u32 [%pl_r5], {%pl_r14, %pl_r13};"] + fin
        return setup, rec, end
    v["delayed"] = delayed(False)
    v["delayed_all"] = delayed(True)

    # pairs: the first record of a pair (here: even tags, the enter of a scope) only reads the
    # timer; the second reads it too and stores both records at once, so one store (and one
    # wait for the register pair it reads) serves two records.  Every lane stores.
    def paired(wide: bool):
        def rec(tag, bounded):
            if tag % 2 == 0:
                return ["mov.u64 %pl_d6, %clock64;"]
            out = ["mov.u64 %pl_d7, %clock64;", "cvt.u32.u64 %pl_r13, %pl_d6;", "cvt.u32.u64 %pl_r17, %pl_d7;",
                   f"mov.u32 %pl_r14, {tag - 1};", f"mov.u32 %pl_r18, {tag};",
                   "mad.lo.u32 %pl_r16, %pl_r3, 8, %pl_r4;"]
            pred = ""
            if bounded:
                out += [f"setp.lt.u32 %pl_p2, %pl_r3, {CAP - 1};"]
                pred = "@%pl_p2 "
            if wide:
                out += [pred + "st.shared.v4.u32 [%pl_r16], {%pl_r14, %pl_r13, %pl_r18, %pl_r17};"]
            else:
                out += [pred + "st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};",
                        pred + "st.shared.v2.u32 [%pl_r16+8], {%pl_r18, %pl_r17};"]
            return out + ["add.u32 %pl_r3, %pl_r3, 2;"]
        return ["mov.u32 %pl_r3, 0;"], rec, []
    v["pair_v4"] = paired(True)
    v["pair_v2x2"] = paired(False)

    # where the records go, with the all_lanes sequence: global memory (what a kernel sized at
    # launch does now), or shared memory through a generic address (one code path for both)
    def based(space):
        def rec(tag, bounded):
            out = ["mov.u64 %pl_d6, %clock64;", "cvt.u32.u64 %pl_r13, %pl_d6;", f"mov.u32 %pl_r14, {tag};",
                   "mul.wide.u32 %pl_d7, %pl_r3, 8;", "add.s64 %pl_d7, %pl_d7, %pl_d3;"]
            store = f"st{space}.v2.u32 [%pl_d7], {{%pl_r14, %pl_r13}};"
            if bounded:
                out += ["setp.lt.u32 %pl_p2, %pl_r3, %pl_r23;", "@%pl_p2 " + store]
            else:
                out += [store]
            return out + ["add.u32 %pl_r3, %pl_r3, 1;"]
        return rec
    global_base = ["mov.u32 %pl_r3, 0;", f"mov.u32 %pl_r23, {CAP};", "ld.param.u64 %pl_d3, [out];",
                   "mov.u32 %pl_r5, %ctaid.x;", f"mad.lo.u32 %pl_r5, %pl_r5, {WARPS}, %pl_r1;",
                   f"mul.wide.u32 %pl_d4, %pl_r5, {CAP * 8};", "add.s64 %pl_d3, %pl_d3, %pl_d4;",
                   f"add.s64 %pl_d3, %pl_d3, {GLOBAL_SCRATCH_OFFSET};"]
    generic_shared = ["mov.u32 %pl_r3, 0;", f"mov.u32 %pl_r23, {CAP};", "cvt.u64.u32 %pl_d3, %pl_r4;",
                      "cvta.shared.u64 %pl_d3, %pl_d3;"]
    v["global"] = (global_base, based(".global"), [])
    v["generic_shared"] = (generic_shared, based(""), [])

    # split: slots below a compile-time S staged in shared memory, the rest (up to a run-time
    # capacity) straight to global memory; S holds every record here (the common case)
    def split(tag, bounded):
        out = ["mov.u64 %pl_d6, %clock64;", "cvt.u32.u64 %pl_r13, %pl_d6;", f"mov.u32 %pl_r14, {tag};",
               "mad.lo.u32 %pl_r16, %pl_r3, 8, %pl_r4;", f"setp.lt.u32 %pl_p2, %pl_r3, {CAP};",
               "@%pl_p2 st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};",
               "setp.lt.u32 %pl_p3, %pl_r3, %pl_r23;", f"setp.ge.and.u32 %pl_p3, %pl_r3, {CAP}, %pl_p3;",
               "mul.wide.u32 %pl_d7, %pl_r3, 8;", "add.s64 %pl_d7, %pl_d7, %pl_d3;",
               "@%pl_p3 st.global.v2.u32 [%pl_d7], {%pl_r14, %pl_r13};"]
        return out + ["add.u32 %pl_r3, %pl_r3, 1;"]
    v["split"] = (global_base[:2] + [f"mov.u32 %pl_r23, {2 * CAP};"] + global_base[2:], split, [])

    # sink: no predicate; a record past the capacity goes to one extra slot (index CAP) that
    # is never read back, so the bound check is one min instead of a compare and a guard
    def sink(clock32: bool):
        def rec(tag, bounded):
            out = (["mov.u32 %pl_r13, %clock;"] if clock32 else
                   ["mov.u64 %pl_d6, %clock64;", "cvt.u32.u64 %pl_r13, %pl_d6;"])
            out += [f"mov.u32 %pl_r14, {tag};"]
            out += [f"min.u32 %pl_r15, %pl_r3, {CAP};"] if bounded else ["mov.u32 %pl_r15, %pl_r3;"]
            return out + ["mad.lo.u32 %pl_r16, %pl_r15, 8, %pl_r4;", "st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};",
                          "add.u32 %pl_r3, %pl_r3, 1;"]
        return ["mov.u32 %pl_r3, 0;"], rec, []
    v["sink"] = sink(False)
    v["sink_clock32"] = sink(True)

    # byte cursor with the sink: min, store, add
    def sink_ptr(tag, bounded):
        out = ["mov.u32 %pl_r13, %clock;", f"mov.u32 %pl_r14, {tag};"]
        out += ["min.u32 %pl_r16, %pl_r5, %pl_r7;"] if bounded else ["mov.u32 %pl_r16, %pl_r5;"]
        return out + ["st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};", "add.u32 %pl_r5, %pl_r5, 8;"]
    v["sink_ptr_clock32"] = (all_setup, sink_ptr, fin)

    # two register sets used in turn (by site parity), the other set kept live by an xor into
    # an accumulator, so that ptxas cannot give the next timer read the registers that the
    # previous store is still reading
    def alternating(tag, bounded):
        clk, other, tg = ("%pl_r8", "%pl_r9", "%pl_r10") if tag % 2 == 0 else ("%pl_r9", "%pl_r8", "%pl_r11")
        out = [f"mov.u32 {clk}, %clock;", f"xor.b32 %pl_r19, %pl_r19, {other};", f"mov.u32 {tg}, {tag};"]
        out += [f"min.u32 %pl_r15, %pl_r3, {CAP};"] if bounded else ["mov.u32 %pl_r15, %pl_r3;"]
        return out + ["mad.lo.u32 %pl_r16, %pl_r15, 8, %pl_r4;", f"st.shared.v2.u32 [%pl_r16], {{{tg}, {clk}}};",
                      "add.u32 %pl_r3, %pl_r3, 1;"]
    v["alternating"] = (["mov.u32 %pl_r3, 0;", "mov.u32 %pl_r19, 0;", "mov.u32 %pl_r8, 0;", "mov.u32 %pl_r9, 0;"],
                        alternating, ["st.shared.u32 [%pl_r4+32768], %pl_r19;"])

    # lane slots: no store per record; lane (cursor % 32) of the warp keeps the record in two
    # registers, and every 32nd record the warp stores its 32 records at once (one 256-byte
    # store); the rest is stored at the end
    labels = iter(range(1 << 30))

    def lane_slots(tag, bounded):
        n = next(labels)
        out = ["mov.u32 %pl_r13, %clock;", "and.b32 %pl_r20, %pl_r3, 31;", "setp.eq.u32 %pl_p3, %pl_r20, %pl_r2;",
               "@%pl_p3 mov.u32 %pl_r11, %pl_r13;", f"@%pl_p3 mov.u32 %pl_r10, {tag};", "add.u32 %pl_r3, %pl_r3, 1;",
               "and.b32 %pl_r21, %pl_r3, 31;", "setp.ne.u32 %pl_p4, %pl_r21, 0;", f"@%pl_p4 bra $slots_kept{n};",
               "add.u32 %pl_r22, %pl_r3, %pl_r2;", "sub.u32 %pl_r22, %pl_r22, 32;"]
        out += [f"min.u32 %pl_r22, %pl_r22, {CAP};"] if bounded else []
        return out + ["mad.lo.u32 %pl_r23, %pl_r22, 8, %pl_r4;", "st.shared.v2.u32 [%pl_r23], {%pl_r10, %pl_r11};",
                      f"$slots_kept{n}:"]
    slots_end = ["and.b32 %pl_r21, %pl_r3, 31;", "setp.lt.u32 %pl_p4, %pl_r2, %pl_r21;",
                 "sub.u32 %pl_r22, %pl_r3, %pl_r21;", "add.u32 %pl_r22, %pl_r22, %pl_r2;",
                 f"min.u32 %pl_r22, %pl_r22, {CAP};", "mad.lo.u32 %pl_r23, %pl_r22, 8, %pl_r4;",
                 "@%pl_p4 st.shared.v2.u32 [%pl_r23], {%pl_r10, %pl_r11};", "bar.warp.sync -1;"]
    # delayed_all with the 32-bit clock and the sink instead of the guard
    def delayed_sink(tag, bounded):
        out = ["mov.u32 %pl_r12, %clock;"]
        out += ["min.u32 %pl_r16, %pl_r5, %pl_r7;"] if bounded else ["mov.u32 %pl_r16, %pl_r5;"]
        return out + ["st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};", "add.u32 %pl_r5, %pl_r5, 8;",
                      "mov.u32 %pl_r13, %pl_r12;", f"mov.u32 %pl_r14, {tag};"]
    v["delayed_sink_clock32"] = (["mov.u32 %pl_r5, %pl_r4;", f"add.u32 %pl_r7, %pl_r4, {(CAP + 1) * 8};",
                                  "mov.u32 %pl_r13, 0;", "mov.u32 %pl_r14, 0;"], delayed_sink,
                                 ["st.shared.v2.u32 [%pl_r5], {%pl_r14, %pl_r13};"] + fin)

    # global stores (kernels sized at launch) with the 32-bit clock and the sink
    def global_sink(tag, bounded):
        out = ["mov.u32 %pl_r13, %clock;", f"mov.u32 %pl_r14, {tag};"]
        out += ["min.u32 %pl_r15, %pl_r3, %pl_r23;"] if bounded else ["mov.u32 %pl_r15, %pl_r3;"]
        return out + ["mul.wide.u32 %pl_d7, %pl_r15, 8;", "add.s64 %pl_d7, %pl_d7, %pl_d3;",
                      "st.global.v2.u32 [%pl_d7], {%pl_r14, %pl_r13};", "add.u32 %pl_r3, %pl_r3, 1;"]
    v["global_sink_clock32"] = (global_base, global_sink, [])

    # global with the 32-bit clock and the guard (the sized-at-launch path with only the clock changed)
    def global_guard(tag, bounded):
        out = ["mov.u32 %pl_r13, %clock;", f"mov.u32 %pl_r14, {tag};",
               "mul.wide.u32 %pl_d7, %pl_r3, 8;", "add.s64 %pl_d7, %pl_d7, %pl_d3;"]
        store = "st.global.v2.u32 [%pl_d7], {%pl_r14, %pl_r13};"
        out += ["setp.lt.u32 %pl_p2, %pl_r3, %pl_r23;", "@%pl_p2 " + store] if bounded else [store]
        return out + ["add.u32 %pl_r3, %pl_r3, 1;"]
    v["global_clock32"] = (global_base, global_guard, [])

    # dual: a kernel sized at launch whose launch capacity fits the compiled shared staging area
    # takes the shared path (sink_clock32); one uniform predicate, set at CTA start, sends every
    # record of a larger launch to an out-of-line global path instead
    dual_blocks: list[str] = []

    def dual(tag, bounded):
        n = next(labels)
        dual_blocks.extend([f"$dual_g{n}:", "mov.u32 %pl_r13, %clock;", f"mov.u32 %pl_r14, {tag};",
                            "mul.wide.u32 %pl_d7, %pl_r3, 8;", "add.s64 %pl_d7, %pl_d7, %pl_d3;",
                            "setp.lt.u32 %pl_p2, %pl_r3, %pl_r23;",
                            "@%pl_p2 st.global.v2.u32 [%pl_d7], {%pl_r14, %pl_r13};", f"bra.uni $dual_d{n};"])
        out = [f"@%pl_p6 bra $dual_g{n};", "mov.u32 %pl_r13, %clock;", f"mov.u32 %pl_r14, {tag};"]
        out += ["min.u32 %pl_r15, %pl_r3, %pl_r23;"] if bounded else ["mov.u32 %pl_r15, %pl_r3;"]
        return out + ["mad.lo.u32 %pl_r16, %pl_r15, 8, %pl_r4;", "st.shared.v2.u32 [%pl_r16], {%pl_r14, %pl_r13};",
                      f"$dual_d{n}:", "add.u32 %pl_r3, %pl_r3, 1;"]
    # the launch capacity (here CAP, loaded so that ptxas cannot fold it) fits: the shared path runs
    v["dual"] = (global_base + ["mov.u32 %pl_r23, %nctaid.y;", f"mul.lo.u32 %pl_r23, %pl_r23, {CAP};",
                                f"setp.gt.u32 %pl_p6, %pl_r23, {CAP};"],
                 dual, [], dual_blocks)

    v["lane_slots"] = (["mov.u32 %pl_r3, 0;", "mov.u32 %pl_r10, 0;", "mov.u32 %pl_r11, 0;"], lane_slots, slots_end)
    return v


def kernel_ptx(name: str, variant, pattern: str, records: bool) -> str:
    """One benchmark kernel; a variant may carry a fourth element: a list its records fill
    with out-of-line blocks, placed after the kernel's ``ret``."""
    setup, record, finish = variant[:3]
    tail = variant[3] if len(variant) > 3 else []
    tail.clear()
    body = [
        "mov.u32 %r0, %tid.x;", "shr.u32 %pl_r1, %r0, 5;", "and.b32 %pl_r2, %r0, 31;", "setp.eq.u32 %pl_p0, %pl_r2, 0;",
        "mov.u32 %pl_r4, smem;", f"mad.lo.u32 %pl_r4, %pl_r1, {SLOTS * 8}, %pl_r4;",
        "mov.f32 %f0, 0f3F800000;", "mov.f32 %f1, 0f3F000001;",
    ] + setup + ["bar.sync 0;", "mov.u64 %rd1, %clock64;"]
    if pattern == "straight":
        for i in range(STRAIGHT if records else 0):
            body += record(i & 1, False)
    else:
        body += ["mov.u32 %r1, 0;", "LOOP:", ".pragma \"nounroll\";"]
        if records:
            body += record(0, True)
        body += ["fma.rn.f32 %f0, %f0, %f1, %f1;"] * 8
        if records:
            body += record(1, True)
        body += ["add.u32 %r1, %r1, 1;", f"setp.lt.u32 %p1, %r1, {ITERS};", "@%p1 bra LOOP;"]
    body += ["mov.u64 %rd2, %clock64;", "sub.u64 %rd3, %rd2, %rd1;"]
    body += finish if records else ["mov.u32 %pl_r3, 0;"]
    body += [
        "ld.param.u64 %rd4, [out];", "mov.u32 %r2, %ctaid.x;", f"mad.lo.u32 %r3, %r2, {WARPS}, %pl_r1;",
        "mul.wide.u32 %rd5, %r3, 16;", "add.s64 %rd4, %rd4, %rd5;",
        "ld.shared.u32 %r4, [%pl_r4+4];", "cvt.rzi.u32.f32 %r5, %f0;", "add.u32 %r4, %r4, %r5;",
        "add.u32 %r4, %r4, %pl_r3;",
        "@%pl_p0 st.global.u64 [%rd4], %rd3;", "@%pl_p0 st.global.u32 [%rd4+8], %r4;", "ret;",
    ] + tail
    return "\n".join([".version 8.0", ".target sm_90a", ".address_size 64",
                      ".extern .shared .align 16 .b8 smem[];",
                      f".visible .entry {name}(.param .u64 out)", "{", REGS] + ["\t" + b for b in body] + ["}"])


def ptxas_path() -> str:
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


def assemble(ptx: str, workdir: str, name: str) -> bytes:
    src, cubin = os.path.join(workdir, name + ".ptx"), os.path.join(workdir, name + ".cubin")
    with open(src, "w") as f:
        f.write(ptx)
    subprocess.run([ptxas_path(), "-arch=sm_90a", "-O3", src, "-o", cubin], check=True)
    with open(cubin, "rb") as f:
        return f.read()


def sass(cubin_path: str) -> str:
    tool = os.path.join(os.path.dirname(ptxas_path()), "cuobjdump")
    return subprocess.run([tool, "-sass", cubin_path], capture_output=True, text=True).stdout


def run_on_gpu(cubins: dict[str, bytes]) -> dict[str, list[int]]:
    from proton_lite.runtime import cuda_api
    cu = cuda_api.cu
    check = cuda_api.check
    check(cu.cuInit(0), "cuInit")
    dev = check(cu.cuDeviceGet(0), "cuDeviceGet")
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev), "retain")
    check(cu.cuCtxSetCurrent(ctx), "set")
    sms = cuda_api.device_attribute(0, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
    n = sms * WARPS
    out = cuda_api.mem_alloc(GLOBAL_SCRATCH_OFFSET + n * CAP * 8)  # spans, then the "global" candidate's records
    import ctypes

    import numpy as np
    result = {}
    for name, cubin in cubins.items():
        mod = check(cu.cuModuleLoadData(cubin), "cuModuleLoadData")
        fn = check(cu.cuModuleGetFunction(mod, name.encode()), "cuModuleGetFunction")
        smem = WARPS * SLOTS * 8
        check(cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    smem), "attr")
        arg = ctypes.c_uint64(out)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        spans = []
        for _ in range(5):
            check(cu.cuLaunchKernel(fn, sms, 1, 1, WARPS * 32, 1, 1, smem, 0, ctypes.addressof(params), 0), "launch")
            check(cu.cuCtxSynchronize(), "sync")
            host = np.zeros(n * 2, dtype=np.uint64)
            check(cu.cuMemcpyDtoH(host.ctypes.data, out, n * 16), "dtoh")
            spans += host[0::2].tolist()
        result[name] = spans
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sass", help="write PTX, cubin and SASS of every kernel into this folder; no GPU run")
    ap.add_argument("--json", help="write the per-variant numbers here")
    ap.add_argument("--variants", default="", help="comma-separated subset")
    a = ap.parse_args()
    variants = _variants()
    if a.variants:
        variants = {k: variants[k] for k in a.variants.split(",")}
    workdir = a.sass or tempfile.mkdtemp()
    os.makedirs(workdir, exist_ok=True)
    cubins = {}
    for vname, var in variants.items():
        for pattern in ("straight", "loop"):
            for rec in (True, False):
                name = f"k_{vname}_{pattern}_{int(rec)}"
                cubins[name] = assemble(kernel_ptx(name, var, pattern, rec), workdir, name)
                if a.sass:
                    with open(os.path.join(workdir, name + ".sass"), "w") as f:
                        f.write(sass(os.path.join(workdir, name + ".cubin")))
    if a.sass:
        print(f"wrote {len(cubins)} kernels to {workdir}")
        return
    spans = run_on_gpu(cubins)
    rows = {}
    print(f"{'variant':16s} {'straight cyc/rec':>17s} {'loop cyc/rec':>13s}")
    for vname in variants:
        row = {}
        for pattern, recs in (("straight", STRAIGHT), ("loop", 2 * ITERS)):
            w = statistics.median(spans[f"k_{vname}_{pattern}_1"])
            wo = statistics.median(spans[f"k_{vname}_{pattern}_0"])
            row[pattern] = (w - wo) / recs
        rows[vname] = row
        print(f"{vname:16s} {row['straight']:17.2f} {row['loop']:13.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
