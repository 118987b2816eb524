"""Scopes in a software-pipelined matmul on the GPU (issue 28): the same loop with its load
scope as written (Triton issues the copies iterations ahead: the scope times their wait) and
with ``pl.scope("load", pipelined=False)`` (one stage: the scope times the loads). Per
warp and iteration, load + dot against the loop's period (one load start to the next):
with the option they account for the period within 5%; without it, the copies' issue runs
outside both scopes. Both variants' kernel times are kept, with Triton's plain kernel at
``num_stages`` 3 and 1, as the option's cost (``$PROTON_LITE_RESULTS_DIR/pipelined_scopes.json``)."""
import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import triton  # noqa: E402

import proton_lite  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import unpipelined_kernels as U  # noqa: E402
from test_pipelining import _mm  # noqa: E402

M = N = K = 4096
BM, BN, BK = 128, 128, 64
STAGES = 3


def _launch(kernel, a, b, c, stages=STAGES):
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN), )
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BM=BM, BN=BN, BK=BK, num_warps=8, num_stages=stages)


def _per_iteration(prof) -> dict:
    """Per warp and iteration: the period (one load start to the next), load, dot, in ns."""
    kernel = prof.kernels[0]
    load, dot = kernel.scopes.index("load"), kernel.scopes.index("dot")
    iv = prof.intervals
    out = {}
    for name, sid in (("load", load), ("dot", dot)):
        rows = iv[iv["scope"] == sid]
        rows = rows[np.lexsort((rows["start_ns"], rows["unit"], rows["cta"]))]
        out[name] = rows.reshape(-1, K // BK)  # every (CTA, warp): one row per iteration, in order
    starts = out["load"]["start_ns"].astype(np.int64)
    period = np.diff(starts, axis=1)
    lengths = {k: (v["end_ns"] - v["start_ns"]).astype(np.int64)[:, :-1] for k, v in out.items()}
    share = (lengths["load"] + lengths["dot"]) / np.maximum(period, 1)
    return {"period_ns": float(np.median(period)), "load_ns": float(np.median(lengths["load"])),
            "dot_ns": float(np.median(lengths["dot"])), "sum_over_period_median": float(np.median(share)),
            "sum_over_period_p10": float(np.quantile(share, 0.1)),
            "sum_over_period_p90": float(np.quantile(share, 0.9))}


def _plain_ms(kernel, a, b, c, stages):
    return triton.testing.do_bench(lambda: _launch(kernel, a, b, c, stages), warmup=25, rep=200)


def test_the_kept_load_scope_and_the_dot_account_for_the_loop_period(tmp_path):
    torch.manual_seed(0)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    want = (a.float() @ b.float()).half()
    result = {"shape": [M, N, K], "tile": [BM, BN, BK], "num_stages": STAGES, "num_warps": 8,
              "device": torch.cuda.get_device_name()}
    for label, kernel in (("as_written", _mm), ("pipelined_false", U.mm_kept)):
        c = torch.empty(M, N, device="cuda", dtype=torch.float16)
        with proton_lite.start(str(tmp_path / label), quiet=True, formats=(), calibrate=False) as s:
            for _ in range(3):
                _launch(kernel, a, b, c)
            torch.cuda.synchronize()
        torch.testing.assert_close(c, want, rtol=2e-2, atol=0.5)
        prof = decode(read_raw(s.result.raw_path))
        assert prof.total_dropped == 0 and len(prof.launches) == 3
        last = prof.launches["launch"][-1]
        one = prof.__class__(kernels=prof.kernels, launches=prof.launches[-1:],
                             ctas=prof.ctas[prof.ctas["launch"] == last],
                             intervals=prof.intervals[prof.intervals["launch"] == last], t0_ns=prof.t0_ns,
                             session=prof.session)
        own = np.isin(one.intervals["scope"], [prof.kernels[0].scopes.index(n) for n in ("load", "dot")])
        assert own.sum() == (M // BM) * (N // BN) * 8 * 2 * (K // BK)  # (and the buffer copies' own scope)
        result[label] = dict(_per_iteration(one), kernel_us=float(one.launches["end_ns"][0]
                                                                   - one.launches["start_ns"][0]) / 1e3,
                             notes=[n["message"] for n in (prof.kernels[0].meta.get("pipelined") or [])
                                    + (prof.kernels[0].meta.get("unpipelined") or [])])
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    result["plain_ms"] = {f"num_stages={st}": _plain_ms(_mm, a, b, c, st) for st in (STAGES, 1)}
    out = os.environ.get("PROTON_LITE_RESULTS_DIR")
    if out:
        with open(os.path.join(out, "pipelined_scopes.json"), "w") as f:
            json.dump(result, f, indent=1)
    kept, written = result["pipelined_false"], result["as_written"]
    assert any("asked for pipelined=False" in n for n in kept["notes"])
    assert any("issued" in n and "ahead" in n for n in written["notes"])
    assert abs(kept["sum_over_period_median"] - 1) <= 0.05, result
