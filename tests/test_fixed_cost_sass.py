"""What the instrumentation does to the schedule of a kernel without scopes: compiled for
sm_90 without a GPU, assembled by the triton wheel's ptxas, read back with cuobjdump.

Why: with the CTA's 64-bit start pair kept in registers until exit (pass 15), ptxas issued
some of a kernel's loads dozens of instructions late to stay within the register count it
chose (Triton 3.6 and 3.9 alike); on the H100 that cost a SwiGLU forward 1.3 -> 2.7-3.2% and a
persistent DyT backward 1.25x (design.md, "The fixed cost of instrumenting a kernel").  The
shipped form keeps the pair's low halves only; its loads stay where the plain kernel has
them, a few instructions later (the two timer reads and their neighbours).  Straight-line
kernels with scopes write their CTA header at exit too (pass 17): their loads move by the
first record's code only, not by thread 0's header as well."""
import pytest

import proton_lite
import fixed_cost_kernels as F
import kernels as K
from sass import disassemble

GATED = (F.gated_silu_fwd, {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32", "stride": "i32", "scale": "fp32"})
SHIFT = 4  # instructions a load may move: the prologue's two reads and what ptxas moves with them


# one 512-element tile per program (FlagGems' pointwise kernels below its grid cap; Inductor's are alike)
TILE = (F.tile_gelu, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "n_cols": "i32"})


def _loads(instrument: bool, num_warps: int, block: int, kernel: str = "gated") -> list[int]:
    if kernel == "gated":
        k = proton_lite.compile(*GATED, {"n_cols": block, "BLOCK": block}, instrument=instrument,
                                num_warps=num_warps, divisible_by_16=("stride", ))
    else:
        k = proton_lite.compile(*TILE, {"TILE": block}, instrument=instrument, num_warps=num_warps,
                                divisible_by_16=tuple(TILE[1]))
    if instrument:
        assert k.profile["cta_header"] == "exit" and k.profile["layout"]["capacity"] == 0
    return [n for n, i in enumerate(disassemble(k.asm["cubin"])) if i.opcode.startswith("LDG")]


@pytest.mark.parametrize("num_warps,block,kernel", [(8, 2048, "gated"), (4, 1024, "gated"), (4, 512, "tile")])
def test_a_straight_line_kernel_issues_its_loads_where_the_plain_kernel_does(num_warps, block, kernel):
    plain, inst = _loads(False, num_warps, block, kernel), _loads(True, num_warps, block, kernel)
    assert len(inst) == len(plain) > 0
    moved = [i - p for i, p in zip(inst, plain)]
    # (earlier is no cost: ptxas issues the tile's loads 4 instructions sooner with Triton 3.9, 3 with 3.6)
    assert all(-SHIFT <= m <= SHIFT for m in moved), (plain, inst)


SCOPED = {"softmax": (K.softmax, {"x_ptr": "*fp32", "out_ptr": "*fp32", "stride": "i32", "n_cols": "i32"},
                      {"BLOCK": 4096}, 8),
          "vector_add": (K.vector_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                         {"BLOCK": 1024}, 4)}
# the prologue's address arithmetic, and where a scope opens before the loads its enter
# record: 11-18 instructions with Triton 3.6 and 3.9; with thread 0's CTA header at entry as
# well, 28-35 (docs/design.md)
SCOPED_SHIFT = 20


@pytest.mark.parametrize("name", list(SCOPED))
def test_a_straight_line_kernel_with_scopes_keeps_its_cta_header_off_its_loads(name):
    from proton_lite.sass_listing import load_shift
    fn, sig, constexprs, warps = SCOPED[name]
    built = {inst: proton_lite.compile(fn, sig, constexprs, instrument=inst, num_warps=warps,
                                       divisible_by_16=tuple(sig))
             for inst in (False, True)}
    assert built[True].profile["cta_header"] == "exit" and built[True].profile["layout"]["capacity"] > 0
    listing = {inst: [i.text for i in disassemble(k.asm["cubin"])] for inst, k in built.items()}
    r = load_shift(listing[False], listing[True])
    assert r["comparable"] and r["loads"] > 0, r
    assert 0 <= r["first_moved"] and r["max_moved"] <= SCOPED_SHIFT, r


def test_load_shift_pairs_the_nth_load_of_each_kernel():
    from proton_lite.sass_listing import load_shift
    plain = ["LDG.E R2, desc[UR4][R2.64]", "FADD R0, R1, R2", "@!P0 LDG.E.128 R4, desc[UR4][R6.64]", "EXIT"]
    inst = ["CS2R R8, SR_CLOCKLO", "LDG.E R2, desc[UR4][R2.64]", "FADD R0, R1, R2", "IMAD R3, R3, R3, RZ",
            "@!P0 LDG.E.128 R4, desc[UR4][R6.64]", "LDS R1, [R2]", "EXIT"]
    r = load_shift(plain, inst)
    assert r["comparable"] and (r["first_moved"], r["median_moved"], r["max_moved"]) == (1, 1.5, 2)
    assert (r["loads"], r["plain_loads"], r["instructions"], r["plain_instructions"]) == (2, 2, 7, 4)
    assert not load_shift(plain, inst[:3])["comparable"]  # one load less: not paired


def test_compile_emits_both_listings_and_reports_how_far_the_loads_moved(tmp_path, capsys):
    import json
    from proton_lite.viewer import cli
    args = ["compile", "tests/fixed_cost_kernels.py:gated_silu_fwd", "--signature", "*fp32,*fp32,*fp32,i32,fp32",
            "--constexpr", "n_cols=2048", "--constexpr", "BLOCK=2048", "--num-warps", "8",
            "--divisible-by-16", "stride", "--emit", "sass", str(tmp_path)]
    assert cli.main(args + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    sass = report["sass"]
    assert sass["comparable"] and sass["loads"] == len(_loads(True, 8, 2048)) and 0 <= sass["max_moved"] <= SHIFT
    assert sass["behind"] == sass["plain_behind"] == 0  # its two loads per element go out together
    listings = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert set(listings) == {"gated_silu_fwd.sass", "gated_silu_fwd.plain.sass"}
    assert "SR_GLOBALTIMERLO" in listings["gated_silu_fwd.sass"]
    assert "SR_GLOBALTIMERLO" not in listings["gated_silu_fwd.plain.sass"]
    assert cli.main(args) == 0
    assert "global loads: moved by" in capsys.readouterr().out


def _listing(rows) -> str:
    """A cuobjdump-style listing from (instruction, write barrier, wait mask): the control bits
    placed by the sm_70+ layout (second word: bits 46-48 the barrier, 52-57 the waits)."""
    out = []
    for n, (instr, barrier, wait) in enumerate(rows):
        high = (barrier << 46) | (wait << 52) | 0x000000000000a00
        out.append(f"        /*{16 * n:04x}*/                   {instr} ;   /* 0x{0x1234 + n:016x} */")
        out.append(f"                                                    /* 0x{high:016x} */")
    return "\n".join(out)


def test_loads_behind_loads_follow_the_scoreboards():
    from proton_lite.sass_listing import decode, loads_behind_loads
    rows = [("LDG.E R2, desc[UR4][R2.64]", 2, 0), ("S2R R9, SR_TID.X", 0, 0), ("IMAD R3, R9, 4, RZ", 7, 0b1),
            ("@!P0 LDG.E.128 R4, desc[UR4][R6.64]", 3, 0), ("FMUL R0, R2, R2", 7, 0b100),
            ("LDG.E R8, desc[UR4][R10.64]", 4, 0), ("FADD R1, R4, R8", 7, 0b11000)]
    text = _listing(rows)
    assert [(i.text, i.write_barrier, i.waits) for i in decode(text)] == \
        [(t, None if b == 7 else b, frozenset(n for n in range(6) if w >> n & 1)) for t, b, w in rows]
    # waiting for the S2R (barrier 0) holds no load back; waiting for the first load's data does
    assert loads_behind_loads(text) == [5]
    assert loads_behind_loads(_listing(rows[:4] + rows[5:])) == []


def test_a_row_kernel_whose_bias_load_waits_for_the_row():
    """tanh_affine_fwd (4 warps): ptxas issues the bias load after the tanh, so the plain
    kernel has loads behind loads; read from real listings, every load signals a scoreboard."""
    from proton_lite.sass_listing import decode, listing, loads_behind_loads
    k = proton_lite.compile(*TANH, {"N": 1024, "BLOCK": 2048}, instrument=False, num_warps=4,
                            divisible_by_16=tuple(TANH[1]))
    text = listing(k.asm["cubin"])
    loads = [i.write_barrier for i in decode(text) if i.opcode.startswith("LDG")]
    assert len(loads) >= 3 and all(b is not None for b in loads)
    assert len(loads_behind_loads(text)) == 2


TANH = (F.tanh_affine_fwd, {"x_ptr": "*fp32", "y_ptr": "*fp32", "alpha_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32"})


def test_the_instrumented_row_kernel_waits_for_memory_no_more_often_than_plain(monkeypatch):
    """With the CTA and unit headers at exit (seven stores, the unit's address arithmetic)
    ptxas split this kernel's row loads around the tanh, one more trip to memory per CTA, as
    in liger's DyT forward (a strict expected failure until 2026-11-28); the compact layout's
    lifetime block (two stores) leaves them together, as plain (Triton 3.6 and 3.9)."""
    from proton_lite.passes import ptx_lifetimes
    from proton_lite.sass_listing import listing, loads_behind_loads
    monkeypatch.setattr(ptx_lifetimes, "EXIT_IN_FUNCTION", False)  # the inline exit (PROTON_LITE_EXIT_CALL=0):
    monkeypatch.setattr(ptx_lifetimes, "EXIT_CHOSEN", False)  # not chosen per kernel (exit_choice.py)
    behind = [len(loads_behind_loads(listing(proton_lite.compile(
        *TANH, {"N": 1024, "BLOCK": 2048}, instrument=inst, num_warps=4,
        divisible_by_16=tuple(TANH[1])).asm["cubin"]))) for inst in (False, True)]
    assert behind[1] <= behind[0], behind
    headers = [len(loads_behind_loads(listing(proton_lite.compile(  # a unit per warp: the headers' exit
        *TANH, {"N": 1024, "BLOCK": 2048}, instrument=True, num_warps=4, granularity="warp",
        divisible_by_16=tuple(TANH[1])).asm["cubin"])))]
    assert headers[0] >= behind[1], (headers, behind)


def test_with_the_exit_in_a_function_the_row_kernel_waits_as_plain_does(monkeypatch):
    """The candidate for the test above (ptx_lifetimes.EXIT_IN_FUNCTION, PROTON_LITE_EXIT_CALL=1):
    ptxas schedules the body as if the exit were not there.  Off by default: on the H100 it
    paid on DyT's forward and cost as much on SwiGLU's and GeGLU's (docs/design.md)."""
    from proton_lite.passes import ptx_lifetimes
    from proton_lite.sass_listing import listing, loads_behind_loads
    monkeypatch.setattr(ptx_lifetimes, "EXIT_IN_FUNCTION", True)  # part of the compile's cache key (config.py)
    built = [proton_lite.compile(*TANH, {"N": 1024, "BLOCK": 2048}, instrument=inst, num_warps=4,
                                 divisible_by_16=tuple(TANH[1])) for inst in (False, True)]
    text = listing(built[1].asm["cubin"])
    assert "CALL" in text and built[1].profile["cta_header"] == "exit"
    assert len(loads_behind_loads(text)) == len(loads_behind_loads(listing(built[0].asm["cubin"])))


def test_the_lateheader_form_issues_a_loop_kernel_s_first_load_before_its_header(tmp_path, monkeypatch):
    """``header_forms.py --form lateheader`` (a lead for issue 24, measured on the H100
    with FORMS_AB="pass lateheader" and rejected, design.md; kept as a diagnostic form): the CTA header of a kernel with loops, written at entry, moves
    below the entry block's first global load, and ptxas then issues that load first."""
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent / "benchmarks"))
    from header_forms import late_prologue
    from proton_lite.passes import ptx_lifetimes, stage_hook
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", "entry")  # the header at entry (PROTON_LITE_LOOP_START=entry)
    sig = {"x_ptr": "*fp32", "target_ptr": "*i64", "loss_ptr": "*fp32", "stride": "i32", "n_cols": "i32"}

    def first_load_and_store(form_on: bool):
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / f"cache_{form_on}"))  # the key does not see the form
        if form_on:
            rewrite = stage_hook.rewrite
            monkeypatch.setattr(stage_hook, "rewrite", lambda *a, **k: late_prologue(rewrite(*a, **k)))
        k = proton_lite.compile(F.row_cross_entropy, sig, {"BLOCK": 4096}, num_warps=32, divisible_by_16=("stride", ))
        assert k.profile["cta_header"] == "entry"  # a loop: the header at entry
        ops = [i.opcode for i in disassemble(k.asm["cubin"])]
        return (next(n for n, o in enumerate(ops) if o.startswith("LDG")),
                next(n for n, o in enumerate(ops) if o.startswith("STG")))
    shipped, late = first_load_and_store(False), first_load_and_store(True)
    assert shipped[1] < shipped[0], shipped  # shipped: the header's stores before the kernel's first load
    assert late[0] < late[1], late  # the form: the load first


