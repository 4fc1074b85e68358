/* ppdiffuse — group and layer normalisation on the device: several
 * blocks per group (one per row), two passes in float32 (the mean, then
 * the deviations from it, which never cancel), then the normalised
 * output.  As on the CPU (pp-cpu-norm.c), the mean is a float and the
 * float of what it leaves out (the second pass's residual mean), and a
 * value is normalised as ((x - hi) - lo): x - hi is exact for x near the
 * mean, so a large common offset loses nothing (with one float mean the
 * error grew as 1e-7 · mean / deviation).
 * Each thread's partial sums cover a few hundred values at most before the
 * tree reduction adds them, so float32 loses nothing measurable.  The
 * channels-last default (the ticket kernels, below) makes one pass
 * instead: each value's deviation from a value of its group, and its
 * square, the variance their mean square less the square of their mean,
 * which loses nothing to a common offset either, since the reference
 * value lies among the data.  Input
 * and output are of one storage type (A: float32 or 16 bits, widened on
 * load, rounded on store); the statistics are float32. */
#include "pp-cuda-common.cuh"

#include <limits.h>

/* Threads per group or row: a UNet group holds up to ~10⁵ values. */
#define NORM_THREADS 512
/* Blocks per launch; groups or rows beyond it are taken by the same blocks
 * again (grid-stride over items). */
#define NORM_MAX_BLOCKS 65535

/* A parameter (gamma, beta) of @type widened: a uniform branch, so that
 * no kernel is instantiated for every pair of parameter types.  The
 * channels-last apply kernels (the defaults) load a channel's parameters
 * once, before their loops over pixels; the channels-first and block
 * kernels, the fallbacks, once a value. */
__device__ __forceinline__ float
param_load (PpCudaType type, const void *p, int i)
{
  if (type == PP_CUDA_F16)
    return pp_cuda_load<PP_CUDA_F16> (p, i);
  if (type == PP_CUDA_BF16)
    return pp_cuda_load<PP_CUDA_BF16> (p, i);
  return pp_cuda_load<PP_CUDA_F32> (p, i);
}

/* Mean (*@hi + *@lo) and 1/√(var + eps) of the @count values at @first
 * of @x (stored as A), every thread of the block getting them. */
template <PpCudaType A> __device__ void
norm_moments (const void *x, size_t first, size_t count, float eps,
    float *shared, float *hi, float *lo, float *rstd)
{
  float s = 0.0f, sq = 0.0f, m, d_mean;

  for (size_t i = threadIdx.x; i < count; i += blockDim.x)
    s += pp_cuda_load<A> (x, first + i);
  m = pp_cuda_block_sum (s, shared) / (float) count;
  s = 0.0f;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
    const float d = pp_cuda_load<A> (x, first + i) - m;

    s += d;
    sq += d * d;
  }
  d_mean = pp_cuda_block_sum (s, shared) / (float) count;
  *hi = m;
  *lo = d_mean;
  *rstd = rsqrtf (fmaxf (pp_cuda_block_sum (sq, shared) / (float) count
          - d_mean * d_mean, 0.0f) + eps);
}

/* Group norm: each (sample, group) item is cut into @splits slices of
 * consecutive values, one block each, so that a launch has hundreds of
 * blocks even when a UNet has 32 groups of 40,960 values.  The first
 * kernel gives each slice its mean (hi, lo) and sum of squared deviations
 * (two passes over the slice); the second combines an item's slices
 * (Chan's formula: exact for any split, the slices' means taken as their
 * offsets from the item's float mean) and normalises its own slice. */

/* Where value @i of item @item (sample · groups + group) lies, channels
 * first (the group's channels are adjacent planes), and its channel
 * (*@ch).  I is the index type: unsigned in the split kernels (a group
 * below 2^32 values: 32-bit divisions). */
template <typename I> __device__ __forceinline__ size_t
group_at (size_t item, int groups, int per_group, size_t hw, I i, int *ch)
{
  *ch = (int) (item % groups) * per_group + (int) (i / (I) hw);
  return item * per_group * hw + i;
}

/* Slice @s of @count values split @splits ways: [*begin, *end). */
__device__ __forceinline__ void
group_slice (size_t count, int splits, int s, size_t *begin, size_t *end)
{
  const size_t len = (count + splits - 1) / splits;

  *begin = min (count, (size_t) s * len);
  *end = min (count, *begin + len);
}

template <PpCudaType A> __global__ void
group_norm_stats_kernel (const void *x, int c, size_t hw, int groups,
    int splits, float4 *partials)
{
  pp_cuda_wait_prior ();
  __shared__ float shared[32];
  const int per_group = c / groups;
  const size_t count = (size_t) per_group * hw;
  const size_t item = blockIdx.y;       /* sample · groups + group */
  size_t begin, end;
  float sum = 0.0f, mean, d_sum = 0.0f, d_mean, m2 = 0.0f;
  int ch;

  group_slice (count, splits, blockIdx.x, &begin, &end);
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    sum += pp_cuda_load<A> (x, group_at (item, groups, per_group, hw,
            (unsigned) i, &ch));
  mean = pp_cuda_block_sum (sum, shared) / (float) (end - begin);
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float d = pp_cuda_load<A> (x, group_at (item, groups, per_group,
            hw, (unsigned) i, &ch)) - mean;

    d_sum += d;
    m2 += d * d;
  }
  d_sum = pp_cuda_block_sum (d_sum, shared);
  d_mean = d_sum / (float) (end - begin);
  /* Σ (d - d_mean)² = Σ d² - d_sum · d_mean. */
  m2 = fmaxf (pp_cuda_block_sum (m2, shared) - d_sum * d_mean, 0.0f);
  if (threadIdx.x == 0)
    partials[item * splits + blockIdx.x] = make_float4 (mean, d_mean, m2,
        0.0f);
}

template <PpCudaType A> __global__ void
group_norm_apply_kernel (const void *x, int c, size_t hw, int groups,
    int splits, const float4 *partials, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, bool silu, void *y)
{
  pp_cuda_wait_prior ();
  __shared__ float moments[3];
  const int per_group = c / groups;
  const size_t count = (size_t) per_group * hw;
  const size_t item = blockIdx.y;
  size_t begin, end;

  /* The first warp combines the item's ≤ 32 slices. */
  if (threadIdx.x < 32) {
    const int s = threadIdx.x;
    size_t b, e;
    float n_s = 0.0f, hi_s = 0.0f, lo_s = 0.0f, m2_s = 0.0f, hi,
        off, lo, m2;

    if (s < splits) {
      const float4 st = partials[item * splits + s];

      group_slice (count, splits, s, &b, &e);
      n_s = (float) (e - b);
      hi_s = st.x;
      lo_s = st.y;
      m2_s = st.z;
    }
    /* The item's mean as a float, then each slice's mean as its offset
     * from it (hi_s - hi is exact for slices near the mean), whose mean is
     * what the float leaves out. */
    hi = pp_cuda_warp_sum (n_s * hi_s) / (float) count;
    off = n_s > 0.0f ? (hi_s - hi) + lo_s : 0.0f;
    lo = pp_cuda_warp_sum (n_s * off) / (float) count;
    m2 = pp_cuda_warp_sum (m2_s + n_s * (off - lo) * (off - lo));
    if (s == 0) {
      moments[0] = hi;
      moments[1] = lo;
      moments[2] = rsqrtf (m2 / (float) count + eps);
    }
  }
  __syncthreads ();
  group_slice (count, splits, blockIdx.x, &begin, &end);
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    int ch;
    /* Values of a group number below 2^32: 32-bit division. */
    const size_t at = group_at (item, groups, per_group, hw, (unsigned) i,
        &ch);
    const float ga = gamma != NULL ? param_load (gamma_type, gamma, ch)
        : 1.0f;
    const float be = beta != NULL ? param_load (beta_type, beta, ch)
        : 0.0f;

    const float v = ((pp_cuda_load<A> (x, at) - moments[0]) - moments[1])
        * (moments[2] * ga) + be;

    pp_cuda_store<A> (y, at, silu ? pp_math_silu (v) : v);
  }
}

/* The first way, kept to measure the split against and to fall back on:
 * one block per (sample, group) item, both passes and the normalisation
 * in it. */
template <PpCudaType A> __global__ void
group_norm_whole_kernel (const void *x, int n, int c, size_t hw,
    int groups, float eps, const void *gamma, PpCudaType gamma_type,
    const void *beta, PpCudaType beta_type, bool silu, void *y)
{
  pp_cuda_wait_prior ();
  __shared__ float shared[32];
  const int per_group = c / groups;
  const size_t count = (size_t) per_group * hw;

  for (size_t item = blockIdx.x; item < (size_t) n * groups;
      item += gridDim.x) {
    const size_t g = item % groups, first = item * count;
    float hi, lo, rstd;

    norm_moments<A> (x, first, count, eps, shared, &hi, &lo, &rstd);
    for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
      const size_t ch = g * per_group + i / hw;
      const float ga = gamma != NULL ? param_load (gamma_type, gamma, ch)
          : 1.0f;
      const float be = beta != NULL ? param_load (beta_type, beta, ch)
          : 0.0f;

      const float v = ((pp_cuda_load<A> (x, first + i) - hi) - lo)
          * (rstd * ga) + be;

      pp_cuda_store<A> (y, first + i, silu ? pp_math_silu (v) : v);
    }
    /* The next item's first reduction reuses shared memory: the barrier at
     * the end of pp_cuda_block_sum covers it. */
  }
}

/* Channels last ([n, hw, c]), a group's values are a few channels of
 * every pixel, c apart: read group by group, a warp's loads would touch a
 * fresh sector every few values.  So a block takes a tile of consecutive
 * pixels whole (one run of memory) and each of its threads the same
 * channels of every pixel of it: the warps read consecutive channels.
 * Three kernels: each tile's statistics per group (its mean, then the
 * deviations from it, from the same bytes in cache), the tiles of each
 * (sample, group) item combined as the split kernels combine slices
 * (Chan's formula, the item's mean as hi + lo), and the normalisation,
 * tile by tile, each thread scaling its channels by their own factors. */

