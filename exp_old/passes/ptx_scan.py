"""Reading Triton's PTX for the pass: the kernel, its profile-buffer parameter, the scope
markers in order (``scan``), loop back edges and which records sit close behind others."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from proton_lite.layout import MAX_SCOPES
from proton_lite.markers import MARKER_TAG
from proton_lite.passes.config import CALIBRATION_KERNEL

_MARKER_RE = re.compile(r"^\s*mov\.u32\s+%r\d+,\s*0;\s*//\s*" + re.escape(MARKER_TAG) + r"\s+(enter|exit)\s+([0-9a-f]+)\s*$")
_ENTRY_RE = re.compile(r"^\.visible\s+\.entry\s+([\w$]+)\(")
_PARAM_RE = re.compile(r"^\s*\.param\s+\.u64\s+(?:\.ptr\s+)?(?:\.global\s+)?(?:\.align\s+\d+\s+)?([\w$]+)\s*,?\s*$")
_RET_RE = re.compile(r"^(\s*)(@!?%p\d+\s+)?ret(\.uni)?;\s*$")
_LABEL_RE = re.compile(r"^\s*([$\w]+):")
# LLVM's temporary labels for line info (DWARF ranges of inlined functions such as tl.max),
# never a branch's target: not the start of a basic block
_DEBUG_LABEL_RE = re.compile(r"^\s*\$L__tmp\d+:")
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
    room: int = 0  # staging in blocks: records this one's check makes room for (ptx_staging.mark_block_checks)


@dataclass
class PtxScan:
    """What the pass learned about a kernel's PTX before rewriting it."""

    kernel: str
    profile_param: str
    sites: list[MarkerSite] = field(default_factory=list)
    scopes: list[str] = field(default_factory=list)
    back_edges: list[tuple[int, int]] = field(default_factory=list)  # (loop head's label line, branch line)
    body: tuple[int, int] | None = None  # the kernel's own lines (function_body): not its noinline functions'

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
    lies between them (one basic block), else None. Line-info labels do not count: a
    kernel compiled with line info (Triton's default) has them around every inlined call."""
    n = 0
    for line in lines[start + 1:end]:
        if (_LABEL_RE.match(line) and not _DEBUG_LABEL_RE.match(line)) or _BRA_RE.search(line) or _RET_RE.match(line):
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


_LOC_RE = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s")
_FILE_RE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"')
_MANGLED_RE = re.compile(r"^.*?_\$_(\w+?)__(?:P|[iu]\d|fp|bf|c\d|\$|$)")
_FUNC_RE = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.func\s+(?:\([^)]*\)\s*)?([\w$]+)")


def _source_of(lines: list[str], i: int) -> str:
    """``file:line`` of the source line that PTX line ``i`` came from (its last ``.loc``)."""
    files = {m.group(1): m.group(2) for m in map(_FILE_RE.match, lines) if m}
    for line in reversed(lines[:i]):
        m = _LOC_RE.match(line)
        if m:
            return f"{files.get(m.group(1), '?')}:{m.group(2)}"
    return "an unknown line"


def _refuse_scopes_in_functions(lines: list[str], body: tuple[int, int]) -> None:
    """A scope inside a ``@triton.jit(noinline=True)`` function sits in a ``.func`` of its own,
    whose registers are not the kernel's: its records could not reach the unit's slots.  Reads
    the lines around the kernel's body only (the scan reads the body)."""
    func = None
    for i in [*range(body[0]), *range(body[1] + 1, len(lines))]:
        line = lines[i]
        fm = _FUNC_RE.match(line)
        if fm:
            func = fm.group(1)
        mm = _MARKER_RE.match(line)
        if mm:
            name = bytes.fromhex(mm.group(2)).decode("utf-8")
            mangled = _MANGLED_RE.match(func or "")  # Triton's <module>_$_<name>__<signature>...
            helper = mangled.group(1) if mangled else (func or "a function")
            raise InstrumentationError(
                f"proton_lite: scope {name!r} ({_source_of(lines, i)}) is inside {helper}, a function compiled "
                "on its own (@triton.jit(noinline=True)); its records cannot reach the kernel's buffer. Put the "
                f"scope around the call to {helper} in the kernel, or drop noinline=True from {helper}.")


def scan(ptx: str) -> PtxScan:
    lines = ptx.split("\n")
    kernel, param, params_open = None, None, False
    body = None
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
                body = function_body(lines)  # the kernel's own lines: not its noinline functions'
                _refuse_scopes_in_functions(lines, body)
            continue
        if body is not None and i > body[1]:
            break
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
    return PtxScan(kernel, param, sites, scopes, back_edges, body)


def function_body(lines: list[str]) -> tuple[int, int]:
    """(first line inside the kernel's ``{``, line of its closing ``}``): braces counted on
    every line, so inline-asm blocks and vector operands nest. Functions of the module
    (``@triton.jit(noinline=True)`` helpers, defined after the kernel) lie outside it."""
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
