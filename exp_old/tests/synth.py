"""Build raw captures by hand, byte by byte from the layout in docs/format.md (no GPU needed)."""
import struct

import numpy as np

from proton_lite.layout import CTA_MAGIC, LAYOUT_VERSION, UNIT_MAGIC, BufferLayout, encode_tag
from proton_lite.raw_format import RawWriter


def kernel_meta(kid, name, scopes, layout: BufferLayout):
    return {"id": kid, "name": name, "hash": f"h{kid}", "num_warps": layout.num_warps, "num_ctas": 1, "shared": 0,
            "profile_scratch_size": layout.stride,
            "proton_lite": {"layout_version": LAYOUT_VERSION, "scopes": scopes, "layout": layout.to_json(),
                            "stride": layout.stride, "kernel": name}}


CTA_HEADER = struct.Struct("<IIQQII")  # docs/format.md §1.2: magic, smid, start_gt, start_clk, version, units
UNIT_HEADER = struct.Struct("<IIQQ")  # §1.3: count, magic, end_gt, end_clk
RECORD = struct.Struct("<II")  # §1.4: tag, low 32 bits of the clock
# §1.2a: ("LT" << 16) | smid, gt_length, end_gt, end_clk, clock_length (bits 0-31), version, bits 32-39 of the lengths
LIFETIME = struct.Struct("<IIQQIHBB")


def launch_buffer(layout: BufferLayout, ctas):
    """ctas: list of dicts with smid, start_gt, start_clk, units=[(count, end_gt, end_clk, [(tag, clk64)...])].

    Written with the byte offsets of docs/format.md §1.1-1.4, not with the decoder's dtypes,
    so that a change of the decoder's view of the layout shows up as a failing decode.  A
    compact layout (§1.2a): one 32-byte lifetime block per CTA from its one unit's end."""
    if layout.compact:
        buf = bytearray(32 * len(ctas))
        for i, c in enumerate(ctas):
            if c is not None:
                ((count, end_gt, end_clk, recs), ) = c["units"]
                assert count == 0 and not recs
                gt_length, clk_length = end_gt - c["start_gt"], end_clk - c["start_clk"]
                assert 0 <= gt_length < 1 << 40 and 0 <= clk_length < 1 << 40
                LIFETIME.pack_into(buf, 32 * i, (0x544C << 16) | c["smid"], gt_length & 0xFFFFFFFF, end_gt, end_clk,
                                   clk_length & 0xFFFFFFFF, LAYOUT_VERSION, gt_length >> 32, clk_length >> 32)
        return bytes(buf)
    unit_bytes = 24 + 8 * (layout.capacity + layout.sink_slots)  # §1.1
    stride = 32 + layout.units * unit_bytes
    assert layout.stride == stride, (layout.stride, stride)
    buf = bytearray(len(ctas) * stride)
    for i, c in enumerate(ctas):
        if c is None:
            continue  # a CTA that never ran: header left zero
        block = i * stride
        CTA_HEADER.pack_into(buf, block, CTA_MAGIC, c["smid"], c["start_gt"], c["start_clk"], LAYOUT_VERSION,
                             layout.units)
        for u, (count, end_gt, end_clk, recs) in enumerate(c["units"]):
            unit = block + 32 + u * unit_bytes
            UNIT_HEADER.pack_into(buf, unit, count, UNIT_MAGIC, end_gt, end_clk)
            stored = recs[:layout.capacity]
            if layout.overflow == "last" and len(recs) > layout.capacity:  # as the device did:
                stored = recs[:layout.capacity - 1] + recs[-1:]  # every record past it hit the last slot
            for j, (tag, clk) in enumerate(stored):
                RECORD.pack_into(buf, unit + 24 + 8 * j, tag, clk & 0xFFFFFFFF)
            if layout.sink_slots and len(recs) > layout.capacity:  # as the device does: past the capacity,
                for j, (tag, clk) in enumerate(recs[-layout.sink_slots:]):  # records land in the sink slots
                    RECORD.pack_into(buf, unit + 24 + 8 * (layout.capacity + j), tag, clk & 0xFFFFFFFF)
    return bytes(buf)


def one_scope_capture(path, name: str, scope: str, entry: dict, units: int = 1):
    """A capture of one launch of one CTA whose ``units`` warps each time scope ``scope``
    once; ``entry`` goes into the kernel's proton_lite metadata (the notes the pass leaves:
    ``pipelined``, ``unpipelined``, ``partitions``), as a compiled kernel would carry it."""
    layout = BufferLayout("warp", units, 2, "shared")
    meta = kernel_meta(0, name, [scope], layout)
    meta["proton_lite"].update(entry)
    w = RawWriter(str(path), {"name": "p"})
    w.kernel(meta)
    unit = (2, 12_000, 1_003_000, [(encode_tag(0, False), 1_000_100), (encode_tag(0, True), 1_002_000)])
    ctas = [{"smid": 0, "start_gt": 10_000, "start_clk": 1_000_000, "units": [unit] * units}]
    w.launch(0, 0, 0, (1, 1, 1), 1, 0, 0, launch_buffer(layout, ctas))
    w.end({"launches": 1})
    w.close()
    return path


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


