"""Whole torch.compile programs in a session, on the GPU (single functions:
test_gpu_inductor.py): a training step whose backward Inductor compiles too, a function
compiled with dynamic shapes and called at several sizes, a compiled AdamW step (Inductor's
horizontally fused kernels over every parameter) FlexAttention (Inductor's attention
templates, forward and backward, whose loops skip the blocks a causal mask leaves out) and
cooperative reductions (a grid-wide barrier in the kernel, launched cooperatively).  Every Triton launch CUPTI counts in a call
outside the session is recorded in it, and the results match the same program run plain."""
import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import proton_lite  # noqa: E402
# Inductor's launches counted by CUPTI, those recorded, and fresh caches: as for single functions
from test_gpu_inductor import _recorded, _triton_launches, caches  # noqa: E402,F401


class Block(torch.nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(Block(), Block()).cuda()


def _training(model, x):
    """A closure: one forward and backward of the compiled model; returns loss and grads."""
    compiled = torch.compile(model)

    def step():
        model.zero_grad(set_to_none=True)
        loss = compiled(x).square().mean()
        loss.backward()
        return [loss.detach()] + [p.grad.clone() for p in model.parameters()]
    return step


def _check(step, tmp_path, name):
    """Warm (compile outside), count launches, then run in a session: same launches, close results."""
    step()
    made = _triton_launches(step, ())
    plain = step()
    assert made, "Inductor generated no Triton kernel: nothing to check"
    with proton_lite.start(str(tmp_path / name), quiet=True, formats=(), calibrate=False) as s:
        profiled = step()
    torch.cuda.synchronize()
    assert _recorded(s.result) == made, s.result.summary_line
    assert s.result.dropped == 0 and "not in the profile" not in s.result.summary_line, s.result.summary_line
    for a, b in zip(profiled, plain):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    return s.result


def test_a_compiled_training_step_records_its_forward_and_backward_kernels(tmp_path, caches):
    x = torch.randn(64, 128, 256, device="cuda")
    _check(_training(_model(), x), tmp_path, "train")


def test_dynamic_shapes_at_three_sizes(tmp_path, caches):
    fn = torch.compile(lambda x, w: torch.softmax(x @ w, -1).sum(0) + torch.tanh(x).mean(0), dynamic=True)
    w = torch.randn(96, 96, device="cuda")
    xs = [torch.randn(n, 96, device="cuda") for n in (37, 512, 3001)]

    def step():
        return [fn(x, w) for x in xs]
    _check(step, tmp_path, "dynamic")


def test_a_compiled_adamw_step_over_many_parameters(tmp_path, caches):
    model = _model(1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(32, 256, device="cuda")
    model(x).square().mean().backward()  # gradients to step with
    compiled_step = torch.compile(opt.step)
    compiled_step()  # compiles and creates the optimizer's state
    tensors = [p for p in model.parameters()] + [t for st in opt.state.values() for t in st.values()
                                                 if torch.is_tensor(t)]
    start = [t.detach().clone() for t in tensors]

    def step():
        with torch.no_grad():  # the same parameters and moments for every call
            for t, t0 in zip(tensors, start):
                t.copy_(t0)
        compiled_step()
        return [p.detach().clone() for p in model.parameters()]
    _check(step, tmp_path, "adamw")


def test_flex_attention_forward_and_backward_with_a_causal_block_mask(tmp_path, caches):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, H, S, D = 2, 4, 1024, 64
    g = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g, requires_grad=True) for _ in range(3))
    mask = create_block_mask(lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, None, None, S, S, device="cuda")
    attend = torch.compile(flex_attention)

    def step():
        for t in (q, k, v):
            t.grad = None
        out = attend(q, k, v, block_mask=mask)
        out.square().mean().backward()
        return [out.detach()] + [t.grad.clone() for t in (q, k, v)]
    result = _check(step, tmp_path, "flex")
    names = _recorded(result)
    assert any(name.startswith("triton_tem_fused") for name in names), names  # the attention templates


def test_cooperative_reductions_with_their_grid_barrier(tmp_path, caches):
    import torch._inductor.config as config
    from torch._inductor.utils import run_and_get_code
    x = torch.randn(16, 1 << 20, device="cuda")
    settings = {"triton.cooperative_reductions": True, "triton.force_cooperative_reductions": True}
    with config.patch(settings):
        fn = torch.compile(lambda x: (x.sum(-1), x.abs().amax(-1)))
        _, code = run_and_get_code(fn, x)
        assert any("x_grid_barrier" in c for c in code), "Inductor made no cooperative reduction: nothing to check"

        def step():
            return list(fn(x))
        _check(step, tmp_path, "coop")
