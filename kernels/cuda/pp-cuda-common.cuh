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
/* Unrolling by eight: a loop's next loads issued before its sums. */
#define PP_CUDA_UNROLL_8 _Pragma ("unroll 8")
#else
#define PP_CUDA_UNROLL
#define PP_CUDA_UNROLL_8
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

/* Eight consecutive elements, the unit of the element-wise kernels' vector
 * paths: one 16-byte load or store for 16-bit types, two for float32,
 * instead of eight of 2 or 4 bytes (a warp then moves whole 512-byte
 * lines per instruction, and the index arithmetic is done once per
 * eight).  Every element is widened and stored exactly as pp_cuda_load and
 * pp_cuda_store do it, so a vector path gives the bytes of the scalar
 * one. */
#define PP_CUDA_VEC 8
/* The most vectors a kernel eight values a thread takes: its 32-bit
 * grid-stride index (k += threads, from below the count) must not wrap
 * past 2^32, which a count near 2^32 would let it do, stepping over the
 * end; half of that leaves room for any grid. */
#define PP_CUDA_VECTORS_MAX (UINT32_MAX / 2)

/* Whether @p can be read and written by vectors: 16-byte aligned. */
static inline bool
pp_cuda_vec_aligned (const void *p)
{
  return ((uintptr_t) p & 15) == 0;
}

/* Eight elements as they are stored (one 16-byte vector, or two of
 * float32), which a kernel holding many in registers keeps so (half the
 * registers of their floats for 16-bit types) until pp_cuda_widen8 makes
 * them the floats pp_cuda_load8 gives. */
template <PpCudaType T> struct PpCudaRaw8
{
  uint4 u;
};

template <> struct PpCudaRaw8<PP_CUDA_F32>
{
  float4 a, b;
};

/* Elements @i … @i + 7 of @p as stored (@i a multiple of 8, @p 16-byte
 * aligned). */
template <PpCudaType T> __device__ __forceinline__ PpCudaRaw8<T>
pp_cuda_raw8 (const void *p, size_t i)
{
  PpCudaRaw8<T> r;

  if constexpr (T == PP_CUDA_F32) {
    r.a = ((const float4 *) p)[i / 4];
    r.b = ((const float4 *) p)[i / 4 + 1];
  } else {
    r.u = ((const uint4 *) p)[i / 8];
  }
  return r;
}

template <PpCudaType T> __device__ __forceinline__ void
pp_cuda_widen8 (const PpCudaRaw8<T> &r, float v[PP_CUDA_VEC])
{
  if constexpr (T == PP_CUDA_F32) {
    v[0] = r.a.x, v[1] = r.a.y, v[2] = r.a.z, v[3] = r.a.w;
    v[4] = r.b.x, v[5] = r.b.y, v[6] = r.b.z, v[7] = r.b.w;
  } else {
    const uint32_t w[4] = { r.u.x, r.u.y, r.u.z, r.u.w };

    /* Little-endian: the lower half of each word is the earlier element. */
    PP_CUDA_UNROLL
    for (int q = 0; q < 4; q++) {
      const uint16_t lo = (uint16_t) (w[q] & 0xffffu);
      const uint16_t hi = (uint16_t) (w[q] >> 16);

      v[2 * q] = T == PP_CUDA_F16 ? pp_f16_to_f32 (lo) : pp_bf16_to_f32 (lo);
      v[2 * q + 1] = T == PP_CUDA_F16 ? pp_f16_to_f32 (hi)
          : pp_bf16_to_f32 (hi);
    }
  }
}

/* Elements @i … @i + 7 of @p (@i a multiple of 8, @p 16-byte aligned). */
template <PpCudaType T> __device__ __forceinline__ void
pp_cuda_load8 (const void *p, size_t i, float v[PP_CUDA_VEC])
{
  pp_cuda_widen8<T> (pp_cuda_raw8<T> (p, i), v);
}

