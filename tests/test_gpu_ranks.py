"""Two processes on one GPU, as torchrun's ranks would be: each records its own capture
with its rank, and the captures come together in one trace (a group per rank), one
summary (the kernels compared across ranks) and one diff (a folder per side)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu
from gpu_env import require_torch  # noqa: E402

torch = require_torch()

from proton_lite.trace import load_trace  # noqa: E402
from proton_lite.viewer import cli  # noqa: E402

import trace_processor as tp  # noqa: E402

HERE = os.path.dirname(__file__)
REPO = os.path.dirname(HERE)

RANK = """
import os, sys, torch, triton
import proton_lite
from kernels import vector_add
n = 1 << 20 if os.environ["RANK"] == "0" else 1 << 22  # rank 1 does 4x the work: the slow one
x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
out = torch.empty_like(x)
with proton_lite.start(sys.argv[1], quiet=True, formats=()):
    for _ in range(3):
        vector_add[(triton.cdiv(n, 1024), )](x, y, out, n, BLOCK=1024)
torch.cuda.synchronize()
"""


def test_two_ranks_on_one_gpu_come_together(tmp_path, capsys):
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(RANK))
    (tmp_path / "job").mkdir()
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   PYTHONPATH=os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]))
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / "job" / f"rank{rank}")],
                                      cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    captures = [str(tmp_path / "job" / f"rank{r}.plraw") for r in (0, 1)]
    # one trace, a group per rank
    assert cli.main(["trace", *captures, "-o", str(tmp_path / "job-trace")]) == 0
    capsys.readouterr()
    back = load_trace(tmp_path / "job-trace.pftrace")
    assert [o["rank"] for o in back.session["merged_from"]] == [0, 1] and len(back.launches) == 6
    # each session anchored the GPU's timer to the host clock at stop; one GPU is one timer, so
    # the two anchors agree within their uncertainty and the exact timer difference is kept
    from proton_lite.decode import decode
    from proton_lite.raw_format import read_raw
    for c in captures:
        anchors = decode(read_raw(c)).session["clock_anchors"]
        assert {a["when"] for a in anchors} == {"start", "stop"}, anchors  # torch had the GPU in use
        assert all("error" not in a and a["uncertainty_ns"] < 20_000 for a in anchors), anchors
    assert back.session["alignment"].startswith("GPU timer (every capture ran on one GPU)"), back.session["alignment"]
    if not tp.missing():
        bad, tracks = tp.query(str(tmp_path / "job-trace.pftrace"), [
            tp.BAD_STATS,
            "select t.name as name, p.name as parent from track t left join track p on t.parent_id = p.id"])
        assert bad == []
        assert {t["parent"] for t in tracks if t["name"].startswith("#")} == \
            {t["name"] for t in tracks if t["name"].startswith("rank ")} and \
            len({t["name"] for t in tracks if t["name"].startswith("rank ")}) == 2
    # one summary: rank 1, with 4x the work, is the slowest
    assert cli.main(["summary", *captures, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (row, ) = d["across"]
    assert [c["label"] for c in d["captures"]] == ["rank 0", "rank 1"]
    assert row["slowest"] == "rank 1" and row["slowest_over_median"] > 1.2 and row["launches"] == 6
    # one diff, a folder per side
    assert cli.main(["diff", str(tmp_path / "job"), str(tmp_path / "job"), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["a"]["launches"] == 6 and d["warnings"] == []


TOGETHER = """
import os, sys, time, torch, triton
import json
import proton_lite
from kernels import vector_add
rank = int(os.environ["RANK"])
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
n = 1 << 22
x, y = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
out = torch.empty_like(x)
vector_add[(triton.cdiv(n, 1024), )](x, y, out, n, BLOCK=1024)  # compiled before the session
torch.cuda.synchronize()
open(sys.argv[2] + f".ready{rank}", "w").close()
while not all(os.path.exists(sys.argv[2] + f".ready{r}") for r in (0, 1)):
    time.sleep(0.001)
deadline = int(sys.argv[3])
with proton_lite.start(sys.argv[1], quiet=True, formats=()):
    while time.time_ns() < deadline:  # both ranks launch at one instant of the host clock
        pass
    before = time.time_ns()
    vector_add[(triton.cdiv(n, 1024), )](x, y, out, n, BLOCK=1024)
    after = time.time_ns()  # the launch was queued by now, whatever the first launch of a session cost
    torch.cuda.synchronize()
