"""Which partition a warp of a warp-specialized kernel ran, from the table the pass put in the
kernel's metadata (``partitions``: passes/partitions.py). Triton-free: the trace writers and
the summary read it from a capture."""
from __future__ import annotations

import numpy as np


def partition_of_warp(table, warp: int) -> dict | None:
    """The partition that warp ``warp`` (hardware index in its CTA) runs, or None."""
    for p in table or ():
        first, warps = p.get("first_warp"), p.get("warps")
        if first is not None and warps and first <= warp < first + warps:
            return p
    return None


def partition_label(p: dict) -> str:
    """``partition 0 (TMA loads)``: the name a warp's track shows beside its number."""
    return f"{p['name']} ({p['role']})" if p.get("role") else str(p["name"])


def kernel_unit_partitions(kernel):
    """(labels of the partitions, partition index of each of the kernel's recording units, -1
    for none) for a warp-specialized kernel recorded per warp or warp group (a ``KernelInfo``
    whose metadata holds ``partitions``); None for any other."""
    table = kernel.meta.get("partitions")
    if not table or kernel.granularity == "cta":
        return None
    per_unit = max(1, int(kernel.unit_warps))
    labels = [partition_label(p) for p in table]
    of_unit = np.full(max(1, int(kernel.num_warps) // per_unit), -1, np.int64)
    for u in range(len(of_unit)):
        p = partition_of_warp(table, u * per_unit)
        if p is not None:
            of_unit[u] = table.index(p)
    return labels, of_unit
