"""The fixed cost of being profiled (issue 24) on production libraries beyond liger-kernel:
FlagGems (aten ops as Triton kernels, some generated as source at run time), flash-linear-attention
(chunked linear attention, autotuned), Cut Cross-Entropy and SageAttention, at production sizes
(kernels of tens to hundreds of µs), scope-less: plain vs in a session vs under Proton, by CUPTI
kernel durations in interleaved rounds, one process (GPU).

Why a second script: ``fixed_cost.py`` measures kernels shaped like liger-kernel's and liger's
own; whether "scope-less kernels within 2% of plain" holds for kernels nobody shaped our
instrumentation after (matmuls, scans, attention, top-k) is only known by running them.

Usage: python tests/benchmarks/library_fixed_cost.py [--out library_fixed_cost.json] [--rounds 3] [--reps 10]
       [--only gems_mm,fla_gla]   (workload names, see WORKLOADS)
Needs the libraries' wheels (tests/run_gpu.sh installs .whl/); a library that does not import is skipped
and named.  Each workload's row is written as soon as it is measured.
"""
import argparse
import json
import os
import sys
import tempfile
import traceback

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from bench import ProtonRef  # noqa: E402
from library import measure  # noqa: E402
from library_ops_more import live_instances, triton_kernel_names  # noqa: E402

DEV = "cuda"


def _g():
    return torch.Generator(device=DEV).manual_seed(0)


def clear_library_caches() -> int:
    """Empty FlagGems' own caches of compiled kernels (``LibEntry.kernel_cache``), so that the
    next call looks its kernel up through Triton again: a binary compiled plain would
    otherwise run in the session too (not profiled), and one compiled in the session after
    it (its records read by nobody).  Returns the entries dropped."""
    try:
        from flag_gems.utils.libentry import LibEntry
    except ImportError:
        return 0
    dropped = 0
    for o in live_instances(LibEntry):
        for cache in o.kernel_cache:
            dropped += len(cache)
            cache.clear()
    return dropped


def _gems(fn):
    """``fn`` with FlagGems' kernels in place of aten's."""
    import flag_gems

    def call():
        with flag_gems.use_gems():
            return fn()
    return call


# Each workload: a function returning a no-argument call (inputs made once, outside the timing).
def gems_mm():
    a = torch.randn(4096, 4096, device=DEV, generator=_g(), dtype=torch.float16)
    b = torch.randn(4096, 4096, device=DEV, generator=_g(), dtype=torch.float16)
    return _gems(lambda: torch.mm(a, b))


def gems_softmax():
    x = torch.randn(8192, 4096, device=DEV, generator=_g())
    return _gems(lambda: torch.softmax(x, -1))


def gems_layer_norm():
    x = torch.randn(8192, 4096, device=DEV, generator=_g(), dtype=torch.float16)
    w = torch.randn(4096, device=DEV, generator=_g(), dtype=torch.float16)
    b = torch.randn(4096, device=DEV, generator=_g(), dtype=torch.float16)
    return _gems(lambda: F.layer_norm(x, (4096, ), w, b))


def gems_pointwise():  # generated as source at run time
    x = torch.randn(8192, 4096, device=DEV, generator=_g())
    y = torch.randn(4096, device=DEV, generator=_g())
    return _gems(lambda: F.gelu(x * y + 1.0))


def gems_sum():
    x = torch.randn(8192, 4096, device=DEV, generator=_g())
    return _gems(lambda: x.sum(-1))


def gems_cross_entropy():
    x = torch.randn(4096, 32000, device=DEV, generator=_g())
    t = torch.randint(0, 32000, (4096, ), device=DEV, generator=_g())
    return _gems(lambda: F.cross_entropy(x, t))


def gems_cumsum():
    x = torch.randn(64, 1_000_000, device=DEV, generator=_g())
    return _gems(lambda: torch.cumsum(x, 1))


def gems_topk():
    x = torch.randn(4096, 8192, device=DEV, generator=_g())
    return _gems(lambda: torch.topk(x, 16, dim=-1).values)


def gems_argmax():
    x = torch.randn(8192, 4096, device=DEV, generator=_g())
    return _gems(lambda: torch.argmax(x, -1))


def _qkvg(T=8192, H=16, K=128):
    q, k, v = (torch.randn(1, T, H, K, device=DEV, generator=_g(), dtype=torch.bfloat16) for _ in range(3))
    gate = F.logsigmoid(torch.randn(1, T, H, device=DEV, generator=_g()))
    return q, k, v, gate


def fla_gated_delta_rule():
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    q, k, v, gate = _qkvg()
    beta = torch.rand(1, q.shape[1], q.shape[2], device=DEV, generator=_g()).sigmoid()

    def call():
        with torch.no_grad():
            return chunk_gated_delta_rule(q, k, v, gate, beta, use_qk_l2norm_in_kernel=True)[0]
    return call


def fla_simple_gla():
    from fla.ops.simple_gla import chunk_simple_gla
    q, k, v, gate = _qkvg()

    def call():
        with torch.no_grad():
            return chunk_simple_gla(q, k, v, g=gate)[0]
    return call


