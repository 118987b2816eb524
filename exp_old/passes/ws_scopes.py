"""Scopes inside loops that Triton warp-specializes itself, put back into its partitions.

``tl.range(..., warp_specialize=True)`` makes Triton split a loop into partitions (on sm_90 a
producer of TMA loads and consumers of the MMAs), each a copy of the loop holding the
operations of its tasks. Our markers belong to no task: on sm_90 (Triton 3.6 and 3.9) the
pass drops every marker inside the loop and leaves the ones after it outside the partitions,
empty; on sm_100 it copies every marker into every partition. Either way the trace would not
show what each partition did of a scope.

So the scopes are re-derived from where the scope's *operations* went. In the TTIR (before
the split) each marker pair is an *instance*: its name, the loops around it (by source
location) and the source locations of the operations between its markers. In the final
TTGIR, every region of a ``ttg.warp_specialize`` (the default partition and each worker) is
searched for the copy of the instance's innermost loop (matched by location, the loops around
the ``ttg.warp_specialize`` itself taken off the front); in that loop's body, the operations
that hold one of the instance's source locations and do work (loads, copies, barrier waits,
dots, tensor math, stores; not scalar index arithmetic, which Triton copies into every
partition) are found, and a marker pair is placed around the first to the last of them. A
partition that holds none of the instance's work gets no pair. The instance's old markers
(outside the partitions or copied into all of them) are removed.

Each warp still passes each pair at most once per iteration of the same loops, so the record
bound read from the TTIR (``record_bound.py``) holds. The rewrite is textual on the printed
TTGIR (one operation per line, regions opened by a line ending in ``{``), like
``unpipeline.py``'s on the TTIR; the stage hook parses the result back.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from proton_lite.markers import MARKER_TAG
from proton_lite.passes.kernel_facts import WARP_SPECIALIZE_OP
from proton_lite.passes.partitions import region_name

_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
_MARKER_RE = re.compile(r'^(\s*)(%[\w#:.$-]+) = tt\.elementwise_inline_asm "[^"]*' + re.escape(MARKER_TAG)
                        + r"\s+(enter|exit)\s+([0-9a-f]+)\"")
_LOC_DEF_RE = re.compile(r"^(#loc\d*) = loc\((.*)\)\s*$")
_TRAILING_LOC_RE = re.compile(r"loc\(([^()]*(?:\([^()]*(?:\([^()]*\)[^()]*)*\)[^()]*)*)\)\s*$")
_OP_NAME_RE = re.compile(r"^\s*(?:%[^=]*=\s*)?([a-z_]+\.[\w.]+)")
_HEADER_RE = re.compile(r"^\s*(default|partition\d+)\b")
_WS = WARP_SPECIALIZE_OP + "("
_LOOPS = ("scf.for", "scf.while")
_TERMINATORS = {"scf.yield", "scf.condition", "tt.return", "ttg.warp_yield", "ttg.warp_return",
                "tt.reduce.return", "tt.scan.return"}
_NO_WORK_PREFIXES = ("ttg.memdesc_", "ub.poison", "tt.get_program_id", "tt.get_num_programs")


@dataclass
class Instance:
    """One marker pair of the TTIR: what is needed to place it again after the split."""
    name_hex: str
    enter: str  # the marker lines as the TTIR printed them
    exit: str
    loops: tuple  # source-location keys of the loops around it, outermost first
    keys: frozenset = field(default_factory=frozenset)  # source locations of the operations between


# --- locations -------------------------------------------------------------------------------

def _loc_table(text: str) -> dict[str, str]:
    table = {}
    for line in text.split("\n"):
        m = _LOC_DEF_RE.match(line)
        if m:
            table[m.group(1)] = m.group(2)
    return table


def _resolve(expr: str, table: dict[str, str], depth: int = 0) -> list[tuple]:
    """The source positions a location expression stands for: one chain of file:line:col per
    alternative (a fused location has one per part), a call site's chain callee first (names
    dropped: ``"acc"(#loc4)`` is where ``#loc4`` is)."""
    expr = expr.strip()
    if depth > 50 or not expr or expr == "unknown":
        return []
    if expr.startswith("#loc"):
        return _resolve(table.get(expr, ""), table, depth + 1)
    if expr.startswith("callsite("):
        at = _split_top(expr[len("callsite("):-1], " at ")
        callee = _resolve(at[0], table, depth + 1) or [()]
        caller = (_resolve(at[1], table, depth + 1) if len(at) > 1 else []) or [()]
        return [a + b for a in callee for b in caller if a + b]
    if expr.startswith("fused"):
        body = expr[expr.index("[") + 1:expr.rindex("]")]
        return [chain for part in _split_top(body, ",") for chain in _resolve(part, table, depth + 1)]
    m = re.match(r'^"((?:[^"\\]|\\.)*)":(\d+):(\d+)', expr)
    if m:
        return [((m.group(1), int(m.group(2)), int(m.group(3))),)]
    m = re.match(r'^"(?:[^"\\]|\\.)*"\((.*)\)$', expr)  # a name location
    if m:
        return _resolve(m.group(1), table, depth + 1)
    return []


def _split_top(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside parentheses, brackets and strings."""
    parts, level, start, i, in_str = [], 0, 0, 0, False
    while i < len(text):
        c = text[i]
        if c == '"' and (i == 0 or text[i - 1] != "\\"):
            in_str = not in_str
        elif not in_str:
            if c in "([":
                level += 1
            elif c in ")]":
                level -= 1
            elif level == 0 and text.startswith(sep, i):
                parts.append(text[start:i])
                i += len(sep)
                start = i
                continue
        i += 1
    parts.append(text[start:])
    return parts


def _line_keys(line: str, table: dict[str, str]) -> list[tuple]:
    """The source positions of an operation line's location (see ``_resolve``)."""
    m = _TRAILING_LOC_RE.search(line)
    return _resolve(m.group(1), table) if m else []


def _line_key(line: str, table: dict[str, str]) -> tuple:
    """One key for a location (a loop's): all its positions."""
    return tuple(_line_keys(line, table))


# --- the region tree of a printed module -----------------------------------------------------

class _Tree:
    """Which line opens the region each line is in, and each operation's first and last line.

    An operation is one line, or a line ending in ``{`` through the ``}`` line that closes its
    last region (``} else {`` and a warp_specialize's ``default {`` / ``partitionN(...) {``
    open further regions of the same operation)."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        self.parent = [-1] * len(lines)  # opener line of the enclosing region (-1: module level)
        self.op_of = {}  # opener line -> the operation's first line
        self.end = {}  # operation's first line -> its last line
        self.children: dict[int, list[int]] = {-1: []}  # opener -> operations directly inside
        stack: list[int] = []
        last_op: dict[int, int] = {}  # opener -> the last operation started directly in it
        for i, line in enumerate(lines):
            bare = _STRING_RE.sub('""', line).strip()
            if not bare or bare.startswith("#"):
                continue
            top = stack[-1] if stack else -1
            if bare.startswith("}"):
                if not stack:
                    continue
                opener = stack.pop()
                op = self.op_of[opener]
                self.end[op] = i
                self.parent[i] = self.parent[op]
                if bare.endswith("{"):
                    self.op_of[i] = op
                    self.children[i] = []
                    stack.append(i)
                continue
            self.parent[i] = top
            if bare.endswith("{") and _HEADER_RE.match(bare) and top in last_op:
                op = last_op[top]  # a warp_specialize's next region
                self.op_of[i] = op
                self.children[i] = []
                stack.append(i)
                continue
            self.children.setdefault(top, []).append(i)
            last_op[top] = i
            self.end[i] = i
            if bare.endswith("{"):
                self.op_of[i] = i
                self.children[i] = []
                stack.append(i)

    def regions(self, op: int) -> list[int]:
        return [o for o, owner in self.op_of.items() if owner == op]

    def op_name(self, op: int) -> str:
        m = _OP_NAME_RE.match(self.lines[op])
        return m.group(1) if m else ""

    def enclosing_ops(self, op: int) -> list[int]:
        """Operations around ``op``, outermost first."""
        out, opener = [], self.parent[op]
        while opener != -1:
            owner = self.op_of[opener]
            out.append(owner)
            opener = self.parent[owner]
        return out[::-1]


def _is_loop(tree: _Tree, op: int) -> bool:
    return tree.op_name(op) in _LOOPS


def _does_work(line: str) -> bool:
    """Whether an operation line counts as a scope's work in a partition (see the module doc)."""
    m = _OP_NAME_RE.match(line)
    name = m.group(1) if m else ""
    if not name or name in _TERMINATORS or MARKER_TAG in line:
        return False
    if name.startswith(_NO_WORK_PREFIXES):
        return False
    if name.startswith("arith.") and "tensor<" not in line:
        return False  # scalar index arithmetic: every partition recomputes it
    return True


# --- the TTIR side ---------------------------------------------------------------------------

def plan(ttir: str) -> list[Instance]:
    """The marker pairs of a TTIR, for ``rederive`` after Triton's TTGIR passes."""
    lines = ttir.split("\n")
    table = _loc_table(ttir)
    tree = _Tree(lines)
    out: list[Instance] = []
    open_pairs: dict[tuple[int, str], list[int]] = {}  # (region opener, name) -> enter lines
    for i, line in enumerate(lines):
        m = _MARKER_RE.match(line)
        if not m:
            continue
        kind, name = m.group(3), m.group(4)
        where = (tree.parent[i], name)
        if kind == "enter":
            open_pairs.setdefault(where, []).append(i)
            continue
        if not open_pairs.get(where):
            continue  # an exit without its enter in this block: nothing to place
        start = open_pairs[where].pop()
        keys = set()
        for op in tree.children.get(tree.parent[i], []):
            if start < op < i:
                for j in range(op, tree.end.get(op, op) + 1):
                    if not _MARKER_RE.match(lines[j]):
                        keys.update(_line_keys(lines[j], table))
        loops = tuple(_line_key(lines[tree.end[op]], table) for op in tree.enclosing_ops(i) if _is_loop(tree, op))
        out.append(Instance(name, lines[start], line, loops, frozenset(keys)))
    return out


# --- the TTGIR side --------------------------------------------------------------------------

def _find_loop(tree: _Tree, opener: int, key: tuple, table: dict, skip: set[int]) -> int | None:
    """The body opener of the first loop with location ``key`` under region ``opener``
    (searching through non-loop regions, not into ``skip`` operations)."""
    todo = [opener]
    while todo:
        current = todo.pop(0)
        for op in tree.children.get(current, []):
            if op in skip:
                continue
            if _is_loop(tree, op) and _line_key(tree.lines[tree.end[op]], table) == key:
                regions = tree.regions(op)
                return regions[-1] if tree.op_name(op) == "scf.while" else regions[0]
            if not _is_loop(tree, op):
                todo.extend(tree.regions(op))
    return None


def _holds_loop(tree: _Tree, opener: int) -> bool:
    """Whether a region holds a loop anywhere inside it."""
    todo = [opener]
    while todo:
        for op in tree.children.get(todo.pop(), []):
            if _is_loop(tree, op):
                return True
            todo.extend(tree.regions(op))
    return False


def _span_in(tree: _Tree, opener: int, keys: frozenset, table: dict, skip: set[int]):
    """(first, last) operation directly in region ``opener`` that holds work of ``keys``
    (itself or an operation nested in it; a region operation's own line carries no location)."""
    hits = []
    for op in tree.children.get(opener, []):
        if op in skip:
            continue
        if any(_does_work(tree.lines[j]) and not keys.isdisjoint(_line_keys(tree.lines[j], table))
               for j in range(op, tree.end.get(op, op) + 1)):
            hits.append(op)
    return (hits[0], hits[-1]) if hits else None


def _marker_line(template: str, name: str, indent: str, loc_line: str) -> str:
    """``template`` (a TTIR marker line) renamed to ``name``, indented, with ``loc_line``'s location."""
    body = re.sub(r"^\s*%[^=]*=\s*", "", template.rstrip(), count=1)
    body = _TRAILING_LOC_RE.sub("", body).rstrip()
    loc = _TRAILING_LOC_RE.search(loc_line)
    return f"{indent}{name} = {body}" + (" " + loc.group(0).strip() if loc else "")


def rederive(ttgir: str, instances: list[Instance]) -> tuple[str, list[dict]]:
    """Place ``instances`` in the partitions of every ``ttg.warp_specialize`` of ``ttgir``.

    Returns the new text and what was placed (per pair: ``scope``, ``region`` as the partition
    table names it, ``loops`` it sits in inside the region and ``source_loops`` the source had
    there: fewer where Triton flattened a loop nest), or ``ttgir`` unchanged and ``[]`` when
    it has no warp specialization or none of the instances' work went into a partition."""
    if _WS not in ttgir or not instances:
        return ttgir, []
    lines = ttgir.split("\n")
    table = _loc_table(ttgir)
    tree = _Tree(lines)
    ws_ops = [i for i, line in enumerate(lines) if _WS in line and i in tree.end]
    if not ws_ops:
        return ttgir, []
    skip = set(ws_ops)
    targets = []  # (instance, region opener or function body, region label, loops to follow)
    for n, ws in enumerate(ws_ops):
        around = tuple(_line_key(lines[tree.end[op]], table) for op in tree.enclosing_ops(ws) if _is_loop(tree, op))
        for opener in tree.regions(ws):
            label = region_name(lines[opener], n, len(ws_ops))
            for inst in instances:
                if inst.loops[:len(around)] == around:
                    targets.append((inst, opener, label, inst.loops[len(around):]))
    inserts: dict[int, list[str]] = {}  # line -> lines to put before it
    appends: dict[int, list[str]] = {}  # line -> lines to put after it
    placed, moved = [], set()
    for inst, opener, label, loops in targets:
        region, depth = opener, 0
        for key in loops:
            inner = _find_loop(tree, region, key, table, skip)
            if inner is None:  # Triton flattened or unrolled this loop: place the pair in the one around it
                break
            region, depth = inner, depth + 1
        if depth == 0 and loops and not _holds_loop(tree, region):
            continue  # the instance's loop is not in this region at all
        span = _span_in(tree, region, inst.keys, table, skip)
        if span is None:
            continue
        first, last = span
        indent = re.match(r"^\s*", lines[first]).group(0)
        n = len(placed)
        inserts.setdefault(first, []).append(_marker_line(inst.enter, f"%proton_lite_ws{n}a", indent, lines[first]))
        appends.setdefault(tree.end.get(last, last), []).insert(
            0, _marker_line(inst.exit, f"%proton_lite_ws{n}b", indent, lines[tree.end.get(last, last)]))
        placed.append({"scope": bytes.fromhex(inst.name_hex).decode("utf-8", "replace"), "region": label,
                       "loops": depth, "source_loops": len(loops)})
        moved.add(inst.name_hex)
    if not placed:
        return ttgir, []
    out = []
    for i, line in enumerate(lines):
        m = _MARKER_RE.match(line)
        if m and m.group(4) in moved:
            continue  # an old marker of a scope placed again (their results are never used)
        out.extend(inserts.get(i, ()))
        out.append(line)
        out.extend(appends.get(i, ()))
    return "\n".join(out), placed


def region_scopes(ttgir: str) -> dict[str, list[str]]:
    """The scope names whose markers lie in each partition of a TTGIR (named as in the
    partition table), placed by ``rederive`` or written there (Gluon)."""
    lines = ttgir.split("\n")
    tree = _Tree(lines)
    ws_ops = [i for i, line in enumerate(lines) if _WS in line and i in tree.end]
    out: dict[str, list[str]] = {}
    for n, ws in enumerate(ws_ops):
        for opener in tree.regions(ws):
            label = region_name(lines[opener], n, len(ws_ops))
            end = min((r for r in tree.regions(ws) if r > opener), default=tree.end[ws])
            names = out.setdefault(label, [])
            for line in lines[opener:end]:
                m = _MARKER_RE.match(line)
                name = bytes.fromhex(m.group(4)).decode("utf-8", "replace") if m else None
                if name is not None and name not in names:
                    names.append(name)
    return out
