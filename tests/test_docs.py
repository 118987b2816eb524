"""What a new user runs and follows first: the README's snippet, the example script, the links.

The snippet's kernel is compiled with instrumentation for sm_90 here (no GPU needed) and the
whole snippet runs on a GPU machine; `docs/examples/run.py` without a GPU writes only the
trace it promises; every relative link in README.md and docs/ leads to a file of this
repository.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gpu_env import HAS_GPU

ROOT = Path(__file__).resolve().parent.parent
SPLIT = "# run it (an NVIDIA GPU and torch)"


def _snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, re.S)
    assert block, "README.md has no python snippet"
    return block.group(1)


def test_readme_snippet_kernel_compiles_with_its_scopes(tmp_path):
    code = _snippet()
    assert SPLIT in code, "the snippet's kernel part and run part are split by a marker line"
    kernel_part = code.split(SPLIT)[0]
    (tmp_path / "readme_snippet.py").write_text(kernel_part)
    sys.path.insert(0, str(tmp_path))
    try:
        import readme_snippet
    finally:
        sys.path.remove(str(tmp_path))
    import proton_lite
    ck = proton_lite.compile(readme_snippet.add, signature={"x_ptr": "*fp32", "y_ptr": "*fp32",
                                                            "out_ptr": "*fp32", "n": "i32"},
                             constexprs={"BLOCK": 1024}, arch=90)
    assert ck.scopes == ["load", "store"]
    assert ck.profile is not None and ck.metadata["profile_scratch_size"] > 0
    names = re.findall(r"\badd\[", code)
    assert names, "the snippet launches the kernel it defines"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU (none found here)")
def test_readme_snippet_runs_as_written(tmp_path):
    (tmp_path / "snippet.py").write_text(_snippet())
    done = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "vecadd.plraw").stat().st_size > 0 and (tmp_path / "vecadd.pftrace").stat().st_size > 0
    assert "proton_lite: 1 launch, " in done.stderr and " 0 dropped" in done.stderr


@pytest.mark.skipif(HAS_GPU, reason="with a GPU run.py profiles instead (covered by the GPU suite)")
def test_the_example_without_a_gpu_writes_only_the_trace(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "run.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")))
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["matmul.pftrace"]
    assert "matmul_kernel" in done.stdout and "mainloop" in done.stdout


def _markdown_files():
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def test_every_relative_link_in_the_docs_leads_into_the_repository():
    bad = []
    for f in _markdown_files():
        text = f.read_text()
        for m in re.finditer(r"\[[^\]]*\]\(([^)\s]+)\)", text):
            link = m.group(1)
            if re.match(r"[a-z]+://|mailto:|#", link):
                continue
            target = (f.parent / link.split("#")[0]).resolve()
            if ROOT not in target.parents or not target.exists():
                bad.append(f"{f.relative_to(ROOT)}: {link}")
        for m in re.finditer(r"\.\./shared/", text):
            bad.append(f"{f.relative_to(ROOT)}: a path outside the repository at {m.start()}")
    assert not bad, bad


def test_throwaway_scripts_are_named_as_such():
    """``exp/`` held one-off measurement scripts that are not in the repository: a doc that
    names one says so (gpu-runs.md once, at its top; elsewhere on the same line)."""
    bad = []
    for f in _markdown_files():
        lines = f.read_text().splitlines()
        if f.name == "gpu-runs.md":
            assert any("throwaway" in line for line in lines[:20]), "gpu-runs.md says what exp/ was at its top"
            continue
        for i, line in enumerate(lines):
            if re.search(r"`exp/", line) and "throwaway" not in " ".join(lines[max(0, i - 1):i + 1]):
                bad.append(f"{f.relative_to(ROOT)}:{i + 1}")
    assert not bad, bad
