"""Keep an instrumented kernel at its plain occupancy: a register cap from the plain code.

Why: ptxas allocates registers for the whole kernel, and the few that the instrumentation
needs can move a kernel over an allocation step.  Measured on sm_90a (2026-11-27,
tests/fixed_cost_kernels.py, bench.py's kernels): a row-wise RMS norm with 8 warps and no
scope went from 48 registers plain to 56-60 instrumented (5 -> 4 resident CTAs per SM), a
row softmax with two scopes from 40 to 46 (6 -> 5).  So the cubin stage checks the
instrumented build: where it has fewer resident CTAs than its threads allow, it builds the
plain PTX too (Triton's own ``make_cubin``, same ptxas and flags) and, if that one had more,
builds the instrumented PTX again under ``.maxnreg`` at the plain occupancy, keeping it
unless ptxas then spilled more.  What was decided goes into the kernel's metadata
(``proton_lite.registers``).

A kernel may come in more than one form (``build_best``): a kernel without scopes keeps its
CTA's start pair (its low halves) in two registers until exit (ptx_lifetimes.py); where
ptxas spills for them, or cannot keep the plain occupancy, the form that writes the header
at entry is built too and the one that spills less, then keeps more resident CTAs, is kept.
"""
from __future__ import annotations

import re
import struct
import threading

REGS_PER_SM = 65536
THREADS_PER_SM = 2048
MAX_CTAS_PER_SM = 32
REG_UNIT = 256  # registers are allocated per warp in units of 256 (8 per thread)
MAX_REGS = 255
REGCOUNT, FRAME_SIZE = 0x2F, 0x11  # EIATTR_REGCOUNT, EIATTR_FRAME_SIZE (local bytes per thread: spills)
_ENTRY_END = re.compile(r"(\.visible\s+\.entry\s+[\w$]+\s*\([^)]*\))", re.S)
_MAXNREG = re.compile(r"\.maxnreg\s+(\d+)")


def ctas_per_sm(regs: int, threads: int) -> int:
    """Resident CTAs per SM as registers and threads allow (shared memory is not counted:
    the instrumentation adds little or none)."""
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


def elf_section(cubin: bytes, wanted: bytes) -> bytes | None:
    """The bytes of the section named ``wanted`` in a cubin's ELF (64-bit, little-endian), or
    None where there is none or the header cannot be read."""
    try:
        shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        heads = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
        names = heads[shstrndx][4]
        for head in heads:
            if cubin[names + head[0]:cubin.index(b"\0", names + head[0])] == wanted:
                return cubin[head[4]:head[4] + head[5]]
    except (struct.error, ValueError, IndexError):
        return None
    return None


def cubin_attribute(cubin: bytes, attr: int) -> int | None:
    """The value of an EIATTR attribute (a symbol index, then the value) of the (only) kernel
    in a cubin's ELF ``.nv.info`` section; REGCOUNT is what ``cuobjdump --dump-resource-usage``
    prints as REG, FRAME_SIZE the bytes of local memory ptxas spilled to per thread."""
    data = elf_section(cubin, b".nv.info")
    if data is None:
        return None
    i = 0
    try:
        while i + 4 <= len(data):
            fmt, kind, size = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
            if fmt == 0x04 and kind == attr and size >= 8:  # EIFMT_SVAL
                return struct.unpack_from("<II", data, i + 4)[1]
            i += 4 + size if fmt == 0x04 else 4
    except struct.error:
        return None
    return None


def cubin_registers(cubin: bytes) -> int | None:
    return cubin_attribute(cubin, REGCOUNT)


