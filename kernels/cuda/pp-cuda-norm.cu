/* ppdiffuse — group and layer normalisation on the device: several
 * blocks per group (one per row), two passes in float32 (the mean, then
 * the deviations from it, which never cancel), then the normalised
 * output.  As on the CPU (pp-cpu-norm.c), the mean is a float and the
 * float of what it leaves out (the second pass's residual mean), and a
 * value is normalised as ((x - hi) - lo): x - hi is exact for x near the
 * mean, so a large common offset loses nothing (with one float mean the
 * error grew as 1e-7 · mean / deviation).
 * Each thread's partial sums cover a few hundred values at most before the
 * tree reduction adds them, so float32 loses nothing measurable.  Input
 * and output are of one storage type (A: float32 or 16 bits, widened on
 * load, rounded on store); the statistics are float32. */
#include "pp-cuda-common.cuh"

/* Threads per group or row: a UNet group holds up to ~10⁵ values. */
#define NORM_THREADS 512
/* Blocks per launch; groups or rows beyond it are taken by the same blocks
 * again (grid-stride over items). */
#define NORM_MAX_BLOCKS 65535

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

/* Where value @i of item @item (sample · groups + group) lies, of the
 * item's per_group · hw values in the order its statistics take them, and
 * its channel (*@ch).  Channels first, the group's channels are adjacent
 * planes (channel-major); channels last (@nhwc), each pixel's per_group
 * channels are adjacent (pixel-major).  I is the index type: unsigned in
 * the split kernels (a group below 2^32 values: 32-bit divisions). */
template <typename I> __device__ __forceinline__ size_t
group_at (bool nhwc, size_t item, int groups, int c, int per_group,
    size_t hw, I i, int *ch)
{
  const int g = (int) (item % groups);

  if (!nhwc) {
    *ch = g * per_group + (int) (i / (I) hw);
    return item * per_group * hw + i;
  }
  *ch = g * per_group + (int) (i % (I) per_group);
  return ((item / groups) * hw + i / (I) per_group) * c + *ch;
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
    int splits, bool nhwc, float4 *partials)
{
  __shared__ float shared[32];
  const int per_group = c / groups;
  const size_t count = (size_t) per_group * hw;
  const size_t item = blockIdx.y;       /* sample · groups + group */
  size_t begin, end;
  float sum = 0.0f, mean, d_sum = 0.0f, d_mean, m2 = 0.0f;
  int ch;

  group_slice (count, splits, blockIdx.x, &begin, &end);
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    sum += pp_cuda_load<A> (x, group_at (nhwc, item, groups, c, per_group,
            hw, (unsigned) i, &ch));
  mean = pp_cuda_block_sum (sum, shared) / (float) (end - begin);
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float d = pp_cuda_load<A> (x, group_at (nhwc, item, groups, c,
            per_group, hw, (unsigned) i, &ch)) - mean;

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

template <PpCudaType A, PpCudaType G, PpCudaType B> __global__ void
group_norm_apply_kernel (const void *x, int c, size_t hw, int groups,
    int splits, bool nhwc, const float4 *partials, float eps,
    const void *gamma, const void *beta, bool silu, void *y)
{
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
    const size_t at = group_at (nhwc, item, groups, c, per_group, hw,
        (unsigned) i, &ch);
    const float ga = gamma != NULL ? pp_cuda_load<G> (gamma, ch) : 1.0f;
    const float be = beta != NULL ? pp_cuda_load<B> (beta, ch) : 0.0f;

    const float v = ((pp_cuda_load<A> (x, at) - moments[0]) - moments[1])
        * (moments[2] * ga) + be;

    pp_cuda_store<A> (y, at, silu ? pp_math_silu (v) : v);
  }
}

/* The first way, kept to measure the split against and to fall back on:
 * one block per (sample, group) item, both passes and the normalisation
 * in it. */
