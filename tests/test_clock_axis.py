"""Clock anchors (runtime/clock_probe.py) and the one time axis built from them
(clock_axis.py, profile_merge.py): the probe kernel run in the PTX interpreter and
assembled by ptxas, the anchor chosen from pings, GPUs of one process moved onto one
timer only where their anchors disagree, and captures of one host lined up on its clock.
Inputs: real captures from tests/data and docs/examples, with anchors set per test."""
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from proton_lite.clock_axis import align_devices, device_clocks, host_t0_ns
from proton_lite.decode import decode
from proton_lite.profile_merge import merge_profiles
from proton_lite.raw_format import read_raw
from proton_lite.runtime import clock_probe
from ptx_sim import Kernel, Launch

ROOT = Path(__file__).resolve().parent.parent
MATMUL = ROOT / "docs" / "examples" / "matmul.plraw"
LOOPS = ROOT / "tests" / "data" / "loop_scopes.plraw"
BASE = 1 << 32


def _run_probe(request: int, rounds: int) -> bytearray:
    mem = bytearray(clock_probe.MAILBOX_BYTES)
    struct.pack_into("<I", mem, clock_probe.REQUEST, request)
    Kernel(clock_probe.PTX).run(Launch(grid=1, threads=1, params={"p_box": BASE, "p_rounds": rounds},
                                       global_mem=mem, global_base=BASE))
    return mem


def test_the_probe_kernel_answers_a_request_with_its_timer():
    mem = _run_probe(request=1, rounds=1)
    ready, request, answer = struct.unpack_from("<III", mem, 0)
    (timer, ) = struct.unpack_from("<Q", mem, clock_probe.TIMER)
    assert (ready, request, answer) == (1, 1, 1) and timer > 0


def test_the_probe_kernel_leaves_on_abort_without_answering():
    mem = _run_probe(request=clock_probe.ABORT, rounds=8)
    assert struct.unpack_from("<I", mem, clock_probe.READY)[0] == 1
    assert struct.unpack_from("<I", mem, clock_probe.ANSWER)[0] == 0
    assert struct.unpack_from("<Q", mem, clock_probe.TIMER)[0] == 0


