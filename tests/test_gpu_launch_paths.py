"""Every way a library launches a Triton kernel, in a session, with kernels written here:
``JITFunction.run`` with pre-bound arguments, a ``CompiledKernel`` from ``warmup()`` or
``triton.compile`` launched directly, ``triton.autotune`` over ``triton.heuristics``, host
and device TMA descriptors, ``tl.range`` loops and 2-D grids.  For each: outputs unchanged,
launches recorded = launches made, every record kept."""
import functools
import sys

import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import proton_lite  # noqa: E402
import proton_lite.language as pl  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

M, N, BM, BN = 256, 512, 64, 64


@triton.jit
def scale_2d(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """A 2-D grid, each CTA two column tiles in a ``tl.range`` loop with a scope."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    for j in tl.range(0, 2):
        with pl.scope("tile"):
            rn = (tl.program_id(1) * 2 + j) * BN + tl.arange(0, BN)
            offs = rm[:, None] * N + rn[None, :]
            mask = (rm[:, None] < M) & (rn[None, :] < N)
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})], key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def tuned_add(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("add"):
        if EVEN:
            tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1)
        else:
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024})], key=["n"],
                 reset_to_zero=["total_ptr"], use_cuda_graph=True)
@triton.jit
def graph_tuned_sum(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    """Tuned with CUDA graphs (each config's timing runs are captured and replayed) and an
    output the tuner zeroes before each timing."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    with pl.scope("sum"):
        tl.atomic_add(total_ptr, tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0.0)))


@triton.jit
def tma_host(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    with pl.scope("tma"):
        m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
        out_desc.store([m, n], in_desc.load([m, n]) + 1)


@triton.jit
def tma_device(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    src = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    with pl.scope("tma"):
        m, n = tl.program_id(0) * BM, tl.program_id(1) * BN
        dst.store([m, n], src.load([m, n]) + 1)


def _x():
    return torch.rand(M, N, device="cuda", generator=torch.Generator(device="cuda").manual_seed(3))


def _session(tmp_path, name, launch, times=3):
    with proton_lite.start(str(tmp_path / name), quiet=True, formats=(), calibrate=False) as s:
        for _ in range(times):
            launch()
    torch.cuda.synchronize()
    return s.result


def _check(result, launches, ctas, records_per_cta):
    assert result.launches == launches, result.summary_line
    assert result.dropped == 0 and result.unmatched == 0, result.summary_line
    assert result.records == launches * ctas * records_per_cta, result.summary_line
    assert "warning" not in result.summary_line, result.summary_line


def test_a_2d_grid_with_a_tl_range_loop_through_run_with_prebound_arguments(tmp_path):
    x, out = _x(), torch.empty(M, N, device="cuda")
    grid = (M // BM, N // (2 * BN))
    bound = functools.partial(scale_2d.run, x, out, grid=grid, warmup=False)
    result = _session(tmp_path, "run", lambda: bound(M, N, BM=BM, BN=BN))
    assert torch.equal(out, x * 2)
    _check(result, 3, grid[0] * grid[1], 4 * 2 * 2)  # 4 warps x 2 iterations x enter/exit


def test_a_compiled_kernel_from_triton_compile_launched_directly(tmp_path):
    from triton.compiler import ASTSource
    x, out = _x(), torch.empty(M, N, device="cuda")
    grid = (M // BM, N // (2 * BN), 1)
    src = ASTSource(scale_2d, {"x_ptr": "*fp32", "out_ptr": "*fp32", "M": "i32", "N": "i32", "BM": "constexpr",
                               "BN": "constexpr"}, {"BM": BM, "BN": BN})
    with proton_lite.start(str(tmp_path / "compiled"), quiet=True, formats=(), calibrate=False) as s:
        ck = triton.compile(src)  # carries no mode: the session's is forced on it
        for _ in range(2):
            ck[grid](x, out, M, N, BM, BN)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2)
    _check(s.result, 2, grid[0] * grid[1], 16)
    out.zero_()
    ck[grid](x, out, M, N, BM, BN)  # after stop, launched from the "library's cache"
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2)


def test_autotune_over_heuristics_records_the_chosen_config_only(tmp_path):
    n = 1 << 16
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    with proton_lite.start(str(tmp_path / "tuned"), quiet=True, formats=(), calibrate=False) as s:
        for _ in range(23):
            tuned_add[lambda meta: (triton.cdiv(n, meta["BLOCK"]), )](x, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x + 1)
    block = tuned_add.best_config.kwargs["BLOCK"]
    assert s.result.launches == 23 and "trial launches skipped" in s.result.summary_line
    assert s.result.records == 23 * (n // block) * 4 * 2 and s.result.dropped == 0
    # the user's launches after the tuning walk no frames where the trial gate runs (3.12+)
    end = read_raw(s.result.raw_path).end
    assert end["trial_gate"] == (sys.version_info >= (3, 12)), end
    if end["trial_walks"] is not None:
        assert end["trial_walks"] <= 3 if end["trial_gate"] else end["trial_walks"] >= 20, end


def test_autotune_timed_in_cuda_graphs_records_the_chosen_config_only(tmp_path):
    n = 1 << 16
    x = torch.ones(n, device="cuda")
    total = torch.zeros(1, device="cuda")
    with proton_lite.start(str(tmp_path / "graph_tuned"), quiet=True, formats=(), calibrate=False) as s:
        for _ in range(3):
            total.zero_()
            graph_tuned_sum[lambda meta: (triton.cdiv(n, meta["BLOCK"]), )](x, total, n)
    torch.cuda.synchronize()
    assert total.item() == n
    block = graph_tuned_sum.best_config.kwargs["BLOCK"]
    res = s.result
    assert res.launches == 3 and res.dropped == 0 and res.unmatched == 0, res.summary_line
    assert res.records == 3 * (n // block) * 4 * 2, res.summary_line
    assert "CUDA graph" not in res.summary_line and "trial launches skipped" in res.summary_line, \
        res.summary_line  # the tuner's graphs are not the program's; its captured runs are trials


def test_host_tma_descriptors(tmp_path):
    from triton.tools.tensor_descriptor import TensorDescriptor
    x, out = _x(), torch.empty(M, N, device="cuda")
    src, dst = TensorDescriptor.from_tensor(x, [BM, BN]), TensorDescriptor.from_tensor(out, [BM, BN])
    grid = (M // BM, N // BN)
    result = _session(tmp_path, "tma_host", lambda: tma_host[grid](src, dst, BM=BM, BN=BN))
    assert torch.equal(out, x + 1)
    _check(result, 3, grid[0] * grid[1], 4 * 2)


def test_device_tma_descriptors_take_global_scratch_beside_the_profile_buffer(tmp_path):
    x, out = _x(), torch.empty(M, N, device="cuda")
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    grid = (M // BM, N // BN)
    result = _session(tmp_path, "tma_device", lambda: tma_device[grid](x, out, M, N, BM=BM, BN=BN))
    assert torch.equal(out, x + 1)
    _check(result, 3, grid[0] * grid[1], 4 * 2)
