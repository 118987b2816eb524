"""Fidelity on the GPU: regions of known length, one instant seen from every SM, clock rates.

Results are also written to ``$PROTON_LITE_RESULTS_DIR/fidelity.json`` for docs/benchmarks.md.
"""
import json
import os
import shutil
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import proton_lite  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import fidelity_kernels as F  # noqa: E402

RESULTS = {}


def _save(key, value):
    RESULTS[key] = value
    out = os.environ.get("PROTON_LITE_RESULTS_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "fidelity.json"), "w") as f:
            json.dump(RESULTS, f, indent=1, default=float)


def _profile(tmp_path, name, launch):
    with proton_lite.start(str(tmp_path / name), quiet=True, formats=()) as s:
        launch()
    torch.cuda.synchronize()
    keep = os.environ.get("PROTON_LITE_CAPTURE_DIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(s.result.raw_path, os.path.join(keep, f"fidelity_{name}.plraw"))
    return decode(read_raw(s.result.raw_path))


def _durations_ns(prof, iv):
    """Leaf-interval lengths in ns, compensated: (cycles - measured cost of one record) / the
    CTA's rate.  No rounding to whole ns."""
    cost = prof.session["record_cost_cycles"]
    rate = {(int(c["launch"]), int(c["cta"])): float(c["cycles_per_ns"]) for c in prof.ctas}
    return np.array([(i["cycles"] - cost) / rate[(int(i["launch"]), int(i["cta"]))] for i in iv])


def _sms():
    return torch.cuda.get_device_properties(0).multi_processor_count


def test_spin_regions_have_their_known_length(tmp_path):
    """Regions that spin until %globaltimer advanced by exactly T (tick edge to tick edge)."""
    out = torch.zeros(_sms(), dtype=torch.uint64, device="cuda")
    prof = _profile(tmp_path, "spin", lambda: F.spin_regions[(_sms(), )](out, REPS=3, num_warps=4))
    scopes = prof.kernels[0].scopes
    rows = {}
    for name, t_ns in zip(("t1us", "t10us", "t100us"), F.SPIN_NS.value):
        iv = prof.intervals[prof.intervals["scope"] == scopes.index(name)]
        assert len(iv) == _sms() * 4 * 3
        dur = _durations_ns(prof, iv)
        err = float(np.median(dur) / t_ns - 1)
        raw = float(np.median(_durations_ns(prof, iv) + prof.session["record_cost_cycles"] /
                              np.median(prof.ctas["cycles_per_ns"])))
        rows[name] = {"T_ns": t_ns, "median_ns": float(np.median(dur)), "rel_error": err,
                      "uncompensated_median_ns": raw, "record_cost_cycles": prof.session["record_cost_cycles"],
                      "p10_ns": float(np.percentile(dur, 10)), "p90_ns": float(np.percentile(dur, 90))}
    _save("spin", rows)
    for name, r in rows.items():
        assert abs(r["rel_error"]) <= 0.005, (name, r)


def test_fma_region_matches_its_separate_measurement(tmp_path):
    """N dependent FMAs: instrumented length minus the measured record cost vs clock64 around them."""
    n_cta, reps = _sms(), 6
    x = torch.rand(n_cta * 128, device="cuda")
    out = torch.empty_like(x)
    cyc = torch.zeros(n_cta * 128 * reps, dtype=torch.int32, device="cuda")
    F.fma_timed[(n_cta, )](x, out, cyc, reps, num_warps=4)
    torch.cuda.synchronize()
    direct = float(np.median(cyc.view(n_cta * 128, reps)[:, 1:].cpu().numpy()))  # first rep is cold
    prof = _profile(tmp_path, "fma", lambda: F.fma_region[(n_cta, )](x, out, reps, num_warps=4))
    cost = prof.session.get("record_cost_cycles")
    assert cost is not None and 2 <= cost <= 64, cost
    iv = prof.intervals
    reps_of = np.tile(np.arange(reps), len(iv) // reps)
    measured = float(np.median(iv["cycles"][reps_of > 0]))
    compensated = measured - cost  # no record inside: only the enter's own cost
    err = compensated / direct - 1
    _save("fma", {"N": F.FMA_N, "direct_cycles": direct, "measured_cycles": measured, "record_cost": cost,
                  "compensated_cycles": compensated, "rel_error": err})
    assert abs(err) <= 0.005, (direct, measured, cost)


def test_one_instant_lands_within_64ns_on_every_sm(tmp_path):
    n = _sms()
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    flag = torch.zeros(1, dtype=torch.uint64, device="cuda")
    out = torch.zeros(n, dtype=torch.uint64, device="cuda")
    prof = _profile(tmp_path, "instant",
                    lambda: F.release_together[(n, )](counter, flag, out, n, 20_000, num_warps=4))
    assert len(np.unique(prof.ctas["smid"])) == n  # one CTA per SM
    iv = prof.intervals
    assert len(iv) == n * 4
    spread = int(iv["start_ns"].max() - iv["start_ns"].min())
    per_warp0 = iv[iv["unit"] == 0]
    spread0 = int(per_warp0["start_ns"].max() - per_warp0["start_ns"].min())
    _save("instant", {"ctas": n, "spread_ns_all_warps": spread, "spread_ns_warp0": spread0,
                      "timer_tick_ns": prof.session.get("timer_tick_ns")})
    assert spread <= 64, spread


@pytest.mark.parametrize("state", ["idle", "load"])
def test_clock_rate_within_reported_range(tmp_path, state):
    from proton_lite.runtime import cuda_api
    max_mhz = cuda_api.device_attribute(0, "CU_DEVICE_ATTRIBUTE_CLOCK_RATE") / 1000
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    if state == "idle":
        torch.cuda.synchronize()
        time.sleep(3.0)  # let the SM clock fall back
    else:
        for _ in range(200):
            a @ a  # noqa: B018
    out = torch.zeros(_sms(), dtype=torch.uint64, device="cuda")
    prof = _profile(tmp_path, f"clk_{state}", lambda: F.spin_regions[(_sms(), )](out, REPS=1, num_warps=4))
    rates = prof.ctas["measured_cycles_per_ns"]
    assert np.isfinite(rates).all()  # every CTA is long enough (> 200 ticks) to measure its own rate
    _save(f"clock_{state}", {"min": float(rates.min()), "median": float(np.median(rates)),
                             "max": float(rates.max()), "reported_max_ghz": max_mhz / 1000})
    assert (rates >= 0.1).all() and (rates <= max_mhz / 1000 * 1.01).all(), (rates.min(), rates.max(), max_mhz)
