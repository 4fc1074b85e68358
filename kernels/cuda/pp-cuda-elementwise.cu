/* ppdiffuse — element-wise CUDA kernels: the formulas of pp-ops-math.h,
 * one element per thread in grid-stride loops. */
#include "pp-cuda-common.cuh"
#include "pp-ops-math.h"

/* Set once, when a backend is made (pp_cuda_set_programmatic). */
int pp_cuda_programmatic_launches;

extern "C" void
pp_cuda_set_programmatic (int on)
{
  pp_cuda_programmatic_launches = on;
}

__global__ void
fill_kernel (float *x, float value, size_t n)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) x[i] = value;
}

extern "C" cudaError_t
pp_cuda_fill (float *x, float value, size_t n, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (fill_kernel, pp_cuda_blocks (n, PP_CUDA_THREADS),
      PP_CUDA_THREADS, 0, stream, x, value, n);
  return cudaGetLastError ();
}

extern "C" cudaError_t
pp_cuda_kernel_image (int *binary_version)
{
  cudaFuncAttributes attributes;
  const cudaError_t e = cudaFuncGetAttributes (&attributes, fill_kernel);

  if (e != cudaSuccess) {
    /* Answered here: not the next launch's error. */
    (void) cudaGetLastError ();
    return e;
  }
  *binary_version = attributes.binaryVersion;
  return cudaSuccess;
}

template <PpCudaUnary OP> __device__ __forceinline__ float
unary_of (float v)
{
  switch (OP) {
    case PP_CUDA_SILU:
      return pp_math_silu (v);
    case PP_CUDA_RELU:
      return pp_math_relu (v);
    case PP_CUDA_TANH:
      return pp_math_tanh (v);
    case PP_CUDA_GELU:
      return pp_math_gelu_erf (v);
    default:                   /* PP_CUDA_QUICK_GELU */
      return pp_math_quick_gelu (v);
  }
}

template <PpCudaUnary OP, PpCudaType T> __global__ void
unary_kernel (void *x, size_t n)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) pp_cuda_store<T> (x, i, unary_of<OP> (pp_cuda_load<T>
          (x, i)));
}

/* The same eight elements at a time (n a multiple of 8, x aligned). */
template <PpCudaUnary OP, PpCudaType T> __global__ void
unary8_kernel (void *x, size_t n)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (k, n / PP_CUDA_VEC) {
    float v[PP_CUDA_VEC];

    pp_cuda_load8<T> (x, k * PP_CUDA_VEC, v);
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++)
      v[q] = unary_of<OP> (v[q]);
    pp_cuda_store8<T> (x, k * PP_CUDA_VEC, v);
  }
}

template <PpCudaUnary OP> static void
unary_launch (void *x, PpCudaType type, size_t n, cudaStream_t stream)
{
  if (n % PP_CUDA_VEC == 0 && pp_cuda_vec_aligned (x)) {
    const unsigned blocks = pp_cuda_blocks (n / PP_CUDA_VEC,
        PP_CUDA_THREADS);

    PP_CUDA_DISPATCH_TYPE (type, T,
        PP_CUDA_LAUNCH ((unary8_kernel<OP, T>), blocks, PP_CUDA_THREADS, 0,
            stream, x, n));
    return;
  }
  PP_CUDA_DISPATCH_TYPE (type, T,
      PP_CUDA_LAUNCH ((unary_kernel<OP, T>), pp_cuda_blocks (n,
          PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x, n));
}

extern "C" cudaError_t
pp_cuda_unary (PpCudaUnary op, void *x, PpCudaType type, size_t n,
    cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  switch (op) {
    case PP_CUDA_SILU:
      unary_launch<PP_CUDA_SILU> (x, type, n, stream);
      break;
    case PP_CUDA_RELU:
      unary_launch<PP_CUDA_RELU> (x, type, n, stream);
      break;
    case PP_CUDA_TANH:
      unary_launch<PP_CUDA_TANH> (x, type, n, stream);
      break;
    case PP_CUDA_GELU:
      unary_launch<PP_CUDA_GELU> (x, type, n, stream);
      break;
    case PP_CUDA_QUICK_GELU:
      unary_launch<PP_CUDA_QUICK_GELU> (x, type, n, stream);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError ();
}

template <PpCudaType T> __global__ void
geglu_kernel (const void *x, size_t rows, int d, void *y)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, rows * d) {
    const size_t r = i / d, j = i % d;
    const size_t row = r * 2 * d;

    pp_cuda_store<T> (y, i, pp_math_geglu (pp_cuda_load<T> (x, row + j),
            pp_cuda_load<T> (x, row + d + j)));
  }
}

