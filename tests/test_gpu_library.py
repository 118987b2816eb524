"""Library launch paths on the GPU: cached compiled kernels across a session's start and stop,
and Gluon kernels (torch.compile: test_gpu_inductor.py; liger-kernel: test_gpu_liger.py)."""
import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import proton_lite  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
from proton_lite.runtime.after_stop import AFTER_STOP  # noqa: E402

import kernels as K  # noqa: E402

N = 1 << 16


def _inputs():
    g = torch.Generator(device="cuda").manual_seed(0)
    x, y = torch.rand(N, device="cuda", generator=g), torch.rand(N, device="cuda", generator=g)
    return x, y, torch.empty_like(x)


def _compiled(x, y, out):
    """What a library keeps: the CompiledKernel of one specialization (``warmup``), launched
    directly later with ``kernel[grid](*args)``."""
    return K.vector_add.warmup(x, y, out, N, BLOCK=1024, grid=(N // 1024, ))


def test_a_kernel_compiled_in_a_session_keeps_working_after_it_stops(tmp_path):
    x, y, out = _inputs()
    with proton_lite.start(str(tmp_path / "inside"), quiet=True, formats=()) as s:
        ck = _compiled(x, y, out)
        ck[(N // 1024, 1, 1)](x, y, out, N, 1024)
    torch.cuda.synchronize()
    assert s.result.launches == 1 and s.result.dropped == 0
    assert torch.equal(out, x + y)
    # after stop: the same instrumented binary, launched from the "library's cache"
    before = AFTER_STOP.launches
    out.zero_()
    for _ in range(3):
        ck[(N // 1024, 1, 1)](x, y, out, N, 1024)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y) and AFTER_STOP.launches == before + 3


def test_a_kernel_compiled_before_a_session_is_named_at_stop(tmp_path):
    x, y, out = _inputs()
    ck = _compiled(x, y, out)  # plain: no session yet
    with proton_lite.start(str(tmp_path / "before"), quiet=True, formats=()) as s:
        for _ in range(4):
            ck[(N // 1024, 1, 1)](x, y, out, N, 1024)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    assert s.result.launches == 0
    assert "4 launch(es) of 1 kernel(s) ran without instrumentation" in s.result.summary_line
    assert "vector_add (4)" in s.result.summary_line


def test_a_gluon_kernel_is_profiled_in_a_session(tmp_path):
    import gluon_kernels as G
    x = torch.rand(N, device="cuda")
    plain = torch.empty_like(x)
    G.gl_scale[(N // 128, )](x, plain, N, BLOCK=128, num_warps=4)
    out = torch.empty_like(x)
    with proton_lite.start(str(tmp_path / "gluon"), quiet=True, formats=()) as s:
        G.gl_scale[(N // 128, )](x, out, N, BLOCK=128, num_warps=4)
    torch.cuda.synchronize()
    assert torch.equal(out, plain) and torch.equal(out, x * 2)
    res = s.result
    assert res.launches == 1 and res.dropped == 0 and res.unmatched == 0
    assert res.records == (N // 128) * 4 * 4  # CTAs x warps x (2 scopes x 2 records)
