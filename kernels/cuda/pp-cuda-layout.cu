/* ppdiffuse — data movement on the device: nearest and bilinear resampling,
 * channel concatenation, NCHW ↔ NLC transposes (also between storage
 * types, for the NHWC convolutions), per-channel adds.  Activations of
 * any storage type (PpCudaType), except the bilinear resize's
 * (float32: rank 0's frames). */
#include "pp-cuda-common.cuh"
#include "pp-ops-math.h"

template <PpCudaType T> __global__ void
upsample_nearest_kernel (const void *x, size_t planes, int h, int w,
    int factor, void *y)
{
  pp_cuda_wait_prior ();
  const size_t wo = (size_t) w * factor, ho = (size_t) h * factor;

  PP_CUDA_FOR (i, planes * ho * wo) {
    const size_t ox = i % wo, oy = (i / wo) % ho, plane = i / (wo * ho);

    pp_cuda_store<T> (y, i, pp_cuda_load<T> (x, (plane * h + oy / factor)
            * w + ox / factor));
  }
}

/* Channels last: x [n, h, w, c] → y [n, h·f, w·f, c], each output
 * pixel's c channels those of its source pixel. */
template <PpCudaType T> __global__ void
upsample_nearest_nhwc_kernel (const void *x, int n, int c, int h, int w,
    int factor, void *y)
{
  pp_cuda_wait_prior ();
  const size_t wo = (size_t) w * factor, ho = (size_t) h * factor;

  PP_CUDA_FOR (i, (size_t) n * ho * wo * c) {
    const size_t ch = i % c, pixel = i / c;
    const size_t ox = pixel % wo, oy = (pixel / wo) % ho;
    const size_t sample = pixel / (wo * ho);

    pp_cuda_store<T> (y, i, pp_cuda_load<T> (x, ((sample * h + oy / factor)
                * w + ox / factor) * c + ch));
  }
}

/* The same eight channels at a time: c a multiple of 8, x and y aligned,
 * at most PP_CUDA_VECTORS_MAX vectors (each vector's pixel found by
 * 32-bit divisions, where the scalar kernel makes five 64-bit ones per
 * element). */
template <PpCudaType T> __global__ void
upsample_nearest_nhwc8_kernel (const void *x, unsigned vectors,
    unsigned per_pixel, unsigned h, unsigned w, unsigned factor, void *y)
{
  pp_cuda_wait_prior ();
  const unsigned wo = w * factor, ho = h * factor;

  for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < vectors;
      k += gridDim.x * blockDim.x) {
    const unsigned pixel = k / per_pixel, ch = k - pixel * per_pixel;
    const unsigned ox = pixel % wo, rest = pixel / wo;
    const unsigned oy = rest % ho, sample = rest / ho;
    const size_t source = ((size_t) sample * h + oy / factor) * w
        + ox / factor;
    float v[PP_CUDA_VEC];

    pp_cuda_load8<T> (x, (source * per_pixel + ch) * PP_CUDA_VEC, v);
    pp_cuda_store8<T> (y, (size_t) k * PP_CUDA_VEC, v);
  }
}

