"""Where a scope-less kernel writes its CTA header, measured (issue 24, GPU): one liger-kernel
op, plain vs in a session, by CUPTI kernel durations, for one form of the header per run.

Forms (passes/ptx_lifetimes.py): ``pass`` what the pass chooses (at exit in straight-line
kernels from the start's halves in registers, at exit in kernels with loops from the start
pair thread 0 keeps since pass 22: ``PROTON_LITE_LOOP_START``), ``loopentry`` pass 21 for
kernels with loops (the header at entry; ``PROTON_LITE_LOOP_START=entry``), ``exit`` the start pair's low halves kept in
registers until exit in every scope-less kernel, loops included, ``entry`` the header at
entry everywhere (``bench.py --header-form entry`` uses it too), ``pred`` as ``exit`` with
thread 0 alone reading the halves (``warp0``: warp 0's threads) (a diagnosis: are the other warps' timer reads the
cost?), ``empty`` a scope-less kernel with no code of ours at all, launched by the session
as any other (a diagnosis: is what a short kernel pays in its code, or around it: its
buffer, its launch?), ``cs2r`` the halves taken from 64-bit reads (ptxas then issues
fixed-latency CS2R instead of S2UR, whose variable latency may hold up the kernel's own
uniform reads of ``%ctaid``), ``clockonly`` a diagnosis with no ``%globaltimer`` read at
entry at all (its CTA start times are wrong), ``ublock`` the CTA block's address computed at
entry and kept, so that the exit has no ``%ctaid`` and parameter reads to wait for,
``func`` the exit in a ``.func`` of its own that the kernel calls (straight-line kernels of
one unit per CTA), so that ptxas schedules the kernel's body as if it were not there;
``spin64``/``spin256`` a diagnosis: no code of ours but thread 0 waiting 64/256 cycles
before it exits (what each cycle a CTA's last warp lives longer costs such a kernel);
``predall`` the leader's exit without a branch, each of its instructions predicated on the
leader (ptxas then schedules the kernel's loads as in the plain build for DyT's and softmax's
forwards, yet on the H100 it cost more everywhere else: our persistent row sum 1.34x, liger's
mean 1.036x; benchmarks.md "The word-per-lane exit, withdrawn"); ``u32reads`` kernels with
scopes: the epilogue's end timer read as 32-bit halves, which ptxas issues as S2UR (once per
warp) where it reads the 64-bit timer with CS2R in every thread (``bench.py --header-form
u32reads``; run_gpu.sh ``TIMER_READS=1``; on the H100 no gain: layer norm +7.3% against
+7.2-7.6%, and timer_reads.py found a read costs the same from 1 or 32 lanes); ``v4stores`` one unit per CTA with
the header at exit: thread 0's seven 8-byte stores as four 16-byte-aligned ones, chosen by the
CTA block's parity on the 56-byte stride (tests/test_record_code.py checks the bytes; on the
H100 no gain: liger mean 1.0269 and 1.0243 against 1.0269 and 1.0271; run_gpu.sh
``FORMS_AB="pass v4stores"``; both in benchmarks.md "Timer reads by the lane"); ``xnogt``/``xnosmid``/``xnostore`` diagnoses, the exit without one part (``noexit``/``noentry``: without
the whole exit, or the entry's timer reads): its ``%globaltimer``
read (a ``%clock64`` read instead), its ``%smid`` read, its stores (behind a predicate that
is never true, so that everything they store is still computed); ``onestore`` a diagnosis
of straight-line scope-less kernels: thread 0's exit stores only what a CTA's lifetime needs,
its SM, start and end (16 bytes, one ``st.global.v4``, at a 16-byte stride; the decoder cannot
read it), against ``xnostore`` (no store) and ``pass``: is the exit's cost its seven stores or
any store at all? (H100, 2026-11-28: liger mean 1.0192 against 1.0264 with pass 18's headers
and 1.0182 without stores: the seven); ``twostores`` (measured beside them, now what pass 19
ships as the compact layout, layout.py; ``git show 360de11:tests/benchmarks/header_forms.py``
has the form): all that a lifetime records (SM,
start and end, each as ``%globaltimer`` and ``%clock64``: the starts as 32-bit differences to
the ends) in one 32-byte sector per CTA, two ``st.global.v4``; ``xunitnotime``/``xunitnostore``/``xnocopy`` diagnoses of kernels with scopes: the per-unit
exit without its timer reads (thread 0 alone reads them), its unit header's stores, or the copy
of its staged records; ``noclock``/``norecords`` diagnoses of kernels with scopes (``bench.py --header-form``): each
record's timer read replaced by a constant (same stores and bytes), or no record at all (the
lifetimes kept); ``lateheader`` kernels with
loops (the header at entry): the header's code moved below the first global load of the
entry block, so that ptxas issues that load first (liger's cross-entropy: its first LDG at
instruction 16 instead of 42, the header's stores at 38-44 instead of 22-24, Triton 3.9;
``tests/test_fixed_cost_sass.py``; measured with run_gpu.sh ``FORMS_AB="pass lateheader"`` on 2026-11-28 and rejected, worse on every
cross-entropy kernel, design.md).  The first runs of 2026-11-27 (docs/gpu-runs.md) were of pass 15,
which kept the 64-bit pair.  Run each form in its own process with its own
Triton cache (the forms other than ``pass`` are swapped in at run time, which Triton's cache
key does not see):

    for f in pass exit entry; do
      TRITON_CACHE_DIR=/tmp/tc_$f python tests/benchmarks/header_forms.py --form $f --op dyt
    done

It prints per round the plain and in-session median of each kernel of the op, the autotuned
config, and for the session's binaries the registers, spills and resident CTAs per SM the
driver reports.  Needs torch, liger-kernel and cuda-python.
"""
import argparse
import functools
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from proton_lite.passes import ptx_instrument, ptx_lifetimes, ptx_scan, stage_hook  # noqa: E402


