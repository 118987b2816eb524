"""Loops users profile (grid-stride, persistent, data-dependent): records kept and device overhead.

Usage: python tests/benchmarks/loops.py [--out loops.json] [--quick] [--only gs_softmax] [--form nodefer]

``--form`` (diagnoses, each with its own ``TRITON_CACHE_DIR``: the pass is changed at run time,
which Triton's cache key does not see): ``nodefer`` builds the loops without deferring a
body's last record to the next iteration (``ptx_instrument._defer_loop_tails``: each
iteration stores its exit record at once); ``nostore`` keeps every record's timer read and
address but drops its store; ``noenter`` / ``noexit`` drop the enter / exit records whole,
``norecords`` both (what is left: the loop's bookkeeping, the entry and the exit);
``noclock`` keeps every record but writes a constant for its ``%clock`` read; ``pinparams``
ships the records and adds an opaque zero to each 64-bit kernel parameter after it is read,
so that ptxas keeps it in a register instead of reading it again from the constant bank;
``storelate`` moves each record store that comes before a load of the kernel's own in its
basic block to after those loads (the loads issue first; the timer reads stay where they
were), and ``storelatepin`` does both; ``nocopy`` stages the records in blocks as shipped but
drops the copies' global stores (what the records cost without their bytes in global memory);
``constcap`` reads no launch capacity word at entry (a constant of 400 records instead: records
past it are dropped), so that no CTA's entry waits for that load; ``noexitcopy`` leaves out the
copy at exit (the last block's records are lost), so that the CTAs' exit is as without blocks.
``--proton-mode`` starts Proton with that instrumentation mode (e.g.
``default:buffer_type=global``, whose ring of 2,048 records per warp keeps every record of
these loops, where the default shared ring of 256 per warp keeps the last ones).
What these forms record is not meant to be read.
For each kernel, in one process: CUPTI kernel times of plain, proton-lite with a default
session, proton-lite with ``capacity=256`` (what a default session did before launch pools
and program-id sizing: a fixed capacity per unit) and Triton's Proton, in interleaved rounds
(bench.py's harness); then one session each that decodes: records kept and dropped per
launch, and the bytes copied back against the bytes reserved.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(__file__))
import bench  # noqa: E402  (its harness; its own kernels are not run here)
from bench import ProtonRef, overhead_rounds, pl, ppl  # noqa: E402

import proton_lite  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402


@triton.jit
def gs_softmax(x_ptr, o_ptr, n_rows, n_cols, BLOCK: tl.constexpr, PROF: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        if PROF == 1:
            pl.enter_scope("row")
        if PROF == 2:
            ppl.enter_scope("row")
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, 0))
        tl.store(o_ptr + row * n_cols + cols, e / tl.sum(e, 0), mask=cols < n_cols)
        if PROF == 1:
            pl.exit_scope("row")
        if PROF == 2:
            ppl.exit_scope("row")


@triton.jit
def persistent_mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                  PROF: tl.constexpr):
    tiles_n = tl.cdiv(N, BN)
    for tile in range(tl.program_id(0), tl.cdiv(M, BM) * tiles_n, tl.num_programs(0)):
        if PROF == 1:
            pl.enter_scope("tile")
        if PROF == 2:
            ppl.enter_scope("tile")
        om = (tile // tiles_n) * BM + tl.arange(0, BM)
        on = (tile % tiles_n) * BN + tl.arange(0, BN)
        ok = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            a = tl.load(a_ptr + om[:, None] * K + (k + ok)[None, :])
            b = tl.load(b_ptr + (k + ok)[:, None] * N + on[None, :])
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + om[:, None] * N + on[None, :], acc.to(tl.float16))
        if PROF == 1:
            pl.exit_scope("tile")
        if PROF == 2:
            ppl.exit_scope("tile")


@triton.jit
def segments(offs_ptr, x_ptr, o_ptr, D: tl.constexpr, PROF: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, D)
    acc = tl.zeros((D, ), tl.float32)
    for r in range(tl.load(offs_ptr + pid), tl.load(offs_ptr + pid + 1)):
        if PROF == 1:
            pl.enter_scope("row")
        if PROF == 2:
            ppl.enter_scope("row")
        acc += tl.load(x_ptr + r * D + cols)
        if PROF == 1:
            pl.exit_scope("row")
        if PROF == 2:
            ppl.exit_scope("row")
    tl.store(o_ptr + pid * D + cols, acc)


def cases(quick):
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = 65536 if not quick else 8192
    x = torch.randn(rows, 1024, device="cuda")
    o = torch.empty_like(x)
    yield "grid-stride softmax", "gs_softmax", lambda p: gs_softmax[(2 * sms, )](x, o, rows, 1024, BLOCK=1024, PROF=p)
    S = 8192 if not quick else 2048
    a = torch.randn(S, S, device="cuda", dtype=torch.float16)
    b = torch.randn(S, S, device="cuda", dtype=torch.float16)
    c = torch.empty(S, S, device="cuda", dtype=torch.float16)
    yield "persistent matmul 8192^3", "persistent_mm", lambda p: persistent_mm[(sms, )](
        a, b, c, S, S, S, BM=128, BN=128, BK=64, PROF=p, num_warps=8, num_stages=3)
    g = torch.Generator().manual_seed(0)
    n_seg = 1024
    lens = torch.randint(10, 30, (n_seg, ), generator=g)
    lens[::16] = 2000  # every 16th segment 100x the median
    offs = torch.zeros(n_seg + 1, dtype=torch.int32)
    offs[1:] = torch.cumsum(lens, 0)
    xs = torch.randn(int(offs[-1]), 128, device="cuda")
    os_ = torch.empty(n_seg, 128, device="cuda")
    offs = offs.cuda()
    yield "segments (loaded bounds)", "segments", lambda p: segments[(n_seg, )](offs, xs, os_, D=128, PROF=p)


def use_form(form: str) -> None:
    """Change the pass for one of ``--form``'s diagnoses (module docstring)."""
    import re
    from proton_lite.passes import ptx_emit, ptx_instrument
    if form == "nodefer":
        ptx_instrument._defer_loop_tails = lambda *a, **k: {}
    record = ptx_emit._Emitter.record
    if form == "nostore":
        ptx_emit._Emitter.record = lambda self, site, tag: [
            line for line in record(self, site, tag) if not re.search(r"\bst\.(global|shared)", line)]
    # forms that change the pass's PTX after it is written (``transform``)
    if form == "constcap":  # the launch's capacity word a constant (400 records, under what any launch here
        # sizes, so every access stays inside the buffer; records past it go to the sink): does the
        # CTA's entry, whose header store waits for that word, cost the loop's kernels?
        from proton_lite.layout import LAUNCH_CAPACITY_TAG

        def transform(ptx):
            return ptx.replace("ld.global.u32 %pl_r24, [%pl_d0];",
                               f"mov.u32 %pl_r24, {(LAUNCH_CAPACITY_TAG << 24) | 400};")
    elif form == "nocopy":
        def transform(ptx):
            return "\n".join(line for line in ptx.split("\n") if "st.global.v2.u32 [%pl_fd+" not in line)
    elif form in ("pinparams", "storelate", "storelatepin"):
        def transform(ptx):
            if form != "pinparams":
                ptx = _stores_after_loads(ptx)
            return _pinned(ptx) if form != "storelate" else ptx

        def _pinned(ptx):
            out = []
            for line in ptx.split("\n"):
                out.append(line)
                m = re.match(r"\s*ld\.param\.b64\s+(%rd\d+),\s*\[\w+_param_\d+\];", line)
                if m:  # the timer's high word >> 31 is 0 (for centuries), which ptxas cannot know
                    r = m.group(1)
                    out.append(f"\t{{ .reg .u32 %pin_t; .reg .u64 %pin_z; mov.u32 %pin_t, %globaltimer_hi; "
                               f"shr.u32 %pin_t, %pin_t, 31; cvt.u64.u32 %pin_z, %pin_t; add.u64 {r}, {r}, %pin_z; }}")
            return "\n".join(out)
    else:
        transform = None
    if transform is not None:
        from proton_lite.passes import stage_hook
        rewrite = stage_hook.rewrite
        stage_hook.rewrite = lambda *a, **k: transform(rewrite(*a, **k))
    if form == "noexitcopy":  # the copy at exit left out (its records are lost): does the CTAs' exit cost?
        from proton_lite.passes import ptx_blocks
        copy = ptx_blocks.BlockCode.block_copy
        ptx_blocks.BlockCode.block_copy = lambda self, at_exit=False, room=0: [] if at_exit else copy(self, at_exit, room)
    if form == "noclock":
        ptx_emit._Emitter.record = lambda self, site, tag: [
            re.sub(r"%clock(64)?;", "7;", line) for line in record(self, site, tag)]
    if form == "norecords":
        ptx_emit._Emitter.record = lambda self, site, tag: []
    if form in ("noenter", "noexit"):
        drop = form[2:]
        ptx_emit._Emitter.record = lambda self, site, tag: [] if site.kind == drop else record(self, site, tag)


