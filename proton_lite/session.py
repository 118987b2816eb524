"""``proton_lite.start`` / ``stop``: a profiling session and its options.

While a session is active, kernels launched in the process are compiled with
proton_lite's instrumentation mode (a Triton compile option, so instrumented and plain
binaries never share a cache entry), each launch's buffer is collected, and at ``stop``
the raw capture is decoded into trace files.  Everything the session installs into
Triton (mode, stage hook, profile allocator, launch hooks, JIT hook) is removed at stop.
"""
from __future__ import annotations

import atexit
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from proton_lite.json_values import plain
from proton_lite.passes.config import BUFFER_MODES, GRANULARITIES, InstrumentConfig
from proton_lite.raw_format import RawWriter
from proton_lite.session_result import SessionResult, _summary_line

MODES = ("instrumentation",)
FORMATS = ("perfetto", "chrome")
SIZINGS = ("code", "exact")
_active: "Session | None" = None
_lock = threading.Lock()


@dataclass(frozen=True)
class SessionOptions:
    """Validated session options (unknown names are rejected with the list of valid ones).

    name: base path of the output files (``NAME.plraw``, ``NAME.pftrace``, ``NAME.json``).
    out_dir: folder the output files go to (created if missing); None: ``name`` as given.
    formats: trace formats written at stop, any of "perfetto", "chrome"; () = raw only.
    trace_layout: the traces' track tree: "auto" (default: a group per launch while the
        trace stays small enough for Perfetto's UI, else "sm"), "launch", or "sm" (SM rows
        shared by every launch of a GPU, a row of launch slices above; trace/plan.py).
    granularity: which threads record: "auto" (default: one lane per warp in kernels with
        scopes, per CTA in kernels without, whose warps would only repeat the CTA's start and
        end), "warp", "warpgroup" or "cta".
    kernels: names (fnmatch patterns) of the kernels to instrument; None = all.
    capacity: records per recording unit; None = sized from the code (see docs/design.md).
    sizing: "code" (default): buffers sized from the code, exactly per launch where loop
        bounds come from arguments, program ids and the grid, and with a launch-wide pool
        where they are only known at run time; "exact": a launch whose records did not fit
        runs again with a buffer sized from its counts (the kernel runs twice then: only for
        kernels whose outputs do not depend on their previous contents; see runtime/exact.py).
    loop_capacity: records per unit in the unit block of kernels whose loop bounds are known
        only at run time (more go to the pool), and per unit when a capacity cannot be sized
        otherwise (circular mode, control flow the pool cannot bound).
    pool_mb: the pool of each launch of such a kernel, in MiB; None (default) sizes it from
        what earlier launches of the kernel took (the first gets 256 MiB; runtime/pool_sizing.py).
    buffer_mode: "clamp" keeps the first records when full, "circular" the newest.
    host_buffer_mb: pinned host memory for copies on their way to the disk.
    device_buffer_mb: device memory that copied-back records may wait in while the disk is
        behind, before launches wait for it; None (default): an eighth of the memory free at
        the first launch, at most 4 GiB.  Only used while the disk is behind.
    copy_every: launches of a burst on one stream copied back together (one driver copy per
        batch keeps host time per launch low); a launch after idle time (1 ms; for a stream
        that pauses at every step, such as a synchronize per step, twice its pause, at most
        20 ms) is copied at once.  If a kernel faults, launches of its batch not yet copied
        are lost and reported; 1 copies after every launch.
    graph_slots: replays kept on the device per launch captured into a CUDA graph, until a
        background thread copies them back; None (default): as many as 64 MiB hold (8 to
        4096; fewer once the session's rings hold a sixteenth of the free device memory).
        A replay that finds them all waiting is counted and reported, not kept.
    skip_autotune: leave out the autotuner's timing runs (they are counted and reported).
    decode: decode and write traces at stop (False: only the raw capture).
    calibrate: at stop, launch one tiny kernel that measures the cost of a record on this
        GPU (reported as ``record_cost_cycles`` in the trace metadata).
    clock_anchors: at start and stop, pin each GPU's timer to the host clock with a
        one-thread kernel (about 1.5 ms per GPU): launches of several GPUs and captures of
        several ranks of a machine land on one time axis (docs/design.md §5). False: they
        are placed by their GPU timers as read, which differ between GPUs.
    quiet: no summary line at stop.
    """

    name: str = "proton_lite"
    out_dir: str | None = None
    formats: tuple[str, ...] = ("perfetto",)
    trace_layout: str = "auto"
    granularity: str = "auto"
    kernels: tuple[str, ...] | None = None
    capacity: int | None = None
    sizing: str = "code"
    loop_capacity: int = 256
    buffer_mode: str = "clamp"
    pool_mb: int | None = None
    host_buffer_mb: int = 64
    device_buffer_mb: int | None = None
    copy_every: int = 256
    graph_slots: int | None = None
    skip_autotune: bool = True
    decode: bool = True
    calibrate: bool = True
    clock_anchors: bool = True
    quiet: bool = False

    def __post_init__(self) -> None:
        formats = (self.formats,) if isinstance(self.formats, str) else tuple(self.formats)
        object.__setattr__(self, "formats", formats)
        bad = [f for f in formats if f not in FORMATS]
        if bad:
            raise ValueError(f"proton_lite: unknown trace format(s) {bad}; valid: {', '.join(FORMATS)}")
        from proton_lite.trace.plan import LAYOUTS
        if self.trace_layout not in LAYOUTS:
            raise ValueError(f"proton_lite: unknown trace_layout {self.trace_layout!r}; valid: {', '.join(LAYOUTS)}")
        if self.kernels is not None:
            kernels = (self.kernels,) if isinstance(self.kernels, str) else tuple(self.kernels)
            object.__setattr__(self, "kernels", kernels)
        if self.host_buffer_mb < 1:
            raise ValueError("proton_lite: host_buffer_mb must be at least 1")
        if self.device_buffer_mb is not None and (not isinstance(self.device_buffer_mb, int) or
                                                  isinstance(self.device_buffer_mb, bool) or self.device_buffer_mb < 1):
            raise ValueError(f"proton_lite: device_buffer_mb must be a whole number of MiB >= 1, or None for an "
                             f"eighth of the free device memory (got {self.device_buffer_mb!r})")
        if self.pool_mb is not None and (not isinstance(self.pool_mb, int) or isinstance(self.pool_mb, bool) or
                                         not 1 <= self.pool_mb <= 65536):
            raise ValueError(f"proton_lite: pool_mb must be a whole number of MiB from 1 to 65536, or None to size "
                             f"pools from earlier launches (got {self.pool_mb!r})")
        if self.graph_slots is not None and (not isinstance(self.graph_slots, int) or
                                             isinstance(self.graph_slots, bool) or not 1 <= self.graph_slots <= 65536):
            raise ValueError(f"proton_lite: graph_slots must be a whole number of replays from 1 to 65536, or None "
                             f"to size each ring from 64 MiB (got {self.graph_slots!r})")
        if self.sizing not in SIZINGS:
            raise ValueError(f"proton_lite: unknown sizing {self.sizing!r}; valid: {', '.join(SIZINGS)}")
        if self.sizing == "exact" and self.capacity is not None:
            raise ValueError("proton_lite: sizing='exact' sizes the buffers itself; leave capacity unset (or use "
                             "sizing='code' with your capacity)")
        if not isinstance(self.copy_every, int) or isinstance(self.copy_every, bool) or self.copy_every < 1:
            raise ValueError(f"proton_lite: copy_every must be a whole number of launches >= 1 (got "
                             f"{self.copy_every!r}); 1 copies each launch back right after it")
        self.instrument_config()  # validates granularity, capacity and buffer mode
        if self.decode:  # PROTON_LITE_THREADS is read now: a bad value fails at start(), not at stop
            from proton_lite.stop_threads import stop_threads
            stop_threads()

    @property
    def base(self) -> str:
        """Path of the output files without their extension."""
        return str(Path(self.out_dir) / self.name) if self.out_dir is not None else self.name

    def instrument_config(self) -> InstrumentConfig:
        return InstrumentConfig(self.granularity, self.capacity, self.loop_capacity, self.buffer_mode,
                                tuple(self.kernels or ()))

    @classmethod
    def from_kwargs(cls, name: str, options: dict) -> "SessionOptions":
        valid = [f.name for f in fields(cls) if f.name != "name"]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise TypeError(f"proton_lite.start: unknown option(s) {', '.join(unknown)}; valid options: "
                            f"{', '.join(valid)} (granularity: {', '.join(GRANULARITIES)}; buffer_mode: "
                            f"{', '.join(BUFFER_MODES)}; formats: {', '.join(FORMATS)})")
        return cls(name=name, **options)


