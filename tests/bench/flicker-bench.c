/* ppdiffuse — flicker with and without the temporal feature bank.
 *
 * A synthetic clip: a still scene (two gradients) under fresh sensor noise
 * every frame, and a square moving slowly across it.  Each frame runs
 * through a pipeline model (make-tiny turbo, 2 steps, one process, as
 * ppdiffuse-tool img2img runs a sequence) with temporal=off and with
 * temporal=feature-bank at bank sizes 1, 2 and 4.  Reported per run: the
 * mean absolute difference of consecutive output frames over the still
 * region (8-bit levels; the square's path left out), and the time per
 * frame and per step.  Random weights show the mechanism, not the look:
 * a trained model's outputs are what the bank steadies.
 *
 * Usage: flicker-bench PPDIFFUSE_MODEL_DIR [--frames N] [--size S]
 *        [--threshold T] */
#include "pp-image.h"
#include "pp-model.h"
#include "pp-rng.h"
#include "pp-settings.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define STEPS 2
#define NOISE_LEVELS 6.0        /* the noise's standard deviation */
#define SQUARE_FRACTION 4       /* the square is size / 4 wide */
#define SQUARE_STEP 1           /* pixels a frame */
#define NOISE_SEED 11

static void
image_alloc (PpImage * im, gint size)
{
  im->data = g_malloc ((gsize) size * size * PP_IMAGE_CHANNELS);
  im->width = im->height = size;
  im->row_stride = size * PP_IMAGE_CHANNELS;
  im->pixel_stride = PP_IMAGE_CHANNELS;
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
    im->offset[c] = c;
}

static void
image_free (PpImage * im)
{
  g_clear_pointer (&im->data, g_free);
}

/* Frame @f of the clip, RGB. */
static void
make_frame (PpImage * im, gint f, gint size)
{
  PpRng rng;
  const gint side = size / SQUARE_FRACTION, x0 = f * SQUARE_STEP;
  g_autofree gfloat *noise = g_new (gfloat, (gsize) size * size * 3);

  pp_rng_init (&rng, NOISE_SEED, (guint64) f);
  pp_rng_fill_normal (&rng, noise, (gsize) size * size * 3);
  for (gint y = 0; y < size; y++)
    for (gint x = 0; x < size; x++)
      for (gint c = 0; c < 3; c++) {
        gdouble v = c == 0 ? 255.0 * x / size : c == 1 ? 255.0 * y / size
            : 128.0;
        gboolean in_square = x >= x0 && x < x0 + side && y >= size / 3
            && y < size / 3 + side;

        if (in_square)
          v = c == 2 ? 230.0 : 40.0;
        v += NOISE_LEVELS * noise[((gsize) y * size + x) * 3 + c];
        im->data[(gsize) y * im->row_stride + x * 3 + c] =
            (guint8) CLAMP (lround (v), 0, 255);
      }
}

/* Mean |a − b| over the pixels outside the square's path. */
static gdouble
still_difference (const PpImage * a, const PpImage * b, gint size,
    gint frames)
{
  const gint side = size / SQUARE_FRACTION;
  const gint path_end = frames * SQUARE_STEP + side;
  gdouble sum = 0.0;
  gsize n = 0;

  for (gint y = 0; y < size; y++)
    for (gint x = 0; x < size; x++) {
      if (y >= size / 3 - 8 && y < size / 3 + side + 8 && x < path_end + 8)
        continue;
      for (gint c = 0; c < 3; c++) {
        gsize at = (gsize) y * a->row_stride + x * 3 + c;

        sum += fabs ((gdouble) a->data[at] - b->data[at]);
        n++;
      }
    }
  return n > 0 ? sum / n : 0.0;
}

typedef struct
{
  const gchar *label;
  const gchar *temporal;
  guint bank_frames;
} Run;

