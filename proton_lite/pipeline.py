"""Raw capture -> decoded profile -> trace files, with a progress bar when it takes a while."""
from __future__ import annotations

import os
import time
from pathlib import Path

from proton_lite.decode import decode
from proton_lite.profile_data import Profile
from proton_lite.raw_format import read_raw
from proton_lite.stop_threads import stop_threads


def output_path(base: str, fmt: str) -> str:
    from proton_lite.trace import EXTENSIONS
    p = Path(base)
    ext = EXTENSIONS[fmt]
    if p.suffix in (".plraw", ".pftrace", ".json"):
        p = p.with_suffix("")
    return str(p.with_name(p.name + ext))


class _Bar:
    """A rich progress bar that appears only once a stage has run for ``after`` seconds
    (short stages print nothing); ``report(done, total)`` is the stage's callback."""

    def __init__(self, label: str, after: float = 1.0) -> None:
        self.label, self.after = label, after
        self.started = time.monotonic()
        self.bar, self.task = None, None

    def report(self, done: int, total: int) -> None:
        if self.bar is None and time.monotonic() - self.started > self.after:
            from rich.progress import Progress
            self.bar = Progress(transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total)

    def __enter__(self) -> "_Bar":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


def build_stop_extensions(formats=("perfetto", )) -> None:
    """The C extensions that decoding and writing ``formats`` use, built on threads now
    (``native_build.build_soon``): at a session's start, and before a capture's decode."""
    from proton_lite import native_decode
    from proton_lite.native_build import build_soon
    from proton_lite.trace import native_events
    build_soon([native_decode._EXTENSION] + ([native_events._EXTENSION] if formats else []))


def load_profile(raw_path: str, progress: bool = False) -> Profile:
    capture = read_raw(raw_path)
    if not progress or len(capture.launches) < 2:
        return decode(capture)
    with _Bar("proton_lite: decoding") as bar:
        return decode(capture, progress=bar.report)


# captures decoded in processes of their own when several together hold this much (below it,
# starting the processes costs more than they save)
PARALLEL_DECODE_BYTES = 256 << 20


def _decode_one(path: str):
    """In a worker process: the profile, or the exception to raise in the parent."""
    try:
        return load_profile(path)
    except Exception as e:  # noqa: BLE001 - re-raised where the caller reads its captures
        return e


def _share_threads(threads: int) -> None:
    """A worker process's initializer: its decode's share of the stop's threads."""
    os.environ["PROTON_LITE_THREADS"] = str(threads)


def load_profiles(paths: list[str], processes: int | None = None) -> list[Profile]:
    """Several captures decoded, one process per capture where they are large together
    (``PARALLEL_DECODE_BYTES``): a rank's capture does not wait for another's.  The processes
    share the stop's threads (``stop_threads``: the cores this process may run on, at most 16,
    or ``PROTON_LITE_THREADS``): at most that many processes, each decoding with its share,
    so that the setting bounds a merged stop's threads and memory as it bounds one decode's.
    ``processes=1`` decodes them here, one after the other.  The first capture that fails
    raises its error, as decoding them one by one would."""
    size = sum(os.path.getsize(p) for p in paths)
    threads = stop_threads()  # a wrong PROTON_LITE_THREADS fails here, before any process starts
    n = processes if processes is not None else min(len(paths), threads)
    if n <= 1 or len(paths) < 2 or (processes is None and size < PARALLEL_DECODE_BYTES):
        return [load_profile(p) for p in paths]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    # spawn: a fresh interpreter per worker (fork would copy the threads of a running decode)
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_share_threads, initargs=(max(1, threads // n), )) as pool:
        results = list(pool.map(_decode_one, paths))
    for r in results:
        if isinstance(r, Exception):
            raise r
    return results


def raw_to_traces(raw_path, base: str, formats, progress: bool = False, cut=None,
                  align_on: str | None = None, warnings: list | None = None,
                  layout: str = "auto", notes: list | None = None) -> tuple[Profile, list[str]]:
    """Decode ``raw_path`` (or a list of captures, merged into one timeline with a group per
    capture: ``profile_merge``) and write one trace per format; files appear whole or not at
    all.  ``cut``: a function of the decoded profile that returns the part to write (profile_cut);
    ``align_on``: the kernel that lines merged captures up (``merge_profiles``); ``warnings``
    gets a line for each trace with more tracks than Perfetto's UI draws in good time;
    ``layout``: the traces' track tree (``trace.plan``); ``notes`` gets a line where ``auto``
    chose the sm layout (SM rows shared by the launches)."""
    build_stop_extensions(formats)  # the writer's while the decode runs
    if isinstance(raw_path, (list, tuple)):
        from proton_lite.profile_merge import merge_profiles
        profile = merge_profiles(load_profiles(list(raw_path)), align_on=align_on)
    else:
        profile = load_profile(raw_path, progress=progress)
    if cut is not None:
        profile = cut(profile)
    paths = []
    for fmt in formats:
        from proton_lite.trace import write_trace
        path = output_path(base, fmt)
        tmp = path + ".tmp"
        try:
            if progress:
                with _Bar(f"proton_lite: writing {Path(path).name}") as bar:
                    stats = write_trace(profile, tmp, fmt, progress=bar.report, layout=layout)
            else:
                stats = write_trace(profile, tmp, fmt, layout=layout)
            os.replace(tmp, path)
            from proton_lite.trace.ui_limits import crowded_trace_warning, layout_note
            raw_arg = (" ".join(map(str, raw_path)) + " -o OUT" if isinstance(raw_path, (list, tuple))
                       else str(raw_path))
            if warnings is not None:
                crowded = crowded_trace_warning(dict(stats, path=path), profile.launches, raw_arg)
                if crowded:
                    warnings.append(crowded)
            if notes is not None and layout == "auto" and not paths:  # one note, on the first trace
                note = layout_note(dict(stats, path=path), profile.launches, raw_arg)
                if note:
                    notes.append(note)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        paths.append(path)
    return profile, paths