def _stores_after_loads(ptx: str) -> str:
    """``--form storelate``: each of our record stores followed, in its basic block, by a load
    of the kernel's own goes after the run of loads (before the next barrier, label or branch)."""
    import re
    lines = ptx.split("\n")
    boundary = re.compile(r"^\s*(\$L__BB\w*:|bar\.sync|@?%?\w*\s*bra\b|.*\bbra(\.uni)?\s)")
    i = 0
    while i < len(lines):
        if "st.global" in lines[i] and "%pl_" in lines[i]:
            j = i + 1
            while j < len(lines) and "ld.global" not in lines[j] and not boundary.match(lines[j]) \
                    and ("st.global" not in lines[j] or "%pl_" in lines[j]):  # (past our other stores)
                j += 1
            if j < len(lines) and "ld.global" in lines[j] and "%pl_" not in lines[j]:
                end = j
                while end < len(lines) and not boundary.match(lines[end]) and "$L__tmp" not in lines[end]:
                    end += 1
                store = lines.pop(i)
                lines.insert(end - 1, store)
                continue
        i += 1
    return "\n".join(lines)


def _spaced(launch, seconds):
    def spaced(p):
        launch(p)
        torch.cuda.synchronize()
        time.sleep(seconds)
    return spaced


def kept(tmp, name, launch, options):
    """Records kept and dropped per launch, bytes copied back and reserved, from one decoded session."""
    with proton_lite.start(os.path.join(tmp, name), quiet=True, formats=(), **options) as s:
        launch(1)
        launch(1)
    torch.cuda.synchronize()
    res = s.result
    cap = read_raw(res.raw_path)
    from proton_lite.decode import decode
    prof = decode(cap)
    mine = prof.launches[np.isin(prof.launches["kernel"], [i for i, k in enumerate(prof.kernels)
                                                             if k.name != "proton_lite_calibrate"])]
    copied = [len(ln.buffer) for ln in cap.launches if cap.kernels[ln.kernel_id]["name"] != "proton_lite_calibrate"]
    return {"records_per_launch": int(mine["records"].mean()), "dropped_per_launch": int(mine["dropped"].mean()),
            "copied_bytes_per_launch": int(np.mean(copied)),
            "pool_chunks": int(mine["pool_chunks"].max()), "pool_taken": int(mine["pool_taken"].max())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="loops.json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--only", help="comma-separated kernel names (gs_softmax, persistent_mm, segments)")
    ap.add_argument("--form", choices=("pass", "nodefer", "nostore", "noenter", "noexit", "norecords", "noclock", "pinparams", "storelate",
                                           "storelatepin", "nocopy", "constcap", "noexitcopy"), default="pass")
    ap.add_argument("--proton-mode", default=None, help="Proton's instrumentation mode (default: its own)")
    ap.add_argument("--spaced", type=float, default=0.0,
                    help="after each launch, synchronize and wait this many ms (every variant alike): no "
                         "launch overlaps the copies of the launches before it")
    ap.add_argument("--chunk-mb", type=int, default=0,
                    help="the sessions' chunk size in MiB (runtime/chunks.CHUNK_BYTES; default 16): with "
                         "chunks larger than a timing block's records, nothing is copied while it runs")
    ap.add_argument("--no-cap256", action="store_true", help="skip the fixed-capacity variant")
    ap.add_argument("--cap", type=int, default=256,
                    help="the fixed capacity of that variant (shared staging where it fits: a capacity "
                         "above a warp's records keeps them all); its keys are named after it")
    args = ap.parse_args()
    use_form(args.form)
    if args.chunk_mb:  # chunks are at most a quarter of the pinned host buffer
        from proton_lite.runtime import collector
        collector.CHUNK_BYTES = args.chunk_mb << 20
        start = proton_lite.start
        proton_lite.start = lambda *a, **k: start(*a, **{"host_buffer_mb": 4 * args.chunk_mb, **k})
    tmp = tempfile.mkdtemp()
    proton_ref = ProtonRef(tmp, mode=args.proton_mode)
    rows = []
    for label, kname, launch, in cases(args.quick):
        if args.only and kname not in args.only.split(","):
            continue
        if args.spaced:
            launch = _spaced(launch, args.spaced / 1000)
        row = {"kernel": label, "form": args.form}
        t = overhead_rounds(launch, kname, args.reps, args.rounds, tmp, proton_ref, {})
        cap, ck = {"capacity": args.cap}, f"cap{args.cap}"
        old = t if args.no_cap256 else overhead_rounds(launch, kname, args.reps, args.rounds, tmp, proton_ref, cap)
        row["plain_us"] = statistics.median(t["plain"] + old["plain"])
        row["pl_us"] = statistics.median(t["pl"])
        row[f"pl_{ck}_us"] = statistics.median(old["pl"])
        row["pl_overhead_pct"] = 100 * (row["pl_us"] / row["plain_us"] - 1)
        row[f"pl_{ck}_overhead_pct"] = 100 * (row[f"pl_{ck}_us"] / row["plain_us"] - 1)
        if t["proton"]:
            row["proton_overhead_pct"] = 100 * (statistics.median(t["proton"]) / row["plain_us"] - 1)
        row["default"] = kept(tmp, kname + "_default", launch, {})
        row[f"capacity_{args.cap}"] = kept(tmp, kname + "_cap", launch, cap)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"device": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
           "date": time.strftime("%Y-%m-%d"), "args": vars(args), "rows": rows, "proton_error": proton_ref.error}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"\n{'kernel':26} {'plain us':>9} {'ovh %':>6} {f'cap{args.cap} %':>8} {'Proton %':>8} {'kept/launch':>11} "
          f"{'dropped':>8} {f'cap{args.cap} dropped':>14} {'copied MB':>9}")
    for r in rows:
        d, c = r["default"], r[f"capacity_{args.cap}"]
        print(f"{r['kernel'][:26]:26} {r['plain_us']:9.1f} {r['pl_overhead_pct']:6.2f} "
              f"{r[f'pl_cap{args.cap}_overhead_pct']:8.2f} {r.get('proton_overhead_pct', float('nan')):8.2f} "
              f"{d['records_per_launch']:11d} {d['dropped_per_launch']:8d} {c['dropped_per_launch']:14d} "
              f"{d['copied_bytes_per_launch'] / 1e6:9.2f}")
    print(f"Proton: {proton_ref.error or 'ok'}")
    sys.stdout.flush()
    os._exit(0)  # leave Proton's data unwritten, as bench.py does


if __name__ == "__main__":
    main()