/* Tiles of a sample at most, and the fewest values a tile may have (the
 * default; PPDIFFUSE_CUDA_GROUP_NORM_TILE another): a UNet's 64×64×320
 * norm gets 512 tiles of 8 pixels, some 4 blocks an SM, each thread 8
 * loads a pass. */
#define NHWC_MAX_TILES 512
#define NHWC_MIN_TILE 2048
/* Threads of a tile's block at most, channels a thread takes at most (so
 * c ≤ 3072: SD's widest norm has 2560), groups at most.  The kernels
 * declare the most (__launch_bounds__): a block of 960 or 1024 threads
 * (c of 1920, 2048) leaves each thread 64 registers, and a kernel
 * compiled for more would not launch ("too many resources requested"). */
#define NHWC_MAX_THREADS 1024
#define NHWC_MAX_PER_THREAD 3
#define NHWC_MAX_C (NHWC_MAX_THREADS * NHWC_MAX_PER_THREAD)
#define NHWC_MAX_GROUPS 1024
/* Pixels a thread sums apart (its loads issued together) before the sum
 * joins the thread's total: a long tile's rounding then grows with 8 +
 * n / 8 terms, not n. */
#define NHWC_CHUNK 8

/* Channels each thread takes, and the block's threads (a multiple of 32:
 * the threads past c idle). */
static inline void
nhwc_geometry (int c, int *per_thread, unsigned *threads)
{
  *per_thread = (c + NHWC_MAX_THREADS - 1) / NHWC_MAX_THREADS;
  *threads = 32 * (unsigned) ((c + 32 * *per_thread - 1)
      / (32 * *per_thread));
}

/* Tile @t of @tiles over @hw pixels: [*begin, *end), never empty while
 * tiles ≤ hw. */
__device__ __forceinline__ void
nhwc_tile (size_t hw, int tiles, int t, size_t *begin, size_t *end)
{
  *begin = hw * (size_t) t / (size_t) tiles;
  *end = hw * (size_t) (t + 1) / (size_t) tiles;
}

/* Channel @ch of the NHWC_CHUNK pixels from @p on (of the image at @base
 * with @c channels), plus @sh, into @v, the last pixel before @end
 * standing in for those past it (the caller drops them): straight-line
 * code, whose loads issue together. */
template <PpCudaType A> __device__ __forceinline__ void
nhwc_load_chunk (const void *x, size_t base, int c, int ch, size_t p,
    size_t end, float sh, float *v)
{
  PP_CUDA_UNROLL
  for (int q = 0; q < NHWC_CHUNK; q++)
    v[q] = pp_cuda_load<A> (x, base + (p + q < end ? p + q : end - 1) * c
        + ch) + sh;
}

/* What channel @ch of @sample adds to its values: @shift [n, c], or 0
 * without one (x + 0.0f is x, bit for bit, for every x but -0, whose sum
 * +0 normalises the same). */
__device__ __forceinline__ float
nhwc_shift (const void *shift, PpCudaType shift_type, size_t sample, int c,
    int ch)
{
  return shift != NULL ? param_load (shift_type, shift, (int) (sample * c)
      + ch) : 0.0f;
}

template <PpCudaType A> __global__ void
__launch_bounds__ (NHWC_MAX_THREADS)
group_norm_nhwc_stats_kernel (const void *x, const void *shift,
    PpCudaType shift_type, int c, size_t hw, int groups, int per_thread,
    float4 *partials)
{
  pp_cuda_wait_prior ();
  /* Per channel: the tile's sum, then its deviations' sum (in sums) and
   * squares. */
  __shared__ float sums[NHWC_MAX_C], squares[NHWC_MAX_C];
  __shared__ float mean[NHWC_MAX_GROUPS];
  const int per_group = c / groups, tiles = gridDim.x;
  const size_t sample = blockIdx.y;
  size_t begin, end;
  float sum[NHWC_MAX_PER_THREAD], d_sum[NHWC_MAX_PER_THREAD],
      sq[NHWC_MAX_PER_THREAD];

  nhwc_tile (hw, tiles, blockIdx.x, &begin, &end);
  const size_t base = sample * hw * c;
  const float count = (float) per_group * (float) (end - begin);

  PP_CUDA_UNROLL
  for (int j = 0; j < NHWC_MAX_PER_THREAD; j++) {
    const int ch = threadIdx.x + j * blockDim.x;

    sum[j] = d_sum[j] = sq[j] = 0.0f;
    if (j < per_thread && ch < c) {
      const float sh = nhwc_shift (shift, shift_type, sample, c, ch);

      for (size_t p = begin; p < end; p += NHWC_CHUNK) {
        float v[NHWC_CHUNK], part = 0.0f;

        nhwc_load_chunk<A> (x, base, c, ch, p, end, sh, v);
        PP_CUDA_UNROLL
        for (int q = 0; q < NHWC_CHUNK; q++)
          part += p + q < end ? v[q] : 0.0f;
        sum[j] += part;
      }
    }
  }
  PP_CUDA_UNROLL
  for (int j = 0; j < NHWC_MAX_PER_THREAD; j++) {
    const int ch = threadIdx.x + j * blockDim.x;

    if (j < per_thread && ch < c)
      sums[ch] = sum[j];
  }
  __syncthreads ();
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    float s = 0.0f;

    for (int k = 0; k < per_group; k++)
      s += sums[g * per_group + k];
    mean[g] = s / count;
  }
  __syncthreads ();
  PP_CUDA_UNROLL
  for (int j = 0; j < NHWC_MAX_PER_THREAD; j++) {
    const int ch = threadIdx.x + j * blockDim.x;

    if (j < per_thread && ch < c) {
      const float m = mean[ch / per_group];
      const float sh = nhwc_shift (shift, shift_type, sample, c, ch);

      for (size_t p = begin; p < end; p += NHWC_CHUNK) {
        float v[NHWC_CHUNK], d_part = 0.0f, sq_part = 0.0f;

        nhwc_load_chunk<A> (x, base, c, ch, p, end, sh, v);
        PP_CUDA_UNROLL
        for (int q = 0; q < NHWC_CHUNK; q++) {
          const float d = p + q < end ? v[q] - m : 0.0f;

          d_part += d;
          sq_part += d * d;
        }
        d_sum[j] += d_part;
        sq[j] += sq_part;
      }
    }
  }
  /* Every thread has read sums' channel totals (the barrier after the
   * means): the deviations may take their place. */
  PP_CUDA_UNROLL
  for (int j = 0; j < NHWC_MAX_PER_THREAD; j++) {
    const int ch = threadIdx.x + j * blockDim.x;

    if (j < per_thread && ch < c) {
      sums[ch] = d_sum[j];
      squares[ch] = sq[j];
    }
  }
  __syncthreads ();
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    float ds = 0.0f, q = 0.0f, d_mean;

    for (int k = 0; k < per_group; k++) {
      ds += sums[g * per_group + k];
      q += squares[g * per_group + k];
    }
    d_mean = ds / count;
    /* Σ (d - d_mean)² = Σ d² - d_sum · d_mean. */
    partials[(sample * groups + g) * tiles + blockIdx.x] = make_float4
        (mean[g], d_mean, fmaxf (q - ds * d_mean, 0.0f), count);
  }
}

/* One warp per (sample, group) item: its tiles' statistics (mean hi and
 * lo, squared deviations, values: the stats kernel's float4s) combined
 * into the item's mean (hi, lo) and 1/√(var + eps), in @moments[item]. */
__global__ void
group_norm_nhwc_combine_kernel (const float4 *partials, int per_group,
    size_t hw, int tiles, size_t items, float eps, float4 *moments)
{
  pp_cuda_wait_prior ();
  const int lane = threadIdx.x;
  const float count = (float) per_group * (float) hw;

  for (size_t item = blockIdx.x; item < items; item += gridDim.x) {
    const float4 *st = partials + item * tiles;
    float hi = 0.0f, lo = 0.0f, m2 = 0.0f;

    /* The item's mean as a float, then each tile's mean as its offset
     * from it (exact for tiles near the mean), whose mean is what the
     * float leaves out, then the squares about it. */
    for (int t = lane; t < tiles; t += 32)
      hi += st[t].w * st[t].x;
    hi = pp_cuda_warp_sum (hi) / count;
    for (int t = lane; t < tiles; t += 32)
      lo += st[t].w * ((st[t].x - hi) + st[t].y);
    lo = pp_cuda_warp_sum (lo) / count;
    for (int t = lane; t < tiles; t += 32) {
      const float off = (st[t].x - hi) + st[t].y - lo;

      m2 += st[t].z + st[t].w * off * off;
    }
    m2 = pp_cuda_warp_sum (m2);
    if (lane == 0)
      moments[item] = make_float4 (hi, lo, rsqrtf (m2 / count + eps), 0.0f);
  }
}

template <PpCudaType A> __global__ void
__launch_bounds__ (NHWC_MAX_THREADS)
group_norm_nhwc_apply_kernel (const void *x, const void *shift,
    PpCudaType shift_type, int c, size_t hw, int groups, int per_thread,
    const float4 *moments, const void *gamma, PpCudaType gamma_type,
    const void *beta, PpCudaType beta_type, bool silu, void *y)
{
  pp_cuda_wait_prior ();
  const int per_group = c / groups;
  const size_t sample = blockIdx.y, base = sample * hw * c;
  size_t begin, end;

  nhwc_tile (hw, gridDim.x, blockIdx.x, &begin, &end);
  PP_CUDA_UNROLL
  for (int j = 0; j < NHWC_MAX_PER_THREAD; j++) {
    const int ch = threadIdx.x + j * blockDim.x;

    if (j < per_thread && ch < c) {
      const float4 mo = moments[sample * groups + ch / per_group];
      const float ga = gamma != NULL ? param_load (gamma_type, gamma, ch)
          : 1.0f;
      const float be = beta != NULL ? param_load (beta_type, beta, ch)
          : 0.0f;
      const float scale = mo.z * ga;
      const float sh = nhwc_shift (shift, shift_type, sample, c, ch);

      /* A chunk's values loaded before any is stored (y may be x, so a
       * load after a store could not be moved before it). */
      for (size_t p = begin; p < end; p += NHWC_CHUNK) {
        float v[NHWC_CHUNK];

        nhwc_load_chunk<A> (x, base, c, ch, p, end, sh, v);
        PP_CUDA_UNROLL
        for (int q = 0; q < NHWC_CHUNK; q++)
          if (p + q < end) {
            const float n = ((v[q] - mo.x) - mo.y) * scale + be;

            pp_cuda_store<A> (y, base + (p + q) * c + ch,
                silu ? pp_math_silu (n) : n);
          }
      }
    }
  }
}

