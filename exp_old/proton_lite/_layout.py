"""Make ``proton_lite.passes`` and ``proton_lite.viewer`` importable from a checkout.

The repository keeps the compiler passes in ``passes/`` and the viewer in ``viewer/``
(top level, one folder per concern).  An installed wheel maps them to
``proton_lite.passes`` / ``proton_lite.viewer`` (see pyproject.toml).  When proton_lite
runs from a checkout on ``PYTHONPATH`` (the GPU machine has no package index), those
subpackages do not exist under ``proton_lite/``; this module loads them from the sibling
folders under the same names, so imports read identically in both cases.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SUBPACKAGES = {"passes": "passes", "viewer": "viewer"}


def ensure_subpackages() -> None:
    pkg_dir = Path(__file__).resolve().parent
    for sub, folder in _SUBPACKAGES.items():
        full = f"proton_lite.{sub}"
        if full in sys.modules or (pkg_dir / sub / "__init__.py").exists():
            continue
        src = pkg_dir.parent / folder / "__init__.py"
        if not src.exists():
            raise ImportError(f"{full} is missing: expected {src} (broken checkout?) "
                              "or reinstall with `pip install .`")
        spec = importlib.util.spec_from_file_location(full, src, submodule_search_locations=[str(src.parent)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        setattr(sys.modules["proton_lite"], sub, module)  # `proton_lite.viewer.x` attribute access