/* Eight outputs at a time: d a multiple of 8, x and y aligned, at most
 * PP_CUDA_VECTORS_MAX vectors (the row of each found by a 32-bit
 * division, once per eight, where the scalar kernel divides 64-bit
 * numbers per element). */
template <PpCudaType T> __global__ void
geglu8_kernel (const void *x, unsigned vectors, unsigned per_row, void *y)
{
  pp_cuda_wait_prior ();
  for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < vectors;
      k += gridDim.x * blockDim.x) {
    const unsigned r = k / per_row, j = (k - r * per_row) * PP_CUDA_VEC;
    const size_t d = (size_t) per_row * PP_CUDA_VEC;
    const size_t row = (size_t) r * 2 * d;
    float a[PP_CUDA_VEC], g[PP_CUDA_VEC];

    pp_cuda_load8<T> (x, row + j, a);
    pp_cuda_load8<T> (x, row + d + j, g);
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++)
      a[q] = pp_math_geglu (a[q], g[q]);
    pp_cuda_store8<T> (y, (size_t) k * PP_CUDA_VEC, a);
  }
}

extern "C" cudaError_t
pp_cuda_geglu (const void *x, size_t rows, int d, void *y, PpCudaType type,
    cudaStream_t stream)
{
  const size_t n = rows * d;

  if (n == 0)
    return cudaSuccess;
  if (d % PP_CUDA_VEC == 0 && n / PP_CUDA_VEC <= PP_CUDA_VECTORS_MAX
      && pp_cuda_vec_aligned (x) && pp_cuda_vec_aligned (y)) {
    const unsigned vectors = (unsigned) (n / PP_CUDA_VEC);

    PP_CUDA_DISPATCH_TYPE (type, T,
        PP_CUDA_LAUNCH (geglu8_kernel<T>, pp_cuda_blocks (vectors,
            PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x, vectors,
            (unsigned) (d / PP_CUDA_VEC), y));
    return cudaGetLastError ();
  }
  PP_CUDA_DISPATCH_TYPE (type, T,
      PP_CUDA_LAUNCH (geglu_kernel<T>, pp_cuda_blocks (n, PP_CUDA_THREADS),
          PP_CUDA_THREADS, 0, stream, x, rows, d, y));
  return cudaGetLastError ();
}

template <PpCudaType Y, PpCudaType X> __global__ void
add_kernel (void *y, const void *x, size_t n)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) pp_cuda_store<Y> (y, i, pp_cuda_load<Y> (y, i)
      + pp_cuda_load<X> (x, i));
}

/* Eight at a time: n a multiple of 8, y and x aligned. */
template <PpCudaType Y, PpCudaType X> __global__ void
add8_kernel (void *y, const void *x, size_t n)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (k, n / PP_CUDA_VEC) {
    float a[PP_CUDA_VEC], b[PP_CUDA_VEC];

    pp_cuda_load8<Y> (y, k * PP_CUDA_VEC, a);
    pp_cuda_load8<X> (x, k * PP_CUDA_VEC, b);
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++)
      a[q] += b[q];
    pp_cuda_store8<Y> (y, k * PP_CUDA_VEC, a);
  }
}

extern "C" cudaError_t
pp_cuda_add (void *y, PpCudaType y_type, const void *x, PpCudaType x_type,
    size_t n, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  if (n % PP_CUDA_VEC == 0 && pp_cuda_vec_aligned (y)
      && pp_cuda_vec_aligned (x)) {
    PP_CUDA_DISPATCH_TYPE (y_type, Y,
        PP_CUDA_DISPATCH_TYPE (x_type, X,
            PP_CUDA_LAUNCH ((add8_kernel<Y, X>), pp_cuda_blocks (n /
                PP_CUDA_VEC, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, y,
                x, n)));
    return cudaGetLastError ();
  }
  PP_CUDA_DISPATCH_TYPE (y_type, Y,
      PP_CUDA_DISPATCH_TYPE (x_type, X,
          PP_CUDA_LAUNCH ((add_kernel<Y, X>), pp_cuda_blocks (n,
              PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, y, x, n)));
  return cudaGetLastError ();
}

template <PpCudaType T> __global__ void
scale_kernel (void *x, size_t n, float s)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) pp_cuda_store<T> (x, i, pp_cuda_load<T> (x, i) * s);
}

