"""A kernel without scopes keeps its plain occupancy (passes/register_cap.py): compiled for
sm_90 without a GPU, assembled by Triton's ptxas, registers read from the cubins."""
import subprocess
import tempfile
import time

import pytest

import proton_lite
from proton_lite.passes import register_cap
import fixed_cost_kernels as F

RMS = (F.rms_norm_fwd, {"x_ptr": "*fp32", "w_ptr": "*fp32", "y_ptr": "*fp32", "rstd_ptr": "*fp32", "stride": "i32",
                        "n_cols": "i32", "eps": "fp32"}, {"BLOCK": 4096})


def _cuobjdump_regs(cubin: bytes) -> int:
    from triton.backends.nvidia.compiler import get_ptxas
    tool = get_ptxas(90).path.rsplit("/", 1)[0] + "/cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    return int(out.split("REG:")[1].split()[0])


def test_the_cubin_register_count_is_the_one_cuobjdump_prints():
    k = proton_lite.compile(*RMS, instrument=False, num_warps=8, divisible_by_16=("stride", ))
    assert register_cap.cubin_registers(k.asm["cubin"]) == _cuobjdump_regs(k.asm["cubin"]) > 0
    assert register_cap.cubin_registers(b"not an elf") is None


def test_an_rms_norm_without_scopes_keeps_its_plain_registers_and_occupancy():
    """Uncapped, its instrumented code took 56-60 registers against 48: 4 CTAs per SM
    instead of 5 (8 warps each)."""
    plain = proton_lite.compile(*RMS, instrument=False, num_warps=8, divisible_by_16=("stride", ))
    inst = proton_lite.compile(*RMS, instrument=True, num_warps=8, granularity="cta", divisible_by_16=("stride", ))
    p, i = (register_cap.cubin_registers(k.asm["cubin"]) for k in (plain, inst))
    assert inst.profile["layout"]["capacity"] == 0 and inst.profile["cta_header"] == "exit"
    assert inst.profile["registers"]["form"] == 0  # no spill for the start pair kept until exit
    assert inst.profile["registers"]["plain"] == p and inst.profile["registers"]["cap"] in (None, 48)
    assert register_cap.ctas_per_sm(i, 256) == register_cap.ctas_per_sm(p, 256) == 5


def test_occupancy_arithmetic():
    assert register_cap.ctas_per_sm(48, 256) == 5 and register_cap.ctas_per_sm(56, 256) == 4
    assert register_cap.occupancy_cap(48, 256) == 48  # 49..56 would round up to 56: 4 CTAs
    assert register_cap.occupancy_cap(50, 256) == 64  # already 4 CTAs: up to 64 keeps them
    assert register_cap.occupancy_cap(79, 512) == 128  # one 16-warp CTA per SM whatever up to 128
    assert register_cap.occupancy_cap(20, 1024) == 32  # limited by threads (2 CTAs) up to 32 registers
    assert register_cap.occupancy_cap(255, 32) == 255


@pytest.mark.parametrize("ptx,cap,want", [
    (".visible .entry k(\n\t.param .u64 a\n)\n.reqntid 256\n{\n}", 48, ".visible .entry k(\n\t.param .u64 a\n)\n"
     ".maxnreg 48\n.reqntid 256\n{\n}"),
    (".visible .entry k(\n)\n.maxnreg 32\n{\n}", 48, ".visible .entry k(\n)\n.maxnreg 32\n{\n}"),  # a lower cap stays
    (".visible .entry k(\n)\n.maxnreg 64\n{\n}", 48, ".visible .entry k(\n)\n.maxnreg 48\n{\n}"),
])
def test_the_cap_goes_on_the_kernel(ptx, cap, want):
    assert register_cap.with_cap(ptx, cap) == want


def test_the_compile_report_shows_registers_and_resident_ctas(capsys, monkeypatch):
    """`proton-lite compile` says what the instrumentation costs in registers and occupancy."""
    import json
    import re
    from proton_lite.viewer import cli
    args = ["compile", "tests/fixed_cost_kernels.py:rms_norm_fwd", "--signature",
            "*fp32,*fp32,*fp32,*fp32,i32,i32,fp32", "--constexpr", "BLOCK=4096", "--num-warps", "8",
            "--divisible-by-16", "stride"]
    assert cli.main(args + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    regs = report["registers"]
    assert report["cta_header"] == "exit"
    assert regs["ctas_per_sm"] == 5 and regs["registers"] <= 48 and regs["plain"] in (None, regs["registers"], 48)
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"registers\s+\d+ per thread: 5 resident CTAs per SM by registers", out), out
    assert re.search(r"CTA header\s+at exit: the kernel starts with two timer reads", out), out