/* The vector kernels (PP_CUDA_GROUP_NHWC_VECTOR): the same tiles and
 * partials, each thread taking eight adjacent channels of a pixel with one
 * 16-byte load or store (pp_cuda_load8: c a multiple of 8, x and y on 16
 * bytes) instead of one channel of every pixel with one of 2 bytes, and a
 * block taking @rows pixels of its tile at once (nhwc_vec_geometry), so
 * that a warp moves whole 512-byte lines.  The channels' sums go through
 * shared memory row by row, then channel by channel, then group by group,
 * each in a fixed order (the same bytes every run). */

/* A vector block's threads aim at this many (c / 8 of them a pixel). */
#define NHWC_VEC_THREADS 320

static inline void
nhwc_vec_geometry (int c, int *rows, unsigned *threads)
{
  const int octets = c / PP_CUDA_VEC;

  *rows = octets >= NHWC_VEC_THREADS ? 1 : NHWC_VEC_THREADS / octets;
  *threads = (unsigned) (octets * *rows);
}

/* The channels' partial sums of a vector block's rows ([rows, c] in
 * @cells, each thread having written its eight) added into row 0 by
 * halves (a tree of fixed shape: its rounding grows with log rows, where
 * row after row it grew with rows, 4× the tiles' error on values about
 * 1e4), the whole block taking each half's cells; then each group's
 * channels added into @out[g] (divided by @count when it is not 0).
 * Barriers before and after. */
__device__ __forceinline__ void
nhwc_vec_reduce (float *cells, int c, int rows, int groups, float count,
    float *out)
{
  const int per_group = c / groups;

  __syncthreads ();
  for (int width = rows; width > 1;) {
    const int half = (width + 1) / 2;

    for (int i = threadIdx.x; i < (width - half) * c; i += blockDim.x)
      cells[i] += cells[i + half * c];
    width = half;
    __syncthreads ();
  }
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    float t = 0.0f;

    for (int k = 0; k < per_group; k++)
      t += cells[g * per_group + k];
    out[g] = count != 0.0f ? t / count : t;
  }
  __syncthreads ();
}

template <PpCudaType A> __global__ void
group_norm_vec_stats_kernel (const void *x, const void *shift,
    PpCudaType shift_type, int c, size_t hw, int groups, int rows,
    float4 *partials)
{
  pp_cuda_wait_prior ();
  /* rows · c ≤ NHWC_MAX_C: c / 8 · rows threads, at most
   * max (NHWC_VEC_THREADS, c / 8), and c ≤ NHWC_MAX_C. */
  __shared__ float cells[NHWC_MAX_C], mean[NHWC_MAX_GROUPS],
      d_sums[NHWC_MAX_GROUPS], squares[NHWC_MAX_GROUPS];
  const int octets = c / PP_CUDA_VEC, per_group = c / groups;
  const int r = (int) threadIdx.x / octets;
  const int ch0 = ((int) threadIdx.x % octets) * PP_CUDA_VEC;
  const int tiles = gridDim.x;
  const size_t sample = blockIdx.y, base = sample * hw * c;
  float sh[PP_CUDA_VEC], s[PP_CUDA_VEC], d_s[PP_CUDA_VEC], q_s[PP_CUDA_VEC];
  size_t begin, end;

  nhwc_tile (hw, tiles, blockIdx.x, &begin, &end);
  const float count = (float) per_group * (float) (end - begin);

  PP_CUDA_UNROLL
  for (int q = 0; q < PP_CUDA_VEC; q++) {
    sh[q] = nhwc_shift (shift, shift_type, sample, c, ch0 + q);
    s[q] = d_s[q] = q_s[q] = 0.0f;
  }
  for (size_t p = begin + r; p < end; p += rows) {
    float v[PP_CUDA_VEC];

    pp_cuda_load8<A> (x, base + p * c + ch0, v);
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++)
      s[q] += v[q] + sh[q];
  }
  PP_CUDA_UNROLL
  for (int q = 0; q < PP_CUDA_VEC; q++)
    cells[r * c + ch0 + q] = s[q];
  nhwc_vec_reduce (cells, c, rows, groups, count, mean);
  /* The deviations from the tile's group means: the same bytes again,
   * from the cache. */
  for (size_t p = begin + r; p < end; p += rows) {
    float v[PP_CUDA_VEC];

    pp_cuda_load8<A> (x, base + p * c + ch0, v);
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++) {
      const float d = v[q] + sh[q] - mean[(ch0 + q) / per_group];

      d_s[q] += d;
      q_s[q] += d * d;
    }
  }
  PP_CUDA_UNROLL
  for (int q = 0; q < PP_CUDA_VEC; q++)
    cells[r * c + ch0 + q] = d_s[q];
  nhwc_vec_reduce (cells, c, rows, groups, 0.0f, d_sums);
  PP_CUDA_UNROLL
  for (int q = 0; q < PP_CUDA_VEC; q++)
    cells[r * c + ch0 + q] = q_s[q];
  nhwc_vec_reduce (cells, c, rows, groups, 0.0f, squares);
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    const float d_mean = d_sums[g] / count;

    /* Σ (d - d_mean)² = Σ d² - d_sum · d_mean, as the tiles' kernel. */
    partials[(sample * groups + g) * tiles + blockIdx.x] = make_float4
        (mean[g], d_mean, fmaxf (squares[g] - d_sums[g] * d_mean, 0.0f),
        count);
  }
}

template <PpCudaType A> __global__ void
group_norm_vec_apply_kernel (const void *x, const void *shift,
    PpCudaType shift_type, int c, size_t hw, int groups, int rows,
    const float4 *moments, const void *gamma, PpCudaType gamma_type,
    const void *beta, PpCudaType beta_type, bool silu, void *y)
{
  pp_cuda_wait_prior ();
  const int octets = c / PP_CUDA_VEC, per_group = c / groups;
  const int r = (int) threadIdx.x / octets;
  const int ch0 = ((int) threadIdx.x % octets) * PP_CUDA_VEC;
  const size_t sample = blockIdx.y, base = sample * hw * c;
  float hi[PP_CUDA_VEC], lo[PP_CUDA_VEC], scale[PP_CUDA_VEC],
      be[PP_CUDA_VEC], sh[PP_CUDA_VEC];
  size_t begin, end;

  nhwc_tile (hw, gridDim.x, blockIdx.x, &begin, &end);
  PP_CUDA_UNROLL
  for (int q = 0; q < PP_CUDA_VEC; q++) {
    const int ch = ch0 + q;
    const float4 mo = moments[sample * groups + ch / per_group];
    const float ga = gamma != NULL ? param_load (gamma_type, gamma, ch)
        : 1.0f;

    hi[q] = mo.x;
    lo[q] = mo.y;
    scale[q] = mo.z * ga;
    be[q] = beta != NULL ? param_load (beta_type, beta, ch) : 0.0f;
    sh[q] = nhwc_shift (shift, shift_type, sample, c, ch);
  }
  for (size_t p = begin + r; p < end; p += rows) {
    float v[PP_CUDA_VEC];

    pp_cuda_load8<A> (x, base + p * c + ch0, v);
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++) {
      const float n = ((v[q] + sh[q] - hi[q]) - lo[q]) * scale[q] + be[q];

      v[q] = silu ? pp_math_silu (n) : n;
    }
    pp_cuda_store8<A> (y, base + p * c + ch0, v);
  }
}

/* Rows of @width values (a multiple of 8) a block of a thread per eight
 * values takes at once: as many as @aim threads hold, at least one and at
 * most @most; and its threads, rounded up to whole warps (the threads
 * past rows · width / 8 idle).  The ticket and grid group norms' pixels,
 * the octet layer norm's rows. */
static inline void
octets_geometry (int width, int aim, int most, int *rows, unsigned *threads)
{
  const int octets = width / PP_CUDA_VEC;
  const int r = aim / octets;

  *rows = r < 1 ? 1 : r > most ? most : r;
  *threads = (unsigned) ((octets * *rows + 31) / 32 * 32);
}

/* The sum of @v over the @lanes adjacent lanes (a power of 2 up to 32) of
 * its group of lanes, in every one of them (the same bits: each step adds
 * the same two values in each lane). */
__device__ __forceinline__ float
lanes_sum (float v, int lanes)
{
  for (int o = lanes / 2; o > 0; o /= 2)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
}

/* Group @g's sum of @cells ([rows, c], a block's channel sums of each
 * row): @lanes adjacent lanes (a power of 2 up to 32) take every
 * lanes-th of its rows · per_group cells from @lane on, then lanes_sum (a
 * fixed order: the same bytes every run).  0 for a @g past @groups, whose
 * lanes still take part in the sum.  No barrier. */
__device__ __forceinline__ float
group_cells_sum (const float *cells, int c, int rows, int groups, int g,
    int lane, int lanes)
{
  const int per_group = c / groups, n = rows * per_group;
  float t = 0.0f;

  for (int i = lane; g < groups && i < n; i += lanes)
    t += cells[i / per_group * c + g * per_group + i % per_group];
  return lanes_sum (t, lanes);
}

