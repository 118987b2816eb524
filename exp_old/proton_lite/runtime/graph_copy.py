"""The copy kernel that a CUDA graph runs after each instrumented kernel it holds.

A kernel captured into a graph writes its records to the same scratch address at every
replay.  So that each replay's records are kept, the capture adds one more node to the
graph right after that kernel: this kernel, which moves the scratch into the next free
slot of a ring, clears the scratch for the next replay and publishes the slot, all on the
device, with no host work per replay.  The host drains published slots in the background
(``runtime/graphs.py``).  No kernel of the graph waits for it (it waits for its kernel and for
the capture's previous copy node: the copies form one chain beside the kernels).
The scratch is not cleared between replays: every CTA of a replay writes its header and
every unit its header at exit, over the previous replay's, and the decoder reads no record
past a unit's count; a launch pool's counter is reset by a memset node before the kernel (the
rest of a sized launch's prefix is written once, when its scratch is made).

It is written in PTX by hand (no nvcc here, no Triton calling convention to follow) and
loaded with ``cuModuleLoadData``, which JIT-compiles it for the GPU at hand.  Per captured
launch the host keeps a 64-byte **node header** in device memory (docs/format.md §4)::

     0 u64 replays    replays that ran the copy kernel (recorded, overrun or discarded)
     8 u64 written    slots published: the host may read slots up to this count
    16 u64 consumed   slots the host has drained (written by the host)
    24 u64 overruns   replays whose records found the ring full: counted, not kept
    32 u64 discarded  replays after the session closed the node (its stop)
    40 u32 done       copy CTAs finished with this replay (the last one resets it)
    44 s32 next_slot  the slot the next replay writes, -1: none (full or closed)
    48 u32 closed     set by the host at stop
    52 u32 slots      slots in the ring
    56 u64 reserved

and the ring of ``slots`` slots, each ``SLOT_HEADER_BYTES`` (u64 replay, u64 %globaltimer
when the slot was published) followed by the launch's scratch bytes.  The last CTA to finish
a replay's copy publishes it and chooses the next replay's slot from ``consumed``: a slot
is reused only after the host drained it, and a replay that finds no slot is counted in
``overruns`` -- never written over a slot the host has not read.
"""
from __future__ import annotations


from proton_lite.runtime import cuda_graph

KERNEL_NAME = "proton_lite_graph_copy"
NODE_HEADER_BYTES = 64
SLOT_HEADER_BYTES = 16
THREADS = 256
MAX_CTAS = 1024  # enough 16-byte loads in flight to move a slot at memory speed
WORDS_PER_CTA = THREADS * 8  # four pairs of words per thread: 16 KiB per CTA
# field offsets in the node header (the PTX below uses the same numbers)
REPLAYS, WRITTEN, CONSUMED, OVERRUNS, DISCARDED, DONE, NEXT_SLOT, CLOSED, SLOTS = 0, 8, 16, 24, 32, 40, 44, 48, 52

