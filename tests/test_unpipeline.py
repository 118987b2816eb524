"""pl.scope(..., pipelined=False) (issue 28, item 3): the loop around such a scope gets one
stage before Triton's pipeliner runs (passes/unpipeline.py), so the loads and dots written
inside the scope complete inside it. The TTIR rewrite on text, and real kernels compiled
for sm_90 on the CPU: their PTX, their metadata and what the reports say."""
import inspect
import json

import pytest

import proton_lite
import unpipelined_kernels as U
from proton_lite.passes.unpipeline import UnpipelineError, unpipeline
from test_pipelining import ARGS, CONST, SIG, _mm

HINT = '      %{n} = tt.elementwise_inline_asm "mov.u32 $0, 0; // @@proton_lite unpipelined 6c6f6164" ' \
       '{{constraints = "=r", packed_element = 1 : i32, pure = false}} -> i32 loc(#loc3)'
ENTER = '      %9 = tt.elementwise_inline_asm "mov.u32 $0, 0; // @@proton_lite enter 6c6f6164" ' \
        '{constraints = "=r", packed_element = 1 : i32, pure = false} -> i32 loc(#loc3)'


def _ttir(close: str, nested: bool = False) -> str:
    inner = ["    %r:2 = scf.for %j = %c0 to %n step %c1 iter_args(%y = %x) -> (i32) : i32 {",
             HINT.format(n=7), ENTER, "      scf.yield %y : i32", "    } loc(#loc4)"] if nested else \
        [HINT.format(n=7), ENTER]
    return "\n".join(["module {", "  tt.func @k() {",
                      "    %0:2 = scf.for %i = %c0 to %n step %c1 iter_args(%x = %c0) -> (i32) : i32 {",
                      *inner, "      scf.yield %x : i32", close, "    tt.return loc(#loc5)", "  } loc(#loc)",
                      "} loc(#loc)", '#loc3 = loc("/src/kern.py":42:9)', "#loc4 = loc(unknown)"])


@pytest.mark.parametrize("close, want", [
    ("    } loc(#loc4)", "    } {tt.num_stages = 1 : i32} loc(#loc4)"),
    ("    } {tt.flatten} loc(#loc4)", "    } {tt.num_stages = 1 : i32, tt.flatten} loc(#loc4)"),
    ("    } {tt.num_stages = 3 : i32} loc(#loc4)", "    } {tt.num_stages = 1 : i32} loc(#loc4)"),
])
def test_the_loop_around_a_hint_gets_one_stage_and_the_hint_goes(close, want):
    text, done = unpipeline(_ttir(close), default_stages=4)
    assert want in text.split("\n") and "unpipelined" not in text and ENTER in text
    (entry, ) = done
    assert entry["scope"] == "load" and entry["source"] == "kern.py:42"
    assert entry["had_stages"] == (3 if "num_stages = 3" in close else 4)
    assert "scope 'load' (kern.py:42) asked for pipelined=False" in entry["message"]


def test_the_innermost_loop_is_the_one_kept_and_nothing_else_changes():
    src = _ttir("    } loc(#loc4)", nested=True)
    text, done = unpipeline(src)
    lines = text.split("\n")
    assert lines.count("    } {tt.num_stages = 1 : i32} loc(#loc4)") == 1  # the inner loop's close
    assert "    } loc(#loc4)" in lines  # the outer loop's stays as it was
    inner_close = next(i for i, line in enumerate(lines) if "tt.num_stages = 1" in line)
    assert "scf.yield %y" in lines[inner_close - 1]
    assert [line for line in src.split("\n") if "unpipelined" not in line] == \
        [line.replace(" {tt.num_stages = 1 : i32}", "") for line in lines]  # nothing else changed
    assert len(lines) == len(src.split("\n")) - 1 and done[0]["had_stages"] is None


def test_a_hint_in_no_loop_is_an_error_that_names_the_scope():
    src = "\n".join(["module {", "  tt.func @k() {", HINT.format(n=1), "  }", "}"])
    with pytest.raises(UnpipelineError, match="scope 'load': pipelined=False .* in no for loop"):
        unpipeline(src)
    assert unpipeline("module {\n}") == ("module {\n}", [])


