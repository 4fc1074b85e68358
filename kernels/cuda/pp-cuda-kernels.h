/* ppdiffuse — the CUDA backend's own kernels, as C functions: each
 * launches on @stream and returns the launch's status (cudaGetLastError),
 * which the backend checks.  One op family per .cu file:
 *   pp-cuda-elementwise.cu  activations, arithmetic, the LCM step, the
 *                           timestep embedding, biases, dtype casts;
 *   pp-cuda-norm.cu         group and layer normalisation;
 *   pp-cuda-layout.cu       resampling, concatenation, transposes;
 *   pp-cuda-softmax.cu      the attention's row softmax;
 *   pp-cuda-bank.cu         the temporal feature bank's norms, fusion
 *                           and merging (float32 only).
 * Parameters (biases, norm scales, add's x) may be stored in 16 bits
 * (PpCudaType, their views' dtype), read widened to float.  Activations
 * are float32, except where a kernel takes a PpCudaType for them: then
 * they are read widened and written rounded to nearest even, which gives
 * the bits of the float32 kernel between a widening and a narrowing.
 * Sizes are 64-bit where a tensor can pass 2^31 elements. */
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "pp-ops-math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a parameter or an activation is stored. */
typedef enum
{
  PP_CUDA_F32,
  PP_CUDA_F16,
  PP_CUDA_BF16,
} PpCudaType;

/* Bytes of one value stored as @t. */
static inline size_t
pp_cuda_type_size (PpCudaType t)
{
  return t == PP_CUDA_F32 ? sizeof (float) : sizeof (uint16_t);
}

typedef enum
{
  PP_CUDA_SILU,
  PP_CUDA_RELU,
  PP_CUDA_TANH,
  PP_CUDA_GELU,
  PP_CUDA_QUICK_GELU,
} PpCudaUnary;

/* Every kernel below launched with programmatic stream serialization
 * (@on), or as a plain launch (pp-cuda-common.cuh, PP_CUDA_LAUNCH): the
 * backend's PPDIFFUSE_CUDA_PDL, set before its first launch. */
void pp_cuda_set_programmatic (int on);

/* pp-cuda-elementwise.cu */
/* Whether the device has an image of the build's kernels (one kernel's
 * attributes, which loads it: the driver compiles the PTX here where it
 * has no binary for the device), and the SM version of the binary it
 * runs (12.0 → 120; CUDA's cudaFuncAttributes.binaryVersion).  The error
 * (cudaErrorNoKernelImageForDevice, an old driver's PTX refusal)
 * otherwise, answered here. */
cudaError_t pp_cuda_kernel_image (int *binary_version);
cudaError_t pp_cuda_fill (float *x, float value, size_t n,
    cudaStream_t stream);
/* In place, x of @type. */
cudaError_t pp_cuda_unary (PpCudaUnary op, void *x, PpCudaType type,
    size_t n, cudaStream_t stream);
/* x and y of @type. */
cudaError_t pp_cuda_geglu (const void *x, size_t rows, int d, void *y,
    PpCudaType type, cudaStream_t stream);
/* y (@y_type) += x (@x_type). */
cudaError_t pp_cuda_add (void *y, PpCudaType y_type, const void *x,
    PpCudaType x_type, size_t n, cudaStream_t stream);
cudaError_t pp_cuda_scale (void *x, PpCudaType type, size_t n, float s,
    cudaStream_t stream);
cudaError_t pp_cuda_bytes_to_floats (const uint8_t *x, size_t n, float *y,
    cudaStream_t stream);
cudaError_t pp_cuda_floats_to_bytes (const float *x, size_t n, uint8_t *y,
    cudaStream_t stream);
cudaError_t pp_cuda_affine (void *x, PpCudaType type, size_t n, float mul,
    float add, cudaStream_t stream);
cudaError_t pp_cuda_axpby (float *y, float a, const float *x, float b,
    size_t n, cudaStream_t stream);
cudaError_t pp_cuda_lcm_step (float *x, const float *eps, const float *noise,
    size_t n, PpLcmCoeffs coeffs, cudaStream_t stream);
cudaError_t pp_cuda_timestep_embedding (float t, int dim, int flip_sin_to_cos,
    float freq_shift, float *y, cudaStream_t stream);
/* y [rows,cols] += bias [cols]. */
cudaError_t pp_cuda_add_row_bias (float *y, size_t rows, int cols,
    const void *bias, PpCudaType bias_type, cudaStream_t stream);
