"""``proton_lite.load(path)``: a capture or trace as tables to ask questions of, in a notebook.

Why: the decoded arrays exist (``Profile``) but had no public way in; performance engineers
want the launches, CTAs and scope intervals as tables, the usual statistics in one call each,
pandas where they have it, and SQL over the trace where Perfetto's trace processor runs.

Tables (numpy structured arrays, one row each; times in ns on the capture's one axis, from
its first CTA; cycles exact):

- ``launches``: launch, kernel (index into ``kernels``), device, grid, num_ctas, stream,
  start_ns, end_ns, records, dropped, unmatched, missing_ctas, ...
- ``ctas``: launch, cta, smid, start_ns, end_ns, start_clock, end_clock, cycles_per_ns, ...
- ``intervals``: launch, cta, unit (warp, warp group or 0), lane, scope (index into its
  kernel's ``scopes``), depth, start_ns, end_ns, cycles.

``to_pandas(table)`` adds the kernel and scope names as columns. The statistics are those of
``proton-lite summary`` (same definitions, ``docs/reading.md``), as lists of dicts.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from proton_lite.profile_data import Profile

TABLES = ("launches", "ctas", "intervals")
TRACE_PROCESSOR_ENV = "PROTON_LITE_TRACE_PROCESSOR"  # path of a trace_processor_shell binary


@dataclass
class LoadedProfile:
    """A decoded capture (``.plraw``) or proton-lite trace (``.pftrace``, ``.json``)."""

    path: str
    profile: Profile
    _summary: dict | None = field(default=None, repr=False)
    _trace: str | None = field(default=None, repr=False)

    # ---- tables -------------------------------------------------------------------------
    @property
    def kernels(self) -> list[str]:
        return [k.name for k in self.profile.kernels]

    @property
    def launches(self) -> np.ndarray:
        return self.profile.launches

    @property
    def ctas(self) -> np.ndarray:
        return self.profile.ctas

    @property
    def intervals(self) -> np.ndarray:
        return self.profile.intervals

    def scope_names(self, kernel: int | str) -> list[str]:
        k = self.kernels.index(kernel) if isinstance(kernel, str) else int(kernel)
        return list(self.profile.kernels[k].scopes)

    # ---- statistics (summary's definitions) ---------------------------------------------
    def _summarize(self) -> dict:
        if self._summary is None:
            from proton_lite.viewer.summary import summarize
            self._summary = summarize(self.profile)
        return self._summary

    def scope_stats(self, kernel: str | None = None) -> list[dict]:
        """Per (kernel, scope): count, total, share, mean, min, max, p50/p90/p99 (ns), cycles,
        and ``incomplete`` where records of the kernel were lost; ``kernel``: a name filter."""
        rows = self._summarize()["scopes"]
        return [r for r in rows if kernel is None or kernel.lower() in r["kernel"].lower()]

    def launch_stats(self) -> list[dict]:
        """Per launch: kernel, grid, warps, duration_ns, CTAs, SMs used, CTAs per SM, waves, records, drops."""
        return self._summarize()["launches"]

    def sm_stats(self) -> list[dict]:
        """Per SM: busy_ns (union of its CTAs' lifetimes, summed over launches) and CTAs."""
        return self._summarize()["sms"]

    @property
    def warnings(self) -> list[str]:
        """What makes numbers incomplete or unreliable (drops, a capture cut off, a coarse timer, ...)."""
        return [w["message"] for w in self._summarize()["warnings"]]

    def slowest_ctas(self, launch: int, n: int = 10) -> np.ndarray:
        """The ``n`` longest-lived CTAs of ``launch`` (its number, as in ``launches["launch"]``)."""
        mine = self.ctas[self.ctas["launch"] == launch]
        order = np.argsort(-(mine["end_ns"].astype(np.int64) - mine["start_ns"].astype(np.int64)), kind="stable")
        return mine[order[:n]]

    # ---- pandas and SQL ---------------------------------------------------------------------
    def to_pandas(self, table: str = "intervals"):
        """One of TABLES as a pandas DataFrame, with ``kernel_name`` (and ``scope_name``) columns."""
        if table not in TABLES:
            raise ValueError(f"to_pandas: unknown table {table!r}; tables: {', '.join(TABLES)}")
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("to_pandas needs pandas, which is not installed (pip install pandas); the tables "
                              "are numpy structured arrays as they are: .launches, .ctas, .intervals") from None
        arr = getattr(self, table)
        df = pd.DataFrame({name: arr[name] for name in arr.dtype.names})
        kernel_of_launch = dict(zip(self.launches["launch"].tolist(), self.launches["kernel"].tolist()))
        kernel = (df["kernel"] if table == "launches" else df["launch"].map(kernel_of_launch)).astype(int)
        df["kernel_name"] = [self.kernels[k] for k in kernel]
        if table == "intervals":
            df["scope_name"] = [self.scope_names(k)[s] if s < len(self.scope_names(k)) else f"scope {s}"
                                for k, s in zip(kernel, df["scope"])]
        return df

    def sql(self, query: str, trace: str | None = None) -> list[dict]:
        """Rows of an SQL query over the trace (for a capture, written to a temporary file at first use) with
        Perfetto's trace processor, through the ``perfetto`` package; set
        ``PROTON_LITE_TRACE_PROCESSOR`` to a ``trace_processor_shell`` binary on machines
        without internet (the package downloads one otherwise)."""
        path = trace or self._trace_path()
        try:
            from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
        except ImportError:
            raise ImportError("sql() needs the perfetto package (pip install perfetto)") from None
        binary = os.environ.get(TRACE_PROCESSOR_ENV)
        if binary and not os.path.isfile(binary):
            raise FileNotFoundError(f"{TRACE_PROCESSOR_ENV}={binary}: no such file; point it at a "
                                    "trace_processor_shell binary, or unset it to let perfetto download one")
        try:
            tp = TraceProcessor(trace=path, config=TraceProcessorConfig(bin_path=binary) if binary else
                                TraceProcessorConfig())
        except Exception as e:
            raise RuntimeError(f"sql(): Perfetto's trace processor could not start ({type(e).__name__}: "
                               f"{str(e).splitlines()[0][:200] if str(e) else ''}); without internet set "
                               f"{TRACE_PROCESSOR_ENV} to a trace_processor_shell binary, or query {path} in "
                               "ui.perfetto.dev's Query page") from None
        try:
            return [dict(row.__dict__) for row in tp.query(query)]
        finally:
            tp.close()

    def _trace_path(self) -> str:
        if Path(self.path).suffix in (".pftrace", ".json"):
            return self.path
        if self._trace is None:  # never beside the capture: its folder may be read-only or shared
            import tempfile
            from proton_lite.trace import write_trace
            fd, out = tempfile.mkstemp(prefix=Path(self.path).stem + "-", suffix=".pftrace")
            os.close(fd)
            write_trace(self.profile, out, "perfetto")
            self._trace = out
        return self._trace


def load(path, align_on: str | None = None) -> LoadedProfile:
    """Decode a capture (``.plraw``) or read a proton-lite trace (``.pftrace``, ``.json``);
    several captures (a list, or a folder of ``.plraw``: one per rank) are merged into one
    profile on one time axis (``session["alignment"]`` says how; ``align_on``: a kernel
    every capture launched at one moment lines them up instead)."""
    if isinstance(path, (list, tuple)) or os.path.isdir(str(path)):
        return _load_several(path, align_on)
    path = str(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"proton_lite.load: {path}: no such file")
    from proton_lite.raw_format import is_raw_file
    if is_raw_file(path) or Path(path).suffix == ".plraw":
        from proton_lite.pipeline import load_profile
        profile = load_profile(path)
    else:
        from proton_lite.trace import load_trace
        profile = load_trace(path)
    return LoadedProfile(path, profile)


def _load_several(paths, align_on: str | None) -> LoadedProfile:
    if not isinstance(paths, (list, tuple)):
        folder = str(paths)
        paths = sorted(str(p) for p in Path(folder).glob("*.plraw"))
        if not paths:
            raise FileNotFoundError(f"proton_lite.load: {folder}: no .plraw capture in this folder")
        label = folder
    else:
        paths = [str(p) for p in paths]
        if not paths:
            raise ValueError("proton_lite.load: an empty list of captures")
        label = paths[0]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"proton_lite.load: {missing[0]}: no such file")
    from proton_lite.pipeline import load_profiles
    from proton_lite.profile_merge import merge_profiles
    return LoadedProfile(label, merge_profiles(load_profiles(paths), align_on=align_on))
