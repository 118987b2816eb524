"""``proton-lite summary`` of several captures at once: one per rank of a distributed job (or
per run), compared kernel by kernel, so that the slowest rank shows first.

Why: under torchrun every rank writes its own capture; a user looking for a straggler wants
each kernel's time on every rank side by side, not eight summaries to read one after the
other.  Each capture is summarized as alone (``summary.summarize``); the set adds, per
kernel, the device time it took on each capture (the sum of its launches' durations) with
the fastest, the median and the slowest capture, and marks a kernel incomplete where any
capture's numbers for it are.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from proton_lite.profile_merge import rank_names
from proton_lite.viewer.completeness import LEGEND
from proton_lite.viewer.render import fmt_ns as _fmt_ns
from proton_lite.viewer.summary import summarize
from proton_lite.viewer.summary_render import KERNEL_TABLES, render_summary

SCHEMA = "proton_lite.summary_set/1"


def capture_labels(summaries: list[dict], sources: list[str]) -> list[str]:
    """A short name per capture: ``rank R`` where every capture knows its rank and the ranks
    differ, else the file's name (its stem, or the whole name where stems repeat)."""
    by_rank = rank_names([s["session"].get("rank") for s in summaries])
    if by_rank:
        return by_rank
    parts = [Path(p).with_suffix("").parts or (str(p),) for p in sources]
    for depth in range(1, max(len(x) for x in parts) + 1):  # the shortest path ends that tell them apart
        labels = ["/".join(x[-depth:]) for x in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [f"{i}: {p}" for i, p in enumerate(sources)]


def summarize_set(profiles: list, sources: list[str], **filters) -> dict:
    """Summaries of ``profiles`` (read from ``sources``) and the per-kernel comparison across
    them (``filters``: as ``summarize`` takes them)."""
    summaries = [summarize(p, **filters) for p in profiles]
    labels = capture_labels(summaries, sources)
    kernels: dict[str, dict] = {}
    for label, s in zip(labels, summaries):
        for launch in s["launches"]:
            per = kernels.setdefault(launch["kernel"], {}).setdefault(label, {"launches": 0, "time_ns": 0,
                                                                                "incomplete": False})
            per["launches"] += 1
            per["time_ns"] += int(launch["duration_ns"])
            per["incomplete"] |= bool(launch.get("incomplete"))
    across = []
    for name, per in kernels.items():
        times = {label: v["time_ns"] for label, v in per.items()}
        slowest = max(times, key=lambda k: (times[k], k))
        median = statistics.median(times.values())
        incomplete = sorted(label for label, v in per.items() if v["incomplete"])
        across.append({"kernel": name, "captures": len(per), "launches": sum(v["launches"] for v in per.values()),
                       "time_ns": {"min": min(times.values()), "median": median, "max": times[slowest]},
                       "slowest": slowest, "slowest_over_median": times[slowest] / median if median else None,
                       "per_capture": {label: per[label] for label in labels if label in per},
                       "incomplete": incomplete or None})
    across.sort(key=lambda r: (-r["time_ns"]["max"], r["kernel"]))
    warnings = [dict(w, capture=label, message=f"{label}: {w['message']}")
                for label, s in zip(labels, summaries) for w in s["warnings"]]
    missing = [(r["kernel"], [label for label in labels if label not in r["per_capture"]])
               for r in across if r["captures"] < len(labels)]
    for kernel, absent in missing:
        warnings.append({"kind": "kernel_missing", "capture": None, "hint": None,
                         "message": f"kernel {kernel} has no launch in {', '.join(absent)}"})
    return {"schema": SCHEMA, "captures": [{"label": label, "source": str(src), "summary": s}
                                           for label, src, s in zip(labels, sources, summaries)],
            "across": across, "warnings": warnings}


def render_summary_set(result: dict, console: Console, tables=None, each: bool = False,
                       every_kernel: bool = False) -> None:
    """The warnings, one line per capture, the per-kernel comparison (the KERNEL_TABLES kernels
    of the most device time, unless ``every_kernel``), then (``each``) every capture's own
    summary with the ``tables`` asked for."""
    caps = result["captures"]
    console.print(Text("proton-lite summary", style="bold").append(f"  {len(caps)} captures", style="dim"))
    for w in result["warnings"]:
        text = Text("! ", style="bold yellow").append(w["message"])
        if w.get("hint"):
            text.append(f" (hint: {w['hint']})", style="dim")
        console.print(text)
    if any(r["incomplete"] for r in result["across"]):
        console.print(Text(LEGEND, style="yellow"))
    by_file = all(c["label"] in c["source"] for c in caps)  # labels are the files' names: no file column
    t = Table(title="Captures", title_justify="left", box=None, header_style="bold")
    for col in ("capture", "host", "device", "launches", "span") + (() if by_file else ("file", )):
        t.add_column(col, justify="right" if col in ("launches", "span") else "left", no_wrap=col == "capture")
    for c in caps:
        s = c["summary"]["session"]
        t.add_row(c["label"], str(s.get("host") or "-"), str(s.get("device") or "-"), f"{s['launches_shown']:,}",
                  _fmt_ns(s.get("span_ns") or 0), *(() if by_file else (c["source"], )))
    console.print(t)
    t = Table(title="Kernels across captures: device time, the sum of a capture's launches",
              title_justify="left", box=None, header_style="bold")
    numeric = {"in": 4, "launches": 9, "min": 9, "median": 9, "max": 9, "max/med": 8}
    for col in ("kernel", "in", "launches", "min", "median", "max", "max/med", "slowest"):  # names give way first
        t.add_column(col, justify="right" if col in numeric else "left", no_wrap=True, min_width=numeric.get(col),
                     overflow="ellipsis")
    across = result["across"] if every_kernel else result["across"][:KERNEL_TABLES]
    if len(across) < len(result["across"]):
        t.caption = (f"{len(result['across']) - len(across):,} more kernels not shown: --all shows every one, "
                     "--kernel TEXT the kernels whose name holds it")
    for r in across:
        ratio = r["slowest_over_median"]
        t.add_row(("* " if r["incomplete"] else "") + r["kernel"], f"{r['captures']}/{len(caps)}", f"{r['launches']:,}",
                  _fmt_ns(r["time_ns"]["min"]), _fmt_ns(r["time_ns"]["median"]), _fmt_ns(r["time_ns"]["max"]),
                  f"{ratio:.2f}" if ratio is not None else "-", r["slowest"])
    console.print(t)
    if each:
        for c in caps:
            console.print()
            render_summary(c["summary"], console, tables=tables, source=c["source"], every_kernel=every_kernel)
