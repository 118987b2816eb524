"""Plug the PTX pass into Triton's compile pipeline through ``knobs.runtime.add_stages_inspection_hook``.

The hook wraps the backend's ``ptx`` stage for kernels compiled with proton_lite's
instrumentation mode; all other kernels pass through untouched.  It also publishes what
the launcher and the decoder need in the kernel's metadata: ``profile_scratch_size``
(bytes per CTA; Triton's launcher asks the profile allocator for that times the grid),
``profile_scratch_align`` and a ``proton_lite`` entry (scope table, layout, version).

Triton 3.9 also calls the hook with no arguments to fold it into the cache key; it
returns a constant key there, because the settings already live in
``instrumentation_mode`` (see ``config.py``).  The hook is installed only while a session
or ``proton_lite.compile`` needs it, so plain compiles keep Triton's own cache keys.

A session also *forces* its mode on compiles that carry none (``force``): callers of
``triton.compile`` such as torch.compile's Inductor build their own options, and Triton
copies the mode into options only in ``JITFunction.run``.  Such a compile has the plain
cache key, so while forcing, Triton's cache manager is wrapped to look under a salted key
(``_SaltedCache``): an instrumented binary never lands where a plain compile finds it.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import replace

from proton_lite import compat
from proton_lite.markers import MARKER_TAG
from proton_lite.layout import DEFAULT_ALIGN, LAUNCH_SIZED_ALIGN, LAYOUT_VERSION, BufferLayout
from proton_lite.passes.config import InstrumentConfig, resolve_granularity
from proton_lite.passes.pipelining import notes as pipelining_notes
from proton_lite.passes.kernel_facts import WARP_SPECIALIZE_OP, launched_warps, lost_scopes, marker_scopes
from proton_lite.passes.partitions import find as find_partitions
from proton_lite.passes.record_bound import record_bound_expr
from proton_lite.passes.unpipeline import HINT as UNPIPELINE_HINT
from proton_lite.passes.unpipeline import reparse, unpipeline
from proton_lite.passes import ws_scopes
from proton_lite.passes.layout_choice import choose_layout  # (tests find it here too)
from proton_lite.passes.ptx_staging import sparse_loops
from proton_lite.passes import exit_choice, ptx_lifetimes
from proton_lite.passes.register_cap import PlainBuild, build_best
from proton_lite.passes.pool import PoolPlan
from proton_lite.passes.pool import plan as plan_pool
from proton_lite.passes.ptx_instrument import (PtxScan, fold_exit_branches, lifetimes_only, rewrite, scan,
                                               shared_bytes, staging_offset, start_forms, strip_markers)

# 9: capacity= leaves the record-cost kernel its size; 10: kernels without scopes record lifetimes
# only (no record slot, nothing live across the kernel); 11: instrumented kernels keep their plain
# occupancy (a register cap where the instrumentation cost resident CTAs: register_cap.py)
# 14: scopes of loops Triton warp-specializes are placed in the partitions doing their work (ws_scopes.py)
# 15: kernels without scopes read their CTA's start at entry and write its header at exit (ptx_lifetimes.py)
# 16: ... keeping only the start pair's low halves (two registers; the 64-bit pair delayed loads)
# 17: straight-line kernels with scopes too (ptx_emit.py), except the session's record-cost kernel
# 18: loops sized at launch stage their records in shared memory, copied in blocks (flush_slots)
# 19: straight-line kernels without scopes, one unit per CTA: one 32-byte lifetime block (compact)
# (20: a start pair in shared memory, tried and reverted) 21: a compact kernel's exit inline or as a
# call, chosen per kernel by the two builds' schedules (exit_choice.py) 22: kernels without scopes
# with loops: thread 0 keeps the start (the timer from bit 5, the clock's low half) across the
# loops and writes one lifetime block at exit (ptx_lifetimes.LOOP_START)
PASS_VERSION = "proton_lite-ptx-pass-22"
_lock = threading.Lock()
_users = 0
_previous_hook = None
_forced_mode = ""  # the session's mode, for compiles whose options carry none (force)
_saved_manager = None  # (was set, previous value) of knobs.cache.manager_class while forcing
_forced_veto = None  # (kernel name, count) -> True when a forced compile must stay plain (force)


def metadata_entry(info: PtxScan, layout: BufferLayout, bound=None, lost=None,
                   pool_plan: PoolPlan | None = None, pipelined=None, unpipelined=None, partitions=None) -> dict:
    return {
        "layout_version": LAYOUT_VERSION,
        "pass_version": PASS_VERSION,
        "kernel": info.kernel,
        "scopes": list(info.scopes),
        "record_sites": len(info.sites),
        "loop_record_sites": info.loop_sites,
        # from the TTIR: a number when known at compile time, else None
        "records_per_unit_max": bound[1] if bound is not None and bound[0] == "const" else None,
        # ... and for kernels sized at launch, the expression over the launch arguments (bound_expr.py)
        "records_per_unit_expr": bound if layout.sized_at_launch else None,
        "layout": layout.to_json(),
        "stride": layout.stride,
        "shared_staging_bytes": shared_bytes(layout) if layout.staging == "shared" else 0,
        # scopes whose markers a Triton pass removed ({"scopes", "reason", "fix"}; kernel_facts.py)
        "lost_scopes": lost,
        # scopes whose asynchronous loads or dots Triton's pipeliner moved (passes/pipelining.py)
        "pipelined": pipelined or None,
        # scopes opened with pipelined=False: their loop was given one stage ({"scope", "source",
        # "loop_line", "had_stages", "message"}; passes/unpipeline.py)
        "unpipelined": unpipelined or None,
        # warp-specialized: which warps run which partition ({"name", "first_warp", "warps", "role"};
        # passes/partitions.py), None otherwise
        "partitions": partitions or None,
        # a pool (passes/pool.py): records before the first check (the least unit block), checks
        "pool_entry_records": pool_plan.entry_records if layout.pool else None,
        "pool_checks": len(pool_plan.checks) if layout.pool else None,
    }


def _pipelining(ptx: str, info: PtxScan):
    """The pipelining notes (advisory): an analysis that fails on unexpected PTX never stops
    the kernel from being instrumented."""
    try:
        return pipelining_notes(ptx, info)
    except Exception:  # noqa: BLE001
        return None


def instrument_ptx(ptx: str, metadata: dict, config: InstrumentConfig, num_warps: int, bound=None,
                   facts: dict | None = None, fallbacks: list | None = None, exit_calls: list | None = None) -> str:
    """Rewrite one kernel's PTX and record the buffer size and decode table in ``metadata``.

    ``num_warps`` is the requested count; the buffer is sized for the warps the kernel really
    runs with (``launched_warps``: warp specialization adds warps).  ``facts`` holds what the
    earlier stages saw (``ttir_scopes``, ``ttgir_scopes``, ``warp_specialized``).
    ``fallbacks`` gets other forms of the kernel, each with the metadata it needs, for the
    cubin stage to take where ptxas spilled less for them (register_cap.build_best): a kernel
    that writes its CTA header at exit, the header at entry; a kernel staged in blocks, every
    record stored straight to global memory.  ``exit_calls`` gets, for a compact kernel whose
    exit form is chosen per kernel (ptx_lifetimes.EXIT_CHOSEN), its PTX with the exit as a call
    (exit_choice.py: the cubin stage builds both and keeps one)."""
    ptx = fold_exit_branches(ptx)
    info = scan(ptx)
    triton_shared = int(metadata.get("shared", 0) or 0)
    num_warps = launched_warps(ptx, metadata, num_warps)
    facts = facts or {}
    lost = lost_scopes(facts.get("ttir_scopes"), facts.get("ttgir_scopes"), bool(facts.get("warp_specialized")),
                       info.scopes)
    config = replace(config, granularity=resolve_granularity(config.granularity, bool(info.sites),
                                                             bool(facts.get("warp_specialized"))))
    pool_plan = None
    if info.loop_sites and bound is None and config.capacity is None and config.buffer_mode == "clamp":
        start, end = info.body
        pool_plan = plan_pool(ptx.split("\n"), start, end, {s.line for s in info.sites}, info.back_edges)
    layout = choose_layout(info, config, num_warps, triton_shared, bound, pool_plan, lambda: sparse_loops(ptx, info))
    # every thread's halves (straight-line kernels), or thread 0's (loop kernels)
    in_registers, kept = start_forms(ptx, info, layout)
    at_exit = in_registers or bool(kept)
    headers = layout  # the layout of the entry form (CTA and unit headers)
    layout = compact_layout(info, layout, at_exit)
    new_ptx = rewrite(ptx, info, layout, triton_shared, pool_plan if layout.pool else None)
    pipelined = _pipelining(ptx, info)  # of the PTX before the pass: the same for every form

    def kernel_metadata(info: PtxScan, layout: BufferLayout, at_exit: bool) -> dict:
        """What the launcher, the allocator and the decoder read for this form of the kernel."""
        entry = metadata_entry(info, layout, bound, lost, pool_plan if layout.pool else None,
                               pipelined, facts.get("unpipelined"), facts.get("partitions"))
        entry["cta_header"] = "exit" if at_exit else "entry"  # the cubin stage may fall back
        # the launcher asks for this much dynamic shared memory; the allocator tells kernels
        # sized at launch by their alignment (layout.LAUNCH_SIZED_ALIGN)
        return {"shared": staging_offset(triton_shared) + shared_bytes(layout) if layout.staging == "shared"
                else triton_shared, "profile_scratch_size": layout.stride,
                "profile_scratch_align": LAUNCH_SIZED_ALIGN if layout.sized_at_launch else DEFAULT_ALIGN,
                "proton_lite": entry}

    metadata.update(kernel_metadata(info, layout, at_exit))
    if kept:  # where thread 0 keeps a loop kernel's start (ptx_lifetimes.LOOP_START)
        metadata["proton_lite"]["loop_start"] = kept
    if fallbacks is not None and at_exit:  # the header at entry, where the start pair made ptxas spill
        fallbacks.append((rewrite(ptx, info, headers, triton_shared, None, start_at_exit=False),
                          kernel_metadata(info, headers, False)))
    if exit_calls is not None and layout.compact and ptx_lifetimes.EXIT_CHOSEN and not ptx_lifetimes.EXIT_IN_FUNCTION:
        exit_calls.append(rewrite(ptx, scan(ptx), layout, triton_shared, None, exit_call=True))
    if fallbacks is not None and layout.flush_slots:
        # every record a global store, where the block's code made ptxas spill more (the
        # unpipelined matmul of test_gpu_pipelined.py: ~250 registers, spilling either way)
        direct, fresh = replace(layout, staging="global", flush_slots=0), scan(ptx)
        fallbacks.append((rewrite(ptx, fresh, direct, triton_shared, None), kernel_metadata(fresh, direct, False)))
    return new_ptx


def compact_layout(info, layout: BufferLayout, at_exit: bool) -> BufferLayout:
    """One 32-byte lifetime block per CTA (layout.py) where the kernel records only lifetimes,
    one unit per CTA, and writes them at exit: two stores where the CTA and unit headers took
    seven (issue 24, design.md)."""
    if at_exit and lifetimes_only(info, layout) and layout.units == 1:
        return replace(layout, compact=True)
    return layout


def _advisory(fn, *args):
    """``fn(*args)``, or None where it fails: a rewrite that does not understand an IR must
    never stop a kernel from compiling."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001
        return None


