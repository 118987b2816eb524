"""The decoded profile: plain numpy arrays that the decoder fills and the trace writers read.

Every time is an int64 nanosecond offset from ``Profile.t0_ns`` (the earliest CTA start
of the session, on the device's ``%globaltimer`` axis); cycles are kept beside them.
Kept free of any I/O so that tests can build one by hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from proton_lite.layout import COPY_SCOPE, BufferLayout

LAUNCH_DTYPE = np.dtype([
    ("launch", "<u4"),  # index in the session, in launch order
    ("kernel", "<u4"),  # index into Profile.kernels
    ("device", "<u4"),
    ("grid_x", "<u4"), ("grid_y", "<u4"), ("grid_z", "<u4"),
    ("num_ctas", "<u4"),
    ("stream", "<u8"),
    ("start_ns", "<i8"),  # earliest CTA start
    ("end_ns", "<i8"),  # latest CTA end
    ("records", "<u8"),  # records kept
    ("dropped", "<u8"),  # records that did not fit the buffer
    ("unmatched", "<u8"),  # records without a partner (after a drop, or a CTA that did not finish)
    ("missing_ctas", "<u4"),  # CTAs whose header was never written
    ("unit_records_max", "<u4"),  # most records one unit tried to write: the capacity that drops none
    ("pool_chunks", "<u4"),  # chunks in the launch's pool (kernels with run-time loop bounds), else 0
    ("pool_taken", "<u4"),  # chunks its units asked for: more than pool_chunks when the pool ran out
    ("torn_chunks", "<u4"),  # chunks taken whose header was never written (a fault): their records dropped
    ("graph", "<u4"),  # the CUDA graph (1, 2, ... in capture order) whose replay this launch is; 0: launched eagerly
    ("graph_node", "<u4"),  # its captured launch within that graph (0, 1, ... in capture order)
    ("replay", "<u8"),  # the graph's replay it ran in (0, 1, ...)
])

CTA_DTYPE = np.dtype([
    ("launch", "<u4"),
    ("cta", "<u4"),  # linear CTA id: x + nx * (y + ny * z)
    ("smid", "<u4"),
    ("start_ns", "<i8"),
    ("end_ns", "<i8"),
    ("start_clock", "<u8"),  # raw %clock64 at start / end
    ("end_clock", "<u8"),
    ("cycles_per_ns", "<f8"),  # the rate used to convert this CTA's cycles
    ("measured_cycles_per_ns", "<f8"),  # the CTA's own (end-start) clock/globaltimer ratio; nan if too short
    ("finished_units", "<u4"),  # units that reached the end of the kernel
])

INTERVAL_DTYPE = np.dtype([
    ("launch", "<u4"),
    ("cta", "<u4"),
    ("unit", "<u4"),  # warp (or warp group, or 0 for CTA granularity) within the CTA
    ("scope", "<u4"),  # index into the kernel's scope table
    ("depth", "<u2"),  # nesting depth, 0 = outermost
    ("lane", "<u2"),  # 0, or >0 when scopes of one unit overlap without nesting (own track)
    ("start_ns", "<i8"),
    ("end_ns", "<i8"),
    ("cycles", "<i8"),  # end - start in SM cycles (exact, no conversion)
])


def copy_intervals(kernel_index: int, kernel: "KernelInfo", launches: np.ndarray,
                   intervals: np.ndarray) -> np.ndarray | None:
    """Which ``intervals`` are the buffer copies (layout.COPY_SCOPE) of kernel ``kernel_index``'s
    ``launches``: the profiler's own time, which the decoder leaves out of a launch's record
    count and the summary reports apart. None where the kernel has no such scope."""
    if COPY_SCOPE not in kernel.scopes:
        return None
    return (intervals["scope"] == kernel.scopes.index(COPY_SCOPE)) & \
        np.isin(intervals["launch"], launches["launch"][launches["kernel"] == kernel_index])


@dataclass
class KernelInfo:
    name: str
    scopes: list[str]
    num_warps: int
    granularity: str  # "warp" | "warpgroup" | "cta"
    unit_warps: int
    capacity: int
    meta: dict = field(default_factory=dict)  # the full proton_lite metadata entry


@dataclass
class Profile:
    kernels: list[KernelInfo]
    launches: np.ndarray  # LAUNCH_DTYPE
    ctas: np.ndarray  # CTA_DTYPE
    intervals: np.ndarray  # INTERVAL_DTYPE
    t0_ns: int = 0  # absolute %globaltimer value of time 0
    session: dict = field(default_factory=dict)  # name, device, timer tick, versions, warnings

    @property
    def total_dropped(self) -> int:
        return int(self.launches["dropped"].sum()) if len(self.launches) else 0

    @property
    def total_unmatched(self) -> int:
        return int(self.launches["unmatched"].sum()) if len(self.launches) else 0

    def keep_all_hint(self, kernel_ids=None) -> str | None:
        """The start() option that would have kept every dropped record (of the given kernel
        indices, or of all), from the records the busiest unit tried to write; None when
        nothing was dropped."""
        launches = self.launches
        if kernel_ids is not None:
            launches = launches[np.isin(launches["kernel"], np.asarray(list(kernel_ids), dtype=np.uint32))]
        launches = launches[launches["dropped"] > 0]
        if not len(launches):
            return None
        short = launches[launches["pool_taken"] > launches["pool_chunks"]]
        if len(short):  # a kernel with a launch pool, and the pool ran out
            need, chunk, worst = 0, 0, None
            for row in short:
                meta = self.kernels[int(row["kernel"])].meta.get("layout")
                layout = BufferLayout.from_json(meta) if meta else None
                if layout is None or not layout.pool:
                    continue
                # the chunks it had, the dropped records in chunks at least half full (a unit
                # moves on once a chunk cannot hold what it may write before its next check,
                # at most half a chunk: passes/pool.py), and the partly filled chunk of each
                # unit that asked in vain (each asks once, then stops)
                n = int(row["pool_chunks"]) + -(-int(row["dropped"]) // -(-layout.chunk_slots // 2)) + \
                    int(row["pool_taken"]) - int(row["pool_chunks"])
                if n * layout.chunk_bytes > need * chunk:
                    need, chunk, worst = n, layout.chunk_bytes, row
            if worst is not None:
                mb = -(-need * chunk // (1 << 20))
                return (f"pool_mb={max(mb, 1)} in proton_lite.start() keeps them (a launch's pool of "
                        f"{int(worst['pool_chunks']):,} chunks ran out; it needed at most {need:,})")
        if int(launches["pool_chunks"].max()) > 0 and int(launches["torn_chunks"].sum()):
            return (f"{int(launches['torn_chunks'].sum()):,} pool chunks were taken but never written (the kernel "
                    "stopped early, e.g. a fault): their records are lost")
        need = int(launches["unit_records_max"].max())
        circular = any(self.kernels[int(k)].meta.get("layout", {}).get("mode") == "circular"
                       for k in np.unique(launches["kernel"]))
        if need == 0:  # a trace from before unit_records_max existed
            return ('raise capacity= (or loop_capacity= for scopes inside loops) in proton_lite.start(), '
                    'or buffer_mode="circular" to keep the newest records')
        if circular:
            size = 1 << (need - 1).bit_length()
            return f"capacity={size} in proton_lite.start() keeps them (the busiest unit wrote {need:,} records)"
        return (f"loop_capacity={need} (or capacity={need}) in proton_lite.start() keeps them (the busiest unit "
                f"wrote {need:,} records), or sizing=\"exact\" (runs such launches again); buffer_mode=\"circular\" "
                "keeps the newest instead")

    def unit_name(self, kernel: KernelInfo, unit: int) -> str:
        return {"warp": f"warp {unit}", "warpgroup": f"warpgroup {unit}", "cta": "cta"}[kernel.granularity]
