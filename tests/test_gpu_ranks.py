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

require_torch()

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