/* Each group's @cells added by a warp into @out[g] (divided by @count
 * when it is not 0).  No barrier.  The octet layer norm's rows (one row
 * of c cells, a group a row). */
__device__ __forceinline__ void
warp_group_sums (const float *cells, int c, int rows, int groups,
    float count, float *out)
{
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;

  for (int g = warp; g < groups; g += warps) {
    const float t = group_cells_sum (cells, c, rows, groups, g, lane, 32);

    if (lane == 0)
      out[g] = count != 0.0f ? t / count : t;
  }
}

/* @N pixels' channels [ch0, ch0 + 8) from pixel @p on, @rows apart, into
 * @v as stored (a pixel past @end reads pixel @p again, dropped by the
 * caller): straight-line code, whose loads issue together.  The ticket
 * and grid kernels' loads. */
template <PpCudaType A, int N> __device__ __forceinline__ void
octets_load_chunk (const void *x, size_t base, int c, int ch0, size_t p,
    int rows, size_t end, PpCudaRaw8<A> v[N])
{
  PP_CUDA_UNROLL
  for (int u = 0; u < N; u++) {
    const size_t pu = p + (size_t) u * rows;

    v[u] = pp_cuda_raw8<A> (x, base + (pu < end ? pu : p) * c + ch0);
  }
}

/* The normalising pass of the ticket and grid kernels: the thread's
 * pixels from @first to @end, @rows apart, @N a load (the first @N
 * already in @raw), each channel's value v as (v - @ref) · @scale +
 * @offset, SiLU'd with @silu, stored in @y.  Each thread loads its own
 * pixels' values before it stores them (y may be x), and no other thread
 * reads them. */
template <PpCudaType A, int N> __device__ __forceinline__ void
octets_normalise (const void *x, void *y, size_t base, int c, int ch0,
    size_t first, int rows, size_t end, PpCudaRaw8<A> raw[N],
    const float *ref, const float *scale, const float *offset, bool silu)
{
  for (size_t p = first; p < end; p += (size_t) N * rows) {
    if (p != first)
      octets_load_chunk<A, N> (x, base, c, ch0, p, rows, end, raw);
    PP_CUDA_UNROLL
    for (int u = 0; u < N; u++) {
      const size_t pu = p + (size_t) u * rows;

      if (pu < end) {
        float v[PP_CUDA_VEC];

        pp_cuda_widen8<A> (raw[u], v);
        PP_CUDA_UNROLL
        for (int k = 0; k < PP_CUDA_VEC; k++) {
          const float n = (v[k] - ref[k]) * scale[k] + offset[k];

          v[k] = silu ? pp_math_silu (n) : n;
        }
        pp_cuda_store8<A> (y, base + pu * c + ch0, v);
      }
    }
  }
}

/* The thread's pixels from @first to @end, @rows apart, @N loads at a
 * time: @take (v) for each one's eight channels as floats.  The ticket and
 * grid kernels' statistics. */
template <PpCudaType A, int N, typename F> __device__ __forceinline__ void
octets_each_pixel (const void *x, size_t base, int c, int ch0, size_t first,
    int rows, size_t end, F take)
{
  for (size_t p = first; p < end; p += (size_t) N * rows) {
    PpCudaRaw8<A> raw[N];

    octets_load_chunk<A, N> (x, base, c, ch0, p, rows, end, raw);
    PP_CUDA_UNROLL
    for (int u = 0; u < N; u++)
      if (p + (size_t) u * rows < end) {
        float v[PP_CUDA_VEC];

        pp_cuda_widen8<A> (raw[u], v);
        take (v);
      }
  }
}

/* Row @r's cells of @sums and @squares ([rows, c], the thread's eight
 * channels from @ch0): the sums over the thread's pixels (as
 * octets_each_pixel walks them) of each value's deviation from @ref[k]
 * for channel ch0 + k, and of its square.  The ticket and grid kernels'
 * statistics. */
template <PpCudaType A, int N> __device__ __forceinline__ void
octets_deviation_cells (const void *x, size_t base, int c, int ch0, int r,
    size_t first, int rows, size_t end, const float *ref, float *sums,
    float *squares)
{
  float s[PP_CUDA_VEC], q[PP_CUDA_VEC];

  PP_CUDA_UNROLL
  for (int k = 0; k < PP_CUDA_VEC; k++)
    s[k] = q[k] = 0.0f;
  octets_each_pixel<A, N> (x, base, c, ch0, first, rows, end,
      [&] (const float *v) {
        PP_CUDA_UNROLL
        for (int k = 0; k < PP_CUDA_VEC; k++) {
          const float d = v[k] - ref[k];

          s[k] += d;
          q[k] += d * d;
        }
      });
  PP_CUDA_UNROLL
  for (int k = 0; k < PP_CUDA_VEC; k++) {
    sums[r * c + ch0 + k] = s[k];
    squares[r * c + ch0 + k] = q[k];
  }
}

/* The ticket kernels (PP_CUDA_GROUP_NHWC_TICKET): eight channels a thread
 * as the vector kernels, in two launches, each read of x once.  On an
 * H200 the vector way's statistics kernel ran at a third of its issue
 * rate: every tile of a few pixels paid two passes and three reductions
 * through shared memory, and a launch of its own for the combine.  Here
 * each thread sums, in one pass, its values' deviations from a value of
 * their group (the group's first channel at the sample's first pixel:
 * near the data, so that the square's sum loses nothing to a large common
 * offset) and their squares; the block's threads add every group's cells
 * at once, a few lanes a group; the tile's two sums go to its partials,
 * and the last tile of a sample to be done (each takes a ticket, an
 * atomic count per sample) adds every tile's the same way, each lane in
 * the tiles' order (the same bytes every run, whatever order the blocks
 * ran in), writes the sample's moments and sets the count back to 0 (a
 * last tile that walked the groups a warp each, a round of loads a group,
 * took 10 µs a launch on an H200 however small the norm).  The apply
 * kernel has nothing to combine: a thread's scales and offsets
 * from the moments, its pixels' loads issued together, each value one
 * multiply-add.  A thread takes up to TICKET_CHUNK pixels a load, a block
 * about TICKET_THREADS threads.  The statistics' tiles are a chunk of
 * pixels a thread, at most TICKET_MAX_TILES, since the last tile reads
 * them all (with tiles of a pixel a thread and the last tile's loads four
 * at a time, a step's group norms took 0.970 ms on an H200; so, 0.885);
 * the normalising tiles spread a norm over the SMs, a pixel a thread
 * where that fills them. */
#define TICKET_THREADS 256
#define TICKET_CHUNK 4
/* A sample's statistics tiles at most: what the last one reads. */
#define TICKET_MAX_TILES 128
/* The normalising blocks a launch aims at at least (two an SM of an
 * H200's 132), before a thread takes more than a pixel. */
#define TICKET_TARGET_BLOCKS 264
/* The apply kernel's tiles at most (a grid's x reaches 2³¹ - 1). */
#define TICKET_MAX_APPLY_TILES ((size_t) 1 << 30)
/* A block's threads at most: c / 8 of NHWC_MAX_C, whole warps. */
#define TICKET_MAX_BLOCK 384
/* The statistics block's cells: eight a thread (its rows of c). */
#define TICKET_CELLS (NHWC_MAX_C > TICKET_THREADS * PP_CUDA_VEC \
    ? NHWC_MAX_C : TICKET_THREADS * PP_CUDA_VEC)
static_assert (TICKET_MAX_BLOCK * PP_CUDA_VEC >= NHWC_MAX_C,
    "a ticket block could not take a pixel's channels");

/* The value of group @g the deviations are taken from: its first
 * channel at the sample's first pixel, plus that channel's shift. */
template <PpCudaType A> __device__ __forceinline__ float
ticket_reference (const void *x, const void *shift, PpCudaType shift_type,
    size_t sample, size_t base, int c, int per_group, int g)
{
  const int ch = g * per_group;

  return pp_cuda_load<A> (x, base + ch) + nhwc_shift (shift, shift_type,
      sample, c, ch);
}

/* Lanes that take one group's sums at once in the block, the rest of the
 * block the other groups': the most of 32, 16, …, 1 whose groups the
 * block's threads hold all at once. */
__device__ __forceinline__ int
ticket_lanes (int groups)
{
  int lanes = 32;

  while (lanes > 1 && lanes * groups > (int) blockDim.x)
    lanes /= 2;
  return lanes;
}

/* A tile's pass of the ticket and grid kernels (blockIdx.x the tile of
 * @tiles, blockIdx.y the sample): @ref, each of the thread's channels'
 * reference value less its shift, then each group's sums of its values'
 * deviations from the reference and of their squares over the tile's
 * pixels into @partials [(sample · groups + g) · tiles + tile], in memory
 * before the barrier it ends with. */
