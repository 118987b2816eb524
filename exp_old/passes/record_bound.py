"""How many records one recording unit writes at most, read from the kernel's TTIR.

The PTX pass sees loops only as backward branches.  The TTIR still has them as ``scf.for``
with their bounds, so the bound is

    sum over markers of the product of the trip counts of the loops around it,

counting both branches of an ``scf.if`` (an upper bound, which is what a capacity needs).
Each trip count is an expression over constants and kernel arguments, followed through
the ``arith`` integer ops that compute it (``%1 = arith.divsi %0, %c64_i32``): a
constexpr bound gives a number (``record_bound``); a bound from launch arguments, program
ids and the grid size (``tl.program_id``, ``tl.num_programs``: grid-stride and persistent
loops) gives an expression that the profile allocator evaluates for every launch, the
largest over the launch's programs (``record_bound_expr``, format in
``proton_lite/bound_expr.py``).  Anything else around a marker (a bound loaded from
memory or taken from another loop's variable, an ``scf.while``, a marker in a function
that is called rather than inlined) makes the bound unknown, and the kernel takes
records from a pool at run time (docs/design.md §3).  Markers keep their dynamic count
through Triton's pipelining and LLVM's unrolling (they are side-effecting operations), so
a bound taken here holds for the code that runs.
"""
from __future__ import annotations

import re

from proton_lite.bound_expr import CMP_PREDICATES, BoundError, arguments, evaluate, reads_grid
from proton_lite.markers import MARKER_TAG

_NAME = r"%[\w.$-]+"
_INT_TYPE = r"(i\d+|index)"
_CONST = re.compile(rf"^\s*({_NAME})\s*=\s*arith\.constant\s+(-?\d+)\s*:\s*{_INT_TYPE}\b")
_BOOL_CONST = re.compile(rf"^\s*({_NAME})\s*=\s*arith\.constant\s+(true|false)\b")
_BINARY = re.compile(rf"^\s*({_NAME})\s*=\s*arith\.(\w+)\s+({_NAME})\s*,\s*({_NAME})\s*"
                     rf"(?:overflow<[\w, ]*>\s*)?:\s*{_INT_TYPE}\b")
_CAST = re.compile(rf"^\s*({_NAME})\s*=\s*arith\.(extsi|extui|trunci|index_cast|index_castui)\s+({_NAME})\s*"
                   rf"(?:overflow<[\w, ]*>\s*)?:\s*{_INT_TYPE}\s+to\s+{_INT_TYPE}\b")
_PROGRAM = re.compile(rf"^\s*({_NAME})\s*=\s*tt\.(get_program_id|get_num_programs)\s+([xyz])\s*:\s*i32\b")
_CMP = re.compile(rf"^\s*({_NAME})\s*=\s*arith\.cmpi\s+(\w+)\s*,\s*({_NAME})\s*,\s*({_NAME})\s*:\s*{_INT_TYPE}\b")
_SELECT = re.compile(rf"^\s*({_NAME})\s*=\s*arith\.select\s+({_NAME})\s*,\s*({_NAME})\s*,\s*({_NAME})\s*:\s*"
                     rf"{_INT_TYPE}\b")
_FOR = re.compile(rf"\bscf\.for\s+(?:unsigned\s+)?{_NAME}\s*=\s*({_NAME})\s+to\s+({_NAME})\s+step\s+({_NAME})")
_FUNC = re.compile(r"^\s*tt\.func\b")
# an argument, with the attributes of Triton's specializations (`{tt.divisibility = 16 : i32}`)
_FUNC_ARG = re.compile(rf"({_NAME})\s*:\s*{_INT_TYPE}\s+(?:\{{[^}}]*\}}\s*)?loc\(\"([\w$]+)\"")

_ARITH = {"addi": "add", "subi": "sub", "muli": "mul", "divsi": "divs", "divui": "divu", "ceildivsi": "ceildivs",
          "floordivsi": "floordivs", "remsi": "rems", "remui": "remu", "maxsi": "maxs", "minsi": "mins",
          "maxui": "maxu", "minui": "minu"}