PTX = r"""
.version 7.0
.target sm_70
.address_size 64

// params: node header, the launch's scratch, the ring, 8-byte words to move, bytes per slot,
// and for a launch with a pool the bytes before it, per chunk and the chunks a slot holds.
// Each thread moves 16-byte pairs of words, four at a time (loads in flight hide the
// latency), then one more pair at a time; the first thread moves an odd last word.
.visible .entry proton_lite_graph_copy(
    .param .u64 p_hdr, .param .u64 p_src, .param .u64 p_ring, .param .u64 p_words, .param .u64 p_slot_bytes,
    .param .u64 p_pool_at, .param .u64 p_chunk_bytes, .param .u32 p_chunk_cap)
{
    .reg .pred  %p<12>;
    .reg .b32   %r<16>;
    .reg .b64   %rd<40>;
    .reg .b64   %s<4>;
    .reg .b64   %t<4>;
    .reg .b64   %v<8>;

    ld.param.u64        %rd1, [p_hdr];
    ld.param.u64        %rd2, [p_src];
    ld.param.u64        %rd3, [p_ring];
    ld.param.u64        %rd4, [p_words];
    ld.param.u64        %rd5, [p_slot_bytes];
    ld.param.u64        %rd34, [p_pool_at];
    ld.param.u64        %rd35, [p_chunk_bytes];
    setp.eq.u64         %p10, %rd34, 0;
    @%p10 bra           SIZED;
    ld.global.cg.u32    %r13, [%rd2+12];        // a pool: only the chunks its units took
    ld.global.cg.u32    %r14, [%rd2+4];
    min.u32             %r13, %r13, %r14;
    ld.param.u32        %r15, [p_chunk_cap];
    min.u32             %r13, %r13, %r15;
    cvt.u64.u32         %rd36, %r13;
    mul.lo.s64          %rd36, %rd36, %rd35;
    add.s64             %rd36, %rd36, %rd34;
    shr.u64             %rd4, %rd36, 3;
SIZED:
    ld.volatile.global.s32 %r2, [%rd1+44];      // next_slot, chosen at the previous replay
    setp.ge.s32         %p1, %r2, 0;            // a slot to copy into
    cvt.s64.s32         %rd6, %r2;
    mul.lo.s64          %rd7, %rd6, %rd5;
    add.s64             %rd8, %rd3, %rd7;       // the slot
    add.s64             %rd9, %rd8, 16;         // its data, after the slot header
    mov.u32             %r3, %ctaid.x;
    mov.u32             %r4, %ntid.x;
    mov.u32             %r5, %tid.x;
    mov.u32             %r6, %nctaid.x;
    mul.wide.u32        %rd10, %r3, %r4;
    cvt.u64.u32         %rd11, %r5;
    add.s64             %rd10, %rd10, %rd11;    // this thread's first pair
    mov.u64             %rd31, %rd10;           // (kept: thread 0 of the grid moves the odd word)
    mul.wide.u32        %rd12, %r6, %r4;        // grid stride, in pairs
    shl.b64             %rd26, %rd12, 4;        // ... in bytes
    shl.b64             %rd27, %rd12, 2;        // four strides
    mul.lo.s64          %rd28, %rd12, 3;
    shr.u64             %rd30, %rd4, 1;         // pairs
FOUR:
    add.s64             %rd29, %rd10, %rd28;    // the fourth pair of this round
    setp.ge.u64         %p2, %rd29, %rd30;
    @%p2 bra            ONE;
    shl.b64             %rd13, %rd10, 4;
    add.s64             %s0, %rd2, %rd13;
    add.s64             %s1, %s0, %rd26;
    add.s64             %s2, %s1, %rd26;
    add.s64             %s3, %s2, %rd26;
    ld.global.cg.v2.u64 {%v0, %v1}, [%s0];
    ld.global.cg.v2.u64 {%v2, %v3}, [%s1];
    ld.global.cg.v2.u64 {%v4, %v5}, [%s2];
    ld.global.cg.v2.u64 {%v6, %v7}, [%s3];
    @!%p1 bra           FOUR_NEXT;
    add.s64             %t0, %rd9, %rd13;
    add.s64             %t1, %t0, %rd26;
    add.s64             %t2, %t1, %rd26;
    add.s64             %t3, %t2, %rd26;
    st.global.cg.v2.u64 [%t0], {%v0, %v1};
    st.global.cg.v2.u64 [%t1], {%v2, %v3};
    st.global.cg.v2.u64 [%t2], {%v4, %v5};
    st.global.cg.v2.u64 [%t3], {%v6, %v7};
FOUR_NEXT:
    add.s64             %rd10, %rd10, %rd27;
    bra.uni             FOUR;
ONE:
    setp.ge.u64         %p2, %rd10, %rd30;
    @%p2 bra            ODD;
    shl.b64             %rd13, %rd10, 4;
    add.s64             %s0, %rd2, %rd13;
    ld.global.cg.v2.u64 {%v0, %v1}, [%s0];
    add.s64             %t0, %rd9, %rd13;
    @%p1 st.global.cg.v2.u64 [%t0], {%v0, %v1};
    add.s64             %rd10, %rd10, %rd12;
    bra.uni             ONE;
ODD:
    and.b64             %rd32, %rd4, 1;
    setp.ne.u64         %p8, %rd32, 0;
    setp.eq.u64         %p9, %rd31, 0;
    and.pred            %p8, %p8, %p9;
    @!%p8 bra           COPIED;
    shl.b64             %rd33, %rd30, 4;        // the odd word's offset: after the pairs
    add.s64             %s0, %rd2, %rd33;
    ld.global.cg.u64    %v0, [%s0];
    add.s64             %t0, %rd9, %rd33;
    @%p1 st.global.cg.u64 [%t0], %v0;
COPIED:
    membar.gl;
    bar.sync            0;
    setp.ne.u32         %p3, %r5, 0;
    @%p3 bra            EXIT;
    atom.global.add.u32 %r7, [%rd1+40], 1;      // done
    add.u32             %r8, %r6, -1;
    setp.ne.u32         %p4, %r7, %r8;
    @%p4 bra            EXIT;
    // the last CTA of this replay: publish, count, choose the next slot
    membar.gl;
    ld.volatile.global.u64 %rd17, [%rd1+0];     // replays
    ld.volatile.global.u64 %rd18, [%rd1+8];     // written
    ld.volatile.global.u32 %r9, [%rd1+48];      // closed
    @!%p1 bra           NOT_KEPT;
    mov.u64             %rd19, %globaltimer;
    st.global.v2.u64    [%rd8], {%rd17, %rd19}; // slot header: replay, publication time
    membar.gl;
    add.s64             %rd18, %rd18, 1;
    st.volatile.global.u64 [%rd1+8], %rd18;     // written: the slot is the host's to read
    bra.uni             NEXT;
NOT_KEPT:
    setp.ne.u32         %p5, %r9, 0;
    @%p5 bra            CLOSED;
    ld.volatile.global.u64 %rd21, [%rd1+24];
    add.s64             %rd21, %rd21, 1;
    st.volatile.global.u64 [%rd1+24], %rd21;    // overruns
    bra.uni             NEXT;
CLOSED:
    ld.volatile.global.u64 %rd21, [%rd1+32];
    add.s64             %rd21, %rd21, 1;
    st.volatile.global.u64 [%rd1+32], %rd21;    // discarded
NEXT:
    add.s64             %rd17, %rd17, 1;
    st.volatile.global.u64 [%rd1+0], %rd17;     // replays
    ld.volatile.global.u64 %rd22, [%rd1+16];    // consumed
    ld.volatile.global.u32 %r10, [%rd1+52];     // slots
    cvt.u64.u32         %rd23, %r10;
    sub.s64             %rd24, %rd18, %rd22;    // slots the host has not drained
    setp.lt.u64         %p6, %rd24, %rd23;
    setp.eq.u32         %p7, %r9, 0;
    and.pred            %p6, %p6, %p7;
    rem.u64             %rd25, %rd18, %rd23;
    cvt.u32.u64         %r11, %rd25;
    selp.b32            %r12, %r11, -1, %p6;
    st.volatile.global.s32 [%rd1+44], %r12;     // next_slot
    st.volatile.global.u32 [%rd1+40], 0;        // done, for the next replay
    membar.gl;
EXIT:
    ret;
}
"""


def copy_grid(words: int) -> int:
    """CTAs of the copy node for ``words`` 8-byte words."""
    return max(1, min(MAX_CTAS, -(-words // WORDS_PER_CTA)))


_KERNEL = cuda_graph.PtxKernel(PTX, KERNEL_NAME)


def function(device: int):
    """The copy kernel in the current context (device ``device``), loaded at first use."""
    return _KERNEL.function(device)


def add_node(graph, dependencies, device: int, header: int, scratch: int, ring: int, nbytes: int,
             slot_bytes: int, pool=None):
    """Add the copy node to ``graph`` after ``dependencies`` (the captured kernel's node);
    ``pool``: (chunks, epoch, bytes before the pool, bytes per chunk) of a launch with one,
    whose slots hold ``nbytes``: its blocks and as many chunks as fit."""
    words = nbytes // 8
    pool_at, chunk_bytes, cap = (pool[2], pool[3], (nbytes - pool[2]) // pool[3]) if pool is not None else (0, 0, 0)
    return cuda_graph.graph_add_kernel_node(
        graph, dependencies, function(device), copy_grid(words), THREADS,
        ((header, scratch, ring, words, slot_bytes, pool_at, chunk_bytes, cap), ("u64", ) * 7 + ("u32", )))
