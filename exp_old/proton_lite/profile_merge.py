"""Several decoded captures as one Profile (one per rank of a job, or several runs): what
``proton-lite diff`` compares when a side is a folder of captures.

Kernels are listed capture after capture (a kernel on two ranks is two entries of one
name: the viewers group by name), launches are renumbered after each other in capture
order, and every capture's times move onto one axis: by the difference of their ``t0_ns``
(the absolute ``%globaltimer`` of each one's time 0) where they all ran on one GPU (one
timer), by the host's clock where they ran on several GPUs of one machine (whose timers
differ and drift: ``clock_axis.py``, from the anchors each session measured), or by a
kernel all captures launched together (``align_on``).
Captures of different hosts are placed by their timers as they read, which means nothing
across hosts; only durations do there, which is all that a diff or a summary compares.
``session["alignment"]`` says which was used. What makes any capture incomplete (cut
off, launches lost to a fault) makes the merged one incomplete, and ``merged_from``
records each capture's name, host and rank.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from proton_lite.clock_axis import host_t0_ns, reference_clock
from proton_lite.profile_data import Profile


class AlignError(ValueError):
    """A capture has no launch of the kernel the captures are to be lined up on."""


def _align_shifts(profiles: list[Profile], kernel: str) -> list[int]:
    """Per capture, the ns to add so that the first launch of ``kernel`` (exact name) starts
    at one time in every capture: that of the first capture."""
    starts = []
    for i, p in enumerate(profiles):
        ids = [k for k, info in enumerate(p.kernels) if info.name == kernel]
        hit = p.launches[np.isin(p.launches["kernel"], ids)] if ids else p.launches[:0]
        if not len(hit):
            names = sorted({info.name for info in p.kernels})
            raise AlignError(f"capture {i} ({(p.session or {}).get('name')}) has no launch of {kernel!r} to align "
                             f"on; its kernels: {', '.join(names)}")
        starts.append(int(hit["start_ns"].min()))
    return [starts[0] - s for s in starts]


def _shifts(profiles: list[Profile], align_on: str | None) -> tuple[list[int], int, str]:
    """Per capture the ns to add to its times, the merged time 0 (``%globaltimer``) and how
    the captures were put on one axis (``session["alignment"]``)."""
    t0 = min(int(p.t0_ns) for p in profiles)
    if align_on:
        aligned = _align_shifts(profiles, align_on)
        return [int(profiles[0].t0_ns) - t0 + a for a in aligned], t0, f"kernel {align_on}: first launches together"
    by_timer = [int(p.t0_ns) - t0 for p in profiles]
    hosts = {(p.session or {}).get("host") for p in profiles}
    clocks = [reference_clock(p) for p in profiles]
    if len(hosts) == 1 and None not in hosts and None not in clocks and len({c.host_clock for c in clocks}) == 1:
        gpus = {c.gpu for c in clocks}
        if len(gpus) == 1 and None not in gpus:  # one GPU, one timer: its own differences are exact
            return by_timer, t0, "GPU timer (every capture ran on one GPU)"
        # several GPUs of one machine: their timers differ and drift, the host's clock is one
        on_host = [host_t0_ns(p, c) for p, c in zip(profiles, clocks)]
        first = min(range(len(profiles)), key=lambda i: on_host[i])
        unc = max(c.uncertainty_ns for c in clocks)
        return ([h - on_host[first] for h in on_host], int(profiles[first].t0_ns),
                f"host clock of {hosts.pop()} (each GPU's timer anchored to it by the session, within {unc} ns)")
    if None in hosts:
        how = "GPU timers as they read (hosts not recorded; no clock anchors to check them)"
    elif len(hosts) == 1:
        how = "GPU timers as they read (one machine's GPUs; no clock anchors to check them)"
    else:
        how = "GPU timers as they read: captures of different hosts, whose clocks are not aligned (give --align-on)"
    return by_timer, t0, how


def merge_profiles(profiles: list[Profile], align_on: str | None = None) -> Profile:
    """One Profile holding every launch, CTA and interval of ``profiles``, in their order.

    ``align_on``: a kernel every capture launched at one moment (a collective, a barrier):
    each capture is shifted so that its first launch of it starts with the first capture's,
    instead of by the captures' timer origins (which differ between GPUs)."""
    if not profiles:
        raise ValueError("no captures to merge")
    if len(profiles) == 1:
        return profiles[0]
    shifts, t0, alignment = _shifts(profiles, align_on)
    kernels, launches, ctas, intervals, origins = [], [], [], [], []
    next_launch = 0
    for i, p in enumerate(profiles):
        shift = shifts[i]
        renumber = {int(old): next_launch + j for j, old in enumerate(np.sort(p.launches["launch"]))}
        table = np.zeros(max(renumber, default=-1) + 1, np.int64)
        for old, new in renumber.items():
            table[old] = new
        la = p.launches.copy()
        la["launch"] = table[la["launch"]]
        la["kernel"] = la["kernel"] + len(kernels)
        for field in ("start_ns", "end_ns"):
            la[field] += shift
        c, iv = p.ctas.copy(), p.intervals.copy()
        for rows in (c, iv):
            rows["launch"] = table[rows["launch"]] if len(rows) else rows["launch"]
            for field in ("start_ns", "end_ns"):
                rows[field] += shift
        kernels.extend(p.kernels)
        launches.append(la)
        ctas.append(c)
        intervals.append(iv)
        s = p.session or {}
        origins.append(dict({k: s.get(k) for k in ("name", "host", "rank", "world_size", "device")},
                            launches=[next_launch, next_launch + len(renumber)]))
        next_launch += len(renumber)
    session = dict(profiles[0].session or {})
    session["truncated"] = any((p.session or {}).get("truncated") for p in profiles)
    session["lost_launches"] = sum(int((p.session or {}).get("lost_launches") or 0) for p in profiles)
    for key in ("graph_overruns", "uncertain_starts"):  # kernel name -> count, per capture: summed
        summed: dict[str, int] = {}
        for p in profiles:
            for name, n in ((p.session or {}).get(key) or {}).items():
                summed[name] = summed.get(name, 0) + int(n)
        session[key] = summed
    cuts = [(p.session or {}).get("cut") for p in profiles if isinstance((p.session or {}).get("cut"), dict)]
    if cuts:
        session["cut"] = {"launches": [n for c in cuts for n in c.get("launches") or []],
                          "of_launches": sum(int(c.get("of_launches") or 0) for c in cuts)}
    session["merged_from"] = origins
    session["aligned_on"] = align_on  # None: by the host clock or the captures' timer origins
    session["alignment"] = alignment
    return replace(profiles[0], kernels=kernels, launches=np.concatenate(launches), ctas=np.concatenate(ctas),
                   intervals=np.concatenate(intervals), t0_ns=t0, session=session)