with open(sys.argv[1] + ".host.json", "w") as f:
    json.dump({"before_ns": before, "after_ns": after}, f)
"""


def _job(tmp_path, script_text: str, devices: tuple[int, int]) -> list[str]:
    import time
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(script_text))
    (tmp_path / "job").mkdir(exist_ok=True)
    deadline = time.time_ns() + 20_000_000_000  # both processes started and compiled by then
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(devices[rank]),
                   PYTHONPATH=os.pathsep.join([REPO, HERE, os.environ.get("PYTHONPATH", "")]))
        procs.append(subprocess.Popen([sys.executable, str(script), str(tmp_path / "job" / f"rank{rank}"),
                                       str(tmp_path / "job" / "barrier"), str(deadline)],
                                      cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    return [str(tmp_path / "job" / f"rank{r}.plraw") for r in (0, 1)]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (device kind nvidia-h100-x2); "
                    "the single-GPU machines run the same job on one GPU in the test above")
def test_two_ranks_on_two_gpus_merge_on_one_axis(tmp_path, capsys):
    """One process per GPU, both launching at one host instant: each capture anchors its
    GPU's timer to the host clock, and the merged trace puts the two launches together."""
    from proton_lite.decode import decode
    from proton_lite.profile_merge import merge_profiles
    from proton_lite.raw_format import read_raw
    captures = _job(tmp_path, TOGETHER, (0, 1))
    profiles = [decode(read_raw(c)) for c in captures]
    anchors = [p.session["clock_anchors"] for p in profiles]
    for rank, a in enumerate(anchors):
        assert {x["device"] for x in a} == {rank} and all("error" not in x for x in a), a
        assert all(x["uncertainty_ns"] < 20_000 for x in a), a  # half a PCIe round trip, with Python's spin
    assert anchors[0][0]["gpu"] != anchors[1][0]["gpu"]
    merged = merge_profiles(profiles)
    assert merged.session["alignment"].startswith("host clock of"), merged.session["alignment"]
    starts = merged.launches["start_ns"]
    gap = abs(int(starts[1]) - int(starts[0]))
    by_timer = abs((int(profiles[1].t0_ns) + int(profiles[1].launches["start_ns"][0]))
                   - (int(profiles[0].t0_ns) + int(profiles[0].launches["start_ns"][0])))
    hosts = [json.load(open(c[:-len(".plraw")] + ".host.json")) for c in captures]
    # the host instants each rank's launch call returned: the kernel starts within a few us of it
    # (a first launch in a session may take ms of host work before, so not the shared deadline)
    queued_gap = hosts[1]["after_ns"] - hosts[0]["after_ns"]
    error = abs(int(starts[1]) - int(starts[0]) - queued_gap)  # launches stay in capture (rank) order
    result = {"alignment": merged.session["alignment"], "gap_ns": gap, "gap_by_timers_ns": by_timer,
              "queued_gap_ns": queued_gap, "error_ns": error,
              "launch_call_ns": [h["after_ns"] - h["before_ns"] for h in hosts],
              "offsets_ns": [[x["offset_ns"] for x in a] for a in anchors],
              "uncertainty_ns": [[x["uncertainty_ns"] for x in a] for a in anchors]}
    out = os.environ.get("PROTON_LITE_RESULTS_DIR")
    if out:
        with open(os.path.join(out, "two_gpu_clocks.json"), "w") as f:
            json.dump(result, f, indent=1)
    assert error < 500_000, result  # the launches' distance on the axis is the host's, launch latency apart
    assert cli.main(["trace", *captures, "-o", str(tmp_path / "both")]) == 0
    assert cli.main(["trace", *captures, "-o", str(tmp_path / "aligned"), "--align-on", "vector_add"]) == 0
    capsys.readouterr()
    aligned = load_trace(tmp_path / "aligned.pftrace")
    assert len(aligned.launches) == 2 and aligned.session["alignment"].startswith("kernel vector_add")
    if not tp.missing():
        (bad, ) = tp.query(str(tmp_path / "both.pftrace"), [tp.BAD_STATS])
        assert bad == []