template <PpCudaType T> __device__ __forceinline__ void
pp_cuda_store8 (void *p, size_t i, const float v[PP_CUDA_VEC])
{
  if (T == PP_CUDA_F32) {
    ((float4 *) p)[i / 4] = make_float4 (v[0], v[1], v[2], v[3]);
    ((float4 *) p)[i / 4 + 1] = make_float4 (v[4], v[5], v[6], v[7]);
  } else {
    uint32_t w[4];

    PP_CUDA_UNROLL
    for (int q = 0; q < 4; q++) {
      const uint32_t lo = T == PP_CUDA_F16 ? pp_f32_to_f16 (v[2 * q])
          : pp_f32_to_bf16 (v[2 * q]);
      const uint32_t hi = T == PP_CUDA_F16 ? pp_f32_to_f16 (v[2 * q + 1])
          : pp_f32_to_bf16 (v[2 * q + 1]);

      w[q] = lo | hi << 16;
    }
    ((uint4 *) p)[i / 8] = make_uint4 (w[0], w[1], w[2], w[3]);
  }
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

/* Programmatic dependent launches (PPDIFFUSE_CUDA_PDL=on, on sm_90 and
 * later; pp_cuda_set_programmatic): each kernel is launched with
 * programmatic stream serialization, so the device may start it while
 * the kernel before it on the stream (or its node before it in a graph)
 * still runs, hiding the gap between the two.  Correct only because every
 * kernel here calls pp_cuda_wait_prior first, before it reads or writes
 * any memory: griddepcontrol.wait returns once the grids it depends on
 * have completed and their writes are visible (at once for a kernel
 * launched without the attribute).  It then lets the kernel after it be
 * launched (griddepcontrol.launch_dependents), which waits in turn: the
 * next kernel's blocks are placed as this one's last ones finish.  Off,
 * each launch is the plain <<<…>>> one. */
extern int pp_cuda_programmatic_launches;

__device__ __forceinline__ void
pp_cuda_wait_prior ()
{
#ifdef __CUDACC__
#if defined (__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile ("griddepcontrol.wait;":::"memory");
  asm volatile ("griddepcontrol.launch_dependents;":::"memory");
#endif
#else
  emu_grid_wait ();
#endif
}

/* Launches @kernel (a kernel of these files, which begins with
 * pp_cuda_wait_prior) on @stream: PP_CUDA_LAUNCH (kernel, grid, block,
 * shared bytes, stream, arguments…); a template instance with several
 * arguments goes in parentheses.  Its status is cudaGetLastError's, as a
 * <<<…>>> launch's. */
#define PP_CUDA_LAUNCH(kernel, grid, block, shmem, stream, ...)              \
  pp_cuda_launch (#kernel, kernel, grid, block, shmem, stream, __VA_ARGS__)

#ifdef __CUDACC__
/* @kernel launched on @stream with the one launch attribute @attr. */
template <typename... P, typename... A> static inline void
pp_cuda_launch_ex (cudaLaunchAttribute attr, void (*kernel) (P...),
    dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, A... args)
{
  cudaLaunchConfig_t config = { };

  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shmem;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  (void) cudaLaunchKernelEx (&config, kernel, args...);
}

template <typename... P, typename... A> static inline void
pp_cuda_launch (const char *, void (*kernel) (P...), dim3 grid, dim3 block,
    size_t shmem, cudaStream_t stream, A... args)
{
  if (pp_cuda_programmatic_launches) {
    cudaLaunchAttribute attr = { };

    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    pp_cuda_launch_ex (attr, kernel, grid, block, shmem, stream, args...);
  } else {
    kernel<<<grid, block, shmem, stream>>> (args...);
  }
}
#else
/* The emulation: every thread of the launch must call pp_cuda_wait_prior
 * (emu_launch's check), whichever way the backend launches. */
template <typename... P, typename... A> static inline void
pp_cuda_launch (const char *name, void (*kernel) (P...), dim3 grid,
    dim3 block, size_t shmem, cudaStream_t stream, A... args)
{
  emu_launch (grid, block, shmem, stream, emu_kernel_name (name),
      [=] { kernel (args...); }, EMU_LAUNCH_WAITS);
}
#endif

/* A cooperative launch of @kernel (as PP_CUDA_LAUNCH's, without
 * programmatic serialization): its blocks are resident on the device at
 * once, or the launch fails (cudaErrorCooperativeLaunchTooLarge), so
 * that a block may wait for the others (pp_cuda_blocks_meet).  A graph
 * keeps the attribute in its kernel node.  pp_cuda_resident_blocks says
 * how many blocks it may take. */
#define PP_CUDA_LAUNCH_TOGETHER(kernel, grid, block, shmem, stream, ...)     \
  pp_cuda_launch_together (#kernel, kernel, grid, block, shmem, stream,      \
      __VA_ARGS__)

#ifdef __CUDACC__
template <typename... P, typename... A> static inline void
pp_cuda_launch_together (const char *, void (*kernel) (P...), dim3 grid,
    dim3 block, size_t shmem, cudaStream_t stream, A... args)
{
  cudaLaunchAttribute attr = { };

  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  pp_cuda_launch_ex (attr, kernel, grid, block, shmem, stream, args...);
}

/* The blocks of @threads threads (no dynamic shared memory) of @kernel
 * the current device holds at once: its SMs times the blocks of it an SM
 * holds; 0 where the runtime cannot say, or the device takes no
 * cooperative launch. */
template <typename... P> static inline int
pp_cuda_resident_blocks (void (*kernel) (P...), unsigned threads)
{
  int device, cooperative, sms, per_sm;

  if (cudaGetDevice (&device) != cudaSuccess
      || cudaDeviceGetAttribute (&cooperative, cudaDevAttrCooperativeLaunch,
          device) != cudaSuccess || !cooperative
      || cudaDeviceGetAttribute (&sms, cudaDevAttrMultiProcessorCount,
          device) != cudaSuccess
      || cudaOccupancyMaxActiveBlocksPerMultiprocessor (&per_sm, kernel,
          (int) threads, 0) != cudaSuccess)
    return 0;
  return sms * per_sm;
}
#else
template <typename... P, typename... A> static inline void
pp_cuda_launch_together (const char *name, void (*kernel) (P...),
    dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, A... args)
{
  emu_launch (grid, block, shmem, stream, emu_kernel_name (name),
      [=] { kernel (args...); }, EMU_LAUNCH_WAITS | EMU_LAUNCH_TOGETHER);
}

template <typename... P> static inline int
pp_cuda_resident_blocks (void (*) (P...), unsigned threads)
{
  return emu_resident_blocks (threads);
}
#endif

/* How long a block waits for the others in pp_cuda_blocks_meet before it
 * gives up, in the SM's clock cycles: about a second. */
#define PP_CUDA_MEET_CYCLES (1ll << 31)

/* Called by one thread of each of the @blocks blocks of a cooperative
 * launch (PP_CUDA_LAUNCH_TOGETHER) with the same @arrived (0 before every
 * call, and after it) and @generation (any value; one more after): it
 * returns in each once all have called it, every write a block made
 * before its call visible to the others' loads past their caches
 * (__ldcg) after theirs.  The last block to arrive sets @arrived back to
 * 0 and moves @generation on; the others wait for it to move.  A block
 * that waits about a second (blocks not resident at once: a launch that
 * was not cooperative) traps, so the launch fails rather than hang. */
__device__ __forceinline__ void
pp_cuda_blocks_meet (unsigned *arrived, unsigned *generation,
    unsigned blocks)
{
  /* The generation before this block's arrival can move it. */
  const unsigned seen = *(volatile unsigned *) generation;

  __threadfence ();
  if (atomicAdd (arrived, 1u) == blocks - 1) {
    atomicExch (arrived, 0u);
    __threadfence ();
    atomicAdd (generation, 1u);
    return;
  }
#ifdef __CUDACC__
  const long long start = clock64 ();

  while (*(volatile unsigned *) generation == seen)
    if (clock64 () - start > PP_CUDA_MEET_CYCLES)
      __trap ();
  __threadfence ();
#else
  while (*(volatile unsigned *) generation == seen)
    emu_wait_change (generation, seen);
#endif
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