extern "C" cudaError_t
pp_cuda_scale (void *x, PpCudaType type, size_t n, float s,
    cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (type, T,
      PP_CUDA_LAUNCH (scale_kernel<T>, pp_cuda_blocks (n, PP_CUDA_THREADS),
          PP_CUDA_THREADS, 0, stream, x, n, s));
  return cudaGetLastError ();
}

template <PpCudaType T> __global__ void
affine_kernel (void *x, size_t n, float mul, float add)
{
  pp_cuda_wait_prior ();
  /* Multiply and add rounded separately, as the CPU's loop does (no FMA
   * contraction). */
  PP_CUDA_FOR (i, n) pp_cuda_store<T> (x, i,
      __fadd_rn (__fmul_rn (pp_cuda_load<T> (x, i), mul), add));
}

extern "C" cudaError_t
pp_cuda_affine (void *x, PpCudaType type, size_t n, float mul, float add,
    cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (type, T,
      PP_CUDA_LAUNCH (affine_kernel<T>, pp_cuda_blocks (n, PP_CUDA_THREADS),
          PP_CUDA_THREADS, 0, stream, x, n, mul, add));
  return cudaGetLastError ();
}

__global__ void
axpby_kernel (float *y, float a, const float *x, float b, size_t n)
{
  pp_cuda_wait_prior ();
  /* With b = 0, y is only written: whatever it held (a NaN of a fresh
   * buffer) must not leak in as 0·NaN. */
  if (b == 0.0f) {
    PP_CUDA_FOR (i, n) y[i] = a * x[i];
  } else {
    PP_CUDA_FOR (i, n) y[i] = __fadd_rn (__fmul_rn (a, x[i]),
        __fmul_rn (b, y[i]));
  }
}

extern "C" cudaError_t
pp_cuda_axpby (float *y, float a, const float *x, float b, size_t n,
    cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (axpby_kernel, pp_cuda_blocks (n, PP_CUDA_THREADS),
      PP_CUDA_THREADS, 0, stream, y, a, x, b, n);
  return cudaGetLastError ();
}

__global__ void
lcm_step_kernel (float *x, const float *eps, const float *noise, size_t n,
    PpLcmCoeffs c)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) x[i] = pp_math_lcm_step (&c, x[i], eps[i],
      noise != NULL ? noise[i] : 0.0f);
}

extern "C" cudaError_t
pp_cuda_lcm_step (float *x, const float *eps, const float *noise, size_t n,
    PpLcmCoeffs coeffs, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (lcm_step_kernel, pp_cuda_blocks (n, PP_CUDA_THREADS),
      PP_CUDA_THREADS, 0, stream, x, eps, noise, n, coeffs);
  return cudaGetLastError ();
}

/* The frequencies of an embedding of up to this many (a UNet's 320 or
 * 1280 channels: 160 or 640) travel with its launch, computed on the host:
 * the device's expf and logf may be an ulp or two off the host's libm,
 * which moved the argument by up to 6e-5 at t = 999.  Wider embeddings
 * compute theirs on the device. */
#define TIMESTEP_HOST_FREQS 640

typedef struct
{
  float f[TIMESTEP_HOST_FREQS];
} TimestepFreqs;

__global__ void
timestep_embedding_kernel (float t, int dim, int flip, float freq_shift,
    TimestepFreqs freqs, float *y)
{
  pp_cuda_wait_prior ();
  const int half = dim / 2;

  for (int k = blockIdx.x * blockDim.x + threadIdx.x; k < half;
      k += gridDim.x * blockDim.x) {
    /* As on the CPU: the argument rounded to float, then sin and cos of
     * it in double. */
    const float freq = half <= TIMESTEP_HOST_FREQS ? freqs.f[k]
        : pp_math_timestep_freq (k, half, freq_shift);
    const float arg = t * freq;

    y[(flip ? half : 0) + k] = (float) sin ((double) arg);
    y[(flip ? 0 : half) + k] = (float) cos ((double) arg);
  }
  if (dim % 2 && blockIdx.x == 0 && threadIdx.x == 0)
    y[dim - 1] = 0.0f;
}

