"""Where a profile's numbers are incomplete, and why: shared by ``summary`` and ``diff``.

Why: a number computed from what was kept looks exactly like one computed from everything.
A scope's share, a kernel's total, a change between two runs are only trustworthy when no
record of theirs was lost, so every row built from lost records is marked where it is
shown, with the reason, and ``diff`` gives no verdict on it.

Per kernel: records dropped (buffer full), records without a partner (unmatched), CTAs
without a header (missing), pool chunks torn, CTA starts a loop kernel kept in 32 bits that
cannot be placed (proton_lite/start_range.py).  Per kernel too: replays of CUDA graphs that found their ring full.  For the whole capture: cut off before
``stop()`` (truncated), launches lost to a kernel fault, a part of a capture (``proton-lite
trace --launch/--window``).
"""
from __future__ import annotations

import numpy as np

from proton_lite.arrays import distinct
from proton_lite.profile_data import Profile

_PER_LAUNCH = (("dropped", "records dropped (buffer full)"), ("unmatched", "records without a partner"),
               ("missing_ctas", "CTAs missing (no header)"), ("torn_chunks", "pool chunks torn"))


def kernel_losses(profile: Profile, launches: np.ndarray | None = None) -> dict[str, list[str]]:
    """Kernel name -> why its numbers are incomplete (empty: nothing of it was lost), over
    ``launches`` (default: all of the profile's)."""
    launches = profile.launches if launches is None else launches
    out: dict[str, list[str]] = {}
    names = [k.name for k in profile.kernels]
    overruns = (profile.session or {}).get("graph_overruns") or {}
    unsure = (profile.session or {}).get("uncertain_starts") or {}  # proton_lite/start_range.py
    # per kernel at once (a large compiled model's capture: 4,096 kernels' 65,536 launches took
    # 1.2 s as a selection of the launches a kernel)
    kernel = launches["kernel"].astype(np.int64)
    present = distinct(kernel)
    n_k = int(present[-1]) + 1 if len(present) else 0
    n_launches = np.bincount(kernel, minlength=n_k)
    lost = []
    for field, what in _PER_LAUNCH:
        values = launches[field].astype(np.int64)
        total, hit = np.zeros(n_k, np.int64), np.zeros(n_k, np.int64)
        np.add.at(total, kernel, values)
        np.add.at(hit, kernel, values > 0)
        lost.append((what, total.tolist(), hit.tolist()))
    for k in present.tolist():
        reasons = out.setdefault(names[k], [])
        for what, total, hit in lost:
            if total[k]:
                reasons.append(f"{total[k]:,} {what} in {hit[k]:,} of {int(n_launches[k]):,} launch(es)")
        if unsure.get(names[k]):
            reasons.append(f"{int(unsure[names[k]]):,} CTA start(s) not placed: these CTAs ended too long after "
                           "their launch for the start this loop kernel kept (32 bits) to be exact; "
                           "PROTON_LITE_LOOP_START=entry keeps it whole")
        if overruns.get(names[k]):
            reasons.append(f"{int(overruns[names[k]]):,} CUDA graph replay(s) not kept (their ring was full: "
                           "graph_slots=)")
    return out


def capture_losses(profile: Profile) -> list[str]:
    """Why the capture as a whole is incomplete: every total is then a lower bound."""
    session = profile.session or {}
    out = []
    if session.get("truncated"):
        out.append("the capture was cut off before stop() (the program ended or was killed, or the file was "
                   "truncated): launches after the last complete one are missing")
    lost = int(session.get("lost_launches") or 0)
    if lost:
        out.append(f"{lost:,} launch(es) lost to a GPU fault before their records were copied back")
    cut = session.get("cut")
    if isinstance(cut, dict):
        out.append(f"a part of a capture: {len(cut.get('launches') or []):,} of {int(cut.get('of_launches') or 0):,} "
                   "launches (proton-lite trace --launch/--window)")
    return out


def incomplete(profile: Profile, launches: np.ndarray | None = None) -> dict[str, list[str]]:
    """Kernel name -> all reasons its numbers are incomplete: its own losses, then the capture's."""
    whole = capture_losses(profile)
    return {name: reasons + whole for name, reasons in kernel_losses(profile, launches).items()}


LEGEND = ("* incomplete: records or launches behind this row were lost (see the warnings above); its numbers cover "
          "only what was kept")
