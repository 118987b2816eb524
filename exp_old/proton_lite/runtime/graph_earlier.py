"""Replays, during a session, of graphs that an earlier session captured: counted, not recorded.

A graph keeps its instrumented kernels and copy nodes after the session that captured it
stopped; its copy nodes then count each replay in their header's ``discarded`` field
(docs/format.md §4), and the headers live as long as the process.  So a later session can
say how many such replays ran while it did, per kernel: it reads those counters when it
starts and when it stops (8 bytes per captured launch, on a stream of its own).  Why it
matters: ``torch.compile(mode="reduce-overhead")`` keeps the graphs it captured, and a
second session of the same program would otherwise miss them without a word.
"""
from __future__ import annotations

import threading

import numpy as np

from proton_lite.runtime import cuda_api
from proton_lite.runtime.graph_copy import DISCARDED

_closed: list[tuple[object, int, str]] = []  # (context, node header, kernel name), process-wide
_lock = threading.Lock()


def remember(entries: list[tuple[object, int, str]]) -> None:
    """Captured launches of a session that stopped: (its context, node header, kernel name)."""
    with _lock:
        _closed.extend(entries)


def read() -> list[int] | None:
    """Every remembered node's ``discarded`` count, in order; None when they cannot be read
    (a context gone): then nothing is said, rather than something wrong."""
    with _lock:
        nodes = list(_closed)
    if not nodes:
        return []
    try:
        here = cuda_api.current_context()
    except cuda_api.CudaError:
        return None
    counts = np.zeros(len(nodes), "<u8")
    streams: dict[int, tuple[object, int]] = {}
    try:
        for i, (ctx, header, _) in enumerate(nodes):
            key = id(ctx)
            if key not in streams:
                cuda_api.set_context(ctx)
                streams[key] = (ctx, cuda_api.stream_create())  # non-blocking: waits for nobody's work
            cuda_api.set_context(ctx)
            cuda_api.memcpy_dtoh_async(counts.ctypes.data + 8 * i, header + DISCARDED, 8, streams[key][1])
        for ctx, stream in streams.values():
            cuda_api.set_context(ctx)
            cuda_api.stream_synchronize(stream)
            cuda_api.stream_destroy(stream)
    except cuda_api.CudaError:
        return None
    finally:
        try:
            cuda_api.set_context(here)
        except cuda_api.CudaError:
            pass
    return [int(c) for c in counts]


def replays_between(before: list[int] | None, after: list[int] | None) -> dict[str, int]:
    """Kernel name -> replays counted between two ``read`` results (nodes remembered after the
    first read are left out: they are the stopping session's own)."""
    if before is None or after is None:
        return {}
    with _lock:
        names = [name for _, _, name in _closed[:len(before)]]
    out: dict[str, int] = {}
    for name, b, a in zip(names, before, after):
        if a > b:
            out[name] = out.get(name, 0) + a - b
    return out