def wave_profile(n_ctas=8192, launches=2, sms=132, resident=6, warps=4, early=0.0, late=0.0, touching=0.1,
                 seed=0):
    """A decoded profile shaped like a layernorm at scale, built without a GPU.

    Each launch runs ``n_ctas`` CTAs of ``warps`` warps, at most ``resident`` at once per
    SM, dispatched in CTA order to the SM slot that frees first (as the block scheduler
    does), so that the trace shows waves and a tail; a fraction ``touching`` of the CTAs
    starts in the very ns its slot's previous CTA ended.  Every warp records two scopes.
    The edge cases of slot packing, off by default as in the real captures in tests/data:
    a fraction ``early`` of the warps records its first scope a few ns before its CTA's
    start (a unit may record before thread 0 stamps the CTA header) and ``late`` a
    zero-length scope a few ns after its CTA's end.
    """
    import heapq

    from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
    rng = np.random.default_rng(seed)
    kernel = KernelInfo(name="layer_norm_fwd", scopes=["stats", "normalize", "flush"], num_warps=warps,
                        granularity="warp", unit_warps=1, capacity=4, meta={"kernel": "layer_norm_fwd"})
    la = np.zeros(launches, LAUNCH_DTYPE)
    rows, t_launch = [], 0
    speed = rng.uniform(0.9, 1.1, sms)  # some SMs are slower: the tail
    for li in range(launches):
        free = [(t_launch + 3 * s + 40 * k, s, k) for s in range(sms) for k in range(resident)]
        heapq.heapify(free)
        dur = rng.normal(3000, 250, n_ctas).clip(1500)
        gap = np.where(rng.random(n_ctas) < touching, 0, rng.integers(20, 200, n_ctas))
        for c in range(n_ctas):  # the block scheduler: the slot that frees first takes the next CTA
            t, s, k = heapq.heappop(free)
            start = t + int(gap[c])
            rows.append((li, c, s, start, start + int(dur[c] * speed[s])))
            heapq.heappush(free, (rows[-1][4], s, k))
        end = max(r[4] for r in rows[-n_ctas:])
        la[li] = (li, 0, 0, n_ctas, 1, 1, n_ctas, 7, t_launch + 0, end, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        t_launch = end + 2000
    rows = np.array(rows, np.int64)
    ctas = np.zeros(len(rows), CTA_DTYPE)
    ctas["launch"], ctas["cta"], ctas["smid"] = rows[:, 0], rows[:, 1], rows[:, 2]
    ctas["start_ns"], ctas["end_ns"] = rows[:, 3], rows[:, 4]
    la["start_ns"] = [rows[rows[:, 0] == i, 3].min() for i in range(launches)]
    ctas["start_clock"] = (1 << 40) + rows[:, 2] * 10_000_000 + rows[:, 3] * 3 // 2
    ctas["end_clock"] = ctas["start_clock"] + (rows[:, 4] - rows[:, 3]) * 3 // 2
    ctas["cycles_per_ns"], ctas["measured_cycles_per_ns"], ctas["finished_units"] = 1.5, 1.5, warps
    n = len(rows) * warps
    cw = np.arange(n) // warps  # the CTA of each warp
    s, e = rows[cw, 3], rows[cw, 4]
    first = s + np.where(rng.random(n) < early, -rng.integers(1, 9, n), rng.integers(0, 5, n))
    mid = s + ((e - s) * rng.uniform(0.35, 0.45, n)).astype(np.int64)
    last = e - rng.integers(0, 30, n)
    spans = [(0, first, mid), (1, mid, last)]
    flush = rng.random(n) < late
    iv = np.zeros(2 * n + int(flush.sum()), INTERVAL_DTYPE)
    at = 0
    for scope, lo, hi in spans + [(2, (e + rng.integers(1, 9, n))[flush], None)]:
        w = np.arange(n) if scope < 2 else np.flatnonzero(flush)
        part = iv[at:at + len(w)]
        part["launch"], part["cta"], part["unit"], part["scope"] = rows[cw[w], 0], rows[cw[w], 1], w % warps, scope
        part["start_ns"], part["end_ns"] = lo, lo if hi is None else hi
        part["cycles"] = (part["end_ns"] - part["start_ns"]) * 3 // 2
        at += len(w)
    return Profile(kernels=[kernel], launches=la, ctas=ctas, intervals=iv, t0_ns=10**12, session={"name": "wave"})


def steps_profile(steps=10, sms=132, seed=0):
    """A decoded profile shaped like training steps, built without a GPU: per step a norm
    (2,048 CTAs of 4 warps, 8 resident per SM), a matmul (528 CTAs of 8 warps, one resident)
    and an attention (264 CTAs of 8 warps, two resident) on one stream, and a copy kernel
    without scopes (132 CTAs) on a second stream that runs beside the matmul.  CTAs go to the
    SM slot that frees first, as in ``wave_profile``; every warp of a scoped kernel records
    two scopes."""
    import heapq

    from proton_lite.profile_data import CTA_DTYPE, INTERVAL_DTYPE, LAUNCH_DTYPE, KernelInfo, Profile
    rng = np.random.default_rng(seed)
    shapes = [("rms_norm_fwd", ["load", "normalize"], 4, 2048, 8, 1200),  # name, scopes, warps, CTAs, resident, ns
              ("matmul_kernel", ["mainloop", "epilogue"], 8, 528, 1, 9000),
              ("attn_fwd", ["qk", "pv"], 8, 264, 2, 14000),
              ("copy_shard", [], 4, 132, 1, 30000)]
    kernels = [KernelInfo(name=n, scopes=s, num_warps=w, granularity="warp" if s else "cta", unit_warps=1,
                          capacity=4, meta={"kernel": n}) for n, s, w, _, _, _ in shapes]
    speed = rng.uniform(0.95, 1.05, sms)
    launches, rows, t = [], [], 0

    def run(k, t0):  # the block scheduler for one launch from t0; returns its end
        _, _, _, n, resident, mean = shapes[k]
        li = len(launches)
        free = [(t0 + 3 * s + 40 * r, s, r) for s in range(sms) for r in range(resident)]
        heapq.heapify(free)
        dur = rng.normal(mean, mean / 12, n).clip(mean / 2)
        for c in range(n):
            ts, s, r = heapq.heappop(free)
            start = ts + int(rng.integers(20, 200))
            rows.append((li, c, s, start, start + int(dur[c] * speed[s]), k))
            heapq.heappush(free, (rows[-1][4], s, r))
        end = max(row[4] for row in rows[-n:])
        launches.append((li, k, n, 7 + (k == 3), t0, end))
        return end

    for _ in range(steps):
        t = run(0, t) + 1500
        side = run(3, t + 2000)  # the second stream, beside the matmul
        t = run(1, t) + 1500
        t = max(run(2, t), side) + 4000
    la = np.zeros(len(launches), LAUNCH_DTYPE)
    for i, (li, k, n, stream, t0, end) in enumerate(launches):
        la[i] = (li, k, 0, n, 1, 1, n, stream, t0, end, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    rows = np.array(rows, np.int64)
    ctas = np.zeros(len(rows), CTA_DTYPE)
    ctas["launch"], ctas["cta"], ctas["smid"] = rows[:, 0], rows[:, 1], rows[:, 2]
    ctas["start_ns"], ctas["end_ns"] = rows[:, 3], rows[:, 4]
    ctas["start_clock"] = (1 << 40) + rows[:, 2] * 10_000_000 + rows[:, 3] * 3 // 2
    ctas["end_clock"] = ctas["start_clock"] + (rows[:, 4] - rows[:, 3]) * 3 // 2
    ctas["cycles_per_ns"], ctas["measured_cycles_per_ns"] = 1.5, 1.5
    warps = np.array([w for _, _, w, _, _, _ in shapes])[rows[:, 5]]
    scoped = np.array([bool(s) for _, s, _, _, _, _ in shapes])[rows[:, 5]]
    ctas["finished_units"] = np.where(scoped, warps, 1)
    cw = np.repeat(np.flatnonzero(scoped), warps[scoped])  # the CTA of each recording warp
    unit = np.concatenate([np.arange(w) for w in warps[scoped]]) if len(cw) else cw
    s, e = rows[cw, 3], rows[cw, 4]
    mid = s + ((e - s) * rng.uniform(0.6, 0.8, len(cw))).astype(np.int64)
    iv = np.zeros(2 * len(cw), INTERVAL_DTYPE)
    for part, scope, lo, hi in ((iv[:len(cw)], 0, s + rng.integers(0, 5, len(cw)), mid),
                                (iv[len(cw):], 1, mid, e - rng.integers(0, 30, len(cw)))):
        part["launch"], part["cta"], part["unit"], part["scope"] = rows[cw, 0], rows[cw, 1], unit, scope
        part["start_ns"], part["end_ns"], part["cycles"] = lo, hi, (hi - lo) * 3 // 2
    return Profile(kernels=kernels, launches=la, ctas=ctas, intervals=iv, t0_ns=10**12, session={"name": "steps"})