static gboolean
run (const gchar * model_dir, const Run * r, gint frames, gint size,
    gdouble threshold, GError ** error)
{
  g_autofree gchar *embeds = g_build_filename (model_dir,
      "prompt_embeds.npy", NULL);
  PpSettings s;
  PpModel *m = pp_model_new (model_dir, STEPS, PP_MODEL_ROLE_ALL, NULL,
      error);
  PpImage cur = { 0 }, prev = { 0 };
  PpTensor *sample = NULL;
  gdouble diff = 0.0, seconds = 0.0;
  gboolean ok = m != NULL;

  pp_settings_init (&s);
  s.model = g_strdup (model_dir);
  s.prompt_embeds = g_strdup (embeds);
  s.strength = 0.8;
  s.temporal = g_strdup (r->temporal);
  s.bank_frames = r->bank_frames;
  s.fusion_threshold = threshold;
  ok = ok && pp_model_update (m, &s, NULL, error);
  for (gint f = 0; ok && f < frames; f++) {
    gint64 t0;

    image_alloc (&cur, size);
    make_frame (&cur, f, size);
    t0 = g_get_monotonic_time ();
    if (sample == NULL)
      sample = pp_model_encode (m, &cur, error);
    else
      ok = pp_model_encode_into (m, &cur, sample, error);
    ok = ok && sample != NULL && pp_model_steps_begin (m, sample, error)
        && pp_model_steps_slice (m, 0, STEPS, STEPS, sample, NULL, NULL,
        error) && pp_model_steps_end (m, sample, error)
        && pp_model_decode (m, sample, &cur, error);
    /* the first frame sets the bank up: timed from the second */
    if (f > 0)
      seconds += (g_get_monotonic_time () - t0) / 1e6;
    if (ok && f > 0)
      diff += still_difference (&cur, &prev, size, frames);
    image_free (&prev);
    prev = cur;
    memset (&cur, 0, sizeof cur);
  }
  if (ok)
    printf ("%-22s %8.3f levels  %8.1f ms/frame  %8.1f ms/step\n",
        r->label, diff / (frames - 1), 1e3 * seconds / (frames - 1),
        1e3 * seconds / (frames - 1) / STEPS);
  image_free (&prev);
  image_free (&cur);
  pp_tensor_free (sample);
  pp_settings_clear (&s);
  g_clear_pointer (&m, pp_model_free);
  return ok;
}

int
main (int argc, char **argv)
{
  static const Run runs[] = {
    {"temporal=off", PP_SETTINGS_TEMPORAL_OFF, 1},
    {"feature-bank, 1 frame", PP_SETTINGS_TEMPORAL_FEATURE_BANK, 1},
    {"feature-bank, 2 frames", PP_SETTINGS_TEMPORAL_FEATURE_BANK, 2},
    {"feature-bank, 4 frames", PP_SETTINGS_TEMPORAL_FEATURE_BANK, 4},
  };
  gint frames = 12, size = 64;
  gdouble threshold = 0.9;
  const GOptionEntry entries[] = {
    {"frames", 0, 0, G_OPTION_ARG_INT, &frames, "frames of the clip "
          "(default 12)", "N"},
    {"size", 0, 0, G_OPTION_ARG_INT, &size, "frame side in pixels, a "
          "multiple of 8 (default 64)", "S"},
    {"threshold", 0, 0, G_OPTION_ARG_DOUBLE, &threshold, "fusion-threshold "
          "(default 0.9)", "T"},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("MODEL_DIR");
  g_autoptr (GError) error = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || argc != 2
      || frames < 2 || size < 16 || size % 8 != 0) {
    fprintf (stderr, "usage: flicker-bench MODEL_DIR [--frames N >= 2] "
        "[--size S] [--threshold T]%s%s\n", error ? ": " : "",
        error ? error->message : "");
    return 2;
  }
  printf ("%s: %d frames of %dx%d, %d steps, fusion-threshold %g; still "
      "region's mean |frame - previous| in 8-bit levels (random weights: "
      "the mechanism, not the look)\n", argv[1], frames, size, size, STEPS,
      threshold);
  for (guint i = 0; i < G_N_ELEMENTS (runs); i++)
    if (!run (argv[1], &runs[i], frames, size, threshold, &error)) {
      fprintf (stderr, "flicker-bench: %s\n", error->message);
      return 1;
    }
  return 0;
}
