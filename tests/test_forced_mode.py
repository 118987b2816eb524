"""A session's mode on compiles that carry none (Inductor's ``triton.compile`` calls), and the
salted cache that keeps those binaries apart from plain ones.  Real compiles for sm_90, no GPU."""
import os

import triton
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import kernels as K
from proton_lite.passes import stage_hook
from proton_lite.passes.config import InstrumentConfig

TARGET = GPUTarget("cuda", 90, 32)


def _compile(options=None):
    src = ASTSource(K.vector_add, {**K.signature(K.vector_add), "BLOCK": "constexpr"}, {"BLOCK": 256})
    return triton.compile(src, target=TARGET, options=dict(num_warps=4, **(options or {})))


def _entry(compiled):
    return getattr(compiled.metadata, "proton_lite", None)


def test_forcing_instruments_a_compile_without_a_mode_and_keeps_it_out_of_the_plain_cache(cache_dir):
    plain = _compile()
    assert _entry(plain) is None and "globaltimer" not in plain.asm["ptx"]
    had_manager = "manager_class" in vars(knobs.cache)
    stage_hook.install()
    stage_hook.force(InstrumentConfig().to_mode())
    try:
        forced = _compile()
        again = _compile()  # from the salted cache
    finally:
        stage_hook.unforce()
        stage_hook.uninstall()
    assert _entry(forced) is not None and forced.metadata.profile_scratch_size > 0
    assert _entry(forced)["scopes"] == ["load", "store"] and _entry(forced)["record_sites"] == 4  # its scopes too
    assert "globaltimer" in forced.asm["ptx"] and again.asm["ptx"] == forced.asm["ptx"]
    # Triton 3.6 keys both alike (3.9 adds the stage hook's key): they live in two places all the same
    assert len(os.listdir(cache_dir)) == 2
    after = _compile()  # plain again, from the plain entry
    assert _entry(after) is None and after.asm["ptx"] == plain.asm["ptx"]
    assert ("manager_class" in vars(knobs.cache)) == had_manager and not stage_hook.forced_mode()


def test_forcing_leaves_another_tools_mode_alone(cache_dir):
    stage_hook.install()
    stage_hook.force(InstrumentConfig(kernels=("nothing_matches",)).to_mode())
    try:
        excluded = _compile()  # the session's kernels= leaves it out: plain code, no buffer
        explicit = _compile({"instrumentation_mode": InstrumentConfig().to_mode()})
    finally:
        stage_hook.unforce()
        stage_hook.uninstall()
    assert _entry(excluded) is None and "globaltimer" not in excluded.asm["ptx"]
    assert _entry(explicit) is not None  # a mode in the options wins over the forced one


def test_a_users_cache_manager_is_wrapped_and_given_back(cache_dir):
    from triton.runtime.cache import FileCacheManager
    keys = []

    class Recording(FileCacheManager):
        def __init__(self, key, override=False, dump=False):
            keys.append(key)
            super().__init__(key, override=override, dump=dump)

    knobs.cache.manager_class = Recording
    try:
        stage_hook.install()
        stage_hook.force(InstrumentConfig().to_mode())
        try:
            forced = _compile()
        finally:
            stage_hook.unforce()
            stage_hook.uninstall()
        assert knobs.cache.manager_class is Recording
        plain = _compile()
    finally:
        del knobs.cache.manager_class
    assert _entry(forced) is not None and _entry(plain) is None
    assert len(set(keys)) == 2  # the user's manager saw both, under different keys


def test_a_vetoed_compile_stays_plain_under_a_key_of_its_own(cache_dir):
    """Inductor's C++ wrapper launches cubins itself: such compiles stay plain, and neither
    binary is handed to the other kind of compile from the cache."""
    asked = []

    def veto(name, count):
        asked.append((name, count))
        return True

    stage_hook.install()
    try:
        stage_hook.force(InstrumentConfig().to_mode(), veto=veto)
        vetoed = _compile()
        stage_hook.force(InstrumentConfig().to_mode())  # no veto: instrumented, not the plain entry
        forced = _compile()
        stage_hook.force(InstrumentConfig().to_mode(), veto=veto)
        again = _compile()  # the vetoed entry, not the instrumented one
    finally:
        stage_hook.unforce()
        stage_hook.uninstall()
    assert _entry(vetoed) is None and "globaltimer" not in vetoed.asm["ptx"]
    assert _entry(forced) is not None
    assert _entry(again) is None and again.asm["ptx"] == vetoed.asm["ptx"]
    assert (None, True) in asked and ("vector_add", False) in asked  # counted once, at the lookup


def test_auto_granularity_records_ctas_only_in_a_kernel_without_scopes(cache_dir):
    """A session's default: per warp where there are scopes, per CTA where there are none
    (an 8-warp kernel's buffer shrinks from 288 to 32 bytes per CTA: one lifetime block, no record slot)."""
    src = ASTSource(K.vector_add_plain, {**K.signature(K.vector_add_plain), "BLOCK": "constexpr"}, {"BLOCK": 256})
    stage_hook.install()
    stage_hook.force(InstrumentConfig("auto").to_mode())
    try:
        scopeless = triton.compile(src, target=TARGET, options=dict(num_warps=8))
        scoped = _compile()
    finally:
        stage_hook.unforce()
        stage_hook.uninstall()
    assert _entry(scopeless)["layout"]["granularity"] == "cta" and scopeless.metadata.profile_scratch_size == 32
    assert _entry(scopeless)["layout"]["compact"] is True and _entry(scopeless)["cta_header"] == "exit"
    assert _entry(scoped)["layout"]["granularity"] == "warp" and _entry(scoped)["scopes"] == ["load", "store"]


def test_the_cache_key_contribution_follows_a_previous_hooks_key(monkeypatch):
    """Triton 3.9 asks the stages hook for a key at every launch: ours is cached, but it
    must still change with the key of a hook that was installed before ours."""
    keys = iter([("a", "ha"), ("a", "ha"), ("b", "hb")])
    previous = lambda *args: next(keys) if not args else None  # noqa: E731
    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", previous)
    stage_hook.install()
    try:
        first, again, changed = stage_hook._hook(), stage_hook._hook(), stage_hook._hook()
    finally:
        stage_hook.uninstall()
    assert knobs.runtime.add_stages_inspection_hook is previous
    assert first == again and first[0].endswith("a") and len(first[1]) == 64
    assert changed[0].endswith("b") and changed[1] != first[1]
    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", None)
    stage_hook.install()
    try:
        alone = stage_hook._hook()
    finally:
        stage_hook.uninstall()
    assert alone[0] == stage_hook.PASS_VERSION and alone[1] != first[1]
