"""torch.compile (Inductor) kernels in a session, on the GPU: every launch recorded under its
Inductor name whether the function was compiled before the session or in it, with warm or
cold caches; outputs unchanged; every setting given back at stop.

Launches made are counted outside any session by CUPTI (torch.profiler), launches recorded
from the raw capture."""
import os
from collections import Counter

import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import proton_lite  # noqa: E402
from proton_lite.passes import stage_hook  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
from proton_lite.runtime.inductor import SERIAL, SETTINGS, _live_autotuners  # noqa: E402

CALLS = 3


def pointwise(x, w, b):
    return torch.relu(x * 2 + w) - torch.sigmoid(x) * b


def reduction(x, w, b):
    return (torch.softmax(x * w, dim=-1) * b).sum(-1)


def matmul_epilogue(x, w, b):
    return torch.relu(x @ w + b) * 0.5


FUNCTIONS = {"pointwise": pointwise, "reduction": reduction, "matmul_epilogue": matmul_epilogue}


def _args(name):
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(512, 384, device="cuda", generator=g)
    if name == "matmul_epilogue":
        return x, torch.randn(384, 256, device="cuda", generator=g), torch.randn(256, device="cuda", generator=g)
    return x, torch.randn(512, 384, device="cuda", generator=g), torch.randn(512, 384, device="cuda", generator=g)


def _triton_launches(fn, args) -> Counter:
    """Inductor's kernels one call launches, counted by CUPTI outside any session."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return Counter(e.name for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith("triton_"))


def _recorded(result) -> Counter:
    cap = read_raw(result.raw_path)
    return Counter(cap.kernels[launch.kernel_id]["name"] for launch in cap.launches)


def _settings():
    import importlib

    from triton import knobs
    values = {(m, n): getattr(importlib.import_module(m), n) for m, names, _ in SETTINGS + (SERIAL, ) for n in names
              if hasattr(importlib.import_module(m), n)}
    return values, knobs.runtime.jit_post_compile_hook, knobs.cache.manager_class, knobs.compilation.instrumentation_mode


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """Fresh Inductor and Triton cache directories and no compiled graphs: a cold start."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _session(tmp_path, fn, args):
    with proton_lite.start(str(tmp_path / "trace"), quiet=True, formats=(), calibrate=False) as s:
        outs = [fn(*args) for _ in range(CALLS)]
    torch.cuda.synchronize()
    return s.result, outs


@pytest.mark.parametrize("name", FUNCTIONS)
@pytest.mark.parametrize("when", ["before", "inside_cold", "inside_warm"])
def test_every_inductor_launch_is_recorded(name, when, tmp_path, caches):
    eager, args = FUNCTIONS[name], _args(name)
    expected_out = eager(*args)
    saved = _settings()
    fn = torch.compile(eager)
    per_call = None
    if when in ("before", "inside_warm"):
        plain = fn(*args)  # compiled, autotuned and cached outside the session
        per_call = _triton_launches(fn, args)
        if when == "inside_warm":  # the caches on disk are warm; the graph is compiled again in the session
            torch._dynamo.reset()
            fn = torch.compile(eager)
    result, outs = _session(tmp_path, fn, args)
    assert _settings() == saved and not stage_hook.forced_mode()
    after = fn(*args)  # after stop: the same graph, its kernels plain again
    torch.cuda.synchronize()
    if per_call is None:
        per_call = _triton_launches(fn, args)
        plain = after
    assert per_call, "the function launches no Triton kernel: nothing to check"
    recorded = _recorded(result)
    assert recorded == Counter({k: v * CALLS for k, v in per_call.items()}), result.summary_line
    assert result.launches == CALLS * sum(per_call.values()) and result.dropped == 0
    for out in outs + [after]:
        assert torch.equal(out, plain)  # instrumented kernels compute exactly what plain ones do
    torch.testing.assert_close(plain, expected_out, rtol=2e-3, atol=2e-3)
    assert "not in the profile" not in result.summary_line, result.summary_line


