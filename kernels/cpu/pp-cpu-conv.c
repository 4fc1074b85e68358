/* ppdiffuse — 2-D convolution as GEMM.
 *
 * A 1×1 convolution without stride or padding is one GEMM per sample on the
 * input as it is.  Any other shape copies, per band of output rows, the
 * input pixels each kernel tap sees into a [cin·kh·kw, band] column matrix
 * (im2col) and multiplies the [cout, cin·kh·kw] weight by it, writing the
 * band of y in place (ldc = ho·wo).  im2col runs one contiguous input row
 * per (tap, output row), so it is a memcpy when stride = 1.
 *
 * A 3×3, stride-1, pad-1 convolution whose output rows are whole AVX-512
 * vectors (TAESD's 64 → 64 convolutions at up to 256²) skips im2col: the
 * GEMM would be only cout = 64 rows deep, so OpenBLAS spends as long
 * re-packing the 9× larger column matrix as multiplying it.  Instead each
 * band of input rows is copied once with its zero border, and a register
 * tile of 8 output channels × 32 pixels accumulates the 9·cin taps
 * straight from it (direct_band). */
#include "pp-cpu-vectorize.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"

#include <string.h>

/* Tiles, bands and grains of the kernels: pp-cpu-tuning.h. */

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

#ifdef PP_CPU_AVX512_KERNELS
#include <immintrin.h>

typedef struct
{
  const float *band;            /* [cin, rows + 2, wo + 2], zero border */
  const float *weight;          /* [cout, cin, 3, 3] */
  const float *wpack;           /* [cout tiles, cin, 9,
                                 * PP_CPU_DIRECT_COUT_TILE] or NULL */
  const float *bias;
  float *y;                     /* this sample's output */
  int cin, cout, wo, out_plane, oy0, rows;
} Direct;

/* One tile: PP_CPU_DIRECT_COUT_TILE output channels × nv vectors of output row
 * @r of the band, from column @ox.  Taps are summed in (ci, ky, kx) order,
 * the order of im2col's rows. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) void
direct_tile (const Direct * p, int r, int co0, int ox, int nv,
    gboolean packed)
{
  const int wp = p->wo + 2;
  const size_t plane = (size_t) (p->rows + 2) * wp;
  const float *wk[PP_CPU_DIRECT_COUT_TILE];
  __m512 acc[PP_CPU_DIRECT_COUT_TILE][PP_CPU_DIRECT_VECS];

  /* Tap (ci, t) of channel c is wk[c][(ci·9 + t)·step].  Unpacked, the
   * weights broadcast straight from their [cout, cin, 9] rows, and missing
   * channels of the last tile repeat the last channel (not stored). */
  const size_t step = packed ? PP_CPU_DIRECT_COUT_TILE : 1;

  for (int c = 0; c < PP_CPU_DIRECT_COUT_TILE; c++) {
    const float b = p->bias && co0 + c < p->cout ? p->bias[co0 + c] : 0.0f;

    wk[c] = packed ? p->wpack + (size_t) co0 * p->cin * 9 + c
        : p->weight + (size_t) MIN (co0 + c, p->cout - 1) * p->cin * 9;
    for (int v = 0; v < nv; v++)
      acc[c][v] = _mm512_set1_ps (b);
  }
  for (int ci = 0; ci < p->cin; ci++) {
    const float *src = p->band + ci * plane + (size_t) r * wp + ox;

#pragma GCC unroll 9
    for (int t = 0; t < 9; t++) {
      const float *row = src + (t / 3) * wp + t % 3;
      __m512 a[PP_CPU_DIRECT_VECS];

      for (int v = 0; v < nv; v++)
        a[v] = _mm512_loadu_ps (row + v * PP_CPU_DIRECT_LANES);
#pragma GCC unroll 8
      for (int c = 0; c < PP_CPU_DIRECT_COUT_TILE; c++) {
        const __m512 wv = _mm512_set1_ps (wk[c][(ci * 9 + t) * step]);

        for (int v = 0; v < nv; v++)
          acc[c][v] = _mm512_fmadd_ps (a[v], wv, acc[c][v]);
      }
    }
  }
  for (int c = 0; c < PP_CPU_DIRECT_COUT_TILE && co0 + c < p->cout; c++) {
    float *dst = p->y + (size_t) (co0 + c) * p->out_plane
        + (size_t) (p->oy0 + r) * p->wo + ox;

    for (int v = 0; v < nv; v++)
      _mm512_storeu_ps (dst + v * PP_CPU_DIRECT_LANES, acc[c][v]);
  }
}