@functools.lru_cache(maxsize=8)
def _cache_key(key: str) -> tuple[str, str]:
    """(key, its hash): hashed once, not at every launch (0.6 µs a launch on the CPU host)."""
    return key, hashlib.sha256(key.encode()).hexdigest()


def _hook(*args):
    if not args:  # Triton 3.9 asks for a cache-key contribution, at every launch
        prev = _previous_hook() if _previous_hook is not None else ("", "")
        return _cache_key(PASS_VERSION + str(prev[0]))
    backend, stages, options, language, capability = args
    if _previous_hook is not None:
        _previous_hook(*args)
    forced = not getattr(options, "instrumentation_mode", "")
    config = InstrumentConfig.from_mode(getattr(options, "instrumentation_mode", "") or _forced_mode)
    if config is None or "ptx" not in stages:
        return None
    make_ptx = stages["ptx"]
    bounds: dict[int, list | None] = {}  # id(metadata) -> records per unit, from this compile's TTIR
    facts: dict[int, dict] = {}  # id(metadata) -> what the TTIR and TTGIR held (instrument_ptx)

    if "ttir" in stages:
        make_ttir = stages["ttir"]

        def ttir_stage(src, metadata):
            mod = make_ttir(src, metadata)
            text = str(mod)
            if UNPIPELINE_HINT in text:  # pl.scope(..., pipelined=False): that loop gets one stage
                text, done = unpipeline(text, getattr(options, "num_stages", None))
                mod = reparse(mod, text)
                facts.setdefault(id(metadata), {})["unpipelined"] = done
            facts.setdefault(id(metadata), {})["ttir_scopes"] = marker_scopes(text)
            if WARP_SPECIALIZE_OP not in text and MARKER_TAG in text:  # (Gluon writes its partitions itself)
                facts[id(metadata)]["ws_plan"] = _advisory(ws_scopes.plan, text)
            try:
                bounds[id(metadata)] = record_bound_expr(text)
            except Exception:  # an IR this reader does not follow: size as before (loop_capacity)
                bounds[id(metadata)] = None
            return mod

        stages["ttir"] = ttir_stage

    if "ttgir" in stages:
        make_ttgir = stages["ttgir"]

        def ttgir_stage(src, metadata):
            mod = make_ttgir(src, metadata)
            text = str(mod)
            mine = facts.setdefault(id(metadata), {})
            mine["warp_specialized"] = WARP_SPECIALIZE_OP in text
            if mine["warp_specialized"] and mine.get("ws_plan"):
                # scopes of a loop Triton split into partitions: placed again where their work went
                # (if that fails, the kernel compiles as Triton left it and the scopes are reported lost)
                new_text, placed = _advisory(ws_scopes.rederive, text, mine["ws_plan"]) or (text, [])
                new_mod = _advisory(reparse, mod, new_text) if placed else None
                if new_mod is not None:
                    mod, text = new_mod, new_text
            mine["ttgir_scopes"] = marker_scopes(text)
            if mine["warp_specialized"]:  # which warps run which partition (passes/partitions.py)
                mine["partitions"] = find_partitions(mod, text)
                held = _advisory(ws_scopes.region_scopes, text) or {}
                for entry in mine["partitions"] or ():  # and which scopes each records
                    entry["scopes"] = held.get(entry["name"], [])
            return mod

        stages["ttgir"] = ttgir_stage

    def ptx_stage(src, metadata):
        ptx = make_ptx(src, metadata)
        bound, seen = bounds.pop(id(metadata), None), facts.pop(id(metadata), None)
        if not config.selects(metadata.get("name") or scan(ptx).kernel):
            return strip_markers(ptx)  # not selected: plain code, no profile buffer
        if forced and _forced_veto is not None and _forced_veto(metadata.get("name"), count=False):
            return strip_markers(ptx)  # its caller launches it without a profile buffer
        fallbacks: list[tuple[str, dict]] = []  # (PTX, the metadata it needs), register_cap.build_best
        exit_calls: list[str] = []  # the exit as a call, exit_choice.py
        new_ptx = instrument_ptx(ptx, metadata, config, options.num_warps, bound, seen, fallbacks, exit_calls)
        if "cubin" in stages:  # the cubin stage may need the plain build and the other forms (register_cap.py)
            plains[id(metadata)] = (ptx, fallbacks, exit_calls)
        return new_ptx

    stages["ptx"] = ptx_stage
    if "cubin" in stages:
        make_cubin = stages["cubin"]
        plains: dict[int, tuple] = {}  # id(metadata) -> (the PTX before the pass, fallbacks, exit calls)

        def cubin_stage(src, metadata):
            plain, fallbacks, exit_calls = plains.pop(id(metadata), (None, (), ()))
            if plain is None or "proton_lite" not in metadata:
                return make_cubin(src, metadata)
            return build_cubin(src, metadata, plain, fallbacks, exit_calls, make_cubin, capability)

        stages["cubin"] = cubin_stage
    return None


