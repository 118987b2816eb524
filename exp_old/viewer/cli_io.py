"""Inputs and outputs of the ``proton-lite`` commands: loading captures and traces with
one-line errors (``CliError``), printing JSON and warnings; the constants they share."""
from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

PROG = "proton-lite"
EXIT_OK, EXIT_NOT_FETCHED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
TRACE_FORMATS = {"perfetto": ".pftrace", "chrome": ".json"}  # as proton_lite.trace.EXTENSIONS
TRACE_SUFFIXES = tuple(TRACE_FORMATS.values())
_CAPTURE_HINT = "give a .plraw capture written by proton_lite.start()/stop(), or capture again"


class CliError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


# ---------------------------------------------------------------------------------------------
# loading inputs
# ---------------------------------------------------------------------------------------------

def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise CliError(f"{path}: no such file; check the path")
    if os.path.isdir(path):
        raise CliError(f"{path} is a folder; give a .plraw capture or a .pftrace / .json trace file")


def input_kind(path: str) -> str:
    """"raw" (a capture) or "trace" (a trace file written by proton-lite); else CliError."""
    from proton_lite.raw_format import is_raw_file

    _check_file(path)
    suffix = Path(path).suffix.lower()
    if is_raw_file(path) or suffix == ".plraw":
        return "raw"
    if suffix in TRACE_SUFFIXES:
        return "trace"
    raise CliError(f"{path}: not a proton-lite file; expected a .plraw capture, or a .pftrace / .json trace "
                   "written by proton-lite")


def _interactive() -> bool:
    return sys.stderr.isatty()


def _raw_error(e: Exception) -> CliError:
    msg = str(e)
    return CliError(msg if "upgrade" in msg else f"{msg}; {_CAPTURE_HINT}")


_DECODE_ERRORS = (KeyError, TypeError, ValueError, AssertionError, IndexError)


def _decode_error(path: str, e: Exception) -> CliError:
    from proton_lite.stop_threads import SettingError
    if isinstance(e, SettingError):  # the environment's, not the file's
        return CliError(str(e).removeprefix("proton_lite: "))
    return CliError(f"{path}: cannot decode the capture ({type(e).__name__}: {_one_line(e)}); the file is "
                    f"corrupted or from an incompatible proton-lite; {_CAPTURE_HINT}")


def load_raw(path: str):
    from proton_lite.pipeline import load_profile
    from proton_lite.raw_format import RawFormatError

    try:
        profile = load_profile(path, progress=_interactive())
    except RawFormatError as e:
        raise _raw_error(e) from e
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror or e})") from e
    except _DECODE_ERRORS as e:
        raise _decode_error(path, e) from e
    _check_not_empty(path, profile)
    return profile


def _check_not_empty(path: str, profile) -> None:
    """A capture cut off before its first launch holds nothing to show."""
    if (profile.session or {}).get("truncated") and not len(profile.launches):
        raise CliError(f"{path}: the capture was cut off before any launch was written (the program ended or was "
                       "killed, or the file was truncated); "
                       "nothing to show; capture again and let proton_lite.stop() run")


def missing_module(e: ImportError, ours: str, theirs: str) -> CliError:
    """The error for a failed import: ``ours`` where a proton_lite module is missing (a broken
    install), else ``theirs`` with ``{name}`` and ``{pip}`` (the package to install) filled in."""
    name = getattr(e, "name", None) or ""
    if not name or name.startswith("proton_lite"):
        return CliError(ours)
    return CliError(theirs.format(name=repr(name), pip=name.split(".")[0]))


def load_trace_file(path: str):
    try:
        from proton_lite.trace import load_trace
        importlib.import_module("proton_lite.trace.readback")
    except ImportError as e:
        raise missing_module(e, f"{path}: reading trace files needs proton_lite.trace (its reader is missing from "
                             "this install); summarize the .plraw capture instead",
                             f"{path}: reading trace files needs the Python module {{name}}, which is not installed; "
                             "install it (pip install {pip}) or use the .plraw capture") from e
    try:
        return load_trace(path)
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror or e})") from e
    except Exception as e:  # noqa: BLE001  (any failure to parse the file is bad input)
        why = _one_line(e)
        why = why[len(f"{path}: "):] if why.startswith(f"{path}: ") else why  # name the file once
        raise CliError(f"{path}: not a readable proton-lite trace ({why}); give a trace written by "
                       "proton-lite, or its .plraw capture") from e


def load_input(path: str):
    """A Profile from a .plraw capture or a proton-lite trace file."""
    return load_raw(path) if input_kind(path) == "raw" else load_trace_file(path)


def load_inputs(paths: list[str]) -> list:
    """Profiles of several captures or traces: the captures decoded side by side in processes
    where they are large (``pipeline.load_profiles``), every error worded as ``load_input``
    words it (a failing capture is read again here for its message)."""
    raws = [p for p in paths if input_kind(p) == "raw"]
    decoded = {}
    if len(raws) > 1:
        from proton_lite.pipeline import load_profiles
        try:
            decoded = dict(zip(raws, load_profiles(raws)))
        except Exception:  # noqa: BLE001 - one of them is bad: load_raw below says which and why
            decoded = {}
    out = []
    for p in paths:
        profile = decoded.get(p)
        if profile is None:
            profile = load_input(p)
        else:
            _check_not_empty(p, profile)
        out.append(profile)
    return out


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text or type(e).__name__


# ---------------------------------------------------------------------------------------------
# output helpers
# ---------------------------------------------------------------------------------------------

def _console():
    from rich.console import Console
    return Console(highlight=False)


def _print_json(obj) -> None:
    from proton_lite.json_values import plain
    sys.stdout.write(json.dumps(plain(obj), indent=2, sort_keys=False, allow_nan=False) + "\n")


def _warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)