/* y [n,c,hw] (@y_type) = x + bias [c] (bias NULL: 0), x [n,c,hw] of
 * @x_type (x may equal y when the types are equal); with @relu, its relu
 * (pp_math_relu) before y's rounding. */
cudaError_t pp_cuda_channel_bias (const void *x, PpCudaType x_type, void *y,
    PpCudaType y_type, int n, int c, size_t hw, const void *bias,
    PpCudaType bias_type, int relu, cudaStream_t stream);
/* The same with @res [n,c,hw] of @y_type (NULL: none) added after the
 * bias, before the relu: y = relu (x + bias + res), rounded once (res may
 * be y). */
cudaError_t pp_cuda_channel_bias_residual (const void *x, PpCudaType x_type,
    void *y, PpCudaType y_type, int n, int c, size_t hw, const void *bias,
    PpCudaType bias_type, const void *res, int relu, cudaStream_t stream);
/* y [rows,cols] packed = x [rows,cols] (row stride ld) narrowed to
 * @y_type (F16 or BF16), rounded as pp-dtype-math.h rounds. */
cudaError_t pp_cuda_narrow_2d (const float *x, size_t rows, size_t cols,
    size_t ld, void *y, PpCudaType y_type, cudaStream_t stream);

/* pp-cuda-norm.cu: gamma, beta NULL for 1 and 0, each of its own type;
 * y may equal x.  The group norm's @partials hold
 * pp_cuda_group_norm_partials floats, on 16 bytes.  Channels first: @n ·
 * @groups items, each cut into pp_cuda_group_norm_splits slices (at most
 * PP_CUDA_GROUP_MAX_SPLITS); NULL @partials, or a shape the split kernels
 * cannot take (splits 0: n · groups past 65535, or a group of 2³²
 * values): one block per group, both passes in it (the first way).
 * Channels last (@layout PP_CUDA_GROUP_NHWC or _NHWC_VECTOR: x and y
 * [n, hw, c]): each sample cut into pp_cuda_group_norm_tiles tiles of
 * whole pixels; a shape they cannot take (tiles 0: c past 3072, groups
 * past 1024, n past 65535), or NULL @partials: cudaErrorInvalidValue (the
 * caller lays it channels first).  PP_CUDA_GROUP_NHWC_VECTOR reads and
 * writes eight channels a thread with 16-byte loads and stores where c is
 * a multiple of 8 and x and y lie on 16 bytes (elsewhere as _NHWC); its
 * sums run in another order, so its bytes differ from _NHWC's by
 * rounding.
 * With @silu, y is the SiLU of the normalised values (pp_math_silu, as
 * pp_cuda_unary computes it: the same bytes as the two apart).  @shift
 * [n, c] (NULL: none; float32 or 16 bits, read as it is stored, widened
 * in registers) is added to each channel's values first: channels
 * last as they are loaded, channels first into y (rounded to @type)
 * before the norm runs in place there.
 * PP_CUDA_GROUP_NHWC_TICKET: the vector way's reach (elsewhere as _NHWC)
 * in two launches, pp_cuda_group_norm_ticket_tiles tiles of statistics a
 * sample (at most 256), each a sum of deviations from a value of the
 * group and of their squares, which the last tile of a sample to finish
 * combines (in the tiles' order); @tickets holds @n counts, 0 before the
 * call and again after it (NULL: cudaErrorInvalidValue).
 * PP_CUDA_GROUP_NHWC_GRID: the ticket way's reach and sums in one
 * cooperative launch, pp_cuda_group_norm_grid_tiles tiles a sample, which
 * meet once their sums are in memory, then each normalises its pixels;
 * @tickets holds 2 · @n counts, a pair a sample: its count of tiles
 * arrived, 0 before the call and again after it, then its generation,
 * any value before, one more after; where a sample would not have a tile
 * resident at once, the ticket kernels, counting in the first of each
 * pair (the same sums where the tiles are the same: the same bytes). */
#define PP_CUDA_GROUP_NCHW 0
#define PP_CUDA_GROUP_NHWC 1
#define PP_CUDA_GROUP_NHWC_VECTOR 2
#define PP_CUDA_GROUP_NHWC_TICKET 3
#define PP_CUDA_GROUP_NHWC_GRID 4
#define PP_CUDA_GROUP_MAX_SPLITS 32
#define PP_CUDA_GROUP_STATS 4
int pp_cuda_group_norm_splits (int n, int c, size_t hw, int groups);
int pp_cuda_group_norm_tiles (int n, int c, size_t hw, int groups);
/* Tiles of the ticket way's statistics a sample (0: c not a multiple of
 * 8, or a shape the channels-last kernels cannot take). */