def build_cubin(src: str, metadata: dict, plain: str, fallbacks, exit_calls, make_cubin, capability,
                plain_cubin: bytes | None = None) -> bytes:
    """The instrumented kernel's cubin, from ``src`` (``instrument_ptx``'s PTX) or one of its other
    forms, kept at the occupancy of ``plain`` (the PTX before the pass; its cubin ``plain_cubin``
    where Triton built it already); what was decided goes into ``metadata``."""
    warps = metadata["proton_lite"]["layout"]["num_warps"]  # as launched (warp specialization adds some)
    plain_build = PlainBuild(strip_markers(plain), make_cubin, metadata, start=plain_cubin is None)  # beside ours
    if plain_cubin is not None:
        plain_build.cubin = plain_cubin
    call = exit_choice.CallBuild(exit_calls[0], make_cubin, metadata, capability) if exit_calls else None
    cubin, decided = build_best([src, *(f[0] for f in fallbacks)], plain_build, make_cubin, metadata, 32 * warps)
    if decided["form"] > 0:  # ptxas spilled less for another form (the header at entry, global stores)
        metadata.update(fallbacks[decided["form"] - 1][1])
    elif call is not None:  # the exit inline or as a call, by the two builds' schedules
        cubin, decided = exit_choice.choose(cubin, decided, call, plain_build, make_cubin, metadata, 32 * warps)
    metadata["proton_lite"]["registers"] = decided
    return cubin


