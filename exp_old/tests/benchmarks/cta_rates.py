"""Per-CTA clock rates of a kernel without scopes, under one exit form (GPU, issue 24).

Every CTA's header holds a (``%globaltimer``, ``%clock64``) pair at its start and one at its
end; their ratio is the SM clock in cycles per ns (1.98 at most on the H100).  A form that
writes those pairs wrong shows it here long before a trace looks odd: this is how the
word-per-lane exit was found wrong (design.md, "The exit's stores").  For our gated SiLU
(4,096 CTAs x 8 warps) it prints, per launch, the rates' 1st/50th/99th percentile and
maximum, how many CTAs read over 2.0 (and how many of those are of the first wave), and
saves the per-CTA (smid, start_gt, start_clk, end_gt, end_clk) rows to ``$OUT``.  Run each
form of ``header_forms.py`` in its own process with its own Triton cache:

    TRITON_CACHE_DIR=/tmp/tc_pass python tests/benchmarks/cta_rates.py pass
"""
import os
import sys
import tempfile

sys.path[:0] = [os.path.dirname(__file__), os.path.join(os.path.dirname(__file__), "..")]

import numpy as np  # noqa: E402
import torch  # noqa: E402

import header_forms  # noqa: E402

form = sys.argv[1] if len(sys.argv) > 1 else "pass"
header_forms.use_form(form)  # before the kernel compiles

import proton_lite  # noqa: E402
from proton_lite.decode import cta_block_dtype, expand_lifetimes  # noqa: E402
from proton_lite.layout import BufferLayout  # noqa: E402
from proton_lite.raw_format import read_raw  # noqa: E402

import fixed_cost_kernels as F  # noqa: E402

ROWS, COLS, WAVE = 4096, 2048, 1056  # 8 CTAs of 8 warps per SM x 132 SMs
g = torch.Generator(device="cuda").manual_seed(3)
a, b = (torch.randn(ROWS, COLS, device="cuda", generator=g) for _ in range(2))
c = torch.zeros(ROWS, COLS, device="cuda")
with proton_lite.start(os.path.join(tempfile.mkdtemp(), "rates"), quiet=True, formats=(), decode=False) as s:
    for _ in range(4):
        F.gated_silu_fwd[(ROWS, )](a, b, c, COLS, 0.5, n_cols=COLS, BLOCK=COLS, num_warps=8)
torch.cuda.synchronize()
cap = read_raw(s.result.raw_path)
rows = {}
for i, la in enumerate(cap.launches):
    meta = cap.kernels[la.kernel_id]
    if meta["name"] != "gated_silu_fwd":
        continue
    layout, buffer = BufferLayout.from_json(meta["proton_lite"]["layout"]), la.buffer
    if layout.compact:  # one lifetime block per CTA (format.md §1.2a), read as the headers it holds
        layout, buffer = layout.expanded(), expand_lifetimes(buffer, ROWS)
    blocks = np.frombuffer(buffer, dtype=cta_block_dtype(layout), count=ROWS)
    sg, sc = blocks["start_gt"].astype(np.int64), blocks["start_clk"].astype(np.int64)
    eg, ec = blocks["unit"]["end_gt"][:, 0].astype(np.int64), blocks["unit"]["end_clk"][:, 0].astype(np.int64)
    rate = (ec - sc) / np.maximum(eg - sg, 1)
    first = np.argsort(sg)[:WAVE]
    p1, p50, p99 = np.percentile(rate, [1, 50, 99])
    print(f"{form} launch {i}: rate p1/p50/p99/max {p1:.3f} {p50:.3f} {p99:.3f} {rate.max():.3f}  "
          f">2.0: {(rate > 2.0).sum()} (first wave {(rate[first] > 2.0).sum()})  span ns p50 {np.median(eg - sg):.0f}")
    rows[f"launch{i}"] = np.stack([blocks["smid"].astype(np.int64), sg, sc, eg, ec])
np.savez(os.path.join(os.environ.get("OUT", tempfile.gettempdir()), f"cta_rates_{form}.npz"), **rows)
