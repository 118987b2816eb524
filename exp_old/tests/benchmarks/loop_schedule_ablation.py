"""Which part of our code changes how ptxas schedules a loop kernel's body (issue 24; CPU only).

Why: liger's layer norm backward (132 CTAs of 4 warps, each looping over rows; 72 µs) runs
3.6-4.1% over plain in a session, where a CTA's entry and exit cost a few hundred ns of it.
In its SASS (H200 cubins, Triton 3.6) plain meets the loop's first ``BAR.SYNC`` 54
instructions after the row's loads, after the first reduction's math; the session's build
meets it right after the loads (design.md, "liger's layer norm backward").  This builds a
kernel of our own of that shape, takes the instrumented PTX apart (the entry's header, the
exit's unit header, their stores, the branches around them) and assembles each form with the
triton wheel's ``ptxas``: per form its registers, instructions, the loop's last global load,
its first barrier and the gap between them.  (Triton 3.6's ptxas changes the loop when a store
precedes it and another follows; 3.9's does not.  On the H200 the form that keeps plain's loop,
the header written once at exit, did not make liger's kernel faster: design.md.)

    python tests/benchmarks/loop_schedule_ablation.py
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@triton.jit
def layer_norm_bwd(x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr, dy_ptr, stride, n_rows, n_cols,
                   ROWS: tl.constexpr, BLOCK: tl.constexpr):
    """A layer norm's backward as liger-kernel writes it: each program loops over ROWS rows,
    two reductions a row, and accumulates its share of the weight and bias gradients."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    db = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(pid * ROWS, tl.minimum((pid + 1) * ROWS, n_rows)):
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        dy = tl.load(dy_ptr + row * stride + cols, mask=mask, other=0.0)
        mean, rstd = tl.load(mean_ptr + row), tl.load(rstd_ptr + row)
        x_hat = (x - mean) * rstd
        wdy = w * dy
        c1 = tl.sum(x_hat * wdy, axis=0) / n_cols
        c2 = tl.sum(wdy, axis=0) / n_cols
        tl.store(dx_ptr + row * stride + cols, (wdy - (x_hat * c1 + c2)) * rstd, mask=mask)
        dw += dy * x_hat
        db += dy
    tl.store(dw_ptr + pid * n_cols + cols, dw, mask=mask)
    tl.store(db_ptr + pid * n_cols + cols, db, mask=mask)


SIG = {name: "*fp32" for name in ("x_ptr", "w_ptr", "mean_ptr", "rstd_ptr", "dx_ptr", "dw_ptr", "db_ptr", "dy_ptr")}
SIG.update(stride="i32", n_rows="i32", n_cols="i32")
PROLOGUE, EPILOGUE = "// proton_lite: prologue", "// proton_lite: epilogue"


def _span(lines: list[str], mark: str, label: str) -> tuple[int, int]:
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(mark))
    return start, next(i for i in range(start, len(lines)) if lines[i].strip().startswith(label))


def forms(plain: str, ptx: str) -> dict[str, list[str]]:
    lines = ptx.split("\n")
    ps, pe = _span(lines, PROLOGUE, "$pl_prologue_done")
    es, ee = _span(lines, EPILOGUE, "$pl_done_")
    prologue, epilogue = set(range(ps, pe + 1)), set(range(es, ee + 1))

    def drop(cut) -> list[str]:
        return [line for i, line in enumerate(lines) if not cut(i, line.strip())]

    def predicated(at: set) -> list[str]:  # the stores predicated on the branch's own condition, no branch
        out = []
        for i, line in enumerate(lines):
            t = line.strip()
            if i in at and ((t.startswith("@!") and " bra " in t) or t.startswith("$pl_")):
                continue
            if i in at and t.startswith("st.global"):
                line = "\t@" + ("%pl_p1 " if i in prologue else "%pl_p0 ") + t
            out.append(line)
        return out
    return {
        "plain": plain.split("\n"),
        "shipped (header at entry)": lines,
        "without the entry's code": drop(lambda i, t: i in prologue),
        "without the exit's code": drop(lambda i, t: i in epilogue),
        "without either": drop(lambda i, t: i in prologue or i in epilogue),
        "entry without its stores": drop(lambda i, t: i in prologue and t.startswith("st.global")),
        "exit without its stores": drop(lambda i, t: i in epilogue and t.startswith("st.global")),
        "one store at entry and exit": drop(lambda i, t: (i in prologue or i in epilogue) and t.startswith("st.global")
                                            and not t.startswith("st.global.v2")),
        "both predicated, no branch": predicated(prologue | epilogue),
    }


def main() -> None:
    import proton_lite
    from proton_lite.sass_listing import instructions
    from schedule_ablation import assemble
    built = {inst: proton_lite.compile(layer_norm_bwd, SIG, {"ROWS": 63, "BLOCK": 1024}, instrument=inst,
                                       num_warps=4, divisible_by_16=("stride", ))
             for inst in (False, True)}
    tmp = tempfile.mkdtemp()
    print(f"Triton {triton.__version__}; positions are instruction indices in the SASS")
    print(f"{'form':30s} {'regs':>4s} {'instr':>5s} {'last load':>9s} {'first barrier':>13s} {'gap':>4s}")
    for n, (name, lines) in enumerate(forms(built[False].asm["ptx"], built[True].asm["ptx"]).items()):
        sass, regs, _ = assemble("\n".join(lines), "90a", tmp, f"form{n}")
        ops = [op.split()[1 if op.startswith("@") else 0] for op in instructions(sass)]
        load = max(i for i, op in enumerate(ops) if op.startswith("LDG"))
        bar = min(i for i, op in enumerate(ops) if op.startswith("BAR"))
        print(f"{name:30s} {regs:4d} {len(ops):5d} {load:9d} {bar:13d} {bar - load:4d}")


if __name__ == "__main__":
    main()