/* Calls direct_tile for every output channel tile of a column range, the
 * range's input (cin × 3 rows × its width) staying in L1 while the
 * weights stream from L2: they are 4× fewer bytes per tap. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) void
direct_column (const Direct * p, int r, int ox, int nv)
{
  for (int co0 = 0; co0 < p->cout; co0 += PP_CPU_DIRECT_COUT_TILE) {
    if (p->wpack)
      direct_tile (p, r, co0, ox, nv, TRUE);
    else
      direct_tile (p, r, co0, ox, nv, FALSE);
  }
}

/* Items are the band's output rows. */
static __attribute__ ((target ("avx512f,fma"))) void
direct_range (size_t begin, size_t end, gpointer data)
{
  const Direct *p = data;

  for (size_t r = begin; r < end; r++) {
    /* Constant vector counts, so that the accumulators stay in
     * registers: full tiles, then the row's tail. */
    for (int ox = 0; ox < p->wo;) {
      const int left = (p->wo - ox) / PP_CPU_DIRECT_LANES;

      if (left >= PP_CPU_DIRECT_VECS) {
        direct_column (p, (int) r, ox, PP_CPU_DIRECT_VECS);
        ox += PP_CPU_DIRECT_VECS * PP_CPU_DIRECT_LANES;
      } else {
        direct_column (p, (int) r, ox, 1);
        ox += PP_CPU_DIRECT_LANES;
      }
    }
  }
}

typedef struct
{
  const float *x;               /* one sample [cin, h, w] */
  float *band;
  int h, w, iy0, rows;          /* padded rows iy0 - 1 .. iy0 + rows */
} PadBand;

/* Items are input channels: copies rows + 2 input rows, zero outside. */
static void
pad_band_range (size_t begin, size_t end, gpointer data)
{
  const PadBand *p = data;
  const int wp = p->w + 2;

  for (size_t ci = begin; ci < end; ci++) {
    float *dst = p->band + ci * (size_t) (p->rows + 2) * wp;

    for (int r = 0; r < p->rows + 2; r++, dst += wp) {
      const int iy = p->iy0 - 1 + r;

      if (iy < 0 || iy >= p->h) {
        memset (dst, 0, (size_t) wp * sizeof (float));
        continue;
      }
      dst[0] = dst[wp - 1] = 0.0f;
      memcpy (dst + 1, p->x + (ci * p->h + iy) * (size_t) p->w,
          (size_t) p->w * sizeof (float));
    }
  }
}

static gboolean
direct_3x3_applies (int h, int w, int kh, int kw, int stride, int pad)
{
  (void) h;
  return kh == 3 && kw == 3 && stride == 1 && pad == 1
      && w % PP_CPU_DIRECT_LANES == 0 && pp_cpu_avx512_kernels ();
}

static void
conv2d_direct_3x3 (const float *x, int n, int cin, int h, int w,
    const float *weight, const float *bias, int cout, float *y)
{
  const int tiles = (cout + PP_CPU_DIRECT_COUT_TILE - 1)
      / PP_CPU_DIRECT_COUT_TILE;
  const size_t band_row = (size_t) cin * (w + 2);
  const int rows = (int) CLAMP ((size_t) PP_CPU_DIRECT_BAND_FLOATS / band_row,
      (size_t) 3, (size_t) h + 2) - 2;
  float *band = pp_cpu_scratch (PP_CPU_SCRATCH_CONV_BAND,
      band_row * (rows + 2));
  float *wpack = NULL;

  /* Large planes: [cout, cin, 3, 3] → per tile
   * [cin, 9, PP_CPU_DIRECT_COUT_TILE], so that a tap broadcasts the tile's
   * weights from one cache line (missing channels of the last tile stay 0).
   * Small ones read the weights as they are: the copy would cost more than
   * it saves. */
  if ((size_t) n * h * w >= PP_CPU_DIRECT_PACK_MIN_PIXELS) {
    pp_cpu_path_add (PP_CPU_PATH_CONV_DIRECT_PACKED, 1);
    const size_t packed = (size_t) tiles * PP_CPU_DIRECT_COUT_TILE * cin * 9;

    wpack = pp_cpu_scratch (PP_CPU_SCRATCH_CONV_WEIGHTS, packed);
    memset (wpack, 0, packed * sizeof (float));
    for (int co = 0; co < cout; co++)
      for (int k = 0; k < cin * 9; k++)
        wpack[((size_t) (co / PP_CPU_DIRECT_COUT_TILE) * cin * 9 + k)
            * PP_CPU_DIRECT_COUT_TILE + co % PP_CPU_DIRECT_COUT_TILE] =
            weight[(size_t) co * cin * 9 + k];
  }

  for (int b = 0; b < n; b++) {
    for (int oy0 = 0; oy0 < h; oy0 += rows) {
      const int band_rows = MIN (rows, h - oy0);
      PadBand pb = { x + (size_t) b * cin * h * w, band, h, w, oy0,
        band_rows
      };
      Direct d = { band, weight, wpack, bias, y + (size_t) b * cout * h * w,
        cin, cout, w, h * w, oy0, band_rows
      };

      pp_cpu_path_add (PP_CPU_PATH_CONV_DIRECT_BAND, 1);
      pp_cpu_parallel_for (cin, PP_CPU_CONV_GRAIN_COL_VALUES / band_row + 1,
          pad_band_range, &pb);
      pp_cpu_parallel_for (band_rows, 1, direct_range, &d);
    }
  }
}
/* ---- narrow rows ---------------------------------------------------- */

