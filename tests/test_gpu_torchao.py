"""torchao's Triton kernels in a session, on the GPU: blockwise fp8 GEMM, the MoE kernels'
jagged per-group scales (loop bounds loaded from an offsets tensor) and a 3-D
transpose-and-cast.  Each runs unchanged, every launch of its kernels is recorded (counted
outside the session by CUPTI) with every CTA's lifetime, and it runs the same after the stop.
Skipped where torchao is not installed (its wheel travels in .whl/ to the GPU machine)."""
from collections import Counter

import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()
pytest.importorskip("torchao")

import proton_lite  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
import library_ops_more as M  # noqa: E402
import library_ops_torchao as T  # noqa: E402


def _made(op) -> tuple[Counter, list]:
    """Launches of Triton kernels in one call of the op, by CUPTI, and its outputs."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out = T.run(op)
    names = M.triton_kernel_names()
    made = Counter(e.name for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and e.name in names)
    return made, out


def _same(a_list, b_list, steady):
    """Each output of ``a_list`` equals ``b_list``'s where two plain runs agree (``steady``):
    the jagged rowwise kernel stores row r, column c at r + c (torchao 0.18 passes a row stride
    of 1 for a row-major output), so CTAs race on its fp8 output, never on its scales."""
    assert len(a_list) == len(b_list) == len(steady) and any(steady)
    for a, b, same in zip(a_list, b_list, steady):
        if same:
            assert torch.equal(a, b)


@pytest.mark.parametrize("op", T.OPS, ids=[op.__name__ for op in T.OPS])
def test_a_torchao_op_runs_unchanged_and_every_launch_and_cta_is_recorded(op, tmp_path):
    T.run(op)  # compiled and tuned outside the session
    made, plain = _made(op)
    assert made, "no Triton kernel of torchao ran: nothing to check"
    steady = [torch.equal(a, b) for a, b in zip(T.run(op), plain)]
    with proton_lite.start(str(tmp_path / op.__name__), quiet=True, formats=(), calibrate=False) as s:
        profiled = T.run(op)
    cap = read_raw(s.result.raw_path)
    assert Counter(cap.kernels[la.kernel_id]["name"] for la in cap.launches) == made, s.result.summary_line
    assert s.result.dropped == 0 and s.result.unmatched == 0 and "not in the profile" not in s.result.summary_line
    profile = decode(cap)
    launches = profile.launches
    ctas = Counter(profile.ctas["launch"].tolist())
    for row in launches:  # every CTA of every launch has its lifetime
        assert ctas[int(row["launch"])] == int(row["num_ctas"]), (profile.kernels[int(row["kernel"])].name, row)
    assert (profile.ctas["end_ns"] >= profile.ctas["start_ns"]).all()
    _same(profiled, plain, steady)
    _same(T.run(op), plain, steady)  # after stop
