"""The fixed cost of being profiled (issue 24): scope-less kernels plain vs in a session vs
under Proton, by CUPTI kernel durations in interleaved rounds, one process (GPU).

Kernels: tests/fixed_cost_kernels.py, shaped like the production kernels the issue names
(row-wise norms and gated activations with 8-16 warps, one row per program, the gated
SiLU forward with rows of 2,048 and a header written at exit; a reduction
over a persistent grid; a 2-D-grid weight gradient; one 512-element tile per program with
vector or scalar loads, and on Triton < 3.9 FlagGems' generated gelu kernel itself built that
way, tests/benchmarks/flaggems_gelu_shape.py: the shape of FlagGems' pointwise kernels below its
grid cap), and liger-kernel's ops when its wheel
is importable (tests/liger_ops.py, rows x ``--liger-scale``: 8,192 tokens by default, kernels
of tens of µs as in the issue).  In a session a kernel without scopes records only its
CTAs' and warps' lifetimes (granularity "auto" picks one unit per CTA).  Proton's
instrumentation mode has no scope to record in these kernels; where it runs them they are
its plain binaries plus its own launch hooks.

Usage: python tests/benchmarks/fixed_cost.py [--out fixed_cost.json] [--rounds 4] [--reps 10] [--no-liger]
       [--form F]   (a form of header_forms.py, e.g. ``func``; run it with its own TRITON_CACHE_DIR)
       [--only dyt,softmax,rms_norm]   (those workloads only)
"""
import argparse
import json
import os
import sys
import tempfile

import torch
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import fixed_cost_kernels as F  # noqa: E402
import flaggems_gelu_shape as G  # noqa: E402
from bench import ProtonRef  # noqa: E402
from library import liger_workloads, measure  # noqa: E402

ROWS, COLS = 8192, 4096


