"""Compare two profiles: per kernel and per scope, is ``b`` faster or slower than ``a``?

Kernels are matched by name, scopes by (kernel name, scope name).  For each, both inputs
give a count, a mean and a total duration (kernels: per launch, ``end_ns - start_ns``;
scopes: per interval, ``end_ns - start_ns``), and the deltas ``b - a`` in ns and in % of
``a``.

A verdict ("faster" / "slower", ``b`` relative to ``a``) is only given when the difference
of the means is larger than the noise, else it reads "no clear change":

* **spread** of one input is its run-to-run variation of the mean:

  - with >= 2 launches: the sample standard deviation (ddof=1) of the per-launch means
    (kernels: of the launch durations; scopes: of each launch's mean interval duration);
  - with 1 launch, scopes: the standard error of the mean of the interval durations
    (``stdev / sqrt(n)``); kernels: the launch duration times the relative standard error
    of its CTA lifetimes.  Samples within one launch share its clock and memory state, so
    this underestimates run-to-run noise: profile several launches when it matters;
  - too few samples (one interval, one CTA): unknown, and no verdict is given.

* **noise** = the larger spread of the two inputs; the verdict needs
  ``|mean_b - mean_a| > threshold_factor * noise`` (``threshold_factor`` = 2 by default:
  with a factor of 1, two runs of the same code would get a verdict about a third of
  the time).

No verdict at all ("incomplete") where either side lost records of that kernel (drops,
unmatched records, missing CTAs) or its capture is incomplete (cut off, launches lost, a
part of a capture): its means and totals cover only what was kept, so neither a change
nor its absence can be told.  The reasons are in the row (``incomplete``) and in the
``warnings``, which the text output prints first.
"""
from __future__ import annotations

import math

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from proton_lite.arrays import groups
from proton_lite.profile_data import Profile
from proton_lite.viewer.completeness import LEGEND, capture_losses, kernel_losses
from proton_lite.viewer.render import compact_table, fmt_count, fmt_ns, fmt_pct
from proton_lite.viewer.summary import _scope_name
from proton_lite.viewer.summary_arrays import dense_unique, rows_of_launches

SCHEMA = "proton_lite.diff/1"
FASTER, SLOWER, NO_CHANGE, INCOMPLETE = "faster", "slower", "no clear change", "incomplete"


def diff_profiles(a: Profile, b: Profile, kernel: str | None = None, threshold_factor: float = 2.0) -> dict:
    """Per-kernel and per-scope deltas from ``a`` (baseline) to ``b``; see the module docstring.

    kernel: only kernels whose name contains this text (case-insensitive).
    """
    if threshold_factor < 0:
        raise ValueError("diff_profiles: threshold_factor must be >= 0")
    ca, cb = _collect(a, kernel), _collect(b, kernel)
    kernels = []
    for name in sorted(set(ca) | set(cb)):
        ka, kb = ca.get(name), cb.get(name)
        kernels.append(_compare({"kernel": name},
                                _kernel_side(ka) if ka else None, _kernel_side(kb) if kb else None,
                                threshold_factor))
    scopes = []
    for name in sorted(set(ca) | set(cb)):
        sa = ca[name]["scopes"] if name in ca else {}
        sb = cb[name]["scopes"] if name in cb else {}
        rows = [_compare({"kernel": name, "scope": s},
                         _scope_side(sa[s]) if s in sa else None, _scope_side(sb[s]) if s in sb else None,
                         threshold_factor)
                for s in set(sa) | set(sb)]
        rows.sort(key=lambda r: (-max(r["a"]["total_ns"] if r["a"] else 0, r["b"]["total_ns"] if r["b"] else 0),
                                 r["scope"]))
        scopes += rows
    warnings = _mark_incomplete(a, b, kernels + scopes)
    return {
        "schema": SCHEMA,
        "a": {"name": _session_name(a), "launches": int(len(a.launches))},
        "b": {"name": _session_name(b), "launches": int(len(b.launches))},
        "threshold_factor": float(threshold_factor),
        "warnings": warnings,
        "kernels": kernels,
        "scopes": scopes,
    }


