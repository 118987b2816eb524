"""Whether this machine can run the GPU tests, and torch for them.

The GPU test modules import torch at the top; on a machine without a GPU that used to skip
them as "could not import torch", which hid the real reason. ``require_torch()`` skips a
module for having no GPU first, and only then for a missing torch.
"""
import pytest

NO_GPU = "needs an NVIDIA GPU (none found here); run `pytest -m gpu` (or tests/run_gpu.sh) on a GPU machine"


def _has_gpu() -> bool:
    try:
        from cuda.bindings import driver
        err, = driver.cuInit(0)[:1]
    except Exception:  # no cuda-python, or no driver library on this machine
        return False
    if err != driver.CUresult.CUDA_SUCCESS:
        return False
    err, count = driver.cuDeviceGetCount()
    return err == driver.CUresult.CUDA_SUCCESS and count > 0


HAS_GPU = _has_gpu()


def require_torch():
    """torch, for a GPU test module; skips the module with the reason where it cannot run."""
    if not HAS_GPU:
        pytest.skip(NO_GPU, allow_module_level=True)
    return pytest.importorskip("torch", reason="the GPU tests need torch (pip install torch)")