class Session:
    """An active profiling session; also a context manager (``with proton_lite.start(...):``)."""

    def __init__(self, options: SessionOptions) -> None:
        self.options = options
        self.raw_path = str(Path(options.base).with_name(Path(options.base).name + ".plraw"))
        self.result: SessionResult | None = None
        self._installed = False
        self._hooks = None  # runtime/triton_hooks.TritonHooks while installed
        self._start_anchors: list[dict] = []  # runtime/clock_probe.py, measured at start

    # -- lifecycle -------------------------------------------------------------------------------
    def _install(self) -> None:
        from proton_lite.runtime import cuda_api

        device = None
        try:
            device = cuda_api.current_device()
        except Exception:
            pass
        session_info = {
            "name": self.options.name, "options": plain(asdict(self.options)),
            "host_start_ns": time.time_ns(), "triton_version": _triton_version(), "proton_lite_version": _version(),
            "device": cuda_api.device_name(device) if device is not None else None,
            "sm_count": cuda_api.device_attribute(device, "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
            if device is not None else None,
            # the highest SM clock the GPU reports: an upper bound for rates estimated from short CTAs
            "sm_clock_max_khz": cuda_api.device_attribute(device, "CU_DEVICE_ATTRIBUTE_CLOCK_RATE")
            if device is not None else None,
            "python": sys.version.split()[0],
            **_process_place(),
        }
        Path(self.raw_path).parent.mkdir(parents=True, exist_ok=True)
        # the GPUs already in use: their timers against the host clock now and again at stop
        from proton_lite.runtime import clock_probe
        if self.options.clock_anchors:
            self._start_anchors = clock_probe.probe_devices(clock_probe.active_contexts(), "start")
        self._writer = RawWriter(self.raw_path, session_info)
        try:
            self._install_hooks()
        except BaseException:  # nothing was recorded: leave no capture behind
            if self._hooks is not None:
                try:
                    self._hooks.uninstall()
                except Exception:
                    pass
            self._writer.close()
            Path(self.raw_path).unlink(missing_ok=True)
            raise

    def _install_hooks(self) -> None:
        from proton_lite.runtime.collector import Collector
        resizer = None
        if self.options.sizing == "exact":
            from proton_lite.runtime.exact import Resizer
            resizer = Resizer(self.options.instrument_config())
        self._collector = Collector(self._writer, self.options.host_buffer_mb << 20, self.options.skip_autotune,
                                    self.options.copy_every, resizer=resizer, pool_mb=self.options.pool_mb,
                                    selects=self.options.instrument_config().selects,
                                    device_limit_bytes=None if self.options.device_buffer_mb is None
                                    else self.options.device_buffer_mb << 20, graph_slots=self.options.graph_slots)
        self._inductor_before = _inductor_kernels_compiled()
        from proton_lite.runtime.triton_hooks import TritonHooks
        self._hooks = TritonHooks(self._collector, self.options.instrument_config().to_mode())
        self._hooks.install()
        self._installed = True
        if self.options.decode:  # what the stop will compile on a machine new to proton_lite, built meanwhile
            from proton_lite.pipeline import build_stop_extensions
            build_stop_extensions(self.options.formats)

    def _uninstall(self) -> None:
        self._hooks.uninstall()
        self._installed = False

    def stop(self) -> SessionResult:
        """Finish collecting, write the raw capture's end, decode and write the traces."""
        global _active
        with _lock:
            if self.result is not None:
                return self.result
            graphs = self._collector.graphs
            before, replays_before = self._collector.launches, graphs.recorded
            compiled = self._hooks.compiled if self._hooks is not None else None
            compiles = (compiled.compiles, compiled.seconds) if compiled is not None else (0, 0.0)  # not the calibration's
            if self._installed and self.options.calibrate and (before or graphs.nodes):
                self._calibrate()
            # the record-cost launches (graph replays drained meanwhile are the user's)
            calibration = self._collector.launches - before - (graphs.recorded - replays_before)
            if self._installed:
                self._uninstall()
            if _active is self:
                _active = None
        collector = self._collector
        t0 = time.perf_counter_ns()
        collector.finish()
        user_launches = collector.launches - calibration  # graph replays are drained at finish too
        drain = collector.drain_stats(stop_ns=time.perf_counter_ns() - t0)
        # after the drain's own stop time is taken: the probe is not part of copying records back
        anchors = self._start_anchors + (collector.clock_anchors()
                                         if self._hooks is not None and self.options.clock_anchors else [])
        self._writer.end({"launches": user_launches, "calibration_launches": calibration,
                          "unattributed": collector.unattributed,
                          "skipped_autotune": collector.skipped_autotune, "lost_launches": collector.lost,
                          "uninstrumented": collector.uninstrumented, "captured": collector.captured,
                          "exact_reruns": collector.resizer.reruns if collector.resizer else 0,
                          "unsized_launches": collector.unsized, "capped_launches": collector.capped,
                          "host_hooks": "c" if self._hooks.fastpath is not None else "python",
                          # (allocations, exit hooks) the C hooks served without the Python ones
                          "host_hooks_fast": list(self._hooks.fastpath.counts()) if self._hooks.fastpath is not None
                          else None,
                          # chunk switches the C hooks made from spares (runtime/chunks.py, SPARE_CHUNKS)
                          "host_hooks_switches": self._hooks.fastpath.switches() if self._hooks.fastpath is not None
                          else None,
                          "host_hooks_error": _fastpath_error(),
                          # launches of autotuned functions walk their frames for trials only while a
                          # timing function runs on their thread (runtime/trials.py; Python 3.12+)
                          "trial_gate": self._hooks.trial_gate,
                          "trial_walks": self._hooks.fastpath.trial_walks() if self._hooks.fastpath is not None
                          else None,
                          "drain": drain, "graphs": collector.graphs.stats(), "clock_anchors": anchors,
                          "errors": collector.errors,
                          "host_end_ns": time.time_ns()})
        self._writer.close()
        result = SessionResult(self.raw_path, launches=user_launches, lost=collector.lost,
                               errors=list(collector.errors), records=None, dropped=None, unmatched=None,
                               compiles=compiles[0], compile_seconds=compiles[1])
        trace_warnings: list[str] = []
        trace_notes: list[str] = []
        if self.options.decode:
            from proton_lite.pipeline import raw_to_traces
            profile, paths = raw_to_traces(self.raw_path, self.options.base, self.options.formats,
                                           progress=not self.options.quiet, warnings=trace_warnings,
                                           layout=self.options.trace_layout, notes=trace_notes)
            result.trace_paths = paths
            result.records = int(profile.launches["records"].sum()) if len(profile.launches) else 0
            result.dropped = profile.total_dropped
            result.keep_all_hint = profile.keep_all_hint()
            result.unmatched = profile.total_unmatched
        result.summary_line = _summary_line(result, collector, self._hooks.inductor,
                                            _inductor_kernels_compiled() - self._inductor_before, trace_warnings,
                                            trace_notes)
        self.result = result
        if not self.options.quiet:
            print(result.summary_line, file=sys.stderr)
        return result

    def _calibrate(self) -> None:
        """Launch the record-cost kernel (runtime/calibrate.py); a failure only loses the estimate."""
        from proton_lite.runtime import calibrate
        try:
            calibrate.launch()
        except Exception as e:  # e.g. the context is gone after a kernel fault
            self._collector.errors.append(f"record-cost calibration skipped: {type(e).__name__}: {e}"[:300])

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> bool:
        self.stop()
        return False


def start(name: str = "proton_lite", mode: str = "instrumentation", **options) -> Session:
    """Start profiling: Triton kernels launched until ``stop()`` are instrumented and recorded.

    Use as ``with proton_lite.start("matmul") as s: ...`` (then ``s.result``) or call
    ``proton_lite.stop()``, which returns the ``SessionResult``.  Files: ``NAME.plraw`` (the
    raw capture) and, at stop, ``NAME.pftrace`` (open it in Perfetto).  Fails at once, in
    one line, where no NVIDIA GPU and driver are present.

    name: base path of the output files (a path prefix: "runs/mm" writes runs/mm.plraw).
    mode: "instrumentation" (the only mode).
    out_dir: folder for the output files, created if missing (default: as ``name`` says).
    formats: traces written at stop: ("perfetto",) (default), "chrome", both, or () for none.
    trace_layout: "auto" (default: a group per launch while small enough for Perfetto's UI,
        else "sm"), "launch" or "sm" (SM rows shared by all launches of a GPU).
    granularity: which threads record: "auto" (default: per warp with scopes, per CTA
        without), "warp", "warpgroup" or "cta".
    kernels: fnmatch patterns of the kernels to instrument (default: all).
    capacity: records per recording unit (default: sized from the code).
    sizing: "code" (default: from the code and each launch's arguments) or "exact" (a launch
        that overflowed runs again with a large enough buffer).
    loop_capacity: records per unit kept in its own block for loops bounded only at run
        time (default 256; more go to the launch's pool).
    pool_mb: MiB of pool per launch of such kernels (default: sized from earlier launches).
    buffer_mode: "clamp" (default: keep the first records when full) or "circular" (newest).
    host_buffer_mb: pinned host memory for copies on their way to disk (default 64).
    device_buffer_mb: device memory records may wait in while the disk is behind (default:
        an eighth of the free memory, at most 4 GiB).
    copy_every: launches of a burst copied back together (default 256; 1 copies each one).
    graph_slots: replays of each launch captured into a CUDA graph kept on the device until
        copied back (default: as many as 64 MiB hold); more are counted, not kept.
    skip_autotune: leave the autotuner's timing runs out (default True; they are counted).
    decode: decode and write traces at stop (default True; False: raw capture only).
    calibrate: measure the cost of a record on this GPU at stop (default True).
    clock_anchors: pin each GPU's timer to the host clock at start and stop, for one time
        axis across GPUs and ranks (default True).
    quiet: print nothing at stop (default False).

    Details of each option: ``proton_lite.SessionOptions``.
    """
    global _active
    if mode not in MODES:
        raise ValueError(f"proton_lite.start: unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    opts = SessionOptions.from_kwargs(name, options)
    with _lock:
        if _active is not None:
            raise RuntimeError(f"proton_lite.start: a session ({_active.options.name!r}) is already active; "
                               "call proton_lite.stop() first")
        _check_can_record()
        session = Session(opts)
        session._install()
        _active = session
    return session


def _check_can_record() -> None:
    """Fail at ``start()``, in one line and before any file exists, where nothing could be recorded."""
    from proton_lite import compat
    if compat.interpreting():
        raise RuntimeError("proton_lite.start: TRITON_INTERPRET=1 runs kernels in Triton's interpreter, as Python "
                           "on the CPU, where there is no device timeline to record; unset TRITON_INTERPRET to "
                           "profile (kernels with scopes run in the interpreter unchanged)")
    try:
        from proton_lite.runtime import cuda_api
        problem = cuda_api.recording_problem()
    except Exception as e:  # cuda-python itself missing or broken
        problem = f"cuda-python could not be used ({type(e).__name__}: {str(e).splitlines()[0][:160]})"
    if problem:
        raise RuntimeError(f"proton_lite.start: cannot record here: {problem}. Recording needs an NVIDIA GPU and its "
                           "driver; compile, summary, trace, diff and open work without one") from None


def stop() -> SessionResult | None:
    """Stop the active session (no-op returning None when there is none)."""
    session = _active
    return session.stop() if session is not None else None


def active() -> Session | None:
    return _active


@atexit.register
def _stop_at_exit() -> None:
    """A process that exits without stop() still leaves a complete raw capture."""
    session = _active
    if session is not None:
        try:
            object.__setattr__(session.options, "decode", False)
            session.stop()
        except Exception as e:  # never raise during interpreter shutdown
            print(f"proton_lite: could not finish the session at exit: {e}", file=sys.stderr)


DISTRIBUTED_ENV = {"rank": "RANK", "local_rank": "LOCAL_RANK", "world_size": "WORLD_SIZE",
                   "local_world_size": "LOCAL_WORLD_SIZE", "node_rank": "GROUP_RANK"}  # as torchrun sets them


def _process_place() -> dict:
    """Where this process sits in a job: host, pid, and under torchrun/torch.distributed its
    rank (read from the environment torchrun sets; torch is not imported)."""
    import os
    import socket
    place = {"host": socket.gethostname(), "pid": os.getpid()}
    for key, env in DISTRIBUTED_ENV.items():
        value = os.environ.get(env)
        if value is not None and value.strip().isdigit():
            place[key] = int(value)
    return place


def _inductor_kernels_compiled() -> int:
    """Kernels torch.compile (Inductor) generated in this process, from its own metrics; 0 when
    torch was never imported (nothing here imports it)."""
    from proton_lite import compat
    return compat.inductor_kernels_compiled()


def _fastpath_error() -> str | None:
    """Why the C hooks could not be built, when they could not (runtime/fastpath.py)."""
    from proton_lite.runtime import fastpath
    return fastpath.build_error()


def _triton_version() -> str:
    from proton_lite import compat
    return compat.triton_version()


def _version() -> str:
    from proton_lite import __version__
    return __version__
