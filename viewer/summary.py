"""Text summary of a decoded profile: launches, scopes, SMs and warnings.

``summarize`` turns a :class:`~proton_lite.profile_data.Profile` into a plain,
JSON-serializable dict (same input, same output); ``render_summary`` (``summary_render``) draws it as rich
tables that fit an 80-column terminal.

Definitions (also written into the summary under ``"definitions"``):

* **duration** of a launch: ``end_ns - start_ns`` (earliest CTA start to latest CTA end).
* **SMs used**: distinct ``smid`` values among the launch's recorded CTAs.
* **max concurrent CTAs per SM**: for every SM, the CTA lifetimes ``[start_ns, end_ns)``
  of the launch are swept in time order and the largest number alive at once is taken
  (a CTA ending at ``t`` and another starting at ``t`` do not overlap); the launch's value
  is the maximum over its SMs, at least 1.  It is what the run showed, which can be lower
  than the occupancy limit when CTAs are short or start late.
* **waves**: ``ceil(CTAs / (SMs used * max concurrent CTAs per SM))`` with ``CTAs`` the
  launch's ``num_ctas`` (the grid), or the recorded CTAs when ``num_ctas`` is 0.
* **scope statistics** are over the scope's intervals (every unit, CTA and launch of the
  kernels with that name): ``end_ns - start_ns`` in ns and ``cycles`` in SM cycles.
  Percentiles use numpy's default (linear interpolation).
* **share**: sum of the scope's durations at depth 0 divided by the sum over the
  kernel's CTAs of ``units per CTA * CTA lifetime`` (units: warps, warp groups or 1,
  from the kernel's granularity).  Only depth-0 time counts, so the shares of a kernel's
  scopes add up to at most 100% (lane 0; overlapping scopes on extra lanes can add more).
  A scope that only ever runs nested has share 0; ``inclusive_share`` counts its
  intervals at every depth.
* **busy** time of an SM: the length of the union of the lifetimes of the CTAs it ran.
"""
from __future__ import annotations

import math

import numpy as np

from proton_lite.arrays import distinct
from proton_lite.json_values import plain
from proton_lite.partition_map import kernel_unit_partitions
from proton_lite.profile_data import KernelInfo, Profile
from proton_lite.viewer.completeness import capture_losses, incomplete
from proton_lite.viewer.summary_arrays import dense_unique, rows_of_launches, sweep
from proton_lite.viewer.summary_checks import clock_warning, copy_notes

SCHEMA = "proton_lite.summary/1"
SORT_KEYS = ("total", "mean", "count", "p99", "name")
COUNTERS = ("lost_launches", "unsized_launches", "capped_launches")  # launches the session counted at stop
COARSE_TIMER_NS = 100  # globaltimer ticks coarser than this get a warning

DEFINITIONS = {
    "duration_ns": "launch end_ns - start_ns (earliest CTA start to latest CTA end)",
    "max_ctas_per_sm": "largest number of the launch's CTAs alive at once on one SM, from the "
                       "[start_ns, end_ns) CTA lifetimes per SM (touching lifetimes do not overlap)",
    "waves": "ceil(CTAs / (SMs used * max_ctas_per_sm)); CTAs = num_ctas, or recorded CTAs if 0",
    "share": "sum of the scope's depth-0 durations / sum over the kernel's CTAs of "
             "(units per CTA * CTA lifetime)",
    "inclusive_share": "as share, counting the scope's intervals at every depth",
    "busy_ns": "length of the union of the lifetimes of the CTAs run by the SM",
    "percentiles": "numpy.percentile, linear interpolation",
}

# ---------------------------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------------------------

