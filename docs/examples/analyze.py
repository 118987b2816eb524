"""Notebook-style analysis of a capture: the slowest CTAs of a launch and its tail.

    python docs/examples/analyze.py [CAPTURE.plraw]     # default: the shipped matmul capture

Each block below is a notebook cell; `proton_lite.load` needs no GPU.
"""
import sys
from pathlib import Path

import numpy as np

import proton_lite

path = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("matmul.plraw"))
p = proton_lite.load(path)
for w in p.warnings:  # numbers built from lost records are incomplete: say so first
    print("warning:", w)

# the launches, as `proton-lite summary` shows them
for row in p.launch_stats():
    print(f"#{row['launch']} {row['kernel']}: {row['duration_ns'] / 1e3:.1f} µs, {row['ctas']} CTAs on "
          f"{row['sms_used']} SMs, {row['waves']} wave(s)")

# the five slowest CTAs of the first launch, and how much longer than the median they took
launch = int(p.launches["launch"][0])
ctas = p.ctas[p.ctas["launch"] == launch]
life = (ctas["end_ns"] - ctas["start_ns"]).astype(np.int64)
median = float(np.median(life))
for c in p.slowest_ctas(launch, 5):
    print(f"CTA {int(c['cta'])} on SM {int(c['smid'])}: {(int(c['end_ns']) - int(c['start_ns'])) / 1e3:.2f} µs "
          f"({(int(c['end_ns']) - int(c['start_ns'])) / median - 1:+.0%} against the median)")

# the tail: from when the first SM ran out of CTAs to the launch's end, while SMs sat idle
sms = np.unique(ctas["smid"])
sm_done = np.array([int(ctas["end_ns"][ctas["smid"] == sm].max()) for sm in sms])
end = int(sm_done.max())
tail = end - int(sm_done.min())
halfway = end - tail // 2
print(f"tail: {tail / 1e3:.2f} µs ({tail / (end - int(ctas['start_ns'].min())):.0%} of the launch); halfway "
      f"through it {int((sm_done > halfway).sum())} of {len(sms)} SMs were still busy")

# the scopes, as one call
for s in p.scope_stats():
    print(f"{s['kernel']}/{s['scope']}: {s['count']} intervals, mean {s['mean'] / 1e3:.2f} µs, "
          f"p99 {s['p99'] / 1e3:.2f} µs{' (incomplete)' if s['incomplete'] else ''}")
