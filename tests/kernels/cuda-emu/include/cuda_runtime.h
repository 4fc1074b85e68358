/* tests/kernels/cuda-emu: what the kernels of kernels/cuda take from the
 * CUDA runtime, on the CPU (emu.cc), so that a C++ compiler builds them
 * where no toolkit is.  A launch runs its blocks one after another and
 * each block's threads one at a time, each until it finishes or waits at
 * a barrier or a warp shuffle: the same order on every run, and the
 * reverse order when asked (emu_set_descending).  Device code is plain
 * C++ here: __device__ and friends are empty, shared memory is static.
 *
 * emu-launches.py rewrites each launch, kernel<<<grid, block, shmem,
 * stream>>> (args), as emu_launch (grid, block, shmem, stream, "kernel",
 * [&] { kernel (args); }). */
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#include "emu-asan.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
/* A hint to nvcc's register allocation: nothing to emulate. */
#define __launch_bounds__(...)
/* Blocks run one at a time: one copy serves them all. */
#define __shared__ static

typedef enum
{
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorIllegalAddress = 700,
  cudaErrorCooperativeLaunchTooLarge = 720,
} cudaError_t;

typedef struct EmuStream *cudaStream_t;

struct dim3
{
  unsigned x, y, z;
  constexpr dim3 (unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
      : x (x_), y (y_), z (z_)
  {
  }
};
typedef dim3 uint3;

struct alignas (8) float2
{
  float x, y;
};

static inline float2
make_float2 (float x, float y)
{
  return float2 { x, y };
}

struct alignas (16) float4
{
  float x, y, z, w;
};

static inline float4
make_float4 (float x, float y, float z, float w)
{
  return float4 { x, y, z, w };
}

struct alignas (16) uint4
{
  unsigned x, y, z, w;
};

static inline uint4
make_uint4 (unsigned x, unsigned y, unsigned z, unsigned w)
{
  return uint4 { x, y, z, w };
}

/* The running thread's coordinates and the launch's shape. */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

template <typename T> static inline T
min (T a, T b)
{
  return a < b ? a : b;
}

template <typename T> static inline T
max (T a, T b)
{
  return a > b ? a : b;
}

static inline float
rsqrtf (float x)
{
  return 1.0f / sqrtf (x);
}

/* Rounded separately: the build turns off the contraction into fused
 * multiply-adds (-ffp-contract=off) for all of this code. */
static inline float
__fadd_rn (float a, float b)
{
  return a + b;
}

static inline float
__fmul_rn (float a, float b)
{
  return a * b;
}

void __syncthreads ();

/* Waits until the 32 lanes of the calling thread's warp have arrived,
 * then returns the @bits of lane (this lane ^ @lane_mask).  Aborts for a
 * partial @mask or @width, or a warp of fewer than 32 threads. */
uint64_t emu_shuffle_xor (unsigned mask, uint64_t bits, int lane_mask,
    int width);

/* The device's atomic add and exchange of a word: one thread runs at a
 * time here. */
static inline unsigned
atomicAdd (unsigned *p, unsigned v)
{
  const unsigned old = *p;

  *p = old + v;
  return old;
}

static inline unsigned
atomicExch (unsigned *p, unsigned v)
{
  const unsigned old = *p;

  *p = v;
  return old;
}

/* The device's memory fence and its load past the SM's own cache: the
 * emulation's one memory is always in order. */
static inline void
__threadfence ()
{
}

template <typename T> static inline T
__ldcg (const T *p)
{
  return *p;
}

/* The device's population count of a word. */
static inline int
__popc (unsigned x)
{
  return __builtin_popcount (x);
}

template <typename T> static inline T
__shfl_xor_sync (unsigned mask, T v, int lane_mask, int width = 32)
{
  static_assert (sizeof (T) <= sizeof (uint64_t), "8 bytes at most");
  uint64_t bits = 0;

  memcpy (&bits, &v, sizeof v);
  bits = emu_shuffle_xor (mask, bits, lane_mask, width);
  memcpy (&v, &bits, sizeof v);
  return v;
}

/* emu_launch's @flags.  EMU_LAUNCH_WAITS: every thread must call
 * emu_grid_wait before it finishes (a kernel launched through
 * pp_cuda_launch, which may run while the grid before it still does on a
 * device: pp-cuda-common.cuh); one that does not aborts the program,
 * naming the kernel.  EMU_LAUNCH_TOGETHER: a cooperative launch, whose
 * blocks are resident at once (at most emu_resident_blocks, else
 * cudaErrorCooperativeLaunchTooLarge), so that a thread may wait for
 * other blocks (emu_wait_change). */
#define EMU_LAUNCH_WAITS 1u
#define EMU_LAUNCH_TOGETHER 2u
/* Checks the configuration as the driver does (an invalid one leaves
 * cudaErrorInvalidConfiguration for cudaGetLastError, and runs nothing),
 * then runs @body once per thread of every block. */
void emu_launch (dim3 grid, dim3 block, size_t shmem, cudaStream_t stream,
    const char *kernel, const std::function<void ()> &body,
    unsigned flags = 0);
/* The blocks of @threads threads the emulated device holds at once: 2048
 * threads an SM, 32 blocks at most, on each of its SMs. */
int emu_resident_blocks (unsigned threads);
/* A thread of a cooperative launch that waits for other blocks to change
 * @word from @value calls this in its loop: where the word still holds
 * the value, its block is put aside and the others run until one changes
 * it (emu.cc); aborts in a launch that is not cooperative. */
void emu_wait_change (const volatile unsigned *word, unsigned value);
/* pp_cuda_wait_prior's griddepcontrol.wait: the calling thread has waited
 * for the grids before its own. */
void emu_grid_wait ();
/* @name as PP_CUDA_LAUNCH writes it ("(kernel<A, B>)" or "kernel<A>"),
 * without the parentheses, as a string that lives as long as the
 * program: the name the launches are counted by. */
const char *emu_kernel_name (const char *name);
cudaError_t cudaGetLastError ();

/* What pp_cuda_kernel_image reads of a kernel: the emulated device's SM
 * version (emu_device_sm), or its refusal. */
struct cudaFuncAttributes
{
  int binaryVersion;
};
cudaError_t cudaFuncGetAttributes (cudaFuncAttributes * attributes,
    const void *func);
template <typename F> static inline cudaError_t
cudaFuncGetAttributes (cudaFuncAttributes * attributes, F * func)
{
  return cudaFuncGetAttributes (attributes,
      reinterpret_cast<const void *> (func));
}

/* Threads and blocks in descending order from now on (ascending: false):
 * the tests run each launch both ways. */
void emu_set_descending (bool descending);
/* The launches run so far of kernels whose name (as the launch writes it,
 * "group_norm_vec_apply_kernel<A>") starts with @prefix: which of a
 * function's kernels took a case.  $PP_CUDA_EMU_LAUNCHES=PREFIX prints the
 * count at exit. */
unsigned long emu_kernel_runs (const char *prefix);
