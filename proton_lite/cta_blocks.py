"""Reading a launch's CTA blocks (format.md §1.2-1.3 and §1.2a): the decoder's one view of
them, CTA and unit headers, into which a compact layout's lifetime blocks are expanded."""
from __future__ import annotations

import functools

import numpy as np

from proton_lite import native_decode
from proton_lite.layout import CTA_MAGIC, LIFETIME_TAG, UNIT_MAGIC, BufferLayout


@functools.lru_cache(maxsize=256)
def cta_block_dtype(layout: BufferLayout) -> np.dtype:
    """A CTA block's numpy dtype (made once a layout: a capture of many launches asked for it a
    launch, 16 K launches 0.3 s)."""
    unit = np.dtype([("count", "<u4"), ("magic", "<u4"), ("end_gt", "<u8"), ("end_clk", "<u8"),
                     ("rec", "<u4", (layout.capacity, 2)), ("sink", "<u4", (layout.sink_slots, 2))])
    dt = np.dtype([("magic", "<u4"), ("smid", "<u4"), ("start_gt", "<u8"), ("start_clk", "<u8"),
                   ("version", "<u4"), ("units", "<u4"), ("unit", unit, (layout.units, ))])
    assert dt.itemsize == layout.stride, (dt.itemsize, layout.stride)
    return dt


_ONE_UNIT = cta_block_dtype(BufferLayout("cta", 1, 0, "global"))  # what a lifetime block reads as
LIFETIME_DTYPE = np.dtype([("tag_smid", "<u4"), ("gt_length", "<u4"), ("end_gt", "<u8"), ("end_clk", "<u8"),
                           ("clk_length", "<u4"), ("version", "<u2"), ("gt_length_hi", "u1"),
                           ("clk_length_hi", "u1")])  # format.md §1.2a


def _lengths(lt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A lifetime block's two lengths, ns and cycles, with their bits 32-39 (format.md §1.2a)."""
    return (lt["gt_length"] | (lt["gt_length_hi"].astype(np.uint64) << np.uint64(32)),
            lt["clk_length"] | (lt["clk_length_hi"].astype(np.uint64) << np.uint64(32)))


def expand_lifetimes(buffer, num_ctas: int) -> np.ndarray:
    """A compact layout's 32-byte lifetime blocks (layout.py; ``buffer``: bytes-like, or a list of
    them, one per launch, read as if joined) as the CTA header and unit header
    that the rest of the decoder reads (``BufferLayout.expanded``), as a bytes-like uint8 array
    (no copy into ``bytes``); a block without its tag (a CTA whose thread 0 never reached its
    exit) stays zero, a CTA missing as before.  Done per batch of launches, on the decoding
    threads (memory: the batches in flight)."""
    out = np.zeros(num_ctas, _ONE_UNIT)
    parts = buffer if isinstance(buffer, list) else [buffer]
    if native_decode.expand_lifetimes(parts, out):  # one pass in C (native_lifetimes_c), each launch's in place
        return out.view(np.uint8)
    lt = np.frombuffer(b"".join(parts) if len(parts) > 1 else parts[0], LIFETIME_DTYPE, num_ctas)
    ran = _written(lt)
    if not ran.all():  # (every CTA ran, as a rule: no copies through the mask)
        lt = lt[ran]
    unit = out["unit"][:, 0]  # views into ``out``
    gt_length, clk_length = _lengths(lt)
    fields = ((out["magic"], CTA_MAGIC), (out["smid"], lt["tag_smid"] & 0xFFFF), (out["version"], lt["version"]),
              (out["units"], 1), (out["start_gt"], lt["end_gt"] - gt_length),
              (out["start_clk"], lt["end_clk"] - clk_length), (unit["magic"], UNIT_MAGIC),
              (unit["end_gt"], lt["end_gt"]), (unit["end_clk"], lt["end_clk"]))
    for column, value in fields:
        if len(lt) == num_ctas:
            column[:] = value
        else:
            column[ran] = value
    return out.view(np.uint8)


def _written(lt: np.ndarray) -> np.ndarray:
    """Which lifetime blocks a CTA wrote (their tag: thread 0 reached its exit)."""
    return (lt["tag_smid"] >> 16) == LIFETIME_TAG


def start_end_gt(buffer: bytes, layout: BufferLayout, num_ctas: int) -> tuple[np.ndarray, np.ndarray]:
    """The started CTAs' start timer readings and their units' end readings (the decoder's
    tick estimate), read in place, lifetime blocks included."""
    if layout.compact:
        lt = np.frombuffer(buffer, LIFETIME_DTYPE, num_ctas)
        lt = lt[_written(lt)]
        return lt["end_gt"] - _lengths(lt)[0], lt["end_gt"]
    blocks = np.frombuffer(buffer, cta_block_dtype(layout), num_ctas)
    started = blocks["magic"] == CTA_MAGIC
    return blocks["start_gt"][started], blocks["unit"]["end_gt"][started].ravel()