int pp_cuda_group_norm_ticket_tiles (int n, int c, size_t hw, int groups);
/* Tiles of the grid way a sample for activations of @type on the current
 * device (0: the ticket kernels run instead). */
int pp_cuda_group_norm_grid_tiles (PpCudaType type, int n, int c,
    size_t hw, int groups);
/* The fewest values a channels-last tile takes (0: the default, 2048),
 * for every group norm of the process after it: the backend's
 * PPDIFFUSE_CUDA_GROUP_NORM_TILE, set before its first launch. */
void pp_cuda_set_group_norm_tile (int values);
size_t pp_cuda_group_norm_partials (int n, int c, size_t hw, int groups,
    int nhwc);
/* x and y of @type, @shift of @shift_type. */
cudaError_t pp_cuda_group_norm (const void *x, const void *shift,
    PpCudaType shift_type, PpCudaType type, int n, int c, size_t hw,
    int groups, float eps, const void *gamma, PpCudaType gamma_type,
    const void *beta, PpCudaType beta_type, int silu, int layout,
    float *partials, unsigned *tickets, void *y, cudaStream_t stream);
/* @way PP_CUDA_LAYER_NORM_WARP: a warp per row of up to 1536 values,
 * else (or with _BLOCK) a block per row; _VECTOR: a warp per row of a
 * multiple of 8 values up to 1536 with x and y on 16 bytes, eight values a
 * 16-byte load or store (elsewhere as _WARP); _OCTET: a thread per eight
 * values of a row (rows of a multiple of 8 values up to 4096, x and y on
 * 16 bytes; elsewhere as _VECTOR), several rows a block; _WIDTH: rows of
 * PP_CUDA_LAYER_NORM_OCTET_FROM values or more as _OCTET, shorter ones as
 * _VECTOR (on an H200 octets took a 1280-value row's norm from 8.6 to
 * 5.1 µs, and a 320-value one's from 6.4 to 9.4). */
#define PP_CUDA_LAYER_NORM_WARP 0
#define PP_CUDA_LAYER_NORM_BLOCK 1
#define PP_CUDA_LAYER_NORM_VECTOR 2
#define PP_CUDA_LAYER_NORM_OCTET 3
#define PP_CUDA_LAYER_NORM_WIDTH 4
#define PP_CUDA_LAYER_NORM_OCTET_FROM 1024
cudaError_t pp_cuda_layer_norm (const void *x, PpCudaType type, size_t rows,
    int dim, float eps, const void *gamma, PpCudaType gamma_type,
    const void *beta, PpCudaType beta_type, void *y, int way,
    cudaStream_t stream);

/* pp-cuda-layout.cu */
/* x and y of @type; with @nhwc, channels last: x [n, h, w, c] → y [n,
 * h·f, w·f, c]. */
cudaError_t pp_cuda_upsample_nearest (const void *x, PpCudaType type, int n,
    int c, int h, int w, int factor, int nhwc, void *y, cudaStream_t stream);
/* The interleave_phases op (pp-ops-list.h): z and y of @type; with @nhwc,
 * channels last: z [n, h + 1, w + 1, 4c] → y [n, 2h, 2w, c]. */
cudaError_t pp_cuda_interleave_phases (const void *z, PpCudaType type,
    int n, int c, int h, int w, int nhwc, void *y, cudaStream_t stream);
cudaError_t pp_cuda_resize_bilinear (const float *x, int c, int h, int w,
    float *y, int ho, int wo, cudaStream_t stream);
/* a, b and y of @type. */
cudaError_t pp_cuda_concat_channels (const void *a, int ca, const void *b,
    int cb, int n, size_t hw, void *y, PpCudaType type, cudaStream_t stream);
/* x [n,rows,cols] → y [n,cols,rows]: nchw_to_nlc is (rows, cols) = (c, hw),
 * nlc_to_nchw (hw, c). */
cudaError_t pp_cuda_transpose (const float *x, int n, int rows, int cols,
    float *y, cudaStream_t stream);
/* y [n,cols,rows] (@y_type) = x [n,rows,cols] (@x_type) + bias [cols]
 * (@bias_type; NULL: none), with @relu its relu before y's rounding: an
 * NCHW ↔ NHWC change of layout and of storage type in one pass. */
