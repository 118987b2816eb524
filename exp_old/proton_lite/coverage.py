"""What a session's profile does not cover, said once at stop (never silent).

Kinds of launch that run in a session without leaving records: plain binaries of kernels
the session selects (compiled before it and launched from a cache; captured into a CUDA
graph too), replays of graphs that found their ring full, and torch.compile kernels the session
could not reach (torch imported after ``start``, a recompile that failed, kernels that
Inductor's C++ wrapper launches itself).  Each is
counted per kernel where it can be, and named with what to do about it.
"""
from __future__ import annotations


def _named(counts: dict[str, int], most: int = 8) -> str:
    names = sorted(counts, key=lambda n: (-counts[n], n))
    shown = ", ".join(f"{n} ({counts[n]:,})" for n in names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def graph_lines(graphs) -> list[str]:
    """Replays of captured launches that were not kept (ring full), and what happens to the
    graphs after stop, said once."""
    if graphs is None:
        return []
    lines = []
    earlier = getattr(graphs, "earlier_replays", None)
    if earlier:
        lines.append(f"{sum(earlier.values()):,} replay(s) of CUDA graphs captured in an earlier session ran in this "
                     f"one and are not in the profile: {_named(earlier)}. A graph records the session it was "
                     "captured in; capture it again inside this session (torch.compile: a new compile, e.g. after "
                     "torch._dynamo.reset()) to record it")
    if not graphs.nodes:
        return lines
    stats = graphs.stats()
    full: dict[str, int] = {}
    for node, launch in zip(stats["nodes"], graphs.nodes):
        if node["overruns"]:
            name = graphs.owner.kernel_name(launch.kernel_id)
            full[name] = full.get(name, 0) + node["overruns"]
    if full:
        slots = sorted({n["slots"] for n in stats["nodes"] if n["overruns"]})
        lines.append(f"{sum(full.values()):,} replay(s) of launches captured into CUDA graphs found their ring of "
                     f"{slots[-1]:,} slot(s) full and were not kept: {_named(full)}. The graph replayed faster than "
                     f"the host copied them back; graph_slots={max(2 * slots[-1], 8)} in proton_lite.start() keeps "
                     "more on the GPU")
    for err in stats["errors"][:3]:
        lines.append(f"a launch captured into a CUDA graph is not recorded: {err}")
    lines.append(f"{stats['captured_launches']:,} launch(es) captured into {stats['graphs']:,} CUDA graph(s) in this "
                 f"session were recorded in {stats['recorded']:,} replay launch(es); the graphs keep their "
                 "instrumented kernels, and their replays after this stop run as before but are not recorded "
                 "(capture them again in a new session to record them)")
    return lines


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
                     f"graphs without instrumentation and their replays are not in the profile: {_named(captured)}. "
                     "They were compiled before the session (or their copy node could not be added: see the "
                     "errors); start the session before the kernels' first call and capture the graph inside it")
    lines.extend(graph_lines(getattr(collector, "graphs", None)))
    if inductor is not None and not inductor.used and inductor_new:
        lines.append(f"torch.compile generated {inductor_new} Triton kernel(s) during the session, but torch was "
                     "imported after proton_lite.start(), so they were compiled and launched as usual (subprocess "
                     "workers, Inductor's static launcher) and are not in the profile; import torch before "
                     "starting the session")
    if inductor is not None:
        lines.extend(inductor.warnings())
    return lines
