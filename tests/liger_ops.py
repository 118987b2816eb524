"""liger-kernel ops forward and backward, on fixed inputs, and the names of its Triton kernels:
shared by tests/test_gpu_liger.py and tests/benchmarks/library.py (GPU only)."""
import sys

import torch
import liger_kernel.transformers.functional as F

DEV = "cuda"
ROWS_SCALE = 1  # rows (tokens) times this: tests/benchmarks/fixed_cost.py runs the ops at production sizes


def R(n: int) -> int:
    return n * ROWS_SCALE


def _rand(*shape, g, dtype=torch.float32, grad=True):
    return torch.randn(*shape, device=DEV, generator=g, dtype=dtype).requires_grad_(grad)


def rms_norm(g):
    x, w = _rand(R(256), 1024, g=g), _rand(1024, g=g)
    return (x, w), lambda x, w: F.liger_rms_norm(x, w, 1e-6, in_place=False)


def layer_norm(g):
    x, w, b = _rand(R(256), 1024, g=g), _rand(1024, g=g), _rand(1024, g=g)
    return (x, w, b), lambda x, w, b: F.liger_layer_norm(x, w, b, 1e-6)


def swiglu(g):
    return (_rand(R(128), 2048, g=g), _rand(R(128), 2048, g=g)), F.liger_swiglu


def geglu(g):
    return (_rand(R(128), 2048, g=g), _rand(R(128), 2048, g=g)), F.liger_geglu


def rope(g):
    q, k = _rand(2, 8, R(128), 64, g=g), _rand(2, 4, R(128), 64, g=g)
    cos, sin = _rand(1, R(128), 64, g=g, grad=False), _rand(1, R(128), 64, g=g, grad=False)
    return (q, k), lambda q, k: torch.cat([t.flatten() for t in F.liger_rope(q, k, cos, sin)])


def cross_entropy(g):
    target = torch.randint(0, 4096, (R(256), ), device=DEV, generator=g)
    return (_rand(R(256), 4096, g=g), ), lambda logits: F.liger_cross_entropy(logits, target)


def fused_linear_cross_entropy(g):
    target = torch.randint(0, 2048, (R(256), ), device=DEV, generator=g)
    return (_rand(R(256), 512, g=g), _rand(2048, 512, g=g)), \
        lambda x, w: F.liger_fused_linear_cross_entropy(x, w, target)


def softmax(g):
    return (_rand(R(256), 1000, g=g), ), F.liger_softmax


def group_norm(g):
    x, w, b = _rand(R(8), 64, 256, g=g), _rand(64, g=g), _rand(64, g=g)
    return (x, w, b), lambda x, w, b: F.liger_group_norm(x, w, b, 64, 8, 1e-6)


def dyt(g):  # an autotuned op
    x, alpha, gamma, beta = _rand(R(256), 1024, g=g), _rand(1, g=g), _rand(1024, g=g), _rand(1024, g=g)
    return (x, alpha, gamma, beta), F.liger_dyt


def kl_div(g):
    p = torch.log_softmax(torch.randn(R(128), 1000, device=DEV, generator=g), -1).requires_grad_(True)
    q = torch.softmax(torch.randn(R(128), 1000, device=DEV, generator=g), -1)
    return (p, ), lambda p: F.liger_kl_div(p, q)


def jsd(g):
    p = torch.log_softmax(torch.randn(R(128), 1000, device=DEV, generator=g), -1).requires_grad_(True)
    q = torch.log_softmax(torch.randn(R(128), 1000, device=DEV, generator=g), -1)
    return (p, ), lambda p: F.liger_jsd(p, q)


OPS = [rms_norm, layer_norm, swiglu, geglu, rope, cross_entropy, fused_linear_cross_entropy, softmax, group_norm,
       dyt, kl_div, jsd]


def step(op):
    """Forward and backward of one op on fresh inputs: its output and its inputs' gradients."""
    inputs, fn = op(torch.Generator(device=DEV).manual_seed(7))
    out = fn(*inputs)
    grad = torch.ones_like(out) if out.dim() else None
    out.backward(grad)
    torch.cuda.synchronize()
    return [out.detach()] + [t.grad for t in inputs if t.requires_grad]


def liger_kernel_names() -> set[str]:
    """Names of every Triton kernel liger-kernel's ops define (under autotune/heuristics wrappers)."""
    from triton.runtime.jit import JITFunction
    names = set()
    for mod_name, mod in list(sys.modules.items()):
        if not mod_name.startswith("liger_kernel.ops") or mod is None:
            continue
        for value in list(vars(mod).values()):
            while value is not None and not isinstance(value, JITFunction) and hasattr(value, "fn"):
                value = value.fn
            if isinstance(value, JITFunction):
                names.add(value.__name__)
    return names