template <PpCudaType A> __device__ __forceinline__ void
ticket_tile_sums (const void *x, const void *shift, PpCudaType shift_type,
    int c, size_t hw, int groups, int rows, int tiles, float *sums,
    float *squares, float2 *partials, float ref[PP_CUDA_VEC])
{
  const int octets = c / PP_CUDA_VEC, per_group = c / groups;
  const int r = (int) threadIdx.x / octets;
  const int ch0 = ((int) threadIdx.x % octets) * PP_CUDA_VEC;
  const bool active = r < rows;
  const size_t sample = blockIdx.y, base = sample * hw * c;
  /* Each group's cells: a lane of @lanes a share, the block's threads all
   * the groups at once (rounds of them past its reach). */
  const int lanes = ticket_lanes (groups);
  const int lane = threadIdx.x % lanes, per_round = blockDim.x / lanes;
  size_t begin, end;

  nhwc_tile (hw, tiles, blockIdx.x, &begin, &end);
  /* v + shift - reference as v - (reference - shift). */
  PP_CUDA_UNROLL
  for (int k = 0; k < PP_CUDA_VEC; k++) {
    const int ch = active ? ch0 + k : 0;

    ref[k] = ticket_reference<A> (x, shift, shift_type, sample, base, c,
        per_group, ch / per_group) - nhwc_shift (shift, shift_type, sample,
        c, ch);
  }
  if (active)
    octets_deviation_cells<A, TICKET_CHUNK> (x, base, c, ch0, r, begin + r,
        rows, end, ref, sums, squares);
  __syncthreads ();
  /* The tile's two sums of each group: its rows' cells of the group's
   * channels, a lane every lanes-th, then the lanes together. */
  for (int g0 = 0; g0 < groups; g0 += per_round) {
    const int g = g0 + (int) threadIdx.x / lanes;
    const float gs = group_cells_sum (sums, c, rows, groups, g, lane, lanes);
    const float gq = group_cells_sum (squares, c, rows, groups, g, lane,
        lanes);

    if (g < groups && lane == 0) {
      partials[(sample * groups + g) * tiles + blockIdx.x] = make_float2
          (gs, gq);
      /* In memory before the ticket says so. */
      __threadfence ();
    }
  }
  __syncthreads ();
}

/* Group @g's mean deviation (its deviations' mean) and 1/√(var + eps)
 * from its @tiles tiles' sums at @st (every tile's in memory), @lanes
 * adjacent lanes (the calling thread's @lane) each adding every lanes-th
 * tile in the tiles' order, then together: the same bits in each of them,
 * and in every block that makes them.  A @g past @groups reads nothing,
 * and its lanes still take part. */
__device__ __forceinline__ float2
ticket_moments (const float2 *st, int tiles, int groups, int g, int lane,
    int lanes, float count, float eps)
{
  float gs = 0.0f, gq = 0.0f;

  PP_CUDA_UNROLL_8
  for (int k = lane; g < groups && k < tiles; k += lanes) {
    const float2 t = __ldcg (st + k);

    gs += t.x;
    gq += t.y;
  }
  gs = lanes_sum (gs, lanes) / count;
  gq = lanes_sum (gq, lanes) / count;
  return make_float2 (gs, rsqrtf (fmaxf (gq - gs * gs, 0.0f) + eps));
}

/* Channel @ch's scale and offset from its group's mean deviation and
 * 1/√(var + eps): ((v + shift - reference) - mean) · rstd · gamma + beta
 * as (v - (reference - shift)) · scale + (beta - mean · scale), the mean
 * the deviations' (a small number). */
__device__ __forceinline__ void
ticket_affine (float mean, float rstd, int ch, const void *gamma,
    PpCudaType gamma_type, const void *beta, PpCudaType beta_type,
    float *scale, float *offset)
{
  const float ga = gamma != NULL ? param_load (gamma_type, gamma, ch) : 1.0f;
  const float be = beta != NULL ? param_load (beta_type, beta, ch) : 0.0f;

  *scale = rstd * ga;
  *offset = be - mean * *scale;
}

template <PpCudaType A> __global__ void __launch_bounds__ (TICKET_MAX_BLOCK)
group_norm_ticket_stats_kernel (const void *x, const void *shift,
    PpCudaType shift_type, int c, size_t hw, int groups, int rows,
    float eps, float2 *partials, unsigned *tickets, int ticket_stride,
    float4 *moments)
{
  pp_cuda_wait_prior ();
  __shared__ float sums[TICKET_CELLS], squares[TICKET_CELLS];
  __shared__ bool last;
  const int per_group = c / groups;
  const int tiles = gridDim.x;
  const size_t sample = blockIdx.y, base = sample * hw * c;
  const int lanes = ticket_lanes (groups);
  const int lane = threadIdx.x % lanes, per_round = blockDim.x / lanes;
  float ref[PP_CUDA_VEC];

  ticket_tile_sums<A> (x, shift, shift_type, c, hw, groups, rows, tiles,
      sums, squares, partials, ref);
  if (threadIdx.x == 0)
    last = atomicAdd (&tickets[sample * ticket_stride], 1u)
        == (unsigned) tiles - 1;
  __syncthreads ();
  if (!last)
    return;
  /* The last tile: every tile's sums, in the tiles' order a lane. */
  __threadfence ();
  const float count = (float) per_group * (float) hw;

  for (int g0 = 0; g0 < groups; g0 += per_round) {
    const int g = g0 + (int) threadIdx.x / lanes;
    const float reference = g < groups && lane == 0 ? ticket_reference<A>
        (x, shift, shift_type, sample, base, c, per_group, g) : 0.0f;
    const float2 mo = ticket_moments (partials + (sample * groups
            + (g < groups ? g : 0)) * tiles, tiles, groups, g, lane, lanes,
        count, eps);

    if (g < groups && lane == 0)
      moments[sample * groups + g] = make_float4 (reference, mo.x, mo.y,
          0.0f);
  }
  if (threadIdx.x == 0)
    tickets[sample * ticket_stride] = 0;
}

template <PpCudaType A> __global__ void __launch_bounds__ (TICKET_MAX_BLOCK)
group_norm_ticket_apply_kernel (const void *x, const void *shift,
    PpCudaType shift_type, int c, size_t hw, int groups, int rows,
    const float4 *moments, const void *gamma, PpCudaType gamma_type,
    const void *beta, PpCudaType beta_type, bool silu, void *y)
{
  pp_cuda_wait_prior ();
  const int octets = c / PP_CUDA_VEC, per_group = c / groups;
  const int r = (int) threadIdx.x / octets;
  const int ch0 = ((int) threadIdx.x % octets) * PP_CUDA_VEC;
  const bool active = r < rows;
  const size_t sample = blockIdx.y, base = sample * hw * c;
  PpCudaRaw8<A> raw[TICKET_CHUNK];
  float ref[PP_CUDA_VEC], scale[PP_CUDA_VEC], offset[PP_CUDA_VEC];
  size_t begin, end;

  nhwc_tile (hw, gridDim.x, blockIdx.x, &begin, &end);
  const size_t first = begin + r;

  /* The first pixels on their way while the scales are made. */
  if (active && first < end)
    octets_load_chunk<A, TICKET_CHUNK> (x, base, c, ch0, first, rows, end, raw);
  PP_CUDA_UNROLL
  for (int k = 0; k < PP_CUDA_VEC; k++) {
    const int ch = active ? ch0 + k : 0;
    const float4 mo = moments[sample * groups + ch / per_group];

    ticket_affine (mo.y, mo.z, ch, gamma, gamma_type, beta, beta_type,
        &scale[k], &offset[k]);
    ref[k] = mo.x - nhwc_shift (shift, shift_type, sample, c, ch);
  }
  if (active)
    octets_normalise<A, TICKET_CHUNK> (x, y, base, c, ch0, first, rows, end,
        raw, ref, scale, offset, silu);
}

/* The grid kernel (PP_CUDA_GROUP_NHWC_GRID): the ticket kernels in one
 * cooperative launch, whose blocks are resident at once.  Each tile sums
 * its pixels as the ticket statistics do, then the sample's tiles meet
 * (pp_cuda_blocks_meet: an atomic count a sample, and a generation the
 * last to arrive moves on); each then makes every group's moments from
 * the tiles' sums itself, in the tiles' order as the last ticket tile
 * does (the same bits in every block), and normalises its own pixels,
 * read again (from the cache).  One launch where the ticket way takes
 * two, and no moments through memory: a launch's latency was most of a
 * small norm's time on an H200.  The tiles are the ticket statistics',
 * at most the blocks the device holds at once shared among the samples
 * (so the same sums, and the same bytes, where those hold them all); a
 * launch whose samples could not have a tile each resident, or on a
 * device that takes no cooperative launch, takes the ticket kernels. */
template <PpCudaType A> __global__ void __launch_bounds__ (TICKET_MAX_BLOCK)
group_norm_grid_kernel (const void *x, const void *shift,
    PpCudaType shift_type, int c, size_t hw, int groups, int rows,
    float eps, const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, bool silu, float2 *partials, unsigned *counts,
    void *y)
{
  pp_cuda_wait_prior ();
  __shared__ float sums[TICKET_CELLS], squares[TICKET_CELLS];
  __shared__ float2 moments[NHWC_MAX_GROUPS];
  const int octets = c / PP_CUDA_VEC, per_group = c / groups;
  const int r = (int) threadIdx.x / octets;
  const int ch0 = ((int) threadIdx.x % octets) * PP_CUDA_VEC;
  const bool active = r < rows;
  const int tiles = gridDim.x;
  const size_t sample = blockIdx.y, base = sample * hw * c;
  const int lanes = ticket_lanes (groups);
  const int lane = threadIdx.x % lanes, per_round = blockDim.x / lanes;
  const float count = (float) per_group * (float) hw;
  PpCudaRaw8<A> raw[TICKET_CHUNK];
  float ref[PP_CUDA_VEC], scale[PP_CUDA_VEC], offset[PP_CUDA_VEC];
  size_t begin, end;

  ticket_tile_sums<A> (x, shift, shift_type, c, hw, groups, rows, tiles,
      sums, squares, partials, ref);
  if (threadIdx.x == 0)
    pp_cuda_blocks_meet (&counts[2 * sample], &counts[2 * sample + 1],
        (unsigned) tiles);
  __syncthreads ();
  nhwc_tile (hw, tiles, blockIdx.x, &begin, &end);
  const size_t first = begin + r;

  /* The first pixels on their way while the moments are made (the
   * thread's own: no other block writes them). */
  if (active && first < end)
    octets_load_chunk<A, TICKET_CHUNK> (x, base, c, ch0, first, rows, end, raw);
  for (int g0 = 0; g0 < groups; g0 += per_round) {
    const int g = g0 + (int) threadIdx.x / lanes;
    const float2 mo = ticket_moments (partials + (sample * groups
            + (g < groups ? g : 0)) * tiles, tiles, groups, g, lane, lanes,
        count, eps);

    if (g < groups && lane == 0)
      moments[g] = mo;
  }
  __syncthreads ();
  PP_CUDA_UNROLL
  for (int k = 0; k < PP_CUDA_VEC; k++) {
    const int ch = active ? ch0 + k : 0;
    const float2 mo = moments[ch / per_group];

    ticket_affine (mo.x, mo.y, ch, gamma, gamma_type, beta, beta_type,
        &scale[k], &offset[k]);
  }
  if (active)
    octets_normalise<A, TICKET_CHUNK> (x, y, base, c, ch0, first, rows, end,
        raw, ref, scale, offset, silu);
}