extern "C" cudaError_t
pp_cuda_upsample_nearest (const void *x, PpCudaType type, int n, int c,
    int h, int w, int factor, int nhwc, void *y, cudaStream_t stream)
{
  const size_t total = (size_t) n * c * h * factor * w * factor;
  const unsigned blocks = pp_cuda_blocks (total, PP_CUDA_THREADS);

  if (total == 0)
    return cudaSuccess;
  if (nhwc && c % PP_CUDA_VEC == 0 && total / PP_CUDA_VEC <= PP_CUDA_VECTORS_MAX
      && pp_cuda_vec_aligned (x) && pp_cuda_vec_aligned (y)) {
    const unsigned vectors = (unsigned) (total / PP_CUDA_VEC);

    PP_CUDA_DISPATCH_TYPE (type, T,
        PP_CUDA_LAUNCH (upsample_nearest_nhwc8_kernel<T>, pp_cuda_blocks
            (vectors, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x, vectors,
            (unsigned) (c / PP_CUDA_VEC), (unsigned) h, (unsigned) w,
            (unsigned) factor, y));
    return cudaGetLastError ();
  }
  if (nhwc)
    PP_CUDA_DISPATCH_TYPE (type, T,
        PP_CUDA_LAUNCH (upsample_nearest_nhwc_kernel<T>, blocks,
            PP_CUDA_THREADS, 0, stream, x, n, c, h, w, factor, y));
  else
    PP_CUDA_DISPATCH_TYPE (type, T,
        PP_CUDA_LAUNCH (upsample_nearest_kernel<T>, blocks, PP_CUDA_THREADS, 0,
            stream, x, (size_t) n * c, h, w, factor, y));
  return cudaGetLastError ();
}

/* Source coordinate and weight of output coordinate @o: half-pixel
 * centres, clamped to the edge; in double as the CPU computes it. */
__device__ __forceinline__ void
bilinear_tap (int o, double scale, int in, int *i0, int *i1, float *frac)
{
  double f = (o + 0.5) * scale - 0.5;

  f = f < 0.0 ? 0.0 : (f > in - 1.0 ? in - 1.0 : f);
  *i0 = (int) f;
  *i1 = *i0 + 1 < in ? *i0 + 1 : in - 1;
  *frac = (float) (f - *i0);
}

__global__ void
resize_bilinear_kernel (const float *x, int c, int h, int w, float *y,
    int ho, int wo)
{
  pp_cuda_wait_prior ();
  const double sy = (double) h / ho, sx = (double) w / wo;

  PP_CUDA_FOR (i, (size_t) c * ho * wo) {
    const int ox = (int) (i % wo), oy = (int) ((i / wo) % ho);
    const float *p = x + (i / ((size_t) wo * ho)) * h * w;
    int y0, y1, x0, x1;
    float wy, wx, top, bottom;

    bilinear_tap (oy, sy, h, &y0, &y1, &wy);
    bilinear_tap (ox, sx, w, &x0, &x1, &wx);
    top = p[(size_t) y0 * w + x0] * (1 - wx) + p[(size_t) y0 * w + x1] * wx;
    bottom = p[(size_t) y1 * w + x0] * (1 - wx)
        + p[(size_t) y1 * w + x1] * wx;
    y[i] = top * (1 - wy) + bottom * wy;
  }
}

extern "C" cudaError_t
pp_cuda_resize_bilinear (const float *x, int c, int h, int w, float *y,
    int ho, int wo, cudaStream_t stream)
{
  const size_t total = (size_t) c * ho * wo;

  if (total == 0)
    return cudaSuccess;
  PP_CUDA_LAUNCH (resize_bilinear_kernel, pp_cuda_blocks (total,
      PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x, c, h, w, y, ho, wo);
  return cudaGetLastError ();
}

template <PpCudaType T> __global__ void
concat_channels_kernel (const void *a, int ca, const void *b, int cb,
    size_t n, size_t hw, void *y)
{
  pp_cuda_wait_prior ();
  const size_t per_sample = (size_t) (ca + cb) * hw;
  const size_t a_part = (size_t) ca * hw, b_part = (size_t) cb * hw;

  PP_CUDA_FOR (i, n * per_sample) {
    const size_t s = i / per_sample, j = i % per_sample;

    pp_cuda_store<T> (y, i, j < a_part ? pp_cuda_load<T> (a, s * a_part + j)
        : pp_cuda_load<T> (b, s * b_part + j - a_part));
  }
}

extern "C" cudaError_t
pp_cuda_concat_channels (const void *a, int ca, const void *b, int cb,
    int n, size_t hw, void *y, PpCudaType type, cudaStream_t stream)
{
  const size_t total = (size_t) n * (ca + cb) * hw;

  if (total == 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (type, T,
      PP_CUDA_LAUNCH (concat_channels_kernel<T>, pp_cuda_blocks (total,
          PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, a, ca, b, cb, n, hw,
          y));
  return cudaGetLastError ();
}

/* A 3×3 convolution of a nearest ×2 upsampling as its four output
 * phases (the interleave_phases op): z [n, 4c, h + 1, w + 1] → y [n, c,
 * 2h, 2w], y[n, k, 2i + a, 2j + b] = z[n, (2a + b)c + k, i + a, j + b].
 * Channels first, a thread an output value. */
template <PpCudaType T> __global__ void
interleave_phases_kernel (const void *z, int c, int h, int w, size_t total,
    void *y)
{
  pp_cuda_wait_prior ();
  const size_t wo = 2 * (size_t) w, ho = 2 * (size_t) h;
  const size_t zw = (size_t) w + 1, zh = (size_t) h + 1;

  PP_CUDA_FOR (o, total) {
    const size_t ox = o % wo, oy = (o / wo) % ho, plane = o / (wo * ho);
    const size_t k = plane % c, s = plane / c;
    const size_t a = oy & 1, b = ox & 1;

    pp_cuda_store<T> (y, o, pp_cuda_load<T> (z, ((s * 4 + 2 * a + b) * c
                + k) * zh * zw + (oy / 2 + a) * zw + ox / 2 + b));
  }
}

/* Channels last: each output pixel's c channels are one run of z's, eight
 * a thread (one 16-byte load and store: c a multiple of 8, z and y
 * aligned, at most PP_CUDA_VECTORS_MAX vectors). */
template <PpCudaType T> __global__ void
interleave_phases_nhwc8_kernel (const void *z, unsigned per_pixel,
    unsigned h, unsigned w, unsigned vectors, void *y)
{
  pp_cuda_wait_prior ();
  const unsigned wo = 2 * w, ho = 2 * h;

  for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < vectors;
      k += gridDim.x * blockDim.x) {
    const unsigned pixel = k / per_pixel, v = k - pixel * per_pixel;
    const unsigned ox = pixel % wo, rest = pixel / wo;
    const unsigned oy = rest % ho, s = rest / ho;
    const unsigned a = oy & 1, b = ox & 1;
    const size_t source = ((size_t) s * (h + 1) + oy / 2 + a) * (w + 1)
        + ox / 2 + b;
    float x[PP_CUDA_VEC];

    pp_cuda_load8<T> (z, ((source * 4 + 2 * a + b) * per_pixel + v)
        * PP_CUDA_VEC, x);
    pp_cuda_store8<T> (y, (size_t) k * PP_CUDA_VEC, x);
  }
}

/* The same one value a thread, for any c. */
template <PpCudaType T> __global__ void
interleave_phases_nhwc_kernel (const void *z, int c, int h, int w,
    size_t total, void *y)
{
  pp_cuda_wait_prior ();
  const size_t wo = 2 * (size_t) w, ho = 2 * (size_t) h;

  PP_CUDA_FOR (o, total) {
    const size_t k = o % c, pixel = o / c;
    const size_t ox = pixel % wo, oy = (pixel / wo) % ho;
    const size_t s = pixel / (wo * ho);
    const size_t a = oy & 1, b = ox & 1;
    const size_t source = (s * (h + 1) + oy / 2 + a) * (w + 1) + ox / 2 + b;

    pp_cuda_store<T> (y, o, pp_cuda_load<T> (z, (source * 4 + 2 * a + b)
            * c + k));
  }
}

extern "C" cudaError_t
pp_cuda_interleave_phases (const void *z, PpCudaType type, int n, int c,
    int h, int w, int nhwc, void *y, cudaStream_t stream)
{
  const size_t total = (size_t) n * c * 4 * h * w;

  if (total == 0)
    return cudaSuccess;
  if (nhwc && c % PP_CUDA_VEC == 0 && total / PP_CUDA_VEC <= PP_CUDA_VECTORS_MAX
      && pp_cuda_vec_aligned (z) && pp_cuda_vec_aligned (y)) {
    const unsigned vectors = (unsigned) (total / PP_CUDA_VEC);

    PP_CUDA_DISPATCH_TYPE (type, T,
        PP_CUDA_LAUNCH (interleave_phases_nhwc8_kernel<T>, pp_cuda_blocks
            (vectors, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, z,
            (unsigned) (c / PP_CUDA_VEC), (unsigned) h, (unsigned) w, vectors,
            y));
    return cudaGetLastError ();
  }
  if (nhwc)
    PP_CUDA_DISPATCH_TYPE (type, T,
        PP_CUDA_LAUNCH (interleave_phases_nhwc_kernel<T>, pp_cuda_blocks
            (total, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, z, c, h, w,
            total, y));
  else
    PP_CUDA_DISPATCH_TYPE (type, T,
        PP_CUDA_LAUNCH (interleave_phases_kernel<T>, pp_cuda_blocks (total,
            PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, z, c, h, w, total,
            y));
  return cudaGetLastError ();
}

/* Transposes go through a shared tile so that both the reads and the
 * writes are coalesced; the extra column keeps the tile's columns in
 * different banks. */
#define TILE 32
#define TILE_ROWS 8

/* y [n,cols,rows] (Y) = x [n,rows,cols] (X) + bias [cols] (B; NULL:
 * none, x as it is), with @relu its relu. */
template <PpCudaType X, PpCudaType Y, PpCudaType B> __global__ void
transpose_typed_kernel (const void *x, int n, int rows, int cols,
    const void *bias, int relu, void *y)
{
  pp_cuda_wait_prior ();
  __shared__ float tile[TILE][TILE + 1];
  const unsigned row_tiles = (rows + TILE - 1) / TILE;

  /* gridDim.y is capped at 65535: tiles beyond it and the samples are
   * walked in a loop. */
  for (size_t s = blockIdx.z; s < (size_t) n; s += gridDim.z)
    for (unsigned ty = blockIdx.y; ty < row_tiles; ty += gridDim.y) {
      const size_t base = s * rows * cols;
      const int c0 = blockIdx.x * TILE, r0 = ty * TILE;

      for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
        const int r = r0 + k, c = c0 + threadIdx.x;

        if (r < rows && c < cols)
          tile[k][threadIdx.x] = pp_cuda_load<X> (x, base + (size_t) r
              * cols + c);
      }
      __syncthreads ();
      for (int k = threadIdx.y; k < TILE; k += TILE_ROWS) {
        const int c = c0 + k, r = r0 + threadIdx.x;

        if (r < rows && c < cols) {
          const float v = bias != NULL ? tile[threadIdx.x][k]
              + pp_cuda_load<B> (bias, c) : tile[threadIdx.x][k];

          pp_cuda_store<Y> (y, base + (size_t) c * rows + r,
              relu ? pp_math_relu (v) : v);
        }
      }
      __syncthreads ();
    }
}

extern "C" cudaError_t
pp_cuda_transpose_typed (const void *x, PpCudaType x_type, int n, int rows,
    int cols, const void *bias, PpCudaType bias_type, int relu, void *y,
    PpCudaType y_type, cudaStream_t stream)
{
  const size_t col_tiles = ((size_t) cols + TILE - 1) / TILE;
  const size_t row_tiles = ((size_t) rows + TILE - 1) / TILE;
  dim3 grid, block (TILE, TILE_ROWS);

  if (n <= 0 || rows <= 0 || cols <= 0)
    return cudaSuccess;
  /* cols < 2^31 gives fewer than 2^26 column tiles: within gridDim.x. */
  grid.x = (unsigned) col_tiles;
  grid.y = (unsigned) (row_tiles < PP_CUDA_MAX_GRID_YZ ? row_tiles
      : PP_CUDA_MAX_GRID_YZ);
  grid.z = (unsigned) (n < PP_CUDA_MAX_GRID_YZ ? n : PP_CUDA_MAX_GRID_YZ);
  PP_CUDA_DISPATCH_TYPE (x_type, X,
      PP_CUDA_DISPATCH_TYPE (y_type, Y,
          PP_CUDA_DISPATCH_TYPE (bias_type, B,
              PP_CUDA_LAUNCH ((transpose_typed_kernel<X, Y, B>), grid, block,
                  0, stream, x, n, rows, cols, bias, relu, y))));
  return cudaGetLastError ();
}

/* A value a thread, each thread's write next to its neighbour's: for
 * matrices a few columns wide, whose tiles would leave most threads idle
 * (a 3×3 filter's 9 columns fill 9 of a tile's 32), made once.  No
 * barrier, so the CUDA emulation of the tests runs each block without a
 * switch between its threads (the tiled transposes of the filters were
 * half of a tiny model's first frame there). */
template <PpCudaType T> __global__ void
transpose_narrow_kernel (const void *x, size_t total, int rows, int cols,
    void *y)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, total) {
    const size_t r = i % rows, c = (i / rows) % cols;
    const size_t s = i / ((size_t) rows * cols);

    pp_cuda_store<T> (y, i, pp_cuda_load<T> (x, (s * rows + r) * cols + c));
  }
}

extern "C" cudaError_t
pp_cuda_transpose_narrow (const void *x, int n, int rows, int cols, void *y,
    PpCudaType type, cudaStream_t stream)
{
  const size_t total = (size_t) n * rows * cols;

  if (n <= 0 || rows <= 0 || cols <= 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (type, T,
      PP_CUDA_LAUNCH (transpose_narrow_kernel<T>, pp_cuda_blocks (total,
              PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x, total, rows,
          cols, y));
  return cudaGetLastError ();
}

template <PpCudaType X, PpCudaType V> __global__ void
add_channel_kernel (void *x, size_t nc, size_t hw, const void *v)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (i, nc * hw) pp_cuda_store<X> (x, i, pp_cuda_load<X> (x, i)
      + pp_cuda_load<V> (v, i / hw));
}

extern "C" cudaError_t
pp_cuda_add_channel (void *x, PpCudaType x_type, int n, int c, size_t hw,
    const void *v, PpCudaType v_type, cudaStream_t stream)
{
  const size_t total = (size_t) n * c * hw;

  if (total == 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (x_type, X,
      PP_CUDA_DISPATCH_TYPE (v_type, V,
          PP_CUDA_LAUNCH ((add_channel_kernel<X, V>), pp_cuda_blocks (total,
              PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x, (size_t) n * c,
              hw, v)));
  return cudaGetLastError ();
}

extern "C" cudaError_t
pp_cuda_transpose (const float *x, int n, int rows, int cols, float *y,
    cudaStream_t stream)
{
  return pp_cuda_transpose_typed (x, PP_CUDA_F32, n, rows, cols, NULL,
      PP_CUDA_F32, 0, y, PP_CUDA_F32, stream);
}

/* Convolutions whose channels are not multiples of 8 (a model's first and
 * last: an image's 3, a latent's 4) run channels-last on tensor cores
 * with their channels padded with zeros; these two passes lay their input
 * out so and take their output's channels back.  A thread makes eight of
 * a pixel's padded channels: one 16-byte store, or load. */

/* y [n_pad, hw, c_pad] (Y) = x [n, c, hw] (X; channels last with @nhwc:
 * [n, hw, c]), zero past channel c and past sample n. */
template <PpCudaType X, PpCudaType Y> __global__ void
pad_channels_kernel (const void *x, int nhwc, int n, int c, size_t hw,
    unsigned per_pixel, size_t vectors, void *y)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (k, vectors) {
    const size_t pixel = k / per_pixel;
    const int c0 = (int) (k - pixel * per_pixel) * PP_CUDA_VEC;
    const size_t sample = pixel / hw, p = pixel - sample * hw;
    float v[PP_CUDA_VEC];

    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++) {
      const int ch = c0 + q;

      v[q] = sample >= (size_t) n || ch >= c ? 0.0f : pp_cuda_load<X> (x,
          nhwc ? pixel * c + ch : (sample * c + ch) * hw + p);
    }
    pp_cuda_store8<Y> (y, k * PP_CUDA_VEC, v);
  }
}

extern "C" cudaError_t
pp_cuda_pad_channels (const void *x, PpCudaType x_type, int nhwc, int n,
    int c, size_t hw, void *y, PpCudaType y_type, int n_pad, int c_pad,
    cudaStream_t stream)
{
  const size_t vectors = (size_t) n_pad * hw * (c_pad / PP_CUDA_VEC);

  if (n <= 0 || c <= 0 || n_pad < n || c_pad < c || c_pad % PP_CUDA_VEC
      || !pp_cuda_vec_aligned (y))
    return cudaErrorInvalidValue;
  if (vectors == 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (x_type, X,
      PP_CUDA_DISPATCH_TYPE (y_type, Y,
          PP_CUDA_LAUNCH ((pad_channels_kernel<X, Y>), pp_cuda_blocks (vectors,
              PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x, nhwc, n, c, hw,
              (unsigned) (c_pad / PP_CUDA_VEC), vectors, y)));
  return cudaGetLastError ();
}

/* y [n, c, hw] (Y; channels last with @nhwc: [n, hw, c]) = channels
 * below c of x [n, hw, c_pad] (X) + bias [c] (B; NULL: none, x as it is)
 * + res (of y's type and layout; NULL: none), with @relu its relu, summed
 * in float32 and rounded once, as pp_cuda_channel_bias_residual adds
 * them.  Each thread reads its eight values before it writes any, so y
 * may be x (c = c_pad, channels last, one type). */
template <PpCudaType X, PpCudaType Y, PpCudaType B> __global__ void
unpad_channels_kernel (const void *x, unsigned per_pixel, size_t vectors,
    int c, size_t hw, int nhwc, const void *bias, const void *res, int relu,
    void *y)
{
  pp_cuda_wait_prior ();
  PP_CUDA_FOR (k, vectors) {
    const size_t pixel = k / per_pixel;
    const int c0 = (int) (k - pixel * per_pixel) * PP_CUDA_VEC;
    const size_t sample = pixel / hw, p = pixel - sample * hw;
    float v[PP_CUDA_VEC];

    pp_cuda_load8<X> (x, k * PP_CUDA_VEC, v);
    PP_CUDA_UNROLL
    for (int q = 0; q < PP_CUDA_VEC; q++) {
      const int ch = c0 + q;

      if (ch < c) {
        const size_t i = nhwc ? pixel * c + ch : (sample * c + ch) * hw + p;
        /* Without a bias the value as it is (x + 0 would turn -0 into
         * +0). */
        float s = bias != NULL ? v[q] + pp_cuda_load<B> (bias, ch) : v[q];

        if (res != NULL)
          s += pp_cuda_load<Y> (res, i);
        pp_cuda_store<Y> (y, i, relu ? pp_math_relu (s) : s);
      }
    }
  }
}

extern "C" cudaError_t
pp_cuda_unpad_channels (const void *x, PpCudaType x_type, int n, int c_pad,
    size_t hw, void *y, PpCudaType y_type, int nhwc, int c,
    const void *bias, PpCudaType bias_type, const void *res, int relu,
    cudaStream_t stream)
{
  const size_t vectors = (size_t) n * hw * (c_pad / PP_CUDA_VEC);

  if (n <= 0 || c <= 0 || c_pad < c || c_pad % PP_CUDA_VEC
      || !pp_cuda_vec_aligned (x))
    return cudaErrorInvalidValue;
  if (vectors == 0)
    return cudaSuccess;
  PP_CUDA_DISPATCH_TYPE (x_type, X,
      PP_CUDA_DISPATCH_TYPE (y_type, Y,
          PP_CUDA_DISPATCH_TYPE (bias_type, B,
              PP_CUDA_LAUNCH ((unpad_channels_kernel<X, Y, B>), pp_cuda_blocks
                  (vectors, PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, x,
                  (unsigned) (c_pad / PP_CUDA_VEC), vectors, c, hw, nhwc, bias,
                  res, relu, y))));
  return cudaGetLastError ();
}

/* Eight channels (16 bytes) of one patch's value a thread. */
__global__ void
im2col_nhwc8_kernel (const uint4 *x, int h, int w, int c8, int kh, int kw,
    int stride, int pad, int ho, int wo, size_t vectors, uint4 *a)
{
  pp_cuda_wait_prior ();
  const size_t cols = (size_t) kh * kw * c8;

  PP_CUDA_FOR (k, vectors) {
    const size_t row = k / cols, col = k - row * cols;
    const int tap = (int) (col / c8), ch = (int) (col - (size_t) tap * c8);
    const int ky = tap / kw, kx = tap - ky * kw;
    const size_t pixels = (size_t) ho * wo, sample = row / pixels;
    const int p = (int) (row - sample * pixels);
    const int oy = p / wo, ox = p - oy * wo;
    const int iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;

    a[k] = iy < 0 || iy >= h || ix < 0 || ix >= w ? make_uint4 (0, 0, 0, 0)
        : x[((sample * h + iy) * w + ix) * c8 + ch];
  }
}

extern "C" cudaError_t
pp_cuda_im2col_nhwc (const void *x, int n, int h, int w, int c, int kh,
    int kw, int stride, int pad, int ho, int wo, void *a, cudaStream_t stream)
{
  const size_t vectors = (size_t) n * ho * wo * kh * kw * (c / PP_CUDA_VEC);

  if (n <= 0 || h <= 0 || w <= 0 || c <= 0 || c % PP_CUDA_VEC != 0
      || kh <= 0 || kw <= 0 || stride <= 0 || pad < 0 || ho <= 0 || wo <= 0
      || !pp_cuda_vec_aligned (x) || !pp_cuda_vec_aligned (a))
    return cudaErrorInvalidValue;
  PP_CUDA_LAUNCH (im2col_nhwc8_kernel, pp_cuda_blocks (vectors,
          PP_CUDA_THREADS), PP_CUDA_THREADS, 0, stream, (const uint4 *) x, h,
      w, c / PP_CUDA_VEC, kh, kw, stride, pad, ho, wo, vectors, (uint4 *) a);
  return cudaGetLastError ();
}
