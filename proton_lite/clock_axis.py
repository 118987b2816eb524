"""One time axis for launches of several GPUs, from the anchors a session measured.

A session measures, at start (GPUs already in use) and at stop (GPUs it recorded on), where
each GPU's ``%globaltimer`` stands against the host clock (``runtime/clock_probe.py``:
``CLOCK_MONOTONIC_RAW``, one per machine, never stepped or slewed): ``offset_ns =
globaltimer - host`` within ``uncertainty_ns``. Measured on a machine of two H200s
(2026-11-27, ``tests/benchmarks/clock_anchors.py``, against ``CLOCK_REALTIME`` then): the
two GPUs' timers differed by 115-653 us, and that difference grew by about 0.8 us per
second (each timer ran ~5-9 ppm fast against the host clock). So neither a shared timer nor
a constant offset can be assumed: between two anchors of a device its offset is
interpolated linearly (before the first or after the last, the nearest is taken).

* **GPUs of one process.** Records are placed by their own GPU's timer. Where two GPUs'
  offsets differ by more than the two uncertainties together, their timers are not one
  clock, and the launches of every GPU but the reference one (that of the capture's first
  launch) move by the difference at their own time; otherwise nothing moves (a shared
  timer is exact, the anchors are not). ``session["device_clocks"]`` says which, per device.
* **Captures of one host** (ranks of a job): each capture's time 0 is put on the host's
  clock (``t0 - offset``) and the captures line up there (``profile_merge.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from proton_lite.arrays import distinct


@dataclass(frozen=True)
class DeviceClock:
    """A device's anchors: timer values (ascending) and offsets to the host clock there."""
    timers: np.ndarray
    offsets: np.ndarray
    uncertainty_ns: int  # the largest of its anchors'
    gpu: str | None  # UUID, where the probe read it
    host_clock: str = "CLOCK_REALTIME"  # the host clock of the anchors (captures before 2026-11-27: realtime)

    def offset_at(self, timer):
        """The offset (ns) at timer value(s) ``timer``: interpolated between anchors."""
        if len(self.timers) == 1:
            return np.full(np.shape(timer), self.offsets[0], np.int64) if np.ndim(timer) else int(self.offsets[0])
        out = np.interp(np.asarray(timer, np.float64), self.timers.astype(np.float64),
                        self.offsets.astype(np.float64))
        return np.rint(out).astype(np.int64) if np.ndim(timer) else int(round(float(out)))


def device_clocks(anchors) -> dict[int, DeviceClock]:
    """``{device: DeviceClock}`` from a session's anchors; failed probes are left out."""
    by_device: dict[int, list[dict]] = {}
    for a in anchors or []:
        if isinstance(a, dict) and "offset_ns" in a and "globaltimer_ns" in a and int(a.get("device", -1)) >= 0:
            by_device.setdefault(int(a["device"]), []).append(a)
    out = {}
    for d, rows in by_device.items():
        rows.sort(key=lambda a: int(a["globaltimer_ns"]))
        out[d] = DeviceClock(np.array([int(a["globaltimer_ns"]) for a in rows], np.int64),
                             np.array([int(a["offset_ns"]) for a in rows], np.int64),
                             max(int(a.get("uncertainty_ns") or 0) for a in rows),
                             next((a["gpu"] for a in rows if a.get("gpu")), None),
                             str(rows[0].get("host_clock") or "CLOCK_REALTIME"))
    return out


def reference_device(profile) -> int | None:
    """The device of the capture's first launch: its timer is the capture's axis."""
    la = profile.launches
    if not len(la):
        return None
    return int(la["device"][int(np.argmin(la["launch"]))])


def reference_clock(profile) -> DeviceClock | None:
    ref = reference_device(profile)
    return device_clocks((profile.session or {}).get("clock_anchors")).get(ref) if ref is not None else None


def host_t0_ns(profile, clock: DeviceClock | None = None) -> int | None:
    """The capture's time 0 on the host clock of its anchors, or None where its reference
    device has no anchor; ``clock``: its ``reference_clock``, where the caller has it."""
    clock = clock or reference_clock(profile)
    return None if clock is None else int(profile.t0_ns) - clock.offset_at(int(profile.t0_ns))


def align_devices(profile):
    """``profile`` with every GPU's launches on the reference GPU's timer, where the anchors
    show the timers differ (see the module doc); ``session["device_clocks"]`` records, per
    device, the shift applied (ns, at the first launch) and the anchors' verdict."""
    session = dict(profile.session or {})
    clocks = device_clocks(session.get("clock_anchors"))
    ref = reference_device(profile)
    la = profile.launches
    devices = distinct(la["device"]).tolist() if len(la) else []
    if len(devices) < 2 or ref not in clocks:
        return profile
    timed = (la["start_ns"] != 0) | (la["end_ns"] != 0)  # a launch with no CTA has no time
    at = int(profile.t0_ns) + la["start_ns"].astype(np.int64)  # each launch's start on its own timer
    per_launch = np.zeros(len(la), np.int64)
    verdicts = {}
    for d in devices:
        if d == ref:
            verdicts[str(d)] = {"clock": "reference", "shift_ns": 0}
            continue
        if d not in clocks:
            verdicts[str(d)] = {"clock": "no anchor: kept on its own timer", "shift_ns": 0}
            continue
        mine, tolerance = clocks[d], clocks[d].uncertainty_ns + clocks[ref].uncertainty_ns
        differences = mine.offsets - clocks[ref].offset_at(mine.timers)  # at this device's anchors
        if np.abs(differences).max() <= tolerance:
            verdicts[str(d)] = {"clock": "shared", "shift_ns": 0, "difference_ns": int(differences[0]),
                                "uncertainty_ns": tolerance}
            continue
        rows = la["device"] == d
        shift = -(mine.offset_at(at[rows]) - clocks[ref].offset_at(at[rows]))
        per_launch[rows] = np.where(timed[rows], shift, 0)
        verdicts[str(d)] = {"clock": f"own timer, {-int(shift[0]):+d} ns from GPU {ref}'s: moved onto it",
                            "shift_ns": int(shift[0]), "uncertainty_ns": tolerance,
                            "anchors": len(mine.timers)}
    session["device_clocks"] = verdicts
    if not per_launch.any():
        return replace(profile, session=session)
    launches, ctas, intervals = la.copy(), profile.ctas.copy(), profile.intervals.copy()
    by_launch = np.zeros(int(la["launch"].max()) + 1, np.int64)
    by_launch[la["launch"]] = per_launch
    for rows in (launches, ctas, intervals):
        if len(rows):
            add = by_launch[rows["launch"]]
            rows["start_ns"] += add
            rows["end_ns"] += add
    t0 = int(profile.t0_ns)
    low = int(ctas["start_ns"].min()) if len(ctas) else 0
    if low < 0:  # a GPU moved before time 0: time 0 becomes its first CTA
        for rows, keep in ((launches, timed), (ctas, None), (intervals, None)):
            if len(rows):
                sub = low if keep is None else np.where(keep, low, 0)
                rows["start_ns"] -= sub
                rows["end_ns"] -= sub
        t0 += low
    return replace(profile, launches=launches, ctas=ctas, intervals=intervals, t0_ns=t0, session=session)