extern "C" cudaError_t
pp_cuda_timestep_embedding (float t, int dim, int flip_sin_to_cos,
    float freq_shift, float *y, cudaStream_t stream)
{
  const int half = dim / 2;
  TimestepFreqs freqs = { };

  if (dim <= 0)
    return cudaSuccess;
  /* The host's libm, as the CPU backend's. */
  for (int k = 0; k < half && k < TIMESTEP_HOST_FREQS; k++)
    freqs.f[k] = pp_math_timestep_freq (k, half, freq_shift);
  PP_CUDA_LAUNCH (timestep_embedding_kernel, pp_cuda_blocks ((size_t) dim / 2 +
      1, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, t, dim, flip_sin_to_cos,
      freq_shift, freqs, y);
  return cudaGetLastError ();
}

template <PpCudaType B> __global__ void
row_bias_kernel (float *y, size_t rows, int cols, const void *bias)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, rows * cols) y[i] += pp_cuda_load<B> (bias, i % cols);
}

extern "C" cudaError_t
pp_cuda_add_row_bias (float *y, size_t rows, int cols, const void *bias,
    PpCudaType bias_type, cudaStream_t stream)
{
  const size_t n = rows * cols;

  if (n == 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (bias_type, B,
      PP_CUDA_LAUNCH (row_bias_kernel<B>, pp_cuda_blocks (n, PP_CUDA_THREADS),
          PP_CUDA_THREADS, 0, stream, y, rows, cols, bias));
  return cudaGetLastError ();
}

template <PpCudaType X, PpCudaType Y, PpCudaType B> __global__ void
channel_bias_kernel (const void *x, void *y, int c, size_t hw, size_t n,
    const void *bias, const void *res, int relu)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) {
    /* Without a bias the value as it is (x + 0 would turn -0 into +0). */
    float v = bias != NULL ? pp_cuda_load<X> (x, i)
        + pp_cuda_load<B> (bias, (i / hw) % c) : pp_cuda_load<X> (x, i);

    if (res != NULL)
      v += pp_cuda_load<Y> (res, i);
    pp_cuda_store<Y> (y, i, relu ? pp_math_relu (v) : v);
  }
}

/* Rows of c channels (hw 1: channels last), eight channels at a time: c a
 * multiple of 8, x, y and the bias aligned, at most PP_CUDA_VECTORS_MAX
 * vectors (the column found by a 32-bit remainder once per eight, where
 * the scalar kernel divides 64-bit numbers per element). */
template <PpCudaType X, PpCudaType Y, PpCudaType B> __global__ void
channel_bias8_kernel (const void *x, void *y, unsigned per_row,
    unsigned vectors, const void *bias, const void *res, int relu)
{
  pp_cuda_wait_prior ();
  for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < vectors;
      k += gridDim.x * blockDim.x) {
    const size_t i = (size_t) k * PP_CUDA_VEC;
    float v[PP_CUDA_VEC], b[PP_CUDA_VEC], r[PP_CUDA_VEC];

    pp_cuda_load8<X> (x, i, v);
    if (res != NULL)
      pp_cuda_load8<Y> (res, i, r);
    if (bias != NULL) {
      pp_cuda_load8<B> (bias, (size_t) (k % per_row) * PP_CUDA_VEC, b);
      PP_CUDA_UNROLL
      for (int q = 0; q < PP_CUDA_VEC; q++)
        v[q] += b[q];
    }
    if (res != NULL) {
      PP_CUDA_UNROLL
      for (int q = 0; q < PP_CUDA_VEC; q++)
        v[q] += r[q];
    }
    if (relu) {
      PP_CUDA_UNROLL
      for (int q = 0; q < PP_CUDA_VEC; q++)
        v[q] = pp_math_relu (v[q]);
    }
    pp_cuda_store8<Y> (y, i, v);
  }
}

