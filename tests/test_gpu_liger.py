"""A production kernel library in a session, on the GPU: liger-kernel's ops forward and
backward run unchanged (bit-identical where the op is deterministic) and every launch of its
Triton kernels is recorded.  Launches made are counted outside the session by CUPTI
(torch.profiler); liger-kernel travels to the GPU machine as a wheel (tests/run_gpu.sh)."""
from collections import Counter

import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()
pytest.importorskip("liger_kernel.transformers.functional")

import proton_lite  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
from liger_ops import OPS, liger_kernel_names, step  # noqa: E402


def _launches_made(op) -> tuple[Counter, list]:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        result = step(op)
    names = liger_kernel_names()
    made = Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                   and e.name in names)
    return made, result


@pytest.mark.parametrize("op", OPS, ids=[op.__name__ for op in OPS])
def test_a_liger_op_runs_unchanged_and_every_launch_is_recorded(op, tmp_path):
    first = step(op)  # compiles and autotunes, outside the session
    made, plain = _launches_made(op)
    assert made, "no Triton kernel of liger-kernel ran: nothing to check"
    deterministic = all(torch.equal(a, b) for a, b in zip(first, plain))
    with proton_lite.start(str(tmp_path / op.__name__), quiet=True, formats=(), calibrate=False) as s:
        profiled = step(op)
    cap = read_raw(s.result.raw_path)
    recorded = Counter(cap.kernels[launch.kernel_id]["name"] for launch in cap.launches)
    assert recorded == made, s.result.summary_line
    assert s.result.dropped == 0 and "not in the profile" not in s.result.summary_line
    for a, b in zip(profiled, plain):
        if deterministic:
            assert torch.equal(a, b)
        else:  # atomics in its backward: as close as two plain runs are
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    again = step(op)  # after stop: the kernels compiled in the session still run
    for a, b in zip(again, plain):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
