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
    ["pid", axis] / ["nprog", axis]   ``tl.program_id(axis)`` / ``tl.num_programs(axis)``
    ["cmp", pred, bits, a, b]         ``arith.cmpi`` (1 or 0); pred: eq ne slt sle sgt sge ult ule ugt uge
    ["select", c, a, b]               ``arith.select`` on integers

An expression that reads a program id (a grid-stride loop ``range(pid, n, num_programs)``,
a persistent tile loop, a causal bound ``range(0, (pid + 1) * BM, BN)``) has one value per
program; ``max_over_programs`` evaluates it for every program id of the launch's grid at
once (numpy, the same wrap-around semantics) and takes the largest, which is what every
unit's capacity must hold.  Anything else (a value loaded from memory, another loop's
variable) is not built: such a kernel takes records from the launch's pool
(docs/design.md §3).
"""
from __future__ import annotations

import operator
from typing import Any, Mapping

import numpy as np

CASTS = ("exts", "extu", "trunc")
CMP_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
MAX_PROGRAMS_EVALUATED = 1 << 24  # program ids evaluated per launch at most (in blocks of PROGRAM_BLOCK)
PROGRAM_BLOCK = 1 << 20


class BoundError(ValueError):
    """The expression cannot be evaluated for these arguments (missing, not an int, bad step)."""


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _unsigned(v: int, bits: int) -> int:
    return v & ((1 << bits) - 1)


class _Scalar:
    """Python-int arithmetic for ``evaluate`` (``_Vector``: the same on numpy arrays)."""

    max, min = staticmethod(max), staticmethod(min)

    @staticmethod
    def nonzero(b):
        if b == 0:
            raise BoundError("division by zero in a loop bound")
        return b

    @staticmethod
    def div(a, b):  # MLIR's divsi: truncating
        q = abs(a) // abs(_Scalar.nonzero(b))
        return q if (a >= 0) == (b >= 0) else -q


class _Vector:
    max, min = staticmethod(np.maximum), staticmethod(np.minimum)

    @staticmethod
    def nonzero(b):
        if np.any(b == 0):
            raise BoundError("division by zero in a loop bound")
        return b

    @staticmethod
    def div(a, b):
        q = np.abs(a) // np.abs(_Vector.nonzero(b))
        return np.where((a >= 0) == (b >= 0), q, -q)


# one table for both evaluators: each op takes operands already made signed (or unsigned)
# at the op's width and the arithmetic ``m`` (_Scalar or _Vector); the result is wrapped after
_SIGNED_OPS = {
    "add": lambda a, b, m: a + b, "sub": lambda a, b, m: a - b, "mul": lambda a, b, m: a * b,
    "divs": lambda a, b, m: m.div(a, b), "rems": lambda a, b, m: a - b * m.div(a, b),
    "ceildivs": lambda a, b, m: -((-a) // m.nonzero(b)), "floordivs": lambda a, b, m: a // m.nonzero(b),
    "maxs": lambda a, b, m: m.max(a, b), "mins": lambda a, b, m: m.min(a, b),
}
_UNSIGNED_OPS = {
    "divu": lambda a, b, m: a // m.nonzero(b), "remu": lambda a, b, m: a % m.nonzero(b),
    "maxu": lambda a, b, m: m.max(a, b), "minu": lambda a, b, m: m.min(a, b),
}
BINARY_OPS = (*_SIGNED_OPS, *_UNSIGNED_OPS)
_CMP_OPS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
            "ge": operator.ge}


def _cmp_op(pred: str):
    """(compare as unsigned, the comparison) of an ``arith.cmpi`` predicate; eq/ne compare bits."""
    return pred[0] != "s", _CMP_OPS[pred[1:] if pred[0] in "su" else pred]


def _binary(op: str, bits: int, a: int, b: int) -> int:
    if op in _UNSIGNED_OPS:
        return _signed(_UNSIGNED_OPS[op](_unsigned(a, bits), _unsigned(b, bits), _Scalar), bits)
    if op not in _SIGNED_OPS:
        raise BoundError(f"unknown operation {op!r}")
    return _signed(_SIGNED_OPS[op](_signed(a, bits), _signed(b, bits), _Scalar), bits)


def _cmp(pred: str, bits: int, a: int, b: int) -> int:
    unsigned, op = _cmp_op(pred)
    conv = _unsigned if unsigned else _signed
    return int(op(conv(a, bits), conv(b, bits)))


def evaluate(expr: Any, args: Mapping[str, Any], programs: Mapping[str, int] | None = None) -> int:
    """The value of ``expr`` for the kernel arguments ``args`` (name -> value) and, for an
    expression that reads them, ``programs`` (``"pid0"``.. and ``"nprog0"``..: program ids and
    grid size per axis)."""
    kind = expr[0]
    if kind == "const":
        return int(expr[1])
    if kind in ("pid", "nprog"):
        key = f"{kind}{expr[1]}"
        if programs is None or key not in programs:
            raise BoundError(f"the loop bound reads {'a program id' if kind == 'pid' else 'the grid'}: "
                             "evaluate it with max_over_programs")
        return int(programs[key])
    if kind == "cmp":
        return _cmp(expr[1], expr[2], evaluate(expr[3], args, programs), evaluate(expr[4], args, programs))
    if kind == "select":
        return evaluate(expr[2] if evaluate(expr[1], args, programs) & 1 else expr[3], args, programs)
    if kind == "arg":
        name, bits = expr[1], expr[2]
        if name not in args:
            raise BoundError(f"argument {name!r} is missing")
        value = args[name]
        if not isinstance(value, int):  # bool is an int; a tensor or float is not a loop bound
            raise BoundError(f"argument {name!r} is {type(value).__name__}, not an int")
        return _signed(int(value), bits)
    if kind in BINARY_OPS:
        return _binary(kind, expr[1], evaluate(expr[2], args, programs), evaluate(expr[3], args, programs))
    if kind in CASTS:
        to_bits, from_bits, v = expr[1], expr[2], evaluate(expr[3], args, programs)
        if kind == "exts":
            return _signed(v, from_bits)
        if kind == "extu":
            return _unsigned(v, from_bits)
        return _signed(v, to_bits)
    if kind == "trips":
        lb, ub, step = (evaluate(e, args, programs) for e in expr[1:4])
        if step <= 0:
            raise BoundError(f"loop step {step} is not positive")
        return max(0, -(-(ub - lb) // step))
    if kind == "sum":
        return sum(evaluate(e, args, programs) for e in expr[1:])
    if kind == "prod":
        r = 1
        for e in expr[1:]:
            r *= evaluate(e, args, programs)
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


def program_axes(expr: Any) -> set[int]:
    """Grid axes whose program id the expression reads (``["pid", axis]``)."""
    if expr[0] == "pid":
        return {int(expr[1])}
    out: set[int] = set()
    for e in expr[1:]:
        if isinstance(e, list):
            out |= program_axes(e)
    return out


def reads_grid(expr: Any) -> bool:
    """Whether the expression reads a program id or the grid size."""
    if expr[0] in ("pid", "nprog"):
        return True
    return any(isinstance(e, list) and reads_grid(e) for e in expr[1:])


def max_over_programs(expr: Any, args: Mapping[str, Any], grid: tuple[int, int, int]) -> int:
    """The largest value of ``expr`` over every program of a launch with this ``grid``.

    Program ids are evaluated all at once with numpy (``_vector``, the same semantics as
    ``evaluate``), in blocks; an expression that reads no program id is evaluated once."""
    programs = {f"nprog{a}": int(grid[a]) for a in range(3)}
    axes = sorted(program_axes(expr))
    if not axes:
        return evaluate(expr, args, programs)
    sizes = [int(grid[a]) for a in axes]
    total = 1
    for n in sizes:
        total *= n
    if total <= 0:
        return 0
    if total > MAX_PROGRAMS_EVALUATED:
        raise BoundError(f"the loop bound depends on the program id and the grid has {total:,} programs "
                         f"(more than {MAX_PROGRAMS_EVALUATED:,} are not evaluated at launch)")
    best = None
    for start in range(0, total, PROGRAM_BLOCK):
        flat = np.arange(start, min(total, start + PROGRAM_BLOCK), dtype=np.int64)
        env = dict(programs)
        for a, n in zip(axes, sizes):
            env[f"pid{a}"] = flat % n
            flat = flat // n
        value = int(np.max(_vector(expr, args, env)))
        best = value if best is None else max(best, value)
    return best


def _wrap(v, bits: int, signed: bool = True):
    """``v`` (int64 array) as a ``bits``-wide two's-complement (or unsigned) integer in int64."""
    if bits >= 64:
        return v.astype(np.int64)  # int64 arithmetic already wraps at 64 bits
    v = v & ((1 << bits) - 1)
    return np.where(v >> (bits - 1) & 1, v - (1 << bits), v) if signed else v


