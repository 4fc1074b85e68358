/* ppdiffuse — the temporal feature bank's work at a released UNet's
 * self-attention shapes.
 *
 * With temporal=feature-bank each of the UNet's self-attentions hands the
 * bank its frame's keys, values and outputs (pp_bank_layer_take) and gets
 * the bank's rows back for its extended attention (pp_bank_layer_extend);
 * the bank's fusion and merging run on the model's backend, by its ops.
 * This times that work alone, on a backend (--backend, default cpu), for
 * each shape of an SD-Turbo (SD 2.1) UNet at 512x512 with one frame
 * banked: per layer and per step (a step has `layers` of each shape), the
 * frames after the first two (the first only fills the bank, the second
 * is the first to merge).  The rows are random, each frame the last plus
 * noise, so that some outputs are similar enough to be fused.  Each line
 * ends with a digest of the last frame's outputs and extended keys and
 * values: on the CPU backend, the same on any number of its threads
 * (PPDIFFUSE_CPU_THREADS).  With --profile, one more frame of each
 * layer after the digest, with the op layer's profile on, prints where
 * a frame's time goes by op: device time on a device (its ops queued
 * behind a hold of the stream, so that the host's launches are not in
 * it), host time elsewhere.
 *
 * Usage: bank-bench [--backend NAME] [--frames N] [--small] [--threshold T]
 *                   [--profile]
 */
#include "pp-backend.h"
#include "pp-feature-bank.h"
#include "pp-ops.h"
#include "pp-rng.h"

#include <cblas.h>
#include <stdio.h>

typedef struct
{
  const gchar *where;
  gint rows, channels;
  guint layers;                 /* of this shape in one UNet step */
  gboolean fuse;
} Shape;

/* SD-Turbo's self-attentions at a 64x64 latent: the down blocks' two at
 * each of three levels, the mid block's, the up blocks' three at each;
 * the mid block's and the up blocks' before the middle one fuse
 * (pp-unet.c). */
static const Shape sd_turbo[] = {
  {"64x64, 320 channels", 4096, 320, 5, FALSE},
  {"32x32, 640 channels", 1024, 640, 5, FALSE},
  {"16x16, 1280 channels", 256, 1280, 2, FALSE},
  {"16x16, 1280 channels, fusing", 256, 1280, 3, TRUE},
  {"8x8 (mid), 1280 channels, fusing", 64, 1280, 1, TRUE},
};

/* A few rows, for the suite's run: the same paths in well under a
 * second. */
static const Shape small[] = {
  {"16x16, 32 channels", 256, 32, 1, FALSE},
  {"8x8, 64 channels, fusing", 64, 64, 1, TRUE},
};

/* @x ← @x + @sigma · N(0, 1), the frame after it. */
static void
drift (PpRng * rng, gfloat * x, gfloat * noise, gsize n, gfloat sigma)
{
  pp_rng_fill_normal (rng, noise, n);
  for (gsize i = 0; i < n; i++)
    x[i] += sigma * noise[i];
}

/* A buffer of @n floats on @be. */
static gpointer
device_floats (PpBackend * be, gsize n)
{
  g_autoptr (GError) error = NULL;
  gpointer dev = pp_backend_alloc (be, n * sizeof (gfloat), &error);

  if (dev == NULL)
    g_error ("bank-bench: %s", error->message);
  return dev;
}

/* The hold of the stream a profiled frame's ops queue behind. */
#define PROFILE_HOLD_S 0.05

static gint
by_seconds_desc (gconstpointer a, gconstpointer b)
{
  const gdouble ta = ((const PpOpProfile *) a)->seconds;
  const gdouble tb = ((const PpOpProfile *) b)->seconds;

  return (ta < tb) - (ta > tb);
}

/* The profile taken since the last reset, one line: each op that took
 * time (device time where there is any, host time elsewhere), the
 * costliest first, with its calls. */