def use_form(form: str) -> None:
    if form in ("entry", "loopentry", "lateheader"):  # loop kernels: the header at entry (pass 21)
        ptx_lifetimes.LOOP_START = "entry"
    if form == "entry":  # the metadata says so too (cta_header "entry")
        stage_hook.rewrite = functools.partial(ptx_instrument.rewrite, start_at_exit=False)
        stage_hook.keeps_start_pair = lambda ptx, info, layout: False
    elif form in ("exit", "pred"):  # loops too: both the rewrite and the stage hook ask
        def keeps(ptx, info, layout):
            return ptx_instrument.lifetimes_only(info, layout) and "setmaxnreg" not in ptx
        stage_hook.keeps_start_pair = ptx_instrument.keeps_start_pair = keeps
    if form == "empty":  # a diagnosis: the session's binary, allocator and hooks, but no code of ours in it
        ptx_lifetimes.LifetimesCode.lifetimes_prologue = lambda self: []
        ptx_lifetimes.LifetimesCode.lifetimes_epilogue = lambda self, k: []
    if form == "cs2r":  # the halves taken from 64-bit reads, which ptxas issues as CS2R (fixed latency)
        ptx_lifetimes.LifetimesCode._start_halves = lambda self: [
            "mov.u64 %pl_d4, %globaltimer;", "cvt.u32.u64 %pl_r13, %pl_d4;",
            "mov.u64 %pl_d5, %clock64;", "cvt.u32.u64 %pl_r14, %pl_d5;"]
    if form == "clockonly":  # a diagnosis (start_gt is wrong): no timer read at entry, only the clock
        ptx_lifetimes.LifetimesCode._start_halves = lambda self: [
            "mov.u32 %pl_r14, %clock;", "mov.u32 %pl_r13, 0;"]
    if form == "ublock":  # the CTA block's address computed at entry and kept (uniform: ptxas may hold it in URs)
        code = ptx_lifetimes.LifetimesCode
        prologue, epilogue, block = code.lifetimes_prologue, code.lifetimes_epilogue, code._block_address

        def kept_prologue(self):
            return prologue(self) + (block(self) if self.start_at_exit else [])

        def kept_epilogue(self, k):
            if not self.start_at_exit:
                return epilogue(self, k)
            code._block_address = lambda self, param=None: []  # %pl_d0 still holds it
            try:
                return epilogue(self, k)
            finally:
                code._block_address = block
        code.lifetimes_prologue, code.lifetimes_epilogue = kept_prologue, kept_epilogue
    if form == "func":  # the exit in a .func the kernel calls (passes/ptx_lifetimes.py says why)
        ptx_lifetimes.EXIT_IN_FUNCTION = True
    if form == "inline":  # the exit inline at each ret in every kernel (PROTON_LITE_EXIT_CALL=0; before pass 21
        # the default, now "pass" chooses per kernel: passes/exit_choice.py)
        ptx_lifetimes.EXIT_IN_FUNCTION = False
        ptx_lifetimes.EXIT_CHOSEN = False
    if form.startswith("spin"):  # a diagnosis: no code of ours but thread 0 waiting N cycles at exit
        cycles = int(form[4:])
        ptx_lifetimes.LifetimesCode.lifetimes_prologue = lambda self: []
        ptx_lifetimes.LifetimesCode.lifetimes_epilogue = lambda self, k: [
            "mov.u32 %pl_r0, %tid.x;", "setp.ne.u32 %pl_p0, %pl_r0, 0;", f"@%pl_p0 bra $pl_done_{k};",
            "mov.u32 %pl_r1, %clock;", f"$pl_spin_{k}:", "mov.u32 %pl_r2, %clock;", "sub.u32 %pl_r3, %pl_r2, %pl_r1;",
            f"setp.lt.u32 %pl_p1, %pl_r3, {cycles};", f"@%pl_p1 bra $pl_spin_{k};", f"$pl_done_{k}:"]
    if form == "noexit":  # a diagnosis of straight-line kernels: the entry's two timer reads, no exit code
        ptx_lifetimes.LifetimesCode.lifetimes_epilogue = lambda self, k: []
    if form == "noentry":  # a diagnosis: the exit as shipped, no timer read at entry (its start pair is garbage)
        ptx_lifetimes.LifetimesCode.lifetimes_prologue = lambda self: ["mov.u32 %pl_r13, 0;", "mov.u32 %pl_r14, 0;"]
    if form in ("xnogt", "xnosmid", "xnostore"):  # diagnoses: the exit without one of its parts
        exit_code = ptx_lifetimes.LifetimesCode._exit_code

        def part_exit(self, k, param):
            out = exit_code(self, k, param)
            if form == "xnogt":  # the end's %globaltimer read a %clock64 read (its ns are wrong)
                return [line.replace("%pl_d8, %globaltimer;", "%pl_d8, %clock64;") for line in out]
            if form == "xnosmid":
                return [line.replace("%pl_r10, %smid;", "%pl_r10, 0;") for line in out]
            # xnostore: every store behind a predicate that is never true (no SM has id 99999)
            out[1:1] = ["mov.u32 %pl_r23, %smid;", "setp.eq.u32 %pl_p6, %pl_r23, 99999;"]
            guarded = []
            for line in out:
                if line.startswith("@%pl_p2 st.global"):
                    guarded.append("and.pred %pl_p2, %pl_p2, %pl_p6;")
                elif line.startswith("st.global"):
                    line = "@%pl_p6 " + line
                guarded.append(line)
            return guarded
        ptx_lifetimes.LifetimesCode._exit_code = part_exit
    if form == "predall":  # the leader's exit without branches: each instruction predicated on the leader
        leader_exit = ptx_lifetimes.LifetimesCode._exit_code

        def predicated_exit(self, k, param):
            out, pred = [], None
            for line in leader_exit(self, k, param):
                if line.startswith(("@!%pl_p0 bra", "@%pl_p1 bra")):
                    pred = "%pl_p1" if "p1" in line else "%pl_p0"
                elif line == "setp.ne.u32 %pl_p1, %pl_r0, 0;":  # thread 0, the leader of unit 0
                    out.append("setp.eq.and.u32 %pl_p1, %pl_r0, 0, %pl_p0;")
                elif pred is None or line.startswith(("//", "$", "@")):
                    out.append(line)
                else:
                    out.append(f"@{pred} {line}")
            return out
        ptx_lifetimes.LifetimesCode._exit_code = predicated_exit
    if form == "v4stores":  # one unit per CTA, header at exit: thread 0's seven stores as four 16-byte-aligned ones
        leader_exit = ptx_lifetimes.LifetimesCode._exit_code

        def four_stores(self, k, param):
            out = leader_exit(self, k, param)
            if not (self.start_at_exit and self.layout.units == 1) or self.layout.compact:  # (pass 19: 2 stores)
                return out
            cut = out.index("mov.u32 %pl_r3, 0;") - 1  # up to the unit block's address: the reads and the block
            from proton_lite.layout import CTA_MAGIC, LAYOUT_VERSION, UNIT_MAGIC
            code = out[:cut] + self._start_rebuilt() + [
                "mov.b64 {%pl_r16, %pl_r17}, %pl_d4;", "mov.b64 {%pl_r18, %pl_r19}, %pl_d5;",
                "mov.b64 {%pl_r20, %pl_r21}, %pl_d8;", "mov.b64 {%pl_r24, %pl_r25}, %pl_d9;",
                f"mov.u32 %pl_r11, {CTA_MAGIC};", f"mov.u32 %pl_r12, {LAYOUT_VERSION};", "mov.u32 %pl_r23, 1;",
                f"mov.u32 %pl_r22, {UNIT_MAGIC};", "mov.u32 %pl_r3, 0;",
                "cvt.u32.u64 %pl_r15, %pl_d0;", "and.b32 %pl_r15, %pl_r15, 8;", "setp.ne.u32 %pl_p1, %pl_r15, 0;",
                "@!%pl_p1 st.global.v4.u32 [%pl_d0], {%pl_r11, %pl_r10, %pl_r16, %pl_r17};",
                "@!%pl_p1 st.global.v4.u32 [%pl_d0+16], {%pl_r18, %pl_r19, %pl_r12, %pl_r23};",
                "@!%pl_p1 st.global.v4.u32 [%pl_d0+32], {%pl_r3, %pl_r22, %pl_r20, %pl_r21};",
                "@!%pl_p1 st.global.v2.u32 [%pl_d0+48], {%pl_r24, %pl_r25};",
                "@%pl_p1 st.global.v2.u32 [%pl_d0], {%pl_r11, %pl_r10};",
                "@%pl_p1 st.global.v4.u32 [%pl_d0+8], {%pl_r16, %pl_r17, %pl_r18, %pl_r19};",
                "@%pl_p1 st.global.v4.u32 [%pl_d0+24], {%pl_r12, %pl_r23, %pl_r3, %pl_r22};",
                "@%pl_p1 st.global.v4.u32 [%pl_d0+40], {%pl_r20, %pl_r21, %pl_r24, %pl_r25};",
                f"$pl_done_{k}:"]
            return code
        ptx_lifetimes.LifetimesCode._exit_code = four_stores
    if form == "onestore":  # a diagnosis: the least a CTA lifetime needs, in one 16-byte store per CTA
        leader_exit = ptx_lifetimes.LifetimesCode._exit_code

        def one_store(self, k, param):
            if not (self.start_at_exit and self.layout.units == 1):
                return leader_exit(self, k, param)
            block = [line.replace(f", {self.layout.stride};", ", 16;") for line in self._block_address(param)]
            return (["// proton_lite: epilogue (onestore diagnosis)", "mov.u32 %pl_r0, %tid.x;",
                     "setp.ne.u32 %pl_p0, %pl_r0, 0;", f"@%pl_p0 bra $pl_done_{k};",
                     "mov.u64 %pl_d8, %globaltimer;", "mov.u32 %pl_r10, %smid;"] + block +
                    ["cvt.u32.u64 %pl_r15, %pl_d8;", "sub.u32 %pl_r15, %pl_r15, %pl_r13;",
                     "mov.b64 {%pl_r16, %pl_r17}, %pl_d8;",
                     "st.global.v4.u32 [%pl_d0], {%pl_r10, %pl_r15, %pl_r16, %pl_r17};", f"$pl_done_{k}:"])
        ptx_lifetimes.LifetimesCode._exit_code = one_store
    if form == "u32reads":  # kernels with scopes: the epilogue's end timer from 32-bit halves (read per warp)
        from proton_lite.passes import ptx_emit
        scoped_epilogue = ptx_emit._Emitter.epilogue

        def halves_read(self, k):
            out = scoped_epilogue(self, k)
            if self.lifetimes_only:
                return out
            at = out.index("mov.u64 %pl_d8, %globaltimer;")
            return out[:at] + ["mov.u32 %pl_r20, %globaltimer_hi;", "mov.u32 %pl_r21, %globaltimer_lo;",
                               "mov.u32 %pl_r22, %globaltimer_hi;", "setp.ne.u32 %pl_p4, %pl_r20, %pl_r22;",
                               "selp.u32 %pl_r21, 0, %pl_r21, %pl_p4;",  # the high half turned over: its first ns
                               "mov.b64 %pl_d8, {%pl_r21, %pl_r22};"] + out[at + 1:]
        ptx_emit._Emitter.epilogue = halves_read
    if form in ("xunitnotime", "xunitnostore", "xnocopy"):  # diagnoses of kernels with scopes: the
        # per-unit exit without one part: its timer reads (thread 0 alone reads the end pair, the
        # CTA header needs it; the other units' headers store zeros, so their end times are wrong),
        # its unit header's stores, or the copy of its staged records (lost); each behind a
        # predicate never true where a store is left out, so that what it stores is still computed
        from proton_lite.passes import ptx_emit
        scoped_epilogue = ptx_emit._Emitter.epilogue

        def part_epilogue(self, k):
            out = scoped_epilogue(self, k)
            if self.lifetimes_only:
                return out
            never = ["mov.u32 %pl_r23, %smid;", "setp.eq.u32 %pl_p6, %pl_r23, 99999;"]
            if form == "xunitnotime":
                at = out.index("mov.u64 %pl_d8, %globaltimer;")
                return out[:at] + ["mov.u32 %pl_r23, %tid.x;", "setp.eq.u32 %pl_p6, %pl_r23, 0;",
                                   "mov.u64 %pl_d8, 0;", "mov.u64 %pl_d9, 0;",
                                   "@%pl_p6 mov.u64 %pl_d8, %globaltimer;", "@%pl_p6 mov.u64 %pl_d9, %clock64;"] \
                    + out[at + 2:]
            unit_stores = ("st.global.v2.u32 [%pl_d2], ", "st.global.u64 [%pl_d2+8]", "st.global.u64 [%pl_d2+16]")
            copy_store = "st.global.v2.u32 [%pl_d10+"
            wanted = unit_stores if form == "xunitnostore" else (copy_store, )
            return never + ["@%pl_p6 " + line if line.startswith(wanted) else line for line in out]
        ptx_emit._Emitter.epilogue = part_epilogue
    if form in ("noclock", "norecords"):  # diagnoses of kernels with scopes: each record without its
        # timer read (a constant stored in its place: the same stores, bytes and code otherwise), or
        # no record at all (the CTA's and units' lifetimes still written): how much of what a few
        # scopes cost is the timer read's place in the kernel's schedule (ptxas moves no load above it)
        import re
        from proton_lite.passes import ptx_emit
        record = ptx_emit._Emitter.record
        if form == "noclock":
            ptx_emit._Emitter.record = lambda self, site, tag: [
                re.sub(r"%clock(64)?;", "7;", line) for line in record(self, site, tag)]
        else:
            ptx_emit._Emitter.record = lambda self, site, tag: []
    if form == "globalrec":  # straight-line kernels with scopes: records stored to global memory where they are
        # made, not staged in shared memory and copied by each unit's first warp at exit
        from proton_lite.passes import layout_choice
        fits = layout_choice.staging_fits
        layout_choice.staging_fits = lambda layout, triton_shared: bool(layout.flush_slots) and fits(layout, triton_shared)
    if form == "lateheader":  # kernels with loops: the header at entry, but after the entry block's first load
        rewrite = stage_hook.rewrite
        stage_hook.rewrite = lambda *a, **k: late_prologue(rewrite(*a, **k))
    if form == "warp0":  # a diagnosis: the start's two reads in warp 0 alone (predicated), whose thread 0 uses them
        halves0 = ptx_lifetimes.LifetimesCode._start_halves
        ptx_lifetimes.LifetimesCode._start_halves = lambda self: (
            ["mov.u32 %pl_r0, %tid.x;", "setp.lt.u32 %pl_p1, %pl_r0, 32;"] + ["@%pl_p1 " + i for i in halves0(self)])
    if form == "pred":
        halves = ptx_lifetimes.LifetimesCode._start_halves
        ptx_lifetimes.LifetimesCode._start_halves = lambda self: (
            ["mov.u32 %pl_r0, %tid.x;", "setp.eq.u32 %pl_p1, %pl_r0, 0;"] + ["@%pl_p1 " + i for i in halves(self)])