def rank_names(ranks: list) -> list[str] | None:
    """``rank N`` per capture where every capture knows its rank and no two share one, else None."""
    if all(r is not None for r in ranks) and len(set(ranks)) == len(ranks):
        return [f"rank {r}" for r in ranks]
    return None


def capture_titles(origins: list[dict]) -> list[str]:
    """A title per merged capture: ``rank 1 (host, device)`` where each knows a different
    rank, else the session's name (without folders) and what is known of host and device."""
    by_rank = rank_names([o.get("rank") for o in origins])
    titles = []
    for i, o in enumerate(origins):
        name = by_rank[i] if by_rank else \
            str(o.get("name") or f"capture {i}").replace("\\", "/").rsplit("/", 1)[-1]
        where = ", ".join(str(v) for v in (o.get("host"), o.get("device")) if v)
        titles.append(f"{name} ({where})" if where else name)
    return titles


def merged_captures(session: dict) -> list[dict] | None:
    """The captures a merged profile was made of (``merged_from``), or None for one capture."""
    origins = (session or {}).get("merged_from")
    if not origins or len(origins) < 2 or any("launches" not in o for o in origins):
        return None
    return origins


def launch_captures(session: dict, launch_ids) -> np.ndarray | None:
    """The merged capture (index into ``session["merged_from"]``) of each launch id, or None
    for a profile that is not a merge of several captures."""
    origins = merged_captures(session)
    if origins is None:
        return None
    bounds = np.array([o["launches"][1] for o in origins], np.int64)
    return np.searchsorted(bounds, np.asarray(launch_ids, np.int64), side="right")
