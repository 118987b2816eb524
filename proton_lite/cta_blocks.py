"""Reading a launch's CTA blocks (format.md §1.2-1.3 and §1.2a): the decoder's one view of
them, CTA and unit headers, into which a compact layout's lifetime blocks are expanded."""
from __future__ import annotations

import numpy as np

from proton_lite.layout import CTA_MAGIC, LIFETIME_TAG, UNIT_MAGIC, BufferLayout


def cta_block_dtype(layout: BufferLayout) -> np.dtype:
    unit = np.dtype([("count", "<u4"), ("magic", "<u4"), ("end_gt", "<u8"), ("end_clk", "<u8"),
                     ("rec", "<u4", (layout.capacity, 2)), ("sink", "<u4", (layout.sink_slots, 2))])
    dt = np.dtype([("magic", "<u4"), ("smid", "<u4"), ("start_gt", "<u8"), ("start_clk", "<u8"),
                   ("version", "<u4"), ("units", "<u4"), ("unit", unit, (layout.units, ))])
    assert dt.itemsize == layout.stride, (dt.itemsize, layout.stride)
    return dt


_ONE_UNIT = cta_block_dtype(BufferLayout("cta", 1, 0, "global"))  # what a lifetime block reads as


def expand_lifetimes(buffer: bytes, num_ctas: int) -> bytes:
    """A compact layout's 32-byte lifetime blocks (layout.py) as the CTA header and unit header
    that the rest of the decoder reads (``BufferLayout.expanded``); a block without its tag
    (a CTA whose thread 0 never reached its exit) stays zero, a CTA missing as before.  Done
    per batch of launches, on the decoding threads (memory: the batches in flight)."""
    lt = np.frombuffer(buffer, np.dtype([("tag_smid", "<u4"), ("gt_length", "<u4"), ("end_gt", "<u8"),
                                         ("end_clk", "<u8"), ("clk_length", "<u4"), ("version", "<u4")]), num_ctas)
    out = np.zeros(num_ctas, _ONE_UNIT)
    ran = (lt["tag_smid"] >> 16) == LIFETIME_TAG
    sel = lt[ran]
    block = out[ran]  # a copy: filled, then put back
    block["magic"], block["smid"], block["version"], block["units"] = CTA_MAGIC, sel["tag_smid"] & 0xFFFF, \
        sel["version"], 1
    block["start_gt"] = sel["end_gt"] - sel["gt_length"]
    block["start_clk"] = sel["end_clk"] - sel["clk_length"]
    unit = block["unit"][:, 0]  # a view into ``block``
    unit["magic"], unit["end_gt"], unit["end_clk"] = UNIT_MAGIC, sel["end_gt"], sel["end_clk"]
    out[ran] = block
    return out.tobytes()


def cta_blocks(buffer: bytes, layout: BufferLayout, num_ctas: int) -> np.ndarray:
    """A launch's CTA blocks as CTA and unit headers (``cta_block_dtype``), lifetime blocks
    expanded."""
    if layout.compact:
        return np.frombuffer(expand_lifetimes(buffer, num_ctas), _ONE_UNIT, num_ctas)
    return np.frombuffer(buffer, cta_block_dtype(layout), num_ctas)
