"""Warp-specialized kernels on the GPU: every warp that runs writes inside the buffer.

Triton runs ``tl.range(..., warp_specialize=True)`` loops with more warps than requested
(4 asked, 12 run on the H100). ``tests/run_gpu.sh`` also runs these under
compute-sanitizer's memcheck with exact-size buffers (``PROTON_LITE_EXACT_BUFFERS=1``).
"""
import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import triton  # noqa: E402

import proton_lite  # noqa: E402
from proton_lite.decode import cta_block_dtype, decode  # noqa: E402
from proton_lite.layout import COPY_SCOPE, CTA_MAGIC, LAUNCH_PREFIX_BYTES, UNIT_MAGIC, BufferLayout, read_capacity_word  # noqa: E402
from proton_lite.passes.config import CALIBRATION_KERNEL  # noqa: E402
from proton_lite.passes.kernel_facts import ProtonLiteWarning  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import ws_kernels as W  # noqa: E402


def _scratch(size, align, stream):  # TMA descriptors built in the kernel need global scratch
    return torch.empty(size, dtype=torch.int8, device="cuda")


def run_ws(case, scopes=True, ws=True):
    """Launch a warp-specialized kernel (``ws=False``: its unspecialized twin); return (output,
    torch reference, grid)."""
    triton.set_allocator(_scratch)
    g = torch.Generator(device="cuda").manual_seed(0)
    if case == "ws_matmul":
        M, N, K = 512, 384, 1024
        a = torch.randn(M, K, device="cuda", dtype=torch.float16, generator=g)
        b = torch.randn(N, K, device="cuda", dtype=torch.float16, generator=g)
        c = torch.empty(M, N, device="cuda", dtype=torch.float16)
        grid = ((M // 128) * (N // 128), )
        W.ws_matmul[grid](a, b, c, M, N, K, SCOPES=scopes, WS=ws, num_warps=4, **W.WS_MATMUL_CONST)
        return c, (a.float() @ b.float().T).half(), grid
    n_ctx, d = 1024, 64
    q, k, v = (torch.randn(n_ctx, d, device="cuda", dtype=torch.float16, generator=g) / 4 for _ in range(3))
    o = torch.empty_like(q)
    grid = (n_ctx // W.WS_ATTENTION_CONST["BM"], )
    W.ws_attention[grid](q, k, v, o, n_ctx, SCOPES=scopes, WS=ws, num_warps=4, **W.WS_ATTENTION_CONST)
    ref = torch.softmax(q.float() @ k.float().T, dim=1) @ v.float()
    return o, ref.half(), grid


# where each scope's work lies (tests/ws_kernels.py): the loads' scopes must land on the partition
# that issues the TMA loads, the dots' and the softmax's on the partitions that run the MMAs
LOAD_SCOPES = {"ws_matmul": ["load"], "ws_attention": ["qk", "pv"]}
MMA_SCOPES = {"ws_matmul": ["mma"], "ws_attention": ["qk", "softmax", "pv"]}
AFTER_LOOP = {"ws_matmul": ["epilogue"], "ws_attention": []}
TRIPS = 16  # K / BK = 1024 / 64 for the matmul, n_ctx / BN = 1024 / 64 for the attention loop


def expected_records_per_warp(entry, case):
    """Records of a warp that runs every scope of the loop: 2 per scope per iteration, 2 per
    scope after it (the bound proton-lite reads from the TTIR, before Triton's split)."""
    loop = [s for s in entry["scopes"] if s not in AFTER_LOOP[case] and s != COPY_SCOPE]
    own = 2 * TRIPS * len(loop) + 2 * len(AFTER_LOOP[case])
    return BufferLayout.from_json(entry["layout"]).records_with_copies(own)  # and the block copies' own pairs


@pytest.mark.parametrize("case", ["ws_matmul", "ws_attention"])
def test_warp_specialized_loops_keep_their_scopes_on_the_partition_that_ran_them(case, tmp_path):
    """Triton splits the loop into a TMA-load partition and MMA partitions; every scope of the
    loop is recorded by exactly the warps of the partitions that do its work, once per
    iteration, every warp inside its buffer (this test also runs under compute-sanitizer
    with exact-size buffers), the output unchanged."""
    plain, ref, grid = run_ws(case)
    unspecialized, _, _ = run_ws(case, scopes=False, ws=False)
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ProtonLiteWarning)  # no scope may be reported lost
        with proton_lite.start(str(tmp_path / case), quiet=True, formats=()) as session:
            out, _, _ = run_ws(case)
    torch.cuda.synchronize()
    if case == "ws_matmul":
        torch.testing.assert_close(plain.float(), ref.float(), atol=0.05, rtol=0.05)
        assert torch.equal(out, plain), f"{case}: instrumented output differs"
        # and from the unspecialized loop: the same tiles and K order (fp16 output; the
        # partitions' MMAs are split by rows, so allow an ulp)
        torch.testing.assert_close(out.float(), unspecialized.float(), atol=1e-2, rtol=1e-3)
    else:
        # Triton 3.6 computes NaNs at random when it warp-specializes an attention-like loop on
        # the H100, without proton-lite too (2026-11-25: 1 to 6 runs of 6 for every block shape
        # and softmax variant tried; under compute-sanitizer most rows): compare the rows it
        # computed with the reference; the buffer checks below hold whatever it computed
        for o in (plain, out):
            finite = o.isfinite().all(1)
            torch.testing.assert_close(o[finite].float(), ref[finite].float(), atol=0.05, rtol=0.05)
            torch.testing.assert_close(o[finite].float(), unspecialized[finite].float(), atol=1e-2, rtol=1e-2)
    result = session.result
    assert result.launches == 1 and result.dropped == 0 and result.unmatched == 0, result.summary_line
    assert "warning" not in result.summary_line
    cap = read_raw(result.raw_path)
    (kid, kmeta), = [(k, m) for k, m in cap.kernels.items() if m["name"] != CALIBRATION_KERNEL]
    entry = kmeta["proton_lite"]
    assert entry["lost_scopes"] is None
    layout = BufferLayout.from_json(entry["layout"])
    assert kmeta["num_warps"] > 4 and layout.num_warps == kmeta["num_warps"]  # sized for the warps that run
    (launch, ) = [la for la in cap.launches if la.kernel_id == kid]
    n_ctas = int(np.prod(grid))
    assert layout.sized_at_launch  # the loop's trip count comes from K / n_ctx: sized per launch
    capacity = read_capacity_word(int(np.frombuffer(launch.buffer, "<u4", 1)[0]))
    assert capacity == expected_records_per_warp(entry, case)  # the TTIR's bound: exactly what the busiest warp writes
    layout = layout.with_capacity(capacity)
    blocks = np.frombuffer(launch.buffer[LAUNCH_PREFIX_BYTES:], dtype=cta_block_dtype(layout), count=n_ctas)
    assert len(launch.buffer) == LAUNCH_PREFIX_BYTES + n_ctas * layout.stride
    assert (blocks["magic"] == CTA_MAGIC).all()
    assert (blocks["unit"]["magic"] == UNIT_MAGIC).all()  # every warp reached the end, in its own slot

    table = entry["partitions"]
    loaders = [p for p in table if "TMA loads" in (p["role"] or "")]
    mmas = [p for p in table if "MMA" in (p["role"] or "")]
    assert loaders and mmas
    for p in loaders:
        assert set(LOAD_SCOPES[case]) <= set(p["scopes"]), table
    for p in mmas:
        assert set(MMA_SCOPES[case] + AFTER_LOOP[case]) <= set(p["scopes"]), table
    # what every warp should have recorded, from the table: TRIPS intervals of each loop scope
    # placed in its partition, one of each scope after the loop, nothing else
    own = [name for name in entry["scopes"] if name != COPY_SCOPE]  # (staging in blocks: the copies' own last)
    expected = np.zeros((layout.num_warps, len(own)), np.int64)
    for p in table:
        for name in p["scopes"]:
            expected[p["first_warp"]:p["first_warp"] + p["warps"], own.index(name)] = (
                1 if name in AFTER_LOOP[case] else TRIPS)
    prof = decode(cap)
    assert len(prof.ctas) == n_ctas and (prof.ctas["finished_units"] == layout.units).all()
    iv = prof.intervals
    scopes = prof.kernels[0].scopes
    got = np.zeros((n_ctas, layout.num_warps, len(scopes)), np.int64)
    np.add.at(got, (iv["cta"], iv["unit"], iv["scope"]), 1)
    copies = got[:, :, scopes.index(COPY_SCOPE)] if COPY_SCOPE in scopes else 0
    assert (blocks["unit"]["count"] == 2 * expected.sum(1)[None] + 2 * copies).all(), \
        np.unique(blocks["unit"]["count"])
    order = [scopes.index(name) for name in own]
    assert (got[:, :, order] == expected[None]).all()
    assert (iv["end_ns"] >= iv["start_ns"]).all()


def test_gluon_warp_specialized_partitions_record_on_their_own_warps(tmp_path):
    """gl.warp_specialize: the default partition's scope on warps 0-3, the worker's scope (in
    a loop of ROUNDS) on warps 4-5, nothing on the padding warps 6-7; every warp inside its
    buffer (this test also runs under compute-sanitizer), and each warp's track named after
    its partition."""
    import gluon_kernels as G
    n, block, rounds = 1 << 16, 128, 3
    x = torch.rand(n, device="cuda")
    y, z = torch.empty_like(x), torch.empty_like(x)
    grid = (n // block, )
    with proton_lite.start(str(tmp_path / "glws"), quiet=True, formats=("chrome", )) as session:
        G.gl_ws[grid](x, y, z, n, BLOCK=block, ROUNDS=rounds, num_warps=4)
        torch.cuda.synchronize()
    torch.testing.assert_close(y, x * 2)
    torch.testing.assert_close(z, (x + 1) * rounds)
    result = session.result
    assert result.launches == 1 and result.dropped == 0 and result.unmatched == 0, result.summary_line
    cap = read_raw(result.raw_path)
    (kid, kmeta), = [(k, m) for k, m in cap.kernels.items() if m["name"] != CALIBRATION_KERNEL]
    table = kmeta["proton_lite"]["partitions"]
    assert [(p["first_warp"], p["warps"]) for p in table] == [(0, 4), (4, 2), (6, 2)]
    layout = BufferLayout.from_json(kmeta["proton_lite"]["layout"])
    assert layout.num_warps == kmeta["num_warps"] == 8
    # (Gluon compiles no TTIR, so a loop's trip count is not read at compile time: the kernel
    # records through a launch pool, and the decoder reads its blocks)
    prof = decode(cap)
    assert len(prof.ctas) == grid[0] and (prof.ctas["finished_units"] == layout.units).all()
    scopes = prof.kernels[0].scopes
    iv = prof.intervals
    per_unit = np.bincount(iv["unit"][iv["scope"] == scopes.index("scale")], minlength=8)
    assert per_unit.tolist() == [grid[0]] * 4 + [0] * 4  # one per CTA, default warps only
    per_unit = np.bincount(iv["unit"][iv["scope"] == scopes.index("shift")], minlength=8)
    assert per_unit.tolist() == [0] * 4 + [grid[0] * rounds] * 2 + [0] * 2  # the worker's warps, every round
    trace = open(result.trace_paths[0]).read()
    assert "warp 4 · partition 0 (loads" in trace and "warp 0 · default (loads" in trace