def _unsigned_vec(v, bits: int):
    """``v`` as an unsigned ``bits``-wide integer (uint64 at 64 bits, where int64 cannot hold it)."""
    return _wrap(v, bits, False) if bits < 64 else v.astype(np.uint64)


def _vector(expr: Any, args: Mapping[str, Any], env: Mapping[str, Any]):
    """``evaluate`` over int64 arrays of program ids (64-bit unsigned ops are done on uint64)."""
    kind = expr[0]
    if kind in ("pid", "nprog"):
        return np.asarray(env[f"{kind}{expr[1]}"], dtype=np.int64)
    if kind in ("const", "arg"):
        return np.asarray(evaluate(expr, args), dtype=np.int64)
    if kind == "cmp":
        bits, (unsigned, op) = expr[2], _cmp_op(expr[1])
        a, b = _vector(expr[3], args, env), _vector(expr[4], args, env)
        a, b = (_unsigned_vec(a, bits), _unsigned_vec(b, bits)) if unsigned else (_wrap(a, bits), _wrap(b, bits))
        return op(a, b).astype(np.int64)
    if kind == "select":
        return np.where(_vector(expr[1], args, env) & 1, _vector(expr[2], args, env), _vector(expr[3], args, env))
    if kind in BINARY_OPS:
        bits, a, b = expr[1], _vector(expr[2], args, env), _vector(expr[3], args, env)
        if kind in _UNSIGNED_OPS:
            r = _UNSIGNED_OPS[kind](_unsigned_vec(a, bits), _unsigned_vec(b, bits), _Vector)
            return _wrap(r.astype(np.int64), bits)
        with np.errstate(over="ignore"):
            return _wrap(_SIGNED_OPS[kind](_wrap(a, bits), _wrap(b, bits), _Vector), bits)
    if kind in CASTS:
        to_bits, from_bits, v = expr[1], expr[2], _vector(expr[3], args, env)
        if kind == "exts":
            return _wrap(v, from_bits)
        if kind == "extu":
            return _wrap(v, from_bits, False) if from_bits < 64 else v
        return _wrap(v, to_bits)
    if kind == "trips":
        lb, ub, step = (_vector(e, args, env) for e in expr[1:4])
        if np.any(step <= 0):
            raise BoundError("loop step is not positive")
        # as exact integers: bounds are at most 64-bit, their difference fits in float only roughly
        return np.maximum(0, -((lb - ub) // step))
    if kind in ("sum", "prod"):
        parts = [_vector(e, args, env) for e in expr[1:]]
        # exact in Python's model; here saturated, so that an overflow never reads as a small count
        acc = np.asarray(0 if kind == "sum" else 1, dtype=np.int64)
        guard = np.asarray(0.0 if kind == "sum" else 1.0)
        for p in parts:
            acc = acc + p if kind == "sum" else acc * p
            guard = guard + p.astype(np.float64) if kind == "sum" else guard * p.astype(np.float64)
        return np.where(np.abs(guard) > 2.0 ** 62, np.sign(guard).astype(np.int64) * (1 << 62), acc)
    raise BoundError(f"unknown expression {kind!r}")
