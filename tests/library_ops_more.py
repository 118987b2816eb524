"""Ops of more production kernel libraries, on fixed inputs, for tests/test_gpu_libraries.py
(GPU only): flash-linear-attention (``fla``: chunked linear-attention kernels, autotuned, with
variable-length batches whose loops run over data-dependent chunk lists), FlagGems (aten ops
as Triton kernels, some generated as source at run time, launched from its own cache of
``CompiledKernel`` objects), Apple's Cut Cross-Entropy (a linear + cross-entropy whose forward
merges its CTAs' partial results under a spin lock) and SageAttention 1 (int8 attention:
quantization kernels, then ``tl.dot`` on int8 blocks).  They travel to the GPU machine as
wheels (tests/run_gpu.sh)."""
import gc

import torch
import torch.nn.functional as F

DEV = "cuda"


def _rand(*shape, g, dtype=torch.bfloat16, grad=True):
    return torch.randn(*shape, device=DEV, generator=g, dtype=dtype).requires_grad_(grad)


def _qkv(g, T=512, H=4, K=64):
    return [_rand(1, T, H, K, g=g) for _ in range(3)]


# --- flash-linear-attention: forward and backward ---------------------------------------------
# fla refuses the gated ops' backward with Triton 3.4-3.7.0 on Hopper (its chunk_bwd_dqkwg raises:
# "produces incorrect results", fla issue 640), so those run forward only where that holds.

def _forward_only(op):
    op.forward_only = True
    return op


@_forward_only
def fla_gated_delta_rule(g):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    q, k, v = _qkv(g)
    gate = F.logsigmoid(torch.randn(1, 512, 4, device=DEV, generator=g)).requires_grad_(True)
    beta = torch.rand(1, 512, 4, device=DEV, generator=g).sigmoid().requires_grad_(True)

    def fn(q, k, v, gate, beta):
        o, _ = chunk_gated_delta_rule(q, k, v, gate, beta, use_qk_l2norm_in_kernel=True)
        return o
    return (q, k, v, gate, beta), fn


