"""Real captures from the H100 (tests/data/*.plraw, written by tests/test_gpu.py and
tests/test_fidelity.py; see docs/gpu-runs.md): decode them and check the traces by
parsing them back, on a machine without a GPU."""
import glob
import os

import numpy as np
import pytest

from proton_lite.decode import decode
from proton_lite.raw_format import read_raw
from proton_lite.trace import load_trace, write_trace

import trace_processor as tp

DATA = os.path.join(os.path.dirname(__file__), "data")
CAPTURES = sorted(glob.glob(os.path.join(DATA, "*.plraw")))
# intervals each recording unit has, from the kernels in tests/kernels.py, fidelity_kernels.py
PER_UNIT = {"vector_add": 2, "softmax": 2, "matmul": 2, "loop_scopes": 37, "nested": 3, "helper_twice": 2,
            "const_loop": 300,  # format version 2 (BATCH chunks), 2026-11-23; the others are version 1
            "fidelity_instant": 1,
            "loop_scopes_sized": 37,  # sized per launch (launch prefix, capacity 74), 2026-11-23
            "loop_scopes_sinks": 37,  # the same, 2026-11-24: two sink slots per unit (overflow "sink")
            "loop_scopes_dropped": 8}  # capacity=16 (H200, 2026-11-26): the first 16 of 74 records, 8 steps
DROPPED = {"loop_scopes_dropped": 7 * 4 * (74 - 16)}  # records each capture's launch dropped (the rest: none)
MAX_CYCLES_PER_NS = 1.98 * 1.01  # the H100's max SM clock, 1980 MHz, and 1% for the timer ticks


def test_the_captures_are_there():
    assert {os.path.basename(c)[:-6] for c in CAPTURES} == set(PER_UNIT)


@pytest.mark.parametrize("name,sinks", [("loop_scopes_sized", 0), ("loop_scopes_sinks", 2)])
def test_the_capture_sized_at_launch_holds_exactly_its_records(name, sinks):
    """loop_scopes(x, 37) on the H100 with default sizing: the loop is bounded by an argument,
    so the launch's buffer holds 74 records per warp, no more (but, since 2026-11-24, the two
    sink slots of global staging), after a 16-byte prefix."""
    from proton_lite.layout import LAUNCH_PREFIX_BYTES, BufferLayout, read_capacity_word
    cap = read_raw(os.path.join(DATA, f"{name}.plraw"))
    (kid, meta), = [(k, m) for k, m in cap.kernels.items() if m["name"] == "loop_scopes"]
    layout = BufferLayout.from_json(meta["proton_lite"]["layout"])
    assert layout.sized_at_launch and meta["proton_lite"]["records_per_unit_expr"] is not None
    (launch, ) = [la for la in cap.launches if la.kernel_id == kid]
    assert read_capacity_word(int(np.frombuffer(launch.buffer, "<u4", 1)[0])) == 74
    assert len(launch.buffer) == LAUNCH_PREFIX_BYTES + launch.num_ctas * layout.with_capacity(74).stride
    assert layout.with_capacity(74).stride == 32 + 4 * (24 + 8 * (74 + sinks))  # format.md §1.1, §1.3
    assert cap.end["unsized_launches"] == 0


@pytest.fixture(scope="module", params=CAPTURES, ids=lambda p: os.path.basename(p)[:-6])
def capture(request):
    return os.path.basename(request.param)[:-6], decode(read_raw(request.param))


def test_every_record_decodes_and_every_cta_appears_once(capture):
    name, prof = capture
    (launch, ) = prof.launches
    assert launch["dropped"] == DROPPED.get(name, 0) and launch["unmatched"] == 0 and launch["missing_ctas"] == 0
    n_ctas = int(launch["grid_x"] * launch["grid_y"] * launch["grid_z"])
    assert len(prof.ctas) == n_ctas and len(np.unique(prof.ctas["cta"])) == n_ctas
    k = prof.kernels[0]
    units = k.num_warps // k.unit_warps
    assert len(prof.intervals) == n_ctas * units * PER_UNIT[name]
    assert launch["records"] == 2 * len(prof.intervals)
    assert prof.session["record_cost_cycles"] > 0  # the calibration launch was found and removed
    assert len(prof.kernels) == 1


