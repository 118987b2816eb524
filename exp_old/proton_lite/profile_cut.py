"""Cut a profile down to some launches and a time window, for traces a browser can open.

Perfetto's UI holds a whole trace in the browser's memory and works up to a few GB: a
session of thousands of large launches needs a way to look at part of it.  A cut keeps
whole slices (a CTA or scope that crosses the window's edge is kept entire, never
clipped, so every duration shown is a real one) and records what was cut in the
profile's session metadata (``cut``), which the trace embeds.
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from proton_lite.profile_data import Profile


def parse_launches(specs: list[str]) -> set[int]:
    """``["3", "5-7"]`` -> {3, 5, 6, 7}; a clear ValueError for anything else."""
    keep: set[int] = set()
    for spec in specs:
        for part in str(spec).split(","):
            m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
            if not m:
                raise ValueError(f"--launch {part!r}: give launch numbers as in the trace's titles (#3), "
                                 "e.g. --launch 3 or --launch 5-7")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise ValueError(f"--launch {part!r}: the range ends before it starts")
            keep.update(range(lo, hi + 1))
    return keep


def launches_of_kernels(profile: Profile, text: str) -> set[int]:
    """Numbers of the launches of kernels whose name contains ``text`` (case-insensitive)."""
    text = text.lower()
    ids = [i for i, k in enumerate(profile.kernels) if text in k.name.lower()]
    la = profile.launches
    return set(la["launch"][np.isin(la["kernel"], ids)].tolist()) if ids else set()


def parse_window(spec: str) -> tuple[float | None, float | None]:
    """``"1200:3400"`` (µs on the trace's time axis; either end may be left out)."""
    m = re.fullmatch(r"\s*([0-9.]*)\s*:\s*([0-9.]*)\s*", spec or "")
    try:
        lo = float(m.group(1)) if m and m.group(1) else None
        hi = float(m.group(2)) if m and m.group(2) else None
    except ValueError:
        m = None
    if not m or (lo is None and hi is None) or (lo is not None and hi is not None and hi <= lo):
        raise ValueError(f"--window {spec!r}: give START:END in µs from the trace's start, e.g. --window 1200:3400 "
                         "(either end may be left out: 1200: or :3400)")
    return lo, hi


def cut(profile: Profile, launches: set[int] | None = None,
        window_us: tuple[float | None, float | None] | None = None) -> Profile:
    """The launches numbered in ``launches`` (all when None) that overlap ``window_us``, with
    their CTAs and scope intervals that overlap it.  Times are ns from the capture's first
    CTA, as in the profile; the window is in µs on that axis."""
    la, ctas, iv = profile.launches, profile.ctas, profile.intervals
    keep = np.ones(len(la), bool)
    if launches is not None:
        keep &= np.isin(la["launch"], np.fromiter(launches, np.int64, len(launches)))
    lo = hi = None
    if window_us is not None:
        lo = None if window_us[0] is None else int(round(window_us[0] * 1000))
        hi = None if window_us[1] is None else int(round(window_us[1] * 1000))
    keep &= _overlaps(la, lo, hi)
    kept_ids = la["launch"][keep]
    ctas = ctas[np.isin(ctas["launch"], kept_ids) & _overlaps(ctas, lo, hi)]
    iv = iv[np.isin(iv["launch"], kept_ids) & _overlaps(iv, lo, hi)]
    if len(ctas) and len(iv):  # an interval only with its CTA (the trace hangs it from the CTA's track)
        key = (ctas["launch"].astype(np.int64) << 32) | ctas["cta"]
        iv = iv[np.isin((iv["launch"].astype(np.int64) << 32) | iv["cta"], key)]
    elif not len(ctas):
        iv = iv[:0]
    session = dict(profile.session or {})
    session["cut"] = {"launches": sorted(int(x) for x in kept_ids.tolist()),
                      "window_us": None if window_us is None else list(window_us),
                      "of_launches": int(len(la)), "of_ctas": int(len(profile.ctas))}
    return replace(profile, launches=la[keep], ctas=ctas, intervals=iv, session=session)


def _overlaps(arr: np.ndarray, lo: int | None, hi: int | None) -> np.ndarray:
    ok = np.ones(len(arr), bool)
    if lo is not None:
        ok &= arr["end_ns"] >= lo
    if hi is not None:
        ok &= arr["start_ns"] <= hi
    return ok
