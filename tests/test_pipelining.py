"""Scopes in software-pipelined loops (issue 28): the pass says which scopes time a wait
rather than the work their source holds, how far ahead Triton moved it, and says nothing
for loops it did not pipeline. Compiled for sm_90 on the CPU."""
import inspect
import json

import pytest
import triton
import triton.language as tl

import proton_lite
import proton_lite.language as pl

ARGS = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "sam", "sbk", "scm"]
SIG = dict(zip(ARGS, ["*fp16"] * 3 + ["i32"] * 6))
CONST = {"BM": 128, "BN": 128, "BK": 64, "sak": 1, "sbn": 1, "scn": 1}


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    om = pid_m * BM + tl.arange(0, BM)
    on = pid_n * BN + tl.arange(0, BN)
    ok = tl.arange(0, BK)
    a_ptrs = a_ptr + om[:, None] * sam + ok[None, :] * sak
    b_ptrs = b_ptr + ok[:, None] * sbk + on[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        with pl.scope("load"):
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        with pl.scope("dot"):
            acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    tl.store(c_ptr + om[:, None] * scm + on[None, :] * scn, acc.to(tl.float16))


@triton.jit
def _scaled(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for i in range(0, 4):
        with pl.scope("load"):
            x = tl.load(x_ptr + offs + i * n, mask=offs < n)
        with pl.scope("math"):
            x = x * 2.0 + 1.0
        tl.store(y_ptr + offs + i * n, x, mask=offs < n)


@triton.jit
def _tma_mm(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    pid = tl.program_id(0)
    pid_m, pid_n = pid // tl.cdiv(N, BN), pid % tl.cdiv(N, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        with pl.scope("load"):
            a = a_desc.load([pid_m * BM, k * BK])
            b = b_desc.load([k * BK, pid_n * BN])
        with pl.scope("dot"):
            acc = tl.dot(a, b, acc)
    om = pid_m * BM + tl.arange(0, BM)
    on = pid_n * BN + tl.arange(0, BN)
    tl.store(c_ptr + om[:, None] * N + on[None, :], acc.to(tl.float16))


@pytest.mark.parametrize("stages,ahead", [(1, None), (3, 2), (4, 3)])
def test_tma_descriptor_loads_are_named_too(stages, ahead):
    ck = proton_lite.compile(_tma_mm, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32",
                                       "K": "i32"}, {"BM": 128, "BN": 128, "BK": 64}, num_warps=8, num_stages=stages,
                             divisible_by_16=["a_ptr", "b_ptr", "c_ptr", "M", "N", "K"])
    notes = {n["scope"]: n for n in ck.profile["pipelined"] or []}
    if ahead is None:
        assert notes == {}
        return
    assert notes["load"]["operations"] == ["tma"] and notes["load"]["iterations_ahead"] == {"tma": ahead}
    assert "its 2 TMA load(s) (cp.async.bulk.tensor)" in notes["load"]["message"]
    assert notes["dot"]["operations"] == ["mma"]


def _notes(stages: int, aligned: bool = True) -> dict:
    ck = proton_lite.compile(_mm, SIG, CONST, num_warps=8, num_stages=stages,
                             divisible_by_16=ARGS if aligned else [])
    return {n["scope"]: n for n in ck.profile["pipelined"] or []}


@pytest.mark.parametrize("stages,ahead", [(3, 2), (4, 3)])
def test_pipelined_loads_and_dots_are_named_with_their_distance(stages, ahead):
    notes = _notes(stages)
    assert set(notes) == {"load", "dot"}
    load = notes["load"]
    assert load["iterations_ahead"] == {"copy": ahead} and load["issued_outside"] == {"copy": True}
    assert load["waits_inside"] == {"copy": True}
    src, first = inspect.getsourcelines(_mm.fn)
    a, b = (first + i for i, text in enumerate(src) if "= tl.load(" in text)
    assert f"its 2 load(s) (cp.async) (test_pipelining.py:{a},{b}) are issued {ahead} iteration(s) ahead" \
        in load["message"] and "the scope times their wait, not the copy" in load["message"]
    dot = notes["dot"]
    assert dot["operations"] == ["mma"] and dot["iterations_ahead"] == {"mma": 1}
    assert "the wait for the ones issued 1 iteration(s) before" in dot["message"]


def test_no_note_where_nothing_was_moved():
    assert _notes(1) == {}  # one stage: copies and dots complete inside their scopes
    assert _notes(3, aligned=False) == {}  # unaligned loads: Triton did not pipeline them
    ck = proton_lite.compile(_scaled, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}, {"BLOCK": 1024},
                             num_stages=3, divisible_by_16=["x_ptr", "y_ptr", "n"])
    assert ck.profile["pipelined"] is None


def test_compile_report_and_summary_show_the_notes(tmp_path, capsys):
    from proton_lite.viewer import cli
    path = tmp_path / "mm.py"
    path.write_text("import triton\nimport triton.language as tl\nimport proton_lite.language as pl\n\n\n"
                    + inspect.getsource(_mm.fn).replace("def _mm", "def mm"))
    sig = ",".join(f"{a}:{t}" for a, t in SIG.items())
    consts = sum((["--constexpr", f"{k}={v}"] for k, v in CONST.items()), [])
    base = ["compile", f"{path}:mm", "--signature", sig, *consts, "--num-warps", "8", "--num-stages", "3",
            "--divisible-by-16", ",".join(ARGS)]
    assert cli.main(base) == 0
    out = capsys.readouterr().out
    assert "note: scope 'load': its 2 load(s) (cp.async)" in " ".join(out.split())
    assert cli.main(base + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [n["scope"] for n in report["pipelined"]] == ["load", "dot"]
    assert cli.main(["compile", f"{path}:mm", "--signature", sig, *consts, "--divisible-by-16", "nope"]) == 2
    assert "--divisible-by-16: no argument 'nope'" in capsys.readouterr().err


def test_summary_warns_about_scopes_that_time_a_wait(tmp_path, capsys):
    """The note travels in the kernel's metadata into the capture; `summary` shows it."""
    from synth import one_scope_capture

    from proton_lite.viewer import cli
    one_scope_capture(tmp_path / "p.plraw", "mm", "load", {"pipelined": [_notes(3)["load"]]})
    assert cli.main(["summary", str(tmp_path / "p.plraw"), "--tables", "scopes"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "! mm: scope 'load': its 2 load(s) (cp.async)" in out and "the scope times their wait" in out


def test_a_failing_analysis_never_stops_instrumentation(monkeypatch, tmp_path):
    from proton_lite.passes import stage_hook
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # a fresh cache: the pass must run

    def broken(ptx, info):
        raise RuntimeError("unexpected PTX")
    monkeypatch.setattr(stage_hook, "pipelining_notes", broken)
    ck = proton_lite.compile(_mm, SIG, CONST, num_warps=8, num_stages=3, divisible_by_16=ARGS)
    assert ck.scopes == ["load", "dot"] and ck.profile["pipelined"] is None
    assert any(tmp_path.iterdir()), "the kernel was not compiled into the fresh cache"