def test_kernels_go_back_to_plain_and_the_next_compile_is_static(tmp_path, caches):
    from torch._inductor.runtime.triton_heuristics import StaticTritonCompileResult
    args = _args("pointwise")
    before = {id(a) for a in _live_autotuners()}
    fn = torch.compile(pointwise)
    result, _ = _session(tmp_path, fn, args)
    assert result.launches == CALLS
    ours = [a for a in _live_autotuners() if id(a) not in before and a.launchers]
    # compiled instrumented in this process, or plain by Inductor's workers (their plain binaries
    # back at stop): either way for Triton's launcher, until their first call after stop
    assert ours and all(not isinstance(r, StaticTritonCompileResult) for a in ours for r in a.compile_results)
    assert all("run" in vars(a) for a in ours)
    fn(*args)  # the first launch after stop compiles them plain, as outside any session
    # (Inductor launches a kernel statically only when its profile scratch size is 0)
    for a in ours:
        assert "run" not in vars(a) and "precompile" not in vars(a)
        assert all(isinstance(r, StaticTritonCompileResult) for r in a.compile_results)
    later = torch.compile(lambda x, w, b: torch.tanh(x) + w * b)
    known = {id(a) for a in _live_autotuners()}
    later(*args)
    new = [a for a in _live_autotuners() if id(a) not in known]
    assert new and all(isinstance(r, StaticTritonCompileResult) for a in new for r in a.compile_results)


def test_autotuning_in_the_session_is_not_recorded_as_launches(tmp_path, caches):
    """max-autotune times kernel templates (compiled only for that) and configs of the chosen
    kernels: those launches are trials, left out and counted."""
    import torch._inductor.config as config
    args = _args("matmul_epilogue")
    fn = torch.compile(matmul_epilogue, mode="max-autotune-no-cudagraphs")
    with config.patch(max_autotune_gemm_backends="TRITON"):
        result, outs = _session(tmp_path, fn, args)
        plain = fn(*args)
        per_call = _triton_launches(fn, args)
    assert per_call and _recorded(result) == Counter({k: v * CALLS for k, v in per_call.items()})
    assert "autotuner trial launches skipped" in result.summary_line
    for out in outs:
        assert torch.equal(out, plain)


def test_graphs_of_reduce_overhead_are_recorded(tmp_path, caches):
    """torch.compile(mode="reduce-overhead") runs its step as a CUDA graph after warmup:
    the graph's replays are recorded as launches of their own (graph, replay)."""
    args = _args("pointwise")
    fn = torch.compile(pointwise, mode="reduce-overhead")
    with proton_lite.start(str(tmp_path / "graphs"), quiet=True, formats=(), calibrate=False) as s:
        outs = [fn(*args).clone() for _ in range(6)]
    torch.cuda.synchronize()
    expected = pointwise(*args)
    for out in outs:
        torch.testing.assert_close(out, expected, rtol=2e-3, atol=2e-3)
    prof = decode(read_raw(s.result.raw_path))
    replayed = prof.launches[prof.launches["graph"] > 0]
    assert len(replayed) >= 3, (prof.launches[["launch", "graph", "replay"]], s.result.summary_line)
    assert all(prof.kernels[int(k)].name.startswith("triton_") for k in replayed["kernel"])
    assert s.result.counters["graph_captured_launches"] == 0, s.result.summary_line
    after = fn(*args).clone()  # replays after stop: the graph's scratch is still there
    torch.cuda.synchronize()
    torch.testing.assert_close(after, expected, rtol=2e-3, atol=2e-3)


def test_kernels_for_the_cpp_wrapper_stay_plain_and_are_named(tmp_path, caches):
    """Inductor's C++ wrapper launches the cubins itself, with a profile buffer of one CTA's
    size: its kernels must stay plain (and be named), never be instrumented."""
    args = _args("pointwise")
    fn = torch.compile(pointwise, options={"cpp_wrapper": True})
    with proton_lite.start(str(tmp_path / "cpp"), quiet=True, formats=(), calibrate=False) as s:
        outs = [fn(*args) for _ in range(2)]
    torch.cuda.synchronize()
    for out in outs:
        torch.testing.assert_close(out, pointwise(*args), rtol=2e-3, atol=2e-3)
    line = s.result.summary_line
    seen = [(getattr(a, "inductor_meta", {}).get("kernel_name"), getattr(a, "inductor_meta", {}).get("store_cubin"),
             len(a.launchers)) for a in _live_autotuners()]
    assert s.result.launches == 0 and "cpp_wrapper" in line and "triton_poi_fused" in line, (line, seen)


def several_kernels(x, w, b):
    a = torch.softmax(x * w, dim=-1)
    c = torch.nn.functional.layer_norm(a + b, (a.shape[-1], ))
    return (torch.relu(c) @ w.t()).sigmoid().sum(-1)


