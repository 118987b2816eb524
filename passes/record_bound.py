"""How many records one recording unit writes at most, read from the kernel's TTIR.

The PTX pass sees loops only as backward branches, so a scope inside a loop gets
``loop_capacity`` slots.  When every loop around the scope markers has compile-time bounds
(``for i in range(0, N)`` with ``N`` a constexpr, or literal bounds), the TTIR says exactly
how often each marker runs: ``scf.for %i = %c0 to %c300 step %c1`` with ``arith.constant``
operands.  The bound is

    sum over markers of the product of the trip counts of the loops around it,

counting both branches of an ``scf.if`` (an upper bound, which is what a capacity needs).
Anything else around a marker (a loop bound from a kernel argument, an ``scf.while``, a
marker in a function that is called rather than inlined) makes the bound unknown, and the
pass keeps ``loop_capacity``.  Markers keep their dynamic count through Triton's
pipelining and LLVM's unrolling (they are side-effecting operations), so a bound taken
here holds for the code that runs.
"""
from __future__ import annotations

import re

from proton_lite.language import MARKER_TAG

_CONST = re.compile(r"^\s*(%[\w.$-]+)\s*=\s*arith\.constant\s+(-?\d+)\s*:\s*(?:i\d+|index)\b")
_FOR = re.compile(r"\bscf\.for\s+%[\w.$-]+\s*=\s*(%[\w.$-]+)\s+to\s+(%[\w.$-]+)\s+step\s+(%[\w.$-]+)")
_FUNC = re.compile(r"^\s*tt\.func\b")


def _trip_count(lb: int, ub: int, step: int) -> int | None:
    if step <= 0:
        return None
    return max(0, -(-(ub - lb) // step))


def record_bound(ttir: str) -> int | None:
    """Most records one unit can write in this kernel, or None when it depends on run-time values."""
    consts: dict[str, int] = {}
    # one entry per open region: how many times its body runs per run of the region around it
    # (None: not known at compile time)
    stack: list[int | None] = []
    total = 0
    functions = 0
    for line in ttir.split("\n"):
        m = _CONST.match(line)
        if m:
            consts[m.group(1)] = int(m.group(2))
        stripped = line.strip()
        if _FUNC.match(line):
            functions += 1
            if functions > 1:  # a helper that was not inlined: how often it is called is not counted
                return None
            stack = []
        if MARKER_TAG in line:
            times = 1
            for factor in stack:
                if factor is None:
                    return None
                times *= factor
            total += times
        closes = stripped.startswith("}")
        opens = stripped.endswith("{")
        if closes and stack:
            stack.pop()
        if opens:
            f = _FOR.search(line)
            if f:
                bounds = [consts.get(name) for name in f.groups()]
                stack.append(None if None in bounds else _trip_count(*bounds))
            elif "scf.while" in line or "} do {" in stripped:
                stack.append(None)
            else:  # functions, scf.if / else branches, other regions: once per entry
                stack.append(1)
    return total
