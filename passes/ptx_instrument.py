"""The PTX pass: turn proton_lite's scope markers into record-writing code.

Input is the PTX Triton generated for one kernel, in which every scope boundary is an
inline-asm marker (``// @@proton_lite enter|exit <hex name>``, see
``proton_lite.language``).  Output is PTX that

* at kernel entry: computes the recording unit of the thread (warp, warp group or CTA),
  its leader lane, a register write cursor, and this CTA's block in the profile buffer
  (Triton's last kernel parameter); thread 0 writes the CTA header: magic, ``%smid``,
  and the (``%globaltimer``, ``%clock64``) start pair;
* at every marker: reads ``%clock64`` and, in the leader lane, stores one 8-byte record
  ``{tag, clock_lo}`` at the cursor if it is below the capacity, then bumps the cursor
  (no fences; the cursor never leaves a register);
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

from proton_lite.language import MARKER_TAG
from proton_lite.layout import (CTA_HEADER_BYTES, CTA_MAGIC, LAUNCH_CAPACITY_TAG, LAUNCH_PREFIX_BYTES, LAYOUT_VERSION,
                                MAX_LAUNCH_CAPACITY, MAX_SCOPES, RECORD_BYTES, UNIT_HEADER_BYTES, UNIT_MAGIC,
                                BufferLayout, encode_tag)

_MARKER_RE = re.compile(r"^\s*mov\.u32\s+%r\d+,\s*0;\s*//\s*" + re.escape(MARKER_TAG) + r"\s+(enter|exit)\s+([0-9a-f]+)\s*$")
_ENTRY_RE = re.compile(r"^\.visible\s+\.entry\s+([\w$]+)\(")
_PARAM_RE = re.compile(r"^\s*\.param\s+\.u64\s+(?:\.ptr\s+)?(?:\.global\s+)?(?:\.align\s+\d+\s+)?([\w$]+)\s*,?\s*$")
_RET_RE = re.compile(r"^(\s*)(@!?%p\d+\s+)?ret(\.uni)?;\s*$")
_LABEL_RE = re.compile(r"^\s*([$\w]+):")
_BRA_RE = re.compile(r"\bbra(?:\.uni)?\s+([$\w]+);")

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


@dataclass
class PtxScan:
    """What the pass learned about a kernel's PTX before rewriting it."""

    kernel: str
    profile_param: str
    sites: list[MarkerSite] = field(default_factory=list)
    scopes: list[str] = field(default_factory=list)

    @property
    def loop_sites(self) -> int:
        return sum(s.in_loop for s in self.sites)

    @property
    def straight_line_records(self) -> int:
        """Upper bound on records per unit when no marker is inside a loop."""
        return len(self.sites)


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
    scopes: list[str] = []
    for site in sites:
        if site.name not in scopes:
            scopes.append(site.name)
    if len(scopes) > MAX_SCOPES:
        raise InstrumentationError(f"proton_lite: kernel {kernel} has {len(scopes)} distinct scopes; the record "
                                   f"format holds at most {MAX_SCOPES}. Merge scopes or remove some.")
    return PtxScan(kernel, param, sites, scopes)


