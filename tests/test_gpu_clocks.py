"""The time axis across GPUs and the host (issue 27), checked by causality: a kernel that
spins until a word in pinned host memory is set must leave its wait after the moment the
word was set, by about one PCIe crossing. On one GPU the host sets it (host clock vs the
GPU's timer through the anchors); on two GPUs a kernel on the other GPU does (two timers
that differ by hundreds of microseconds on the machines measured, put on one axis)."""
import json
import os
import time

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import proton_lite  # noqa: E402
from proton_lite.clock_axis import device_clocks, host_t0_ns  # noqa: E402
from proton_lite.decode import decode  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
from proton_lite.runtime import clock_probe  # noqa: E402

import clock_kernels as C  # noqa: E402

LIMIT = 20_000_000  # spins before a kernel gives up (seconds): a test never hangs
CROSSING_NS = 20_000  # one PCIe crossing and a spin loop's poll, with room


def _scope_times(prof, name):
    """(start_ns, end_ns) of the first interval of scope ``name`` (warp 0 of CTA 0)."""
    k = [i for i, info in enumerate(prof.kernels) if name in info.scopes]
    (kid, ) = k
    launches = prof.launches["launch"][prof.launches["kernel"] == kid]
    rows = prof.intervals[np.isin(prof.intervals["launch"], launches)
                          & (prof.intervals["scope"] == prof.kernels[kid].scopes.index(name))]
    rows = rows[np.argsort(rows["start_ns"])]
    return int(rows["start_ns"][0]), int(rows["end_ns"][0])


def _save(name, data):
    out = os.environ.get("PROTON_LITE_RESULTS_DIR")
    if out:
        with open(os.path.join(out, name), "w") as f:
            json.dump(data, f, indent=1, default=int)


def test_a_wait_released_by_the_host_ends_after_the_host_set_the_word(tmp_path):
    box = torch.zeros(4, dtype=torch.int32).pin_memory()
    torch.zeros(1, device="cuda")  # the GPU in use before the session: anchored at start too
    with proton_lite.start(str(tmp_path / "host"), quiet=True, formats=(), calibrate=False) as s:
        C.waiter[(1, )](box, LIMIT=LIMIT, num_warps=1)
        words = box.numpy()  # the pinned memory itself: a store here is one CPU instruction
        while words[0] == 0:  # the kernel spins
            pass
        time.sleep(0.002)
        released = clock_probe.host_now_ns()
        words[1] = 1
        written = clock_probe.host_now_ns()
        torch.cuda.synchronize()
    prof = decode(read_raw(s.result.raw_path))
    # this GPU's anchors (another GPU used earlier in the process, by a two-GPU test, has its own)
    anchors = [a for a in prof.session["clock_anchors"] if a["device"] == torch.cuda.current_device()]
    assert [a.get("error") for a in anchors] == [None, None], anchors
    assert [a["when"] for a in anchors] == ["start", "stop"], anchors
    _, end = _scope_times(prof, "wait")
    on_host = host_t0_ns(prof) + end
    unc = device_clocks(anchors)[0].uncertainty_ns
    result = {"released_host_ns": released, "written_host_ns": written, "wait_end_on_host_ns": on_host,
              "after_ns": on_host - released, "uncertainty_ns": unc, "anchors": anchors}
    _save("clock_host_to_gpu.json", result)
    assert -unc <= on_host - released and on_host - written <= CROSSING_NS + unc, result


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs in one process (device kind "
                    "nvidia-h100-x2); the single-GPU machines skip it")
def test_a_wait_released_by_the_other_gpu_ends_after_its_signal_on_one_axis(tmp_path):
    boxes = [torch.zeros(4, dtype=torch.int32).pin_memory() for _ in range(2)]
    for dev in (0, 1):  # both GPUs in use before the session: anchored at start too
        torch.zeros(1, device=f"cuda:{dev}")
    # round 1: GPU 1 waits for GPU 0; round 2: GPU 0 waits for GPU 1 (both signs of the shift)
    with proton_lite.start(str(tmp_path / "two"), quiet=True, formats=(), calibrate=False) as s:
        for waiting, signalling, box in ((1, 0, boxes[0]), (0, 1, boxes[1])):
            with torch.cuda.device(waiting):
                C.waiter[(1, )](box, LIMIT=LIMIT, num_warps=1)
            with torch.cuda.device(signalling):
                C.signaler[(1, )](box, LIMIT=LIMIT, num_warps=1)
            for dev in (0, 1):
                torch.cuda.synchronize(dev)
    assert all(int(b[1]) == 1 for b in boxes)
    prof = decode(read_raw(s.result.raw_path))
    clocks = prof.session["device_clocks"]
    la = prof.launches
    # launches in order: waiter on 1, signaler on 0, waiter on 0, signaler on 1
    assert la["device"].tolist() == [1, 0, 0, 1]
    iv = prof.intervals
    ends, starts = {}, {}
    for launch in la["launch"].tolist():
        rows = iv[iv["launch"] == launch]
        ends[launch], starts[launch] = int(rows["end_ns"].min()), int(rows["start_ns"].min())
    l0, l1, l2, l3 = la["launch"].tolist()
    after = [ends[l0] - starts[l1], ends[l2] - starts[l3]]  # each wait's end after its signal
    unc = max(c.uncertainty_ns for c in device_clocks(prof.session["clock_anchors"]).values())
    result = {"wait_end_after_signal_ns": after, "device_clocks": clocks, "uncertainty_ns": unc,
              "anchors": prof.session["clock_anchors"]}
    _save("clock_gpu_to_gpu.json", result)
    for a in after:
        assert -2 * unc <= a <= CROSSING_NS + 2 * unc, result
