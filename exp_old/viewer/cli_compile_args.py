"""The ``compile`` command's arguments checked against the kernel: ``--constexpr`` values,
``--signature`` types (by position or by name) and ``--divisible-by-16``, each refused with
a message that names the argument and the fix."""
from __future__ import annotations

import ast

from proton_lite import compat
from proton_lite.viewer.cli_io import CliError


def parse_value(text: str):
    """A --constexpr value: Python literal (int, float, bool, None, quoted str), true/false, else the text."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, (int, float, bool, str, type(None))) else text


def parse_constexprs(items: list[str], kernel) -> dict:
    names = [p.name for p in kernel.params]
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"--constexpr {item!r}: expected NAME=VALUE, e.g. --constexpr BLOCK=1024")
        if key not in names:
            raise CliError(f"--constexpr {key}: {kernel.__name__} has no argument {key!r}; its arguments: "
                           f"{', '.join(names)}")
        out[key] = parse_value(value)
    for p in kernel.params:
        if p.is_constexpr and p.name not in out and p.has_default:
            out[p.name] = p.default
    return out


def check_constexprs_complete(kernel, constexprs: dict) -> None:
    missing = [p.name for p in kernel.params if p.is_constexpr and p.name not in constexprs and not p.has_default]
    if missing:
        raise CliError(f"{kernel.__name__} needs a value for constexpr argument(s) {', '.join(missing)}; add "
                       + " ".join(f"--constexpr {m}=VALUE" for m in missing))


def _check_type(ty: str, arg: str) -> None:
    str_to_ty = compat.str_to_ty()

    if ty == "constexpr":
        _bad_type(ty, arg, "give constexpr arguments with --constexpr NAME=VALUE instead")
    if ty.startswith("tensordesc"):
        return  # checked by Triton
    try:
        str_to_ty(ty, None)
    except Exception:  # noqa: BLE001  (triton raises KeyError / IndexError for unknown names)
        _bad_type(ty, arg, None)


def _bad_type(ty: str, arg: str, fix: str | None):
    raise CliError(f"--signature: {ty!r} (argument {arg}) is not a Triton type; "
                   + (fix or "use e.g. *fp32, *fp16, *bf16, *i8, i32, i64, fp32, i1"))


def _split_types(text: str) -> list[str]:
    """Split a signature on the commas between types, not those inside a type
    (``tensordesc<fp16[128, 64]>``)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "[<(") - (ch in "]>)")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def parse_signature(text: str, kernel, constexprs: dict) -> dict:
    """``"*fp32,*fp32,i32"`` (one type per non-constexpr argument, in order) or ``"x:*fp32,n:i32"``."""
    free = [p.name for p in kernel.params if not p.is_constexpr and p.name not in constexprs]
    items = [s.strip() for s in _split_types(text)] if text.strip() else []
    example = ",".join("*fp32" if n.endswith("ptr") else "i32" for n in free)
    named = [":" in s for s in items]
    if any(named):
        if not all(named):
            raise CliError("--signature: give either every type by position or every one as NAME:TYPE, not both")
        sig = {}
        for s in items:
            name, _, ty = s.partition(":")
            name, ty = name.strip(), ty.strip()
            if name not in free:
                raise CliError(f"--signature: {kernel.__name__} has no non-constexpr argument {name!r}; "
                               f"its arguments: {', '.join(free)}")
            sig[name] = ty
        missing = [n for n in free if n not in sig]
        if missing:
            raise CliError(f"--signature lacks a type for {', '.join(missing)}; e.g. --signature '{example}'")
    else:
        if len(items) != len(free):
            raise CliError(f"--signature has {len(items)} type(s) but {kernel.__name__} takes {len(free)} "
                           f"non-constexpr argument(s) ({', '.join(free)}); e.g. --signature '{example}'")
        sig = dict(zip(free, items))
    for name, ty in sig.items():
        _check_type(ty, name)
    return sig


def _divisible(names: str | None, kernel) -> list[str]:
    """``--divisible-by-16 a_ptr,K``: arguments specialized as multiples of 16, as Triton's
    launcher does for aligned pointers and integers (this changes what the pipeliner does)."""
    chosen = [n.strip() for n in (names or "").split(",") if n.strip()]
    unknown = [n for n in chosen if n not in kernel.arg_names]
    if unknown:
        raise CliError(f"--divisible-by-16: no argument {unknown[0]!r}; arguments: {', '.join(kernel.arg_names)}")
    return chosen