def _mark_incomplete(a: Profile, b: Profile, rows: list[dict]) -> list[str]:
    """Give rows of kernels that lost records on either side no verdict (``incomplete``: the
    reasons per side); returns the warnings, capture-wide first."""
    warnings, per_side = [], {}
    for side, p in (("a", a), ("b", b)):
        whole = capture_losses(p)
        kernels = kernel_losses(p)
        per_side[side] = {k: v + whole for k, v in kernels.items()}
        warnings += [f"{side}: {w}" for w in whole]
        warnings += [f"{side}: {k}: {r}" for k, reasons in sorted(kernels.items()) for r in reasons]
    for row in rows:
        why = {side: per_side[side].get(row["kernel"], []) for side in ("a", "b")}
        why = {side: reasons for side, reasons in why.items() if reasons}
        row["incomplete"] = why or None
        if why and row["verdict"] in (FASTER, SLOWER, NO_CHANGE):
            row["verdict"] = INCOMPLETE
    if any(r["incomplete"] for r in rows):
        warnings.append("rows marked * have no verdict: records or launches of that kernel were lost on the side(s) "
                        "named above")
    return warnings


def _session_name(p: Profile) -> str | None:
    """The session's name without the folders of the machine that captured it."""
    name = (p.session or {}).get("name")
    return None if name is None else str(name).replace("\\", "/").rsplit("/", 1)[-1]


def _collect(p: Profile, kernel_filter: str | None) -> dict:
    """kernel name -> launch durations, CTA lifetimes, and per scope (launch ids, durations)."""
    out: dict[str, dict] = {}
    names = [k.name for k in p.kernels]
    keep = [i for i, n in enumerate(names) if kernel_filter is None or kernel_filter.lower() in n.lower()]
    launches = p.launches[np.isin(p.launches["kernel"], np.asarray(keep, dtype=np.uint32))] if len(p.launches) \
        else p.launches
    launches = launches[np.argsort(launches["launch"], kind="stable")]
    ids = launches["launch"]
    kernel_of = launches["kernel"].astype(np.int64)
    # each kernel's launches, then its CTAs, in their order, by one stable sort (a selection per
    # kernel took 21 s for 4,096 kernels' 65,536 launches of 64 CTAs)
    durations = (launches["end_ns"] - launches["start_ns"]).astype(np.int64)
    for i, at in groups(kernel_of):
        entry = out.setdefault(names[i], {"durations": [], "cta_life": [], "scopes": {}})
        entry["durations"].append(durations[at])
    ctas, cta_launch = rows_of_launches(ids, p.ctas)  # (no copy of every row: summary_arrays)
    if len(ctas):
        life = (ctas["end_ns"] - ctas["start_ns"]).astype(np.int64)
        for i, at in groups(kernel_of[cta_launch]):
            out[names[i]]["cta_life"].append(life[at])
    iv, iv_launch = rows_of_launches(ids, p.intervals)
    if len(iv):
        ki = kernel_of[iv_launch]
        pair = (ki << 32) | iv["scope"].astype(np.int64)
        pairs, inverse = dense_unique(pair, ki, iv["scope"])
        inverse = inverse.reshape(-1)
        order = np.argsort(inverse.astype(np.uint16) if len(pairs) <= 1 << 16 else inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(pairs) + 1))
        dur = (iv["end_ns"] - iv["start_ns"]).astype(np.int64)
        for j, pv in enumerate(pairs):
            k = p.kernels[int(pv >> 32)]
            sname = _scope_name(k, int(pv & 0xFFFFFFFF))
            idx = order[bounds[j]:bounds[j + 1]]
            lst = out[k.name]["scopes"].setdefault(sname, ([], []))
            lst[0].append(iv["launch"][idx].astype(np.int64))
            lst[1].append(dur[idx])
    for entry in out.values():
        entry["durations"] = np.concatenate(entry["durations"])
        entry["cta_life"] = np.concatenate(entry["cta_life"]) if entry["cta_life"] else np.zeros(0, np.int64)
        entry["scopes"] = {s: (np.concatenate(l), np.concatenate(d)) for s, (l, d) in entry["scopes"].items()}
    return out


