"""Small C extensions that work without the GIL (some call zlib), built at first use.

Built here, not through Triton (reading a capture must not import Triton): the C compiler
(``$CC``, else ``cc``/``gcc``/``clang``) and this Python's headers, the same way Triton
builds its own launchers; the binary is cached by a hash of the source, the Python and the
platform under ``$PROTON_LITE_CACHE_DIR`` (default ``~/.cache/proton_lite``).  Extensions that
call zlib are pointed at the libz this process already uses (Python's ``zlib`` module's), so
that their output is byte for byte what the ``zlib`` module gives.  Where no compiler,
headers or libz are found, ``module()`` is None and the callers' Python path does the same
work; an environment switch turns an extension off.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path


def zlib_path() -> str:
    """The libz this process already has loaded (Python's zlib module's), else the system's."""
    import zlib  # noqa: F401 (loads libz where the module is linked against it)
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "/libz.so" in line:
                    return line.split()[-1]
    except OSError:
        pass
    import ctypes.util
    return ctypes.util.find_library("z") or "libz.so.1"


# Shared by the extensions' C sources (prepended): their arrays as buffers, taken and given back.
BUFFERS_C = r"""
/* the buffers of n objects, C-contiguous, those in [w0, w1) writable; on failure none is
   held (the error is set) and -1 returned */
static int take_buffers(PyObject **o, Py_buffer *v, int n, int w0, int w1) {
    for (int i = 0; i < n; i++)
        if (PyObject_GetBuffer(o[i], &v[i], i >= w0 && i < w1 ? PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS
                                                              : PyBUF_C_CONTIGUOUS) < 0) {
            for (int j = 0; j < i; j++) PyBuffer_Release(&v[j]);
            return -1;
        }
    return 0;
}

static void give_buffers(Py_buffer *v, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&v[i]);
}
"""

# no fused multiply-add: the C arithmetic must round as numpy's separate multiply and add do
_FLAGS = ("-O3", "-ffp-contract=off", "-shared", "-fPIC")


def _cache_dir() -> Path:
    return Path(os.environ.get("PROTON_LITE_CACHE_DIR") or Path.home() / ".cache" / "proton_lite") / "native"


def _compiler() -> str:
    cc = os.environ.get("CC") or next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if cc is None:
        raise RuntimeError("no C compiler found (set CC)")
    return cc


def build(source: str, name: str):
    """Compile ``source`` (a C extension defining module ``name``) once and import it."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    include = sysconfig.get_paths()["include"]
    key = hashlib.sha256("\0".join((source, name, sys.version, sysconfig.get_platform(), suffix, include,
                                     *_FLAGS)).encode()).hexdigest()[:24]
    folder = _cache_dir() / key
    so = folder / (name + suffix)
    if not so.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src = Path(tmp) / f"{name}.c"
            src.write_text(source)
            out = Path(tmp) / so.name
            r = subprocess.run([_compiler(), *_FLAGS, f"-I{include}", "-o", str(out), str(src), "-lm", "-ldl"],
                               capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"building {name} failed: {r.stderr.strip()[-400:]}")
            os.replace(out, so)  # atomic: another process building the same binary is harmless
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class CExtension:
    """One extension: C ``source`` defining module ``name``; ``switch``: the environment
    variable that turns it off when "0"."""

    def __init__(self, source: str, name: str, switch: str):
        self.source, self.name, self.switch = source, name, switch
        self._module = None
        self.error: str | None = None
        self._lock = threading.Lock()  # one build: a caller meeting one under way waits for it (build_soon)

    def _ready(self, mod) -> None:
        """Set the freshly built module up (nothing to do by default)."""

    def module(self):
        """The compiled extension, or None (built once per process)."""
        if self._module is None and self.error is None and os.environ.get(self.switch, "1") not in ("0", ""):
            with self._lock:
                if self._module is None and self.error is None:
                    try:
                        mod = build(self.source, self.name)
                        self._ready(mod)
                        self._module = mod
                    except Exception as e:  # no compiler, headers or libz: the Python path does the work
                        self.error = f"{type(e).__name__}: {e}"[:300]
        return self._module


class ZlibExtension(CExtension):
    """An extension whose C ``source`` also defines ``init_zlib(path)``: pointed at this
    process's libz once built."""

    def _ready(self, mod) -> None:
        mod.init_zlib(zlib_path())


def build_soon(extensions) -> list[threading.Thread]:
    """Build ``extensions`` now, each on a thread of its own (the C compiler runs as a process
    of its own, so they build side by side), where they are not built yet: what a stop will
    use, built while the session runs.  On a machine where they were never built (a fresh
    cache), the first stop compiled them one after the other as it met them: 0.4-1.7 s each
    on the CPU host (docs/design.md §6, "The C extensions").  A caller of ``module()`` meeting
    a build under way waits for it."""
    threads = []
    for extension in extensions:
        if extension._module is None and extension.error is None:
            thread = threading.Thread(target=extension.module, name=f"proton_lite-build-{extension.name}", daemon=True)
            thread.start()
            threads.append(thread)
    return threads
