"""Call 10 (issue 24): the binary FlagGems builds and caches for its gelu kernel against the one
a plain JIT launch of the same source builds (tests/benchmarks/flaggems_gelu_shape.py), both
plain: metadata, PTX and cubin written to $OUT, each kernel timed by CUPTI."""
import gc
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, "tests/benchmarks")
sys.path.insert(0, "tests")
import flag_gems  # noqa: E402
from flag_gems.utils.libentry import LibEntry  # noqa: E402
import flaggems_gelu_shape as G  # noqa: E402
from bench import kernel_times  # noqa: E402

out = os.environ.get("OUT", "/tmp/out")
x = torch.randn(8192, 4096, device="cuda")
y = torch.randn(4096, device="cuda")
o = torch.empty_like(x)


def gems():
    with flag_gems.use_gems():
        return F.gelu(x * y + 1.0)


def direct():
    G.gelu_none_kernel_rank_1[(8192 * 4096 // 512, )](x, o, 1, 0, 1, 0, 8192 * 4096, 8192 * 4096, 1, tile_size0=512,
                                                      one_tile_per_cta=True, num_warps=4)


gems()
direct()
torch.cuda.synchronize()
print("gems", {k: round(sorted(v)[len(v) // 2], 1) for k, v in kernel_times(gems, 10, lambda n: "gelu" in n).items()})
print("direct", {k: round(sorted(v)[len(v) // 2], 1) for k, v in kernel_times(direct, 10, lambda n: "gelu" in n).items()})


def dump(tag, kernel, source=None):
    md = kernel.metadata
    d = {k: (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)) for k, v in md._asdict().items()} \
        if hasattr(md, "_asdict") else repr(md)
    with open(os.path.join(out, f"{tag}.json"), "w") as f:
        json.dump({"metadata": d, "n_regs": getattr(kernel, "n_regs", None), "src": repr(getattr(kernel, "src", None))[:2000]}, f, indent=1)
    for k in ("ptx", "ttgir", "cubin"):
        if k in kernel.asm:
            mode = "wb" if isinstance(kernel.asm[k], bytes) else "w"
            with open(os.path.join(out, f"{tag}.{k}"), mode) as f:
                f.write(kernel.asm[k])
    if source:
        with open(os.path.join(out, f"{tag}.src.py"), "w") as f:
            f.write(source)


for obj in gc.get_objects():
    try:
        if not isinstance(obj, LibEntry) or "gelu_none_kernel_rank_1" not in obj.jit_function.__name__:
            continue
    except ReferenceError:
        continue
    src = open(obj.jit_function.fn.__code__.co_filename).read()
    for cache in obj.kernel_cache:
        for key, val in cache.items():
            print("flaggems key", key)
            dump("flaggems", val[0], src)
for cache in G.gelu_none_kernel_rank_1.device_caches.values():
    for key, k in cache[0].items():
        print("direct key", str(key)[:300])
        dump("direct", k)