cudaError_t pp_cuda_transpose_typed (const void *x, PpCudaType x_type,
    int n, int rows, int cols, const void *bias, PpCudaType bias_type,
    int relu, void *y, PpCudaType y_type, cudaStream_t stream);
/* y [n,cols,rows] (@type) = x [n,rows,cols] (@type), a value a thread:
 * for matrices a few columns wide (a filter's kh·kw), made once, where a
 * shared tile would leave most of its threads idle. */
cudaError_t pp_cuda_transpose_narrow (const void *x, int n, int rows,
    int cols, void *y, PpCudaType type, cudaStream_t stream);
/* x [n,c,hw] (@x_type) += v [n,c] (@v_type). */
cudaError_t pp_cuda_add_channel (void *x, PpCudaType x_type, int n, int c,
    size_t hw, const void *v, PpCudaType v_type, cudaStream_t stream);
/* A convolution's channels padded with zeros, channels last: y [n_pad,
 * hw, c_pad] (@y_type) = x [n, c, hw] (@x_type; with @nhwc [n, hw, c]),
 * zero past channel c and past sample n (a filter's padded output
 * channels); c_pad a multiple of 8, y on 16 bytes. */
cudaError_t pp_cuda_pad_channels (const void *x, PpCudaType x_type,
    int nhwc, int n, int c, size_t hw, void *y, PpCudaType y_type,
    int n_pad, int c_pad, cudaStream_t stream);
/* And back: y [n, c, hw] (@y_type; with @nhwc [n, hw, c]) = the first c
 * channels of x [n, hw, c_pad] (@x_type) + bias [c] (@bias_type; NULL:
 * none) + res (y's type and layout; NULL: none), with @relu its relu,
 * rounded once (pp_cuda_channel_bias_residual's sums); c_pad a multiple
 * of 8, x on 16 bytes; y may be x (c = c_pad, nhwc, one type). */
cudaError_t pp_cuda_unpad_channels (const void *x, PpCudaType x_type, int n,
    int c_pad, size_t hw, void *y, PpCudaType y_type, int nhwc, int c,
    const void *bias, PpCudaType bias_type, const void *res, int relu,
    cudaStream_t stream);

/* A convolution's patches as the rows of a matrix, channels last, 16-bit
 * values copied as they are: a [n · ho · wo, kh · kw · c] = x [n, h, w, c]
 * at (oy · stride - pad + ky, ox · stride - pad + kx), zero past its edges,
 * the columns in the order (ky, kx, channel) of a filter laid channels
 * last ([cout, kh, kw, c]): the product with that filter as [cout, kh · kw
 * · c] is the convolution.  c a multiple of 8, x and a on 16 bytes. */
cudaError_t pp_cuda_im2col_nhwc (const void *x, int n, int h, int w, int c,
    int kh, int kw, int stride, int pad, int ho, int wo, void *a,
    cudaStream_t stream);

/* pp-cuda-softmax.cu: each of @rows rows of @cols scores becomes
 * softmax(row) in place (max subtracted, float32). */
cudaError_t pp_cuda_softmax_rows (float *s, size_t rows, int cols,
    cudaStream_t stream);
/* The same for causal self-attention: row r holds the scores of query
 * row0 + r % period, whose keys past it get probability 0. */
cudaError_t pp_cuda_softmax_rows_causal (float *s, size_t rows, int cols,
    int period, int row0, cudaStream_t stream);
/* Either of the two (@causal) with the probabilities written packed to
 * @p as @p_type (F16 or BF16); @s keeps their exponentials. */
cudaError_t pp_cuda_softmax_rows_narrow (float *s, size_t rows, int cols,
    int causal, int period, int row0, void *p, PpCudaType p_type,
    cudaStream_t stream);

/* pp-cuda-bank.cu: the ops row_norms, bank_fuse, bank_merge_dest and
 * bank_merge of pp-ops-list.h. */
cudaError_t pp_cuda_row_norms (const float *x, size_t rows, int c,
    float *norms, cudaStream_t stream);
cudaError_t pp_cuda_bank_fuse (const float *sim, size_t rows, int m, int c,
    const float *y_norms, const float *bank_norms, const float *bank,
    double threshold, double strength, float *y, float *fused,
    cudaStream_t stream);
cudaError_t pp_cuda_bank_merge_dest (const float *sim, size_t sources,
    int first, int n, int r, const float *norms, float *dest,
    cudaStream_t stream);
cudaError_t pp_cuda_bank_merge (const float *x, int n, int r, int c,
    const float *dest, float *y, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
