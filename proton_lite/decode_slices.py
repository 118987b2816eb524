"""The records of one large launch, paired in slices of its CTAs.

Why: a batch's working arrays for its records (each record as an 8-byte word, its (CTA,
unit) group, its nesting level, the enter and exit indices of its pairs: ~32 bytes a record)
live at once, and a launch is decoded whole, however large (its clock fits span every CTA).
One launch of 16.8 M records (a 1 M-CTA vector add with two scopes per warp, 268 MB) took
4.7 times its bytes to decode, where captures of many launches take ~2.  The clock fits and
every per-CTA value need the whole launch, but records pair within their own (CTA, unit), so
from there on the launch goes in slices of CTAs of about ``SLICE_RECORDS`` records each,
every slice's rows written straight to the launch's room in the profile, each slice's arrays
let go before the next (``native_decode``'s C steps, the only ones this path takes).
"""
from __future__ import annotations

import numpy as np

from proton_lite import native_decode

SLICE_RECORDS = 1 << 21  # records a slice (~64 MiB of working arrays)


def sliced(n_launches: int, regions, layout, sink, long_row: np.ndarray, records: int) -> bool:
    """Whether a batch's records go in slices: one launch larger than a slice, with the C steps
    and a sink to write to, and no CTA longer than a 32-bit clock's window (those unwrap their
    records against their units' ends, over the whole launch).  ``regions``: a pool launch's
    (``decode_pool.PoolRegions``: records in its chunks too), else None."""
    return (n_launches == 1 and records > SLICE_RECORDS and (regions is not None or layout.capacity > 0)
            and sink is not None and native_decode.module() is not None and native_decode.fits(sink[0])
            and not long_row.any())


def pair_rows_sliced(buf, layout, rows_at, counts, kept, regions, n_scopes: int, before: int, start_clk, base_gt,
                     ns_per_cycle, cta_ids, sink):
    """``native_decode.pair_rows`` over the launch's CTA rows a slice at a time.  Returns (pairs
    per CTA row, rows written, unplaceable pairs, the rows attempted when the launch's room was
    exceeded or -1), as ``pair_rows`` does for a batch of one launch."""
    out, dest, room, launch_id = sink
    m = len(rows_at)
    per_row = np.empty(m, np.int64)
    cum = np.cumsum(kept.sum(1))
    zeros = np.zeros(m, np.int64)  # every row belongs to the batch's one launch
    written = unplaceable = 0
    r0 = 0
    while r0 < m:
        done = int(cum[r0 - 1]) if r0 else 0
        r1 = min(m, max(r0 + 1, int(np.searchsorted(cum, done + SLICE_RECORDS, side="right"))))
        if regions is None:
            words, group, _ = native_decode.records(buf, layout, rows_at[r0:r1], counts[r0:r1], kept[r0:r1])
        else:  # a pool launch's: its unit blocks and chunks, the slice's groups counted from its first
            words, group, _ = regions.records(buf, r0 * layout.units, r1 * layout.units)
        e_idx, x_idx, level = native_decode.pair(words, group, n_scopes)
        rows, wrote, lost, over = native_decode.pair_rows(
            words, group, level, e_idx, x_idx, layout.units, before, start_clk[r0:r1], base_gt[r0:r1],
            ns_per_cycle[r0:r1], zeros[r0:r1], cta_ids[r0:r1], out, dest + written, room - written, launch_id)
        del words, group, e_idx, x_idx, level
        if over >= 0:
            return per_row, written, unplaceable, written + int(wrote[0]) + 1
        per_row[r0:r1] = rows
        written += int(wrote[0])
        unplaceable += int(lost[0])
        r0 = r1
    return per_row, written, unplaceable, -1
