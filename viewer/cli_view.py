"""The ``trace``, ``summary``, ``diff`` and ``open`` commands: captures and traces in, traces,
tables and a served file out."""
from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from proton_lite.viewer.cli_io import (_DECODE_ERRORS, EXIT_NOT_FETCHED, EXIT_OK, PROG, TRACE_FORMATS, CliError,
                                       _check_file, _check_not_empty, _console, _decode_error, _interactive,
                                       _print_json, _raw_error, _warn, input_kind, load_input, load_inputs,
                                       missing_module)

TOO_LARGE_FOR_THE_UI = 1 << 30  # bytes of trace above which `trace` suggests a cut


# ---------------------------------------------------------------------------------------------
# trace
# ---------------------------------------------------------------------------------------------

def _check_writers(formats: list[str]) -> None:
    for fmt in formats:
        try:
            importlib.import_module(f"proton_lite.trace.{fmt}")
        except ImportError as e:
            raise missing_module(e, f"writing {fmt} traces needs proton_lite.trace.{fmt}, which is missing from this "
                                 "install; reinstall proton-lite",
                                 f"writing {fmt} traces needs the Python module {{name}}, which is not installed; "
                                 "pip install {pip}") from e


def _output_base(src: str, out: str | None) -> str:
    if out is None:
        return src
    folder = out if (os.path.isdir(out) or out.endswith(os.sep)) else os.path.dirname(os.path.abspath(out))
    try:  # `-o out/` or `-o out/run`: the folder is made as a user would expect
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise CliError(f"{out}: cannot create the folder {folder} ({e.strerror or e}); choose another -o") from e
    return os.path.join(out, Path(src).name) if folder == out else out


def convert(src, out: str | None, formats: list[str], cut=None, align_on: str | None = None, layout: str = "auto"):
    """Write the traces of capture ``src`` (or of a list of captures, merged: one timeline with
    a group per capture) (of the part ``cut`` keeps); returns (profile, paths)."""
    from proton_lite.pipeline import raw_to_traces
    from proton_lite.profile_merge import AlignError
    from proton_lite.raw_format import RawFormatError

    sources = src if isinstance(src, list) else [src]
    for one in sources:
        if input_kind(one) != "raw":
            raise CliError(f"{one} is already a trace; `{PROG} trace` rebuilds traces from a .plraw capture")
    if align_on and len(sources) < 2:
        raise CliError("--align-on lines several captures up; give two or more")
    if len(sources) > 1 and out is None:
        raise CliError(f"{len(sources)} captures make one merged trace: name it with -o, e.g. -o merged")
    src = sources[0] if len(sources) == 1 else sources
    base = _output_base(sources[0], out)
    _check_writers(formats)
    try:
        crowded: list[str] = []
        notes: list[str] = []
        profile, paths = raw_to_traces(src, base, formats, progress=_interactive(), cut=cut, align_on=align_on,
                                       warnings=crowded, layout=layout, notes=notes)
        for line in crowded:
            _warn(line)
        for line in notes:
            print(f"{PROG}: note: {line}", file=sys.stderr)
    except RawFormatError as e:
        raise _raw_error(e) from e
    except AlignError as e:
        raise CliError(f"--align-on: {e}") from e
    except OSError as e:
        where = e.filename or base
        raise CliError(f"{where}: cannot write ({e.strerror or e}); check the -o folder and free space") from e
    except _DECODE_ERRORS as e:
        raise _decode_error(", ".join(sources), e) from e
    try:
        _check_not_empty(", ".join(sources), profile)
    except CliError:
        for p in paths:  # an empty trace of a broken capture would only mislead
            os.remove(p)
        raise
    return profile, paths


def _capture_warnings(profile) -> None:
    session = profile.session or {}
    if session.get("truncated"):
        _warn("the capture was cut off before stop() (the program ended or was killed, or the file was truncated): "
              "launches after the last complete one are missing")
    for err in session.get("capture_errors") or []:
        _warn(f"the session reported: {err}")
    if not len(profile.launches):
        _warn("the capture holds no launch: no instrumented kernel ran inside the session")
    if profile.total_dropped:
        _warn(f"{profile.total_dropped} records were dropped (buffer full); {profile.keep_all_hint()}; "
              f"see `{PROG} summary` for the kernels")


