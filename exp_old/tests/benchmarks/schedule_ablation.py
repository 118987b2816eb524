"""Which part of our code changes where ptxas issues a kernel's loads (issue 24; CPU only).

Why: the layer norm of ``bench.py`` (16 warps, 2 scopes) runs 13% over plain on the H200 with
the same registers and resident CTAs as plain, and the same whether its records are staged in
shared memory or stored to global memory; its SASS shows why: plain issues the weight's loads
before the ``rsqrt``'s ``MUFU`` chain, the instrumented build 28 instructions after it
(docs/design.md, "Where the layer norm's time goes").  This takes the instrumented PTX apart
(each record, all records, the epilogue, combinations), assembles each form with the
triton wheel's ``ptxas``, and prints per form its registers, spills, instructions and each
global load's position and every ``MUFU``'s, beside the plain kernel's.

    python tests/benchmarks/schedule_ablation.py [--kernel lnorm|smax] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

RECORD, EPILOGUE, DONE = "// proton_lite: record", "// proton_lite: epilogue", "$pl_done_"
KERNELS = {  # bench_kernels function, signature, constexprs, warps
    "lnorm": ("lnorm", {"x_ptr": "*fp16", "y_ptr": "*fp16", "w_ptr": "*fp16", "b_ptr": "*fp16", "stride": "i32",
                        "n": "i32", "eps": "fp32"}, {"BLOCK": 8192, "PROF": 1}, 16),
    "smax": ("smax", {"x_ptr": "*fp32", "o_ptr": "*fp32", "stride": "i32", "n": "i32"},
             {"BLOCK": 4096, "PROF": 1}, 8),
}


def record_spans(lines: list[str]) -> list[tuple[int, int]]:
    """(first, last) line of the body of each record's inline asm (its comment line kept)."""
    spans = []
    for i, line in enumerate(lines):
        if line.strip() == RECORD:
            end = next(j for j in range(i, len(lines)) if lines[j].strip() == "// end inline asm")
            spans.append((i + 1, end - 1))
    return spans


def without(ptx: str, records=(), epilogue=False) -> str:
    """``ptx`` with the bodies of the given records and, if asked, the epilogue removed: the
    registers they fill are then never read and ptxas drops what computes them too."""
    lines = ptx.split("\n")
    spans = record_spans(lines)
    drop = {n for r in records for n in range(spans[r][0], spans[r][1] + 1)}
    if epilogue:
        start = next(i for i, line in enumerate(lines) if line.strip() == EPILOGUE)
        end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(DONE))
        drop |= set(range(start + 1, end))
    return "\n".join(line for i, line in enumerate(lines) if i not in drop)


def ptxas_paths() -> list[str]:
    """The wheel's assemblers: Triton 3.9 emits PTX 9.x, which only its ``ptxas-blackwell`` reads."""
    import triton
    base = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    return [p for p in (os.path.join(base, "ptxas"), os.path.join(base, "ptxas-blackwell")) if os.path.exists(p)]


def assemble(ptx: str, arch: str, tmp: str, name: str) -> tuple[str, int, int]:
    """(SASS listing, registers, spill bytes) of one form."""
    from proton_lite.sass_listing import listing
    src, out = os.path.join(tmp, f"{name}.ptx"), os.path.join(tmp, f"{name}.cubin")
    Path(src).write_text(ptx)
    errors = []
    for ptxas in ptxas_paths():
        r = subprocess.run([ptxas, f"-arch=sm_{arch}", "-O3", "-v", src, "-o", out], capture_output=True, text=True)
        if r.returncode == 0:
            regs = int(re.search(r"Used (\d+) registers", r.stderr).group(1))
            spills = sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", r.stderr))
            return listing(Path(out).read_bytes()), regs, spills
        errors.append(r.stderr[-1000:])
    raise SystemExit(f"no ptxas of the wheel assembled {src}:\n" + "\n".join(errors))


def positions(text: str) -> tuple[int, list[int], list[int]]:
    """(instructions, indices of the global loads, indices of the MUFU instructions)."""
    from proton_lite.sass_listing import instructions
    ops = [op.split()[1 if op.startswith("@") else 0] for op in instructions(text)]
    return (len(ops), [n for n, op in enumerate(ops) if op.startswith("LDG")],
            [n for n, op in enumerate(ops) if op.startswith("MUFU")])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernel", choices=list(KERNELS), default="lnorm")
    ap.add_argument("--arch", default="90a")
    ap.add_argument("--keep", help="write each form's PTX and cubin here")
    args = ap.parse_args()
    import bench_kernels
    import proton_lite
    fn_name, sig, constexprs, warps = KERNELS[args.kernel]
    fn = getattr(bench_kernels, fn_name)
    built = {inst: proton_lite.compile(fn, sig, constexprs, instrument=inst, num_warps=warps,
                                       divisible_by_16=tuple(n for n, t in sig.items() if t != "fp32"))
             for inst in (False, True)}
    ptx = built[True].asm["ptx"]
    n_records = len(record_spans(ptx.split("\n")))
    forms = [("plain", built[False].asm["ptx"]), ("instrumented", ptx)]
    forms += [(f"without record {r}", without(ptx, [r])) for r in range(n_records)]
    forms += [("without the epilogue", without(ptx, epilogue=True)),
              ("without the records", without(ptx, range(n_records))),
              ("without both", without(ptx, range(n_records), epilogue=True))]
    tmp = args.keep or tempfile.mkdtemp()
    os.makedirs(tmp, exist_ok=True)
    print(f"{args.kernel}: {n_records} records; positions are instruction indices in the SASS")
    print(f"{'form':22s} {'regs':>4s} {'spill':>5s} {'instr':>5s}  global loads / MUFU")
    for n, (name, text) in enumerate(forms):
        sass, regs, spills = assemble(text, args.arch, tmp, f"form{n}")
        count, loads, mufu = positions(sass)
        print(f"{name:22s} {regs:4d} {spills:5d} {count:5d}  {loads} / {mufu}")


if __name__ == "__main__":
    main()
