"""Kernel shapes users run that the other GPU tests lack (tests/unusual_kernels.py): a spin
lock in a data-dependent ``while`` loop, CTAs that return early and grids of none,
programmatic dependent launch, two-CTA clusters, 32-warp CTAs, device asserts and inline PTX,
noinline helpers, device printf, a grid-wide barrier in a cooperative launch, CTAs that live
for seconds, a MoE GEMM routed by loaded expert ids and a paged-KV decode step.  Outputs as
plain, nothing dropped, every CTA's lifetime, and exactly the slices each warp's loop trips
call for."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import proton_lite  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.passes.config import CALIBRATION_KERNEL  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import unusual_kernels as U  # noqa: E402


def _profile(session, kernel_name):
    """The decoded profile, the kernel's index and its launches."""
    res = session.result
    assert res.dropped == 0 and res.unmatched == 0, res.summary_line
    prof = decode(read_raw(res.raw_path))
    k = [i for i, kern in enumerate(prof.kernels) if kern.name == kernel_name and kern.name != CALIBRATION_KERNEL][0]
    return prof, k, prof.launches[prof.launches["kernel"] == k]


def _slices(prof, k, launch, scope) -> np.ndarray:
    """(CTAs, warps) array: the slices of ``scope`` each warp of each CTA of ``launch`` has."""
    kern = prof.kernels[k]
    iv = prof.intervals[(prof.intervals["launch"] == launch["launch"])
                        & (prof.intervals["scope"] == kern.scopes.index(scope))]
    out = np.zeros((int(launch["num_ctas"]), kern.num_warps // kern.unit_warps), np.int64)
    np.add.at(out, (iv["cta"].astype(np.int64), iv["unit"].astype(np.int64)), 1)
    return out


def _every_cta_finished(prof, launch):
    ctas = prof.ctas[prof.ctas["launch"] == launch["launch"]]
    assert launch["missing_ctas"] == 0 and len(ctas) == launch["num_ctas"]
    assert (ctas["end_ns"] > ctas["start_ns"]).all()


def test_a_spin_lock_loop_keeps_one_slice_per_spin(tmp_path):
    ctas, block, groups = 512, 256, 4
    x = torch.randn(ctas, block, device="cuda")

    def run():
        acc = torch.zeros(groups, block, device="cuda")
        lock = torch.zeros(groups, dtype=torch.int32, device="cuda")
        spins = torch.zeros(ctas, dtype=torch.int32, device="cuda")
        U.locked_accumulate[(ctas, )](x, acc, lock, spins, BLOCK=block, GROUPS=groups, num_warps=4)
        return acc, lock, spins

    expected = x.view(ctas // groups, groups, block).sum(0)
    with proton_lite.start(str(tmp_path / "lock"), quiet=True, formats=()) as s:
        acc, lock, spins = run()
    torch.cuda.synchronize()
    torch.testing.assert_close(acc, expected, rtol=1e-4, atol=1e-4)  # the order of the adds varies
    assert (lock == 0).all()
    prof, k, (launch, ) = _profile(s, "locked_accumulate")
    _every_cta_finished(prof, launch)
    per_cta = spins.cpu().numpy()
    assert per_cta.sum() > 0, "no CTA ever waited for the lock: the loop was not exercised"
    got = _slices(prof, k, launch, "spin")
    assert (got == per_cta[:, None]).all(), np.flatnonzero((got != per_cta[:, None]).any(1))[:5]
    for scope in ("load", "acquire", "update"):
        assert (_slices(prof, k, launch, scope) == 1).all(), scope


def test_ctas_that_return_early_have_lifetimes_and_no_scopes(tmp_path):
    rows, grid, block = 1000, 1024, 256
    x = torch.randn(rows, block, device="cuda")
    out = torch.zeros(rows, block, device="cuda")
    with proton_lite.start(str(tmp_path / "early"), quiet=True, formats=()) as s:
        U.early_return[(grid, )](x, out, rows, BLOCK=block, num_warps=4)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2.0)
    prof, k, (launch, ) = _profile(s, "early_return")
    _every_cta_finished(prof, launch)
    got = _slices(prof, k, launch, "row")
    assert (got[:rows] == 1).all() and (got[rows:] == 0).all()


def test_a_kernel_launched_with_programmatic_dependent_launch(tmp_path):
    n, block = 1 << 20, 256
    x = torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton_cdiv(n, block), )
    with proton_lite.start(str(tmp_path / "pdl"), quiet=True, formats=()) as s:
        for _ in range(3):
            U.plain_count[grid](x, n, BLOCK=block, num_warps=4)
            U.pdl_scale[grid](x, out, n, BLOCK=block, num_warps=4, launch_pdl=True)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 3.0)
    assert s.result.launches == 6
    prof, k, launches = _profile(s, "pdl_scale")
    assert len(launches) == 3
    for launch in launches:
        _every_cta_finished(prof, launch)
        assert (_slices(prof, k, launch, "scale") == 1).all()


