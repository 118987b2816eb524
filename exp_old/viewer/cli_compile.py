"""The ``compile`` command: a kernel file compiled with instrumentation for an architecture, no
GPU needed, and its report (scopes, record sites, buffer bytes, records per warp)."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

from proton_lite import compat
from proton_lite.layout import LOOP_TIMER_SHIFT
from proton_lite.viewer.cli_compile_args import (_divisible, check_constexprs_complete, parse_constexprs,
                                                parse_signature)
from proton_lite.viewer.cli_io import EXIT_OK, CliError, _check_file, _console, _one_line, _print_json

EMIT_KINDS = ("ptx", "ttgir", "ttir", "llir", "cubin", "sass")  # sass: also the plain kernel's (sass_listing.py)


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
    jit_function = compat.jit_function_class()
    return sorted(n for n, v in vars(module).items() if isinstance(_unwrap(v), jit_function))


def _unwrap(obj):
    jit_function = compat.jit_function_class()
    seen = 0
    while not isinstance(obj, jit_function) and hasattr(obj, "fn") and seen < 8:  # autotune / heuristics wrappers
        obj, seen = obj.fn, seen + 1
    return obj


def find_kernel(module, file: str, name: str):
    available = _jit_functions(module)
    obj = getattr(module, name, None)
    if obj is None:
        raise CliError(f"{file}: no kernel named {name!r}; @triton.jit functions there: "
                       f"{', '.join(available) or 'none'}")
    kernel = _unwrap(obj)
    if not isinstance(kernel, compat.jit_function_class()):
        raise CliError(f"{file}: {name!r} is not a @triton.jit function; @triton.jit functions there: "
                       f"{', '.join(available) or 'none'}")
    return kernel


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
        # slots after the capacity in each unit block, for records past it (global unit blocks)
        "sink_slots": BufferLayout.from_json(layout).sink_slots if layout else 0,
        # records staged in shared memory before a copy to the unit block (0: copied at exit)
        "flush_slots": layout.get("flush_slots", 0),
        "scopes": [{"id": i, "name": n,
                    "enter_sites": per_scope[i][0] if per_scope else None,
                    "exit_sites": per_scope[i][1] if per_scope else None} for i, n in enumerate(ck.scopes)],
        "record_sites": sites,
        "loop_record_sites": loop,
        "buffer_bytes_per_cta": ck.metadata.get("profile_scratch_size"),
        # one 32-byte lifetime block per CTA (no scope, no loop, one unit per CTA: format.md 1.2a)
        "lifetime_block": bool(layout.get("compact")),
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
        "pipelined": pl.get("pipelined") or [],
        "unpipelined": pl.get("unpipelined") or [],
        # warp-specialized: which warps run which partition (passes/partitions.py)
        "partitions": pl.get("partitions"),
        # registers of the instrumented and (where it was built) the plain kernel, the cap that
        # kept the plain occupancy (passes/register_cap.py), resident CTAs per SM by registers
        "registers": _registers(pl.get("registers"), num_warps),
        # where thread 0 writes the CTA header (passes/ptx_lifetimes.py; absent before pass 15)
        "cta_header": pl.get("cta_header", "entry"),
        # a kernel with loops: what thread 0 keeps of the start until exit (pass 22)
        "loop_start": pl.get("loop_start"),
    }


def _registers(decided: dict | None, num_warps: int) -> dict | None:
    if not isinstance(decided, dict) or decided.get("registers") is None:
        return None
    from proton_lite.passes.register_cap import ctas_per_sm
    threads = 32 * max(1, num_warps)
    out = dict(decided)
    out["ctas_per_sm"] = ctas_per_sm(int(decided["registers"]), threads)
    if decided.get("plain") is not None:
        out["plain_ctas_per_sm"] = ctas_per_sm(int(decided["plain"]), threads)
    return out


def render_compile_report(r: dict, console) -> None:
    from rich.table import Table
    from rich.text import Text

    from proton_lite.layout import COPY_SCOPE, CTA_HEADER_BYTES, RECORD_BYTES, UNIT_HEADER_BYTES
    from proton_lite.viewer.render import compact_table

    unit = {"warp": "warp", "warpgroup": "warp group", "cta": "CTA"}.get(r["granularity"], "unit")
    console.print(Text(f"{r['kernel']}", style="bold").append(
        f"  sm_{r['arch']}, {r['num_warps']} warps, one record stream per {unit} "
        f"({r['units_per_cta']} per CTA)", style=""))
    for note in (r.get("pipelined") or []) + (r.get("unpipelined") or []):
        console.print(Text("note: " + note["message"], style="yellow"))
    if r.get("lost_scopes"):
        from proton_lite.passes.kernel_facts import lost_scopes_message
        console.print(Text("warning: " + lost_scopes_message(r["kernel"], r["lost_scopes"]), style="yellow"))
    for p in r.get("partitions") or ():  # a warp-specialized kernel: which warps run what
        first, n = p.get("first_warp"), p.get("warps") or 0
        warps = "warps unknown" if first is None else f"warp {first}" if n == 1 else f"warps {first}-{first + n - 1}"
        scopes = f", scopes: {', '.join(p['scopes'])}" if p.get("scopes") else ""
        console.print(Text(f"{p['name']}: {warps}" + (f" ({p['role']})" if p.get("role") else "") + scopes))
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
    elif r.get("lifetime_block"):
        kv.add_row("buffer per CTA", f"{r['buffer_bytes_per_cta']} bytes: one lifetime block (SM, start and end), "
                                     "written by thread 0 at its exit")
    else:
        kv.add_row("buffer per CTA", f"{r['buffer_bytes_per_cta']} bytes (global; capacity {r['capacity']} "
                                     f"records per {unit}{sinks}, {r['buffer_mode']})")
    kv.add_row("shared staging", f"{r['shared_staging_bytes']} bytes per CTA"
               + ("" if r["staging"] == "shared" else " (records go straight to global memory)")
               + (f", copied to the buffer every {r['flush_slots']} records per {unit} and at exit (each copy "
                  f"shows as the scope '{COPY_SCOPE}')" if r.get("flush_slots") else ""))
    regs = r.get("registers")
    if regs:
        text = f"{regs['registers']} per thread: {regs['ctas_per_sm']} resident CTAs per SM by registers"
        if regs.get("cap") is not None:
            text += f" (capped at {regs['cap']} to keep the plain kernel's {regs['plain_ctas_per_sm']}: " \
                    f"plain uses {regs['plain']})"
        elif regs.get("spilled_at") is not None:
            text += f" (the plain kernel, {regs['plain']} registers, has {regs['plain_ctas_per_sm']}: a cap at " \
                    f"{regs['spilled_at']} would spill)"
        elif regs.get("plain") is not None:
            text += f" (as the plain kernel: {regs['plain']} registers)"
        kv.add_row("registers", text)
    sass = r.get("sass")
    if sass:
        text = f"{sass['instructions']} instructions (plain {sass['plain_instructions']}), {sass['loads']} global loads"
        if sass["comparable"]:
            text += (f": moved by {sass['first_moved']:+d} (first), {sass['median_moved']:+g} (median), "
                     f"{sass['max_moved']:+d} (most) instructions against the plain kernel's")
        else:
            text += f" (the plain kernel has {sass['plain_loads']}: not compared)"
        text += (f"; {sass['behind']} issued only after another load's data came back (plain "
                 f"{sass['plain_behind']}" + ("; each one more may be a further trip to memory, unless its data is cached)"
                                              if sass["behind"] > sass["plain_behind"] else ")"))
        kv.add_row("SASS", text)
    if r.get("cta_header") == "exit" and r.get("loop_start") in LOOP_TIMER_SHIFT:
        shift = LOOP_TIMER_SHIFT[r["loop_start"]]
        kept = (f"the timer's bits {shift}-{shift + 31}" if shift else "the timer's low half") + \
            f", exact while a CTA lives < {2 ** (32 + shift) / 1e9:.3g} s"
        kv.add_row("CTA header", f"at exit: thread 0 reads the start first and keeps it across the loops ({kept}; "
                                 "PROTON_LITE_LOOP_START=entry writes it at entry)")
    elif r.get("cta_header") == "exit":
        kv.add_row("CTA header", "at exit: the kernel starts with two timer reads "
                                 "(the start pair's low halves, kept in registers)")
    if regs and regs.get("exit"):
        kv.add_row("exit", _exit_text(regs))
    console.print(kv)


def _exit_text(regs: dict) -> str:
    """Which form of a kernel without scopes writes its lifetime (passes/exit_choice.py), and why."""
    from proton_lite.passes.exit_choice import LATE
    facts = regs.get("exit_schedule") or {}
    form = "a call of a function of its own" if regs["exit"] == "call" else "inline"
    if "behind" not in facts:
        return f"{form}" + (f" ({facts['why']})" if facts.get("why") else "")
    inline, call = facts["behind"]
    return (f"{form}: built both ways; global loads behind another load's data {inline} inline, {call} with "
            f"the call; the inline build's latest load {facts['late']:+d} instructions against the call's "
            f"(the call is kept where the inline build holds loads back: more behind, or {LATE}+ later)")


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
    CompilationError = compat.compilation_error_class()
    from proton_lite.passes.kernel_facts import ProtonLiteWarning
    wants_sass = any(kind == "sass" for kind, _ in args.emit or [])
    try:
        with warnings.catch_warnings():  # the report shows them, once, in its own words
            warnings.simplefilter("ignore", ProtonLiteWarning)
            builds = [proton_lite.compile(kernel, signature, constexprs, arch=args.arch, instrument=instrument,
                                          num_warps=args.num_warps, num_stages=args.num_stages,
                                          granularity=args.granularity, capacity=args.capacity,
                                          loop_capacity=args.loop_capacity, buffer_mode=args.buffer_mode,
                                          divisible_by_16=_divisible(args.divisible_by_16, kernel))
                      for instrument in ((True, False) if wants_sass else (True, ))]
            ck = builds[0]
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
    texts = {}
    if wants_sass:  # the instrumented and the plain kernel's SASS, and how far the loads moved
        from proton_lite import sass_listing
        try:
            texts = {f"{name}.sass": sass_listing.listing(ck.asm["cubin"]),
                     f"{name}.plain.sass": sass_listing.listing(builds[1].asm["cubin"])}
        except (OSError, subprocess.CalledProcessError) as e:
            raise CliError(f"--emit sass: cuobjdump from the triton wheel failed ({_one_line(e)[:200]})") from e
        report["sass"] = sass_listing.load_shift(*(sass_listing.instructions(texts[f"{name}{s}.sass"])
                                                   for s in (".plain", "")))
        report["sass"].update(behind=len(sass_listing.loads_behind_loads(texts[f"{name}.sass"])),
                              plain_behind=len(sass_listing.loads_behind_loads(texts[f"{name}.plain.sass"])))
    written = []
    for kind, folder in args.emit or []:
        data = texts if kind == "sass" else ck.asm.get(kind)
        if data is None:
            raise CliError(f"--emit {kind}: Triton produced no {kind} for {name}; available: "
                           f"{', '.join(k for k in EMIT_KINDS if k in ck.asm)}")
        out = Path(folder)
        files = data if kind == "sass" else {f"{name}.{kind}": data}
        try:
            out.mkdir(parents=True, exist_ok=True)
            for file_name, content in files.items():
                target = out / file_name
                _write_atomic(target, content if isinstance(content, bytes) else str(content).encode())
                written.append(str(target))
        except OSError as e:
            raise CliError(f"--emit {kind} {folder}: cannot write ({e.strerror or e})") from e
    report["emitted"] = written
    if args.json:
        _print_json(report)
    else:
        render_compile_report(report, _console())
        for p in written:
            print(f"wrote {p}")  # whole, never wrapped: it is copied from the terminal
    return EXIT_OK


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