/* Threads of a slice's block. */
#define GROUP_THREADS 256
/* Blocks a launch aims at (several per SM of the largest GPUs), and the
 * fewest values a slice may have. */
#define GROUP_TARGET_BLOCKS 1024
#define GROUP_MIN_SLICE 2048
/* With at most count / GROUP_MIN_SLICE slices (rounded up), each of
 * ceil (count / splits) values, none is empty while GROUP_MIN_SLICE >=
 * splits: the stats kernel never sees an empty slice. */
static_assert (GROUP_MIN_SLICE >= PP_CUDA_GROUP_MAX_SPLITS,
    "a group norm slice could be empty");
/* A slice's or a tile's partials are one float4: hi, lo, m2 and (a
 * tile's) its values' count. */
static_assert (sizeof (float4) == PP_CUDA_GROUP_STATS * sizeof (float),
    "PP_CUDA_GROUP_STATS is not a float4's floats");

/* @count within [1, @most]. */
static inline size_t
clamp_count (size_t count, size_t most)
{
  return count < 1 ? 1 : count > most ? most : count;
}

extern "C" int
pp_cuda_group_norm_splits (int n, int c, size_t hw, int groups)
{
  const size_t items = (size_t) n * groups;
  const size_t count = (size_t) (c / groups) * hw;
  size_t splits;
  const size_t by_size = (count + GROUP_MIN_SLICE - 1) / GROUP_MIN_SLICE;

  if (items == 0 || count == 0)
    return 1;
  /* A grid row per group, a 32-bit index within one. */
  if (items > PP_CUDA_MAX_GRID_YZ || count >= ((size_t) 1 << 32))
    return 0;
  splits = (GROUP_TARGET_BLOCKS + items - 1) / items;
  return (int) clamp_count (splits < by_size ? splits : by_size,
      PP_CUDA_GROUP_MAX_SPLITS);
}

/* Values a channels-last tile takes at least: NHWC_MIN_TILE, or the
 * backend's PPDIFFUSE_CUDA_GROUP_NORM_TILE (pp_cuda_set_group_norm_tile). */
static size_t nhwc_tile_values = NHWC_MIN_TILE;

extern "C" void
pp_cuda_set_group_norm_tile (int values)
{
  nhwc_tile_values = values > 0 ? (size_t) values : NHWC_MIN_TILE;
}

extern "C" int
pp_cuda_group_norm_tiles (int n, int c, size_t hw, int groups)
{
  size_t tiles = (size_t) c * hw / nhwc_tile_values;

  if (n <= 0 || c <= 0 || hw == 0 || groups <= 0 || c % groups != 0)
    return 0;
  if (n > PP_CUDA_MAX_GRID_YZ || c > NHWC_MAX_C || groups > NHWC_MAX_GROUPS)
    return 0;
  return (int) clamp_count (tiles < hw ? tiles : hw, NHWC_MAX_TILES);
}

/* Tiles of @hw pixels for ticket blocks of @rows pixel rows, @pixels a
 * thread, at most @most. */
static int
ticket_tiles (size_t hw, int rows, size_t pixels, size_t most)
{
  const size_t per_tile = (size_t) rows * pixels;

  return (int) clamp_count ((hw + per_tile - 1) / per_tile, most);
}

/* The normalising tiles: a pixel a thread, up to a chunk of them where
 * the launch still has TICKET_TARGET_BLOCKS blocks. */
static int
ticket_apply_tiles (int n, size_t hw, int rows)
{
  const size_t pixels = hw / ((size_t) rows * ((TICKET_TARGET_BLOCKS
              + n - 1) / n));

  return ticket_tiles (hw, rows, clamp_count (pixels, TICKET_CHUNK),
      TICKET_MAX_APPLY_TILES);
}

extern "C" int
pp_cuda_group_norm_ticket_tiles (int n, int c, size_t hw, int groups)
{
  int rows;
  unsigned threads;

  /* Eight channels a thread, or the split way's kernels. */
  if (pp_cuda_group_norm_tiles (n, c, hw, groups) == 0
      || c % PP_CUDA_VEC != 0)
    return 0;
  octets_geometry (c, TICKET_THREADS, INT_MAX, &rows, &threads);
  return ticket_tiles (hw, rows, TICKET_CHUNK, TICKET_MAX_TILES);
}

extern "C" size_t
pp_cuda_group_norm_partials (int n, int c, size_t hw, int groups, int nhwc)
{
  const size_t items = (size_t) n * groups;

  if (nhwc) {
    const int tiles = pp_cuda_group_norm_tiles (n, c, hw, groups);
    const size_t ticket = 1 + (pp_cuda_group_norm_ticket_tiles (n, c, hw,
            groups) + 1) / 2;
    /* The tiles' statistics, then the items' moments; or the ticket
     * kernels' moments, then their tiles' two sums (float4s: two tiles' a
     * float4). */
    const size_t most = (size_t) tiles + 1 > ticket ? (size_t) tiles + 1
        : ticket;

    return tiles == 0 ? 0 : PP_CUDA_GROUP_STATS * items * most;
  }
  return PP_CUDA_GROUP_STATS * items * pp_cuda_group_norm_splits (n, c, hw,
      groups);
}

/* The grid kernel's tiles of a sample for blocks of @threads threads of
 * @kernel: the ticket statistics', at most the device's resident blocks
 * shared among the @n samples; 0 where a sample would not have one. */
template <typename K> static int
grid_tiles (K kernel, int n, int c, size_t hw, int groups, unsigned threads)
{
  const int ticket = pp_cuda_group_norm_ticket_tiles (n, c, hw, groups);
  const int each = pp_cuda_resident_blocks (kernel, threads) / n;

  return each < ticket ? each : ticket;
}

extern "C" int
pp_cuda_group_norm_grid_tiles (PpCudaType type, int n, int c, size_t hw,
    int groups)
{
  int rows, tiles;
  unsigned threads;

  if (pp_cuda_group_norm_ticket_tiles (n, c, hw, groups) == 0)
    return 0;
  octets_geometry (c, TICKET_THREADS, INT_MAX, &rows, &threads);
  PP_CUDA_DISPATCH_TYPE (type, A, tiles = grid_tiles
      (group_norm_grid_kernel<A>, n, c, hw, groups, threads));
  return tiles;
}

/* The channels-last kernels of pp_cuda_group_norm. */
static cudaError_t
group_norm_nhwc (const void *x, const void *shift, PpCudaType shift_type,
    PpCudaType type, int n, int c, size_t hw, int groups, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, int silu, int way, float *partials,
    unsigned *tickets, void *y, cudaStream_t stream)
{
  const int tiles = pp_cuda_group_norm_tiles (n, c, hw, groups);
  const size_t items = (size_t) n * groups;
  float4 *stats = (float4 *) partials, *moments = stats + items * tiles;
  const dim3 grid (tiles, n);
  const bool octets = c % PP_CUDA_VEC == 0 && pp_cuda_vec_aligned (x)
      && pp_cuda_vec_aligned (y);
  const bool vector = way == PP_CUDA_GROUP_NHWC_VECTOR && octets;
  int per_thread = 0, rows = 0;
  unsigned threads;

  if (tiles == 0 || partials == NULL)
    return cudaErrorInvalidValue;
  if ((way == PP_CUDA_GROUP_NHWC_TICKET || way == PP_CUDA_GROUP_NHWC_GRID)
      && octets && tickets == NULL)
    return cudaErrorInvalidValue;
  /* The ticket kernels' counts, one a sample; under the grid way the
   * first of each sample's pair (the grid kernel's count, then its
   * generation). */
  int ticket_stride = 1;

  if (way == PP_CUDA_GROUP_NHWC_GRID && octets) {
    int grid;

    octets_geometry (c, TICKET_THREADS, INT_MAX, &rows, &threads);
    PP_CUDA_DISPATCH_TYPE (type, A, grid = grid_tiles
        (group_norm_grid_kernel<A>, n, c, hw, groups, threads));
    if (grid > 0) {
      PP_CUDA_DISPATCH_TYPE (type, A,
          PP_CUDA_LAUNCH_TOGETHER (group_norm_grid_kernel<A>, dim3 (grid, n),
              threads, 0, stream, x, shift, shift_type, c, hw, groups, rows,
              eps, gamma, gamma_type, beta, beta_type, silu != 0,
              (float2 *) (stats + items), tickets, y));
      return cudaGetLastError ();
    }
    way = PP_CUDA_GROUP_NHWC_TICKET;
    ticket_stride = 2;
  }
  if (way == PP_CUDA_GROUP_NHWC_TICKET && octets) {
    const int ticket = pp_cuda_group_norm_ticket_tiles (n, c, hw, groups);

    octets_geometry (c, TICKET_THREADS, INT_MAX, &rows, &threads);
    /* The moments first, on 16 bytes; the tiles' sums after them. */
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (group_norm_ticket_stats_kernel<A>, dim3 (ticket, n),
            threads, 0, stream, x, shift, shift_type, c, hw, groups, rows,
            eps, (float2 *) (stats + items), tickets, ticket_stride, stats));
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (group_norm_ticket_apply_kernel<A>,
            dim3 (ticket_apply_tiles (n, hw, rows), n), threads,
            0, stream, x, shift, shift_type, c, hw, groups, rows, stats,
            gamma, gamma_type, beta, beta_type, silu != 0, y));
    return cudaGetLastError ();
  }
  if (vector) {
    nhwc_vec_geometry (c, &rows, &threads);
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (group_norm_vec_stats_kernel<A>, grid, threads, 0,
            stream, x, shift, shift_type, c, hw, groups, rows, stats));
  } else {
    nhwc_geometry (c, &per_thread, &threads);
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (group_norm_nhwc_stats_kernel<A>, grid, threads, 0,
            stream, x, shift, shift_type, c, hw, groups, per_thread, stats));
  }
  PP_CUDA_LAUNCH (group_norm_nhwc_combine_kernel, (unsigned) (items <
      NORM_MAX_BLOCKS ? items : NORM_MAX_BLOCKS), 32, 0, stream, stats, c /
      groups, hw, tiles, items, eps, moments);
  if (vector)
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (group_norm_vec_apply_kernel<A>, grid, threads, 0,
            stream, x, shift, shift_type, c, hw, groups, rows, moments, gamma,
            gamma_type, beta, beta_type, silu != 0, y));
  else
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (group_norm_nhwc_apply_kernel<A>, grid, threads, 0,
            stream, x, shift, shift_type, c, hw, groups, per_thread, moments,
            gamma, gamma_type, beta, beta_type, silu != 0, y));
  return cudaGetLastError ();
}

