"""Raw capture -> Perfetto trace speed on the CPU (no GPU needed).

Builds a synthetic capture to the documented buffer layout (``proton_lite.layout``, as
``tests/synth.py`` does, but vectorized so that a million records take well under a
second to build), writes it to a ``.plraw``, then times the path of
``proton-lite trace FILE.plraw`` in-process: ``read_raw`` + ``decode`` + ``write_perfetto``
(the same calls as ``proton_lite.pipeline.raw_to_traces``).

Usage::

    python tests/benchmarks/decode_speed.py [--shape mixed|vadd|...|all] [--reps 3] [--keep DIR]
    taskset -c 0,1 python tests/benchmarks/decode_speed.py --shape all

Shapes (CTAs run in waves over 132 SMs, %globaltimer in 32 ns ticks, one %clock64 per
SM with its own origin, record clocks stored as their low 32 bits, a few warps recording
before thread 0's start anchor):

- ``vadd``: bench.py's vector add, 65,536 CTAs x 4 warps x (load; store), capacity 4:
  1.05 M records, per-CTA work dominates.
- ``matmul``: bench.py's per-K-iteration matmul, 1,024 CTAs x 8 warps x (mainloop > 64
  x iter; epilogue) = 132 records in the default loop capacity of 256: 1.08 M records.
- ``nested``: 4,224 CTAs x 4 warps, ``outer`` > (``load``, ``compute``) x 15 (62 records),
  capacity 64; every 97th unit overflows (dropped records, an unmatched enter): 1.05 M.
- ``launches``: ``nested`` as 64 launches of 66 CTAs: 1.05 M records, per-launch costs.
- ``sparse``: 14,592 CTAs x 4 warps x ``outer`` > (``load``, ``compute``) x 4 (18 records)
  in the default loop capacity of 256: 1.05 M records in a 121 MB buffer.
- ``small``: 1,024 launches of a 64-CTA ``vadd``: 1.05 M records, per-launch costs.
- ``lifetimes``: a compiled program's kernels without scopes, 256 launches of 4,096 CTAs
  in 24 kernels, each CTA a 32-byte lifetime block (no records: its rates count CTAs).
- ``steps``: a compiled training loop's launches, 65,536 of 64 CTAs in 48 kernels (4.19 M
  lifetimes), written in BATCH chunks as a session's drain writes them: per-launch costs.
- ``kernels``: as ``steps``, over 4,096 kernels (16 launches each, interleaved): per-kernel costs.
- ``kernel_scopes``: 16,384 launches of a 64-CTA ``vadd`` over 2,048 kernels (16.8 M records):
  per-kernel costs with records.
- ``onelaunch``: one launch of 1 M ``vadd`` CTAs: 16.8 M records, 268 MB in one launch (its
  records paired in slices, ``decode_slices``).
- ``persistent``: one launch of a persistent kernel whose loop is bounded at run time (264
  CTAs x 4 warps x 16,000 records, in chunks of a launch pool): 16.9 M records.
- ``mixed`` (default): half a ``vadd``, half a ``matmul``, a quarter of ``nested`` and
  the 16-CTA calibration launch that every session ends with: 1.33 M records.

Each repetition runs in a fresh process, as the CLI does: the first pass there (*cold*)
pays for fresh memory (page faults) that a second pass in the same process (*warm*) does
not.  Prints, per stage, the best and median wall time over ``--reps`` processes and
records per second.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from proton_lite.decode import cta_block_dtype, decode  # noqa: E402
from proton_lite.layout import (CHUNK_TAG, CTA_MAGIC, LAUNCH_PREFIX_BYTES, LAYOUT_VERSION, UNIT_MAGIC,  # noqa: E402
                                BufferLayout, capacity_word, encode_tag, read_capacity_word)
from proton_lite.passes.config import CALIBRATION_KERNEL, CALIBRATION_SCOPES  # noqa: E402
from proton_lite.raw_format import BATCH_ENTRY, RawWriter, read_raw  # noqa: E402
from proton_lite.trace.perfetto import write_perfetto  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from synth import kernel_meta  # noqa: E402

N_SMS = 132
WARPS = 4
RATE = 1.755  # cycles per ns
TICK = 32  # ns per %globaltimer update
SHAPES = ("mixed", "vadd", "matmul", "nested", "launches", "sparse", "small", "lifetimes", "steps", "kernels",
          "kernel_scopes", "onelaunch", "persistent")
LIFETIME = np.dtype([("tag_smid", "<u4"), ("gt_length", "<u4"), ("end_gt", "<u8"), ("end_clk", "<u8"),
                     ("clock_length", "<u4"), ("version", "<u4")])  # docs/format.md §1.2a


def _tags(pairs) -> np.ndarray:
    return np.array([encode_tag(s, e) for s, e in pairs], np.uint32)


def loop_tags(iters: int) -> np.ndarray:
    """outer enter, ``iters`` x (load enter, load exit, compute enter, compute exit), outer exit."""
    body = [(1, False), (1, True), (2, False), (2, True)]
    return _tags([(0, False)] + body * iters + [(0, True)])


def synth_launch(rng, layout: BufferLayout, n_ctas: int, tags: np.ndarray, long_tags: np.ndarray | None,
                 gt0: int, sm_clk0: np.ndarray, drop_every: int = 97) -> tuple[bytes, int]:
    """One launch's buffer, every unit recording ``tags``; with ``long_tags`` every
    ``drop_every``-th unit records that longer sequence instead, which overflows its buffer.
    Returns (buffer bytes, end of the launch on the %globaltimer axis)."""
    blocks = np.zeros(n_ctas, dtype=cta_block_dtype(layout))
    U, cap = layout.units, layout.capacity
    n_rec = len(tags)
    assert n_rec <= cap
    cta = np.arange(n_ctas)
    sm = cta % N_SMS
    wave = cta // N_SMS
    cta_cycles = 160 * n_rec + 1500
    wave_start = wave * (cta_cycles + 400) + rng.integers(0, 300, n_ctas)
    start_clk = sm_clk0[sm] + wave_start
    t_ns = gt0 + wave_start / RATE  # the same instant on the device-wide ns axis
    blocks["magic"] = CTA_MAGIC
    blocks["smid"] = sm
    blocks["start_gt"] = (t_ns // TICK * TICK).astype(np.uint64)
    blocks["start_clk"] = start_clk.astype(np.uint64)
    blocks["version"] = LAYOUT_VERSION
    blocks["units"] = U

    n_gen = max(n_rec, cap if long_tags is not None else 0)
    steps = rng.integers(20, 300, (n_ctas, U, n_gen))
    steps[:, :, 0] = rng.integers(-40, 60, (n_ctas, U))  # some warps record before thread 0's anchor
    clk = start_clk[:, None, None] + np.cumsum(steps, axis=2)
    unit = blocks["unit"]
    unit["rec"][:, :, :n_rec, 0] = tags
    unit["rec"][:, :, :n_rec, 1] = (clk[:, :, :n_rec] & 0xFFFFFFFF).astype(np.uint32)
    count = np.full((n_ctas, U), n_rec, np.uint32)
    last = np.full((n_ctas, U), n_rec - 1)
    if long_tags is not None:
        over = ((cta[:, None] * U + np.arange(U)[None, :]) % drop_every) == drop_every - 1
        rec = unit["rec"]
        ci, ui = np.nonzero(over)
        rec[ci, ui, :, 0] = long_tags[:cap]
        rec[ci, ui, :, 1] = (clk[ci, ui, :cap] & 0xFFFFFFFF).astype(np.uint32)
        count[over] = len(long_tags)
        last[over] = cap - 1
    unit["count"] = count
    unit["magic"] = UNIT_MAGIC
    end_clk = np.take_along_axis(clk, last[:, :, None], 2)[:, :, 0] + 80
    unit["end_clk"] = end_clk.astype(np.uint64)
    end_t = t_ns[:, None] + (end_clk - start_clk[:, None]) / RATE
    unit["end_gt"] = (end_t // TICK * TICK).astype(np.uint64)
    return blocks.tobytes(), int(end_t.max())


def synth_lifetimes(rng, n_ctas: int, gt0: int, sm_clk0: np.ndarray) -> tuple[bytes, int]:
    """One launch of a kernel without scopes or loops: a 32-byte lifetime block per CTA
    (docs/format.md §1.2a, packed from its offsets), CTAs of 1-3 µs in waves of 8 per SM."""
    cta = np.arange(n_ctas)
    sm, wave = cta % N_SMS, cta // (8 * N_SMS)
    length = rng.integers(1_800, 5_400, n_ctas)  # cycles
    start_clk = sm_clk0[sm] + wave * 6_000 + rng.integers(0, 300, n_ctas)
    end_clk = start_clk + length
    t0 = gt0 + (start_clk - sm_clk0[sm]) / RATE
    start_gt = (t0 // TICK * TICK).astype(np.uint64)
    end_gt = ((t0 + length / RATE) // TICK * TICK).astype(np.uint64)
    b = np.zeros(n_ctas, LIFETIME)
    b["tag_smid"] = (0x544C << 16) | sm
    b["gt_length"] = end_gt - start_gt
    b["end_gt"], b["end_clk"] = end_gt, end_clk.astype(np.uint64)
    b["clock_length"], b["version"] = length, LAYOUT_VERSION
    return b.tobytes(), int(end_gt.max())


def synth_pool_launch(rng, n_ctas: int, units: int, records: int, slots: int, gt0: int,
                      sm_clk0: np.ndarray) -> tuple[bytes, int, BufferLayout]:
    """One launch of a persistent kernel whose loop is bounded at run time: each unit writes
    ``records`` records (a scope per iteration), two in its unit block and the rest in chunks of
    ``slots`` from the launch's pool, laid out as docs/format.md §1.4 says (prefix, CTA blocks,
    chunks).  Returns (buffer, end on the %globaltimer axis, the kernel's layout)."""
    layout = BufferLayout("warp", units, 256, "global", "clamp", sized_at_launch=True, overflow="sink", pool=True,
                          chunk_slots=slots)
    read = layout.with_capacity(2)
    per_unit = -(-(records - 2) // slots)
    n_chunks = n_ctas * units * per_unit
    blocks = np.zeros(n_ctas, dtype=cta_block_dtype(read))
    sm = np.arange(n_ctas) % N_SMS
    start_clk = sm_clk0[sm] + rng.integers(0, 30_000, n_ctas)
    blocks["magic"], blocks["smid"], blocks["version"], blocks["units"] = CTA_MAGIC, sm, LAYOUT_VERSION, units
    blocks["start_gt"] = ((gt0 + (start_clk - sm_clk0[sm]) / RATE) // TICK * TICK).astype(np.uint64)
    blocks["start_clk"] = start_clk
    steps = rng.integers(300, 900, (n_ctas, units, records))
    clk = start_clk[:, None, None] + np.cumsum(steps, axis=2)
    tags = _tags([(0, False), (0, True)] * (records // 2))
    unit = blocks["unit"]
    unit["count"], unit["magic"] = records, UNIT_MAGIC
    unit["rec"][:, :, :2, 0] = tags[:2]
    unit["rec"][:, :, :2, 1] = (clk[:, :, :2] & 0xFFFFFFFF).astype(np.uint32)
    end_clk = clk[:, :, -1] + 80
    unit["end_clk"] = end_clk.astype(np.uint64)
    end_t = blocks["start_gt"][:, None].astype(np.float64) + (end_clk - start_clk[:, None]) / RATE
    unit["end_gt"] = (end_t // TICK * TICK).astype(np.uint64)
    chunk = np.zeros(n_chunks, np.dtype([("tag", "<u4"), ("epoch", "<u4"), ("cta", "<u4"), ("first", "<u4"),
                                         ("rec", "<u4", (slots + 1, 2))]))
    epoch = 3
    c, u, k = np.meshgrid(np.arange(n_ctas), np.arange(units), np.arange(per_unit), indexing="ij")
    c, u, k = c.ravel(), u.ravel(), k.ravel()
    chunk["tag"], chunk["epoch"], chunk["cta"], chunk["first"] = (CHUNK_TAG << 16) | u, epoch, c, 2 + k * slots
    for j in range(slots):  # slot j of every chunk: record 2 + k * slots + j of its unit, where there is one
        i = 2 + k * slots + j
        ok = i < records
        chunk["rec"][ok, j, 0] = tags[i[ok]]
        chunk["rec"][ok, j, 1] = (clk[c[ok], u[ok], i[ok]] & 0xFFFFFFFF).astype(np.uint32)
    order = rng.permutation(n_chunks)  # units take chunks in any order
    prefix = struct.pack("<IIII", capacity_word(2), n_chunks, epoch, n_chunks)
    return prefix + blocks.tobytes() + chunk[order].tobytes(), int(end_t.max()), layout


class Capture:
    def __init__(self, path: str, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        self.w = RawWriter(path, {"name": "decode_speed", "sm_clock_max_khz": 1980000})
        self.sm_clk = self.rng.integers(1 << 30, 1 << 40, N_SMS)
        self.gt = 1_700_000_000_000_000_000
        self.kernels: dict[str, int] = {}
        self.launches = 0
        self.records = 0
        self.batch_bytes = 0  # > 0: launches written in BATCH chunks of about this many bytes, as a session's drain does
        self._pending: list = []

    def launch(self, name: str, scopes, layout: BufferLayout, n_ctas: int, tags, long_tags=None) -> None:
        if name not in self.kernels:
            self.kernels[name] = len(self.kernels)
            self.w.kernel(kernel_meta(self.kernels[name], name, list(scopes), layout))
        if layout.compact:
            buf, end = synth_lifetimes(self.rng, n_ctas, self.gt, self.sm_clk)
        else:
            buf, end = synth_launch(self.rng, layout, n_ctas, tags, long_tags, self.gt, self.sm_clk)
        if self.batch_bytes:
            self._pending.append((self.kernels[name], self.launches, n_ctas, buf))
            if sum(len(b) for *_, b in self._pending) >= self.batch_bytes:
                self._flush()
        else:
            self.w.launch(self.kernels[name], 0, self.launches, (n_ctas, 1, 1), n_ctas, 7, 0, buf)
        gap = end + 20_000 - self.gt  # ns until the next launch starts
        self.sm_clk = self.sm_clk + int(gap * RATE)
        self.gt += gap
        self.launches += 1

    def pool_launch(self, name: str, n_ctas: int, units: int, records: int, slots: int = 255) -> None:
        buf, end, layout = synth_pool_launch(self.rng, n_ctas, units, records, slots, self.gt, self.sm_clk)
        if name not in self.kernels:
            self.kernels[name] = len(self.kernels)
            meta = kernel_meta(self.kernels[name], name, ["tile"], layout)
            meta["proton_lite"]["pool_entry_records"] = 2
            self.w.kernel(meta)
        self.w.launch(self.kernels[name], 0, self.launches, (n_ctas, 1, 1), n_ctas, 7, 0, buf)
        gap = end + 20_000 - self.gt
        self.sm_clk = self.sm_clk + int(gap * RATE)
        self.gt += gap
        self.launches += 1

    def _flush(self) -> None:
        if not self._pending:
            return
        entries = np.zeros(len(self._pending), BATCH_ENTRY)
        sizes = np.array([len(b) for *_, b in self._pending], np.uint64)
        entries["kernel_id"] = [k for k, *_ in self._pending]
        entries["launch_index"] = [i for _, i, *_ in self._pending]
        entries["grid"][:, 0] = entries["num_ctas"] = [n for _, _, n, _ in self._pending]
        entries["grid"][:, 1:] = 1
        entries["stream"] = 7
        entries["buffer_offset"] = np.cumsum(sizes) - sizes
        entries["buffer_bytes"] = sizes
        self.w.batch(entries, b"".join(b for *_, b in self._pending))
        self._pending = []

    def close(self) -> None:
        self._flush()
        self.w.end({"launches": self.launches})
        self.w.close()


def build_capture(path: str, shape: str, seed: int = 1, repeat: int = 1) -> None:
    c = Capture(path, seed)
    for _ in range(repeat):
        _add_shape(c, shape)
    c.close()


def _add_shape(c: Capture, shape: str) -> None:

    def vadd(n_ctas):  # bench.py's vector add: load; store (no nesting), 4 records per warp
        c.launch("vector_add", ["load", "store"], BufferLayout("warp", WARPS, 4, "shared"), n_ctas,
                 _tags([(0, False), (0, True), (1, False), (1, True)]))

    def matmul(n_ctas):  # bench.py's per-K-iteration matmul: mainloop > iter x 64; epilogue
        c.launch("matmul", ["mainloop", "iter", "epilogue"], BufferLayout("warp", 8, 256, "shared"), n_ctas,
                 _tags([(0, False)] + [(1, False), (1, True)] * 64 + [(0, True), (2, False), (2, True)]))

    def nested(n_ctas, cap=64):  # outer > (load, compute) x 15; every 97th unit overflows
        c.launch("looped", ["outer", "load", "compute"], BufferLayout("warp", WARPS, cap, "shared"), n_ctas,
                 loop_tags(15), loop_tags(cap))

    if shape == "vadd":
        vadd(65536)
    elif shape == "matmul":
        matmul(1024)
    elif shape == "nested":
        nested(4224)
    elif shape == "launches":
        for _ in range(64):
            nested(66)
    elif shape == "sparse":  # a short loop in the default loop capacity: 18 of 256 slots used
        c.launch("short_loop", ["outer", "load", "compute"], BufferLayout("warp", WARPS, 256, "shared"), 14592,
                 loop_tags(4))
    elif shape == "small":  # many small launches, e.g. the kernels of a few training steps
        for _ in range(1024):
            vadd(64)
    elif shape == "lifetimes":  # a compiled program's scope-less kernels: 256 launches of 4,096 CTAs, 1 M lifetimes
        compact = BufferLayout("cta", 8, 0, "global", compact=True)
        for i in range(256):
            c.launch(f"triton_poi_fused_{i % 24}", [], compact, 4096, None)
    elif shape == "steps":  # a compiled training loop's many short scope-less launches: 65,536 of 64 CTAs, 4 M
        compact = BufferLayout("cta", 4, 0, "global", compact=True)  # lifetimes, in BATCH chunks as a session writes them
        c.batch_bytes = 16 << 20
        for i in range(65536):
            c.launch(f"triton_poi_fused_{i % 48}", [], compact, 64, None)
    elif shape == "kernels":  # a large compiled model's step: as many launches as ``steps``, of 4,096 kernels
        compact = BufferLayout("cta", 4, 0, "global", compact=True)  # (16 launches each, interleaved)
        c.batch_bytes = 16 << 20
        for i in range(65536):
            c.launch(f"triton_red_fused_{i % 4096}", [], compact, 64, None)
    elif shape == "kernel_scopes":  # many kernels with scopes: 16,384 launches of a 64-CTA vadd, 2,048 kernels
        c.batch_bytes = 16 << 20
        for i in range(16384):
            c.launch(f"fused_attn_{i % 2048}", ["load", "store"], BufferLayout("warp", WARPS, 4, "shared"), 64,
                     _tags([(0, False), (0, True), (1, False), (1, True)]))
    elif shape == "onelaunch":  # one large launch: 1 M CTAs of vector add, 16.8 M records (decode_slices)
        vadd(1 << 20)
    elif shape == "persistent":  # one launch of a persistent kernel with a run-time loop: 16.9 M records in chunks
        c.pool_launch("persistent_tiles", 264, 4, 16_000)
    elif shape == "mixed":
        vadd(32768)
        matmul(512)
        nested(1056)
        # the calibration kernel (runtime/calibrate.py): 16 CTAs, an outer scope around 16 pairs
        c.launch(CALIBRATION_KERNEL, list(CALIBRATION_SCOPES), BufferLayout("warp", WARPS, 34, "shared"), 16,
                 _tags([(0, False)] + [(1, False), (1, True)] * 16 + [(0, True)]))
    else:
        raise ValueError(shape)


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def child(raw: str, out: str, passes: int, workers: int, fmt: str, layout: str = "auto") -> None:
    """Runs in a fresh process: the stages of ``proton-lite trace`` ``passes`` times; prints JSON.
    ``workers`` > 0: the decoder's and the writer's threads (0: as the library picks)."""
    import proton_lite.decode as decode_mod
    from proton_lite.trace.chrome import write_chrome
    if workers:
        decode_mod.DECODE_WORKERS = workers
    writer = write_perfetto if fmt == "perfetto" else write_chrome
    res = []
    for _ in range(passes):
        t_read, cap = timed(read_raw, raw)
        t_dec, prof = timed(decode, cap)
        t_write, stats = timed(lambda p: writer(p, out, workers=workers or None, layout=layout), prof)
        res.append({"read": t_read, "decode": t_dec, "write": t_write, "total": t_read + t_dec + t_write,
                    "write_phases": stats.get("phase_s", {}), "layout": stats.get("layout")})
        del cap, prof
    print(json.dumps(res))


def count_records(raw: str) -> tuple[int, str]:
    """Records kept in the capture's buffers (the calibration launch's included), and what is
    counted: for a capture of kernels without scopes (lifetime blocks only), its CTA
    lifetimes instead."""
    cap = read_raw(raw)
    n = lifetimes = 0
    for launch in cap.launches:
        layout = BufferLayout.from_json(cap.kernels[launch.kernel_id]["proton_lite"]["layout"])
        if layout.compact:
            lifetimes += launch.num_ctas
            continue
        buf = launch.buffer
        if layout.sized_at_launch:  # its capacity in the launch's prefix (docs/format.md §1.4)
            layout = layout.with_capacity(read_capacity_word(int(np.frombuffer(buf, "<u4", 1)[0])) or 0)
            buf = buf[LAUNCH_PREFIX_BYTES:]
        units = np.frombuffer(buf, cta_block_dtype(layout), launch.num_ctas)["unit"]
        n += int(units["count"].sum() if layout.pool else np.minimum(units["count"], layout.capacity).sum())
    return (n, "records") if n or not lifetimes else (lifetimes, "CTA lifetimes (no records)")


def bench(raw: str, out: str, reps: int, workers: int = 0, fmt: str = "perfetto",
          counted: tuple[int, str] | None = None, layout: str = "auto") -> dict:
    """``reps`` fresh processes; in each, the first pass is what the CLI does (cold: new
    process, fresh memory), a second pass in the same process shows the warm cost.
    ``counted``: ``count_records(raw)``, where the caller has it already."""
    records, what = count_records(raw) if counted is None else counted
    runs = []
    for _ in range(reps):
        p = subprocess.run([sys.executable, __file__, "--child", raw, out, str(workers), fmt, layout],
                           capture_output=True, text=True, check=True)
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    print(f"  {records:,} {what} in the capture ({os.path.getsize(raw) / 1e6:.1f} MB), {fmt} trace "
          f"{os.path.getsize(out) / 1e6:.2f} MB ({runs[0][0]['layout']} layout), threads: {workers or 'default'}")
    print(f"  {'':14} {'best s':>7} {'median s':>9} {'M rec/s best':>13} {'M rec/s median':>15}")
    summary = {"records": records, "raw_bytes": os.path.getsize(raw), "trace_bytes": os.path.getsize(out),
               "format": fmt, "workers": workers, "runs": runs}
    for which, k in (("cold", 0), ("warm", 1)):
        for stage in ("read", "decode", "write", "total"):
            v = [r[k][stage] for r in runs]
            best, med = min(v), statistics.median(v)
            summary[f"{which} {stage}"] = (best, med)
            print(f"  {which + ' ' + stage:14} {best:7.3f} {med:9.3f} {records / best / 1e6:13.2f} "
                  f"{records / med / 1e6:15.2f}")
    phases = runs[0][0]["write_phases"]
    if phases:  # where the first run's cold write went (layout and head: serial; index, events: workers)
        print("  cold write phases (first run): " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="mixed", choices=SHAPES + ("all",))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1,
                    help="the shape's launches this many times over (--shape mixed --repeat 16: 21 M records)")
    ap.add_argument("--keep", help="folder to keep the .plraw and .pftrace files in (default: a temporary one)")
    ap.add_argument("--workers", default="0",
                    help="threads for the decoder and the writer, e.g. 4,8,16 (one run each; 0: as the library picks)")
    ap.add_argument("--format", default="perfetto", choices=("perfetto", "chrome"))
    ap.add_argument("--save", help="write every run's numbers to this JSON file")
    ap.add_argument("--layout", default="auto", help="the trace's track tree: auto, launch or sm; several, e.g. "
                    "launch,auto, alternate per worker count (trace/plan.py)")
    ap.add_argument("--child", nargs=5, metavar=("RAW", "OUT", "WORKERS", "FORMAT", "LAYOUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        raw, out, workers, fmt, layout = args.child
        child(raw, out, passes=2, workers=int(workers), fmt=fmt, layout=layout)
        return 0
    tmp = None
    folder = args.keep
    if folder is None:
        tmp = tempfile.TemporaryDirectory()
        folder = tmp.name
    os.makedirs(folder, exist_ok=True)
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count()
    print(f"{cpus} CPUs usable; best and median of {args.reps} fresh processes; cold = the first pass in a "
          "process (what `proton-lite trace` does), warm = a second pass in the same process")
    saved = []
    for shape in SHAPES if args.shape == "all" else (args.shape, ):
        tag = shape if args.repeat == 1 else f"{shape}x{args.repeat}"
        raw = os.path.join(folder, f"decode_speed_{tag}.plraw")
        out = os.path.join(folder, f"decode_speed_{tag}" + (".pftrace" if args.format == "perfetto" else ".json"))
        t_build, _ = timed(build_capture, raw, shape, 1, args.repeat)
        print(f"{tag}: built in {t_build:.2f} s")
        counted = count_records(raw)
        for w in (int(x) for x in args.workers.split(",")):
            for layout in args.layout.split(","):
                saved.append(dict(bench(raw, out, args.reps, w, args.format, counted, layout), shape=tag, cpus=cpus,
                                  layout=layout))
    if args.save:
        with open(args.save, "w") as f:
            json.dump(saved, f, indent=1)
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