static gboolean
narrow_3x3_applies (int kh, int kw, int stride, int pad)
{
  return kh == 3 && kw == 3 && stride == 1 && pad == 1
      && pp_cpu_avx512_kernels ();
}


typedef struct
{
  const float *band;            /* [cin, 3 (kx), plane] */
  const float *weight;          /* [cout, cin, 3, 3] */
  const float *bias;
  float *y;                     /* the band's first output pixel, channel 0 */
  int cin, cout, w, tiles;
  size_t plane, out_plane, pixels;
} Narrow;

/* One tile: PP_CPU_NARROW_COUT_TILE output channels × @nv vectors of the band's
 * pixels from @p0 (row-major across rows, so narrow rows fill vectors too);
 * the last vector stores only @last lanes.  Taps are summed in (ci, ky, kx)
 * order, the order of im2col's rows. */
static inline __attribute__ ((always_inline, target ("avx512f,fma"))) void
narrow_tile (const Narrow * p, size_t p0, int co0, int nv, __mmask16 last)
{
  const float *wk[PP_CPU_NARROW_COUT_TILE];
  __m512 acc[PP_CPU_NARROW_COUT_TILE][PP_CPU_NARROW_VECS];

  /* The weights broadcast straight from their [cout, cin, 9] rows (no
   * per-call repacking); missing channels of the last tile repeat the last
   * channel and are not stored. */
  for (int c = 0; c < PP_CPU_NARROW_COUT_TILE; c++)
    wk[c] = p->weight + (size_t) MIN (co0 + c, p->cout - 1) * p->cin * 9;

  for (int c = 0; c < PP_CPU_NARROW_COUT_TILE; c++) {
    const float b = p->bias && co0 + c < p->cout ? p->bias[co0 + c] : 0.0f;

#pragma GCC unroll 4
    for (int v = 0; v < nv; v++)
      acc[c][v] = _mm512_set1_ps (b);
  }
  for (int ci = 0; ci < p->cin; ci++) {
    const float *src = p->band + (size_t) ci * 3 * p->plane + p0;

#pragma GCC unroll 9
    for (int t = 0; t < 9; t++) {
      /* Tap (ky, kx) is the kx-shifted copy, ky rows further on. */
      const float *row = src + (t % 3) * p->plane + (t / 3) * p->w;
      __m512 a[PP_CPU_NARROW_VECS];

#pragma GCC unroll 4
      for (int v = 0; v < nv; v++)
        a[v] = _mm512_loadu_ps (row + v * PP_CPU_NARROW_LANES);
#pragma GCC unroll 8
      for (int c = 0; c < PP_CPU_NARROW_COUT_TILE; c++) {
        const __m512 wv = _mm512_set1_ps (wk[c][ci * 9 + t]);

#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
          acc[c][v] = _mm512_fmadd_ps (a[v], wv, acc[c][v]);
      }
    }
  }
  for (int c = 0; c < PP_CPU_NARROW_COUT_TILE && co0 + c < p->cout; c++) {
    float *dst = p->y + (size_t) (co0 + c) * p->out_plane + p0;

#pragma GCC unroll 4
    for (int v = 0; v < nv - 1; v++)
      _mm512_storeu_ps (dst + v * PP_CPU_NARROW_LANES, acc[c][v]);
    _mm512_mask_storeu_ps (dst + (nv - 1) * PP_CPU_NARROW_LANES, last,
        acc[c][nv - 1]);
  }
}

