"""Raw capture -> decoded profile -> trace files, with a progress bar when it takes a while."""
from __future__ import annotations

import os
import time
from pathlib import Path

from proton_lite.decode import decode
from proton_lite.profile_data import Profile
from proton_lite.raw_format import read_raw


def output_path(base: str, fmt: str) -> str:
    from proton_lite.trace import EXTENSIONS
    p = Path(base)
    ext = EXTENSIONS[fmt]
    if p.suffix in (".plraw", ".pftrace", ".json"):
        p = p.with_suffix("")
    return str(p.with_name(p.name + ext))


def load_profile(raw_path: str, progress: bool = False) -> Profile:
    capture = read_raw(raw_path)
    if not progress or len(capture.launches) < 2:
        return decode(capture)
    from rich.progress import Progress
    started = time.monotonic()
    bar, task = None, None

    def report(done: int, total: int) -> None:
        nonlocal bar, task
        if bar is None and time.monotonic() - started > 1.0:  # only for decodes longer than a second
            bar = Progress(transient=True)
            bar.start()
            task = bar.add_task("proton_lite: decoding", total=total)
        if bar is not None:
            bar.update(task, completed=done)

    try:
        return decode(capture, progress=report)
    finally:
        if bar is not None:
            bar.stop()


def raw_to_traces(raw_path: str, base: str, formats, progress: bool = False, cut=None) -> tuple[Profile, list[str]]:
    """Decode ``raw_path`` and write one trace per format; files appear whole or not at all.
    ``cut``: a function of the decoded profile that returns the part to write (profile_cut)."""
    profile = load_profile(raw_path, progress=progress)
    if cut is not None:
        profile = cut(profile)
    paths = []
    for fmt in formats:
        from proton_lite.trace import write_trace
        path = output_path(base, fmt)
        tmp = path + ".tmp"
        try:
            write_trace(profile, tmp, fmt)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        paths.append(path)
    return profile, paths