def _kernel_side(entry: dict) -> dict:
    d = entry["durations"].astype(np.float64)
    mean = float(d.mean())
    if len(d) >= 2:
        spread, basis = float(np.std(d, ddof=1)), "launches"
    else:
        life = entry["cta_life"].astype(np.float64)
        if len(life) >= 2 and life.mean() > 0:
            rel_se = float(np.std(life, ddof=1) / math.sqrt(len(life)) / life.mean())
            spread, basis = mean * rel_se, "cta_lifetimes"
        else:
            spread, basis = None, "too_few_samples"
    return {"count": int(len(d)), "launches": int(len(d)), "mean_ns": mean, "total_ns": int(d.sum()),
            "spread_ns": spread, "spread_basis": basis}


def _scope_side(data: tuple[np.ndarray, np.ndarray]) -> dict:
    launch, dur = data
    d = dur.astype(np.float64)
    ids, inverse = dense_unique(launch, launch)
    inverse = inverse.reshape(-1)
    if len(ids) >= 2:
        means = np.bincount(inverse, weights=d) / np.bincount(inverse)
        spread, basis = float(np.std(means, ddof=1)), "launches"
    elif len(d) >= 2:
        spread, basis = float(np.std(d, ddof=1) / math.sqrt(len(d))), "intervals"
    else:
        spread, basis = None, "too_few_samples"
    return {"count": int(len(d)), "launches": int(len(ids)), "mean_ns": float(d.mean()), "total_ns": int(d.sum()),
            "spread_ns": spread, "spread_basis": basis}


def _pct(new: float, old: float) -> float | None:
    return None if old == 0 else 100.0 * (new - old) / old


def _compare(row: dict, a: dict | None, b: dict | None, factor: float) -> dict:
    row.update({"a": a, "b": b})
    if a is None or b is None:
        row.update({"delta_mean_ns": None, "delta_mean_pct": None, "delta_total_ns": None, "delta_total_pct": None,
                    "delta_count": None, "noise_ns": None,
                    "verdict": "only in a" if b is None else "only in b"})
        return row
    dm = b["mean_ns"] - a["mean_ns"]
    noise = None if a["spread_ns"] is None or b["spread_ns"] is None else max(a["spread_ns"], b["spread_ns"])
    if noise is not None and abs(dm) > factor * noise:
        verdict = FASTER if dm < 0 else SLOWER
    else:
        verdict = NO_CHANGE
    row.update({
        "delta_mean_ns": dm, "delta_mean_pct": _pct(b["mean_ns"], a["mean_ns"]),
        "delta_total_ns": b["total_ns"] - a["total_ns"], "delta_total_pct": _pct(b["total_ns"], a["total_ns"]),
        "delta_count": b["count"] - a["count"], "noise_ns": noise, "verdict": verdict,
    })
    return row


_VERDICT_STYLE = {FASTER: "bold green", SLOWER: "bold red", INCOMPLETE: "yellow"}


KERNELS_SHOWN = 20  # past this many kernels, the text draws those with a change, the largest first