def own_workloads():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(ROWS, COLS, device="cuda", generator=g)
    dy = torch.randn(ROWS, COLS, device="cuda", generator=g)
    b = torch.randn(ROWS, COLS, device="cuda", generator=g)
    w = torch.randn(COLS, device="cuda", generator=g)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    rstd = torch.empty(ROWS, device="cuda")
    alpha = torch.full((1, ), 0.5, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    dalpha = torch.empty(sms, device="cuda")
    dgamma = torch.empty(sms, COLS, device="cuda")
    sums = torch.empty(ROWS, device="cuda")
    dw = torch.empty(triton.cdiv(ROWS, 32), COLS, device="cuda")
    target = torch.randint(0, COLS, (ROWS, ), device="cuda", generator=g)
    loss = torch.empty(ROWS, device="cuda")
    work = {
        "rms_norm_fwd": (lambda: F.rms_norm_fwd[(ROWS, )](x, w, y, rstd, COLS, COLS, 1e-6, BLOCK=COLS, num_warps=8),
                         "rms_norm_fwd"),
        "dyt_bwd": (lambda: F.dyt_bwd[(sms, )](x, dy, dx, alpha, w, dalpha, dgamma, ROWS, COLS, COLS, BLOCK=COLS,
                                               num_warps=16), "dyt_bwd"),
        "geglu_tanh_bwd": (lambda: F.geglu_tanh_bwd[(ROWS, )](dy, x, b, dx, y, COLS, COLS, BLOCK=COLS, num_warps=16),
                           "geglu_tanh_bwd"),
        "persistent_row_sum": (lambda: F.persistent_row_sum[(sms, )](x, sums, ROWS, COLS, COLS, BLOCK=COLS,
                                                                     num_warps=8), "persistent_row_sum"),
        "grad_weight_2d": (lambda: F.grad_weight_2d[(triton.cdiv(ROWS, 32), triton.cdiv(COLS, 1024))](
            x, dy, dw, ROWS, COLS, COLS, ROWS=32, BLOCK=1024, num_warps=8), "grad_weight_2d"),
        # straight-line, one short row per program (CTAs of ~1 µs, as liger's forwards): CTA header at exit
        "gated_silu_fwd": (lambda: F.gated_silu_fwd[(ROWS, )](x, b, y, COLS, 1.0, n_cols=COLS // 2,
                                                               BLOCK=COLS // 2, num_warps=8), "gated_silu_fwd"),
        # one 512-element tile per program, 4 warps (FlagGems' pointwise kernels below its grid cap): 65,536 CTAs of ~2 µs
        "tile_gelu": (lambda: F.tile_gelu[(ROWS * COLS // 512, )](x, w, y, ROWS * COLS, COLS, TILE=512, num_warps=4),
                      "tile_gelu"),
        "tile_gelu_scalar": (lambda: F.tile_gelu_scalar[(ROWS * COLS // 512, )](x, w, y, ROWS * COLS, COLS, TILE=512,
                                                                                num_warps=4), "tile_gelu_scalar"),
        # the same as a grid-stride loop of two 256-element tiles a CTA (FlagGems' pointwise kernels past its grid cap)
        "tile_gelu_loop": (lambda: F.tile_gelu_loop[(ROWS * COLS // 512, )](x, w, y, ROWS * COLS, COLS, 2, TILE=256,
                                                                            num_warps=4), "tile_gelu_loop"),
        # a loop after a load in the entry block, 32 warps (liger's cross-entropy's shape): header at entry
        "row_cross_entropy": (lambda: F.row_cross_entropy[(ROWS, )](x, target, loss, COLS, COLS, BLOCK=1024,
                                                                     num_warps=32), "row_cross_entropy"),
    }
    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 9):  # block pointers: gone in Triton 3.9
        # FlagGems' generated gelu kernel itself, launched as a plain JIT kernel on our inputs
        work["flaggems_gelu"] = (lambda: G.gelu_none_kernel_rank_1[(ROWS * COLS // 512, )](
            x, y, 1, 0, 1, 0, ROWS * COLS, ROWS * COLS, 1, tile_size0=512, one_tile_per_cta=True, num_warps=4),
            "gelu_none_kernel_rank_1")
        xy1 = x * w + 1.0  # the input FlagGems' gelu kernel gets in gelu(x * y + 1): other values for its erf
        work["flaggems_gelu_xy1"] = (lambda: G.gelu_none_kernel_rank_1[(ROWS * COLS // 512, )](
            xy1, y, 1, 0, 1, 0, ROWS * COLS, ROWS * COLS, 1, tile_size0=512, one_tile_per_cta=True, num_warps=4),
            "gelu_none_kernel_rank_1")
    return work


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="fixed_cost.json")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-liger", action="store_true")
    ap.add_argument("--liger-scale", type=int, default=32, help="rows x this (256 -> 8,192 tokens)")
    ap.add_argument("--form", default="pass", help="one of header_forms.py's forms (its own Triton cache)")
    ap.add_argument("--only", help="comma-separated workloads (ours and liger's op names, e.g. dyt,softmax): "
                                   "more runs of a few kernels in the same device time")
    ap.add_argument("--pin", action="append", default=[], metavar="KERNEL=TEXT",
                    help="an autotuned liger kernel tries only its configs whose text holds TEXT, e.g. "
                    "'_dyt_fwd_kernel=BLOCK_N: 2048, num_warps: 4': runs in separate processes (forms) then "
                    "compare the same config (DyT's forward read 1.015 with one and 1.05-1.07 with others)")
    args = ap.parse_args()
    wanted = set(args.only.split(",")) if args.only else None
    if args.form != "pass":
        from header_forms import use_form
        use_form(args.form)
    tmp = tempfile.mkdtemp()
    proton_ref = ProtonRef(tmp)
    results = []
    for name, (call, kernel) in own_workloads().items():
        if wanted is not None and name not in wanted:
            continue
        results.append({"library": "own", **measure(name, call, kernel.__eq__, args, tmp, proton_ref)})
    if not args.no_liger:
        liger, liger_names = liger_workloads()
        if liger:
            import liger_ops
            liger_ops.ROWS_SCALE = args.liger_scale
            pin_autotuners("liger_kernel.ops", args.pin)
        names = liger_names() if liger else set()
        for name, call in liger.items():
            if wanted is not None and name not in wanted:
                continue
            results.append({"library": "liger-kernel", **measure(name, call, names.__contains__, args, tmp,
                                                                 proton_ref)})
    out = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "rounds": args.rounds,
           "reps": args.reps, "proton_error": proton_ref.error, "results": results,
           "autotuned": autotuned_configs("liger_kernel.ops")}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"{'workload':24s} {'kernel':40s} {'plain us':>9s} {'pl x':>7s} {'Proton x':>9s}")
    for res in results:
        for k in res["kernels"]:
            pl = f"{k['pl_us'] / k['plain_us']:.3f}" if "pl_us" in k else "-"
            pr = f"{k['proton_us'] / k['plain_us']:.3f}" if "proton_us" in k else "-"
            print(f"{res['workload']:24s} {k['kernel'][:40]:40s} {k['plain_us']:9.1f} {pl:>7s} {pr:>9s}")
    for library in ("own", "liger-kernel"):  # the summary rows of docs/benchmarks.md's tables
        ratios = [k["pl_us"] / k["plain_us"] for res in results if res["library"] == library
                  for k in res["kernels"] if "pl_us" in k]
        if ratios:
            print(f"{library}: mean {sum(ratios) / len(ratios):.4f}, worst {max(ratios):.3f} over {len(ratios)} kernels")
    for kernel, config in sorted(out["autotuned"].items()):  # runs compare alike only where these agree
        print(f"autotuned {kernel}: {config}")
    if proton_ref.error:
        print("Proton:", proton_ref.error)


def _autotuners(prefix: str):
    """(kernel name, autotuner) of every autotuned kernel in the modules under ``prefix``."""
    for mod in sorted(m for m in sys.modules if m.startswith(prefix)):
        for obj in list(getattr(sys.modules.get(mod), "__dict__", {}).values()):
            fn = getattr(obj, "fn", None)
            if fn is not None and isinstance(getattr(obj, "configs", None), list):
                yield getattr(fn, "__name__", str(fn)), obj


def pin_autotuners(prefix: str, pins: list[str]) -> None:
    """``pins``: KERNEL=TEXT; that kernel's autotuner keeps only the configs whose text holds TEXT."""
    found = dict(_autotuners(prefix))
    for pin in pins:
        name, _, text = pin.partition("=")
        tuner = found.get(name)
        if tuner is None:
            raise SystemExit(f"--pin {pin!r}: no autotuned kernel {name!r} under {prefix} "
                             f"(there are: {', '.join(sorted(found)) or 'none'})")
        kept = [c for c in tuner.configs if text in str(c)]
        if not kept:
            raise SystemExit(f"--pin {pin!r}: none of {name}'s configs holds {text!r}; its configs: "
                             + "; ".join(str(c) for c in tuner.configs))
        tuner.configs = kept


def autotuned_configs(prefix: str) -> dict:
    """The config each autotuned kernel of the modules under ``prefix`` chose (its name ->
    its ``best_config``): liger's autotuners choose among up to 18 configs per process, and a
    kernel's overhead differs between configs (DyT's forward read 1.01-1.06x plain between
    runs on one H100 machine), so two runs' numbers compare only where these agree."""
    return {name: str(tuner.best_config) for name, tuner in _autotuners(prefix)
            if getattr(tuner, "best_config", None) is not None}


if __name__ == "__main__":
    main()
