"""The summary (``summary.summarize``'s dict) drawn as tables that fit 80 columns: header,
warnings, the legend of ``*`` marks, then the tables asked for."""
from __future__ import annotations

import math

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from proton_lite.viewer.completeness import LEGEND
from proton_lite.viewer.render import compact_table, fmt_count, fmt_cycles, fmt_ns, fmt_share


TABLES = ("launches", "scopes", "percentiles", "sms")
KERNEL_TABLES = 20  # kernels whose scope tables are drawn, unless every_kernel (the rest are counted)


def render_summary(summary: dict, console: Console, max_launch_rows: int = 20, tables=TABLES,
                   source: str | None = None, every_kernel: bool = False) -> None:
    """Draw ``summary`` (from :func:`summarize`) on ``console`` for >= 80 columns: the header,
    the warnings, then the ``tables`` asked for (any of TABLES), rows built from lost records
    marked ``*`` with one legend line.  ``source``: the file summarized (shown in the header).
    The scope tables of at most KERNEL_TABLES kernels, those of the first rows in the rows'
    order (a compiled model's capture of 2,048 kernels with scopes drew 30 K lines), unless
    ``every_kernel``."""
    s = summary["session"]
    head = Text("proton-lite summary", style="bold")
    name = s.get("name")
    rank = (f"{s['rank']} of {s['world_size']}" if s.get("world_size") is not None else str(s["rank"])) \
        if s.get("rank") is not None else None
    for label, value in (("file", source), ("session", str(name).replace("\\", "/").rsplit("/", 1)[-1] if name else None),
                         ("host", s.get("host")), ("rank", rank), ("device", s.get("device")),
                         ("launches", (f"{s['launches_shown']:,} of {s['launches']:,}"
                                       if s["launches_shown"] != s["launches"] else f"{s['launches']:,}")
                          + (f" ({s['graph_replays']:,} replays of {s['graphs']:,} CUDA graph"
                             f"{'s' if s['graphs'] != 1 else ''})" if s.get("graph_replays") else ""))):
        if value is not None:
            head.append(f"  {label}: ", style="dim").append(str(value))
    console.print(head)
    for w in summary["warnings"]:
        text = Text("! ", style="bold yellow").append(w["message"])
        if w.get("hint"):
            text.append(f" (hint: {w['hint']})", style="dim")
        console.print(text)
    marked = any(r.get("incomplete") for r in summary["launches"]) or any(r.get("incomplete")
                                                                          for r in summary["scopes"])
    if marked:
        console.print(Text(LEGEND, style="yellow"))
    if summary["launches"] and "launches" in tables:
        console.print(_launch_table(summary["launches"], max_launch_rows))
    groups = _by_kernel(summary["scopes"])
    drawn = groups if every_kernel else groups[:KERNEL_TABLES]
    for kernel_name, rows in drawn:
        parts = [Text(kernel_name, style="bold")]
        if "scopes" in tables:
            parts.append(_scope_time_table(rows))
        if "percentiles" in tables:
            parts.append(_scope_dist_table(rows))
        if len(parts) > 1:
            console.print(Group(*parts))
    if len(drawn) < len(groups) and ("scopes" in tables or "percentiles" in tables):
        console.print(Text(f"{len(groups) - len(drawn):,} more kernels' scope tables not shown (those drawn hold "
                           f"the first rows by {summary['filters']['sort']}): --all draws every kernel's, --kernel TEXT "
                           "the kernels whose name holds it, --json gives every row", style="dim"))
    shown, total = len(summary["scopes"]), summary.get("scopes_total", len(summary["scopes"]))
    if shown < total and ("scopes" in tables or "percentiles" in tables):
        console.print(Text(f"showing {shown} of {total} scopes (sorted by {summary['filters']['sort']})",
                           style="dim"))
    if summary["sms"] and "sms" in tables:
        console.print(Text(f"SMs ({len(summary['sms'])} used): busy = union of CTA lifetimes on the SM, summed "
                           "over launches (--tables launches,scopes,percentiles hides this table)", style="italic"))
        console.print(_sm_table(summary["sms"], console.width))


