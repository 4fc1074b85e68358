/* ppdiffuse — layout ops: channel/token transposes, concatenation,
 * nearest upsampling and the interleaving of convolution phases.  Pure
 * data movement: the transposes go in square tiles so that both the reads
 * and the writes stay in cache lines. */
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"

#include <string.h>

typedef struct
{
  const float *src;
  float *dst;
  int rows, cols;               /* of one source matrix */
  int h, w, factor;
} Layout;

/* dst [c1 - c0, r1 - r0] (row stride ld_dst) = the block [r0, r1) ×
 * [c0, c1) of src (row stride ld_src) transposed, through a tile in L1:
 * both the reads and the writes are runs of whole rows.  Writing straight
 * to the transposed places would touch PP_CPU_TRANSPOSE_TILE lines a row stride
 * apart for every source row; with a stride of 4 KiB (1024 tokens) those
 * lines share an L1 set and evict each other. */
static void
transpose_block (const float *src, size_t ld_src, float *dst, size_t ld_dst,
    int r0, int r1, int c0, int c1)
{
  float tile[PP_CPU_TRANSPOSE_TILE][PP_CPU_TRANSPOSE_TILE];
  const int nr = r1 - r0, nc = c1 - c0;

  for (int r = 0; r < nr; r++) {
    const float *row = src + (size_t) (r0 + r) * ld_src + c0;

    for (int c = 0; c < nc; c++)
      tile[c][r] = row[c];
  }
  for (int c = 0; c < nc; c++)
    memcpy (dst + (size_t) (c0 + c) * ld_dst + r0, tile[c],
        (size_t) nr * sizeof (float));
}

/* Items are (matrix, band of PP_CPU_TRANSPOSE_TILE source rows):
 * dst [cols, rows] = src [rows, cols]ᵀ for each matrix. */
static void
transpose_range (size_t begin, size_t end, gpointer data)
{
  const Layout *p = data;
  const size_t bands = (p->rows + PP_CPU_TRANSPOSE_TILE - 1)
      / PP_CPU_TRANSPOSE_TILE;
  const size_t size = (size_t) p->rows * p->cols;

  for (size_t item = begin; item < end; item++) {
    const float *src = p->src + item / bands * size;
    float *dst = p->dst + item / bands * size;
    const int r0 = (int) (item % bands) * PP_CPU_TRANSPOSE_TILE;
    const int r1 = MIN (p->rows, r0 + PP_CPU_TRANSPOSE_TILE);

    for (int c0 = 0; c0 < p->cols; c0 += PP_CPU_TRANSPOSE_TILE)
      transpose_block (src, p->cols, dst, p->rows, r0, r1, c0,
          MIN (p->cols, c0 + PP_CPU_TRANSPOSE_TILE));
  }
}

static void
transpose (const float *src, int n, int rows, int cols, float *dst)
{
  Layout p = { .src = src, .dst = dst, .rows = rows, .cols = cols };
  const size_t bands = (rows + PP_CPU_TRANSPOSE_TILE - 1)
      / PP_CPU_TRANSPOSE_TILE;

  pp_cpu_parallel_for (n * bands,
      PP_CPU_LAYOUT_GRAIN_VALUES / ((size_t) PP_CPU_TRANSPOSE_TILE * cols) + 1,
      transpose_range, &p);
}

void
pp_cpu_nchw_to_nlc (const float *x, int n, int c, int hw, float *y)
{
  g_return_if_fail (n > 0 && c > 0 && hw > 0);

  transpose (x, n, c, hw, y);
}

void
pp_cpu_nlc_to_nchw (const float *x, int n, int c, int hw, float *y)
{
  g_return_if_fail (n > 0 && c > 0 && hw > 0);

  transpose (x, n, hw, c, y);
}

void
pp_cpu_concat_channels (const float *a, int ca, const float *b, int cb,
    int n, int hw, float *y)
{
  const size_t a_len = (size_t) ca * hw, b_len = (size_t) cb * hw;

  g_return_if_fail (ca > 0 && cb > 0 && n > 0 && hw > 0);

  for (int s = 0; s < n; s++) {
    float *dst = y + s * (a_len + b_len);

    memcpy (dst, a + s * a_len, a_len * sizeof (float));
    memcpy (dst + a_len, b + s * b_len, b_len * sizeof (float));
  }
}