def install() -> None:
    """Install the stage hook (reference counted: nested users are fine)."""
    global _users, _previous_hook
    with _lock:
        if _users == 0:
            current = compat.get_knob("runtime", "add_stages_inspection_hook")
            _previous_hook = current if current is not _hook else None
            compat.set_knob("runtime", "add_stages_inspection_hook", _hook)
        _users += 1


def uninstall() -> None:
    global _users, _previous_hook
    with _lock:
        if _users == 0:
            return
        _users -= 1
        if _users == 0:
            if compat.get_knob("runtime", "add_stages_inspection_hook") is _hook:
                compat.set_knob("runtime", "add_stages_inspection_hook", _previous_hook)
            _previous_hook = None


def installed() -> bool:
    return compat.get_knob("runtime", "add_stages_inspection_hook") is _hook


class _SaltedCache:
    """Triton's cache manager class, called with keys salted by the forced mode: binaries
    compiled while forcing live apart from plain ones (override and dump directories,
    which Triton keys by source only, are left as they are)."""

    def __init__(self, inner, salt: str) -> None:
        self.inner, self.salt = inner, salt

    def __call__(self, key, override=False, dump=False):
        if override or dump:
            return self.inner(key, override=override, dump=dump)
        salt = self.salt
        if _forced_veto is not None and _forced_veto(None, count=True):  # kept plain: a key of its own
            salt += "-plain"
        salted = hashlib.sha256(f"{key}-{salt}".encode()).hexdigest()[:len(key)] if key else key
        return self.inner(salted)


