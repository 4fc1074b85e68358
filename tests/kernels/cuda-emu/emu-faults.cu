/* tests/kernels/cuda-emu: small kernels with the faults the emulation
 * must bring to light (test-cuda-emu.cc, "the emulation itself"),
 * compiled through emu-launches.py like the real ones. */
#include "emu-faults.h"
#include "pp-cuda-common.cuh"

/* Each block sums its blockDim.x values of @x into y[block] the way
 * pp_cuda_block_sum does: warp sums, then the warps' sums through shared
 * memory.  Without @barrier, thread 0 reads the other warps' sums before
 * they have written them. */
__global__ void
block_sum_kernel (const float *x, bool barrier, float *y)
{
  __shared__ float warp_sums[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];

  v = pp_cuda_warp_sum (v);
  if (lane == 0)
    warp_sums[warp] = v;
  if (barrier)
    __syncthreads ();
  if (threadIdx.x == 0) {
    v = 0.0f;
    for (unsigned w = 0; w < blockDim.x / 32; w++)
      v += warp_sums[w];
    y[blockIdx.x] = v;
  }
}

extern "C" cudaError_t
emu_faults_block_sum (const float *x, int blocks, int threads, int barrier,
    float *y)
{
  block_sum_kernel<<<blocks, threads, 0, 0>>> (x, barrier != 0, y);
  return cudaGetLastError ();
}

/* Writes @n + 1 values: one past the end. */
__global__ void
overrun_kernel (float *y, size_t n)
{
  PP_CUDA_FOR (i, n + 1) y[i] = 1.0f;
}

extern "C" cudaError_t
emu_faults_overrun (float *y, size_t n)
{
  overrun_kernel<<<pp_cuda_blocks (n, PP_CUDA_THREADS), PP_CUDA_THREADS, 0,
      0>>> (y, n);
  return cudaGetLastError ();
}

/* Threads past @n leave before the barrier the others wait at. */
__global__ void
early_exit_kernel (float *y, int n)
{
  if ((int) threadIdx.x >= n)
    return;
  __syncthreads ();
  y[threadIdx.x] = 1.0f;
}

extern "C" cudaError_t
emu_faults_early_exit (float *y, int threads, int n)
{
  early_exit_kernel<<<1, threads, 0, 0>>> (y, n);
  return cudaGetLastError ();
}

/* Launches an empty kernel with the given shape. */
__global__ void
empty_kernel ()
{
}

extern "C" cudaError_t
emu_faults_launch (unsigned gx, unsigned gy, unsigned gz, unsigned bx,
    unsigned by, unsigned bz)
{
  empty_kernel<<<dim3 (gx, gy, gz), dim3 (bx, by, bz), 0, 0>>> ();
  return cudaGetLastError ();
}

/* Each block writes its index to slot [round · blocks + block], then the
 * blocks meet (pp_cuda_blocks_meet, thread 0 of each, @expected of them),
 * then each counts in seen[block] the round's slots that hold their
 * blocks' indices: @rounds times. */
__global__ void
meet_kernel (unsigned *counts, int rounds, unsigned expected,
    unsigned *slots, unsigned *seen)
{
  pp_cuda_wait_prior ();
  const unsigned blocks = gridDim.x;

  for (int round = 0; round < rounds; round++) {
    unsigned *slot = slots + (size_t) round * blocks;

    if (threadIdx.x == 0) {
      slot[blockIdx.x] = blockIdx.x;
      __threadfence ();
      pp_cuda_blocks_meet (&counts[0], &counts[1], expected);
    }
    __syncthreads ();
    if (threadIdx.x == 0)
      for (unsigned b = 0; b < blocks; b++)
        seen[blockIdx.x] += __ldcg (&slot[b]) == b;
    __syncthreads ();
  }
}

extern "C" cudaError_t
emu_faults_meet (unsigned *counts, int blocks, int threads, int rounds,
    int cooperative, unsigned expected, unsigned *slots, unsigned *seen)
{
  if (cooperative)
    PP_CUDA_LAUNCH_TOGETHER (meet_kernel, blocks, threads, 0, 0, counts,
        rounds, expected, slots, seen);
  else
    PP_CUDA_LAUNCH (meet_kernel, blocks, threads, 0, 0, counts, rounds,
        expected, slots, seen);
  return cudaGetLastError ();
}
