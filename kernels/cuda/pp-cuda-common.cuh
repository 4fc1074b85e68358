/* ppdiffuse — what the CUDA kernels share: launch geometry, parameter
 * loads widened to float, block reductions.  Device code only (nvcc). */
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "pp-cuda-kernels.h"
#include "pp-dtype-math.h"

/* Full unrolling for nvcc (a register array indexed by a loop's counter
 * stays in registers only when the loop is unrolled); nothing for other
 * compilers. */
#ifdef __CUDACC__
#define PP_CUDA_UNROLL _Pragma ("unroll")
#else
#define PP_CUDA_UNROLL
#endif

/* Threads of a block in the element-wise kernels. */
#define PP_CUDA_THREADS 256
/* Blocks of a grid-stride launch: enough to fill any current GPU, and far
 * below gridDim.x's limit (2^31 - 1); the loops do the rest. */
#define PP_CUDA_MAX_BLOCKS 8192
/* gridDim.y and gridDim.z limit. */
#define PP_CUDA_MAX_GRID_YZ 65535

/* Blocks for @n items, one per thread, capped for a grid-stride loop. */
static inline unsigned
pp_cuda_blocks (size_t n, unsigned threads)
{
  size_t blocks = (n + threads - 1) / threads;

  if (blocks < 1)
    blocks = 1;
  return (unsigned) (blocks > PP_CUDA_MAX_BLOCKS ? PP_CUDA_MAX_BLOCKS
      : blocks);
}

/* Grid-stride loop over [0, n) with 64-bit indices. */
#define PP_CUDA_FOR(i, n)                                                    \
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < (n);   \
      i += (size_t) gridDim.x * blockDim.x)

/* A parameter or activation element widened to float. */
template <PpCudaType T> __device__ __forceinline__ float
pp_cuda_load (const void *p, size_t i)
{
  if (T == PP_CUDA_F16)
    return pp_f16_to_f32 (((const uint16_t *) p)[i]);
  if (T == PP_CUDA_BF16)
    return pp_bf16_to_f32 (((const uint16_t *) p)[i]);
  return ((const float *) p)[i];
}

/* An element stored as T (float32, or 16 bits rounded to nearest even as
 * pp-dtype-math.h rounds): what a 16-bit activation's widening, a float32
 * kernel and its narrowing give, bit for bit. */
template <PpCudaType T> __device__ __forceinline__ void
pp_cuda_store (void *p, size_t i, float v)
{
  if (T == PP_CUDA_F16)
    ((uint16_t *) p)[i] = pp_f32_to_f16 (v);
  else if (T == PP_CUDA_BF16)
    ((uint16_t *) p)[i] = pp_f32_to_bf16 (v);
  else
    ((float *) p)[i] = v;
}

/* Sum and maximum of @v over the calling warp (all 32 lanes take part);
 * every lane gets it, the lanes' values added in one fixed order. */
__device__ __forceinline__ float
pp_cuda_warp_sum (float v)
{
  for (int o = 16; o > 0; o /= 2)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float
pp_cuda_warp_max (float v)
{
  for (int o = 16; o > 0; o /= 2)
    v = fmaxf (v, __shfl_xor_sync (0xffffffffu, v, o));
  return v;
}

/* Sum of @v over the block (blockDim.x a multiple of 32, ≤ 1024); every
 * thread gets it.  @shared holds 32 floats; the call ends with a barrier so
 * that the next call may reuse it. */
__device__ __forceinline__ float
pp_cuda_block_sum (float v, float *shared)
{
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned warps = blockDim.x / 32;

  v = pp_cuda_warp_sum (v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads ();
  v = pp_cuda_warp_sum (lane < warps ? shared[lane] : 0.0f);
  __syncthreads ();
  return v;
}

/* Maximum of @v over the block, like pp_cuda_block_sum.  NaN-propagating
 * like the CPU's comparisons is not needed: a NaN score makes the row NaN
 * through the sum anyway. */
__device__ __forceinline__ float
pp_cuda_block_max (float v, float *shared)
{
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned warps = blockDim.x / 32;

  v = pp_cuda_warp_max (v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads ();
  v = pp_cuda_warp_max (lane < warps ? shared[lane] : -INFINITY);
  __syncthreads ();
  return v;
}

/* Calls the kernel template instance for a runtime parameter type. */
#define PP_CUDA_DISPATCH_TYPE(type, T, ...)                                  \
  do {                                                                       \
    switch (type) {                                                          \
      case PP_CUDA_F16: { constexpr PpCudaType T = PP_CUDA_F16; __VA_ARGS__; }   \
        break;                                                               \
      case PP_CUDA_BF16: { constexpr PpCudaType T = PP_CUDA_BF16; __VA_ARGS__; } \
        break;                                                               \
      default: { constexpr PpCudaType T = PP_CUDA_F32; __VA_ARGS__; }            \
        break;                                                               \
    }                                                                        \
  } while (0)