def force(mode: str, veto=None) -> None:
    """Instrument compiles whose options carry no instrumentation mode with ``mode`` (a
    session's), under salted cache keys, until ``unforce``.  ``veto(kernel_name, count)``,
    called in the compiling thread (at the cache lookup, counting, and in the PTX stage), keeps
    a compile plain, under a key of its own, when it returns True: its caller will launch the
    binary without Triton's launcher, hence without a profile buffer."""
    global _forced_mode, _saved_manager, _forced_veto
    file_cache_manager = compat.file_cache_manager_class()
    cache = compat.knob_section("cache", "manager_class")

    with _lock:
        _forced_veto = veto
        if _saved_manager is None:
            was_set = "manager_class" in vars(cache)
            previous = cache.manager_class
            _saved_manager = (was_set, previous)
            cache.manager_class = _SaltedCache(previous or file_cache_manager, PASS_VERSION + mode)
        else:
            cache.manager_class.salt = PASS_VERSION + mode
        _forced_mode = mode


def unforce() -> None:
    global _forced_mode, _saved_manager, _forced_veto
    with _lock:
        _forced_mode, _forced_veto = "", None
        if _saved_manager is None:
            return
        was_set, previous = _saved_manager
        _saved_manager = None
        cache = compat.knob_section("cache", "manager_class")
        if isinstance(cache.manager_class, _SaltedCache):
            if was_set:
                cache.manager_class = previous
            else:
                del cache.manager_class


def forced_mode() -> str:
    return _forced_mode


def unsalted_cache(key: str):
    """Triton's cache manager for ``key`` as Triton's ``get_cache_manager`` makes it, never salted
    while forcing: where runtime/rebuild.py reads a plain compile's files (by its hash) and keeps
    its own builds (under keys of its own, which no salt needs to tell apart)."""
    manager = compat.get_knob("cache", "manager_class")
    if isinstance(manager, _SaltedCache):
        manager = manager.inner
    return (manager or compat.file_cache_manager_class())(compat.cache_key_path(key))
