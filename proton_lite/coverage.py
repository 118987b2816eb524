"""What a session's profile does not cover, said once at stop (never silent).

Three kinds of launch run in a session without leaving records: plain binaries of kernels
the session selects (compiled before it and launched from a cache), launches captured into
CUDA graphs (their replays are not recorded yet), and torch.compile kernels the session
could not reach (torch imported after ``start``, a recompile that failed, kernels that
Inductor's C++ wrapper launches itself).  Each is
counted per kernel where it can be, and named with what to do about it.
"""
from __future__ import annotations


def _named(counts: dict[str, int], most: int = 8) -> str:
    names = sorted(counts, key=lambda n: (-counts[n], n))
    shown = ", ".join(f"{n} ({counts[n]:,})" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def not_covered(collector, inductor=None, inductor_new: int = 0) -> list[str]:
    """Warning lines (without prefix) for the launches and kernels missing from the profile.

    ``inductor``: the session's ``InductorBridge``; ``inductor_new``: kernels torch.compile
    generated during the session (its own metric)."""
    lines = []
    plain = getattr(collector, "uninstrumented", None)
    if plain:
        lines.append(f"{sum(plain.values()):,} launch(es) of {len(plain)} kernel(s) ran without instrumentation and "
                     f"are not in the profile: {_named(plain)}. They were compiled before the session (a library's "
                     "cache, warmup(), an autotuner's choice) or outside Triton's JIT; start the session before "
                     "their first call, or clear the cache that holds them")
    captured = getattr(collector, "captured", None)
    if captured:
        lines.append(f"{sum(captured.values()):,} launch(es) of {len(captured)} kernel(s) were captured into CUDA "
                     f"graphs and their replays are not in the profile: {_named(captured)}. Replays of graphs are "
                     "not recorded yet; to see these kernels, run the step without graphs inside the session "
                     "(torch.compile: mode='max-autotune-no-cudagraphs' or the default mode instead of "
                     "'reduce-overhead'; your own graphs: call the captured function directly)")
    if inductor is not None and not inductor.used and inductor_new:
        lines.append(f"torch.compile generated {inductor_new} Triton kernel(s) during the session, but torch was "
                     "imported after proton_lite.start(), so they were compiled and launched as usual (subprocess "
                     "workers, Inductor's static launcher) and are not in the profile; import torch before "
                     "starting the session")
    if inductor is not None:
        lines.extend(inductor.warnings())
    return lines
