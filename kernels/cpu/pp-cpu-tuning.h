/* ppdiffuse — the sizes at which the CPU ops change course (internal).
 *
 * Every block, band, grain and width that makes a CPU op take one code path
 * or another lives here, so that tests/kernels/ops can derive its shapes
 * from them and run each path on both sides of its threshold: a moved
 * threshold moves the test shapes with it.  Tuning measurements are in the
 * comments; change a value only with a measurement.  None of them is
 * visible outside the CPU backend. */
#pragma once

/* ---- ops' working sets ---- */

/* pp_attention processes at most this many queries of one head at a time,
 * so its score buffer is PP_ATTENTION_QUERY_BLOCK × lk floats. */
#define PP_ATTENTION_QUERY_BLOCK 256

/* pp_conv2d's im2col buffer holds at most this many floats (8 MiB; always
 * at least one output row): a larger convolution is done in bands of
 * output rows.  Measured best of 1-16 MiB: the band stays in cache between
 * im2col and the GEMM that reads it. */
#define PP_CONV2D_COL_MAX_FLOATS (1 << 21)

/* pp_for_rows cuts its rows into ranges of at least this many rows (by row
 * count alone, so that results do not depend on the team size): enough
 * rows for efficient GEMMs against weights each range packs anew, few
 * enough that a transformer's feed-forward (12·C floats a row) stays near
 * L2. */
#define PP_CPU_ROW_RANGE_MIN 128

/* ---- vector loops (pp-cpu-vectorize.h) ---- */

/* Independent accumulators for a reduction (max, sum) in a vectorised
 * loop: one running value would be a serial dependency.  16 floats fill an
 * AVX-512 register. */
#define PP_CPU_LANES 16

/* ---- the thread team (pp-cpu-parallel.c) ---- */

/* A loop of n items with a minimum chunk of min_chunk items runs on the
 * team when n ≥ 2 · min_chunk and the team has more than one thread, in up
 * to this many chunks per thread: enough to even out uneven progress. */
#define PP_CPU_CHUNKS_PER_THREAD 4

/* ---- GEMM (pp-cpu-gemm.c) ---- */

/* FLOPs per block worth a thread of its own (~5 µs at ~100 GFLOP/s). */
#define PP_CPU_GEMM_GRAIN_FLOPS (500 * 1000)
/* Blocks a large GEMM is cut into, whatever the team size: enough for 8
 * cores, each block still hundreds of columns wide in a UNet at 512x512. */
#define PP_CPU_GEMM_BLOCKS 8
/* Block boundaries fall on multiples of this many rows or columns: whole
 * register tiles of OpenBLAS's kernels, so that every element of C is
 * computed by the same kernel, in the same order, whatever the split.  16
 * is the widest sgemm tile of OpenBLAS's x86-64 kernels: at 8, a column
 * block ending mid-tile sent its last 8 columns through the 8-wide edge
 * kernel, whose sums differ in the last bit from the 16-wide one's (an
 * NN GEMM with 1196 columns split at 600: 303 values differed). */
#define PP_CPU_GEMM_SPLIT_ALIGN 16

/* ---- attention (pp-cpu-attention.c) ---- */

/* Causal attention (pp-cpu-attention-causal.c): (sample, head, query) rows
 * per parallel chunk; a text encoder's 77 rows of 64 make ~10 µs. */
#define PP_CPU_CAUSAL_GRAIN_ROWS 16

/* Score values per thread worth splitting the softmax for (~10 µs of
 * exp). */
#define PP_CPU_SOFTMAX_GRAIN_SCORES (16 * 1024)
/* Values summed in float lanes before the partial sums go to double. */
#define PP_CPU_SUM_BLOCK 256
/* Largest head_dim of the fused path: above it the GEMMs are efficient. */
#define PP_CPU_FUSED_MAX_HEAD_DIM 32
/* Fused path: floats per vector, vectors of keys per loop step (independent
 * accumulators hide the FMA latency), and query rows per parallel chunk. */
