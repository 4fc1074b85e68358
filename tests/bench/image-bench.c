/* ppdiffuse — rank 0's per-frame image conversions: a frame's bytes to
 * the planar float tensor the encoder takes (pp_image_to_tensor_into) and
 * the decoded tensor back to bytes (pp_image_from_tensor), at 512×512 and
 * 1280×720, RGB and BGRx, each next to the plain per-channel loops of the
 * same formulas (rintf, clamped) timed in the same run.  Every run also
 * checks that both give the same bytes.  Best of REPEATS runs. */
#include "pp-image.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define REPEATS 30

static void
plain_from_tensor (const PpImage * img, const PpTensor * t)
{
  const gsize plane = (gsize) img->width * img->height;

  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++) {
    const gfloat *src = (const gfloat *) t->data + c * plane;

    for (gint y = 0; y < img->height; y++) {
      guint8 *row = img->data + (gsize) y * img->row_stride + img->offset[c];

      for (gint x = 0; x < img->width; x++) {
        gfloat v = rintf (src[(gsize) y * img->width + x]);

        row[(gsize) x * img->pixel_stride] =
            (guint8) (v > 255.f ? 255.f : (v >= 0.f ? v : 0.f));
      }
    }
  }
}

static void
plain_to_tensor (const PpImage * img, PpTensor * t)
{
  const gsize plane = (gsize) img->width * img->height;

  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++) {
    gfloat *dst = (gfloat *) t->data + c * plane;

    for (gint y = 0; y < img->height; y++) {
      const guint8 *row = img->data + (gsize) y * img->row_stride
          + img->offset[c];

      for (gint x = 0; x < img->width; x++)
        dst[(gsize) y * img->width + x] = row[(gsize) x * img->pixel_stride];
    }
  }
}

static gdouble
best_ms (void (*run) (gpointer), gpointer data)
{
  gdouble best = G_MAXDOUBLE;

  for (guint r = 0; r < REPEATS; r++) {
    gint64 t0 = g_get_monotonic_time ();

    run (data);
    best = MIN (best, (g_get_monotonic_time () - t0) / 1000.0);
  }
  return best;
}

typedef struct
{
  PpImage img;
  PpTensor *t;
} Frame;

static void
run_from (gpointer data)
{
  Frame *f = data;

  g_assert_true (pp_image_from_tensor (&f->img, f->t, NULL));
}

static void
run_plain_from (gpointer data)
{
  Frame *f = data;

  plain_from_tensor (&f->img, f->t);
}

static void
run_to (gpointer data)
{
  Frame *f = data;

  pp_image_to_tensor_into (&f->img, f->t);
}

static void
run_plain_to (gpointer data)
{
  Frame *f = data;

  plain_to_tensor (&f->img, f->t);
}

int
main (void)
{
  static const struct
  {
    gint width, height, pixel_stride;
    const gchar *format;
  } cases[] = {
    {512, 512, 3, "RGB"}, {512, 512, 4, "BGRx"},
    {1280, 720, 3, "RGB"}, {1280, 720, 4, "BGRx"},
  };

  printf ("best of %d runs, ms per frame; plain: per-channel loops, rintf\n",
      REPEATS);
  printf ("%-14s %-5s %12s %8s %7s %12s %8s %7s\n", "frame", "", "to tensor",
      "plain", "ratio", "from tensor", "plain", "ratio");
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    const gint w = cases[i].width, h = cases[i].height;
    const gint ps = cases[i].pixel_stride, stride = w * ps;
    const gint64 shape[4] = { 1, PP_IMAGE_CHANNELS, h, w };
    const gboolean bgr = ps == 4;
    g_autofree guint8 *bytes = g_malloc ((gsize) stride * h);
    g_autofree guint8 *plain = g_malloc ((gsize) stride * h);
    Frame f = { {bytes, w, h, stride, ps, {bgr ? 2 : 0, 1, bgr ? 0 : 2}},
    pp_tensor_new ("image", PP_DTYPE_F32, 4, shape, NULL)
    };
    gfloat *v = (gfloat *) f.t->data;
    gdouble to, to_plain, from, from_plain;

    /* A decoder's output: mostly in range, some of it past either end. */
    for (gsize k = 0; k < (gsize) 3 * w * h; k++)
      v[k] = (gfloat) ((k * 2654435761u) % 3000) / 10.f - 20.f;
    from = best_ms (run_from, &f);
    memcpy (plain, bytes, (gsize) stride * h);
    from_plain = best_ms (run_plain_from, &f);
    if (memcmp (plain, bytes, (gsize) stride * h) != 0)
      g_error ("%dx%d %s: pp_image_from_tensor and the plain loops differ",
          w, h, cases[i].format);
    to = best_ms (run_to, &f);
    to_plain = best_ms (run_plain_to, &f);
    printf ("%4dx%-9d %-5s %12.3f %8.3f %7.2f %12.3f %8.3f %7.2f\n", w, h,
        cases[i].format, to, to_plain, to_plain / to, from, from_plain,
        from_plain / from);
    pp_tensor_free (f.t);
  }
  return 0;
}