class Build:
    """One ptxas run (Triton's ``make_cubin``) of ``ptx`` on a thread of its own, begun at once
    (``start``) while the cubin stage builds something else: Triton's ``make_cubin`` writes
    only temporary files of its own, so builds may overlap.  ``result()`` waits for the cubin
    (None where it failed, ``error`` then says why, or was never begun)."""

    def __init__(self, ptx: str, make_cubin, metadata, start: bool = True):
        self.ptx, self.cubin, self.error = ptx, None, None
        self._thread = None
        if start:
            self._thread = threading.Thread(target=self._build, args=(make_cubin, metadata), daemon=True)
            self._thread.start()

    def _build(self, make_cubin, metadata) -> None:
        try:
            self.cubin = make_cubin(self.ptx, metadata)
        except Exception as e:  # noqa: BLE001 - the caller keeps what it has (a failed plain build would fail without us too)
            self.error = e

    def result(self) -> bytes | None:
        if self._thread is not None:
            self._thread.join()
        return self.cubin


class PlainBuild(Build):
    """The plain PTX's build, begun when the cubin stage begins: ``keep_occupancy`` compares
    against its registers for most kernels (all but those at their thread limit), and waiting
    for it after the instrumented build put a second ptxas run on the compile's path (a
    session's first launch of each kernel; design.md §4b, "Compile time")."""

    def registers(self) -> int | None:
        cubin = self.result()
        return cubin_registers(cubin) if cubin is not None else None


def keep_occupancy(src: str, plain: PlainBuild, make_cubin, metadata, threads: int,
                   built: bytes | None = None) -> tuple[bytes, dict]:
    """Triton's cubin of the instrumented ``src``, at the plain kernel's occupancy where the
    instrumentation cost resident CTAs, and what was decided.  The plain build's registers
    (``plain``, building beside it) are asked for only when the kernel has fewer resident CTAs
    than its threads allow (otherwise registers cannot be what limits it); a third build when
    the cap is needed.  ``built``: ``src``'s cubin, where it was built already."""
    cubin = make_cubin(src, metadata) if built is None else built
    regs = cubin_registers(cubin)
    decided = {"registers": regs, "plain": None, "cap": None}
    if regs is None or ctas_per_sm(regs, threads) >= min(THREADS_PER_SM // max(1, threads), MAX_CTAS_PER_SM):
        return cubin, decided
    plain_regs = plain.registers()
    decided["plain"] = plain_regs
    if plain_regs is None or ctas_per_sm(plain_regs, threads) <= ctas_per_sm(regs, threads):
        return cubin, decided
    cap = occupancy_cap(plain_regs, threads)
    capped = make_cubin(with_cap(src, cap), metadata)
    if (cubin_attribute(capped, FRAME_SIZE) or 0) > (cubin_attribute(cubin, FRAME_SIZE) or 0):
        decided["spilled_at"] = cap  # kept uncapped: one CTA per SM fewer beats spilling
        return cubin, decided
    decided.update(cap=cap, registers=cubin_registers(capped))
    return capped, decided


def _spills(cubin: bytes) -> int:
    return cubin_attribute(cubin, FRAME_SIZE) or 0


def build_best(sources: list[str], plain: PlainBuild, make_cubin, metadata, threads: int) -> tuple[bytes, dict]:
    """``keep_occupancy`` of the first of ``sources`` (forms of one instrumented kernel, the
    preferred first); the next ones are built only while the kept one spills or was left
    below the plain occupancy, and one replaces it only if it spills less, or as much with
    more resident CTAs.  ``decided["form"]`` is the index of the form kept.  Every form is
    compared against the one plain build."""
    best, decided = keep_occupancy(sources[0], plain, make_cubin, metadata, threads)
    decided["form"] = 0
    for form, src in enumerate(sources[1:], 1):
        if not _spills(best) and "spilled_at" not in decided:
            break
        cubin, other = keep_occupancy(src, plain, make_cubin, metadata, threads)
        mine = (_spills(cubin), -ctas_per_sm(other["registers"] or MAX_REGS, threads))
        kept = (_spills(best), -ctas_per_sm(decided["registers"] or MAX_REGS, threads))
        if mine < kept:
            best, decided = cubin, {**other, "form": form}
    return best, decided
