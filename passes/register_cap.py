"""Keep an instrumented kernel at its plain occupancy: a register cap from the plain code.

Why: ptxas allocates registers for the whole kernel, and the few that the instrumentation
needs at entry and exit can move a kernel over an allocation step.  Measured on sm_90a
(2026-11-27, tests/fixed_cost_kernels.py): a row-wise RMS norm with 8 warps went from 48
registers plain to 56-60 instrumented, 5 -> 4 resident CTAs per SM, for a kernel that only
records its CTA's lifetime.  So the cubin stage assembles the plain PTX once, reads its register
count, and gives the instrumented PTX a ``.maxnreg`` as high as the plain kernel's
occupancy allows (never below what the plain kernel uses).  Only for kernels that record
lifetimes only (no scope): their instrumentation holds no register across the kernel, so
the cap costs no spill.  It costs the compile one more ptxas run of the plain code; any
failure there leaves the PTX as it is.
"""
from __future__ import annotations

import re
import struct

REGS_PER_SM = 65536
THREADS_PER_SM = 2048
MAX_CTAS_PER_SM = 32
REG_UNIT = 256  # registers are allocated per warp in units of 256 (8 per thread)
MAX_REGS = 255
_ENTRY_END = re.compile(r"(\.visible\s+\.entry\s+[\w$]+\s*\([^)]*\))", re.S)
_MAXNREG = re.compile(r"\.maxnreg\s+(\d+)")


def ctas_per_sm(regs: int, threads: int) -> int:
    """Resident CTAs per SM as registers and threads allow (shared memory is unchanged by
    lifetimes-only instrumentation)."""
    warps = -(-threads // 32)
    per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
    by_regs = REGS_PER_SM // max(1, per_warp * warps)
    return min(by_regs, THREADS_PER_SM // max(1, threads), MAX_CTAS_PER_SM)


def occupancy_cap(plain_regs: int, threads: int) -> int:
    """The most registers per thread that keep the plain kernel's resident CTAs per SM."""
    want = ctas_per_sm(plain_regs, threads)
    cap = plain_regs
    for regs in range(plain_regs, MAX_REGS + 1):
        if ctas_per_sm(regs, threads) < want:
            break
        cap = regs
    return cap


def with_cap(ptx: str, cap: int) -> str:
    """``ptx`` with ``.maxnreg cap`` on its kernel (a lower cap already there is kept)."""
    found = _MAXNREG.search(ptx)
    if found:
        return ptx if int(found.group(1)) <= cap else _MAXNREG.sub(f".maxnreg {cap}", ptx, count=1)
    return _ENTRY_END.sub(lambda m: f"{m.group(1)}\n.maxnreg {cap}", ptx, count=1)


def cubin_registers(cubin: bytes) -> int | None:
    """Registers per thread of the (only) kernel in a cubin: its EIATTR_REGCOUNT attribute
    (0x2f, a symbol index and a value) in the ELF's ``.nv.info`` section, the number that
    ``cuobjdump --dump-resource-usage`` prints as REG."""
    try:
        shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
        names = heads[shstrndx][4]
        for head in heads:
            name = cubin[names + head[0]:cubin.index(b"\0", names + head[0])]
            if name != b".nv.info":
                continue
            data, i = cubin[head[4]:head[4] + head[5]], 0
            while i + 4 <= len(data):
                fmt, attr, size = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
                if fmt == 0x04 and attr == 0x2F and size >= 8:  # EIFMT_SVAL, EIATTR_REGCOUNT
                    return struct.unpack_from("<II", data, i + 4)[1]
                i += 4 + size if fmt == 0x04 else 4
    except (struct.error, ValueError, IndexError):
        return None
    return None


def capped_ptx(instrumented_ptx: str, plain_ptx: str, make_cubin, metadata, threads: int) -> tuple[str, dict]:
    """The instrumented PTX of a kernel without scopes with ``.maxnreg`` at its plain
    occupancy, and what was decided (the kernel's metadata keeps it).  The plain PTX is
    assembled by Triton's own cubin stage (``make_cubin``: its ptxas, its flags), so the
    count is the one the plain kernel runs with."""
    try:
        plain = cubin_registers(make_cubin(plain_ptx, metadata))
    except Exception:  # noqa: BLE001 - a plain build that fails here fails without us too
        plain = None
    if plain is None:
        return instrumented_ptx, {"plain": None, "cap": None}
    cap = occupancy_cap(plain, threads)
    return with_cap(instrumented_ptx, cap), {"plain": plain, "cap": cap}
