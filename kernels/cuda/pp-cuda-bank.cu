/* ppdiffuse — the temporal feature bank's ops on the device (pp-ops-list.h:
 * row_norms, bank_fuse, bank_merge_dest, bank_merge), with the formulas of
 * pp-ops-math.h that the CPU's kernels use (kernels/cpu/pp-cpu-bank.c).
 * One block per row, sums in double in a fixed order; a row's choice is
 * the first of the best candidates, as the CPU's loop finds it: each
 * thread keeps the first best of its candidates, and the block's tree
 * keeps the higher score, then the lower index. */
#include "pp-cuda-common.cuh"
#include "pp-ops-math.h"

/* A power of two: the trees below halve it. */
#define BANK_THREADS 256
#define BANK_MAX_BLOCKS 65535
/* Channels a thread of bank_merge sums at once. */
#define MERGE_PER_THREAD 8

static unsigned
bank_blocks (size_t rows)
{
  return (unsigned) (rows < BANK_MAX_BLOCKS ? rows : BANK_MAX_BLOCKS);
}

/* Sum of @v over the block, in one fixed order; every thread gets it.
 * @shared holds blockDim.x doubles. */
__device__ __forceinline__ double
bank_block_sum (double v, double *shared)
{
  shared[threadIdx.x] = v;
  __syncthreads ();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s)
      shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads ();
  }
  v = shared[0];
  __syncthreads ();
  return v;
}

/* Whether candidate (@s2, @a2) beats (@s1, @a1): an index < 0 is none. */
__device__ __forceinline__ bool
bank_better (float s2, int a2, float s1, int a1)
{
  if (a2 < 0)
    return false;
  return a1 < 0 || s2 > s1 || (s2 == s1 && a2 < a1);
}

/* The block's best of each thread's (@score, @at); every thread gets its
 * index (< 0: none).  @scores and @ats hold blockDim.x values. */
__device__ __forceinline__ int
bank_block_choice (float score, int at, float *scores, int *ats)
{
  scores[threadIdx.x] = score;
  ats[threadIdx.x] = at;
  __syncthreads ();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s && bank_better (scores[threadIdx.x + s],
            ats[threadIdx.x + s], scores[threadIdx.x], ats[threadIdx.x])) {
      scores[threadIdx.x] = scores[threadIdx.x + s];
      ats[threadIdx.x] = ats[threadIdx.x + s];
    }
    __syncthreads ();
  }
  at = ats[0];
  __syncthreads ();
  return at;
}

/* The first best candidate of the block: candidate k (0 ≤ k < @count)
 * is row j = pp_math_bank_kept (k, @r) (every row when @r is 0), its
 * score @row[k] times j's inverse norm; each thread takes every
 * blockDim.x-th candidate.  Every thread gets its row (< 0: none). */
__device__ __forceinline__ int
bank_block_best (const float *row, const float *norms, int count, int r,
    float *scores, int *ats)
{
  float best = -FLT_MAX;
  int at = -1;

  for (int k = threadIdx.x; k < count; k += blockDim.x) {
    const int j = pp_math_bank_kept (k, r);
    const float score = row[k] * pp_math_inverse_norm (norms[j]);

    if (score > best) {
      best = score;
      at = j;
    }
  }
  return bank_block_choice (best, at, scores, ats);
}

__global__ void
row_norms_kernel (const float *x, size_t rows, int c, float *norms)
{
  pp_cuda_wait_prior ();
  __shared__ double shared[BANK_THREADS];

  for (size_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const float *row = x + i * c;
    double s = 0.0;

    for (int j = threadIdx.x; j < c; j += blockDim.x)
      s += (double) row[j] * row[j];
    s = bank_block_sum (s, shared);
    if (threadIdx.x == 0)
      norms[i] = (float) sqrt (s);
  }
}