extern "C" cudaError_t
pp_cuda_channel_bias_residual (const void *x, PpCudaType x_type, void *y,
    PpCudaType y_type, int n, int c, size_t hw, const void *bias,
    PpCudaType bias_type, const void *res, int relu, cudaStream_t stream)
{
  const size_t total = (size_t) n * c * hw;
  const unsigned blocks = pp_cuda_blocks (total, PP_CUDA_THREADS);

  if (total == 0)
    return cudaSuccess;
  if (hw == 1 && c % PP_CUDA_VEC == 0
      && total / PP_CUDA_VEC <= PP_CUDA_VECTORS_MAX
      && pp_cuda_vec_aligned (x) && pp_cuda_vec_aligned (y)
      && (bias == NULL || pp_cuda_vec_aligned (bias))
      && (res == NULL || pp_cuda_vec_aligned (res))) {
    const unsigned vectors = (unsigned) (total / PP_CUDA_VEC);

    PP_CUDA_DISPATCH_TYPE (x_type, X,
        PP_CUDA_DISPATCH_TYPE (y_type, Y,
            PP_CUDA_DISPATCH_TYPE (bias_type, B,
                PP_CUDA_LAUNCH ((channel_bias8_kernel<X, Y, B>), pp_cuda_blocks
                    (vectors, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x,
                    y, (unsigned) (c / PP_CUDA_VEC), vectors, bias, res,
                    relu))));
    return cudaGetLastError ();
  }
  PP_CUDA_DISPATCH_TYPE (x_type, X,
      PP_CUDA_DISPATCH_TYPE (y_type, Y,
          PP_CUDA_DISPATCH_TYPE (bias_type, B,
              PP_CUDA_LAUNCH ((channel_bias_kernel<X, Y, B>), blocks,
                  PP_CUDA_THREADS, 0, stream, x, y, c, hw, total, bias, res,
                  relu))));
  return cudaGetLastError ();
}

extern "C" cudaError_t
pp_cuda_channel_bias (const void *x, PpCudaType x_type, void *y,
    PpCudaType y_type, int n, int c, size_t hw, const void *bias,
    PpCudaType bias_type, int relu, cudaStream_t stream)
{
  return pp_cuda_channel_bias_residual (x, x_type, y, y_type, n, c, hw, bias,
      bias_type, NULL, relu, stream);
}

template <PpCudaType Y> __global__ void
narrow_kernel (const float *x, size_t cols, size_t ld, uint16_t *y,
    size_t n)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) {
    /* Packed rows (the common case) need no 64-bit division. */
    const float v = ld == cols ? x[i] : x[(i / cols) * ld + i % cols];

    y[i] = Y == PP_CUDA_BF16 ? pp_f32_to_bf16 (v) : pp_f32_to_f16 (v);
  }
}

extern "C" cudaError_t
pp_cuda_narrow_2d (const float *x, size_t rows, size_t cols, size_t ld,
    void *y, PpCudaType y_type, cudaStream_t stream)
{
  const size_t n = rows * cols;
  const unsigned blocks = pp_cuda_blocks (n, PP_CUDA_THREADS);

  if (n == 0)
    return cudaSuccess;
  if (y_type == PP_CUDA_BF16)
    PP_CUDA_LAUNCH (narrow_kernel<PP_CUDA_BF16>, blocks, PP_CUDA_THREADS, 0,
        stream, x, cols, ld, (uint16_t *) y, n);
  else if (y_type == PP_CUDA_F16)
    PP_CUDA_LAUNCH (narrow_kernel<PP_CUDA_F16>, blocks, PP_CUDA_THREADS, 0,
        stream, x, cols, ld, (uint16_t *) y, n);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError ();
}

/* A frame's pixels as bytes: widened to floats, and the decoded floats
 * back to bytes (pp_math_to_byte: the host's formula, bit for bit). */
__global__ void
bytes_to_floats_kernel (const uint8_t *x, size_t n, float *y)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) y[i] = (float) x[i];
}

extern "C" cudaError_t
pp_cuda_bytes_to_floats (const uint8_t *x, size_t n, float *y,
    cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (bytes_to_floats_kernel, pp_cuda_blocks (n, PP_CUDA_THREADS),
      PP_CUDA_THREADS, 0, stream, x, n, y);
  return cudaGetLastError ();
}

__global__ void
floats_to_bytes_kernel (const float *x, size_t n, uint8_t *y)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, n) y[i] = pp_math_to_byte (x[i]);
}

extern "C" cudaError_t
pp_cuda_floats_to_bytes (const float *x, size_t n, uint8_t *y,
    cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (floats_to_bytes_kernel, pp_cuda_blocks (n, PP_CUDA_THREADS),
      PP_CUDA_THREADS, 0, stream, x, n, y);
  return cudaGetLastError ();
}
