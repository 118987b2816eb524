"""Every record of grid-stride, persistent and data-dependent loops, with a default session.

Each case runs its kernel plain, then inside ``proton_lite.start()`` with no option: the
outputs must be equal bit for bit, nothing dropped, the kernel launched once, and every
warp of every program must have one slice per iteration of each scoped loop (computed
here from the inputs).  ``tests/run_gpu.sh`` also runs these under compute-sanitizer.
"""
import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import proton_lite  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.passes.config import CALIBRATION_KERNEL  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import loop_kernels as L  # noqa: E402


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def run_case(name, scopes=True, scale=1):
    """Launch case ``name``; return (outputs, {scope: trips per program}, grid, warps)."""
    g = torch.Generator(device="cpu").manual_seed(0)
    dev = "cuda"
    if name == "grid_stride":
        n_rows, n_cols, P = 4099, 1000, 2 * _sms()
        x = torch.randn(n_rows, n_cols, generator=g).to(dev)
        out = torch.empty_like(x)
        L.grid_stride_softmax[(P, )](x, out, n_rows, n_cols, BLOCK=1024, SCOPES=scopes, num_warps=4)
        return [out], {"row": np.array([len(range(p, n_rows, P)) for p in range(P)])}, P, 4
    if name == "persistent":
        M = N = 1024
        K, P = 512, 48  # 64 tiles over 48 programs: some run two
        a = torch.randn(M, K, generator=g).half().to(dev)
        b = torch.randn(K, N, generator=g).half().to(dev)
        c = torch.empty(M, N, device=dev, dtype=torch.float16)
        L.persistent_matmul[(P, )](a, b, c, M, N, K, BM=128, BN=128, BK=64, SCOPES=scopes, num_warps=8)
        tiles = np.array([len(range(p, 64, P)) for p in range(P)])
        return [c], {"tile": tiles, "k": tiles * (K // 64)}, P, 8
    if name in ("segments", "nested"):
        n_seg = 1024 if name == "segments" else 256
        lens = torch.randint(10, 30, (n_seg, ), generator=g)
        lens[::64] = 2000 * scale  # some segments 100x the median
        if name == "nested":
            lens = torch.randint(0, 40, (n_seg, ), generator=g)
        offs = torch.zeros(n_seg + 1, dtype=torch.int32)
        offs[1:] = torch.cumsum(lens, 0)
        rows = int(offs[-1])
        x = torch.randn(rows, 128, generator=g).to(dev)
        out = torch.empty(n_seg, 128, device=dev)
        if name == "segments":
            L.segment_sum[(n_seg, )](offs.to(dev), x, out, D=128, SCOPES=scopes, num_warps=4)
            return [out], {"row": lens.numpy()}, n_seg, 4
        steps = torch.randint(0, 30, (rows, ), generator=g, dtype=torch.int32)
        L.nested_segments[(n_seg, )](offs.to(dev), steps.to(dev), x, out, D=128, SCOPES=scopes, num_warps=4)
        per_seg = np.array([int(steps[offs[p]:offs[p + 1]].sum()) for p in range(n_seg)])
        return [out], {"row": lens.numpy(), "step": per_seg}, n_seg, 4
    if name == "countdown":
        n = 4096
        x = torch.exp2(torch.rand(n, generator=g) * 80 - 4)  # 2^-4 .. 2^76: 0 to 64 halvings (capped)
        out = torch.empty(n, dtype=torch.int32, device=dev)
        L.countdown[(n, )](x.to(dev), out, SCOPES=scopes, num_warps=4)
        halvings = np.where(x.numpy() >= 1, np.floor(np.log2(x.numpy().astype(np.float64))) + 1, 0)
        return [out], {"halve": np.minimum(halvings, 64).astype(np.int64)}, n, 4
    raise KeyError(name)


def slices_per_program(prof, scope):
    """(programs, units) array: the slices of ``scope`` each warp of each program has."""
    k = [i for i, kern in enumerate(prof.kernels) if kern.name != CALIBRATION_KERNEL][0]
    kern = prof.kernels[k]
    iv = prof.intervals[prof.intervals["scope"] == kern.scopes.index(scope)]
    n_ctas = int(prof.launches["num_ctas"][prof.launches["kernel"] == k][0])
    out = np.zeros((n_ctas, kern.num_warps // kern.unit_warps), np.int64)
    np.add.at(out, (iv["cta"].astype(np.int64), iv["unit"].astype(np.int64)), 1)
    return out


CASES = ["grid_stride", "persistent", "segments", "nested", "countdown"]


@pytest.mark.parametrize("name", CASES)
def test_every_record_of_every_loop_shape_is_kept_by_default(name, tmp_path):
    plain, trips, grid, warps = run_case(name, scopes=True)
    torch.cuda.synchronize()
    reference, *_ = run_case(name, scopes=False)  # the kernel without scopes computes the same
    torch.cuda.synchronize()
    for a, b in zip(plain, reference):
        assert torch.equal(a, b)
    with proton_lite.start(str(tmp_path / name), quiet=True, formats=()) as s:
        outs, *_ = run_case(name)
    torch.cuda.synchronize()
    for a, b in zip(plain, outs):
        assert torch.equal(a, b), f"{name}: instrumented output differs"
    res = s.result
    assert res.launches == 1 and res.dropped == 0 and res.unmatched == 0, res.summary_line
    cap = read_raw(res.raw_path)
    assert cap.end["exact_reruns"] == 0 and cap.end["unsized_launches"] == 0
    prof = decode(cap)
    for scope, per_program in trips.items():
        got = slices_per_program(prof, scope)
        assert got.shape == (grid, warps)
        assert (got == per_program[:, None]).all(), (scope, np.flatnonzero((got != per_program[:, None]).any(1))[:5])
    launch = prof.launches[prof.launches["num_ctas"] == grid][0]
    if name in ("segments", "nested", "countdown"):  # a pool, never exhausted, no chunk torn
        assert launch["pool_chunks"] > 0 and launch["pool_taken"] <= launch["pool_chunks"]
        assert launch["torn_chunks"] == 0
        # long segments and nested steps do not fit the unit blocks (countdown's 64 halvings do)
        assert (launch["pool_taken"] > 0) == (name != "countdown")


def test_a_later_launch_is_sized_from_what_the_first_took(tmp_path):
    with proton_lite.start(str(tmp_path / "twice"), quiet=True, formats=()) as s:
        run_case("segments")
        torch.cuda.synchronize()  # the first launch's pool is drained: the second is sized from it
        run_case("segments", scale=3)
    assert s.result.launches == 2 and s.result.dropped == 0, s.result.summary_line
    prof = decode(read_raw(s.result.raw_path))
    first, second = prof.launches[prof.launches["pool_chunks"] > 0]
    assert second["pool_taken"] > first["pool_taken"] and second["pool_taken"] <= second["pool_chunks"]
    if not os.environ.get("PROTON_LITE_EXACT_BUFFERS"):  # (there the first guess is small already)
        assert second["pool_chunks"] < first["pool_chunks"]  # learned: less than the first guess, and enough


def test_an_exhausted_pool_is_counted_and_names_the_option_that_keeps_it(tmp_path):
    outs_plain, trips, *_ = run_case("segments", scale=5)
    with proton_lite.start(str(tmp_path / "small"), quiet=True, formats=(), pool_mb=1) as s:
        outs, *_ = run_case("segments", scale=5)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], outs_plain[0])
    res = s.result
    tried = 2 * int(trips["row"].sum()) * 4
    assert res.dropped > 0 and res.records + res.dropped == tried
    assert "pool_mb=" in res.summary_line and "ran out" in res.summary_line