def summarize(profile: Profile, kernel: str | None = None, scope: str | None = None, sort: str = "total",
              top: int | None = None) -> dict:
    """Summarize ``profile``; see the module docstring for the definitions.

    kernel: keep kernels whose name contains this text (case-insensitive).
    scope: keep only the scope with exactly this name.
    sort: order of the scope rows: "total", "mean", "count", "p99" (largest first) or
        "name" (kernel, then scope, alphabetical).  Ties are broken by kernel and scope name.
    top: keep the first ``top`` scope rows after sorting (over all kernels).
    """
    if sort not in SORT_KEYS:
        raise ValueError(f"summarize: unknown sort key {sort!r}; choose one of {', '.join(SORT_KEYS)}")
    if top is not None and (not isinstance(top, (int, np.integer)) or top < 0):
        raise ValueError(f"summarize: top must be a non-negative int or None, got {top!r}")

    kernels = profile.kernels
    selected = [i for i, k in enumerate(kernels) if kernel is None or kernel.lower() in k.name.lower()]
    launches = profile.launches
    if len(launches):
        launches = launches[np.isin(launches["kernel"], np.asarray(selected, dtype=np.uint32))]
        launches = launches[np.argsort(launches["launch"], kind="stable")]
    launch_ids = launches["launch"]
    ctas, cta_launch = rows_of_launches(launch_ids, profile.ctas)
    intervals, iv_launch = rows_of_launches(launch_ids, profile.intervals)
    kernel_of_cta = launches["kernel"].astype(np.int64)[cta_launch]
    kernel_of_interval = launches["kernel"].astype(np.int64)[iv_launch]
    del iv_launch

    warnings: list[dict] = []
    if kernel is not None and not selected:
        names = sorted({k.name for k in kernels})
        warnings.append({"kind": "filter", "message": f"no kernel name contains {kernel!r}; kernels: "
                                                      + (", ".join(names) or "none")})

    scopes, scopes_total = _scope_rows(kernels, intervals, kernel_of_interval, ctas, kernel_of_cta, scope, sort, top)
    # rows built from lost records (a kernel's drops, or the capture cut off) are marked
    losses = incomplete(profile, launches)
    for row in scopes:
        row["incomplete"] = bool(losses.get(row["kernel"]))
    if scope is not None and scopes_total == 0:
        names = sorted({s for i in selected for s in kernels[i].scopes})
        warnings.append({"kind": "filter", "message": f"no recorded scope is named {scope!r}; scopes: "
                                                      + (", ".join(names) or "none")})
    warnings.extend(_warnings(profile, kernels, launches, ctas))

    session = profile.session or {}
    span = int(launches["end_ns"].max() - launches["start_ns"].min()) if len(launches) else 0
    return {
        "schema": SCHEMA,
        "session": {
            "name": plain(session.get("name")),
            "device": plain(session.get("device")),
            "host": plain(session.get("host")),
            "rank": plain(session.get("rank")),
            "world_size": plain(session.get("world_size")),
            "timer_tick_ns": plain(session.get("timer_tick_ns")),
            "launches": int(len(profile.launches)),
            "launches_shown": int(len(launches)),
            # launches that are replays of CUDA graphs, and the graphs they came from
            "graph_replays": int((profile.launches["graph"] > 0).sum()),
            "graphs": int(len(np.unique(profile.launches["graph"][profile.launches["graph"] > 0]))),
            "span_ns": span,
        },
        "filters": {"kernel": kernel, "scope": scope, "sort": sort, "top": None if top is None else int(top)},
        "definitions": dict(DEFINITIONS),
        "launches": _launch_rows(kernels, launches, ctas, cta_launch, bool(capture_losses(profile))),
        "scopes": scopes,
        "scopes_total": scopes_total,
        "sms": _sm_rows(ctas),
        "warnings": warnings,
        "incomplete": {name: reasons for name, reasons in losses.items() if reasons},
        "counters": {k: int(session.get(k) or 0) for k in COUNTERS},
    }