PROLOGUE = "// proton_lite: prologue (lifetimes only)"


def late_prologue(ptx: str) -> str:
    """The ``lateheader`` form: a scope-less kernel's CTA header written at entry (kernels with
    loops) moved below the first global load of its entry block, so that the header's timer
    reads and stores issue while that load is in flight (liger's cross-entropy: one CTA per SM,
    every warp waits for warp 0 at the first reduction; design.md).  Kernels without such a load
    (a label or branch first) keep the header where it was."""
    lines = ptx.split("\n")
    starts = [i for i, line in enumerate(lines) if line.strip() == PROLOGUE]
    if len(starts) != 1:
        return ptx
    start = starts[0]
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "$pl_prologue_done:")
    for i in range(end + 1, len(lines)):
        code = lines[i].split("//", 1)[0].strip()
        debug_label = ptx_scan._DEBUG_LABEL_RE.match(lines[i]) or lines[i].startswith("$L__func_begin")
        if ptx_scan._LABEL_RE.match(lines[i]) and not debug_label \
                or ptx_scan._BRA_RE.search(code) or ptx_scan._RET_RE.match(lines[i]):
            return ptx  # the entry block ends before any load
        if code.startswith("ld.global"):
            block = lines[start:end + 1]
            return "\n".join(lines[:start] + lines[end + 1:i + 1] + block + lines[i + 1:])
    return ptx