def test_a_short_loop_kernel_keeps_its_start_and_stores_nothing_before_its_loads(tmp_path, monkeypatch):
    """FlagGems' pointwise kernels past its grid cap are grid-stride loops of two short tiles a
    CTA, 16 CTAs per SM (``tile_gelu_loop``, our kernel of that shape).  With the CTA header
    at entry (pass 21 and before; ``PROTON_LITE_LOOP_START=entry``) thread 0 stored it before
    its first load, which cost them 3.3-3.7 points on the H200.  Since pass 22 thread 0 keeps
    the start in the two registers a straight-line kernel keeps (gt5: the timer from bit 5;
    halves: its low half) and writes the lifetime block at exit: no global store before the
    first load, a compact layout as a straight-line kernel's, no register more than halves
    and no shared memory."""
    from proton_lite.passes import ptx_lifetimes
    from proton_lite.passes.register_cap import cubin_registers
    sig = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "n_cols": "i32", "tiles_per_cta": "i32"}

    def build(form: str):
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / f"cache_{form}"))
        monkeypatch.setattr(ptx_lifetimes, "LOOP_START", form)
        k = proton_lite.compile(F.tile_gelu_loop, sig, {"TILE": 256}, num_warps=4,
                                divisible_by_16=("x_ptr", "y_ptr", "out_ptr", "n", "n_cols"))
        ops = [i.opcode for i in disassemble(k.asm["cubin"])]
        first_load = next(n for n, o in enumerate(ops) if o.startswith("LDG"))
        return (k.profile["cta_header"], k.profile.get("loop_start"), sum(o.startswith("STG") for o in ops[:first_load]),
                k.profile["layout"].get("compact", False), k.metadata["shared"], cubin_registers(k.asm["cubin"]))
    entry = build("entry")
    assert entry[:2] == ("entry", None) and entry[2] > 0 and not entry[3] and entry[4] == 0, entry
    halves, gt5 = build("halves"), build("gt5")
    assert halves[:5] == ("exit", "halves", 0, True, 0) and gt5[:5] == ("exit", "gt5", 0, True, 0), (halves, gt5)
    assert gt5[5] <= halves[5], (halves, gt5)


