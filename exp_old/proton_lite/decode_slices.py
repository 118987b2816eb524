"""The records of one large launch, paired in slices of its CTAs.

Why: a batch's working arrays for its records (each record as an 8-byte word, its (CTA,
unit) group, its nesting level, the enter and exit indices of its pairs: ~32 bytes a record)
live at once, and a launch is decoded whole, however large (its clock fits span every CTA).
One launch of 16.8 M records (a 1 M-CTA vector add with two scopes per warp, 268 MB) took
4.7 times its bytes to decode, where captures of many launches take ~2.  The clock fits and
every per-CTA value need the whole launch, but records pair within their own (CTA, unit), so
from there on the launch goes in slices of CTAs, every slice's rows written straight to the
launch's room in the profile and its arrays let go once written (``native_decode``'s C steps,
the only ones this path takes), on several threads: about ``SLICE_RECORDS`` records in flight.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from proton_lite import native_decode
from proton_lite.decode_records import room_error

SLICE_RECORDS = 1 << 21  # records a slice (~64 MiB of working arrays)


def sliced(n_launches: int, regions, layout, sink, long_row: np.ndarray, records: int) -> bool:
    """Whether a batch's records go in slices: one launch larger than a slice, with the C steps
    and a sink to write to, and no CTA longer than a 32-bit clock's window (those unwrap their
    records against their units' ends, over the whole launch).  ``regions``: a pool launch's
    (``decode_pool.PoolRegions``: records in its chunks too), else None."""
    return (n_launches == 1 and records > SLICE_RECORDS and (regions is not None or layout.capacity > 0)
            and sink is not None and native_decode.module() is not None and native_decode.fits(sink[0])
            and not long_row.any())


def _slice_ends(kept_row: np.ndarray, per_slice: int) -> list[tuple[int, int]]:
    """(first row, end row) of each slice: whole CTA rows, about ``per_slice`` records each."""
    cum = np.cumsum(kept_row)
    out, r0, m = [], 0, len(kept_row)
    while r0 < m:
        done = int(cum[r0 - 1]) if r0 else 0
        r1 = min(m, max(r0 + 1, int(np.searchsorted(cum, done + per_slice, side="right"))))
        out.append((r0, r1))
        r0 = r1
    return out


def pair_rows_sliced(buf, layout, rows_at, counts, kept, kept_row, regions, n_scopes: int, before: int, start_clk,
                     base_gt, ns_per_cycle, cta_ids, sink, workers: int = 1):
    """``native_decode.pair_rows`` over the launch's CTA rows a slice at a time, ``workers``
    slices at once (each ``SLICE_RECORDS / workers`` records: what is in flight stays about one
    slice's worth).  Each slice writes to its own part of the launch's room, as large as its
    units' kept records allow (two an interval), and the parts are then moved together in row
    order: the rows a whole decode writes.  Returns (pairs per CTA row, rows written,
    unplaceable pairs, the rows attempted where a part's room was exceeded or -1); ``kept_row``:
    the records kept per CTA row (``kept.sum(1)``)."""
    out, dest, room, launch_id = sink
    m = len(rows_at)
    units = layout.units
    slices = _slice_ends(kept_row, max(1, SLICE_RECORDS // max(1, workers)))
    bound = np.array([int((kept[r0:r1] // 2).sum()) for r0, r1 in slices], np.int64)
    at = np.cumsum(bound) - bound  # each slice's part, from the launch's first row
    if int(bound.sum()) > int(room[0]):  # the units' kept records exceed what their counts allowed: never written past
        raise room_error(int(launch_id[0]), int(bound.sum()), int(room[0]))
    zeros = np.zeros(m, np.int64)  # every row belongs to the batch's one launch

    def one(k: int):
        r0, r1 = slices[k]
        if regions is None:
            words, group, _ = native_decode.records(buf, layout, rows_at[r0:r1], counts[r0:r1], kept[r0:r1])
        else:  # a pool launch's: its unit blocks and chunks, the slice's groups counted from its first
            words, group, _ = regions.records(buf, r0 * units, r1 * units)
        e_idx, x_idx, level = native_decode.pair(words, group, n_scopes)
        return native_decode.pair_rows(
            words, group, level, e_idx, x_idx, units, before, start_clk[r0:r1], base_gt[r0:r1], ns_per_cycle[r0:r1],
            zeros[r0:r1], cta_ids[r0:r1], out, dest + at[k], bound[k:k + 1], launch_id)

    if workers > 1 and len(slices) > 1:
        with ThreadPoolExecutor(min(workers, len(slices)), thread_name_prefix="proton_lite-slices") as pool:
            results = list(pool.map(one, range(len(slices))))
    else:
        results = [one(k) for k in range(len(slices))]
    per_row = np.empty(m, np.int64)
    written = unplaceable = 0
    for k, ((r0, r1), (rows, wrote, lost, over)) in enumerate(zip(slices, results)):
        if over >= 0:
            return per_row, written, unplaceable, int(at[k]) + int(wrote[0]) + 1
        w = int(wrote[0])
        if w and int(at[k]) != written:  # down over the room earlier slices left
            src, dst = int(dest[0] + at[k]), int(dest[0]) + written
            out[dst:dst + w] = out[src:src + w]
        per_row[r0:r1] = rows
        written += w
        unplaceable += int(lost[0])
    return per_row, written, unplaceable, -1
