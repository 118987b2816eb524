"""A Gluon kernel (``@gluon.jit``) with scopes, for the CPU and GPU tests of the Gluon path."""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import proton_lite.language as pl


@gluon.jit
def gl_scale(x_ptr, y_ptr, N, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    with pl.scope("load"):
        x = gl.load(x_ptr + offs, mask=offs < N)
    pl.enter_scope("store")
    gl.store(y_ptr + offs, x * 2.0, mask=offs < N)
    pl.exit_scope("store")


GL_SCALE_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "N": "i32"}