def cmd_trace(args) -> int:
    formats = args.format
    if not formats:  # the -o extension picks the format, else Perfetto
        suffix = Path(args.output).suffix.lower() if args.output else ""
        formats = [f for f, ext in TRACE_FORMATS.items() if ext == suffix] or ["perfetto"]
    formats = list(dict.fromkeys(formats))
    cut = None
    if args.launch or args.window or args.kernel:
        from proton_lite.profile_cut import cut as cut_profile, launches_of_kernels, parse_launches, parse_window
        try:
            keep = parse_launches(args.launch) if args.launch else None
            window = parse_window(args.window) if args.window else None
        except ValueError as e:
            raise CliError(str(e)) from e

        def cut(profile):
            numbers = keep
            if args.kernel:
                named = launches_of_kernels(profile, args.kernel)
                if not named:
                    kernels = ", ".join(sorted({k.name for k in profile.kernels}))
                    raise CliError(f"--kernel {args.kernel!r}: no launch of a kernel with that in its name; the "
                                   f"capture's kernels: {kernels}")
                numbers = named if numbers is None else numbers & named
            part = cut_profile(profile, numbers, window)
            if not len(part.launches):
                numbers = ", ".join(str(int(n)) for n in profile.launches["launch"][:12])
                span = int(profile.launches["end_ns"].max()) / 1000 if len(profile.launches) else 0
                raise CliError(f"{', '.join(args.file)}: nothing left after the cut: the capture has launches "
                               f"{numbers}"
                               f"{' ...' if len(profile.launches) > 12 else ''} over 0 to {span:,.1f} µs")
            return part
    profile, paths = convert(args.file if len(args.file) > 1 else args.file[0], args.output, formats, cut,
                             align_on=args.align_on, layout=args.layout)
    for p in paths:
        print(p)
    alignment = (profile.session or {}).get("alignment")
    if alignment:  # several captures: how their times were put on one axis
        print(f"captures on one time axis by: {alignment}", file=sys.stderr)
    info = (profile.session or {}).get("cut")
    if info:
        print(f"kept {len(info['launches']):,} of {info['of_launches']:,} launches and {len(profile.ctas):,} of "
              f"{info['of_ctas']:,} CTAs (slices that cross the window's edge are kept whole)", file=sys.stderr)
    for p in paths:
        if os.path.getsize(p) > TOO_LARGE_FOR_THE_UI:
            _warn(f"{p} is {os.path.getsize(p) / 2**30:.1f} GiB: Perfetto's UI holds a trace in the browser's "
                  "memory and works up to a few GB; cut it with --launch N or --window START:END (µs)")
    _capture_warnings(profile)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# summary / diff
# ---------------------------------------------------------------------------------------------

def cmd_summary(args) -> int:
    from proton_lite.viewer.summary import render_summary, summarize

    files = args.file if isinstance(args.file, list) else [args.file]
    filters = dict(kernel=args.kernel, scope=args.scope, sort=args.sort, top=args.top)
    if len(files) > 1:  # one per rank (or run): compared kernel by kernel
        from proton_lite.viewer.summary_set import render_summary_set, summarize_set
        try:
            result = summarize_set(load_inputs(files), files, **filters)
        except ValueError as e:
            raise CliError(str(e)) from e
        if args.json:
            _print_json(result)
        else:
            render_summary_set(result, _console(), tables=args.tables, each=args.each, every_kernel=args.all)
        return EXIT_OK
    profile = load_input(files[0])
    try:
        summary = summarize(profile, **filters)
    except ValueError as e:
        raise CliError(str(e)) from e
    if args.json:
        _print_json(summary)
    else:
        render_summary(summary, _console(), tables=args.tables, source=files[0], every_kernel=args.all)
    return EXIT_OK


def _diff_side(path: str):
    """One side of a diff: a capture or trace, or a folder of captures (one per rank, or per
    run) taken together (``profile_merge``)."""
    if not os.path.isdir(path):
        return load_input(path)
    files = sorted(str(f) for f in Path(path).glob("*.plraw"))
    if not files:
        raise CliError(f"{path}: a folder with no .plraw capture in it; give a capture, or a folder of captures "
                       "(e.g. one per rank)")
    from proton_lite.profile_merge import merge_profiles
    merged = merge_profiles(load_inputs(files))
    merged.session = dict(merged.session, name=f"{path} ({len(files)} captures)")
    return merged


