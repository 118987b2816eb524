"""Under a CUDA tool (compute-sanitizer, Nsight Systems, Nsight Compute) no driver call of
ours holds the GIL: such a tool may take the GIL inside another thread's driver call, and a
graph poll holding it hung a replay under memcheck (tests/test_gpu_graphs.py runs the real
sanitizer)."""
import os

import pytest

from proton_lite.runtime import cuda_api, cuda_graph


@pytest.mark.parametrize("env, seen", [
    ({}, None),
    ({"NVTX_INJECTION64_PATH": "libsanitizer-collection.so", "NV_SANITIZER_INJECTION_PORT_BASE": "49152"},
     "libsanitizer-collection.so"),  # what compute-sanitizer 2025.3 sets (H200 machine)
    ({"NV_SANITIZER_INJECTION_TRANSPORT_TYPE": "uds"}, "compute-sanitizer"),
    ({"CUDA_INJECTION64_PATH": "/opt/cuda/compute-sanitizer/libsanitizer-collection.so"},
     "libsanitizer-collection.so"),
    ({"CUDA_INJECTION64_PATH": "/opt/nsys/target-linux-x64/libToolsInjection64.so"}, "libToolsInjection64.so"),
    ({"LD_PRELOAD": "/usr/lib/libjemalloc.so /opt/cuda/compute-sanitizer/libTreeLauncherTargetInjection.so"},
     "libTreeLauncherTargetInjection.so"),
    ({"LD_PRELOAD": "/usr/lib/libjemalloc.so:/usr/lib/libtcmalloc.so"}, None),
])
def test_a_tool_is_seen_from_the_environment_it_attaches_through(env, seen, monkeypatch):
    for key in [k for k in os.environ if k.startswith("NV_SANITIZER_")] + \
            ["CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "LD_PRELOAD"]:
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cuda_api.tool_attached() == seen


def test_under_a_tool_the_capture_query_and_the_graph_poll_release_the_gil(monkeypatch):
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/x/libsanitizer-collection.so")
    monkeypatch.setattr(cuda_api, "_capture_query", None)
    monkeypatch.setattr(cuda_api, "_gil_holding_capture_query", lambda: pytest.fail("GIL-holding query chosen"))
    monkeypatch.setattr(cuda_api, "_triton_capture_query", lambda: pytest.fail("Triton's query chosen"))
    assert cuda_api.capture_query() is cuda_api.stream_is_capturing_cuda_python
    monkeypatch.setattr(cuda_graph.ctypes, "PyDLL", lambda name: pytest.fail("libcuda loaded to hold the GIL"))
    assert cuda_graph.PollDriver()._lib is None