/* Items are (pixel block, output channel tile) pairs, channel tiles
 * innermost so that consecutive items reuse the block's input from L1/L2
 * while the weights stream from L2. */
static __attribute__ ((target ("avx512f,fma"))) void
narrow_range (size_t begin, size_t end, gpointer data)
{
  const Narrow *p = data;
  const size_t block = PP_CPU_NARROW_VECS * PP_CPU_NARROW_LANES;

  for (size_t i = begin; i < end; i++) {
    const size_t p0 = i / p->tiles * block;
    const int co0 = (int) (i % p->tiles) * PP_CPU_NARROW_COUT_TILE;
    const size_t left = MIN (block, p->pixels - p0);
    const int nv = (int) ((left + PP_CPU_NARROW_LANES - 1)
        / PP_CPU_NARROW_LANES);
    const int tail = (int) (left - (size_t) (nv - 1) * PP_CPU_NARROW_LANES);
    const __mmask16 last = (__mmask16) ((1u << tail) - 1);

    /* Constant vector counts, so that the accumulators stay in
     * registers. */
    switch (nv) {
      case 4:
        narrow_tile (p, p0, co0, 4, last);
        break;
      case 3:
        narrow_tile (p, p0, co0, 3, last);
        break;
      case 2:
        narrow_tile (p, p0, co0, 2, last);
        break;
      default:
        narrow_tile (p, p0, co0, 1, last);
        break;
    }
  }
}

typedef struct
{
  const float *x;               /* one sample [cin, h, w] */
  float *band;
  int h, w, iy0, rows;          /* padded rows iy0 - 1 .. iy0 + rows */
  size_t plane;
} NarrowBand;

/* Items are input channels: writes the three copies of rows + 2 input
 * rows shifted by kx - 1 columns, zero outside the image and in the
 * plane's slack (read by the masked last vector). */
static void
narrow_band_range (size_t begin, size_t end, gpointer data)
{
  const NarrowBand *p = data;
  const int w = p->w;

  for (size_t ci = begin; ci < end; ci++) {
    for (int kx = 0; kx < 3; kx++) {
      float *dst = p->band + (ci * 3 + kx) * p->plane;
      const size_t used = (size_t) (p->rows + 2) * w;

      for (int r = 0; r < p->rows + 2; r++, dst += w) {
        const int iy = p->iy0 - 1 + r;
        const float *src = p->x + (ci * p->h + iy) * (size_t) w;

        if (iy < 0 || iy >= p->h) {
          memset (dst, 0, (size_t) w * sizeof (float));
          continue;
        }
        /* dst[x] = input column x + kx - 1 */
        if (kx == 0) {
          dst[0] = 0.0f;
          memcpy (dst + 1, src, (size_t) (w - 1) * sizeof (float));
        } else if (kx == 1) {
          memcpy (dst, src, (size_t) w * sizeof (float));
        } else {
          memcpy (dst, src + 1, (size_t) (w - 1) * sizeof (float));
          dst[w - 1] = 0.0f;
        }
      }
      memset (dst, 0, (p->plane - used) * sizeof (float));
    }
  }
}