static void
print_profile (void)
{
  PpOpProfile all[PP_OP_COUNT], ops[PP_OP_COUNT];
  gboolean device = FALSE;
  guint n = 0;
  g_autoptr (GString) line = g_string_new (NULL);
  gdouble sum = 0;

  for (guint op = 0; op < PP_OP_COUNT; op++) {
    pp_ops_get_profile (op, &all[op]);
    device |= all[op].device_seconds > 0;
  }
  /* Each op's time in its seconds, those that took none left out (and on
   * a device the rows' regions, whose ops are timed themselves). */
  for (guint op = 0; op < PP_OP_COUNT; op++) {
    PpOpProfile p = all[op];

    if (device)
      p.seconds = op == PP_OP_FOR_ROWS ? 0 : p.device_seconds;
    if (p.seconds > 0) {
      sum += p.seconds;
      ops[n++] = p;
    }
  }
  qsort (ops, n, sizeof ops[0], by_seconds_desc);
  for (guint i = 0; i < n; i++)
    g_string_append_printf (line, "%s%s %.3f ms (%" G_GUINT64_FORMAT
        " call%s)", i > 0 ? ", " : "", ops[i].name, ops[i].seconds * 1e3,
        ops[i].calls, ops[i].calls == 1 ? "" : "s");
  printf ("  one frame's ops (%s time, %.3f ms): %s\n", device ? "device"
      : "host", sum * 1e3, line->str);
}

/* The first 8 hexadecimal digits of the SHA-256 of the frame's outputs
 * @dout and its extended keys and values, through @host (2 · @own
 * floats). */
static gchar *
digest_of (PpBackend * be, GChecksum * sum, gfloat * host, gsize own,
    const gfloat * dout, const gfloat * k_ext, const gfloat * v_ext)
{
  pp_backend_download (be, host, dout, own * sizeof (gfloat));
  g_checksum_update (sum, (const guchar *) host, own * sizeof (gfloat));
  pp_backend_download (be, host, k_ext, 2 * own * sizeof (gfloat));
  g_checksum_update (sum, (const guchar *) host, 2 * own * sizeof (gfloat));
  pp_backend_download (be, host, v_ext, 2 * own * sizeof (gfloat));
  g_checksum_update (sum, (const guchar *) host, 2 * own * sizeof (gfloat));
  return g_strndup (g_checksum_get_string (sum), 8);
}

/* Milliseconds a frame of @s's layer takes in the bank (its extension
 * and its take, waited for, not the making of the frame's rows nor their
 * upload), the mean over the frames after the first two; *@digest: the
 * last frame's fused outputs and extended keys and values.  With
 * @profile, one more frame after the digest, profiled (print_profile). */
