"""Where a stop's decode and write go on this host's cores (CPU only): wall time against the
CPU time of the threads, per step.

``decode_speed.py`` gives the totals and the writer's steps (``phase_s``); this tells, for
the decoder's batches and the writer's index step, whether the threads computed or waited
(a thread that waits for the GIL or for memory shows wall time without CPU time).

Usage: python tests/benchmarks/stop_probe.py CAPTURE.plraw   (e.g. decode_speed.py --keep's)
"""
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import proton_lite.decode as decode_mod  # noqa: E402
import proton_lite.decode_assemble as assemble_mod  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402
from proton_lite.trace import native_events, perfetto, rows, tree  # noqa: E402
from proton_lite.trace.perfetto_pieces import Pieces, index_piece  # noqa: E402

T = time.perf_counter


def probe_decode(raw: str):
    marks = []
    in_order, batch = assemble_mod._in_launch_order, decode_mod._decode_batch

    def timed_order(*a, **k):
        t = T()
        out = in_order(*a, **k)
        marks.append(("assemble", len(out), T() - t))
        return out

    def timed_batch(*a, **k):
        t, c = T(), time.thread_time()
        out = batch(*a, **k)
        marks.append(("batch", T() - t, time.thread_time() - c))
        return out
    assemble_mod._in_launch_order, decode_mod._decode_batch = timed_order, timed_batch
    try:
        t = T()
        prof = decode_mod.decode(read_raw(raw))
        total = T() - t
    finally:
        assemble_mod._in_launch_order, decode_mod._decode_batch = in_order, batch
    b = [m for m in marks if m[0] == "batch"]
    print(f"decode {total:.3f} s: {len(b)} batches, wall {sum(m[1] for m in b):.2f} s, CPU "
          f"{sum(m[2] for m in b):.2f} s, longest {max(m[1] for m in b):.3f} s; assembly " +
          ", ".join(f"{m[1]:,} rows {m[2]:.3f} s" for m in marks if m[0] == "assemble"))
    return prof


def probe_index(prof, workers: int) -> None:
    pool = ThreadPoolExecutor(workers)
    pmap = pool.map if workers > 1 else map
    launches = perfetto._sorted_launches(prof)
    t0 = T()
    ctas, cta_lr, runs = tree._cta_layout(prof, launches, pmap)
    t1 = T()
    lay = rows.slot_layout(prof, ctas, cta_lr, runs, pmap)
    t2 = T()
    cut = Pieces(lay.group, runs, len(prof.intervals))
    iv = prof.intervals
    n_scopes, units, lanes = (int(iv[f].max()) + 1 for f in ("scope", "unit", "lane"))
    k_of_lr = launches["kernel"].astype(np.int64)

    def pair_key(sel, cta):
        return k_of_lr[cta_lr[cta]] * n_scopes + iv["scope"][sel].astype(np.int64)

    def task(k):
        w, c = T(), time.thread_time()
        index_piece(cut.sel(k), cut.cta(k), lay.row, iv["unit"], iv["lane"], units, lanes, lay.n_rows, pair_key,
                    n_pairs=len(prof.kernels) * n_scopes, native_keys=lambda sel, cta: native_events.index_keys(
                        sel, cta, lay.row, cta_lr, k_of_lr, iv, units, lanes, n_scopes))
        return T() - w, time.thread_time() - c
    t3 = T()
    res = list(pmap(task, range(len(cut))))
    t4 = T()
    pool.shutdown()
    print(f"write, {workers} threads: order {t1 - t0:.3f} s, slots {t2 - t1:.3f} s, index {t4 - t3:.3f} s "
          f"({len(res)} pieces: wall {sum(r[0] for r in res):.2f} s, CPU {sum(r[1] for r in res):.2f} s)")


if __name__ == "__main__":
    profile = probe_decode(sys.argv[1])
    for n in (16, 4, 1):
        probe_index(profile, n)
