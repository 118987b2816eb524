"""More production kernel libraries in a session, on the GPU (liger-kernel:
test_gpu_liger.py).  flash-linear-attention's ops, forward and backward, Cut Cross-Entropy's
linear cross-entropy (forward and backward), SageAttention's int8 attention and FlagGems' aten ops
run unchanged and every launch of their Triton kernels is recorded, counted outside the session
by CUPTI (torch.profiler).  FlagGems keeps the ``CompiledKernel`` of each specialization in its
own cache and launches it directly: a kernel it first compiled in a session is launched again
from that cache after the session stopped, and one it compiled before a session is named as not
profiled, never silently missing.  FlagGems also gives torch's ``zero_`` a Triton kernel, which
the autotuner's L2 flush runs hundreds of times while it tunes: trials, never the program's
launches.  (fla's gated ops run forward only where fla refuses their backward: Triton 3.4-3.7
on Hopper.)"""
from collections import Counter

import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import proton_lite  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
import library_ops_more as L  # noqa: E402


def _made(run, op) -> tuple[Counter, list]:
    """Launches of Triton kernels in one call of the op, by CUPTI, and the op's result."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        result = run(op)
    names = L.triton_kernel_names()
    made = Counter(e.name for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and e.name in names)
    return made, result


def _recorded(session) -> Counter:
    cap = read_raw(session.result.raw_path)
    return Counter(cap.kernels[launch.kernel_id]["name"] for launch in cap.launches)


def _same(a_list, b_list, deterministic):
    for a, b in zip(a_list, b_list):
        if deterministic:
            assert torch.equal(a, b)
        else:  # atomics: as close as two plain runs are
            torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def _deterministic(run, op, plain):
    return all(torch.equal(a, b) for a, b in zip(run(op), plain))


@pytest.mark.parametrize("op", L.AUTOGRAD_OPS, ids=[op.__name__ for op in L.AUTOGRAD_OPS])
def test_a_library_op_runs_unchanged_and_every_launch_is_recorded(op, tmp_path):
    """fla's ops, Cut Cross-Entropy and SageAttention: compiled (and tuned) outside the session."""
    pytest.importorskip(L.MODULE_OF[op])
    L.run_autograd(op)  # compiles and autotunes, outside the session
    made, plain = _made(L.run_autograd, op)
    assert made, "no Triton kernel of the library ran: nothing to check"
    deterministic = _deterministic(L.run_autograd, op, plain)
    with proton_lite.start(str(tmp_path / op.__name__), quiet=True, formats=(), calibrate=False) as s:
        profiled = L.run_autograd(op)
    assert _recorded(s) == made, s.result.summary_line
    assert s.result.dropped == 0 and s.result.unmatched == 0 and "not in the profile" not in s.result.summary_line
    _same(profiled, plain, deterministic)
    _same(L.run_autograd(op), plain, deterministic)  # after stop


@pytest.mark.parametrize("op", L.GEMS_OPS, ids=[op.__name__ for op in L.GEMS_OPS])
def test_a_flaggems_op_first_compiled_in_a_session_is_recorded_and_runs_from_its_cache_after(op, tmp_path):
    pytest.importorskip("flag_gems")
    with proton_lite.start(str(tmp_path / op.__name__), quiet=True, formats=(), calibrate=False) as s:
        profiled = L.run_gems(op)  # the first call in this process: compiled (and tuned) in the session
    recorded = _recorded(s)
    assert recorded, s.result.summary_line
    assert s.result.dropped == 0 and "not in the profile" not in s.result.summary_line
    # after stop: FlagGems launches the instrumented binaries from its own cache
    made, after = _made(L.run_gems, op)
    assert set(made) == set(recorded), (made, recorded)
    deterministic = _deterministic(L.run_gems, op, after)
    _same(profiled, after, deterministic)
    inputs, fn = op(torch.Generator(device="cuda").manual_seed(7))
    reference = fn(*inputs)  # aten's own kernels: the result FlagGems is to compute
    _same(after, [reference.float() if reference.is_floating_point() else reference], False)


def test_flaggems_kernels_compiled_before_a_session_are_named_not_hidden(tmp_path):
    pytest.importorskip("flag_gems")
    op = L.gems_argmax  # an op no other test of this process runs
    plain = L.run_gems(op)  # compiled now, before the session: FlagGems keeps the plain binary
    made, _ = _made(L.run_gems, op)
    with proton_lite.start(str(tmp_path / "before"), quiet=True, formats=(), calibrate=False) as s:
        profiled = L.run_gems(op)
    _same(profiled, plain, True)
    line = s.result.summary_line
    assert "ran without instrumentation" in line, line
    for name in made:
        assert name in line, line


ZEROS_THEN_MM = """
import json, sys
from collections import Counter
import torch, flag_gems, proton_lite
from proton_lite.raw_format import read_raw
a, b = torch.randn(640, 384, device="cuda").half(), torch.randn(384, 896, device="cuda").half()
with proton_lite.start(sys.argv[1], quiet=True, formats=(), calibrate=False) as s:
    with flag_gems.use_gems():
        z = torch.zeros(4096, device="cuda")  # FlagGems' zeros_kernel, compiled here before any tuning
        c = torch.mm(a, b)  # tuned now: Triton's benchmark flushes the L2 cache with zero_()
torch.cuda.synchronize()
cap = read_raw(s.result.raw_path)
names = Counter(cap.kernels[launch.kernel_id]["name"] for launch in cap.launches)
print(json.dumps({"names": dict(names), "line": s.result.summary_line}))  # one line, whatever the stop line holds
assert torch.allclose(c.float(), (a.float() @ b.float()), rtol=2e-2, atol=2e-1) and not z.any()
"""


def test_flaggems_cache_flushes_of_a_kernel_compiled_before_the_tuning_are_trials(tmp_path):
    """The program's first zeros compile FlagGems' zeros_kernel before anything is tuned; the
    tuning that follows flushes the L2 cache with it hundreds of times: trials, not launches.
    In a fresh process, so that no earlier test compiled the kernel inside a benchmark."""
    pytest.importorskip("flag_gems")
    import os
    import subprocess
    import sys
    env = dict(os.environ, FLAGGEMS_CACHE_DIR=str(tmp_path / "flaggems"))  # no tuning kept from earlier tests
    done = subprocess.run([sys.executable, "-c", ZEROS_THEN_MM, str(tmp_path / "zeros_mm")], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    import json
    said = json.loads(done.stdout.strip().splitlines()[-1])
    counts, line = said["names"], said["line"]  # launches recorded, by kernel; the stop line
    assert counts.get("zeros_kernel") == 1, done.stdout[-2000:]
    assert "trial launches skipped" in line, line
