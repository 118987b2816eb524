"""Which track tree a trace gets, and where each CTA, slot and launch goes in it.

Two layouts, the same tree below the top (SM groups > slots > unit tracks, ``rows``):

- ``launch``: a top group per launch.  Each launch has its own SM groups, slots and unit
  tracks, which is what one wants for a few launches and what makes a session of many
  unreadable: 1,024 launches of 64 CTAs gave 394,240 tracks, which Perfetto's UI did not
  draw in 8 minutes (docs/benchmarks.md, "Tracks the UI draws").
- ``sm``: a top group per GPU (per capture and GPU in a merge of several captures).  The
  SM groups and their slots are shared by every launch, so an SM has as many slots as it
  ever held CTAs at once over the whole session, and the tracks are bounded by the GPU's
  size, not by the program's length.  A ``launches`` row at the top holds one slice per
  launch (its span, named by its title; launches that overlap in time take further rows),
  and CTA slices are named after their launch (``matmul #3``: the UI colours a launch's
  CTAs alike), with ``cta`` and ``launch`` args.

``auto``, the default, keeps ``launch`` while the trace stays under ``AUTO_TRACKS`` tracks.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from proton_lite.partition_map import kernel_unit_partitions
from proton_lite.profile_data import Profile
from proton_lite.profile_merge import launch_captures
from proton_lite.trace.cta_view import CtaView
from proton_lite.trace.rows import SlotLayout, pack_slots, slot_layout
from proton_lite.trace.nesting import _unique
from proton_lite.trace import cta_order_c
from proton_lite.trace.tree import _cta_layout, _launch_rank, _launch_table, launch_titles

LAYOUTS = ("auto", "launch", "sm")
# Perfetto's UI v52 (headless Chromium, 2026-11-28): 27,960 tracks drew in 6.1 s, 55,920 in 12.8 s
AUTO_TRACKS = 20_000
LAUNCHES_ROW = "launches"  # the sm layout's row of launch slices ("launches 2" for the second lane)


@dataclass
class TopGroups:
    """The top of the tree: ``of_launch`` is the top group of each launch (in launch order),
    ``titles`` their names, ``capture`` the merged capture of each (None for one capture)."""
    layout: str
    of_launch: np.ndarray
    titles: list[str]
    capture: np.ndarray | None


def top_groups(profile: Profile, launches: np.ndarray, layout: str) -> TopGroups:
    """Top groups of ``layout`` ("launch" or "sm") for ``launches`` (sorted)."""
    kernels = profile.kernels
    capture = launch_captures(profile.session, launches["launch"])
    if layout == "launch":
        return TopGroups("launch", np.arange(len(launches)), launch_titles(kernels, launches), capture)
    if layout != "sm":
        raise ValueError(f"unknown trace layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
    keys, of_launch = _gpu_groups(capture, launches)
    titles = []
    for g, key in enumerate(keys.tolist()):
        mine = launches[of_launch == g]
        n, k = len(mine), len(np.unique(mine["kernel"]))
        titles.append(f"GPU {key & 0xFFFFFFFF} · {n:,} launch{'es' if n != 1 else ''} of {k:,} "
                      f"kernel{'s' if k != 1 else ''}")
    return TopGroups("sm", of_launch.astype(np.int64), titles, keys >> 32 if capture is not None else None)


def _gpu_groups(capture, launches: np.ndarray):
    """The sm layout's top groups: (capture << 32 | device of each, the group of each launch)."""
    cap = capture if capture is not None else np.zeros(len(launches), np.int64)
    return np.unique((cap.astype(np.int64) << 32) | launches["device"].astype(np.int64), return_inverse=True)


@dataclass
class TracePlan:
    """Everything the writers place, CTAs in the layout's order (``_cta_layout``)."""
    tops: TopGroups
    ctas: CtaView  # the CTAs in the layout's order (columns gathered when asked)
    cta_lr: np.ndarray  # launch rank of each CTA
    runs: tuple  # runs of one CTA's intervals: (first interval, CTA rank)
    lay: SlotLayout
    row_kernels: Callable[[], np.ndarray] = field(repr=False)  # makes ``row_kernel``
    launch_sms: np.ndarray | None = None  # each launch's distinct SMs, where the C order found them

    @functools.cached_property
    def row_kernel(self) -> np.ndarray:
        """The kernel of each slot's CTAs (-1: kernels whose unit tracks are named differently),
        made at first use: only unit tracks' names need it, and a capture of kernels without
        scopes has none (4 M CTAs: 0.1 s of the plan on one thread)."""
        return self.row_kernels()

    @property
    def layout(self) -> str:
        return self.tops.layout

    @property
    def cta_top(self) -> np.ndarray:
        """Each CTA's top group (int32: a column per CTA, and the groups are few)."""
        return _top_of_ctas(self.tops.of_launch, self.cta_lr)