static gdouble
time_shape (PpBackend * be, const Shape * s, guint frames, gdouble threshold,
    gboolean profile, guint64 * fused, guint64 * candidates, gchar ** digest)
{
  const gsize own = (gsize) s->rows * s->channels;
  g_autoptr (PpFeatureBank) bank = pp_feature_bank_new (1, threshold);
  g_autofree gfloat *k = g_new (gfloat, own);
  g_autofree gfloat *v = g_new (gfloat, own);
  g_autofree gfloat *o = g_new (gfloat, own);
  g_autofree gfloat *noise = g_new (gfloat, own);
  g_autofree gfloat *host = g_new (gfloat, 2 * own);
  /* On the backend: the frame's rows, its outputs (fused in place) and
   * the extended keys and values (the frame's rows and one frame's). */
  gfloat *dk = device_floats (be, own), *dv = device_floats (be, own);
  gfloat *dout = device_floats (be, own);
  gfloat *k_ext = device_floats (be, 2 * own);
  gfloat *v_ext = device_floats (be, 2 * own);
  g_autoptr (GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  gint64 spent = 0;
  PpRng rng;

  pp_rng_init (&rng, 7, (guint64) s->rows * s->channels);
  pp_rng_fill_normal (&rng, k, own);
  pp_rng_fill_normal (&rng, v, own);
  pp_rng_fill_normal (&rng, o, own);
  for (guint f = 0; f < frames + (profile ? 1 : 0); f++) {
    PpBankLayer *layer;
    gint64 t0;

    drift (&rng, k, noise, own, 0.1f);
    drift (&rng, v, noise, own, 0.1f);
    drift (&rng, o, noise, own, 0.1f);
    pp_backend_upload (be, dk, k, own * sizeof (gfloat));
    pp_backend_upload (be, dv, v, own * sizeof (gfloat));
    pp_backend_upload (be, dout, o, own * sizeof (gfloat));
    pp_backend_synchronize (be);
    if (f == frames) {
      pp_ops_reset_flop_count ();
      pp_ops_set_profiling (TRUE);
      if (pp_backend_stream (be) != NULL)
        pp_ops_set_profile_window (0, 0, PROFILE_HOLD_S);
    }
    t0 = g_get_monotonic_time ();
    pp_feature_bank_begin (bank);
    layer = pp_feature_bank_next (bank, s->channels);
    pp_bank_layer_extend (layer, be, pp_view_f32 (dk, own),
        pp_view_f32 (dv, own), s->rows, pp_out_f32 (k_ext, 2 * own),
        pp_out_f32 (v_ext, 2 * own));
    pp_bank_layer_take (layer, be, pp_view_f32 (dk, own),
        pp_view_f32 (dv, own), pp_out_f32 (dout, own), s->rows, s->fuse);
    pp_backend_synchronize (be);
    if (f >= 2 && f < frames)
      spent += g_get_monotonic_time () - t0;
    /* The last timed frame's: before a profiled frame changes them. */
    if (f + 1 == frames) {
      *digest = digest_of (be, sum, host, own, dout, k_ext, v_ext);
      pp_feature_bank_fused (bank, fused, candidates);
    }
  }
  if (profile) {
    pp_ops_set_profile_window (0, 0, 0);
    pp_ops_set_profiling (FALSE);
  }
  for (gpointer *p = (gpointer[]) { dk, dv, dout, k_ext, v_ext, NULL }; *p;
      p++)
    pp_backend_free (be, *p);
  return spent / 1e3 / (frames - 2);
}

int
main (int argc, char **argv)
{
  guint frames = 5;
  gboolean use_small = FALSE, profile = FALSE;
  gdouble threshold = 0.9, step_ms = 0.0;
  g_autofree gchar *backend = NULL;
  GOptionEntry entries[] = {
    {"frames", 0, 0, G_OPTION_ARG_INT, &frames,
        "Frames through each layer (at least 3; default 5)", "N"},
    {"small", 0, 0, G_OPTION_ARG_NONE, &use_small,
        "A few small layers (the suite's run)", NULL},
    {"backend", 0, 0, G_OPTION_ARG_STRING, &backend,
        "The backend the bank works on (default cpu)", "NAME"},
    {"threshold", 0, 0, G_OPTION_ARG_DOUBLE, &threshold,
        "Fusion threshold (default 0.9, the element's)", "T"},
    {"profile", 0, 0, G_OPTION_ARG_NONE, &profile,
        "After each layer's line, one more frame's ops and their times",
        NULL},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx =
      g_option_context_new ("- the feature bank's work per layer");
  g_autoptr (GError) error = NULL;
  const Shape *shapes = use_small ? small : sd_turbo;
  gsize n_shapes;
  PpBackend *be;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error)) {
    fprintf (stderr, "bank-bench: %s\n", error->message);
    return 2;
  }
  if (frames < 3) {
    fprintf (stderr, "bank-bench: --frames must be at least 3\n");
    return 2;
  }
  shapes = use_small ? small : sd_turbo;
  n_shapes = use_small ? G_N_ELEMENTS (small) : G_N_ELEMENTS (sd_turbo);
  be = pp_backend_get (backend != NULL ? backend : "cpu", &error);
  if (be == NULL) {
    fprintf (stderr, "bank-bench: %s\n", error->message);
    return 1;
  }
  printf ("the feature bank's work on %s (%s), one frame banked, threshold "
      "%.2f, OpenBLAS threads: %d, mean of %u frames after the first two\n",
      pp_backend_name (be), pp_backend_device (be), threshold,
      openblas_get_num_threads (), frames - 2);
  printf ("%-34s %6s %6s %10s %8s %10s %9s\n", "layer", "rows", "layers",
      "ms/layer", "fused", "ms/step", "digest");
  for (gsize i = 0; i < n_shapes; i++) {
    const Shape *s = &shapes[i];
    guint64 fused = 0, candidates = 0;
    g_autofree gchar *digest = NULL;
    const gdouble ms = time_shape (be, s, frames, threshold, profile,
        &fused, &candidates, &digest);
    g_autofree gchar *share = s->fuse
        ? g_strdup_printf ("%.0f%%", candidates ? 100.0 * fused / candidates
        : 0.0) : g_strdup ("-");

    step_ms += ms * s->layers;
    printf ("%-34s %6d %6u %10.2f %8s %10.2f  %s\n", s->where, s->rows,
        s->layers, ms, share, ms * s->layers, digest);
    if (profile)
      print_profile ();
  }
  printf ("a UNet step's bank work: %.1f ms\n", step_ms);
  return 0;
}
