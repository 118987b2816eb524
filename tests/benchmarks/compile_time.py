"""What a session adds to compiling (issue 22's host path, before the first launch; GPU and torch
needed for all but ``--only kernels``).

A kernel launched for the first time in a session is compiled instrumented, and a
torch.compile program's kernels compiled before the session are compiled again at their
first call in it (design.md §4b), so the first profiled step pays compiles that a plain step
does not.  Each case runs in a fresh process with fresh Triton and Inductor cache directories
(``--case NAME`` runs one case in this process), so no case finds another's binaries:

- ``kernels``: per kernel of our own (fixed_cost_kernels.py, bench_kernels.py), the compile
  for sm_90 plain and instrumented, its ptxas runs and their time (no GPU needed);
- ``autotune``: the first call of a ``triton.autotune`` kernel of 12 configs, plain and in a
  session (each config compiled and timed);
- ``inductor_cold``: a torch.compile program (a small transformer stack, forward and
  backward) compiled at its first call, plain and inside a session;
- ``inductor_before``: the same program compiled and warmed plain, then a session started:
  its first and second call in the session, and the first call of a second session;
- ``first_stop``: proton-lite's own C extensions, on a machine where they were never built
  (an empty ``PROTON_LITE_CACHE_DIR``): a session of 2 s, its stop, then ``proton-lite trace``
  of the capture in a fresh cache again, and once more with the cache warm.

Usage: python tests/benchmarks/compile_time.py [--only kernels,autotune,...] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
CASES = ("kernels", "autotune", "inductor_cold", "inductor_before", "first_stop")


def _paths() -> None:
    for p in (ROOT, os.path.join(HERE, ".."), HERE):
        if p not in sys.path:
            sys.path.insert(0, p)


class BuildParts:
    """Seconds spent, summed over threads, in the parts of a session's builds: kernels built from
    their plain PTX (runtime/rebuild.py), Triton's pipeline (Inductor's ``_precompile_config``),
    the launchers made (Triton's C launcher compiled there), the C compiler's and ptxas's runs
    (Triton's ``make_cubin`` runs ptxas by ``subprocess.run``, its launcher build the C compiler by
    ``check_call``).  ``inductor=False``: those runs only (no torch needed)."""

    def __init__(self, inductor: bool = True):
        import threading
        self.seconds, self.counts, self._lock = {}, {}, threading.Lock()
        self._undo, self.inductor = [], inductor

    @property
    def ptxas_runs(self) -> int:
        return self.counts.get("ptxas", 0)

    @property
    def ptxas_s(self) -> float:
        return self.seconds.get("ptxas", 0.0)

    def _add(self, part, seconds):
        with self._lock:
            self.seconds[part] = self.seconds.get(part, 0.0) + seconds
            self.counts[part] = self.counts.get(part, 0) + 1

    def _wrap(self, owner, name, part, which=None):
        real = getattr(owner, name)

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                label = which(a) if which is not None else part
                if label:
                    self._add(label, time.perf_counter() - t)
        setattr(owner, name, timed)
        self._undo.append((owner, name, real))

    def __enter__(self):
        if self.inductor:
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner

            from proton_lite.runtime import rebuild
            self._wrap(rebuild, "instrumented", "from_ptx")
            self._wrap(CachingAutotuner, "_precompile_config", "pipeline")
            self._wrap(CachingAutotuner, "_make_launchers", "launchers")

        def tool(a):
            cmd = a[0] if a else ""
            exe = os.path.basename(str(cmd[0] if isinstance(cmd, (list, tuple)) and cmd else cmd))
            return "ptxas" if "ptxas" in exe else "cc" if exe in ("cc", "gcc", "clang", "g++") or exe.startswith("gcc") else None
        self._wrap(subprocess, "run", None, tool)
        self._wrap(subprocess, "check_call", None, tool)
        return self

    def __exit__(self, *exc):
        for owner, name, real in reversed(self._undo):
            setattr(owner, name, real)

    def line(self) -> str:
        return ", ".join(f"{k} {self.counts[k]} x {v:.2f} s" for k, v in sorted(self.seconds.items()))


def case_kernels() -> list[dict]:
    _paths()
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"
    import proton_lite
    import fixed_cost_kernels as F
    from bench_kernels import lnorm, mm, smax

    def sig(fn, **types):
        return {a: types.get(a, "constexpr") for a in fn.arg_names}
    f32, f16 = "*fp32", "*fp16"
    mm_sig = sig(mm, a_ptr=f16, b_ptr=f16, c_ptr=f16, **{n: "i32" for n in ("M", "N", "K", "sam", "sak", "sbk", "sbn",
                                                                             "scm", "scn")})
    cases = [
        ("rms_norm_fwd, 8 warps", F.rms_norm_fwd, sig(F.rms_norm_fwd, x_ptr=f32, w_ptr=f32, y_ptr=f32, rstd_ptr=f32,
                                                     stride="i32", n_cols="i32", eps="fp32"), {"BLOCK": 4096}, 8),
        ("geglu_tanh_bwd, 16 warps", F.geglu_tanh_bwd, sig(F.geglu_tanh_bwd, dc_ptr=f32, a_ptr=f32, b_ptr=f32,
                                                          da_ptr=f32, db_ptr=f32, stride="i32", n_cols="i32"),
         {"BLOCK": 4096}, 16),
        ("layer_norm_rows, 16 warps", F.layer_norm_rows, sig(F.layer_norm_rows, x_ptr=f16, y_ptr=f16, w_ptr=f16,
                                                            b_ptr=f16, stride="i32", n="i32", eps="fp32"),
         {"BLOCK": 8192}, 16),
        ("tile_gelu_loop, 4 warps", F.tile_gelu_loop, sig(F.tile_gelu_loop, x_ptr=f32, y_ptr=f32, out_ptr=f32, n="i32",
                                                         n_cols="i32", tiles_per_cta="i32"), {"TILE": 256}, 4),
        ("layer norm, 2 scopes, 16 warps", lnorm, sig(lnorm, x_ptr=f16, y_ptr=f16, w_ptr=f16, b_ptr=f16,
                                                      stride="i32", n="i32", eps="fp32"), {"BLOCK": 8192, "PROF": 1}, 16),
        ("softmax, 2 scopes, 8 warps", smax, sig(smax, x_ptr=f32, o_ptr=f32, stride="i32", n="i32"),
         {"BLOCK": 4096, "PROF": 1}, 8),
        ("matmul 128x128x64, 2 scopes, 8 warps", mm, mm_sig, {"BM": 128, "BN": 128, "BK": 64, "PROF": 1,
                                                             "PER_ITER": 0}, 8),
        ("matmul 64x64x32, scope-less, 4 warps", mm, mm_sig, {"BM": 64, "BN": 64, "BK": 32, "PROF": 0,
                                                             "PER_ITER": 0}, 4),
    ]
    rows = []
    for name, fn, signature, constexprs, warps in cases:
        row = {"kernel": name}
        for inst in (False, True):
            best = None
            for _ in range(3):  # the fastest of three: the first pays imports and warm-up
                with BuildParts(inductor=False) as c:
                    t = time.perf_counter()
                    k = proton_lite.compile(fn, signature, constexprs, instrument=inst, num_warps=warps)
                    dt = time.perf_counter() - t
                if best is None or dt < best[0]:
                    best = (dt, c.ptxas_runs, c.ptxas_s)
            key = "instrumented" if inst else "plain"
            row[key] = {"s": best[0], "ptxas_runs": best[1], "ptxas_s": best[2]}
            if inst:
                row["registers"] = (k.profile or {}).get("registers")
            else:
                plain = k.triton_kernel
        row["from_plain"] = None if constexprs.get("PROF") else _from_plain_build(plain)  # (scopes: the pipeline)
        rows.append(row)
        fp = row["from_plain"]
        print(f"  {name:38s} plain {row['plain']['s'] * 1e3:6.0f} ms ({row['plain']['ptxas_runs']} ptxas) | "
              f"instrumented {row['instrumented']['s'] * 1e3:6.0f} ms ({row['instrumented']['ptxas_runs']} ptxas, "
              f"{row['instrumented']['ptxas_s'] * 1e3:.0f} ms of them) "
              f"{row['instrumented']['s'] / row['plain']['s']:.2f}x | "
              + (f"from the plain binary {fp['s'] * 1e3:.0f} ms ({fp['ptxas_runs']} ptxas)" if fp else "(scopes: pipeline)"),
              flush=True)
    return rows


def _from_plain_build(plain) -> dict | None:
    """The fastest of three builds of ``plain`` (a Triton CompiledKernel of a kernel without
    scopes) instrumented from its PTX (runtime/rebuild.py), each in an empty cache directory."""
    from proton_lite.passes.config import InstrumentConfig
    from proton_lite.runtime.rebuild import PlainKernel, instrumented
    best = None
    for _ in range(3):
        with tempfile.TemporaryDirectory() as cache:
            os.environ["TRITON_CACHE_DIR"] = cache
            with BuildParts(inductor=False) as c:
                t = time.perf_counter()
                built = instrumented(PlainKernel.of(plain), plain.src, InstrumentConfig().to_mode())
                dt = time.perf_counter() - t
        if built is None:
            return None
        if best is None or dt < best[0]:
            best = (dt, c.ptxas_runs)
    return {"s": best[0], "ptxas_runs": best[1]}


def _session(tmp: str, name: str):
    import proton_lite
    return proton_lite.start(os.path.join(tmp, name), quiet=True, decode=False, calibrate=False)


def case_autotune(tmp: str) -> dict:
    _paths()
    import torch
    import triton
    import triton.language as tl

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (1024, 2048, 4096, 8192) for w in (4, 8, 16)]

    def build():
        @triton.autotune(configs=configs, key=["n"])
        @triton.jit
        def scaled_add(x_ptr, y_ptr, o_ptr, n, alpha, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            x = tl.load(x_ptr + offs, mask=m)
            y = tl.load(y_ptr + offs, mask=m)
            tl.store(o_ptr + offs, tl.sigmoid(x) * alpha + y * y, mask=m)
        return scaled_add

    n = 1 << 24
    x, y, o = (torch.randn(n, device="cuda") for _ in range(3))

    def first_call(kernel):
        torch.cuda.synchronize()
        t = time.perf_counter()
        kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]), )](x, y, o, n, 0.5)
        torch.cuda.synchronize()
        return time.perf_counter() - t
    first_call(build())  # untimed: CUDA's and Triton's first use (and these configs' launcher build)
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # each timed first call compiles its configs
    plain = first_call(build())
    with _session(tmp, "autotune"):
        session = first_call(build())  # a new JIT function: its configs compile again, instrumented
    return {"configs": len(configs), "plain_s": plain, "session_s": session}


def _program():
    """A small transformer stack (norms, attention by hand, gated MLP, a loss), forward and
    backward: 25 distinct Triton kernels from Inductor (PyTorch 2.11)."""
    import torch
    torch.manual_seed(0)
    dim, heads, layers = 512, 8, 2
    params = []
    for _ in range(layers):
        params.append({k: torch.nn.Parameter(torch.randn(*s, device="cuda") * 0.02) for k, s in
                       (("qkv", (3 * dim, dim)), ("out", (dim, dim)), ("up", (4 * dim, dim)), ("gate", (4 * dim, dim)),
                        ("down", (dim, 4 * dim)), ("ln", (dim, )), ("rms", (dim, )))})

    def step(x, target):
        h = x
        for p in params:
            a = torch.nn.functional.layer_norm(h, (dim, ), p["ln"])
            q, k, v = (a @ p["qkv"].t()).chunk(3, -1)
            b, t = q.shape[0], q.shape[1]
            q, k, v = (z.view(b, t, heads, dim // heads).transpose(1, 2) for z in (q, k, v))
            att = torch.softmax((q @ k.transpose(-1, -2)) * (dim // heads) ** -0.5, -1)
            h = h + ((att @ v).transpose(1, 2).reshape(b, t, dim) @ p["out"].t())
            r = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * p["rms"]
            h = h + (torch.nn.functional.silu(r @ p["gate"].t()) * (r @ p["up"].t())) @ p["down"].t()
        loss = torch.nn.functional.cross_entropy(h.float().view(-1, dim), target.view(-1))
        loss.backward()
        return loss
    x = torch.randn(8, 256, dim, device="cuda", requires_grad=True)
    target = torch.randint(0, dim, (8, 256), device="cuda")
    return torch.compile(step), (x, target)


def _timed_call(fn, args) -> float:
    import torch
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn(*args)
    torch.cuda.synchronize()
    return time.perf_counter() - t


def case_inductor_cold(tmp: str, in_session: bool) -> dict:
    _paths()
    fn, args = _program()
    if in_session:
        with _session(tmp, "cold") as s, BuildParts() as parts:
            first = _timed_call(fn, args)
            second = _timed_call(fn, args)
        print("  parts (summed over threads):", parts.line())
        launches, builds = s.result.launches, (s.result.compiles, s.result.compile_seconds)
    else:
        first, second, launches, builds = _timed_call(fn, args), _timed_call(fn, args), None, (None, None)
    return {"first_s": first, "second_s": second, "session_launches": launches, "session_builds": builds[0],
            "session_build_s": builds[1]}


def case_inductor_before(tmp: str) -> dict:
    _paths()
    fn, args = _program()
    compile_s = _timed_call(fn, args)
    steady = min(_timed_call(fn, args) for _ in range(5))
    with _session(tmp, "before1") as s:
        if os.environ.get("COMPILE_TIME_PROFILE"):  # where the first call's time goes (cProfile)
            import cProfile
            import pstats
            prof = cProfile.Profile()
            with BuildParts() as parts:
                prof.enable()
                first = _timed_call(fn, args)
                prof.disable()
            print(f"  first call {first:.2f} s; parts (summed over threads): {parts.line()}")
            pstats.Stats(prof).sort_stats("cumulative").print_stats(int(os.environ["COMPILE_TIME_PROFILE"]))
        else:
            with BuildParts() as parts:
                first = _timed_call(fn, args)
            print("  parts (summed over threads):", parts.line())
        second = _timed_call(fn, args)
    launches, builds = s.result.launches, (s.result.compiles, s.result.compile_seconds)
    after_stop = _timed_call(fn, args)  # its configs compiled plain again (Triton's cache)
    with _session(tmp, "before2"):
        again = _timed_call(fn, args)  # the instrumented binaries from Triton's cache
    return {"plain_compile_s": compile_s, "plain_steady_s": steady, "session_first_s": first,
            "session_second_s": second, "after_stop_s": after_stop, "second_session_first_s": again,
            "session_launches": launches, "session_builds": builds[0], "session_build_s": builds[1]}


def case_first_stop(tmp: str) -> dict:
    _paths()
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def scale(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

    x = torch.ones(1 << 20, device="cuda")
    scale[(1024, )](x, x.numel(), BLOCK=1024)  # compiled plain: not what is timed
    torch.cuda.synchronize()
    import proton_lite
    session = proton_lite.start(os.path.join(tmp, "first"), quiet=True, calibrate=False)
    for _ in range(3):
        scale[(1024, )](x, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    time.sleep(2.0)  # the program's own work
    t = time.perf_counter()
    proton_lite.stop()
    stop_s = time.perf_counter() - t
    cli = [sys.executable, "-m", "proton_lite", "trace", session.raw_path, "-o", os.path.join(tmp, "again")]
    times = []
    for cache in ("trace-cold", "trace-cold", "trace-cold"):  # warm after the first
        t = time.perf_counter()
        subprocess.run(cli, check=True, capture_output=True, env=dict(os.environ, PROTON_LITE_CACHE_DIR=os.path.join(tmp, cache)))
        times.append(time.perf_counter() - t)
    return {"stop_s": stop_s, "trace_cold_s": times[0], "trace_warm_s": min(times[1:])}


def run_case(name: str, tmp: str):
    if name == "first_stop":
        return case_first_stop(tmp)
    if name == "kernels":
        return case_kernels()
    if name == "autotune":
        return case_autotune(tmp)
    if name == "inductor_cold":
        return {"plain": case_inductor_cold(tmp, False)}
    if name == "inductor_cold_session":
        return {"session": case_inductor_cold(tmp, True)}
    if name == "inductor_before":
        return case_inductor_before(tmp)
    raise SystemExit(f"unknown case {name!r}; cases: {', '.join(CASES)}")


def in_fresh_process(name: str, timeout: float) -> dict:
    """``name`` in a new interpreter with its own, empty Triton and Inductor caches."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   PROTON_LITE_CACHE_DIR=os.path.join(tmp, "proton_lite"))
        out = os.path.join(tmp, "case.json")
        proc = subprocess.run([sys.executable, __file__, "--case", name, "--case-out", out], env=env,
                              timeout=timeout, capture_output=True, text=True)
        if proc.returncode != 0:
            return {"error": (proc.stdout + proc.stderr)[-2000:]}
        sys.stdout.write(proc.stdout)
        with open(out) as f:
            return json.load(f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(CASES))
    ap.add_argument("--json")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--case-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        with tempfile.TemporaryDirectory() as tmp:
            result = run_case(args.case, tmp)
        with open(args.case_out, "w") as f:
            json.dump(result, f)
        return
    results = {}
    for name in args.only.split(","):
        names = [name, name + "_session"] if name == "inductor_cold" else [name]
        for case in names:
            print(f"{case}:", flush=True)
            results[case] = in_fresh_process(case, args.timeout)
            if "error" in results[case]:
                print("  failed:", results[case]["error"][-600:], flush=True)
            elif case != "kernels":
                print("  " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in (results[case].get("plain") or results[case].get("session")
                                                    or results[case]).items()), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