def _bits(ty: str) -> int:
    return 64 if ty == "index" else int(ty[1:])


def record_bound_expr(ttir: str):
    """Most records one unit can write, as an expression (``proton_lite.bound_expr``) over the
    kernel's arguments; ``["const", n]`` when it is known at compile time; None when unknown."""
    values: dict[str, list] = {}  # SSA name -> expression, for the integer values followed
    # one entry per open region: how many times its body runs per run of the region around it
    # (None: not known at launch time)
    stack: list = []
    terms: list = []
    functions = 0
    for line in ttir.split("\n"):
        stripped = line.strip()
        if _FUNC.match(line):
            functions += 1
            if functions > 1:  # a helper that was not inlined: how often it is called is not counted
                return None
            stack = []
            for name, ty, py_name in _FUNC_ARG.findall(line):
                values[name] = ["arg", py_name, _bits(ty)]
        m = _CONST.match(line)
        if m:
            values[m.group(1)] = ["const", int(m.group(2))]
        elif (m := _BOOL_CONST.match(line)):
            values[m.group(1)] = ["const", int(m.group(2) == "true")]
        elif (m := _BINARY.match(line)) and m.group(2) in _ARITH:
            a, b = values.get(m.group(3)), values.get(m.group(4))
            if a is not None and b is not None:
                values[m.group(1)] = [_ARITH[m.group(2)], _bits(m.group(5)), a, b]
        elif (m := _PROGRAM.match(line)):
            values[m.group(1)] = ["pid" if m.group(2) == "get_program_id" else "nprog", "xyz".index(m.group(3))]
        elif (m := _CMP.match(line)):
            a, b = values.get(m.group(3)), values.get(m.group(4))
            if a is not None and b is not None and m.group(2) in CMP_PREDICATES:
                values[m.group(1)] = ["cmp", m.group(2), _bits(m.group(5)), a, b]
        elif (m := _SELECT.match(line)):
            c, a, b = values.get(m.group(2)), values.get(m.group(3)), values.get(m.group(4))
            if c is not None and a is not None and b is not None:
                values[m.group(1)] = ["select", c, a, b]
        elif (m := _CAST.match(line)):
            a = values.get(m.group(3))
            if a is not None:
                op, frm, to = m.group(2), _bits(m.group(4)), _bits(m.group(5))
                kind = "exts" if op == "extsi" or (op == "index_cast" and to > frm) else \
                    "extu" if op in ("extui", "index_castui") and to > frm else "trunc" if to < frm else None
                values[m.group(1)] = a if kind is None else [kind, to, frm, a]
        if MARKER_TAG in line:
            if any(f is None for f in stack):
                return None
            factors = [f for f in stack if f != ["const", 1]]
            terms.append(["prod", *factors] if factors else ["const", 1])
        closes = stripped.startswith("}")
        opens = stripped.endswith("{")
        if closes and stack:
            stack.pop()
        if opens:
            f = _FOR.search(line)
            if f:
                bounds = [values.get(name) for name in f.groups()]
                stack.append(None if None in bounds else ["trips", *bounds])
            elif "scf.while" in line or "} do {" in stripped:
                stack.append(None)
            else:  # functions, scf.if / else branches, other regions: once per entry
                stack.append(["const", 1])
    counted: dict[str, list] = {}  # the same loop nest around several markers: one term, counted
    for term in terms:
        key = repr(term)
        counted[key] = [counted[key][0] + 1, term] if key in counted else [1, term]
    expr = ["sum", *(t if n == 1 else ["prod", ["const", n], t] for n, t in counted.values())] if terms \
        else ["const", 0]
    if not arguments(expr) and not reads_grid(expr):
        try:
            return ["const", evaluate(expr, {})]
        except BoundError:  # e.g. a constant loop with a non-positive step: not sized from the code
            return None
    return expr


def record_bound(ttir: str) -> int | None:
    """Most records one unit can write, or None when it depends on launch or run-time values."""
    expr = record_bound_expr(ttir)
    return expr[1] if expr is not None and expr[0] == "const" else None