@_forward_only
def fla_gated_delta_rule_varlen(g):
    """Three sequences of 100, 317 and 95 tokens packed in one batch: each CTA's loop runs over
    the chunks its sequence has, read from device memory."""
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    q, k, v = _qkv(g)
    gate = F.logsigmoid(torch.randn(1, 512, 4, device=DEV, generator=g)).requires_grad_(True)
    beta = torch.rand(1, 512, 4, device=DEV, generator=g).sigmoid().requires_grad_(True)
    cu = torch.tensor([0, 100, 417, 512], device=DEV, dtype=torch.long)

    def fn(q, k, v, gate, beta):
        o, _ = chunk_gated_delta_rule(q, k, v, gate, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
        return o
    return (q, k, v, gate, beta), fn


@_forward_only
def fla_simple_gla(g):
    from fla.ops.simple_gla import chunk_simple_gla
    q, k, v = _qkv(g)
    gate = F.logsigmoid(torch.randn(1, 512, 4, device=DEV, generator=g)).requires_grad_(True)

    def fn(q, k, v, gate):
        o, _ = chunk_simple_gla(q, k, v, g=gate)
        return o
    return (q, k, v, gate), fn


def fla_parallel_attn(g):
    from fla.ops.attn import parallel_attn
    q, k, v = _qkv(g, T=1024, K=128)
    return (q, k, v), lambda q, k, v: parallel_attn(q, k, v)


def fla_rms_norm_gated(g):
    from fla.modules import FusedRMSNormGated
    torch.manual_seed(7)  # the module's parameters
    norm = FusedRMSNormGated(256).to(DEV)
    x, gate = _rand(2048, 256, g=g, dtype=torch.float32), _rand(2048, 256, g=g, dtype=torch.float32)
    return (x, gate), lambda x, gate: norm(x, gate)


def fla_short_conv(g):
    from fla.modules import ShortConvolution
    torch.manual_seed(7)  # the module's weights
    conv = ShortConvolution(256, 4).to(DEV)
    x = _rand(2, 512, 256, g=g, dtype=torch.float32)
    return (x, ), lambda x: conv(x)[0]


FLA_OPS = [fla_gated_delta_rule, fla_gated_delta_rule_varlen, fla_simple_gla, fla_parallel_attn,
           fla_rms_norm_gated, fla_short_conv]


# --- FlagGems: aten ops through ``flag_gems.use_gems()``, forward --------------------------------

def _f32(g, *shape):
    return torch.randn(*shape, device=DEV, generator=g)


def gems_mm(g):
    return (_f32(g, 1024, 768).half(), _f32(g, 768, 512).half()), torch.mm


def gems_softmax(g):
    return (_f32(g, 512, 3000), ), lambda x: torch.softmax(x, -1)


def gems_layer_norm(g):
    x, w, b = _f32(g, 1024, 1536), _f32(g, 1536), _f32(g, 1536)
    return (x, w, b), lambda x, w, b: F.layer_norm(x, (1536, ), w, b)


def gems_pointwise(g):  # kernels FlagGems generates as source at run time
    x, y = _f32(g, 4096, 1000), _f32(g, 1000)
    return (x, y), lambda x, y: F.gelu(x * y + 1.0)


def gems_cumsum(g):  # a scan of several launches
    return (_f32(g, 64, 100_000), ), lambda x: torch.cumsum(x, 1)


def gems_topk(g):
    return (_f32(g, 256, 4096), ), lambda x: torch.topk(x, 16, dim=-1).values


def gems_nonzero(g):  # output sized by the data
    return ((_f32(g, 300_000) > 0.5), ), lambda m: torch.nonzero(m)


def gems_cross_entropy(g):
    target = torch.randint(0, 8000, (512, ), device=DEV, generator=g)
    return (_f32(g, 512, 8000), ), lambda x: F.cross_entropy(x, target)


def gems_argmax(g):  # for the test of kernels compiled before a session only
    return (_f32(g, 1024, 5000), ), lambda x: torch.argmax(x, -1)


# --- Cut Cross-Entropy (forward and backward) and SageAttention 1 (inference only) ------------

def cce_linear_cross_entropy(g):
    """2,048 tokens x a vocabulary of 16,384: the forward's CTAs each take a block of the
    vocabulary and merge their log-sum-exp under a lock they spin on (``atomic_cas``)."""
    from cut_cross_entropy import linear_cross_entropy
    e, c = _rand(2048, 512, g=g), _rand(16384, 512, g=g)
    targets = torch.randint(0, 16384, (2048, ), device=DEV, generator=g)
    return (e, c), lambda e, c: linear_cross_entropy(e, c, targets)


def _no_backward(op):
    op.no_backward = True
    return op


def _sage(g, head_dim, causal):
    from sageattention import sageattn
    q, k, v = (torch.randn(2, 8, 1024, head_dim, device=DEV, generator=g, dtype=torch.float16) for _ in range(3))
    return (q, k, v), lambda q, k, v: sageattn(q, k, v, tensor_layout="HND", is_causal=causal)


@_no_backward
def sage_attention(g):
    return _sage(g, 128, False)


@_no_backward
def sage_attention_causal(g):  # the causal kernel's loop stops at each block's diagonal
    return _sage(g, 64, True)


@_no_backward
def sage_attention_hd96(g):  # its own quantization and attention kernels
    return _sage(g, 96, False)


MORE_OPS = [cce_linear_cross_entropy, sage_attention, sage_attention_causal, sage_attention_hd96]
AUTOGRAD_OPS = FLA_OPS + MORE_OPS  # run by run_autograd, each needing its library
MODULE_OF = {**{op: "fla.ops" for op in FLA_OPS}, cce_linear_cross_entropy: "cut_cross_entropy",
             sage_attention: "sageattention", sage_attention_causal: "sageattention",
             sage_attention_hd96: "sageattention"}


GEMS_OPS = [gems_mm, gems_softmax, gems_layer_norm, gems_pointwise, gems_cumsum, gems_topk, gems_nonzero,
            gems_cross_entropy]


def run_autograd(op):
    """Forward and backward on fresh inputs: the output and the inputs' gradients (the output
    alone for an op without a backward, or whose backward its library refuses here)."""
    inputs, fn = op(torch.Generator(device=DEV).manual_seed(7))
    if getattr(op, "no_backward", False) or getattr(op, "forward_only", False) and _gated_backward_refused():
        with torch.no_grad():
            out = fn(*inputs)
        torch.cuda.synchronize()
        return [out.float()]
    out = fn(*inputs)
    out.backward(torch.ones_like(out))
    torch.cuda.synchronize()
    return [out.detach().float()] + [t.grad.float() for t in inputs if t.requires_grad]


def _gated_backward_refused() -> bool:
    import triton
    major, minor = (int(p) for p in triton.__version__.split(".")[:2])
    return torch.cuda.get_device_capability()[0] == 9 and (3, 4) <= (major, minor) < (3, 8)


def run_gems(op):
    """The op's forward with FlagGems' kernels in place of aten's."""
    import flag_gems
    inputs, fn = op(torch.Generator(device=DEV).manual_seed(7))
    with flag_gems.use_gems():
        out = fn(*inputs)
    torch.cuda.synchronize()
    return [out.float() if out.is_floating_point() else out]


def live_instances(cls) -> list:
    """Every object of class ``cls`` alive in the process (the garbage collector's view)."""
    found = []
    for o in gc.get_objects():
        try:
            if isinstance(o, cls):
                found.append(o)
        except ReferenceError:  # a weak proxy whose object is gone (SageAttention's imports, torch.compile leave some)
            continue
    return found


def triton_kernel_names() -> set[str]:
    """Names of every Triton JIT function alive in the process: the libraries' kernels, those
    FlagGems generated at run time included (CUPTI names a Triton kernel by its function)."""
    from triton.runtime.jit import JITFunction
    return {o.__name__ for o in live_instances(JITFunction)}