class _Emitter:
    """Generates the PTX snippets; registers are prefixed %pl_ so they never clash with LLVM's."""

    REGS = (".reg .b32 %pl_r<26>;", ".reg .b64 %pl_d<13>;", ".reg .pred %pl_p<8>;")

    def __init__(self, layout: BufferLayout, param: str, smem_symbol: str, smem_offset: int = 0) -> None:
        self.layout = layout
        self.param = param
        self.smem = smem_symbol
        self.smem_offset = smem_offset

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
                f"add.s64 %pl_d0, %pl_d0, {LAUNCH_PREFIX_BYTES};",
                f"mul.wide.u32 %pl_d11, %pl_r24, {RECORD_BYTES};",
                f"add.s64 %pl_d11, %pl_d11, {UNIT_HEADER_BYTES};",  # unit_bytes
                f"mul.lo.u64 %pl_d12, %pl_d11, {L.units};",
                f"add.s64 %pl_d12, %pl_d12, {CTA_HEADER_BYTES};",  # stride
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
                    f"mad.lo.u32 %pl_r4, %pl_r1, {L.capacity * RECORD_BYTES}, %pl_r4;"]
        else:
            out += [f"add.s64 %pl_d3, %pl_d2, {UNIT_HEADER_BYTES};"]  # records go straight to global
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

    def record(self, tag: int) -> list[str]:
        L = self.layout
        out = ["// proton_lite: record", "mov.u64 %pl_d6, %clock64;", "cvt.u32.u64 %pl_r13, %pl_d6;",
               f"mov.u32 %pl_r14, {tag};"]
        # Warp granularity: every lane of the warp stores the same record to the same address
        # (Triton's control flow is uniform within a warp), so the store needs no leader
        # predicate and ptxas may merge adjacent records into one wider store: 15.7 instead
        # of 20.1 cycles per back-to-back record on the H100 (tests/benchmarks/record_cost.py).
        # Larger units keep the leader lane: their other warps must not write the unit's slots.
        leader = "" if self.unit_threads == 32 else "%pl_p0"
        pred = ""
        cap = "%pl_r24" if L.sized_at_launch else str(L.capacity)
        if L.mode == "circular":
            out += [f"and.b32 %pl_r15, %pl_r3, {L.capacity - 1};"]
            pred = f"@{leader} " if leader else ""
        else:
            out += ["mov.u32 %pl_r15, %pl_r3;"]
            if leader:
                out += [f"setp.lt.and.u32 %pl_p2, %pl_r3, {cap}, {leader};"]
            else:
                out += [f"setp.lt.u32 %pl_p2, %pl_r3, {cap};"]
            pred = "@%pl_p2 "
        if L.staging == "shared":
            out += ["mad.lo.u32 %pl_r16, %pl_r15, 8, %pl_r4;",
                    f"{pred}st.shared.v2.u32 [%pl_r16], {{%pl_r14, %pl_r13}};"]
        else:
            out += ["mul.wide.u32 %pl_d7, %pl_r15, 8;", "add.s64 %pl_d7, %pl_d7, %pl_d3;",
                    f"{pred}st.global.v2.u32 [%pl_d7], {{%pl_r14, %pl_r13}};"]
        out.append("add.u32 %pl_r3, %pl_r3, 1;")
        return out

    def epilogue(self, k: int) -> list[str]:
        L = self.layout
        out = [
            "// proton_lite: epilogue",
            "mov.u64 %pl_d8, %globaltimer;",
            "mov.u64 %pl_d9, %clock64;",
        ]
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


def shared_bytes(layout: BufferLayout) -> int:
    return layout.units * layout.capacity * RECORD_BYTES


def staging_offset(triton_shared: int) -> int:
    """Where the staging area starts in the dynamic shared memory: after Triton's own bytes.

    Appending to the dynamic region (and raising the kernel's ``shared`` size) leaves every
    address Triton uses unchanged; a static ``.shared`` array would instead move the dynamic
    region and break the 1024-byte alignment that swizzled wgmma/TMA tiles rely on.
    """
    return -(-max(triton_shared, 0) // STAGING_ALIGN) * STAGING_ALIGN


def rewrite(ptx: str, info: PtxScan, layout: BufferLayout, triton_shared: int = 0) -> str:
    """Return instrumented PTX for ``info``'s kernel with the given buffer layout."""
    if layout.sized_at_launch and (layout.staging != "global" or layout.mode != "clamp"):
        raise InstrumentationError("proton_lite: a buffer sized at launch needs global staging and clamp mode")
    smem_symbol = f"__proton_lite_dyn_smem_{info.kernel}"  # aliases the dynamic shared base
    emit = _Emitter(layout, info.profile_param, smem_symbol, staging_offset(triton_shared))
    ids = {name: i for i, name in enumerate(info.scopes)}
    site_at = {s.line: s for s in info.sites}
    lines = ptx.split("\n")
    out: list[str] = []
    in_body, regs_done, ret_count = False, False, 0
    entry_seen = False
    for i, line in enumerate(lines):
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
            out += ["\t" + r for r in _Emitter.REGS]
            out += ["\t" + s for s in emit.prologue()]
            regs_done = True
        if i in site_at:
            site = site_at[i]
            out += ["\t" + s for s in emit.record(encode_tag(ids[site.name], site.kind == "exit"))]
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
        out.append(line)
    if not regs_done or ret_count == 0:
        raise InstrumentationError(f"proton_lite: could not find the body or the exits of kernel {info.kernel} in "
                                   "its PTX; please report this with the kernel's PTX")
    return "\n".join(out)


def strip_markers(ptx: str) -> str:
    """Remove the markers of a kernel that is compiled in a session but not selected for profiling."""
    return "\n".join(line for line in ptx.split("\n") if not _MARKER_RE.match(line))
