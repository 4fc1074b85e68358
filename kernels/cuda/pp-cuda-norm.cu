/* ppdiffuse — group and layer normalisation on the device: one block per
 * group (or row), two passes in float32 (the mean, then the mean square
 * deviation from it, which never cancels), then the normalised output.
 * Each thread's partial sums cover a few hundred values at most before the
 * tree reduction adds them, so float32 loses nothing measurable. */
#include "pp-cuda-common.cuh"

/* Threads per group or row: a UNet group holds up to ~10⁵ values. */
#define NORM_THREADS 512
/* Blocks per launch; groups or rows beyond it are taken by the same blocks
 * again (grid-stride over items). */
#define NORM_MAX_BLOCKS 65535

/* Mean and 1/√(var + eps) of @count values at @p, every thread of the
 * block getting them. */
__device__ void
norm_moments (const float *p, size_t count, float eps, float *shared,
    float *mean, float *rstd)
{
  float s = 0.0f, m;

  for (size_t i = threadIdx.x; i < count; i += blockDim.x)
    s += p[i];
  m = pp_cuda_block_sum (s, shared) / (float) count;
  s = 0.0f;
  for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
    const float d = p[i] - m;

    s += d * d;
  }
  *mean = m;
  *rstd = rsqrtf (pp_cuda_block_sum (s, shared) / (float) count + eps);
}

template <PpCudaType G, PpCudaType B> __global__ void
group_norm_kernel (const float *x, int n, int c, size_t hw, int groups,
    float eps, const void *gamma, const void *beta, float *y)
{
  __shared__ float shared[32];
  const int per_group = c / groups;
  const size_t count = (size_t) per_group * hw;

  for (size_t item = blockIdx.x; item < (size_t) n * groups;
      item += gridDim.x) {
    const size_t b = item / groups, g = item % groups;
    const size_t first = (b * c + g * per_group) * hw;
    float mean, rstd;

    norm_moments (x + first, count, eps, shared, &mean, &rstd);
    for (size_t i = threadIdx.x; i < count; i += blockDim.x) {
      const size_t ch = g * per_group + i / hw;
      const float ga = gamma != NULL ? pp_cuda_load<G> (gamma, ch) : 1.0f;
      const float be = beta != NULL ? pp_cuda_load<B> (beta, ch) : 0.0f;

      y[first + i] = (x[first + i] - mean) * (rstd * ga) + be;
    }
    /* The next item's first reduction reuses shared memory: the barrier at
     * the end of pp_cuda_block_sum covers it. */
  }
}

extern "C" cudaError_t
pp_cuda_group_norm (const float *x, int n, int c, size_t hw, int groups,
    float eps, const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, float *y, cudaStream_t stream)
{
  const size_t items = (size_t) n * groups;
  const unsigned blocks = (unsigned) (items < NORM_MAX_BLOCKS ? items
      : NORM_MAX_BLOCKS);

  if (items == 0 || hw == 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (gamma_type, G,
      PP_CUDA_DISPATCH_TYPE (beta_type, B,
          group_norm_kernel<G, B><<<blocks, NORM_THREADS, 0, stream>>> (x,
              n, c, hw, groups, eps, gamma, beta, y)));
  return cudaGetLastError ();
}

/* Rows are short (a transformer's width, 320…1280): a quarter of the
 * group norm's threads. */
#define LAYER_NORM_THREADS 128

template <PpCudaType G, PpCudaType B> __global__ void
layer_norm_kernel (const float *x, size_t rows, int dim, float eps,
    const void *gamma, const void *beta, float *y)
{
  __shared__ float shared[32];

  for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *src = x + r * dim;
    float *dst = y + r * dim;
    float mean, rstd;

    norm_moments (src, dim, eps, shared, &mean, &rstd);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
      const float ga = gamma != NULL ? pp_cuda_load<G> (gamma, i) : 1.0f;
      const float be = beta != NULL ? pp_cuda_load<B> (beta, i) : 0.0f;

      dst[i] = (src[i] - mean) * (rstd * ga) + be;
    }
  }
}

extern "C" cudaError_t
pp_cuda_layer_norm (const float *x, size_t rows, int dim, float eps,
    const void *gamma, PpCudaType gamma_type, const void *beta,
    PpCudaType beta_type, float *y, cudaStream_t stream)
{
  const unsigned blocks = (unsigned) (rows < NORM_MAX_BLOCKS ? rows
      : NORM_MAX_BLOCKS);

  if (rows == 0 || dim <= 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (gamma_type, G,
      PP_CUDA_DISPATCH_TYPE (beta_type, B,
          layer_norm_kernel<G, B><<<blocks, LAYER_NORM_THREADS, 0,
          stream>>> (x, rows, dim, eps, gamma, beta, y)));
  return cudaGetLastError ();
}