def test_a_graphs_kernels_compiled_before_the_session_are_compiled_again_on_threads(tmp_path, caches, monkeypatch):
    """At the first call in a session of a graph compiled before it, the graph's other kernels
    are built again on the bridge's threads while its first one is (InductorBridge.prefetch),
    from their plain PTX (runtime/rebuild.py): every kernel is instrumented, every launch
    recorded, the outputs exact, and no compile thread outlives the stop."""
    import threading

    args = _args("pointwise")
    fn = torch.compile(several_kernels)
    plain = fn(*args)
    per_call = _triton_launches(fn, args)
    assert len(per_call) >= 2, per_call  # a graph of several kernels
    threads, pipeline = _builds_by_thread(monkeypatch)
    result, outs = _session(tmp_path, fn, args)
    assert _recorded(result) == Counter({k: v * CALLS for k, v in per_call.items()}), result.summary_line
    assert sum(threads.values()) >= len(per_call) and not pipeline  # each kernel built again, from its PTX
    assert result.compiles >= len(per_call) and result.compile_seconds > 0  # the session's tally of its builds
    if len(os.sched_getaffinity(0)) >= 2:
        assert threads[True] >= 1, threads  # some on the bridge's threads
    assert not [t for t in threading.enumerate() if t.name.startswith("proton_lite-compile")]
    for out in outs:
        assert torch.equal(out, plain)
    assert "not in the profile" not in result.summary_line, result.summary_line


def _builds_by_thread(monkeypatch):
    """Counts the kernels built from their plain PTX (runtime/rebuild.py), by whether a compile
    thread of the bridge built them, and those compiled through Triton's pipeline again."""
    import threading

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    from proton_lite.runtime import rebuild
    threads, pipeline = Counter(), Counter()
    real, original = rebuild.instrumented, CachingAutotuner._precompile_config

    def counted(*a, **k):
        out = real(*a, **k)
        if out is not None:
            threads[threading.current_thread().name.startswith("proton_lite-compile")] += 1
        return out

    def noted(self, *a, **k):
        if stage_hook.forced_mode():
            pipeline[threading.current_thread().name] += 1
        return original(self, *a, **k)
    monkeypatch.setattr(rebuild, "instrumented", counted)
    monkeypatch.setattr(CachingAutotuner, "_precompile_config", noted)
    return threads, pipeline


def test_a_graph_compiled_in_the_session_by_inductors_workers_is_built_from_their_ptx(tmp_path, caches, monkeypatch):
    """Inside a session Inductor still compiles in its worker processes, which never see the
    stage hook: at the end of dynamo's compile the kernels they compiled plain are built again
    from their PTX on the bridge's threads (InductorBridge.compile_ended), so every launch is
    recorded, the outputs are exact and the plain binaries are the program's again after stop."""
    import threading

    from torch._inductor import config
    from torch._inductor.async_compile import AsyncCompile
    if config.compile_threads < 2:
        pytest.skip("Inductor compiles in this process here (compile_threads < 2)")
    AsyncCompile.warm_pool()
    AsyncCompile.wait_pool_ready()  # else its first kernels compile in this process, instrumented at once
    args = _args("pointwise")
    threads, pipeline = _builds_by_thread(monkeypatch)
    fn = torch.compile(several_kernels)
    with proton_lite.start(str(tmp_path / "workers"), quiet=True, formats=(), calibrate=False) as s:
        workers = config.compile_threads
        outs = [fn(*args) for _ in range(CALLS)]
    torch.cuda.synchronize()
    plain = fn(*args)
    per_call = _triton_launches(fn, args)
    assert len(per_call) >= 2 and workers >= 2, (per_call, workers)
    assert _recorded(s.result) == Counter({k: v * CALLS for k, v in per_call.items()}), s.result.summary_line
    assert sum(threads.values()) >= len(per_call) and not pipeline, (threads, pipeline)
    if len(os.sched_getaffinity(0)) >= 2:
        assert threads[True] >= 1, threads  # begun on the bridge's threads at the compile's end
    assert s.result.compiles >= len(per_call) and s.result.dropped == 0
    for out in outs:
        assert torch.equal(out, plain)
    assert not [t for t in threading.enumerate() if t.name.startswith("proton_lite-compile")]
    assert "not in the profile" not in s.result.summary_line, s.result.summary_line