#define PP_CPU_FUSED_LANES 16
#define PP_CPU_FUSED_KEY_VECS 4
#define PP_CPU_FUSED_GRAIN_ROWS 16
/* Query rows that share each loaded key / value vector. */
#define PP_CPU_FUSED_ROWS 4
/* The head_dim whose p·v is fused with the exp (the 32×32 level of the
 * small UNets), and the rows that share each value vector there: two rows'
 * head_dim accumulators each, plus the exp's temporaries, fill the 32
 * vector registers. */
#define PP_CPU_FUSED_SMALL_HEAD_DIM 8
#define PP_CPU_FUSED_PAIR 2

/* ---- convolution (pp-cpu-conv.c) ---- */

/* Column values per thread worth splitting im2col (and the direct kernels'
 * band copies) for (~3 µs of copy). */
#define PP_CPU_CONV_GRAIN_COL_VALUES (16 * 1024)
/* Direct 3×3 kernel: output channels and pixel vectors per register tile
 * (8 × 2 vectors = 16 of the 32 zmm registers as accumulators).  It takes
 * rows whose width is a multiple of PP_CPU_DIRECT_LANES and at least
 * PP_CPU_NARROW_BELOW_WIDTH. */
#define PP_CPU_DIRECT_LANES 16
#define PP_CPU_DIRECT_COUT_TILE 8
#define PP_CPU_DIRECT_VECS 2
/* Floats of one padded input band: ~1 MiB, so that it stays in L2 while
 * every output channel reads it. */
#define PP_CPU_DIRECT_BAND_FLOATS (512 * 1024)
/* Output pixels per call from which the row kernel repacks its weights
 * (measured: packing loses at 32×32 and wins at 128×128). */
#define PP_CPU_DIRECT_PACK_MIN_PIXELS (64 * 64)
/* Narrow 3×3 kernel: output channels and pixel vectors per register tile
 * (6 × 4 vectors = 24 of the 32 zmm registers as accumulators; each tap
 * then loads 4 input vectors and 6 weights for 24 FMAs). */
#define PP_CPU_NARROW_LANES 16
#define PP_CPU_NARROW_COUT_TILE 6
#define PP_CPU_NARROW_VECS 4
/* Floats of one band's three shifted input copies (6 MiB): a pixel block
 * only reads its own few rows, so the band need not fit L2, and tall bands
 * copy fewer halo rows. */
#define PP_CPU_NARROW_BAND_FLOATS (1536 * 1024)
/* Flops per thread worth splitting the narrow kernel for (~3 µs). */
#define PP_CPU_NARROW_GRAIN_FLOPS (500 * 1000)
/* Row width below which the narrow kernel beats the row kernel. */
#define PP_CPU_NARROW_BELOW_WIDTH 32

/* ---- normalisation (pp-cpu-norm.c) ---- */

/* Values summed in float lanes before each block's sums go to double. */
#define PP_CPU_NORM_BLOCK 256
/* Values per thread worth splitting for (~3 µs: three passes). */
#define PP_CPU_NORM_GRAIN_VALUES (8 * 1024)

/* ---- element-wise (pp-cpu-elementwise.c) ---- */

/* Items per thread below which splitting costs more than it saves: ~10 µs
 * of work for the transcendental ops, and for the ones that only move
 * memory. */
#define PP_CPU_GRAIN_MATH (4 * 1024)
/* Element-wise loops split at multiples of this many floats (4 AVX-512
 * vectors, the widest unrolled vector step): a chunk that ended inside one
 * sent its last values through the loop's scalar remainder, whose SiLU
 * differs in the last bit from the vector one's. */
#define PP_CPU_ELEMENT_ALIGN 64
#define PP_CPU_GRAIN_MEMORY (16 * 1024)

/* ---- layout (pp-cpu-layout.c) ---- */

/* 32 × 32 floats: two tiles (source and destination) fit in L1. */
#define PP_CPU_TRANSPOSE_TILE 32
/* Values per thread worth splitting a copy for (~3 µs). */
#define PP_CPU_LAYOUT_GRAIN_VALUES (16 * 1024)
