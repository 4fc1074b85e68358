/* ppdiffuse — dtype conversions on the device: the formulas of
 * kernels/pp-dtype-math.h, which the host tests check bit by bit, one
 * element per thread in a grid-stride loop. */
#include "pp-cuda-convert.h"
#include "pp-cuda-common.cuh"
#include "pp-dtype-math.h"

#define THREADS 256
/* Enough blocks to fill any current GPU; the grid-stride loop does the
 * rest. */
#define MAX_BLOCKS 4096

template <typename In, typename Out, Out (*convert) (In)>
__global__ void
convert_kernel (const In *x, Out *y, size_t n)
{
  pp_cuda_wait_prior ();
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
      i += (size_t) gridDim.x * blockDim.x)
    y[i] = convert (x[i]);
}

template <typename In, typename Out, Out (*convert) (In)>
static cudaError_t
launch (const In *x, Out *y, size_t n, cudaStream_t stream)
{
  size_t blocks = (n + THREADS - 1) / THREADS;

  if (n == 0)
    return cudaSuccess;
  if (blocks > MAX_BLOCKS)
    blocks = MAX_BLOCKS;
  PP_CUDA_LAUNCH ((convert_kernel<In, Out, convert>), (unsigned) blocks,
      THREADS, 0, stream, x, y, n);
  return cudaGetLastError ();
}

extern "C" cudaError_t
pp_cuda_f32_to_f16 (const float *x, uint16_t *y, size_t n,
    cudaStream_t stream)
{
  return launch<float, uint16_t, pp_f32_to_f16> (x, y, n, stream);
}

extern "C" cudaError_t
pp_cuda_f16_to_f32 (const uint16_t *x, float *y, size_t n,
    cudaStream_t stream)
{
  return launch<uint16_t, float, pp_f16_to_f32> (x, y, n, stream);
}

extern "C" cudaError_t
pp_cuda_f32_to_bf16 (const float *x, uint16_t *y, size_t n,
    cudaStream_t stream)
{
  return launch<float, uint16_t, pp_f32_to_bf16> (x, y, n, stream);
}

extern "C" cudaError_t
pp_cuda_bf16_to_f32 (const uint16_t *x, float *y, size_t n,
    cudaStream_t stream)
{
  return launch<uint16_t, float, pp_bf16_to_f32> (x, y, n, stream);
}