def plan_trace(profile: Profile, launches: np.ndarray, layout: str = "auto", pmap=map) -> TracePlan:
    """The layout's plan (``auto``: ``choose_layout``); the CTAs are ordered and packed into
    slots once, in the layout chosen."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown trace layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
    # each CTA's launch rank (both steps below read it): in C where built, with each launch's SMs
    table = _launch_table(launches["launch"].astype(np.int64))
    ranks = cta_order_c.launch_ranks(profile.ctas, table, len(launches))
    lr = ranks.lr if ranks is not None else _launch_rank(launches, profile.ctas["launch"], "CTAs")
    if layout == "auto":
        layout = choose_layout(profile, launches, lr, ranks.sms if ranks is not None else None)
    tops = top_groups(profile, launches, layout)
    ctas, cta_lr, runs = _cta_layout(profile, launches, pmap, tops.of_launch if layout == "sm" else None, lr, ranks)
    launch_sms = ranks.sms if ranks is not None else None
    del lr, ranks  # the ranks in the rows' order: a column per CTA, not needed past the order
    lay = slot_layout(profile, ctas, _top_of_ctas(tops.of_launch, cta_lr), runs, pmap)
    return TracePlan(tops, ctas, cta_lr, runs, lay, lambda: _row_kernels(profile, launches, cta_lr, lay), launch_sms)


def _top_of_ctas(of_launch: np.ndarray, cta_lr: np.ndarray) -> np.ndarray:
    return np.asarray(of_launch, np.int32)[cta_lr]


def choose_layout(profile: Profile, launches: np.ndarray, lr: np.ndarray | None = None,
                  sms: np.ndarray | None = None) -> str:
    """``launch`` unless sharing the SMs' slots makes fewer top groups than launches and the
    launch layout's tracks (``launch_layout_tracks``) exceed AUTO_TRACKS (``lr``: each CTA's
    launch rank, ``sms``: each launch's distinct SMs, where already known)."""
    keys, _ = _gpu_groups(launch_captures(profile.session, launches["launch"]), launches)
    if len(keys) >= len(launches):  # (counted without titling the groups: top_groups does that once)
        return "launch"
    return "sm" if launch_layout_tracks(profile, launches, AUTO_TRACKS, lr, sms) > AUTO_TRACKS else "launch"