def test_ptxas_assembles_the_probe_kernel(tmp_path):
    from triton.backends.nvidia.compiler import get_ptxas
    ptx = tmp_path / "probe.ptx"
    ptx.write_text(clock_probe.PTX)
    r = subprocess.run([get_ptxas(90).path, "-arch=sm_90", str(ptx), "-o", str(tmp_path / "probe.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_anchor_is_the_ping_with_the_shortest_round_trip():
    pings = [(1_000, 5_600, 4_000), (10_000, 15_800, 11_000), (20_000, 26_000, 23_000)]
    a = clock_probe.best_sample(pings)
    assert a["host_ns"] == 10_500 and a["globaltimer_ns"] == 15_800
    assert a["offset_ns"] == 5_300 and a["uncertainty_ns"] == 500 and a["pings"] == 3
    assert a["median_round_trip_ns"] == 3_000


def _anchored(profile, anchors, host="node-a"):
    return replace(profile, session=dict(profile.session, clock_anchors=anchors, host=host))


def _two_devices(profile):
    """The same capture as if its odd launches had run on GPU 1."""
    la = profile.launches.copy()
    la["device"] = la["launch"] % 2
    return replace(profile, launches=la)


def _anchor(device, timer, offset, unc, gpu=None):
    return {"device": device, "globaltimer_ns": timer, "offset_ns": offset, "uncertainty_ns": unc, "gpu": gpu}


def test_a_devices_offset_is_interpolated_between_its_anchors_and_failed_probes_are_skipped():
    clocks = device_clocks([_anchor(0, 2_000_000, 900, 400), _anchor(0, 1_000_000, 100, 900, "ab"),
                            {"device": 1, "error": "the probe kernel did not start"},
                            {"device": -1, "error": "no driver"}])
    assert set(clocks) == {0}
    c = clocks[0]
    assert c.timers.tolist() == [1_000_000, 2_000_000] and c.uncertainty_ns == 900 and c.gpu == "ab"
    assert c.offset_at(1_500_000) == 500 and c.offset_at(1_250_000) == 300
    assert c.offset_at(0) == 100 and c.offset_at(9_000_000) == 900  # outside: the nearest anchor
    assert c.offset_at(np.array([1_000_000, 1_750_000])).tolist() == [100, 700]
    single = device_clocks([_anchor(2, 5, 42, 10)])[2]
    assert single.offset_at(10**12) == 42


def test_gpus_whose_timers_differ_are_moved_onto_the_first_launchs_gpu():
    p = _two_devices(decode(read_raw(str(MATMUL))))
    assert p.launches["device"].tolist() == [0, 1, 0]
    anchors = [_anchor(0, p.t0_ns, 1_000, 800), _anchor(1, p.t0_ns, 51_000, 700)]  # GPU 1 reads 50 us later
    moved = align_devices(_anchored(p, anchors))
    odd = p.launches["device"] == 1
    assert np.array_equal(moved.launches["start_ns"][odd] + moved.t0_ns, p.launches["start_ns"][odd] + p.t0_ns - 50_000)
    assert np.array_equal(moved.launches["start_ns"][~odd] + moved.t0_ns, p.launches["start_ns"][~odd] + p.t0_ns)
    on_one = np.isin(p.intervals["launch"], p.launches["launch"][odd])
    assert np.array_equal(moved.intervals["end_ns"][on_one] + moved.t0_ns,
                          p.intervals["end_ns"][on_one] + p.t0_ns - 50_000)
    assert moved.ctas["start_ns"].min() == 0  # time 0 is still the first CTA
    assert moved.session["device_clocks"]["1"]["shift_ns"] == -50_000
    assert "moved onto it" in moved.session["device_clocks"]["1"]["clock"]


def test_gpus_whose_anchors_agree_within_their_uncertainty_keep_their_exact_timers():
    p = _two_devices(decode(read_raw(str(MATMUL))))
    anchors = [_anchor(0, p.t0_ns, 1_000, 800), _anchor(1, p.t0_ns, 2_200, 700)]
    same = align_devices(_anchored(p, anchors))
    assert np.array_equal(same.intervals["start_ns"], p.intervals["start_ns"]) and same.t0_ns == p.t0_ns
    assert same.session["device_clocks"]["1"]["clock"] == "shared"
    missing = align_devices(_anchored(p, anchors[:1]))
    assert missing.session["device_clocks"]["1"]["clock"].startswith("no anchor")
    assert np.array_equal(missing.intervals["start_ns"], p.intervals["start_ns"])


def test_gpus_whose_timers_drift_apart_move_by_the_difference_at_each_launch():
    p = _two_devices(decode(read_raw(str(MATMUL))))
    t = int(p.t0_ns)
    end = t + int(p.launches["end_ns"].max())
    # GPU 1's timer gains on GPU 0's: 10 us ahead at time 0, 10 us + 1 ns per 10 ns later
    anchors = [_anchor(0, t, 0, 500), _anchor(0, end, 0, 500),
               _anchor(1, t, 10_000, 500), _anchor(1, end, 10_000 + (end - t) // 10, 500)]
    moved = align_devices(_anchored(p, anchors))
    (one, ) = np.flatnonzero(p.launches["device"] == 1)
    start = int(p.launches["start_ns"][one])
    expected = -(10_000 + start // 10)  # the difference at that launch's own time
    assert abs(moved.session["device_clocks"]["1"]["shift_ns"] - expected) <= 1
    assert abs((int(moved.launches["start_ns"][one]) + moved.t0_ns) - (start + t + expected)) <= 1


def test_captures_on_several_gpus_of_one_host_line_up_on_its_clock():
    a = decode(read_raw(str(MATMUL)))
    b = decode(read_raw(str(LOOPS)))
    a = _anchored(a, [_anchor(0, a.t0_ns, 0, 900, "gpu-a")])
    b = _anchored(b, [_anchor(0, b.t0_ns, 7_000_000, 600, "gpu-b")])
    m = merge_profiles([a, b])
    assert m.session["alignment"].startswith("host clock of node-a")
    # each capture's time 0 at its host time: t0 - offset
    ha, hb = host_t0_ns(a), host_t0_ns(b)
    assert (ha, hb) == (a.t0_ns, b.t0_ns - 7_000_000)
    first = min(ha, hb)
    tail = m.intervals[len(a.intervals):]
    assert np.array_equal(tail["start_ns"], b.intervals["start_ns"] + (hb - first))
    assert np.array_equal(m.intervals[:len(a.intervals)]["start_ns"], a.intervals["start_ns"] + (ha - first))


def test_captures_of_one_gpu_keep_the_exact_timer_difference():
    a = decode(read_raw(str(MATMUL)))
    b = decode(read_raw(str(LOOPS)))
    a = _anchored(a, [_anchor(0, a.t0_ns, 5_000, 900, "gpu-a")])
    b = _anchored(b, [_anchor(1, b.t0_ns, 9_400, 600, "gpu-a")])  # another number in its process, one GPU
    b = replace(b, launches=_set_device(b.launches, 1))
    m = merge_profiles([a, b])
    assert m.session["alignment"].startswith("GPU timer (every capture ran on one GPU)")
    tail = m.intervals[len(a.intervals):]
    assert np.array_equal(tail["start_ns"], b.intervals["start_ns"] + int(b.t0_ns) - int(m.t0_ns))


def _set_device(launches, device):
    la = launches.copy()
    la["device"] = device
    return la


@pytest.mark.parametrize("hosts, word", [(("node-a", "node-b"), "different hosts"), (("node-a", "node-a"), "no clock")])
def test_captures_without_anchors_or_of_two_hosts_say_how_they_were_placed(hosts, word):
    a = _anchored(decode(read_raw(str(MATMUL))), [], host=hosts[0])
    b = _anchored(decode(read_raw(str(LOOPS))), [], host=hosts[1])
    m = merge_profiles([a, b])
    assert word in m.session["alignment"]
    assert m.t0_ns == min(a.t0_ns, b.t0_ns)


def test_a_probe_given_up_on_frees_its_mailbox_only_once_its_kernel_is_done(monkeypatch):
    """A probe kernel that did not start in time still reads its mailbox when it does: the
    mailbox must outlive it, without the host waiting for the GPU's other work (the driver
    calls are replaced here: there is no GPU on this machine)."""
    from proton_lite.runtime import cuda_api
    done, freed, synced = {7: False}, [], []
    monkeypatch.setattr(cuda_api, "stream_done", lambda s: done[s])
    monkeypatch.setattr(cuda_api, "stream_synchronize", lambda s: synced.append(s))
    monkeypatch.setattr(cuda_api, "stream_destroy", lambda s: None)
    monkeypatch.setattr(cuda_api, "host_free", lambda p: freed.append(p))
    monkeypatch.setattr(clock_probe, "_unfinished", [])
    clock_probe._release(0, 7, 0xB0, wait=False)  # its kernel has not run yet
    assert freed == [] and synced == [] and clock_probe._unfinished == [(0, 7, 0xB0)]
    clock_probe._sweep(1)  # another device's probe: not this one's
    assert freed == [] and clock_probe._unfinished == [(0, 7, 0xB0)]
    clock_probe._sweep(0)  # still running: kept
    assert freed == [] and clock_probe._unfinished == [(0, 7, 0xB0)]
    done[7] = True
    clock_probe._sweep(0)
    assert freed == [0xB0] and synced == [7] and clock_probe._unfinished == []
    clock_probe._release(0, 8, 0xC0, wait=True)  # answered every ping: its kernel returned
    assert freed == [0xB0, 0xC0] and synced == [7, 8]


def test_captures_anchored_on_different_host_clocks_are_not_lined_up_on_either():
    a = decode(read_raw(str(MATMUL)))
    b = decode(read_raw(str(LOOPS)))
    a = _anchored(a, [_anchor(0, a.t0_ns, 0, 900, "gpu-a")])  # a capture of before the change: realtime
    b = _anchored(b, [dict(_anchor(0, b.t0_ns, 7_000_000, 600, "gpu-b"), host_clock="CLOCK_MONOTONIC_RAW")])
    m = merge_profiles([a, b])
    assert m.session["alignment"].startswith("GPU timers as they read")


def test_the_host_clock_of_the_anchors_is_monotonic():
    x = clock_probe.host_now_ns()
    assert clock_probe.host_now_ns() >= x and clock_probe.HOST_CLOCK.startswith("CLOCK_MONOTONIC")
