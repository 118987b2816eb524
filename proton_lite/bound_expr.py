"""Record bounds that depend on launch arguments: a small expression format and its evaluator.

``passes/record_bound.py`` reads, from a kernel's TTIR, how many records one recording
unit writes at most.  When a loop bound comes from a kernel argument (``range(0, K, BK)``,
``range(tl.cdiv(K, BK))``), that number is an expression over the arguments; it is stored
in the kernel's metadata (``records_per_unit_expr``) in the JSON form below, and the
profile allocator evaluates it for every launch with that launch's arguments, so the
buffer holds exactly what the kernel can write.

Form (nested lists, JSON-able)::

    ["const", v]                      an integer
    ["arg", name, bits]               kernel argument ``name`` as a ``bits``-wide integer
    [op, bits, a, b]                  an ``arith`` op on ``bits``-wide integers, with MLIR's
                                      semantics (two's-complement wrap; ``divs`` truncates)
    ["exts" | "extu" | "trunc", to_bits, from_bits, a]
    ["trips", lb, ub, step]           iterations of ``scf.for`` (signed bounds)
    ["sum", e...] / ["prod", e...]    exact (unbounded) integer arithmetic

Only what the kernel computes on the host side of Triton's type system is here: an
expression that needs anything else (a value loaded from memory, a program id, a loop
variable) is not built, and the kernel keeps its compile-time capacity.
"""
from __future__ import annotations

from typing import Any, Mapping

BINARY_OPS = ("add", "sub", "mul", "divs", "divu", "ceildivs", "floordivs", "rems", "remu", "maxs", "mins",
              "maxu", "minu")
CASTS = ("exts", "extu", "trunc")


class BoundError(ValueError):
    """The expression cannot be evaluated for these arguments (missing, not an int, bad step)."""


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _unsigned(v: int, bits: int) -> int:
    return v & ((1 << bits) - 1)


def _div_trunc(a: int, b: int) -> int:
    if b == 0:
        raise BoundError("division by zero in a loop bound")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _binary(op: str, bits: int, a: int, b: int) -> int:
    if op in ("divu", "remu", "maxu", "minu"):
        ua, ub = _unsigned(a, bits), _unsigned(b, bits)
        if op in ("divu", "remu") and ub == 0:
            raise BoundError("division by zero in a loop bound")
        r = {"divu": lambda: ua // ub, "remu": lambda: ua % ub, "maxu": lambda: max(ua, ub),
             "minu": lambda: min(ua, ub)}[op]()
        return _signed(r, bits)
    a, b = _signed(a, bits), _signed(b, bits)
    if op == "add":
        r = a + b
    elif op == "sub":
        r = a - b
    elif op == "mul":
        r = a * b
    elif op == "divs":
        r = _div_trunc(a, b)
    elif op == "rems":
        r = a - b * _div_trunc(a, b)
    elif op == "ceildivs":
        if b == 0:
            raise BoundError("division by zero in a loop bound")
        r = -((-a) // b)
    elif op == "floordivs":
        if b == 0:
            raise BoundError("division by zero in a loop bound")
        r = a // b
    elif op == "maxs":
        r = max(a, b)
    elif op == "mins":
        r = min(a, b)
    else:
        raise BoundError(f"unknown operation {op!r}")
    return _signed(r, bits)


def evaluate(expr: Any, args: Mapping[str, Any]) -> int:
    """The value of ``expr`` for the kernel arguments ``args`` (name -> value)."""
    kind = expr[0]
    if kind == "const":
        return int(expr[1])
    if kind == "arg":
        name, bits = expr[1], expr[2]
        if name not in args:
            raise BoundError(f"argument {name!r} is missing")
        value = args[name]
        if not isinstance(value, int):  # bool is an int; a tensor or float is not a loop bound
            raise BoundError(f"argument {name!r} is {type(value).__name__}, not an int")
        return _signed(int(value), bits)
    if kind in BINARY_OPS:
        return _binary(kind, expr[1], evaluate(expr[2], args), evaluate(expr[3], args))
    if kind in CASTS:
        to_bits, from_bits, v = expr[1], expr[2], evaluate(expr[3], args)
        if kind == "exts":
            return _signed(v, from_bits)
        if kind == "extu":
            return _unsigned(v, from_bits)
        return _signed(v, to_bits)
    if kind == "trips":
        lb, ub, step = (evaluate(e, args) for e in expr[1:4])
        if step <= 0:
            raise BoundError(f"loop step {step} is not positive")
        return max(0, -(-(ub - lb) // step))
    if kind == "sum":
        return sum(evaluate(e, args) for e in expr[1:])
    if kind == "prod":
        r = 1
        for e in expr[1:]:
            r *= evaluate(e, args)
        return r
    raise BoundError(f"unknown expression {kind!r}")


def arguments(expr: Any) -> set[str]:
    """Names of the kernel arguments the expression reads."""
    if expr[0] == "arg":
        return {expr[1]}
    out: set[str] = set()
    for e in expr[1:]:
        if isinstance(e, list):
            out |= arguments(e)
    return out