def session_binaries(fn):
    """(name, registers, spills, warps, stages, resident CTAs per SM, cta_header) of every
    instrumented binary of a JIT function."""
    from cuda.bindings import driver as cu
    for cache in fn.device_caches.values():
        for k in cache[0].values():
            md = k.metadata
            entry = getattr(md, "proton_lite", None)
            if not entry:
                continue
            k._init_handles()
            _, ctas = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(k.function, 32 * md.num_warps, md.shared)
            yield k.name, k.n_regs, k.n_spills, md.num_warps, md.num_stages, ctas, entry.get("cta_header")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--form", choices=("pass", "exit", "entry", "pred", "empty", "cs2r", "clockonly", "ublock", "func", "inline",
                                       "predall", "u32reads", "v4stores", "spin64", "spin256", "xnogt", "xnosmid", "xnostore", "noexit", "noentry", "warp0",
                                       "lateheader", "onestore", "loopentry"),
                    default="pass")
    ap.add_argument("--op", default="dyt", help="a function of tests/liger_ops.py")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--liger-scale", type=int, default=32)
    args = ap.parse_args()
    use_form(args.form)
    import proton_lite
    import liger_ops
    from bench import kernel_times
    liger_ops.ROWS_SCALE = args.liger_scale
    op = getattr(liger_ops, args.op)
    keep = liger_ops.liger_kernel_names().__contains__
    tmp = tempfile.mkdtemp()
    for r in range(args.rounds):
        plain = kernel_times(lambda: liger_ops.step(op), args.reps, keep)
        with proton_lite.start(os.path.join(tmp, f"r{r}"), quiet=True, decode=False, calibrate=False):
            inst = kernel_times(lambda: liger_ops.step(op), args.reps, keep)
        for name in sorted(plain):
            p, i = statistics.median(plain[name]), statistics.median(inst.get(name, [float("nan")]))
            print(f"{args.form:5s} round {r} {name[:32]:32s} plain {p:8.1f} us  session {i:8.1f} us  {i / p:.3f}x")
    import triton
    seen = set()
    for mod in sorted(m for m in sys.modules if m.startswith("liger_kernel.ops")):
        for obj in list(getattr(sys.modules.get(mod), "__dict__", {}).values()):  # JIT functions, autotuners
            fn = getattr(obj, "fn", obj)
            if isinstance(fn, triton.runtime.JITFunction) and id(fn) not in seen:
                seen.add(id(fn))
                for row in session_binaries(fn):
                    print(args.form, "binary", *row, getattr(obj, "best_config", ""))


if __name__ == "__main__":
    main()
