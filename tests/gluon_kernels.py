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


@gluon.jit
def _ws_default(x_ptr, y_ptr, N, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    with pl.scope("scale"):
        x = gl.load(x_ptr + offs, mask=offs < N)
        gl.store(y_ptr + offs, x * 2.0, mask=offs < N)


@gluon.jit
def _ws_worker(x_ptr, z_ptr, N, BLOCK: gl.constexpr, ROUNDS: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [2], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    acc = gl.zeros([BLOCK], gl.float32, layout=layout)
    for i in range(0, ROUNDS):
        with pl.scope("shift"):
            x = gl.load(x_ptr + offs, mask=offs < N)
            acc += x + 1.0
    gl.store(z_ptr + offs, acc, mask=offs < N)


@gluon.jit
def gl_ws(x_ptr, y_ptr, z_ptr, N, BLOCK: gl.constexpr, ROUNDS: gl.constexpr):
    """Warp-specialized: the default partition (4 warps) scales x into y, a worker partition
    (2 warps) sums x + 1 over ROUNDS rounds into z; Triton pads the worker side to a warp group."""
    gl.warp_specialize([(_ws_default, (x_ptr, y_ptr, N, BLOCK)), (_ws_worker, (x_ptr, z_ptr, N, BLOCK, ROUNDS))],
                       [2], [24])


GL_WS_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "z_ptr": "*fp32", "N": "i32"}
