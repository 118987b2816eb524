"""FlagGems' generated pointwise kernel for gelu on a contiguous tensor (rank 1, block pointers;
one tile per program where ``one_tile_per_cta``, else a grid-stride loop over tiles, which
FlagGems runs past its grid cap of 65,536 CTAs), written here from its generator's template
(``flag_gems/utils/pointwise_dynamic.py``, 5.0.2) so that its SASS can be compared with the
plain build without a GPU (design.md, "Short CTAs of other libraries").  Block pointers were
removed in Triton 3.9: build it with Triton 3.6-3.8, e.g.

    proton-lite compile tests/benchmarks/flaggems_gelu_shape.py:gelu_none_kernel_rank_1 \
      --signature 'in0_ptr:*fp32,out0_ptr:*fp32,in0_stride0:i32,out0_stride0:i32,s0:i32,num_tasks:i32,tiles_per_cta:i32' \
      --constexpr in0_stride_order0=0 --constexpr out0_stride_order0=0 --constexpr tile_size0=512 \
      --constexpr one_tile_per_cta=true --num-warps 4 --divisible-by-16 in0_ptr,out0_ptr,s0,num_tasks --emit sass DIR
"""
import triton
import triton.language as tl


@triton.jit
def gelu_none_kernel_rank_1(in0_ptr, out0_ptr, in0_stride0, in0_stride_order0: tl.constexpr, out0_stride0,
                            out0_stride_order0: tl.constexpr, s0, num_tasks, tiles_per_cta: int,
                            tile_size0: tl.constexpr, one_tile_per_cta: tl.constexpr):
    pid = tl.program_id(0)
    num_tiles0 = tl.cdiv(s0, tile_size0)  # noqa: F841 (as the generator writes it)
    if one_tile_per_cta:
        tile_id = pid
        tile_id0 = tile_id
        offset0 = (tile_id0 * tile_size0).to(tl.int32)
        in0_bptr = tl.make_block_ptr(in0_ptr, (s0, ), (in0_stride0, ), (offset0, ), (tile_size0, ), order=(in0_stride_order0, ))
        in0 = tl.load(in0_bptr, boundary_check=(in0_stride_order0, )).to(in0_ptr.type.element_ty)
        out0 = 0.5 * in0 * (1 + tl.erf(in0 * 0.7071067811865476))
        out0_bptr = tl.make_block_ptr(out0_ptr, (s0, ), (out0_stride0, ), (offset0, ), (tile_size0, ), order=(out0_stride_order0, ))
        tl.store(out0_bptr, out0.to(out0_bptr.type.element_ty), boundary_check=(out0_stride_order0, ))
    else:
        num_ctas = tl.num_programs(0)
        for j in range(0, tiles_per_cta):
            tile_id = pid + j * num_ctas
            tile_id0 = tile_id
            offset0 = (tile_id0 * tile_size0).to(tl.int32)
            in0_bptr = tl.make_block_ptr(in0_ptr, (s0, ), (in0_stride0, ), (offset0, ), (tile_size0, ), order=(in0_stride_order0, ))
            in0 = tl.load(in0_bptr, boundary_check=(in0_stride_order0, )).to(in0_ptr.type.element_ty)
            out0 = 0.5 * in0 * (1 + tl.erf(in0 * 0.7071067811865476))
            out0_bptr = tl.make_block_ptr(out0_ptr, (s0, ), (out0_stride0, ), (offset0, ), (tile_size0, ), order=(out0_stride_order0, ))
            tl.store(out0_bptr, out0.to(out0_bptr.type.element_ty), boundary_check=(out0_stride_order0, ))
