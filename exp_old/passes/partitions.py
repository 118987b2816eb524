"""Which warps of a warp-specialized kernel run which partition.

A kernel with a ``ttg.warp_specialize`` (``tl.range(..., warp_specialize=True)``, Gluon's
``gl.warp_specialize``) runs its *default* partition in the warps it was launched with
(``num_warps``) and each *worker* partition in warps of its own, after them. Which warps,
Triton decides in ``make_llir`` (its warp-group allocation: partitions sorted and aligned
to warp groups, so that registers can be handed over, e.g. start warps 16, 4, 12 for
partitions of 1, 8 and 4 warps). Rather than redo that rule, the stage hook runs Triton's
own allocation pass on a copy of the final TTGIR and reads the start warps it writes
(``warpGroupStartIds``). Records carry the hardware warp index (``%tid.x / 32``), so with
this table every warp's track can say which partition it ran (``trace/rows.py``).

Each partition is also given the kind of work its region holds, from its operations (TMA or
asynchronous loads, MMAs, stores), which is what its author calls it (producer, consumer).
"""
from __future__ import annotations

import re

_WS_RE = re.compile(r"\bttg\.warp_specialize\(")
_START_RE = re.compile(r"warpGroupStartIds = array<i32:\s*([\d,\s]+)>")
_PARTITION_RE = re.compile(r"^\s*partition(\d+)\(.*\)\s+num_warps\((\d+)\)\s*\{")
_DEFAULT_RE = re.compile(r"^\s*default\s*\{")
_NUM_WARPS_RE = re.compile(r'"ttg\.num-warps"\s*=\s*(\d+)')
_ROLES = (("TMA loads", re.compile(r"async_tma_copy_global_to_local|descriptor_load|async_tma_gather")),
          ("loads", re.compile(r"async_copy_global_to_local|\btt\.load\b")),
          ("MMA", re.compile(r"warp_group_dot|tc_gen5_mma|\btt\.dot\b")),
          ("stores", re.compile(r"async_tma_copy_local_to_global|descriptor_store|\btt\.store\b")))


def region_name(header: str, n: int, count: int) -> str | None:
    """The name of the region a ``default {`` / ``partitionN(...) num_warps(W) {`` line opens:
    "default", "partition 0", prefixed "1." where a kernel has several warp_specialize ops
    (``n`` of ``count``); None for any other line. ``ws_scopes.py`` names regions with it too,
    so that its scopes find their row of this table."""
    prefix = f"{n}." if count > 1 else ""
    if _DEFAULT_RE.match(header):
        return prefix + "default"
    m = _PARTITION_RE.match(header)
    return prefix + f"partition {m.group(1)}" if m else None


def _role(lines: list[str]) -> str | None:
    found = [name for name, pattern in _ROLES if any(pattern.search(line) for line in lines)]
    if "TMA loads" in found and "loads" in found:
        found.remove("loads")
    return ", ".join(found) or None


def partition_table(allocated_ttgir: str) -> list[dict] | None:
    """The partitions of a TTGIR on which Triton's warp-group allocation ran: one dict per
    partition (``name``, ``first_warp``, ``warps``, ``role``), the default one first, for
    every ``ttg.warp_specialize`` in order; None for a kernel without one."""
    lines = allocated_ttgir.split("\n")
    base = _NUM_WARPS_RE.search(allocated_ttgir)
    default_warps = int(base.group(1)) if base else None
    ops = [i for i, line in enumerate(lines) if _WS_RE.search(line)]
    if not ops:
        return None
    table = []
    for n, at in enumerate(ops):
        end = ops[n + 1] if n + 1 < len(ops) else len(lines)
        starts = _START_RE.search(lines[at])
        first = [int(v) for v in starts.group(1).replace(" ", "").split(",") if v] if starts else []
        regions = []  # (name, line, warps, worker index: None for the default partition)
        for i in range(at, end):
            name = region_name(lines[i], n, len(ops))
            m = _PARTITION_RE.match(lines[i])
            if name is not None:
                regions.append((name, i, int(m.group(2)) if m else default_warps, int(m.group(1)) if m else None))
        op_end = next((i for i in range(at, end) if lines[i].strip().startswith("} :")), end)  # "} : (types)"
        for r, (name, line, warps, worker) in enumerate(regions):
            stop = regions[r + 1][1] if r + 1 < len(regions) else op_end
            body = [x for x in lines[line + 1:stop] if x.strip() and not x.strip().startswith("}")]
            idle = worker is not None and all("ttg.warp_return" in x for x in body)
            table.append({"name": name, "first_warp": 0 if worker is None else
                          (first[worker] if worker < len(first) else None),
                          "warps": warps, "role": "idle: padding to a full warp group" if idle else _role(body)})
    return table


def find(ttgir_mod, text: str) -> list[dict] | None:
    """The partition table of a kernel's final TTGIR (``ttgir_mod``, printed as ``text``),
    from Triton's own allocation run on a copy; None without warp specialization or where
    the allocation cannot be run (then the tracks show warp numbers only)."""
    if not _WS_RE.search(text):
        return None
    from proton_lite import compat
    try:
        copy = compat.parse_module(text, ttgir_mod)
        compat.allocate_warp_groups(copy)
        return partition_table(str(copy))
    except Exception:  # noqa: BLE001  advisory: warp numbers stay correct without it
        return None