def cmd_diff(args) -> int:
    from proton_lite.viewer.diff import diff_profiles, render_diff

    a, b = _diff_side(args.a), _diff_side(args.b)
    result = diff_profiles(a, b, kernel=args.kernel, threshold_factor=args.threshold_factor)
    if args.json:
        _print_json(result)
    else:
        render_diff(result, _console(), every_kernel=args.all)
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# open
# ---------------------------------------------------------------------------------------------

def cmd_open(args) -> int:
    from proton_lite.viewer.server import OfflineUIError, serve_file

    path = args.file
    _check_file(path)
    from proton_lite.raw_format import is_raw_file
    if is_raw_file(path) or Path(path).suffix.lower() == ".plraw":
        profile, paths = convert(path, None, ["perfetto"])
        print(f"wrote {paths[0]}", flush=True)
        _capture_warnings(profile)
        path = paths[0]
    else:
        problem = _trace_problem(path)
        if problem:
            _warn(f"{path} does not look like a whole trace ({problem}); Perfetto may show nothing or an error")
    try:
        fetched = serve_file(path, port=args.port, timeout=args.timeout, open_browser=not args.no_browser,
                             offline=args.offline)
    except OfflineUIError as e:
        raise CliError(f"{e}; or drop --offline to use ui.perfetto.dev") from e
    except BrokenPipeError:  # our stdout was closed (`| head -2`): not a port problem; main() handles it
        raise
    except OSError as e:
        msg = str(e.strerror or e)
        raise CliError(msg if "offline" in msg else f"port {args.port}: {msg}; pass another --port (offline mode "
                       "works with any port)") from e
    return EXIT_OK if fetched else EXIT_NOT_FETCHED


def _trace_problem(path: str, scan: int = 1 << 20) -> str | None:
    """What is wrong with a .pftrace (its packets, up to ``scan`` bytes and the end of the file
    where they reach it) or a .json (its first character), or None; other files: None."""
    suffix = Path(path).suffix.lower()
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(scan)
    if suffix == ".json":
        first = head.lstrip()[:1]
        return None if first in (b"{", b"[") else "not JSON: it does not start with { or ["
    if suffix not in (".pftrace", ".perfetto-trace", ".pb"):
        return None
    pos = 0
    while pos < len(head):
        if head[pos] != 0x0A:
            return f"not a Perfetto protobuf trace: byte 0x{head[pos]:02x} at offset {pos:,} starts no packet"
        length, shift, k = 0, 0, pos + 1
        while k < len(head) and head[k] & 0x80:
            length |= (head[k] & 0x7F) << shift
            shift, k = shift + 7, k + 1
        if k >= len(head):
            return None if size > len(head) else "the file ends inside a packet header (truncated)"
        length |= head[k] << shift
        pos = k + 1 + length
        if pos > size:
            return f"a packet runs {pos - size:,} bytes past the end of the file (truncated)"
    return None




def cmd_merge(args) -> int:
    """A capture merged into torch.profiler's trace (proton_lite/profiler_merge.py)."""
    from proton_lite.profiler_merge import MergeError, merge_profiler_trace
    out = args.output or str(Path(args.profiler_trace).with_name(Path(args.profiler_trace).stem + ".merged.json"))
    try:
        report = merge_profiler_trace(args.profiler_trace, args.capture, out)
    except MergeError as e:
        raise CliError(str(e)) from None
    except _DECODE_ERRORS as e:
        raise CliError(f"{args.capture}: {e}") from None
    s, e = report["start_after_ns"], report["end_before_ns"]
    total = report["matched"] + len(report["unmatched_launches"])
    print(f"{report['matched']:,} of {total:,} launches placed on the profiler's GPU kernels; our first CTA "
          f"starts {s['median']:,.0f} ns (min {s['min']:,.0f}, max {s['max']:,.0f}) after the CUPTI start and the last "
          f"ends {e['median']:,.0f} ns (min {e['min']:,.0f}, max {e['max']:,.0f}) before its end")
    if not report["all_inside"]:
        print("no single clock offset puts every launch inside its CUPTI slice: the offset is the median of "
              "the launches' midpoints, and launches with a negative gap above sit partly outside theirs")
    if report["unmatched_launches"]:
        shown = ", ".join(f"#{n}" for n in report["unmatched_launches"][:10])
        print(f"not in the profiler's trace (not placed): launches {shown}"
              f"{' and more' if len(report['unmatched_launches']) > 10 else ''}")
    print(report["output"])
    return EXIT_OK
