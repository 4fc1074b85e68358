/* Tests of pp_resize_bilinear, which takes frames to and from the sizes the
 * VAE needs (multiples of 8 or more: pp-diffusion.c), against a float64
 * reference written here.
 *
 * The convention is PyTorch's F.interpolate (mode "bilinear",
 * align_corners False, no antialiasing), as diffusers' tensor resize uses
 * it: output pixel x samples the source at (x + 0.5) · w / ow - 0.5
 * (half-pixel centres), taken as 0 below 0, between source pixels i and
 * i + 1 with i = floor of it, the right neighbour clamped to the last
 * column.  The reference is that recipe, from PyTorch's
 * upsample_bilinear2d, not the clamp-to-[0, w - 1] form pp-image.c is
 * written in; two properties pin the convention without either formula:
 * halving a size averages 2×2 blocks, and an unchanged size copies. */
#include "pp-image.h"
#include "pp-backend.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The CPU kernels, through their backend's table. */
static PpBackend *be;

#define SEED 777
/* Bound on max |got - ref| in FLT_EPSILONs of max |src|: the weights and
 * the two lerps are float.  Measured ≤ 1.33. */
#define TOL_RESIZE 16.0
/* The VAE's alignment, and the largest a frame is aligned to (three
 * down-sampling levels more). */
#define ALIGN_VAE 8
#define ALIGN_LARGE 64

/* One axis of the reference: the two source indices and the weight of the
 * second. */
static void
source_of (int dst, int in, int out, int *i0, int *i1, double *lambda)
{
  const double scale = (double) in / out;
  double src = scale * (dst + 0.5) - 0.5;

  if (src < 0.0)
    src = 0.0;
  *i0 = (int) src;
  *i1 = *i0 + (*i0 < in - 1 ? 1 : 0);
  *lambda = src - *i0;
}

static void
resize_reference (const float *src, int c, int h, int w, double *dst,
    int oh, int ow)
{
  for (int ch = 0; ch < c; ch++)
    for (int y = 0; y < oh; y++) {
      int y0, y1;
      double ly;

      source_of (y, h, oh, &y0, &y1, &ly);
      for (int x = 0; x < ow; x++) {
        const float *p = src + (size_t) ch * h * w;
        int x0, x1;
        double lx;

        source_of (x, w, ow, &x0, &x1, &lx);
        dst[((size_t) ch * oh + y) * ow + x] =
            (1.0 - ly) * ((1.0 - lx) * p[y0 * w + x0] + lx * p[y0 * w + x1])
            + ly * ((1.0 - lx) * p[y1 * w + x0] + lx * p[y1 * w + x1]);
      }
    }
}

static float *
random_image (GRand * rng, size_t n)
{
  float *p = g_new (float, n);

  /* Pixel values as pp-diffusion.c resizes them: [-1, 1]. */
  for (size_t i = 0; i < n; i++)
    p[i] = (float) g_rand_double_range (rng, -1.0, 1.0);
  return p;
}

/* The size pp-diffusion.c aligns a frame side to: the nearest multiple. */
static int
aligned (int v, int align)
{
  return MAX (align, (v + align / 2) / align * align);
}

static void
run_resize (GRand * rng, int c, int h, int w, int oh, int ow)
{
  const size_t n_in = (size_t) c * h * w, n_out = (size_t) c * oh * ow;
  g_autofree float *src = random_image (rng, n_in);
  g_autofree float *dst = g_new (float, n_out);
  g_autofree double *ref = g_new (double, n_out);
  double mag = 0.0, worst = 0.0, sum_err = 0.0, sum_ref = 0.0;
  size_t at = 0;

  for (size_t i = 0; i < n_in; i++)
    mag = MAX (mag, fabs (src[i]));
  for (size_t i = 0; i < n_out; i++)
    dst[i] = NAN;
  pp_resize_bilinear (be, pp_view_f32 (src, n_in), c, h, w,
      pp_out_f32 (dst, n_out), oh, ow);
  resize_reference (src, c, h, w, ref, oh, ow);
  for (size_t i = 0; i < n_out; i++) {
    const double d = dst[i] - ref[i];

    g_assert_true (isfinite (dst[i]));
    if (fabs (d) > worst) {
      worst = fabs (d);
      at = i;
    }
    sum_err += d * d;
    sum_ref += ref[i] * ref[i];
  }
  g_test_message ("resize %dx%dx%d -> %dx%d: max error %.3g eps of max |src| "
      "(bound %g), NMSE %.3g", c, h, w, oh, ow, worst / mag / FLT_EPSILON,
      TOL_RESIZE, sum_err / sum_ref);
  if (worst > TOL_RESIZE * FLT_EPSILON * mag)
    g_error ("resize %dx%dx%d -> %dx%d: value %zu is %.9g, expected %.9g",
        c, h, w, oh, ow, at, dst[at], ref[at]);
}

