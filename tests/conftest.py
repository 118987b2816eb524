import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


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


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (none found); run with -m gpu on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
