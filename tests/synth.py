"""Build raw captures by hand, byte by byte from the layout in docs/format.md (no GPU needed)."""
import numpy as np

from proton_lite.decode import cta_block_dtype
from proton_lite.layout import CTA_MAGIC, LAYOUT_VERSION, UNIT_MAGIC, BufferLayout, encode_tag
from proton_lite.raw_format import RawWriter


def kernel_meta(kid, name, scopes, layout: BufferLayout):
    return {"id": kid, "name": name, "hash": f"h{kid}", "num_warps": layout.num_warps, "num_ctas": 1, "shared": 0,
            "profile_scratch_size": layout.stride,
            "proton_lite": {"layout_version": LAYOUT_VERSION, "scopes": scopes, "layout": layout.to_json(),
                            "stride": layout.stride, "kernel": name}}


def launch_buffer(layout: BufferLayout, ctas):
    """ctas: list of dicts with smid, start_gt, start_clk, units=[(count, end_gt, end_clk, [(tag, clk64)...])]."""
    blocks = np.zeros(len(ctas), dtype=cta_block_dtype(layout))
    for i, c in enumerate(ctas):
        if c is None:
            continue  # a CTA that never ran: header left zero
        b = blocks[i]
        b["magic"], b["smid"], b["start_gt"], b["start_clk"] = CTA_MAGIC, c["smid"], c["start_gt"], c["start_clk"]
        b["version"], b["units"] = LAYOUT_VERSION, layout.units
        for u, (count, end_gt, end_clk, recs) in enumerate(c["units"]):
            unit = b["unit"][u]
            unit["count"], unit["magic"], unit["end_gt"], unit["end_clk"] = count, UNIT_MAGIC, end_gt, end_clk
            stored = recs[:layout.capacity]
            if layout.overflow == "last" and len(recs) > layout.capacity:  # as the device did:
                stored = recs[:layout.capacity - 1] + recs[-1:]  # every record past it hit the last slot
            for j, (tag, clk) in enumerate(stored):
                unit["rec"][j] = (tag, clk & 0xFFFFFFFF)
            if layout.sink_slots and len(recs) > layout.capacity:  # as the device does: past the capacity,
                for j, (tag, clk) in enumerate(recs[-layout.sink_slots:]):  # records land in the sink slots
                    unit["sink"][j] = (tag, clk & 0xFFFFFFFF)
    return blocks.tobytes()


def simple_capture(path, n_ctas=6, n_sms=3, units=4, scopes=("a", "b"), rate=1.5, cap=None, drop_last=0,
                   gt0=1_000_000_000):
    """CTAs with nested scopes a>b at known cycle offsets; returns (path, expected intervals)."""
    recs_per_unit = 4
    layout = BufferLayout("warp", units, cap or recs_per_unit, "shared")
    w = RawWriter(path, {"name": "synth"})
    w.kernel(kernel_meta(0, "k", list(scopes), layout))
    ctas = []
    for i in range(n_ctas):
        sm = i % n_sms
        start_clk = 10_000_000 * (sm + 1) + 5000 * (i // n_sms)
        start_gt = gt0 + int((5000 * (i // n_sms)) / rate)
        us = []
        for u in range(units):
            r = [(encode_tag(0, False), start_clk + 100), (encode_tag(1, False), start_clk + 200),
                 (encode_tag(1, True), start_clk + 1700), (encode_tag(0, True), start_clk + 3100)]
            count = recs_per_unit
            end_clk = start_clk + 3200
            us.append((count, start_gt + int(3200 / rate), end_clk, r[:len(r) - drop_last] if drop_last else r))
        ctas.append({"smid": sm, "start_gt": start_gt, "start_clk": start_clk, "units": us})
    w.launch(0, 0, 0, (n_ctas, 1, 1), n_ctas, 0, 0, launch_buffer(layout, ctas))
    w.end({"launches": 1})
    w.close()
    return layout