def _units_per_cta(k: KernelInfo) -> int:
    return max(1, int(k.num_warps) // max(1, int(k.unit_warps)))


def _scope_name(k: KernelInfo, index: int) -> str:
    return k.scopes[index] if 0 <= index < len(k.scopes) else f"scope#{index}"


def _stats(values: np.ndarray) -> dict:
    p50, p90, p99 = (float(x) for x in np.percentile(values, [50, 90, 99]))
    return {"total": int(values.sum()), "mean": float(values.mean()), "p50": p50, "p90": p90, "p99": p99,
            "min": int(values.min()), "max": int(values.max())}


def _scope_rows(kernels, intervals, kernel_of_interval, ctas, kernel_of_cta, scope_filter, sort, top):
    """Rows per (kernel name, scope name): kernels that share a name are merged. In a
    warp-specialized kernel, per partition too: a scope that Triton copied into several
    partitions times something different in each (``partition``: its label)."""
    parts = [kernel_unit_partitions(k) for k in kernels]
    # denominator of the share: units * CTA lifetime, per kernel name (and partition)
    unit_time: dict[tuple[str, str | None], int] = {}
    if len(ctas) and len(intervals):  # (only the scopes' rows read it: none without intervals)
        units = np.array([_units_per_cta(k) for k in kernels], dtype=np.int64)
        life = np.maximum(ctas["end_ns"] - ctas["start_ns"], 0)
        per_kernel = np.bincount(kernel_of_cta, weights=life * units[kernel_of_cta], minlength=len(kernels))
        lives = np.bincount(kernel_of_cta, weights=life, minlength=len(kernels))
        for i, k in enumerate(kernels):
            key = (k.name, None)
            unit_time[key] = unit_time.get(key, 0) + int(round(per_kernel[i]))
            if parts[i] is not None:
                labels, of_unit = parts[i]
                for j, lab in enumerate(labels):
                    key = (k.name, lab)
                    unit_time[key] = unit_time.get(key, 0) + int(round(lives[i] * int((of_unit == j).sum())))

    rows: list[dict] = []
    if len(intervals):
        scope = intervals["scope"].astype(np.int64)
        if any(pu is not None for pu in parts):  # warp-specialized kernels: the partition in bits 32-39
            part = np.full(len(intervals), -1, np.int64)
            for i, pu in enumerate(parts):
                if pu is not None:
                    mine = kernel_of_interval == i
                    part[mine] = pu[1][np.minimum(intervals["unit"][mine].astype(np.int64), len(pu[1]) - 1)]
            part += 1
            pair = (kernel_of_interval << 40) | (part << 32) | scope
            pairs, inverse = dense_unique(pair, kernel_of_interval, part, scope)
            del part
        else:  # (no partition: bits 32-39 stay 0, three passes over every interval fewer)
            pair = (kernel_of_interval << 40) | scope
            pairs, inverse = dense_unique(pair, kernel_of_interval, scope)
        del pair, scope
        labels: dict[tuple[str, str, str | None], int] = {}
        pair_label = np.empty(len(pairs), dtype=np.int64)
        for j, p in enumerate(pairs):
            ki, pi = int(p >> 40), int((p >> 32) & 0xFF) - 1
            k = kernels[ki]
            key = (k.name, _scope_name(k, int(p & 0xFFFFFFFF)), parts[ki][0][pi] if pi >= 0 else None)
            pair_label[j] = labels.setdefault(key, len(labels))
        label = pair_label[inverse.reshape(-1)]
        # a stable sort of 16-bit labels is a radix sort (of 64-bit ones, a merge sort: 2 s for 21 M)
        order = np.argsort(label.astype(np.uint16) if len(labels) <= 1 << 16 else label, kind="stable")
        bounds = np.searchsorted(label[order], np.arange(len(labels) + 1))
        durations = np.subtract(intervals["end_ns"], intervals["start_ns"], dtype=np.int64)
        cycles = intervals["cycles"]  # (an int64 field: each scope's rows gathered from it, no copy of all first)
        depth0 = intervals["depth"] == 0
        for (kname, sname, plabel), li in labels.items():
            if scope_filter is not None and sname != scope_filter:
                continue
            idx = order[bounds[li]:bounds[li + 1]]
            d, c = durations[idx], cycles[idx]
            denom = unit_time.get((kname, plabel), 0)
            d0 = int(d[depth0[idx]].sum())
            ns, cyc = _stats(d), _stats(c)
            rows.append({
                "kernel": kname, "scope": sname, "count": int(len(idx)),
                **({"partition": plabel} if plabel is not None else {}),
                **ns,
                "cycles": cyc,
                "depth0_ns": d0,
                "unit_time_ns": denom,
                "share": d0 / denom if denom else None,
                "inclusive_share": int(d.sum()) / denom if denom else None,
            })

    def key(r):
        if sort == "name":
            return (r["kernel"], r["scope"], r.get("partition") or "")
        return (-r[sort], r["kernel"], r["scope"], r.get("partition") or "")

    rows.sort(key=key)
    total = len(rows)
    if top is not None:
        rows = rows[:int(top)]
    return rows, total


def _launch_rows(kernels, launches, ctas, cta_launch, capture_incomplete: bool = False) -> list[dict]:
    """A row per launch; ``cta_launch``: each CTA's launch (its position in ``launches``).
    Its SMs and their concurrency from one sweep of every (launch, SM) group."""
    rows = []
    n = len(launches)
    recorded_of = np.bincount(cta_launch, minlength=n) if n else np.zeros(0, np.int64)
    sms_of, conc_of = np.zeros(n, np.int64), np.zeros(n, np.int64)
    if len(ctas):
        width = int(ctas["smid"].max()) + 1
        gid, max_alive, _ = sweep(cta_launch * width + ctas["smid"], ctas["start_ns"], ctas["end_ns"])
        np.add.at(sms_of, gid // width, 1)
        np.maximum.at(conc_of, gid // width, max_alive)
    # the columns as lists, zipped (a numpy row's fields read one by one: ~10 us a launch)
    names = ("launch", "kernel", "grid_x", "grid_y", "grid_z", "device", "stream", "start_ns", "end_ns", "num_ctas",
             "records", "dropped", "unmatched", "missing_ctas", "graph", "replay", "torn_chunks")
    cols = [launches[name].tolist() for name in names]
    for (launch, kid, gx, gy, gz, device, stream, start, end, n_ctas, records, dropped, unmatched, missing, graph,
         replay, torn), recorded, sms, conc in zip(zip(*cols), recorded_of.tolist(), sms_of.tolist(), conc_of.tolist()):
        k = kernels[kid]
        conc = max(1, conc) if recorded else 0
        num_ctas = n_ctas or recorded
        waves = math.ceil(num_ctas / (sms * conc)) if sms and conc else None
        rows.append({
            "launch": launch, "kernel": k.name, "grid": [gx, gy, gz],
            "warps": int(k.num_warps), "granularity": k.granularity, "device": device, "stream": stream,
            "start_ns": start, "duration_ns": end - start,
            "ctas": num_ctas, "ctas_recorded": recorded, "sms_used": sms, "max_ctas_per_sm": conc,
            "waves": waves, "records": records, "dropped": dropped, "unmatched": unmatched, "missing_ctas": missing,
            # a replay of a CUDA graph: the graph (1, 2, ...) and the replay (0, 1, ...); graph 0: eager
            "graph": graph, "replay": replay,
            "incomplete": capture_incomplete or bool(dropped or unmatched or missing or torn),
        })
    return rows


def _sm_rows(ctas) -> list[dict]:
    if not len(ctas):
        return []
    smid = ctas["smid"].astype(np.int64)
    gid, _, busy = sweep(smid, ctas["start_ns"], ctas["end_ns"])
    counts = np.bincount(np.searchsorted(gid, smid), minlength=len(gid))
    return [{"sm": int(s), "busy_ns": int(b), "ctas": int(c)} for s, b, c in zip(gid, busy, counts)]


def _warnings(profile: Profile, kernels, launches, ctas) -> list[dict]:
    out: list[dict] = []
    # each launch's kernel name, as an index into the sorted names (kernels of one name count together)
    names = sorted({kernels[i].name for i in distinct(launches["kernel"]).tolist()}) if len(launches) else []
    name_at = {n: j for j, n in enumerate(names)}
    name_of = np.array([name_at.get(k.name, -1) for k in kernels], np.int64)[launches["kernel"].astype(np.int64)] \
        if len(launches) else np.zeros(0, np.int64)
    for field, kind, what in (("dropped", "dropped", "records dropped (buffer full)"),
                              ("unmatched", "unmatched", "records without a partner"),
                              ("missing_ctas", "missing_ctas", "CTAs without a header")):
        if not launches[field].any():  # (a pass per name over every launch: 48 names x 65 K launches, 1.3 s)
            continue
        for j, name in enumerate(names):
            mine = launches[name_of == j]
            values = mine[field].astype(np.int64)
            total = int(values.sum())
            if not total:
                continue
            hit = int((values > 0).sum())
            item = {"kind": kind, "kernel": name, "count": total, "launches": hit,
                    "message": f"{name}: {total:,} {what} in {hit:,} of {len(mine):,} launch(es)"}
            if kind == "dropped":
                item["hint"] = profile.keep_all_hint(np.unique(mine["kernel"]).tolist())
                item["keep_all_records"] = int(mine["unit_records_max"].max())
                item["message"] += "; the scopes after the drop are missing"
            elif kind == "unmatched":
                item["hint"] = "an enter without its exit (or the reverse): follows drops, or a CTA that did not finish"
            out.append(item)

    overruns = (profile.session or {}).get("graph_overruns") or {}
    if overruns:
        total = sum(int(v) for v in overruns.values())
        names = ", ".join(f"{n} ({int(v):,})" for n, v in sorted(overruns.items(), key=lambda kv: -kv[1]))
        out.append({"kind": "graph_overruns", "count": total,
                    "message": f"{total:,} replay(s) of kernels captured into CUDA graphs were not kept (their ring "
                               f"was full when they ran): {names}; the numbers of those kernels cover only the "
                               "replays kept",
                    "hint": "graph_slots= in proton_lite.start() keeps more replays on the GPU"})
    for k in sorted({int(i) for i in launches["kernel"]}):
        lost = kernels[k].meta.get("lost_scopes")
        if lost:
            from proton_lite.passes.kernel_facts import lost_scopes_message
            out.append({"kind": "lost_scopes", "kernel": kernels[k].name, "scopes": list(lost["scopes"]),
                        "message": lost_scopes_message(kernels[k].name, lost)})

    for k in sorted({int(i) for i in launches["kernel"]}):  # scopes that time a wait, not the work
        for kind in ("pipelined", "unpipelined"):  # ... or time it on a changed schedule (pipelined=False)
            for note in kernels[k].meta.get(kind) or ():
                out.append({"kind": kind, "kernel": kernels[k].name, "scope": note.get("scope"),
                            "message": f"{kernels[k].name}: {note.get('message')}"})

    out += copy_notes(profile, kernels, launches)

    tick = (profile.session or {}).get("timer_tick_ns")
    if tick is not None and float(tick) > COARSE_TIMER_NS:
        out.append({"kind": "coarse_timer", "timer_tick_ns": plain(tick),
                    "message": f"%globaltimer ticks every {float(tick):g} ns: nanosecond durations shorter than "
                               "a few ticks are unreliable; the cycle columns are exact"})

    clock = clock_warning(ctas)
    if clock:
        out.append(clock)

    for kind, message in _LAUNCH_COUNT_WARNINGS:  # launches the session counted at stop (END chunk)
        n = int((profile.session or {}).get(kind) or 0)
        if n:
            out.append({"kind": kind, kind: n, "message": f"{n:,} launch(es) {message}"})
    for err in (profile.session or {}).get("capture_errors") or []:
        out.append({"kind": "capture_error", "message": err})

    if (profile.session or {}).get("truncated"):
        out.append({"kind": "truncated",
                    "message": "the capture was cut off before stop() (the program ended or was killed, or the "
                               "file was truncated): launches after the last complete one are missing"})

    cut = (profile.session or {}).get("cut")
    if isinstance(cut, dict):
        window = cut.get("window_us")
        where = f", window {window[0] if window[0] is not None else ''}:{window[1] if window[1] is not None else ''} µs" \
            if window else ""
        out.append({"kind": "cut", "message": f"a part of the capture: {len(cut.get('launches') or []):,} of "
                    f"{cut.get('of_launches', 0):,} launches{where} (proton-lite trace --launch/--window); totals "
                    "cover that part only"})

    for w in (profile.session or {}).get("warnings") or []:
        out.append({"kind": "session", "message": w if isinstance(w, str) else str(plain(w))})
    return out


_LAUNCH_COUNT_WARNINGS = (
    ("lost_launches", "were lost: the GPU failed (a kernel fault) before their records were copied back; "
                      "copy_every=1 in proton_lite.start() copies each launch right after it"),
    ("unsized_launches", "of kernels sized from their arguments could not be sized (arguments unreadable or "
                         "not evaluable: no record slots, or the compiled capacity): what did not fit was counted "
                         "as dropped; capacity= in proton_lite.start() sizes them by hand"),
    ("capped_launches", "would have needed more than 1 GiB of records: the rest were counted as dropped; "
                        "granularity='warpgroup' or 'cta', or fewer scopes in the loop, need less"),
)


# the drawing lives in summary_render; importing it from here keeps one import for both
from proton_lite.viewer.summary_render import TABLES, render_summary  # noqa: E402,F401