def test_a_two_cta_cluster_kernel_records_both_ctas_of_each_cluster(tmp_path):
    n, block = 1 << 20, 256
    x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
    out = torch.empty_like(x)
    programs = triton_cdiv(n, block)
    with proton_lite.start(str(tmp_path / "cluster"), quiet=True, formats=()) as s:
        U.cluster_add[(programs, )](x, y, out, n, BLOCK=block, num_warps=4, num_ctas=2)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)
    prof, k, (launch, ) = _profile(s, "cluster_add")
    _every_cta_finished(prof, launch)
    assert launch["num_ctas"] == 2 * programs
    assert (_slices(prof, k, launch, "add") == 1).all()


def triton_cdiv(a, b):
    return (a + b - 1) // b


def test_a_kernel_of_32_warps_records_every_warp(tmp_path):
    rows, cols = 264, 8000
    x = torch.randn(rows, cols, device="cuda")
    plain = torch.empty_like(x)
    U.wide_rows[(rows, )](x, plain, cols, BLOCK=8192, num_warps=32)
    out = torch.empty_like(x)
    with proton_lite.start(str(tmp_path / "wide"), quiet=True, formats=()) as s:
        U.wide_rows[(rows, )](x, out, cols, BLOCK=8192, num_warps=32)
    torch.cuda.synchronize()
    assert torch.equal(out, plain)
    prof, k, (launch, ) = _profile(s, "wide_rows")
    _every_cta_finished(prof, launch)
    for scope in ("norm", "store"):
        got = _slices(prof, k, launch, scope)
        assert got.shape == (rows, 32) and (got == 1).all(), scope


