"""Imports come in layers: reading a capture (file format, decoder, traces, summary, diff)
needs numpy, not Triton; `import proton_lite` loads Triton only when something compiles or
records. Each check runs in a fresh interpreter, where nothing was imported before."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("triton", "torch", "cuda")


def _loaded_after(code: str) -> list[str]:
    probe = code + f"\nimport sys, json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_reading_a_capture_needs_no_triton():
    code = ("import proton_lite, proton_lite.raw_format, proton_lite.decode, proton_lite.pipeline\n"
            "import proton_lite.trace.perfetto, proton_lite.trace.chrome, proton_lite.trace.readback\n"
            "import proton_lite.viewer.summary, proton_lite.viewer.diff, proton_lite.viewer.cli\n"
            "from proton_lite.viewer import cli\n"
            "import contextlib, io\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    assert cli.main(['summary', 'docs/examples/matmul.plraw']) == 0\n"
            "    assert cli.main(['diff', 'docs/examples/matmul.plraw', 'docs/examples/matmul.plraw']) == 0\n"
            "p = proton_lite.load('docs/examples/matmul.plraw')\nassert p.scope_stats() and p.sm_stats()\n"
            "from proton_lite.decode import decode\nfrom proton_lite.raw_format import read_raw\n"
            "assert len(decode(read_raw('docs/examples/matmul.plraw')).intervals)")
    assert _loaded_after(code) == []


def test_import_proton_lite_is_lazy_until_something_compiles():
    assert _loaded_after("import proton_lite\nproton_lite.start, proton_lite.stop, proton_lite.SessionResult\n"
                         "assert 'start' in dir(proton_lite)") == []
    assert "triton" in _loaded_after("import proton_lite\nproton_lite.compile")
    assert "triton" in _loaded_after("import proton_lite.language")


def test_unknown_attributes_are_still_errors():
    import proton_lite
    try:
        proton_lite.no_such_thing
    except AttributeError as e:
        assert "no_such_thing" in str(e)
    else:
        raise AssertionError("proton_lite.no_such_thing did not raise")