def test_times_are_consistent(capture):
    _, prof = capture
    iv, ctas = prof.intervals, prof.ctas
    by_cta = {int(c["cta"]): c for c in ctas}
    start = np.array([by_cta[int(c)]["start_ns"] for c in iv["cta"]])
    end = np.array([by_cta[int(c)]["end_ns"] for c in iv["cta"]])
    assert (iv["start_ns"] >= start - 64).all() and (iv["end_ns"] <= end + 64).all()
    assert (iv["end_ns"] >= iv["start_ns"]).all() and (iv["cycles"] >= 0).all()
    rates = ctas["cycles_per_ns"]
    own = np.isfinite(ctas["measured_cycles_per_ns"])  # CTAs long enough (200 ticks) to measure alone
    assert ((rates[own] > 0.2) & (rates[own] < MAX_CYCLES_PER_NS)).all(), (rates.min(), rates.max())
    if (~own).any():  # shorter CTAs share the launch's pooled rate: off by up to a tick per CTA span
        span = float(np.mean(ctas["end_ns"][~own] - ctas["start_ns"][~own]))
        bound = MAX_CYCLES_PER_NS * (1 + prof.session["timer_tick_ns"] / span)
        assert ((rates[~own] > 0.2) & (rates[~own] < bound)).all(), (rates.min(), rates.max(), bound)
    # ns and cycles agree through each CTA's own rate (within rounding to whole ns)
    rate_of = np.array([by_cta[int(c)]["cycles_per_ns"] for c in iv["cta"]])
    assert np.abs((iv["end_ns"] - iv["start_ns"]) - iv["cycles"] / rate_of).max() <= 1.0
    # cycle-precise, not on the timer's 32 ns (or float64's 256 ns) staircase
    assert ((iv["end_ns"] - iv["start_ns"]) % 32 != 0).any()


@pytest.mark.parametrize("fmt,ext", [("perfetto", ".pftrace"), ("chrome", ".json")])
def test_traces_parse_back_to_the_same_profile(capture, tmp_path, fmt, ext):
    name, prof = capture
    path = tmp_path / (name + ext)
    write_trace(prof, path, fmt)
    back = load_trace(path)
    key = ["launch", "cta", "unit", "scope", "start_ns"]
    a = np.sort(prof.intervals, order=key)
    b = np.sort(back.intervals, order=key)
    for f in ("launch", "cta", "unit", "scope", "start_ns", "end_ns", "cycles"):
        assert np.array_equal(a[f], b[f]), f
    ca, cb = np.sort(prof.ctas, order=["cta"]), np.sort(back.ctas, order=["cta"])
    for f in ("cta", "smid", "start_ns", "end_ns"):
        assert np.array_equal(ca[f], cb[f]), f
    assert back.kernels[0].scopes == prof.kernels[0].scopes
    again = tmp_path / ("again" + ext)
    write_trace(decode(read_raw(os.path.join(DATA, name + ".plraw"))), again, fmt)
    assert again.read_bytes() == path.read_bytes()  # deterministic


@pytest.mark.skipif(tp.missing() is not None, reason=f"Perfetto trace processor unavailable: {tp.missing()}")
@pytest.mark.parametrize("fmt,ext", [("perfetto", ".pftrace"), ("chrome", ".json")])
def test_perfetto_imports_real_traces_without_errors(tmp_path, fmt, ext):
    for cap in CAPTURES[:3]:
        prof = decode(read_raw(cap))
        path = tmp_path / (os.path.basename(cap)[:-6] + ext)
        write_trace(prof, path, fmt)
        bad, slices = tp.query(str(path), [tp.BAD_STATS, "select count(*) as n from slice"])
        assert bad == [], bad
        spans = len(set(prof.ctas["launch"].tolist())) if fmt == "chrome" else 0  # the JSON's slice per launch
        assert slices[0]["n"] == len(prof.intervals) + len(prof.ctas) + spans