/* Frames whose sides are not multiples of the alignment, to the aligned
 * size and back, as the encode and decode do; upscaling by non-integer
 * factors; sizes down to one pixel. */
static void
test_reference (void)
{
  static const int frames[][2] = {
    {75, 100}, {480, 641}, {33, 17}, {1, 9}, {7, 1},
  };
  static const int aligns[] = { ALIGN_VAE, ALIGN_LARGE };
  GRand *rng = g_rand_new_with_seed (SEED);

  for (guint i = 0; i < G_N_ELEMENTS (frames); i++)
    for (guint a = 0; a < G_N_ELEMENTS (aligns); a++) {
      const int h = frames[i][0], w = frames[i][1];
      const int ah = aligned (h, aligns[a]), aw = aligned (w, aligns[a]);

      run_resize (rng, PP_IMAGE_CHANNELS, h, w, ah, aw);
      run_resize (rng, PP_IMAGE_CHANNELS, ah, aw, h, w);
    }
  run_resize (rng, 2, 4, 6, 10, 15);
  run_resize (rng, 1, 5, 5, 1, 1);
  run_resize (rng, 1, 1, 1, 3, 4);
  g_rand_free (rng);
}

/* Half-pixel centres: output pixel (y, x) of a half-size image sits
 * exactly between source pixels 2y, 2y + 1 and 2x, 2x + 1. */
static void
test_halve (void)
{
  const int c = 2, h = 10, w = 14;
  GRand *rng = g_rand_new_with_seed (SEED + 1);
  g_autofree float *src = random_image (rng, (size_t) c * h * w);
  g_autofree float *dst = g_new (float, (size_t) c * h * w / 4);

  pp_resize_bilinear (be, pp_view_f32 (src, (size_t) c * h * w), c, h, w,
      pp_out_f32 (dst, (size_t) c * h * w / 4), h / 2, w / 2);
  for (int ch = 0; ch < c; ch++)
    for (int y = 0; y < h / 2; y++)
      for (int x = 0; x < w / 2; x++) {
        const float *p = src + ((size_t) ch * h + 2 * y) * w + 2 * x;
        const double mean = ((double) p[0] + p[1] + p[w] + p[w + 1]) / 4;
        const float got = dst[((size_t) ch * h / 2 + y) * (w / 2) + x];

        g_assert_cmpfloat_with_epsilon (got, mean, 4 * FLT_EPSILON);
      }
  g_rand_free (rng);
}

static void
test_identity (void)
{
  const int c = PP_IMAGE_CHANNELS, h = 9, w = 13;
  GRand *rng = g_rand_new_with_seed (SEED + 2);
  g_autofree float *src = random_image (rng, (size_t) c * h * w);
  g_autofree float *dst = g_new (float, (size_t) c * h * w);

  pp_resize_bilinear (be, pp_view_f32 (src, (size_t) c * h * w), c, h, w,
      pp_out_f32 (dst, (size_t) c * h * w), h, w);
  g_assert_cmpmem (dst, (size_t) c * h * w * sizeof (float), src,
      (size_t) c * h * w * sizeof (float));
  g_rand_free (rng);
}

int
main (int argc, char **argv)
{
  be = pp_backend_cpu ();
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/kernels/resize/reference", test_reference);
  g_test_add_func ("/kernels/resize/halve", test_halve);
  g_test_add_func ("/kernels/resize/identity", test_identity);
  return g_test_run ();
}
