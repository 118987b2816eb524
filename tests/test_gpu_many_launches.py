"""A session of many launches on the GPU, written as a trace the UI can open (trace/plan.py).

160 launches of two kernels (one with two scopes per warp, one without scopes), half of them
on a second stream while the first runs, 528 CTAs each: laid out a group per launch the
trace would have ~400,000 tracks; the default layout shares the SM rows between launches.
Checked: the trace reads back to exactly the decoded capture, its track count is bounded by
the SMs and the CTAs they held at once (not by the launches), every launch has one slice on
the launch rows, and CTA slices are named after their kernel and launch."""
import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from gpu_env import require_torch  # noqa: E402

torch = require_torch()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import proton_lite  # noqa: E402
import proton_lite.language as pl  # noqa: E402
from proton_lite.pipeline import load_profile  # noqa: E402
from proton_lite.trace import load_trace  # noqa: E402
from proton_lite.trace.plan import launch_layout_tracks  # noqa: E402
from proton_lite.trace.tree import _sorted_launches  # noqa: E402
import trace_processor as tp  # noqa: E402

ROWS, COLS, LAUNCHES = 528, 1024, 160


@triton.jit
def scaled_rows(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    with pl.scope("load"):
        x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    with pl.scope("store"):
        tl.store(out_ptr + row * n_cols + offs, x * 2.0 + 1.0, mask=offs < n_cols)


@triton.jit
def added_rows(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row * n_cols + offs, x + 3.0, mask=offs < n_cols)


def _same_records(a, b, keys) -> None:
    """Equal record arrays, whatever their order (sorted by ``keys`` first)."""
    assert len(a) == len(b)
    a, b = (np.sort(x, order=keys) for x in (a, b))
    for name in a.dtype.names:
        assert np.array_equal(a[name], b[name], equal_nan=a.dtype[name].kind == "f"), name


def _most_at_once_per_sm(profile) -> dict:
    """SM -> the most CTAs (of any launch) it held at once, each CTA over its extent: its
    lifetime and its records, at least 1 ns, half open."""
    c, iv = profile.ctas, profile.intervals
    key = (c["launch"].astype(np.int64) << 32) | c["cta"]
    order = np.argsort(key)
    at = order[np.searchsorted(key[order], (iv["launch"].astype(np.int64) << 32) | iv["cta"])]
    lo, hi = c["start_ns"].astype(np.int64), np.maximum(c["end_ns"], c["start_ns"] + 1).astype(np.int64)
    np.minimum.at(lo, at, iv["start_ns"])
    np.maximum.at(hi, at, np.maximum(iv["end_ns"], iv["start_ns"] + 1))
    out = {}
    for sm in np.unique(c["smid"]).tolist():
        m = c["smid"] == sm
        t = np.r_[lo[m], hi[m]]
        step = np.r_[np.ones(m.sum(), np.int64), -np.ones(m.sum(), np.int64)]
        o = np.lexsort((step, t))  # at one time, ends before starts: half open
        out[sm] = int(np.cumsum(step[o]).max())
    return out


def test_a_session_of_many_launches_shares_its_sm_rows(tmp_path):
    x = torch.randn(ROWS, COLS, device="cuda")
    outs = [torch.empty_like(x) for _ in range(4)]
    side = torch.cuda.Stream()
    with proton_lite.start(str(tmp_path / "many"), quiet=True) as session:
        for i in range(LAUNCHES):
            kernel = scaled_rows if i % 2 == 0 else added_rows
            with torch.cuda.stream(side if i % 4 >= 2 else torch.cuda.current_stream()):
                kernel[(ROWS, )](x, outs[i % 4], COLS, BLOCK=COLS, num_warps=4)
    torch.cuda.synchronize()
    assert torch.equal(outs[0], x * 2.0 + 1.0) and torch.equal(outs[1], x + 3.0)
    res = session.result
    assert res.dropped == 0 and res.unmatched == 0, res.summary_line
    (trace, ) = res.trace_paths
    profile = load_profile(res.raw_path)
    user = profile.launches[[profile.kernels[int(k)].name in ("scaled_rows", "added_rows")
                             for k in profile.launches["kernel"]]]
    assert len(user) == LAUNCHES
    back = load_trace(trace)  # every CTA and record, exactly
    _same_records(profile.ctas, back.ctas, ["launch", "cta"])
    _same_records(profile.intervals, back.intervals, ["launch", "cta", "unit", "lane", "start_ns", "depth", "scope"])
    _, packets, _ = tp.pftrace_packets(trace)
    tracks = [p.track_descriptor for p in packets if p.HasField("track_descriptor")]
    sms = _most_at_once_per_sm(profile)
    slots = sum(sms.values())
    lanes = [t for t in tracks if t.name.startswith("launches")]
    # GPU group, its launch rows, per SM: the SM, its slots and at most 4 warp tracks per slot
    assert len(tracks) <= 1 + len(lanes) + len(sms) + slots * (1 + 4), (len(tracks), len(sms), slots)
    per_launch = launch_layout_tracks(profile, _sorted_launches(profile))  # what a group per launch would have
    assert len(tracks) * 50 < per_launch, (len(tracks), per_launch)
    top = [t.name for t in tracks if t.name.startswith("GPU ")]
    assert len(top) == 1 and top[0].startswith(f"GPU {int(profile.launches['device'][0])} · "), top
    names = [p.track_event.name for p in packets if p.HasField("track_event") and p.track_event.type == 1
             and p.track_event.name]
    starts = [n for n in names if " grid=(" in n]  # the launch slices
    assert len(starts) == len(profile.launches)
    cta_names = {e.name for p in packets if p.HasField("interned_data") and p.trusted_packet_sequence_id == 2
                 for e in p.interned_data.event_names}  # the CTA slices' names: one per launch
    assert {f"scaled_rows #{int(n)}" for n in user["launch"][::2]} <= cta_names
    assert {f"added_rows #{int(n)}" for n in user["launch"][1::2]} <= cta_names
    print(f"\n{len(profile.launches)} launches, {len(profile.ctas)} CTAs: {len(tracks)} tracks "
          f"({len(lanes)} launch rows, {len(sms)} SMs, {slots} slots); a group per launch: {per_launch}")
