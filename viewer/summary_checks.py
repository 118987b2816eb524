"""Notes a summary adds about how far a profile's times can be taken as they are: CTAs whose
measured SM clock rate is unusual, and the profiler's own copies of staged records (the copy
scope of kernels staged in blocks, docs/design.md §2) inside the scopes they interrupted."""
from __future__ import annotations

import numpy as np

from proton_lite.arrays import groups
from proton_lite.layout import COPY_SCOPE
from proton_lite.profile_data import Profile, copy_intervals

CLOCK_RATE_RANGE = (0.3, 2.2)  # plausible SM clock, cycles per ns
CLOCK_RATE_SM_TOLERANCE = 0.05  # relative deviation from the SM's median rate
_MAX_EXAMPLES = 5


def copy_notes(profile: Profile, kernels, launches) -> list[dict]:
    """The profiler's own time inside a kernel whose records were staged in blocks: how often
    its warps copied them to the buffer and how long that took (the copy scope)."""
    out = []
    iv = profile.intervals
    for k in sorted({int(i) for i in launches["kernel"]}):
        sel = copy_intervals(k, kernels[k], launches, iv)
        n = int(sel.sum()) if sel is not None else 0
        if n:
            ns = int((iv["end_ns"][sel] - iv["start_ns"][sel]).sum())
            out.append({"kind": "buffer_copies", "kernel": kernels[k].name, "count": n, "ns": ns,
                        "message": f"{kernels[k].name}: its warps copied their staged records to the buffer {n:,} "
                                   f"times, {ns / 1e3:,.1f} µs of warp time in all (scope '{COPY_SCOPE}'); a scope "
                                   "instance that held a copy is that much longer"})
    return out


def clock_warning(ctas) -> dict | None:
    rate = ctas["measured_cycles_per_ns"].astype(np.float64)
    ok = ~np.isnan(rate)
    if not ok.any():
        return None
    smid = ctas["smid"].astype(np.int64)
    median = np.full(len(rate), np.nan)
    measured = np.flatnonzero(ok)
    for _, at in groups(smid[measured]):
        mine = measured[at]
        median[mine] = np.median(rate[mine])
    lo, hi = CLOCK_RATE_RANGE
    with np.errstate(invalid="ignore", divide="ignore"):
        deviation = np.abs(rate - median) / median
    out_of_range = ok & ((rate < lo) | (rate > hi))
    off_median = ok & (deviation > CLOCK_RATE_SM_TOLERANCE)
    bad = out_of_range | off_median
    if not bad.any():
        return None
    idx = np.flatnonzero(bad)
    idx = idx[np.lexsort((idx, -np.where(out_of_range[idx], np.inf, deviation[idx])))][:_MAX_EXAMPLES]
    examples = [{"launch": int(ctas["launch"][i]), "cta": int(ctas["cta"][i]), "sm": int(smid[i]),
                 "measured_cycles_per_ns": float(rate[i]), "sm_median": float(median[i])} for i in idx]
    n_range, n_median = int(out_of_range.sum()), int(off_median.sum())
    return {"kind": "clock_rate", "count": int(bad.sum()), "checked": int(ok.sum()),
            "out_of_range": n_range, "off_sm_median": n_median, "examples": examples,
            "message": f"{int(bad.sum())} of {int(ok.sum())} CTAs have an unusual measured clock rate "
                       f"({n_range} outside {lo}-{hi} cycles/ns; {n_median} deviate more than "
                       f"{CLOCK_RATE_SM_TOLERANCE:.0%} from their SM's median): the clock changed during "
                       "the run (throttling, boost) or the timer is unreliable; compare cycles with care"}