/* Items are planes (sample, channel). */
static void
upsample_range (size_t begin, size_t end, gpointer data)
{
  const Layout *p = data;
  const int f = p->factor;
  const size_t wo = (size_t) p->w * f;

  for (size_t plane = begin; plane < end; plane++) {
    const float *src = p->src + plane * p->h * p->w;
    float *dst = p->dst + plane * p->h * p->w * f * f;

    for (int iy = 0; iy < p->h; iy++) {
      const float *in_row = src + (size_t) iy * p->w;
      float *out_row = dst + (size_t) iy * f * wo;

      for (int ix = 0; ix < p->w; ix++)
        for (int k = 0; k < f; k++)
          out_row[(size_t) ix * f + k] = in_row[ix];
      /* The other f - 1 output rows repeat the first. */
      for (int k = 1; k < f; k++)
        memcpy (out_row + k * wo, out_row, wo * sizeof (float));
    }
  }
}

void
pp_cpu_upsample_nearest (const float *x, int n, int c, int h, int w,
    int factor, float *y)
{
  Layout p = { .src = x, .dst = y, .h = h, .w = w, .factor = factor };

  g_return_if_fail (n > 0 && c > 0 && h > 0 && w > 0 && factor > 0);

  pp_cpu_parallel_for ((size_t) n * c,
      PP_CPU_LAYOUT_GRAIN_VALUES / ((size_t) h * w * factor * factor) + 1,
      upsample_range, &p);
}

/* Items are output planes (sample, channel): each output row takes its
 * values alternately from two phases' rows. */
static void
interleave_range (size_t begin, size_t end, gpointer data)
{
  const Layout *p = data;
  const size_t c = p->rows, h = p->h, w = p->w;
  const size_t zh = h + 1, zw = w + 1, wo = 2 * w;

  for (size_t plane = begin; plane < end; plane++) {
    const size_t s = plane / c, k = plane % c;
    float *dst = p->dst + plane * 4 * h * w;

    for (size_t a = 0; a < 2; a++)
      for (size_t i = 0; i < h; i++) {
        /* Phases (a, 0) and (a, 1): channels (2a)c + k and (2a + 1)c + k
         * of z, row i + a; columns j and j + 1. */
        const float *even = p->src + ((s * 4 + 2 * a) * c + k) * zh * zw
            + (i + a) * zw;
        const float *odd = even + c * zh * zw + 1;
        float *row = dst + (2 * i + a) * wo;

        for (size_t j = 0; j < w; j++) {
          row[2 * j] = even[j];
          row[2 * j + 1] = odd[j];
        }
      }
  }
}

void
pp_cpu_interleave_phases (const float *z, int n, int c, int h, int w,
    float *y)
{
  Layout p = { .src = z, .dst = y, .rows = c, .h = h, .w = w };

  g_return_if_fail (n > 0 && c > 0 && h > 0 && w > 0);

  pp_cpu_parallel_for ((size_t) n * c,
      PP_CPU_LAYOUT_GRAIN_VALUES / ((size_t) 4 * h * w) + 1,
      interleave_range, &p);
}

/* Half-pixel centres, edges clamped; serial: it runs once a frame. */
void
pp_cpu_resize_bilinear (const float *src, int c, int h, int w, float *dst,
    int oh, int ow)
{
  const gdouble sy = (gdouble) h / oh, sx = (gdouble) w / ow;

  for (gint y = 0; y < oh; y++) {
    gdouble fy = CLAMP ((y + 0.5) * sy - 0.5, 0.0, h - 1.0);
    gint y0 = (gint) fy, y1 = MIN (y0 + 1, h - 1);
    gfloat wy = (gfloat) (fy - y0);
    for (gint x = 0; x < ow; x++) {
      gdouble fx = CLAMP ((x + 0.5) * sx - 0.5, 0.0, w - 1.0);
      gint x0 = (gint) fx, x1 = MIN (x0 + 1, w - 1);
      gfloat wx = (gfloat) (fx - x0);
      for (gint ch = 0; ch < c; ch++) {
        const gfloat *p = src + (gsize) ch * h * w;
        gfloat top = p[y0 * w + x0] * (1 - wx) + p[y0 * w + x1] * wx;
        gfloat bottom = p[y1 * w + x0] * (1 - wx) + p[y1 * w + x1] * wx;
        dst[(gsize) ch * oh * ow + (gsize) y * ow + x] =
            top * (1 - wy) + bottom * wy;
      }
    }
  }
}
