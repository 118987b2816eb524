"""The C extensions' build (proton_lite/native_build.py): built once, on threads ahead of use
(``build_soon``, as a session's start does for its stop), with the real C compiler into a fresh
cache directory."""
import threading

import pytest

from proton_lite import native_build
from proton_lite.native_build import CExtension, build_soon

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(%d); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "%s", NULL, -1, methods};
PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&def); }
"""


def _extension(name: str, value: int) -> CExtension:
    return CExtension(SOURCE % (value, name, name), name, "PROTON_LITE_TEST_EXTENSION")


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """A fresh cache, and the builds made: (name, thread name) each."""
    monkeypatch.setenv("PROTON_LITE_CACHE_DIR", str(tmp_path))
    made, real = [], native_build.build

    def counted(source, name):
        made.append((name, threading.current_thread().name))
        return real(source, name)
    monkeypatch.setattr(native_build, "build", counted)
    return made


def test_build_soon_builds_each_extension_once_on_threads_and_module_waits_for_it(builds):
    try:
        native_build._compiler()
    except RuntimeError:
        pytest.skip("no C compiler here")
    a, b = _extension("pl_test_a", 7), _extension("pl_test_b", 11)
    threads = build_soon([a, b])
    assert len(threads) == 2
    assert a.module().answer() == 7 and b.module().answer() == 11  # each waits for its build under way
    for t in threads:
        t.join()
    assert sorted(name for name, _ in builds) == ["pl_test_a", "pl_test_b"]  # once each
    assert all(thread.startswith("proton_lite-build-") for _, thread in builds)
    assert build_soon([a, b]) == []  # built: nothing more to do


def test_a_switched_off_or_failing_extension_builds_nothing_and_says_why(builds, monkeypatch):
    monkeypatch.setenv("PROTON_LITE_TEST_EXTENSION", "0")
    off = _extension("pl_test_off", 1)
    for t in build_soon([off]):
        t.join()
    assert off.module() is None and builds == []
    monkeypatch.setenv("PROTON_LITE_TEST_EXTENSION", "1")
    broken = CExtension("this is not C", "pl_test_broken", "PROTON_LITE_TEST_EXTENSION")
    for t in build_soon([broken]):
        t.join()
    assert broken.module() is None and broken.error and len(builds) == 1  # tried once, not again


def test_writing_a_capture_starts_the_decoders_and_the_writers_builds_first(monkeypatch, tmp_path):
    """``raw_to_traces`` (a stop's, ``proton-lite trace``'s) asks for both extensions at once,
    before it decodes: the writer's builds while the decode runs."""
    from proton_lite import native_decode, pipeline
    from proton_lite.trace import native_events
    asked = []
    monkeypatch.setattr(native_build, "build_soon", lambda extensions: asked.append(list(extensions)) or [])
    real_load = pipeline.load_profile

    def load(*args, **kwargs):
        asked.append("decode")
        return real_load(*args, **kwargs)
    monkeypatch.setattr(pipeline, "load_profile", load)
    pipeline.raw_to_traces("docs/examples/matmul.plraw", str(tmp_path / "m"), ("perfetto", ))
    assert asked == [[native_decode._EXTENSION, native_events._EXTENSION], "decode"]
    asked.clear()
    pipeline.raw_to_traces("docs/examples/matmul.plraw", str(tmp_path / "m"), ())
    assert asked == [[native_decode._EXTENSION], "decode"]  # no trace: the decoder's alone