extern "C" cudaError_t
pp_cuda_row_norms (const float *x, size_t rows, int c, float *norms,
    cudaStream_t stream)
{
  if (rows == 0 || c <= 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (row_norms_kernel, bank_blocks (rows), BANK_THREADS, 0,
      stream, x, rows, c, norms);
  return cudaGetLastError ();
}

__global__ void
bank_fuse_kernel (const float *sim, size_t rows, int m, int c,
    const float *y_norms, const float *bank_norms, const float *bank,
    double threshold, double strength, float *y, float *fused)
{
  pp_cuda_wait_prior ();
  __shared__ float scores[BANK_THREADS];
  __shared__ int ats[BANK_THREADS];

  for (size_t i = blockIdx.x; i < rows; i += gridDim.x) {
    const float *row = sim + i * m;
    int at = bank_block_best (row, bank_norms, m, 0, scores, ats);

    if (at < 0)
      at = 0;
    /* every thread takes the same branch */
    if (pp_math_cosine (row[at], y_norms[i], bank_norms[at]) < threshold)
      continue;
    for (int j = threadIdx.x; j < c; j += blockDim.x)
      y[i * c + j] = pp_math_blend (y[i * c + j],
          bank[(size_t) at * c + j], strength);
    if (threadIdx.x == 0)
      fused[i] += 1.0f;
  }
}

extern "C" cudaError_t
pp_cuda_bank_fuse (const float *sim, size_t rows, int m, int c,
    const float *y_norms, const float *bank_norms, const float *bank,
    double threshold, double strength, float *y, float *fused,
    cudaStream_t stream)
{
  if (rows == 0 || m <= 0 || c <= 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (bank_fuse_kernel, bank_blocks (rows), BANK_THREADS, 0,
      stream, sim, rows, m, c, y_norms, bank_norms, bank, threshold,
      strength, y, fused);
  return cudaGetLastError ();
}

__global__ void
bank_merge_dest_kernel (const float *sim, size_t sources, int first, int n,
    int r, const float *norms, float *dest)
{
  pp_cuda_wait_prior ();
  __shared__ float scores[BANK_THREADS];
  __shared__ int ats[BANK_THREADS];

  for (size_t q = blockIdx.x; q < sources; q += gridDim.x) {
    const int at = bank_block_best (sim + q * (size_t) (n - r), norms,
        n - r, r, scores, ats);

    if (threadIdx.x == 0)
      dest[q] = (float) (at < 0 ? first + 2 * (int) q : at);
  }
}

extern "C" cudaError_t
pp_cuda_bank_merge_dest (const float *sim, size_t sources, int first, int n,
    int r, const float *norms, float *dest, cudaStream_t stream)
{
  if (sources == 0 || n <= r)
    return cudaSuccess;
  PP_CUDA_LAUNCH (bank_merge_dest_kernel, bank_blocks (sources),
      BANK_THREADS, 0, stream, sim, sources, first, n, r, norms, dest);
  return cudaGetLastError ();
}

/* The calling warp's lanes whose @hit is true, a bit each (every lane
 * gets the mask: a butterfly of ORs). */
__device__ __forceinline__ unsigned
bank_warp_mask (bool hit)
{
  unsigned m = hit ? 1u << (threadIdx.x % 32) : 0u;

  for (int o = 16; o > 0; o /= 2)
    m |= __shfl_xor_sync (0xffffffffu, m, o);
  return m;
}

/* Kept row s: the sources are found a chunk of dest at a time, each
 * thread testing one, their indices gathered in order into shared memory
 * (each warp's hits counted from a mask of them); then every thread adds
 * the chunk's found rows, in row order, to its channels' sums; the row's
 * own values go in before the first source after it.  A chunk costs two
 * barriers and its hits (one or two a kept row), where every thread once
 * walked the chunk's 256 flags: a 64×64 layer's 4096 kept rows of 4096
 * sources were 4096 steps a thread, three times a layer. */
__global__ void
bank_merge_kernel (const float *x, int n, int r, int c, const float *dest,
    float *y)
{
  pp_cuda_wait_prior ();
  __shared__ int found[BANK_THREADS];
  __shared__ int hits[BANK_THREADS / 32];
  const int keep = n - r;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  for (int s = blockIdx.x; s < keep; s += gridDim.x) {
    const int t = pp_math_bank_kept (s, r);
    const float *own = x + (size_t) t * c;

    for (int c0 = 0; c0 < c; c0 += MERGE_PER_THREAD * blockDim.x) {
      double acc[MERGE_PER_THREAD];
      bool own_added = false;
      int count = 0;

      for (int p = 0; p < MERGE_PER_THREAD; p++)
        acc[p] = 0.0;
      for (int q0 = 0; q0 < r; q0 += blockDim.x) {
        const int q = q0 + (int) threadIdx.x;
        const bool hit = q < r && (int) dest[q] == t;
        const unsigned mask = bank_warp_mask (hit);
        int before = 0, total = 0;

        if (lane == 0)
          hits[warp] = __popc (mask);
        __syncthreads ();
        for (unsigned w = 0; w < blockDim.x / 32; w++) {
          before += w < warp ? hits[w] : 0;
          total += hits[w];
        }
        if (hit)
          found[before + __popc (mask & ((1u << lane) - 1u))] = q;
        __syncthreads ();
        for (int i = 0; i < total; i++) {
          const int a = 2 * found[i];

          if (!own_added && a > t) {
            for (int p = 0; p < MERGE_PER_THREAD; p++) {
              const int j = c0 + threadIdx.x + p * blockDim.x;

              if (j < c)
                acc[p] += own[j];
            }
            own_added = true;
            count++;
          }
          for (int p = 0; p < MERGE_PER_THREAD; p++) {
            const int j = c0 + threadIdx.x + p * blockDim.x;

            if (j < c)
              acc[p] += x[(size_t) a * c + j];
          }
          count++;
        }
        __syncthreads ();
      }
      for (int p = 0; p < MERGE_PER_THREAD; p++) {
        const int j = c0 + threadIdx.x + p * blockDim.x;

        if (j >= c)
          continue;
        if (!own_added)
          acc[p] += own[j];
        y[(size_t) s * c + j] = (float) (acc[p] / (count + !own_added));
      }
    }
  }
}

extern "C" cudaError_t
pp_cuda_bank_merge (const float *x, int n, int r, int c, const float *dest,
    float *y, cudaStream_t stream)
{
  if (n <= r || c <= 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (bank_merge_kernel, bank_blocks ((size_t) (n - r)),
      BANK_THREADS, 0, stream, x, n, r, c, dest, y);
  return cudaGetLastError ();
}