template <PpCudaType A, PpCudaType G, PpCudaType B> __global__ void
group_norm_whole_kernel (const void *x, int n, int c, size_t hw,
    int groups, float eps, const void *gamma, const void *beta, bool silu,
    void *y)
{
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
      const float ga = gamma != NULL ? pp_cuda_load<G> (gamma, ch) : 1.0f;
      const float be = beta != NULL ? pp_cuda_load<B> (beta, ch) : 0.0f;

      const float v = ((pp_cuda_load<A> (x, first + i) - hi) - lo)
          * (rstd * ga) + be;

      pp_cuda_store<A> (y, first + i, silu ? pp_math_silu (v) : v);
    }
    /* The next item's first reduction reuses shared memory: the barrier at
     * the end of pp_cuda_block_sum covers it. */
  }
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
/* A slice's partials are one float4: hi, lo, m2 and a spare. */
static_assert (sizeof (float4) == PP_CUDA_GROUP_STATS * sizeof (float),
    "PP_CUDA_GROUP_STATS is not a float4's floats");

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
  if (splits > by_size)
    splits = by_size;
  if (splits > PP_CUDA_GROUP_MAX_SPLITS)
    splits = PP_CUDA_GROUP_MAX_SPLITS;
  return splits < 1 ? 1 : (int) splits;
}

extern "C" cudaError_t
pp_cuda_group_norm (const void *x, PpCudaType type, int n, int c, size_t hw,
    int groups, float eps, const void *gamma, PpCudaType gamma_type,
    const void *beta, PpCudaType beta_type, int silu, int nhwc,
    float *partials, void *y, cudaStream_t stream)
{
  const size_t items = (size_t) n * groups;
  const int splits = pp_cuda_group_norm_splits (n, c, hw, groups);
  const dim3 grid (splits, (unsigned) items);

  if (items == 0 || hw == 0)
    return cudaSuccess;
  if (partials == NULL || splits == 0) {
    /* The whole kernel reads a group's values as one run. */
    if (nhwc)
      return cudaErrorInvalidValue;
    PP_CUDA_DISPATCH_TYPE (type, A,
        PP_CUDA_DISPATCH_TYPE (gamma_type, G,
            PP_CUDA_DISPATCH_TYPE (beta_type, B,
                group_norm_whole_kernel<A, G, B><<<(unsigned) (items
                        < NORM_MAX_BLOCKS ? items : NORM_MAX_BLOCKS),
                    NORM_THREADS, 0, stream>>> (x, n, c, hw, groups, eps,
                    gamma, beta, silu != 0, y))));
    return cudaGetLastError ();
  }
  PP_CUDA_DISPATCH_TYPE (type, A,
      group_norm_stats_kernel<A><<<grid, GROUP_THREADS, 0, stream>>> (x, c,
          hw, groups, splits, nhwc != 0, (float4 *) partials));
  PP_CUDA_DISPATCH_TYPE (type, A,
      PP_CUDA_DISPATCH_TYPE (gamma_type, G,
          PP_CUDA_DISPATCH_TYPE (beta_type, B,
              group_norm_apply_kernel<A, G, B><<<grid, GROUP_THREADS, 0,
              stream>>> (x, c, hw, groups, splits, nhwc != 0,
                  (const float4 *) partials, eps, gamma, beta, silu != 0,
                  y))));
  return cudaGetLastError ();
}

/* Rows are short (a transformer's width, 320…1280): a quarter of the
 * group norm's threads. */
#define LAYER_NORM_THREADS 128

template <PpCudaType A, PpCudaType G, PpCudaType B> __global__ void
layer_norm_kernel (const void *x, size_t rows, int dim, float eps,
    const void *gamma, const void *beta, void *y)
{
  __shared__ float shared[32];

  for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const size_t first = r * dim;
    float hi, lo, rstd;

    norm_moments<A> (x, first, dim, eps, shared, &hi, &lo, &rstd);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
      const float ga = gamma != NULL ? pp_cuda_load<G> (gamma, i) : 1.0f;
      const float be = beta != NULL ? pp_cuda_load<B> (beta, i) : 0.0f;

      pp_cuda_store<A> (y, first + i, ((pp_cuda_load<A> (x, first + i)
                  - hi) - lo) * (rstd * ga) + be);
    }
  }
}

extern "C" cudaError_t
pp_cuda_layer_norm (const void *x, PpCudaType type, size_t rows, int dim,
    float eps, const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, void *y, cudaStream_t stream)
{
  const unsigned blocks = (unsigned) (rows < NORM_MAX_BLOCKS ? rows
      : NORM_MAX_BLOCKS);

  if (rows == 0 || dim <= 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (type, A,
      PP_CUDA_DISPATCH_TYPE (gamma_type, G,
          PP_CUDA_DISPATCH_TYPE (beta_type, B,
              layer_norm_kernel<A, G, B><<<blocks, LAYER_NORM_THREADS, 0,
              stream>>> (x, rows, dim, eps, gamma, beta, y))));
  return cudaGetLastError ();
}