extern "C" cudaError_t
pp_cuda_group_norm (const void *x, const void *shift, PpCudaType shift_type,
    PpCudaType type, int n, int c, size_t hw, int groups, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, int silu, int layout, float *partials,
    unsigned *tickets, void *y, cudaStream_t stream)
{
  const size_t items = (size_t) n * groups;
  const int splits = pp_cuda_group_norm_splits (n, c, hw, groups);
  const dim3 grid (splits, (unsigned) items);

  if (items == 0 || hw == 0)
    return cudaSuccess;
  if (layout != PP_CUDA_GROUP_NCHW)
    return group_norm_nhwc (x, shift, shift_type, type, n, c, hw, groups,
        eps, gamma, gamma_type, beta, beta_type, silu, layout, partials,
        tickets, y, stream);
  /* Channels first: x + shift written into y, sample by sample, and the
   * norm in place there. */
  if (shift != NULL) {
    const size_t sample_bytes = (size_t) c * hw * pp_cuda_type_size (type);

    for (int b = 0; b < n; b++) {
      const cudaError_t err = pp_cuda_channel_bias ((const char *) x
          + b * sample_bytes, type, (char *) y + b * sample_bytes, type, 1,
          c, hw, (const char *) shift + (size_t) b * c
          * pp_cuda_type_size (shift_type), shift_type, 0, stream);

      if (err != cudaSuccess)
        return err;
    }
    x = y;
  }
  if (partials == NULL || splits == 0) {
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (group_norm_whole_kernel<A>, (unsigned) (items <
            NORM_MAX_BLOCKS ? items : NORM_MAX_BLOCKS), NORM_THREADS, 0,
            stream, x, n, c, hw, groups, eps, gamma, gamma_type, beta,
            beta_type, silu != 0, y));
    return cudaGetLastError ();
  }
  PP_CUDA_DISPATCH_TYPE (type, A,
      PP_CUDA_LAUNCH (group_norm_stats_kernel<A>, grid, GROUP_THREADS, 0,
          stream, x, c, hw, groups, splits, (float4 *) partials));
  PP_CUDA_DISPATCH_TYPE (type, A,
      PP_CUDA_LAUNCH (group_norm_apply_kernel<A>, grid, GROUP_THREADS, 0,
          stream, x, c, hw, groups, splits, (const float4 *) partials, eps,
          gamma, gamma_type, beta, beta_type, silu != 0, y));
  return cudaGetLastError ();
}

/* Rows are short (a transformer's width, 320…1280): a warp per row up to
 * LAYER_NORM_WARP_MAX values, the row in its registers (V a lane: every
 * load issued at once, read from memory once), its sums warp shuffles
 * only, LAYER_NORM_WARPS rows a block.  A longer row takes a block, as the
 * group norm's whole kernel does. */
#define LAYER_NORM_WARPS 8
/* Values a lane holds at most (so rows of up to 1536). */
#define LAYER_NORM_LANE_MAX 48
#define LAYER_NORM_WARP_MAX (32 * LAYER_NORM_LANE_MAX)
/* The block kernel's threads: a quarter of the group norm's (the first
 * way's). */
#define LAYER_NORM_THREADS 128

/* A row's residual mean (*@lo) and 1/√(var + eps) from its lanes' sums of
 * deviations from the float mean (@s) and of their squares (@sq). */
__device__ __forceinline__ void
warp_row_moments (float s, float sq, int dim, float eps, float *lo,
    float *rstd)
{
  *lo = pp_cuda_warp_sum (s) / (float) dim;
  *rstd = rsqrtf (fmaxf (pp_cuda_warp_sum (sq) / (float) dim - *lo * *lo,
          0.0f) + eps);
}

template <PpCudaType A, int V> __global__ void
layer_norm_warp_kernel (const void *x, size_t rows, int dim, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y)
{
  pp_cuda_wait_prior ();
  const int lane = threadIdx.x % 32;

  /* r is the same on the warp's lanes: every shuffle has all 32. */
  for (size_t r = (size_t) blockIdx.x * LAYER_NORM_WARPS + threadIdx.x / 32;
      r < rows; r += (size_t) gridDim.x * LAYER_NORM_WARPS) {
    const size_t first = r * dim;
    float v[V], s = 0.0f, sq = 0.0f, hi, lo, rstd;

    PP_CUDA_UNROLL
    for (int k = 0; k < V; k++) {
      const int i = lane + 32 * k;

      /* Every lane loads (a value of its row when past its end), then
       * keeps or drops: straight-line code, whose loads issue together. */
      const float at = pp_cuda_load<A> (x, first + (i < dim ? i : dim - 1));

      v[k] = i < dim ? at : 0.0f;
      s += v[k];
    }
    hi = pp_cuda_warp_sum (s) / (float) dim;
    s = 0.0f;
    PP_CUDA_UNROLL
    for (int k = 0; k < V; k++)
      if (lane + 32 * k < dim) {
        const float d = v[k] - hi;

        s += d;
        sq += d * d;
      }
    warp_row_moments (s, sq, dim, eps, &lo, &rstd);
    PP_CUDA_UNROLL
    for (int k = 0; k < V; k++) {
      const int i = lane + 32 * k;

      if (i < dim) {
        const float ga = gamma != NULL ? param_load (gamma_type, gamma, i)
            : 1.0f;
        const float be = beta != NULL ? param_load (beta_type, beta, i)
            : 0.0f;

        pp_cuda_store<A> (y, first + i, ((v[k] - hi) - lo) * (rstd * ga)
            + be);
      }
    }
  }
}

template <PpCudaType A> __global__ void
layer_norm_block_kernel (const void *x, size_t rows, int dim, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y)
{
  pp_cuda_wait_prior ();
  __shared__ float shared[32];

  for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const size_t first = r * dim;
    float hi, lo, rstd;

    norm_moments<A> (x, first, dim, eps, shared, &hi, &lo, &rstd);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
      const float ga = gamma != NULL ? param_load (gamma_type, gamma, i)
          : 1.0f;
      const float be = beta != NULL ? param_load (beta_type, beta, i)
          : 0.0f;

      pp_cuda_store<A> (y, first + i, ((pp_cuda_load<A> (x, first + i)
                  - hi) - lo) * (rstd * ga) + be);
    }
  }
}

/* Blocks of a warp-per-row launch over @rows rows (LAYER_NORM_WARPS rows
 * a block, grid-stride past NORM_MAX_BLOCKS). */
static unsigned
layer_norm_warp_blocks (size_t rows)
{
  const size_t need = (rows + LAYER_NORM_WARPS - 1) / LAYER_NORM_WARPS;

  return (unsigned) (need < NORM_MAX_BLOCKS ? need : NORM_MAX_BLOCKS);
}

/* The vector way (PP_CUDA_LAYER_NORM_VECTOR): the warp kernel's row in
 * registers, each lane taking O of its groups of eight values (one
 * 16-byte load and store each: the row's dim / 8 groups over the warp, so
 * a 320-value row is 2 loads a lane where the warp kernel makes 16 of 2
 * bytes), for rows of a multiple of 8 values lying on 16 bytes. */
#define LAYER_NORM_VEC_MAX 6

template <PpCudaType A, int O> __global__ void
layer_norm_vec_kernel (const void *x, size_t rows, int dim, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y)
{
  pp_cuda_wait_prior ();
  const int lane = threadIdx.x % 32, octets = dim / PP_CUDA_VEC;

  /* r is the same on the warp's lanes: every shuffle has all 32. */
  for (size_t r = (size_t) blockIdx.x * LAYER_NORM_WARPS + threadIdx.x / 32;
      r < rows; r += (size_t) gridDim.x * LAYER_NORM_WARPS) {
    const size_t first = r * dim;
    float v[O][PP_CUDA_VEC], s = 0.0f, sq = 0.0f, hi, lo, rstd;

    PP_CUDA_UNROLL
    for (int k = 0; k < O; k++) {
      const int o = lane + 32 * k;

      /* Every lane loads (the row's last eight when past its end), then
       * keeps or drops: the loads issue together. */
      pp_cuda_load8<A> (x, first + (size_t) (o < octets ? o : octets - 1)
          * PP_CUDA_VEC, v[k]);
      PP_CUDA_UNROLL
      for (int q = 0; q < PP_CUDA_VEC; q++) {
        v[k][q] = o < octets ? v[k][q] : 0.0f;
        s += v[k][q];
      }
    }
    hi = pp_cuda_warp_sum (s) / (float) dim;
    s = 0.0f;
    PP_CUDA_UNROLL
    for (int k = 0; k < O; k++)
      if (lane + 32 * k < octets)
        PP_CUDA_UNROLL
        for (int q = 0; q < PP_CUDA_VEC; q++) {
          const float d = v[k][q] - hi;

          s += d;
          sq += d * d;
        }
    warp_row_moments (s, sq, dim, eps, &lo, &rstd);
    PP_CUDA_UNROLL
    for (int k = 0; k < O; k++) {
      const int o = lane + 32 * k;

      if (o < octets) {
        PP_CUDA_UNROLL
        for (int q = 0; q < PP_CUDA_VEC; q++) {
          const int i = o * PP_CUDA_VEC + q;
          const float ga = gamma != NULL ? param_load (gamma_type, gamma, i)
              : 1.0f;
          const float be = beta != NULL ? param_load (beta_type, beta, i)
              : 0.0f;

          v[k][q] = ((v[k][q] - hi) - lo) * (rstd * ga) + be;
        }
        pp_cuda_store8<A> (y, first + (size_t) o * PP_CUDA_VEC, v[k]);
      }
    }
  }
}

