"""Small C extensions that call zlib without the GIL, built at first use.

Built with Triton's ``compile_module_from_src`` (what Triton builds its own launchers with;
its cache keeps the binary), then pointed at the libz this process already uses (Python's
``zlib`` module's), so that their output is byte for byte what the ``zlib`` module gives.
Where no compiler, headers or libz are found, ``module()`` is None and the callers' Python
path does the same work; an environment switch turns an extension off.
"""
from __future__ import annotations

import os


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


class ZlibExtension:
    """One extension: C ``source`` defining module ``name`` with an ``init_zlib(path)``
    function; ``switch``: the environment variable that turns it off when "0"."""

    def __init__(self, source: str, name: str, switch: str):
        self.source, self.name, self.switch = source, name, switch
        self._module = None
        self.error: str | None = None

    def module(self):
        """The compiled extension, or None (built once per process)."""
        if self._module is None and self.error is None and os.environ.get(self.switch, "1") not in ("0", ""):
            try:
                from triton.runtime.build import compile_module_from_src
                mod = compile_module_from_src(self.source, self.name)
                mod.init_zlib(zlib_path())
                self._module = mod
            except Exception as e:  # no compiler, headers or libz: the Python path does the work
                self.error = f"{type(e).__name__}: {e}"[:300]
        return self._module