static void
conv2d_narrow_3x3 (const float *x, int n, int cin, int h, int w,
    const float *weight, const float *bias, int cout, float *y)
{
  const int tiles = (cout + PP_CPU_NARROW_COUT_TILE - 1)
      / PP_CPU_NARROW_COUT_TILE;
  /* Input rows per band: the three shifted copies of rows + 2 rows fit the
   * budget, or one row when even that does not fit (clamped before the
   * subtraction, which would wrap around). */
  const int rows = (int) CLAMP ((size_t) PP_CPU_NARROW_BAND_FLOATS /
      ((size_t) 3 * cin * w), (size_t) 3, (size_t) h + 2) - 2;
  const size_t block_pixels = PP_CPU_NARROW_VECS * PP_CPU_NARROW_LANES;
  /* Whole cache lines per plane, so that the loads of widths that are
   * multiples of 16 are aligned. */
  const size_t plane = ((size_t) (rows + 2) * w + 2 * PP_CPU_NARROW_LANES - 1)
      / PP_CPU_NARROW_LANES * PP_CPU_NARROW_LANES;
  const size_t item_flops = (size_t) 2 * 9 * cin * PP_CPU_NARROW_COUT_TILE
      * PP_CPU_NARROW_VECS * PP_CPU_NARROW_LANES;
  /* (Scratch is aligned to whole cache lines.) */
  float *band = pp_cpu_scratch (PP_CPU_SCRATCH_CONV_BAND,
      (size_t) cin * 3 * plane);

  for (int b = 0; b < n; b++) {
    for (int oy0 = 0; oy0 < h; oy0 += rows) {
      const int band_rows = MIN (rows, h - oy0);
      const size_t pixels = (size_t) band_rows * w;
      const size_t blocks = (pixels + block_pixels - 1) / block_pixels;
      NarrowBand pb = { x + (size_t) b * cin * h * w, band, h, w, oy0,
        band_rows, plane
      };
      Narrow d = { band, weight, bias,
        y + (size_t) b * cout * h * w + (size_t) oy0 * w, cin, cout, w,
        tiles, plane, (size_t) h * w, pixels
      };

      pp_cpu_path_add (PP_CPU_PATH_CONV_NARROW_BAND, 1);
      pp_cpu_parallel_for (cin,
          PP_CPU_CONV_GRAIN_COL_VALUES / (3 * plane) + 1, narrow_band_range,
          &pb);
      pp_cpu_parallel_for (blocks * tiles,
          PP_CPU_NARROW_GRAIN_FLOPS / item_flops + 1, narrow_range, &d);
    }
  }
}
#endif

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

      pp_cpu_path_add (PP_CPU_PATH_CONV_1X1, 1);
      if (bias)
        pp_cpu_fill_rows (yb, cout, (int) out_plane, out_plane, bias);
      pp_cpu_gemm (FALSE, FALSE, cout, (int) out_plane, cin, 1.0f, weight,
          cin, x + (size_t) b * cin * in_plane, (int) out_plane, beta, yb,
          (int) out_plane);
    }
    return;
  }

#ifdef PP_CPU_AVX512_KERNELS
  /* Rows of 32 floats and more fill the row kernel's tiles; narrower rows
   * (and widths it cannot take) go to the kernel that runs across rows. */
  if (w >= PP_CPU_NARROW_BELOW_WIDTH
      && direct_3x3_applies (h, w, kh, kw, stride, pad)) {
    conv2d_direct_3x3 (x, n, cin, h, w, weight, bias, cout, y);
    return;
  }
  if (narrow_3x3_applies (kh, kw, stride, pad)) {
    conv2d_narrow_3x3 (x, n, cin, h, w, weight, bias, cout, y);
    return;
  }
#endif

  /* Whole output rows per band, as many as fit the column buffer. */
  band = (int) MIN ((size_t) ho,
      MAX ((size_t) 1, (size_t) PP_CONV2D_COL_MAX_FLOATS /
          ((size_t) k_len * wo)));
  col = pp_cpu_scratch (PP_CPU_SCRATCH_CONV_COLUMNS,
      (size_t) k_len * band * wo);

  for (int b = 0; b < n; b++) {
    float *yb = y + (size_t) b * cout * out_plane;

    for (int oy0 = 0; oy0 < ho; oy0 += band) {
      const int oy1 = MIN (ho, oy0 + band);
      const int n_cols = (oy1 - oy0) * wo;
      Im2col p = { x + (size_t) b * cin * in_plane, col, h, w, kh, kw,
        stride, pad, oy0, oy1, wo
      };

      pp_cpu_path_add (PP_CPU_PATH_CONV_IM2COL_BAND, 1);
      pp_cpu_parallel_for (cin,
          PP_CPU_CONV_GRAIN_COL_VALUES / ((size_t) kh * kw * n_cols) + 1,
          im2col_range, &p);
      if (bias)
        pp_cpu_fill_rows (yb + (size_t) oy0 * wo, cout, n_cols, out_plane,
            bias);
      pp_cpu_gemm (FALSE, FALSE, cout, n_cols, k_len, 1.0f, weight, k_len,
          col, n_cols, beta, yb + (size_t) oy0 * wo, (int) out_plane);
    }
  }
}