def _units_per_cta(kernel) -> int:
    """Unit tracks a CTA of ``kernel`` fills at most (0 for a kernel without scopes: only
    its CTA lifetimes are recorded)."""
    if not kernel.scopes:
        return 0
    return 1 if kernel.granularity == "cta" else -(-kernel.num_warps // max(kernel.unit_warps, 1))


def most_at_once(group: np.ndarray, lo: np.ndarray, hi: np.ndarray, n_groups: int) -> np.ndarray:
    """The most half-open spans [lo, hi) of each group that hold one instant: the slots the
    packing gives it (``rows.pack_slots``), by one sweep instead of packing."""
    n = len(group)
    out = np.zeros(n_groups, np.int64)
    if not n:
        return out
    t = np.r_[lo, hi]
    step = np.r_[np.ones(n, np.int64), -np.ones(n, np.int64)]
    g = np.r_[group, group]
    order = np.lexsort((step, t, g))  # at one instant, ends before starts
    running = np.cumsum(step[order])  # each group's steps sum to 0: one running sum serves all
    np.maximum.at(out, g[order], running)
    return out


def launch_layout_tracks(profile: Profile, launches: np.ndarray, limit: int | None = None,
                         lr: np.ndarray | None = None, sms: np.ndarray | None = None) -> int:
    """Tracks of the ``launch`` layout, from the CTAs' lifetimes: launches, (launch, SM)
    groups, their slots (the most CTAs a group held at once) and per slot the unit tracks its
    kernel can fill (lanes, and units recording before their CTA's start, not counted).
    With ``limit``, bounds that settle the comparison with it come first: one slot per
    group already over it (from ``sms``, each launch's distinct SMs, where given), or one
    per CTA still under it, skip the count."""
    c = profile.ctas
    if not len(c):
        return len(launches)
    units = np.array([_units_per_cta(k) for k in profile.kernels] or [0], np.int64)
    if limit is not None and sms is not None:  # a slot per group, the groups counted per launch
        one_slot = len(launches) + int(sms.sum()) + int(sms @ (1 + units[launches["kernel"].astype(np.int64)]))
        if one_slot > limit:
            return one_slot
    lr = _launch_rank(launches, c["launch"], "CTAs") if lr is None else lr
    width = int(c["smid"].max()) + 1
    groups, group = _unique(lr * width + c["smid"].astype(np.int64), len(launches) * width)
    per_slot = 1 + units[launches["kernel"].astype(np.int64)[groups // width]]
    base = len(launches) + len(groups)
    if limit is not None:
        if base + per_slot.sum() > limit:  # a slot per group
            return int(base + per_slot.sum())
        one_each = base + np.bincount(group, minlength=len(groups)) @ per_slot  # a slot per CTA
        if one_each <= limit:
            return int(one_each)
    start = c["start_ns"].astype(np.int64)
    slots = most_at_once(group, start, np.maximum(c["end_ns"].astype(np.int64), start + 1), len(groups))
    return int(base + slots @ per_slot)


def _row_kernels(profile: Profile, launches, cta_lr, lay: SlotLayout) -> np.ndarray:
    """Each slot's kernel, for its unit tracks' names: the kernel of its CTAs, or where CTAs
    of several kernels share the slot (the sm layout), the first of them when all name
    their units alike (same granularity, no warp-specialized partitions), else -1."""
    kernel = launches["kernel"].astype(np.int64)[cta_lr] if len(cta_lr) else np.zeros(0, np.int64)
    lo = np.full(lay.n_rows, np.iinfo(np.int64).max, np.int64)
    hi = np.full(lay.n_rows, -1, np.int64)
    np.minimum.at(lo, lay.row, kernel)
    np.maximum.at(hi, lay.row, kernel)
    naming = np.array([(10 + i if kernel_unit_partitions(k) else {"warp": 0, "warpgroup": 1, "cta": 2}[k.granularity])
                       for i, k in enumerate(profile.kernels)] or [0], np.int64)
    n_lo = np.full(lay.n_rows, np.iinfo(np.int64).max, np.int64)
    n_hi = np.full(lay.n_rows, -1, np.int64)
    np.minimum.at(n_lo, lay.row, naming[kernel])
    np.maximum.at(n_hi, lay.row, naming[kernel])
    return np.where(n_lo == n_hi, lo, -1)


@dataclass
class LaunchSpans:
    """Each launch that ran CTAs, from its first CTA's start to its last CTA's end, on lane
    ``lane`` of its top group's rows: the sm layout's ``launches`` rows (the JSON's launch
    threads in both layouts)."""
    launch: np.ndarray  # launch rank
    start: np.ndarray
    end: np.ndarray
    ctas: np.ndarray
    lane: np.ndarray
    row: np.ndarray  # lane row over the whole trace, in (top group, lane) order
    row_top: np.ndarray
    row_lane: np.ndarray


def launch_spans(plan: TracePlan, n_launches: int) -> LaunchSpans:
    """The launches' spans, packed into lanes per top group by the slots' greedy rule
    (``rows.pack_slots``), so that launches of other streams that overlap never cross."""
    ctas, lr = plan.ctas, plan.cta_lr
    start = np.full(n_launches, np.iinfo(np.int64).max, np.int64)
    end = np.full(n_launches, np.iinfo(np.int64).min, np.int64)
    count = np.zeros(n_launches, np.int64)
    if len(ctas):
        np.minimum.at(start, lr, ctas["start_ns"].astype(np.int64))
        np.maximum.at(end, lr, ctas["end_ns"].astype(np.int64))
        np.add.at(count, lr, 1)
    ran = np.flatnonzero(count)
    top = plan.tops.of_launch[ran]
    lane = pack_slots(top, start[ran], np.maximum(end[ran], start[ran] + 1))
    n_tops = len(plan.tops.titles)
    lanes = np.zeros(n_tops, np.int64)
    if len(ran):
        np.maximum.at(lanes, top, lane + 1)
    base = np.cumsum(lanes) - lanes
    row_top = np.repeat(np.arange(n_tops), lanes)
    return LaunchSpans(launch=ran, start=start[ran], end=end[ran], ctas=count[ran], lane=lane,
                       row=base[top] + lane if len(ran) else lane, row_top=row_top,
                       row_lane=np.arange(len(row_top)) - base[row_top])


def lane_name(lane: int) -> str:
    return LAUNCHES_ROW if lane == 0 else f"{LAUNCHES_ROW} {lane + 1}"


def launch_names(kernels, launches) -> list[str]:
    """``matmul #3``: the name of a launch's CTA slices in the sm layout (both writers)."""
    return [f"{kernels[k].name} #{n}" for k, n in zip(launches["kernel"].tolist(), launches["launch"].tolist())]
