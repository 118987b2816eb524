"""Kernels with scopes under Triton's interpreter (``TRITON_INTERPRET=1``: kernels run as Python
on the CPU), and scopes called outside any kernel.  The interpreter is chosen when
``@triton.jit`` runs, so its cases run in a fresh Python with the variable set."""
import subprocess
import sys
import textwrap

import pytest

import proton_lite.language as pl

INTERPRETED = textwrap.dedent('''
    import triton
    import triton.language as tl
    import proton_lite
    import proton_lite.language as pl

    @pl.scope("helper")
    @triton.jit
    def plus_one(x):
        return x + 1

    @triton.jit
    def kernel(n, BAD: tl.constexpr):
        with pl.scope("block"):
            m = plus_one(n)
        pl.enter_scope("pair")
        tl.device_assert(m == n + 1, "the scoped helper ran")
        if BAD:
            pl.exit_scope(7)
        pl.exit_scope("pair")

    kernel[(2, )](41, BAD=False)
    print("ran")
    try:
        kernel[(1, )](41, BAD=True)
    except Exception as e:
        print("bad name:", type(e).__name__, e)
    try:
        proton_lite.start("interp")
    except RuntimeError as e:
        print("start:", e)
''')


def test_kernels_with_scopes_run_in_triton_s_interpreter():
    env = {"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}
    import os
    env.update({k: v for k, v in os.environ.items() if k not in env})
    env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", INTERPRETED], capture_output=True, text=True, env=env, timeout=120)
    out = done.stdout
    if "No module named 'torch'" in done.stderr + out:
        pytest.skip("Triton's interpreter needs torch here")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ran" in out.splitlines()
    assert "bad name:" in out and "compile-time string name" in out  # the scope name is still checked
    assert "start: proton_lite.start: TRITON_INTERPRET=1 runs kernels in Triton's interpreter" in out


def test_scopes_called_outside_a_kernel_say_so():
    with pytest.raises(TypeError, match=r"with pl.scope\('load'\):` marks a scope inside a @triton.jit kernel"):
        with pl.scope("load"):
            pass
    with pytest.raises(ValueError, match=r"pl.enter_scope\(\) marks a scope inside a @triton.jit kernel"):
        pl.enter_scope("load")