def _by_kernel(rows: list[dict]) -> list[tuple[str, list[dict]]]:
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["kernel"], []).append(r)
    return list(groups.items())


def _launch_table(launches: list[dict], max_rows: int) -> Table:
    t = compact_table("Launches")
    t.add_column("#", justify="right", no_wrap=True)
    t.add_column("kernel", overflow="fold", ratio=1)
    for name in ("grid", "warps", "time", "CTAs", "SMs", "CTA/SM", "waves"):
        t.add_column(name, justify="right", no_wrap=True)
    for r in launches[:max_rows]:
        name = r["kernel"] + (f" (graph {r['graph']} replay {r['replay']})" if r.get("graph") else "")
        t.add_row(str(r["launch"]), name + (" *" if r.get("incomplete") else ""), "x".join(str(g) for g in r["grid"]), str(r["warps"]),
                  fmt_ns(r["duration_ns"]), fmt_count(r["ctas"]), str(r["sms_used"]), str(r["max_ctas_per_sm"]),
                  "-" if r["waves"] is None else str(r["waves"]))
    if len(launches) > max_rows:
        t.caption = f"{len(launches) - max_rows} more launches not shown (filter with a kernel name)"
        t.caption_justify = "left"
    return t


def _scope_time_table(rows: list[dict]) -> Table:
    t = compact_table("time per scope",
                      caption="total: summed over every unit (warp, warp group or CTA) and launch; share: depth-0 "
                              "time / (units x CTA lifetime); (x%): a scope only ever nested in others, its "
                              "inclusive share")
    t.add_column("scope", overflow="fold", ratio=1)
    for name in ("count", "total", "share", "mean", "min", "max"):
        t.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        share = fmt_share(r["share"])
        if r["share"] == 0 and r.get("inclusive_share"):
            share = f"({fmt_share(r['inclusive_share'])})"  # only nested: inclusive share in brackets
        t.add_row(_marked(r), fmt_count(r["count"]), fmt_ns(r["total"]), share, fmt_ns(r["mean"]),
                  fmt_ns(r["min"]), fmt_ns(r["max"]))
    return t


def _marked(row: dict) -> str:
    """A scope's name, with ``*`` when its kernel lost records (its numbers are incomplete)."""
    where = f" · {row['partition']}" if row.get("partition") else ""  # a warp-specialized kernel's partition
    return row["scope"] + where + (" *" if row.get("incomplete") else "")


def _scope_dist_table(rows: list[dict]) -> Table:
    t = compact_table("percentiles: time, then cycles")
    t.add_column("scope", overflow="fold", ratio=1)
    for name in ("p50", "p90", "p99", "cyc mean", "cyc p50", "cyc p99"):
        t.add_column(name, justify="right", no_wrap=True)
    for r in rows:
        c = r["cycles"]
        t.add_row(_marked(r), fmt_ns(r["p50"]), fmt_ns(r["p90"]), fmt_ns(r["p99"]), fmt_cycles(c["mean"]),
                  fmt_cycles(c["p50"]), fmt_cycles(c["p99"]))
    return t


def _sm_table(sms: list[dict], width: int) -> Table:
    per_group = 22  # "SM" + "busy" + "CTAs" columns with padding
    groups = max(1, min(4, width // per_group))
    rows_needed = math.ceil(len(sms) / groups)
    groups = math.ceil(len(sms) / rows_needed)
    t = compact_table()
    for _ in range(groups):
        t.add_column("SM", justify="right", no_wrap=True)
        t.add_column("busy", justify="right", no_wrap=True)
        t.add_column("CTAs", justify="right", no_wrap=True)
    for i in range(rows_needed):
        cells: list[str] = []
        for g in range(groups):
            j = g * rows_needed + i
            if j < len(sms):
                cells += [str(sms[j]["sm"]), fmt_ns(sms[j]["busy_ns"]), fmt_count(sms[j]["ctas"])]
            else:
                cells += ["", "", ""]
        t.add_row(*cells)
    return t