def fla_parallel_attn():
    from fla.ops.attn import parallel_attn
    q, k, v, _ = _qkvg(T=4096, H=16, K=128)

    def call():
        with torch.no_grad():
            return parallel_attn(q, k, v)
    return call


def cce_linear_cross_entropy():
    from cut_cross_entropy import linear_cross_entropy
    e = torch.randn(8192, 1024, device=DEV, generator=_g(), dtype=torch.bfloat16)
    c = torch.randn(32768, 1024, device=DEV, generator=_g(), dtype=torch.bfloat16)
    t = torch.randint(0, 32768, (8192, ), device=DEV, generator=_g())

    def call():
        with torch.no_grad():
            return linear_cross_entropy(e, c, t)
    return call


def sage_attention():
    from sageattention import sageattn
    q, k, v = (torch.randn(2, 16, 4096, 128, device=DEV, generator=_g(), dtype=torch.float16) for _ in range(3))
    return lambda: sageattn(q, k, v, tensor_layout="HND", is_causal=False)


def _compiled(fn, *inputs):
    """A torch.compile program (Inductor's kernels: 1,024-element pointwise tiles, one row per
    program for reductions), compiled plain here."""
    compiled = torch.compile(fn)
    return lambda: compiled(*inputs)


def inductor_pointwise():
    x = torch.randn(8192, 4096, device=DEV, generator=_g())
    y = torch.randn(4096, device=DEV, generator=_g())
    return _compiled(lambda a, b: F.gelu(a * b + 1.0), x, y)


def inductor_softmax():
    x = torch.randn(8192, 4096, device=DEV, generator=_g())
    return _compiled(lambda a: torch.softmax(a * 2.0, -1), x)


def inductor_layer_norm():
    x = torch.randn(8192, 4096, device=DEV, generator=_g(), dtype=torch.float16)
    w = torch.randn(4096, device=DEV, generator=_g(), dtype=torch.float16)
    b = torch.randn(4096, device=DEV, generator=_g(), dtype=torch.float16)
    return _compiled(lambda a, w, b: F.layer_norm(a, (4096, ), w, b), x, w, b)


WORKLOADS = {"torch.compile": [inductor_pointwise, inductor_softmax, inductor_layer_norm],
             "FlagGems": [gems_mm, gems_softmax, gems_layer_norm, gems_pointwise, gems_sum, gems_cross_entropy,
                          gems_cumsum, gems_topk, gems_argmax],
             "Cut Cross-Entropy": [cce_linear_cross_entropy],
             "SageAttention": [sage_attention],
             "flash-linear-attention": [fla_gated_delta_rule, fla_simple_gla, fla_parallel_attn]}  # last: its tuning is long


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="library_fixed_cost.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--only", help="comma-separated workload names")
    ap.add_argument("--no-proton", action="store_true")
    ap.add_argument("--form", default="pass", help="one of header_forms.py's forms (its own Triton cache)")
    args = ap.parse_args()
    if args.form != "pass":
        from header_forms import use_form
        use_form(args.form)
    wanted = set(args.only.split(",")) if args.only else None
    tmp = tempfile.mkdtemp()
    proton_ref = ProtonRef(tmp) if not args.no_proton else None
    out = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "form": args.form, "rounds": args.rounds,
           "reps": args.reps, "results": [], "errors": {}}
    for library, makers in WORKLOADS.items():
        for make in makers:
            name = make.__name__
            if wanted is not None and name not in wanted:
                continue
            try:
                call = make()
                call()  # compiled (and tuned) plain, so that the kernels' names are known
                torch.cuda.synchronize()
                names = triton_kernel_names()
                row = measure(name, call, names.__contains__, args, tmp, proton_ref, before_mode=clear_library_caches,
                              host=False)
            except Exception as e:  # noqa: BLE001  (a library missing or refusing: named, the rest go on)
                out["errors"][name] = f"{type(e).__name__}: {e}"[:400]
                print(f"{name}: {out['errors'][name]}", flush=True)
                traceback.print_exc(limit=3)
                continue
            out["results"].append({"library": library, **row})
            for k in row["kernels"]:
                pl = f"{k['pl_us'] / k['plain_us']:.3f}" if "pl_us" in k else "-"
                pr = f"{k['proton_us'] / k['plain_us']:.3f}" if "proton_us" in k else "-"
                print(f"{name:26s} {k['kernel'][:44]:44s} {k['plain_us']:9.1f} {pl:>7s} {pr:>9s}", flush=True)
            print(f"{name:26s} session launches: {row['session_launches']}", flush=True)
            with open(args.out, "w") as f:
                json.dump({**out, "proton_error": proton_ref.error if proton_ref else "not run"}, f, indent=1)
    for library in WORKLOADS:
        ratios = [k["pl_us"] / k["plain_us"] for res in out["results"] if res["library"] == library
                  for k in res["kernels"] if "pl_us" in k]
        if ratios:
            print(f"{library}: mean {sum(ratios) / len(ratios):.4f}, worst {max(ratios):.3f} over {len(ratios)} kernels")
    if proton_ref is not None and proton_ref.error:
        print("Proton:", proton_ref.error)


if __name__ == "__main__":
    main()
