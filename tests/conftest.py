import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
# Triton 3.9 warns on every compile that its FP-fusion default changes in 3.10: keep today's
# default (what the tests were written against) and the output free of that warning
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


from gpu_env import HAS_GPU, NO_GPU  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason=NO_GPU)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def direct_loop_stores(monkeypatch):
    """Loops sized at launch store each record straight to global memory, as where a block
    of shared staging would cost the kernel a resident CTA (passes/ptx_staging.py); the
    setting is part of the compile options, so no binary built with blocks is reused."""
    from proton_lite.passes import ptx_staging
    monkeypatch.setattr(ptx_staging, "FLUSH_SLOTS", 0)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty Triton cache directory for the test (compiles of its own, no binary of another's)."""
    from triton import knobs
    if "dir" in vars(knobs.cache):
        pytest.skip("knobs.cache.dir is set explicitly in this process")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"
