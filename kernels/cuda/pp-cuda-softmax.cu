/* ppdiffuse — the attention's row softmax on the device: one block per
 * row of scores, max subtracted, exp of pp-ops-math.h (the CPU's), sum and
 * normalisation in float32.  The causal form keeps a query's scores of
 * keys 0…i and writes 0 over the rest.  The narrowing form writes the
 * probabilities in 16 bits for the product with v on tensor cores. */
#include "pp-cuda-common.cuh"
#include "pp-ops-math.h"

/* Rows are 77 (text keys) to 4096 (image keys) long. */
#define SOFTMAX_THREADS 256
#define SOFTMAX_MAX_BLOCKS 65535

/* Row r is query row0 + r % period when CAUSAL.  The probabilities go to
 * @p as P (float32: @p is @s, in place; 16-bit: a packed copy for a
 * tensor-core product, @s keeping the exponentials). */
template <bool CAUSAL, PpCudaType P> __global__ void
softmax_rows_kernel (float *s, size_t rows, int cols, int period, int row0,
    void *p)
{
  pp_cuda_wait_prior ();
  __shared__ float shared[32];

  for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float *row = s + r * cols;
    const int keys = CAUSAL ? min (cols, row0 + (int) (r % period) + 1)
        : cols;
    float m = -INFINITY, sum = 0.0f, inv;

    for (int j = threadIdx.x; j < keys; j += blockDim.x)
      m = fmaxf (m, row[j]);
    m = pp_cuda_block_max (m, shared);
    for (int j = threadIdx.x; j < keys; j += blockDim.x) {
      const float e = pp_math_exp (row[j] - m);

      row[j] = e;
      sum += e;
    }
    inv = 1.0f / pp_cuda_block_sum (sum, shared);
    /* Each thread scales the values it wrote itself: no barrier needed. */
    if (P == PP_CUDA_F32) {
      for (int j = threadIdx.x; j < keys; j += blockDim.x)
        row[j] *= inv;
      for (int j = keys + threadIdx.x; j < cols; j += blockDim.x)
        row[j] = 0.0f;
    } else {
      uint16_t *out = (uint16_t *) p + r * cols;

      for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        const float v = j < keys ? row[j] * inv : 0.0f;

        out[j] = P == PP_CUDA_BF16 ? pp_f32_to_bf16 (v) : pp_f32_to_f16 (v);
      }
    }
  }
}

static unsigned
softmax_blocks (size_t rows)
{
  return (unsigned) (rows < SOFTMAX_MAX_BLOCKS ? rows : SOFTMAX_MAX_BLOCKS);
}

extern "C" cudaError_t
pp_cuda_softmax_rows (float *s, size_t rows, int cols, cudaStream_t stream)
{
  if (rows == 0 || cols <= 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH ((softmax_rows_kernel<false, PP_CUDA_F32>), softmax_blocks
      (rows), SOFTMAX_THREADS, 0, stream, s, rows, cols, 1, 0, s);
  return cudaGetLastError ();
}

extern "C" cudaError_t
pp_cuda_softmax_rows_causal (float *s, size_t rows, int cols, int period,
    int row0, cudaStream_t stream)
{
  if (rows == 0 || cols <= 0 || period <= 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH ((softmax_rows_kernel<true, PP_CUDA_F32>), softmax_blocks
      (rows), SOFTMAX_THREADS, 0, stream, s, rows, cols, period, row0, s);
  return cudaGetLastError ();
}

extern "C" cudaError_t
pp_cuda_softmax_rows_narrow (float *s, size_t rows, int cols, int causal,
    int period, int row0, void *p, PpCudaType p_type, cudaStream_t stream)
{
  if (rows == 0 || cols <= 0 || period <= 0)
    return cudaSuccess;
  if (p_type != PP_CUDA_F16 && p_type != PP_CUDA_BF16)
    return cudaErrorInvalidValue;
  PP_CUDA_DISPATCH_TYPE (p_type, P,
      if (causal)
        PP_CUDA_LAUNCH ((softmax_rows_kernel<true, P>), softmax_blocks (rows),
            SOFTMAX_THREADS, 0, stream, s, rows, cols, period, row0, p);
      else
        PP_CUDA_LAUNCH ((softmax_rows_kernel<false, P>), softmax_blocks (rows),
            SOFTMAX_THREADS, 0, stream, s, rows, cols, period, row0, p));
  return cudaGetLastError ();
}