def _triton_make_cubin():
    """Triton's own cubin stage for sm_90, as the stage hook gets it."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    backend = CUDABackend(GPUTarget("cuda", 90, 32))
    options = backend.parse_options({"num_warps": 8})
    return lambda src, metadata: backend.make_cubin(src, metadata, options, 90)


def test_the_form_that_spills_less_is_kept():
    """build_best keeps the first form unless it spills; a later form replaces it only if it
    spills less.  Real ptxas: the RMS norm's instrumented PTX under ``.maxnreg 24`` spills."""
    inst = proton_lite.compile(*RMS, instrument=True, num_warps=8, divisible_by_16=("stride", ))
    plain = proton_lite.compile(*RMS, instrument=False, num_warps=8, divisible_by_16=("stride", ))
    ptx, squeezed = inst.asm["ptx"], register_cap.with_cap(inst.asm["ptx"], 24)
    make_cubin, built = _triton_make_cubin(), []

    def counting(src, metadata):
        built.append(src)
        return make_cubin(src, metadata)

    def best(sources):
        built.clear()
        plain_build = register_cap.PlainBuild(plain.asm["ptx"], make_cubin, {"name": inst.name})
        cubin, decided = register_cap.build_best(sources, plain_build, counting, {"name": inst.name}, 256)
        return register_cap.cubin_attribute(cubin, register_cap.FRAME_SIZE) or 0, decided["form"], set(built)

    spills, form, _ = best([squeezed, ptx])
    assert (spills, form) == (0, 1)
    spills, form, builds = best([ptx, squeezed])
    assert (spills, form) == (0, 0) and squeezed not in builds  # no spill: the second form is never built
    spills, form, _ = best([squeezed, squeezed])
    assert spills > 0 and form == 0  # as much spilling: the first form stays



def test_the_plain_build_runs_beside_the_instrumented_one_and_serves_every_form():
    """The plain PTX is assembled on a thread of its own from the cubin stage's start, so the
    compile waits for one ptxas run where it waited for two in a row; every form (and the exit
    call's build, exit_choice.py) compares against that one build."""
    inst = proton_lite.compile(*RMS, instrument=True, num_warps=8, divisible_by_16=("stride", ))
    plain = proton_lite.compile(*RMS, instrument=False, num_warps=8, divisible_by_16=("stride", ))
    make_cubin, spans, metadata = _triton_make_cubin(), [], {"name": inst.name}

    def timed(src, md):
        began = time.perf_counter()
        out = make_cubin(src, md)
        spans.append((src, began, time.perf_counter()))
        return out

    plain_build = register_cap.PlainBuild(plain.asm["ptx"], timed, metadata)
    _, first = register_cap.keep_occupancy(inst.asm["ptx"], plain_build, timed, metadata, 256)
    _, second = register_cap.keep_occupancy(register_cap.with_cap(inst.asm["ptx"], 64), plain_build, timed, metadata, 256)
    plains = [span for span in spans if span[0] == plain.asm["ptx"]]
    ours = [span for span in spans if span[0] != plain.asm["ptx"]]
    assert len(plains) == 1 and len(ours) >= 2
    assert plains[0][1] < ours[0][2]  # it began before the instrumented build ended
    assert first["plain"] == second["plain"] == register_cap.cubin_registers(plain.asm["cubin"])

@pytest.mark.parametrize("granularity,compact", [("cta", True), ("auto", True), ("warp", False)])
def test_a_straight_line_kernel_without_scopes_gets_one_lifetime_block_per_cta(granularity, compact):
    """One unit per CTA and the header at exit: the layout is compact (32 bytes a CTA, what
    Triton allocates per CTA: ``profile_scratch_size``); the entry form the cubin stage may fall
    back to writes the CTA and unit headers, and says so in its own metadata.  A unit per warp
    keeps the headers."""
    from proton_lite.layout import BufferLayout
    from proton_lite.passes.config import InstrumentConfig
    from proton_lite.passes.stage_hook import instrument_ptx
    ptx = proton_lite.compile(*RMS, instrument=False, num_warps=8, divisible_by_16=("stride", )).asm["ptx"]
    metadata, fallbacks = {"shared": 0}, []
    out = instrument_ptx(ptx, metadata, InstrumentConfig(granularity=granularity), 8, fallbacks=fallbacks)
    layout = BufferLayout.from_json(metadata["proton_lite"]["layout"])
    assert layout.compact == compact
    assert metadata["profile_scratch_size"] == layout.stride == (32 if compact else 32 + 8 * 24)
    assert metadata["proton_lite"]["cta_header"] == "exit"
    ((entry_ptx, entry_meta), ) = fallbacks
    entry_layout = BufferLayout.from_json(entry_meta["proton_lite"]["layout"])
    assert entry_meta["proton_lite"]["cta_header"] == "entry" and not entry_layout.compact
    assert entry_meta["profile_scratch_size"] == entry_layout.stride == 32 + entry_layout.units * 24
    assert (out.count("st.global.v4.u32") > 0) == compact and "st.global.v4.u32" not in entry_ptx
    inst = proton_lite.compile(*RMS, instrument=True, num_warps=8, granularity=granularity, divisible_by_16=("stride", ))
    assert inst.profile["layout"].get("compact", False) == compact