LOOPED = (F.row_cross_entropy, {"x_ptr": "*fp32", "target_ptr": "*i64", "loss_ptr": "*fp32", "stride": "i32",
                                  "n_cols": "i32"}, {"BLOCK": 4096}, 32)


def test_a_loop_kernel_s_loads_issue_nearer_plain_s_with_its_start_kept(monkeypatch, tmp_path):
    """Liger's cross-entropy shape (a load in the entry block, then a loop; 32 warps, one CTA
    per SM): with the start kept by thread 0 (pass 22) its loads issue within a few instructions of
    where the plain kernel issues them, not behind the header's address arithmetic, timer
    reads and four stores as with the header at entry."""
    from proton_lite.passes import ptx_lifetimes
    from proton_lite.sass_listing import load_shift
    fn, sig, constexprs, warps = LOOPED
    built = {inst: proton_lite.compile(fn, sig, constexprs, instrument=inst, num_warps=warps,
                                       divisible_by_16=("stride", )) for inst in (False, True)}
    assert built[True].profile["cta_header"] == "exit"
    listing = {inst: [i.text for i in disassemble(b.asm["cubin"])] for inst, b in built.items()}
    r = load_shift(listing[False], listing[True])
    assert r["comparable"] and r["loads"] > 0, r
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ptx_lifetimes, "LOOP_START", "entry")
    entry = proton_lite.compile(fn, sig, constexprs, num_warps=warps, divisible_by_16=("stride", ))
    assert entry.profile["cta_header"] == "entry"
    r_entry = load_shift(listing[False], [i.text for i in disassemble(entry.asm["cubin"])])
    # Triton 3.9: the loads 7-13 instructions later than plain's against 20-24 with the header at entry
    assert 0 <= r["first_moved"] and r["max_moved"] < r_entry["first_moved"], (r, r_entry)