def test_device_asserts_and_inline_ptx_in_scopes(tmp_path):
    n, block = 1 << 18, 256
    x = torch.rand(n, device="cuda") + 0.5
    out = torch.empty_like(x)
    with proton_lite.start(str(tmp_path / "debug"), quiet=True, formats=()) as s:
        U.asserted_asm[(n // block, )](x, out, n, BLOCK=block, num_warps=4, debug=True)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2.0)
    prof, k, (launch, ) = _profile(s, "asserted_asm")
    _every_cta_finished(prof, launch)
    for scope in ("check", "asm"):
        assert (_slices(prof, k, launch, scope) == 1).all(), scope


def test_launches_of_an_empty_grid_between_others(tmp_path):
    """Data-dependent programs launch grids of zero CTAs (an expert with no tokens)."""
    rows, block = 100, 256
    x = torch.randn(rows, block, device="cuda")
    out = torch.zeros(rows, block, device="cuda")
    with proton_lite.start(str(tmp_path / "empty"), quiet=True, formats=()) as s:
        U.early_return[(rows, )](x, out, rows, BLOCK=block, num_warps=4)
        U.early_return[(0, )](x, out, 0, BLOCK=block, num_warps=4)
        U.early_return[(rows, )](x, out, rows, BLOCK=block, num_warps=4)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2.0)
    prof, k, launches = _profile(s, "early_return")
    full = launches[launches["num_ctas"] > 0]
    assert len(full) == 2 and s.result.launches <= 3, s.result.summary_line
    for launch in full:
        _every_cta_finished(prof, launch)
        assert (_slices(prof, k, launch, "row") == 1).all()
    assert "warning" not in s.result.summary_line, s.result.summary_line


def test_kernels_calling_a_noinline_helper_record_their_ctas_and_the_scope_around_the_call(tmp_path):
    """A ``@triton.jit(noinline=True)`` helper is a function of its own in the PTX, with its own
    ``ret``: the kernel's exit alone writes the header, the helper runs as Triton wrote it."""
    rows, cols = 2048, 3000
    x = torch.randn(rows, cols, device="cuda")
    expected = torch.empty(rows, device="cuda")
    U.calls_helper[(rows, )](x, expected, cols, BLOCK=256, num_warps=4)  # plain, before the session
    outs = {name: torch.zeros(rows, device="cuda") for name in ("calls_helper", "calls_helper_scoped")}
    with proton_lite.start(str(tmp_path / "noinline"), quiet=True, formats=()) as s:
        U.calls_helper[(rows, )](x, outs["calls_helper"], cols, BLOCK=256, num_warps=4)
        U.calls_helper_scoped[(rows, )](x, outs["calls_helper_scoped"], cols, BLOCK=256, num_warps=4)
    torch.cuda.synchronize()
    for name, out in outs.items():
        assert torch.equal(out, expected), name
        prof, k, (launch, ) = _profile(s, name)
        _every_cta_finished(prof, launch)
    got = _slices(prof, k, launch, "row_sum")
    assert got.shape == (rows, 4) and (got == 1).all()


def test_device_print_beside_a_scope(tmp_path, capfd):
    n, block = 1 << 16, 128
    x = torch.rand(n, device="cuda")
    expected = x * 2
    with proton_lite.start(str(tmp_path / "print"), quiet=True, formats=()) as s:
        U.printing_scale[(n // block, )](x, n, BLOCK=block, num_warps=4)
    torch.cuda.synchronize()
    assert torch.equal(x, expected)
    assert "first" in capfd.readouterr().out  # the device's printf still reaches stdout
    prof, k, (launch, ) = _profile(s, "printing_scale")
    _every_cta_finished(prof, launch)
    assert (_slices(prof, k, launch, "scale") == 1).all()


def test_a_grid_barrier_in_a_cooperative_launch_orders_every_cta_s_scopes_on_one_axis(tmp_path):
    """Every CTA waits for all others at a grid-wide barrier: with every CTA resident (a
    cooperative launch, one CTA per SM) no CTA's ``finish`` can start before the last CTA's
    ``partial`` ended, on any SM; the timeline must show exactly that."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    block = 4096
    n = sms * block - 1000
    x = torch.rand(n, device="cuda")

    def run():
        partial = torch.zeros(sms, device="cuda")
        count = torch.zeros(1, dtype=torch.int32, device="cuda")
        out = torch.empty_like(x)
        U.grid_sync_normalize[(sms, )](x, partial, count, out, n, BLOCK=block, PROGRAMS=256, num_warps=4,
                                       launch_cooperative_grid=True)
        return out
    plain = run()
    with proton_lite.start(str(tmp_path / "gridsync"), quiet=True, formats=()) as s:
        out = run()
    torch.cuda.synchronize()
    assert torch.equal(out, plain)
    torch.testing.assert_close(out, x / x.sum(), rtol=1e-4, atol=1e-9)
    prof, k, (launch, ) = _profile(s, "grid_sync_normalize")
    _every_cta_finished(prof, launch)
    kern = prof.kernels[k]
    iv = prof.intervals[prof.intervals["launch"] == launch["launch"]]
    for scope in ("partial", "barrier", "finish"):
        assert (_slices(prof, k, launch, scope) == 1).all(), scope
    partial_end = iv["end_ns"][iv["scope"] == kern.scopes.index("partial")].max()
    finish_start = iv["start_ns"][iv["scope"] == kern.scopes.index("finish")].min()
    # one time axis across SMs (19 ns spread measured): the barrier's order holds within it
    assert finish_start >= partial_end - 100, (int(finish_start), int(partial_end))


def test_a_cta_living_for_seconds_keeps_its_records_in_place(tmp_path):
    """6 steps of 0.5 s in each CTA: records past ~2.15 s wrap the 32-bit clock; every step
    must come out 0.5 s long, one after another, and the whole scope as long as the CTA."""
    out = torch.zeros(2, dtype=torch.int64, device="cuda")
    with proton_lite.start(str(tmp_path / "long"), quiet=True, formats=()) as s:
        U.long_spin[(2, )](out, 500_000_000, STEPS=6, num_warps=2)
    torch.cuda.synchronize()
    prof, k, (launch, ) = _profile(s, "long_spin")
    _every_cta_finished(prof, launch)
    kern = prof.kernels[k]
    iv = prof.intervals[prof.intervals["launch"] == launch["launch"]]
    ctas = prof.ctas[prof.ctas["launch"] == launch["launch"]]
    for cta in range(2):
        life = ctas[ctas["cta"] == cta][0]
        assert life["end_ns"] - life["start_ns"] > 2.9e9  # past the 32-bit window
        for unit in range(2):
            mine = iv[(iv["cta"] == cta) & (iv["unit"] == unit)]
            steps = np.sort(mine[mine["scope"] == kern.scopes.index("step")], order="start_ns")
            whole = mine[mine["scope"] == kern.scopes.index("whole")]
            assert len(steps) == 6 and len(whole) == 1
            lengths = steps["end_ns"] - steps["start_ns"]
            assert np.all(np.abs(lengths - 5e8) < 5e6), lengths  # each 0.5 s (1%)
            assert np.all(steps["start_ns"][1:] >= steps["end_ns"][:-1]), steps["start_ns"]  # in order
            assert abs((whole["end_ns"][0] - whole["start_ns"][0]) - 3e9) < 3e7
            assert whole["end_ns"][0] <= life["end_ns"] + 1000 and whole["start_ns"][0] >= life["start_ns"] - 1000


def test_a_routed_moe_gemm_records_its_three_kinds_of_blocks(tmp_path):
    """Blocks past the padded token count return at once, blocks of an expert not on this
    rank write zeros through a helper, the rest run their K loop: each CTA records exactly
    the scopes of its own path."""
    experts, K, N, BM, BN, BK, valid = 4, 256, 128, 64, 64, 32, 300
    block_expert = [0, 1, -1, 2, 3, 1]  # six padded blocks; the grid has two more past the count
    g = torch.Generator(device="cuda").manual_seed(5)
    a = torch.randn(valid, K, device="cuda", generator=g).half()
    b = torch.randn(experts, K, N, device="cuda", generator=g).half()
    ids = torch.randperm(len(block_expert) * BM, device="cuda", generator=g).int()
    ids[ids >= valid] = valid  # padding slots point past the valid tokens (masked)
    expert_ids = torch.tensor(block_expert + [0, 0], dtype=torch.int32, device="cuda")
    padded = torch.tensor([len(block_expert) * BM], dtype=torch.int32, device="cuda")
    sorted_ids = torch.cat([ids, torch.full((2 * BM, ), valid, dtype=torch.int32, device="cuda")])
    grid = ((len(block_expert) + 2) * (N // BN), )

    def run():
        c = torch.full((valid, N), float("nan"), device="cuda")
        U.routed_gemm[grid](a, b, c, sorted_ids, expert_ids, padded, N, K, valid, K, K * N, N, N,
                            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, num_warps=4, num_stages=3)
        return c

    plain = run()
    with proton_lite.start(str(tmp_path / "moe"), quiet=True, formats=()) as s:
        out = run()
    torch.cuda.synchronize()
    assert torch.equal(out.nan_to_num(7.0), plain.nan_to_num(7.0))
    for blk, e in enumerate(block_expert):  # against torch, token by token
        tokens = ids[blk * BM:(blk + 1) * BM].long()
        tokens = tokens[tokens < valid]
        want = torch.zeros(len(tokens), N, device="cuda") if e < 0 else a[tokens].float() @ b[e].float()
        torch.testing.assert_close(out[tokens], want, rtol=2e-2, atol=2e-2)
    prof, k, (launch, ) = _profile(s, "routed_gemm")
    _every_cta_finished(prof, launch)
    steps, zeros, store = (_slices(prof, k, launch, scope) for scope in ("k step", "zeros", "store"))
    for cta in range(grid[0]):
        blk = cta // (N // BN)
        routed = blk < len(block_expert) and block_expert[blk] >= 0
        assert (steps[cta] == (K // BK if routed else 0)).all(), (cta, steps[cta])
        assert (store[cta] == int(routed)).all(), (cta, store[cta])
        assert (zeros[cta] == int(blk < len(block_expert) and block_expert[blk] < 0)).all(), (cta, zeros[cta])


def test_paged_decode_records_one_slice_per_page_of_each_sequence(tmp_path):
    """Each (sequence, head) CTA walks its sequence's pages through a block table: trip counts
    from loaded lengths, so the records go to the launch's pool; every page is one slice."""
    lens, heads, page, dim, max_blocks = [1, 16, 17, 100, 255, 64], 4, 16, 64, 16
    seqs = len(lens)
    g = torch.Generator(device="cuda").manual_seed(9)
    q = torch.randn(seqs, heads, dim, device="cuda", generator=g)
    k_cache = torch.randn(seqs * max_blocks, heads, page, dim, device="cuda", generator=g)
    v_cache = torch.randn(seqs * max_blocks, heads, page, dim, device="cuda", generator=g)
    table = torch.randperm(seqs * max_blocks, device="cuda", generator=g).int().view(seqs, max_blocks)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    scale = dim ** -0.5

    def run():
        out = torch.empty(seqs, heads, dim, device="cuda")
        U.paged_decode[(seqs, heads)](q, k_cache, v_cache, table, seq_lens, out, scale, MAX_BLOCKS=max_blocks,
                                      PAGE=page, HEAD_DIM=dim, num_warps=4)
        return out

    plain = run()
    with proton_lite.start(str(tmp_path / "paged"), quiet=True, formats=()) as s:
        out = run()
    torch.cuda.synchronize()
    assert torch.equal(out, plain)
    for i, n in enumerate(lens):  # against torch
        pages = table[i, :triton_cdiv(n, page)].long()
        keys = k_cache[pages].transpose(0, 1).reshape(heads, -1, dim)[:, :n]
        values = v_cache[pages].transpose(0, 1).reshape(heads, -1, dim)[:, :n]
        p = torch.softmax((keys @ q[i][:, :, None]).squeeze(-1) * scale, -1)
        torch.testing.assert_close(out[i], (p[:, None, :] @ values).squeeze(1), rtol=1e-4, atol=1e-4)
    prof, k, (launch, ) = _profile(s, "paged_decode")
    _every_cta_finished(prof, launch)
    got = _slices(prof, k, launch, "page")
    for cta in range(seqs * heads):  # CTA id = sequence + seqs * head
        assert (got[cta] == triton_cdiv(lens[cta % seqs], page)).all(), (cta, got[cta])
