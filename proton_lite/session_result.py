"""What a finished session produced (``SessionResult``) and the lines it prints at stop:
the counts, the launches seen but not recorded (counters), warnings, notes and errors."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SessionResult:
    """What a finished session produced: ``proton_lite.stop()`` returns it, and after a
    ``with proton_lite.start(...) as s:`` block it is ``s.result``.

    raw_path: the raw capture (``NAME.plraw``); trace_paths: the traces written at stop.
    launches: kernel launches recorded.  records / dropped / unmatched: records kept, records
        that did not fit their buffer, scope enters or exits whose partner was lost; None
        when the session did not decode (``decode=False``: ``proton-lite summary`` counts them).
    lost: launches a kernel fault kept from being copied back (named in ``errors``).
    warnings: one line each, as printed at stop after the counts (drops, kernels that ran
        uninstrumented or lost their scopes, launches captured into graphs, ...).
    counters: launches the session saw but did not record, by cause (``skipped_autotune``,
        ``unattributed``, ``unsized_launches``, ``capped_launches``, ``exact_reruns``,
        ``uninstrumented_launches``, ``graph_captured_launches``, ``lost_launches``).
    errors: what went wrong (a kernel fault, a failed copy); summary_line: the text printed.
    keep_all_hint: the ``start()`` option that would have kept every dropped record.
    compiles, compile_seconds: kernels compiled with instrumentation during the session (not
        found in Triton's cache) and the seconds those compiles took, summed: the first launch
        of each waited for its compile (said at stop from ``COMPILE_NOTE_S``).
    """

    raw_path: str
    trace_paths: list[str] = field(default_factory=list)
    launches: int = 0
    records: int | None = 0
    dropped: int | None = 0
    unmatched: int | None = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    summary_line: str = ""
    keep_all_hint: str | None = None
    compiles: int = 0
    compile_seconds: float = 0.0



WAIT_NOTE_NS = 50_000_000  # launches that waited this long in all for the disk are told at stop
COMPILE_NOTE_S = 0.5  # compiles that took this long in all are told at stop


def _counters(collector) -> dict[str, int]:
    """Launches the session saw but did not record (or recorded twice), by cause."""
    resizer = getattr(collector, "resizer", None)
    return {"skipped_autotune": int(getattr(collector, "skipped_autotune", 0)),
            "unattributed": int(getattr(collector, "unattributed", 0)),
            "unsized_launches": int(getattr(collector, "unsized", 0)),
            "capped_launches": int(getattr(collector, "capped", 0)),
            "exact_reruns": int(resizer.reruns) if resizer else 0,
            "uninstrumented_launches": int(sum((getattr(collector, "uninstrumented", None) or {}).values())),
            "graph_captured_launches": int(sum((getattr(collector, "captured", None) or {}).values())),
            "lost_launches": int(getattr(collector, "lost", 0))}


def _warnings(result: SessionResult, collector, inductor=None, inductor_new: int = 0,
              trace_warnings=()) -> list[str]:
    from proton_lite.coverage import not_covered
    out = []
    if result.dropped:
        hint = result.keep_all_hint or "raise capacity= or loop_capacity= in proton_lite.start() to keep them"
        out.append(f"{result.dropped:,} records did not fit the profile buffer and were dropped; {hint}")
    out += list(getattr(collector, "lost_scopes", ()))
    out += not_covered(collector, inductor, inductor_new)
    return out + list(trace_warnings)


def _summary_line(result: SessionResult, collector, inductor=None, inductor_new: int = 0,
                  trace_warnings=(), trace_notes=()) -> str:
    """The text printed at stop; fills ``result.counters`` and ``result.warnings`` on the way
    (``trace_warnings``, ``trace_notes``: the trace writers', ``pipeline.raw_to_traces``)."""
    from proton_lite.runtime.collector import LAUNCH_SIZED_MAX_BYTES

    result.counters = c = _counters(collector)
    result.warnings = _warnings(result, collector, inductor, inductor_new, trace_warnings)
    parts = [f"proton_lite: {result.launches:,} launch{'es' if result.launches != 1 else ''}"]
    if result.records is None:
        parts.append("not decoded (decode=False; `proton-lite summary` on the capture counts records and drops)")
    else:
        parts += [f"{result.records:,} records", f"{result.dropped:,} dropped"]
        if result.unmatched:
            parts.append(f"{result.unmatched:,} unmatched")
    if c["skipped_autotune"]:
        parts.append(f"{c['skipped_autotune']:,} autotuner trial launches skipped")
    if c["exact_reruns"]:
        parts.append(f"{c['exact_reruns']:,} launch{'es' if c['exact_reruns'] != 1 else ''} run again with a larger "
                     "buffer (sizing='exact')")
    if c["unattributed"]:
        parts.append(f"{c['unattributed']:,} launches not attributable (not saved)")
    if c["unsized_launches"]:
        parts.append(f"{c['unsized_launches']:,} launch{'es' if c['unsized_launches'] != 1 else ''} not sized from "
                     "their arguments (unreadable or not evaluable: no or the compiled capacity; what did not fit is "
                     "counted as dropped)")
    if c["capped_launches"]:
        parts.append(f"{c['capped_launches']:,} launch{'es' if c['capped_launches'] != 1 else ''} with more records "
                     f"than {LAUNCH_SIZED_MAX_BYTES >> 20} MiB of buffer holds (the rest counted as dropped; "
                     "granularity='warpgroup' or 'cta' needs less)")
    line = ", ".join(parts) + " -> " + ", ".join([result.raw_path] + result.trace_paths)
    for warning in result.warnings:
        line += f"\nproton_lite: warning: {warning}"
    for note in trace_notes:
        line += f"\nproton_lite: note: {note}"
    drain = getattr(collector, "_drain", None)
    if drain is not None and drain.wait_ns >= WAIT_NOTE_NS:
        line += (f"\nproton_lite: note: launches waited {drain.wait_ns / 1e9:.2f} s in all for the raw file to be "
                 f"written ({drain.peak_queued_bytes / 2**20:,.0f} MiB of records waited on the GPU); the program's "
                 "host timing was slowed by that much. A larger device_buffer_mb= keeps more on the GPU, a faster "
                 "disk for the capture, fewer records (granularity='cta', fewer kernels=) need less")
    if result.compile_seconds >= COMPILE_NOTE_S:
        line += (f"\nproton_lite: note: {result.compiles:,} kernel{'s were' if result.compiles != 1 else ' was'} "
                 f"compiled with instrumentation in the session ({result.compile_seconds:.1f} s of compiling; the "
                 "first launch of each waited for it), so the host time of the steps that first launched them "
                 "includes it: time the steps after the first. Triton's cache keeps these binaries, so the next "
                 "session compiles little")
    for err in result.errors:
        line += f"\nproton_lite: error: {err}"
    return line