@pytest.mark.parametrize("stages", [3, 4])
def test_a_kept_matmul_loop_issues_no_copy_ahead_and_waits_each_dot_at_once(stages):
    ck = proton_lite.compile(U.mm_kept, SIG, CONST, num_warps=8, num_stages=stages, divisible_by_16=ARGS)
    ptx = ck.asm["ptx"]
    assert "cp.async.cg" not in ptx and "cp.async.ca" not in ptx
    assert {line.split()[-1] for line in ptx.splitlines() if "wgmma.wait_group" in line} == {"0;"}
    assert ck.profile["pipelined"] is None and ck.scopes == ["load", "dot"]
    (entry, ) = ck.profile["unpipelined"]
    src, first = inspect.getsourcelines(U.mm_kept.fn)
    line = first + next(i for i, t in enumerate(src) if "pipelined=False" in t)
    assert entry["scope"] == "load" and entry["had_stages"] == stages
    assert entry["source"] == f"unpipelined_kernels.py:{line}"
    # the same loop without the option is pipelined: copies issued ahead (tests/test_pipelining.py)
    plain = proton_lite.compile(_mm, SIG, CONST, num_warps=8, num_stages=stages, divisible_by_16=ARGS)
    assert "cp.async.cg" in plain.asm["ptx"] and plain.profile["pipelined"]


def test_a_kept_tma_loop_gets_one_stage_over_its_own_num_stages():
    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32"}
    ck = proton_lite.compile(U.tma_mm_kept, sig, {"BM": 128, "BN": 128, "BK": 64}, num_warps=8, num_stages=3,
                             divisible_by_16=list(sig))
    assert ck.profile["pipelined"] is None
    (entry, ) = ck.profile["unpipelined"]
    assert entry["had_stages"] == 4  # tl.range(..., num_stages=4) on the loop itself


def test_the_option_costs_nothing_when_profiling_is_off():
    """Without instrumentation no marker is emitted: the loop is pipelined as usual."""
    ck = proton_lite.compile(U.mm_kept, SIG, CONST, num_warps=8, num_stages=3, divisible_by_16=ARGS,
                             instrument=False)
    assert "cp.async.cg" in ck.asm["ptx"] and "@@proton_lite" not in ck.asm["ptx"]


def test_a_kept_scope_in_no_loop_fails_its_compile_with_the_reason():
    with pytest.raises(Exception, match="pipelined=False keeps a loop from being software-pipelined"):
        proton_lite.compile(U.no_loop, {"x_ptr": "*fp32"}, {"BLOCK": 128})


def test_pipelined_takes_only_a_compile_time_bool():
    import proton_lite.language as pl
    with pytest.raises(TypeError, match=r"pipelined=\) takes True or False"):
        pl.scope("load", pipelined="no")


def test_compile_report_shows_the_kept_loop(capsys):
    from proton_lite.viewer import cli
    sig = ",".join(f"{a}:{t}" for a, t in SIG.items())
    consts = sum((["--constexpr", f"{k}={v}"] for k, v in CONST.items()), [])
    base = ["compile", f"{U.__file__}:mm_kept", "--signature", sig, *consts, "--num-warps", "8", "--num-stages", "3",
            "--divisible-by-16", ",".join(ARGS)]
    assert cli.main(base) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: scope 'load' (unpipelined_kernels.py:" in out and "runs with one stage instead of 3" in out
    assert cli.main(base + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [n["scope"] for n in report["unpipelined"]] == ["load"] and report["pipelined"] == []


def test_summary_and_trace_carry_the_note(tmp_path, capsys):
    """The entry travels in the kernel's metadata into the capture: `summary` says it, and
    the scope's slices in the trace carry it."""
    from synth import one_scope_capture

    from proton_lite.viewer import cli
    ck = proton_lite.compile(U.mm_kept, SIG, CONST, num_warps=8, num_stages=3, divisible_by_16=ARGS)
    one_scope_capture(tmp_path / "p.plraw", "mm", "load", {"unpipelined": ck.profile["unpipelined"]})
    assert cli.main(["summary", str(tmp_path / "p.plraw"), "--tables", "scopes"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "mm: scope 'load' (unpipelined_kernels.py:" in out and "asked for pipelined=False" in out
    assert cli.main(["trace", str(tmp_path / "p.plraw"), "-o", str(tmp_path / "p.json"), "--format", "chrome"]) == 0
    events = json.loads((tmp_path / "p.json").read_text())["traceEvents"]
    loads = [e for e in events if e.get("name") == "load" and e.get("ph") == "X"]
    assert loads and all("asked for pipelined=False" in json.dumps(e.get("args")) for e in loads)
