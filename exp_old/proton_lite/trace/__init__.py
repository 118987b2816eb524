"""Trace files from a decoded ``Profile``: Perfetto protobuf and Chrome JSON, and back.

``write_trace(profile, path, fmt)`` picks a writer; ``load_trace(path)`` reads either
format back into a ``Profile``; the writers are imported lazily.  What both writers and
the reader share, so that track order, names and the embedded metadata agree in one place:
``tree`` (where each launch, CTA and interval sits), ``nesting`` (the event order that keeps
tracks nested), ``meta`` (the embedded metadata), ``workers`` (threads).
"""
from __future__ import annotations

from pathlib import Path

from proton_lite.profile_data import Profile
from proton_lite.trace.meta import META_FORMAT, META_VERSION  # noqa: F401  (the trace's format marks)

FORMATS = ("perfetto", "chrome")
EXTENSIONS = {"perfetto": ".pftrace", "chrome": ".json"}


def write_trace(profile: Profile, path: str | Path, fmt: str, progress=None, layout: str = "auto") -> dict:
    """Write ``profile`` to ``path`` as ``fmt`` (one of FORMATS); returns the writer's stats.
    ``progress(done, total)``: called as the writer goes.  ``layout``: ``launch`` (a group
    per launch), ``sm`` (SM groups shared by the launches of a GPU) or ``auto`` (``launch``
    while the trace stays small enough for Perfetto's UI; ``plan``)."""
    from proton_lite.trace.plan import LAYOUTS
    if layout not in LAYOUTS:
        raise ValueError(f"unknown trace layout {layout!r}; valid layouts: {', '.join(LAYOUTS)}")
    if fmt == "perfetto":
        from proton_lite.trace.perfetto import write_perfetto
        return write_perfetto(profile, path, progress=progress, layout=layout)
    if fmt == "chrome":
        from proton_lite.trace.chrome import write_chrome
        return write_chrome(profile, path, progress=progress, layout=layout)
    raise ValueError(f"unknown trace format {fmt!r}; valid formats: {', '.join(FORMATS)}")


def load_trace(path: str | Path) -> Profile:
    """Read a .pftrace or .json written by ``write_trace`` back into a ``Profile``."""
    from proton_lite.trace.readback import load_trace as _load
    return _load(path)