def render_diff(d: dict, console: Console, every_kernel: bool = False) -> None:
    """Draw the result of :func:`diff_profiles`, one table per kernel (readable at 80 columns).
    Past KERNELS_SHOWN kernels (a large compiled model has thousands) and unless ``every_kernel``:
    the kernels with a verdict or only on one side, the largest change of a total first, at most
    KERNELS_SHOWN of them, and a line that counts the rest."""
    a, b = d["a"].get("name") or "a", d["b"].get("name") or "b"
    console.print(Text(f"{b} vs {a} (baseline)", style="bold"))
    for w in d.get("warnings", ()):
        console.print(Text("! ", style="bold yellow").append(w))
    if any(r.get("incomplete") for r in d["kernels"] + d["scopes"]):
        console.print(Text(LEGEND, style="yellow"))
    scopes: dict[str, list[dict]] = {}
    for r in d["scopes"]:
        scopes.setdefault(r["kernel"], []).append(r)
    kernels, left = d["kernels"], ""
    if len(kernels) > KERNELS_SHOWN and not every_kernel:
        kernels, left = _largest_changes(kernels, scopes)
    for k in kernels:
        t = compact_table(k["kernel"])
        t.add_column("scope", overflow="fold", ratio=1)
        t.add_column("count", justify="right", no_wrap=True)
        t.add_column("mean a", justify="right", no_wrap=True)
        t.add_column("mean b", justify="right", no_wrap=True)
        t.add_column("Δ mean", justify="right", no_wrap=True)
        t.add_column("noise", justify="right", no_wrap=True)
        t.add_column("Δ total", justify="right", no_wrap=True)
        t.add_column("verdict", no_wrap=True)
        _add_row(t, Text("(launch)" + (" *" if k.get("incomplete") else ""), style="italic"), k)
        for s in scopes.get(k["kernel"], []):
            _add_row(t, Text(s["scope"] + (" *" if s.get("incomplete") else "")), s)
        console.print(t)
    if left:
        console.print(Text(left))
    console.print(Text(f"(launch): whole-launch durations; noise: larger run-to-run spread of the means, in % of "
                       f"mean a; a verdict needs |Δ mean| > {d['threshold_factor']:g} x noise", style="dim"))


def _largest_changes(kernels: list[dict], scopes: dict[str, list[dict]]) -> tuple[list[dict], str]:
    """The kernels to draw (a row of theirs with a verdict, or only on one side: the largest
    change of a total first, at most KERNELS_SHOWN) and a line that counts the others."""
    def change(r: dict) -> float:
        if r["delta_total_ns"] is not None:
            return abs(r["delta_total_ns"])
        return max(side["total_ns"] if side else 0 for side in (r["a"], r["b"]))
    moved = []
    for k in kernels:
        rows = [r for r in [k] + scopes.get(k["kernel"], []) if r["verdict"] != NO_CHANGE]
        if rows:
            moved.append((-max(map(change, rows)), k["kernel"], k))
    moved.sort(key=lambda m: m[:2])
    shown = [k for *_, k in moved[:KERNELS_SHOWN]]
    quiet, more = len(kernels) - len(moved), len(moved) - len(shown)
    parts = [f"{quiet:,} kernel(s) with no clear change"] if quiet else []
    parts += [f"{more:,} more with a change or on one side (smaller changes of their totals)"] if more else []
    if not parts:
        return shown, ""
    return shown, (" and ".join(parts) + " not shown: --all draws every kernel, --kernel TEXT the kernels whose "
                   "name holds it, --json gives every row")


def _side_count(r: dict) -> str:
    ca = "-" if r["a"] is None else fmt_count(r["a"]["count"])
    cb = "-" if r["b"] is None else fmt_count(r["b"]["count"])
    return ca if ca == cb else f"{ca}→{cb}"


def _noise(r: dict) -> str:
    if r["noise_ns"] is None or not r["a"] or not r["a"]["mean_ns"]:
        return "-"
    return f"±{100 * r['noise_ns'] / r['a']['mean_ns']:.1f}%"


def _add_row(t: Table, label: Text, r: dict) -> None:
    t.add_row(label, _side_count(r),
              fmt_ns(r["a"]["mean_ns"]) if r["a"] else "-", fmt_ns(r["b"]["mean_ns"]) if r["b"] else "-",
              fmt_pct(r["delta_mean_pct"]), _noise(r), fmt_pct(r["delta_total_pct"]),
              Text(r["verdict"], style=_VERDICT_STYLE.get(r["verdict"], "")))