/* The octet way (PP_CUDA_LAYER_NORM_OCTET): each thread one group of
 * eight values of a row (a 16-byte load and store), a row's dim / 8
 * threads adding their sums through shared memory (a warp a row, a fixed
 * order), OCTET_THREADS / (dim / 8) rows a block.  Where a warp a row
 * leaves a 16×16×1280 norm 256 warps (2 an SM on an H200, whose 5 loads
 * and 80 parameters' a lane took 13.6 µs), this gives it 86 blocks of 480
 * threads, each thread holding one load and its 16 parameters. */
#define OCTET_THREADS 512
#define OCTET_MAX_ROWS 64

template <PpCudaType A> __global__ void __launch_bounds__ (OCTET_THREADS)
layer_norm_octet_kernel (const void *x, size_t rows, int dim, int block_rows,
    float eps, const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y)
{
  pp_cuda_wait_prior ();
  __shared__ float cells[OCTET_THREADS], squares[OCTET_THREADS];
  __shared__ float hi_s[OCTET_MAX_ROWS], lo_s[OCTET_MAX_ROWS],
      sq_s[OCTET_MAX_ROWS];
  const int octets = dim / PP_CUDA_VEC;
  const int r = (int) threadIdx.x / octets;
  const int i0 = ((int) threadIdx.x % octets) * PP_CUDA_VEC;
  float ga[PP_CUDA_VEC], be[PP_CUDA_VEC];

  /* The thread's parameters, once: loads issued together. */
  PP_CUDA_UNROLL
  for (int q = 0; q < PP_CUDA_VEC; q++) {
    const int i = r < block_rows ? i0 + q : q;

    ga[q] = gamma != NULL ? param_load (gamma_type, gamma, i) : 1.0f;
    be[q] = beta != NULL ? param_load (beta_type, beta, i) : 0.0f;
  }
  /* The block's rows, then the next block_rows · gridDim.x on: the
   * barriers below are the whole block's in every pass. */
  for (size_t first = (size_t) blockIdx.x * block_rows; first < rows;
      first += (size_t) gridDim.x * block_rows) {
    const size_t row = first + r;
    const bool active = r < block_rows && row < rows;
    float v[PP_CUDA_VEC], s = 0.0f, d_s = 0.0f, q_s = 0.0f, hi, lo, rstd;

    if (active)
      pp_cuda_load8<A> (x, row * dim + i0, v);
    else
      PP_CUDA_UNROLL
      for (int q = 0; q < PP_CUDA_VEC; q++)
        v[q] = 0.0f;
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++)
      s += v[q];
    if (r < block_rows)
      cells[threadIdx.x] = s;
    __syncthreads ();
    warp_group_sums (cells, block_rows * octets, 1, block_rows, 0.0f, hi_s);
    __syncthreads ();
    hi = r < block_rows ? hi_s[r] / (float) dim : 0.0f;
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++) {
      const float d = v[q] - hi;

      d_s += d;
      q_s += d * d;
    }
    if (r < block_rows) {
      cells[threadIdx.x] = d_s;
      squares[threadIdx.x] = q_s;
    }
    __syncthreads ();
    warp_group_sums (cells, block_rows * octets, 1, block_rows, 0.0f, lo_s);
    warp_group_sums (squares, block_rows * octets, 1, block_rows, 0.0f,
        sq_s);
    __syncthreads ();
    if (active) {
      lo = lo_s[r] / (float) dim;
      rstd = rsqrtf (fmaxf (sq_s[r] / (float) dim - lo * lo, 0.0f) + eps);
      PP_CUDA_UNROLL
      for (int q = 0; q < PP_CUDA_VEC; q++)
        v[q] = ((v[q] - hi) - lo) * (rstd * ga[q]) + be[q];
      pp_cuda_store8<A> (y, row * dim + i0, v);
    }
  }
}

/* One launch of the vector kernel, O groups of eight a lane. */
template <PpCudaType A, int O> static void
layer_norm_vec_launch (const void *x, size_t rows, int dim, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y, cudaStream_t stream)
{
  const unsigned blocks = layer_norm_warp_blocks (rows);

  PP_CUDA_LAUNCH ((layer_norm_vec_kernel<A, O>), blocks, 32 * LAYER_NORM_WARPS,
      0, stream, x, rows, dim, eps, gamma, gamma_type, beta, beta_type, y);
}

/* The vector kernel for @dim values a row: the fewest groups of eight a
 * lane that hold it (2, 3, 5 or LAYER_NORM_VEC_MAX: SD's widths 320, 640,
 * 1280 need 2, 3 and 5).  FALSE when the row is longer. */
template <PpCudaType A> static bool
layer_norm_vec (const void *x, size_t rows, int dim, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y, cudaStream_t stream)
{
  const int per_lane = (dim / PP_CUDA_VEC + 31) / 32;

  if (per_lane <= 2)
    layer_norm_vec_launch<A, 2> (x, rows, dim, eps, gamma, gamma_type, beta,
        beta_type, y, stream);
  else if (per_lane <= 3)
    layer_norm_vec_launch<A, 3> (x, rows, dim, eps, gamma, gamma_type, beta,
        beta_type, y, stream);
  else if (per_lane <= 5)
    layer_norm_vec_launch<A, 5> (x, rows, dim, eps, gamma, gamma_type, beta,
        beta_type, y, stream);
  else if (per_lane <= LAYER_NORM_VEC_MAX)
    layer_norm_vec_launch<A, LAYER_NORM_VEC_MAX> (x, rows, dim, eps, gamma,
        gamma_type, beta, beta_type, y, stream);
  else
    return false;
  return true;
}

/* The warp kernel for @dim values a row, V = 16 or LAYER_NORM_LANE_MAX a
 * lane. */
template <PpCudaType A> static void
layer_norm_warp (const void *x, size_t rows, int dim, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y, cudaStream_t stream)
{
  const unsigned blocks = layer_norm_warp_blocks (rows);

  if (dim <= 32 * 16)
    PP_CUDA_LAUNCH ((layer_norm_warp_kernel<A, 16>), blocks, 32 *
        LAYER_NORM_WARPS, 0, stream, x, rows, dim, eps, gamma, gamma_type,
        beta, beta_type, y);
  else
    PP_CUDA_LAUNCH ((layer_norm_warp_kernel<A, LAYER_NORM_LANE_MAX>), blocks,
        32 * LAYER_NORM_WARPS, 0, stream, x, rows, dim, eps, gamma, gamma_type,
        beta, beta_type, y);
}

extern "C" cudaError_t
pp_cuda_layer_norm (const void *x, PpCudaType type, size_t rows, int dim,
    float eps, const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y, int way, cudaStream_t stream)
{
  const unsigned blocks = (unsigned) (rows < NORM_MAX_BLOCKS ? rows
      : NORM_MAX_BLOCKS);
  bool done = false;

  if (rows == 0 || dim <= 0)
    return cudaSuccess;
  if (way == PP_CUDA_LAYER_NORM_WIDTH)
    way = dim >= PP_CUDA_LAYER_NORM_OCTET_FROM ? PP_CUDA_LAYER_NORM_OCTET
        : PP_CUDA_LAYER_NORM_VECTOR;
  if (way == PP_CUDA_LAYER_NORM_OCTET && dim % PP_CUDA_VEC == 0
      && dim / PP_CUDA_VEC <= OCTET_THREADS && pp_cuda_vec_aligned (x)
      && pp_cuda_vec_aligned (y)) {
    int block_rows;
    unsigned threads;
    size_t need;

    octets_geometry (dim, OCTET_THREADS, OCTET_MAX_ROWS, &block_rows,
        &threads);
    need = (rows + block_rows - 1) / block_rows;
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (layer_norm_octet_kernel<A>, (unsigned) (need
                < NORM_MAX_BLOCKS ? need : NORM_MAX_BLOCKS), threads, 0,
            stream, x, rows, dim, block_rows, eps, gamma, gamma_type, beta,
            beta_type, y));
    return cudaGetLastError ();
  }
  if ((way == PP_CUDA_LAYER_NORM_VECTOR || way == PP_CUDA_LAYER_NORM_OCTET)
      && dim % PP_CUDA_VEC == 0
      && pp_cuda_vec_aligned (x) && pp_cuda_vec_aligned (y)) {
    PP_CUDA_DISPATCH_TYPE (type, A,
        done = layer_norm_vec<A> (x, rows, dim, eps, gamma, gamma_type,
            beta, beta_type, y, stream));
    if (done)
      return cudaGetLastError ();
  }
  if (dim <= LAYER_NORM_WARP_MAX && way != PP_CUDA_LAYER_NORM_BLOCK)
    PP_CUDA_DISPATCH_TYPE (type, A,
        layer_norm_warp<A> (x, rows, dim, eps, gamma, gamma_type, beta,
            beta_type, y, stream));
  else
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_LAUNCH (layer_norm_block_kernel<A>, blocks, LAYER_NORM_THREADS,
            0, stream, x, rows, dim, eps, gamma, gamma_type, beta, beta_type,
            y));
  return cudaGetLastError ();
}
