/* ppdiffuse — 2-D convolution as GEMM.
 *
 * A 1×1 convolution without stride or padding is one GEMM per sample on the
 * input as it is.  Any other shape copies, per band of output rows, the
 * input pixels each kernel tap sees into a [cin·kh·kw, band] column matrix
 * (im2col) and multiplies the [cout, cin·kh·kw] weight by it, writing the
 * band of y in place (ldc = ho·wo).  im2col runs one contiguous input row
 * per (tap, output row), so it is a memcpy when stride = 1. */
#include "pp-cpu-vectorize.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"

#include <cblas.h>
#include <string.h>

/* Column values per thread worth splitting im2col for (~10 µs of copy). */
#define GRAIN_COL_VALUES (64 * 1024)

typedef struct
{
  const float *x;               /* one sample [cin, h, w] */
  float *col;
  int h, w, kh, kw, stride, pad, oy0, oy1, wo;
} Im2col;

/* Writes the (oy1 - oy0)·wo values that tap (ky, kx) of input plane @src
 * [h,w] contributes to output rows [oy0, oy1); padding reads 0. */
static void
im2col_tap (const float *src, int h, int w, int ky, int kx, int stride,
    int pad, int oy0, int oy1, int wo, float *dst)
{
  /* Output columns whose input column ix = ox·stride - pad + kx is inside
   * [0, w): [ox_lo, ox_hi). */
  const int first = pad - kx;
  const int last = w - 1 + pad - kx;
  int ox_lo = first > 0 ? (first + stride - 1) / stride : 0;
  int ox_hi = last < 0 ? 0 : last / stride + 1;

  ox_hi = MIN (ox_hi, wo);
  ox_lo = MIN (ox_lo, ox_hi);
  for (int oy = oy0; oy < oy1; oy++, dst += wo) {
    const int iy = oy * stride - pad + ky;
    const float *row;

    if (iy < 0 || iy >= h || ox_lo == ox_hi) {
      memset (dst, 0, (size_t) wo * sizeof (float));
      continue;
    }
    row = src + (size_t) iy * w + (ox_lo * stride - pad + kx);
    memset (dst, 0, (size_t) ox_lo * sizeof (float));
    if (stride == 1) {
      memcpy (dst + ox_lo, row, (size_t) (ox_hi - ox_lo) * sizeof (float));
    } else if (stride == 2) {
      /* The downsamplers' stride; a constant stride vectorises. */
      for (int i = 0; i < ox_hi - ox_lo; i++)
        dst[ox_lo + i] = row[2 * i];
    } else {
      for (int i = 0; i < ox_hi - ox_lo; i++)
        dst[ox_lo + i] = row[(size_t) i * stride];
    }
    memset (dst + ox_hi, 0, (size_t) (wo - ox_hi) * sizeof (float));
  }
}

/* Items are input channels: each writes its kh·kw rows of the column
 * matrix. */
static void
im2col_range (size_t begin, size_t end, gpointer data)
{
  const Im2col *p = data;
  const size_t n_cols = (size_t) (p->oy1 - p->oy0) * p->wo;
  float *dst = p->col + begin * p->kh * p->kw * n_cols;

  for (size_t ci = begin; ci < end; ci++)
    for (int ky = 0; ky < p->kh; ky++)
      for (int kx = 0; kx < p->kw; kx++, dst += n_cols)
        im2col_tap (p->x + ci * p->h * p->w, p->h, p->w, ky, kx, p->stride,
            p->pad, p->oy0, p->oy1, p->wo, dst);
}

void
pp_cpu_conv2d (const float *x, int n, int cin, int h, int w,
    const float *weight, const float *bias, int cout, int kh, int kw,
    int stride, int pad, float *y)
{
  const int ho = pp_conv2d_out_size (h, kh, stride, pad);
  const int wo = pp_conv2d_out_size (w, kw, stride, pad);
  const int k_len = cin * kh * kw;
  const size_t in_plane = (size_t) h * w;
  const size_t out_plane = (size_t) ho * wo;
  const float beta = bias ? 1.0f : 0.0f;
  int band;
  float *col;

  g_return_if_fail (n > 0 && cin > 0 && h > 0 && w > 0 && cout > 0);
  g_return_if_fail (kh > 0 && kw > 0 && stride > 0 && pad >= 0);
  g_return_if_fail (ho > 0 && wo > 0);

  if (kh == 1 && kw == 1 && stride == 1 && pad == 0) {
    for (int b = 0; b < n; b++) {
      float *yb = y + (size_t) b * cout * out_plane;

      if (bias)
        pp_cpu_fill_rows (yb, cout, (int) out_plane, out_plane, bias);
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, cout,
          (int) out_plane, cin, 1.0f, weight, cin,
          x + (size_t) b * cin * in_plane, (int) out_plane, beta, yb,
          (int) out_plane);
    }
    return;
  }

  /* Whole output rows per band, as many as fit the column buffer. */
  band = (int) MIN ((size_t) ho,
      MAX ((size_t) 1, (size_t) PP_CONV2D_COL_MAX_FLOATS /
          ((size_t) k_len * wo)));
  col = g_new (float, (size_t) k_len * band * wo);

  for (int b = 0; b < n; b++) {
    float *yb = y + (size_t) b * cout * out_plane;

    for (int oy0 = 0; oy0 < ho; oy0 += band) {
      const int oy1 = MIN (ho, oy0 + band);
      const int n_cols = (oy1 - oy0) * wo;
      Im2col p = { x + (size_t) b * cin * in_plane, col, h, w, kh, kw,
        stride, pad, oy0, oy1, wo
      };

      pp_cpu_parallel_for (cin,
          GRAIN_COL_VALUES / ((size_t) kh * kw * n_cols) + 1, im2col_range,
          &p);
      if (bias)
        pp_cpu_fill_rows (yb + (size_t) oy0 * wo, cout, n_cols, out_plane,
            bias);
      cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, cout, n_cols,
          k_len, 1.0f, weight, k_len, col, n_cols, beta,
          yb + (size_t) oy0 * wo, (int) out_plane);
    }
  }
  g_free (col);
}
