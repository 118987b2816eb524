"""torchao's Triton kernels at realistic sizes, for tests/test_gpu_torchao.py: blockwise fp8
quantization and GEMM (a K loop per tile), the MoE training kernels' jagged per-group scales
(loops whose bounds each CTA loads from an offsets tensor: data-dependent trip counts, groups of
different sizes, one empty) and a 3-D transpose-and-cast, as torchao 0.18 has them.  Its int8
matmul is left out: torchao's own autotuner times every one of its configs, which took more than
five minutes on the H200 before the first call returned.  Each op takes a seeded generator and
returns a function that runs it; imports are inside, so that the module loads where torchao is
missing."""
import torch

DEV = "cuda"


def _fp8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else t


def blockwise_fp8_gemm(g):
    from torchao.kernel.blockwise_quantization import (blockwise_fp8_gemm as gemm, fp8_blockwise_act_quant,
                                                       fp8_blockwise_weight_quant)
    x = torch.randn(2048, 4096, device=DEV, generator=g, dtype=torch.bfloat16)
    w = torch.randn(3072, 4096, device=DEV, generator=g, dtype=torch.bfloat16)

    def run():
        xq, xs = fp8_blockwise_act_quant(x)
        wq, ws = fp8_blockwise_weight_quant(w)
        return [_fp8(xq), xs, _fp8(wq), ws, gemm(xq, xs, wq, ws)]
    return run


def _groups(g, total: int, n: int) -> torch.Tensor:
    """End offsets of n groups over total rows or columns, multiples of 16, of uneven sizes,
    one of them empty."""
    cuts = torch.sort(torch.randint(0, total // 16, (n - 1,), device=DEV, generator=g)).values * 16
    cuts[n // 2] = cuts[n // 2 - 1]  # an empty group
    return torch.cat([cuts, torch.tensor([total], device=DEV)]).to(torch.int32)


def jagged_rowwise_scales(g):
    from torchao.prototype.moe_training.kernels.jagged_float8_scales import triton_fp8_per_group_rowwise_scales
    x = torch.randn(4096, 8192, device=DEV, generator=g, dtype=torch.bfloat16)
    offsets = _groups(g, 8192, 8)

    def run():
        out, scales = triton_fp8_per_group_rowwise_scales(x, offsets)
        return [_fp8(out), scales]
    return run


def jagged_colwise_scales(g):
    from torchao.prototype.moe_training.kernels.jagged_float8_scales import triton_fp8_per_group_colwise_scales
    x = torch.randn(8192, 2048, device=DEV, generator=g, dtype=torch.bfloat16)
    offsets = _groups(g, 8192, 8)

    def run():
        out, scales = triton_fp8_per_group_colwise_scales(x, offsets)
        return [_fp8(out), scales]
    return run


def rowwise_transpose_rhs(g):
    from torchao.prototype.moe_training.kernels.float8_rowwise import triton_fp8_rowwise_3d_transpose_rhs
    w = torch.randn(8, 2048, 1024, device=DEV, generator=g, dtype=torch.bfloat16)

    def run():
        out, scales = triton_fp8_rowwise_3d_transpose_rhs(w)
        return [_fp8(out), scales]
    return run


OPS = [blockwise_fp8_gemm, jagged_rowwise_scales, jagged_colwise_scales, rowwise_transpose_rhs]


def run(op) -> list:
    out = op(torch.Generator(device=DEV).manual_seed(7))()
    torch.cuda.synchronize()
    return out
