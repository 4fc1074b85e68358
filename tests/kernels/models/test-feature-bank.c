/* kernels/models: the UNet's temporal feature bank (pp-feature-bank.h)
 * against diffusers' own UNet2DConditionModel with an attention processor
 * that implements the same rule, in float64 (tests/data/feature-bank,
 * tests/reference/make_feature_bank_fixtures.py): a sequence of frames of
 * two denoising steps (one bank each) with a reset in the middle, for bank
 * sizes of 1 and 2 frames, both UNet families.  The arrays hold
 * [frames · steps, 4, H, W], frame-major.  Every output within the
 * model tests' bound; the frames right after a reset equal the UNet
 * without a bank; the bank changes the others.  And a layer's rows in 16
 * bits (a UNet whose activations are) go through the bank as the same
 * values in float32 do, bit for bit once rounded.
 *
 * Usage: test-kernels-feature-bank DATA_DIR [g_test options] */
#include "pp-dtype-math.h"
#include "pp-error.h"
#include "pp-feature-bank.h"
#include "pp-npy.h"
#include "pp-unet.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#define TOLERANCE 1e-4          /* docs/models.md, × max (1, max|ref|) */
#define MAX_STEPS 4

static const gchar *data_dir;

typedef struct
{
  const gchar *name;            /* feature-bank/NAME */
  guint frames;                 /* bank size */
} Case;

static const Case cases[] = {
  {"sd15", 1}, {"sd15", 2}, {"turbo", 1}, {"turbo", 2},
};

static PpTensor *
load (const gchar * dir, const gchar * file)
{
  g_autofree gchar *path = g_build_filename (data_dir, "feature-bank", dir,
      file, NULL);
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_npy_load (path, &error);

  g_assert_no_error (error);
  return t;
}

/* Row @i (frame · steps + step) of a [frames · steps, C, H, W] tensor as
 * [1, C, H, W]. */
static PpTensor *
slice (const PpTensor * all, guint i)
{
  const gint64 shape[4] = { 1, all->shape[1], all->shape[2], all->shape[3] };
  const gsize n = (gsize) (shape[1] * shape[2] * shape[3]);
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_tensor_new ("sample", PP_DTYPE_F32, 4, shape, &error);

  g_assert_no_error (error);
  g_assert_cmpint (all->ndim, ==, 4);
  memcpy (t->data, (const gfloat *) all->data + i * n, n * sizeof (gfloat));
  return t;
}

static gdouble
max_diff (const PpTensor * a, const PpTensor * ref, gdouble * ref_max)
{
  const gfloat *x = a->data, *r = ref->data;
  gdouble d = 0.0, m = 0.0;

  g_assert_cmpint (pp_tensor_numel (a), ==, pp_tensor_numel (ref));
  for (gint64 i = 0; i < pp_tensor_numel (ref); i++) {
    gdouble e = fabs ((gdouble) x[i] - r[i]);

    if (!(e <= d))
      d = isnan (e) ? INFINITY : e;
    m = MAX (m, fabs (r[i]));
  }
  *ref_max = m;
  return d;
}

static void
test_sequence (gconstpointer data)
{
  const Case *c = data;
  g_autofree gchar *seq_path = g_build_filename (data_dir, "feature-bank",
      c->name, "sequence.json", NULL);
  g_autofree gchar *out_file = g_strdup_printf ("out-F%u.npy", c->frames);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) inputs = load (c->name, "inputs.npy");
  g_autoptr (PpTensor) context = load (c->name, "context.npy");
  g_autoptr (PpTensor) outs = load (c->name, out_file);
  g_autoptr (PpTensor) plain = load (c->name, "plain.npy");
  g_autoptr (PpUnet) unet = NULL;
  g_autofree gchar *unet_dir = NULL;
  PpFeatureBank *banks[MAX_STEPS] = { NULL };
  JsonObject *seq;
  JsonArray *steps, *resets;
  guint n_steps, n_frames, changed = 0;
  guint64 fused = 0, candidates = 0;
  gsize settled[MAX_STEPS] = { 0 };
  /* per step: frames taken since the last reset, rows that could fuse
   * so far and in each frame that attends to a bank */
  guint since[MAX_STEPS] = { 0 };
  guint64 counted[MAX_STEPS] = { 0 }, per_frame[MAX_STEPS] = { 0 };
  gdouble tau;

  json_parser_load_from_file (parser, seq_path, &error);
  g_assert_no_error (error);
  seq = json_node_get_object (json_parser_get_root (parser));
  steps = json_object_get_array_member (seq, "steps");
  resets = json_object_get_array_member (seq, "reset_before");
  n_steps = json_array_get_length (steps);
  n_frames = (guint) json_object_get_int_member (seq, "frames");
  tau = json_object_get_double_member (seq, "tau");
  g_assert_cmpuint (n_steps, <=, MAX_STEPS);
  g_assert_cmpint (inputs->shape[0], ==, n_frames * n_steps);
  unet_dir = g_build_filename (data_dir, json_object_get_string_member (seq,
          "unet"), NULL);
  unet = pp_unet_load (unet_dir, pp_backend_default (), PP_DTYPE_F32,
      &error);
  g_assert_no_error (error);
  for (guint s = 0; s < n_steps; s++)
    banks[s] = pp_feature_bank_new (c->frames, tau);

  for (guint f = 0; f < n_frames; f++) {
    gboolean reset = f == 0;

    for (guint i = 0; i < json_array_get_length (resets); i++)
      reset |= (guint) json_array_get_int_element (resets, i) == f;
    for (guint s = 0; s < n_steps && reset; s++) {
      const gsize kept = pp_feature_bank_bytes (banks[s]);

      pp_feature_bank_reset (banks[s]);
      since[s] = 0;
      g_assert_cmpuint (pp_feature_bank_rows (banks[s]), ==, 0);
      g_assert_false (pp_feature_bank_steady (banks[s]));
      /* the memory stays for the next frames */
      g_assert_cmpuint (pp_feature_bank_bytes (banks[s]), ==, kept);
    }
    for (guint s = 0; s < n_steps; s++) {
      g_autoptr (PpTensor) x = slice (inputs, f * n_steps + s);
      g_autoptr (PpTensor) ref = slice (outs, f * n_steps + s);
      g_autoptr (PpTensor) ref_plain = slice (plain, f * n_steps + s);
      g_autoptr (PpTensor) y = NULL;
      gdouble m, d, dp, mp;

      pp_unet_set_bank (unet, banks[s]);
      g_assert_true (pp_unet_forward (unet, x, json_array_get_double_element
              (steps, s), context, &y, NULL, NULL, &error));
      g_assert_no_error (error);
      d = max_diff (y, ref, &m);
      dp = max_diff (y, ref_plain, &mp);
      g_test_message ("%s F=%u frame %u step %u: max|diff| %.3e (max|ref| "
          "%.4g), %.3e from the UNet without a bank; bank %" G_GSIZE_FORMAT
          " bytes", c->name, c->frames, f, s, d, m, dp,
          pp_feature_bank_bytes (banks[s]));
      /* steady from its first merge (its (F + 1)th frame) on, when each
       * frame's work is the last one's: a CUDA graph may replay it */
      g_assert_cmpint (pp_feature_bank_steady (banks[s]), ==,
          since[s] >= c->frames);
      since[s]++;
      /* counted on the backend: every frame that attends to a bank the
       * same rows, one that does not none */
      {
        guint64 a, b;

        pp_feature_bank_fused (banks[s], &a, &b);
        if (reset)
          g_assert_cmpuint (b, ==, counted[s]);
        else if (per_frame[s] == 0)
          per_frame[s] = b - counted[s];
        else
          g_assert_cmpuint (b - counted[s], ==, per_frame[s]);
        counted[s] = b;
      }
      /* bounded: once full (frame F, the first merge) it grows no more */
      if (f == c->frames)
        settled[s] = pp_feature_bank_bytes (banks[s]);
      else if (f > c->frames)
        g_assert_cmpuint (pp_feature_bank_bytes (banks[s]), ==, settled[s]);
      if (!(d <= TOLERANCE * MAX (1.0, m)))
        g_error ("%s F=%u frame %u step %u: max|diff| %.3e past %.1e",
            c->name, c->frames, f, s, d, TOLERANCE * MAX (1.0, m));
      /* an empty bank is plain self-attention */
      if (reset)
        g_assert_cmpfloat (dp, <=, TOLERANCE * MAX (1.0, mp));
      else
        changed += dp > 1e-3;
    }
  }
  for (guint s = 0; s < n_steps; s++) {
    guint64 a, b;

    pp_feature_bank_fused (banks[s], &a, &b);
    fused += a;
    candidates += b;
    g_assert_cmpuint (pp_feature_bank_bytes (banks[s]), >, 0);
    pp_feature_bank_free (banks[s]);
  }
  pp_unet_set_bank (unet, NULL);
  g_test_message ("%s F=%u: %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT
      " rows fused", c->name, c->frames, fused, candidates);
  /* the bank did change frames, and fusion took some rows, not all */
  g_assert_cmpuint (changed, >, 0);
  g_assert_cmpuint (fused, >, 0);
  g_assert_cmpuint (fused, <, candidates);
  for (guint s = 0; s < n_steps; s++)
    g_assert_cmpuint (per_frame[s], >, 0);
}

/* A bank takes one sample at a time. */
static void
test_batch_refused (void)
{
  const gint64 shape[4] = { 2, 4, 6, 10 };
  const gint64 ctx_shape[3] = { 2, 7, 16 };
  g_autofree gchar *dir = g_build_filename (data_dir, "unet-sd15-tiny", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpUnet) unet = pp_unet_load (dir, pp_backend_default (),
      PP_DTYPE_F32, &error);
  g_autoptr (PpFeatureBank) bank = pp_feature_bank_new (1, 0.9);
  g_autoptr (PpTensor) x = pp_tensor_new ("x", PP_DTYPE_F32, 4, shape,
      &error);
  g_autoptr (PpTensor) ctx = pp_tensor_new ("c", PP_DTYPE_F32, 3, ctx_shape,
      &error);
  PpTensor *y = NULL;

  g_assert_no_error (error);
  pp_unet_set_bank (unet, bank);
  g_assert_false (pp_unet_forward (unet, x, 999, ctx, &y, NULL, NULL,
          &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, "one sample at a time"));
  g_assert_null (y);
}

/* 16-bit rows: a layer fed F16 (then BF16) keys, values and outputs, and
 * one fed the same values as F32, must hand back the same extended keys
 * and values and the same fused outputs, rounded, frame after frame, the
 * bank filling, fusing and merging (3 frames of 6 rows in a 2-frame bank,
 * every output near one of the frame before). */
#define ROWS 6
#define CHANNELS 5
#define BANK_FRAMES 2
#define SEQUENCE 4

static gpointer
to_device (PpBackend * be, const float *host, PpDType dtype, gsize n)
{
  g_autoptr (GError) error = NULL;
  gpointer dev = pp_backend_alloc (be, n * sizeof (float), &error);
  g_autofree guint16 *narrow = g_new (guint16, n);

  g_assert_no_error (error);
  if (dtype == PP_DTYPE_F32) {
    pp_backend_upload (be, dev, host, n * sizeof (float));
    return dev;
  }
  for (gsize i = 0; i < n; i++)
    narrow[i] = dtype == PP_DTYPE_F16 ? pp_f32_to_f16 (host[i])
        : pp_f32_to_bf16 (host[i]);
  pp_backend_upload (be, dev, narrow, n * sizeof (guint16));
  return dev;
}

/* @n values at @dev, widened. */
static float *
from_device (PpBackend * be, gconstpointer dev, PpDType dtype, gsize n)
{
  float *host = g_new (float, n);
  g_autofree guint16 *narrow = g_new (guint16, n);

  if (dtype == PP_DTYPE_F32) {
    pp_backend_download (be, host, dev, n * sizeof (float));
    return host;
  }
  pp_backend_download (be, narrow, dev, n * sizeof (guint16));
  for (gsize i = 0; i < n; i++)
    host[i] = dtype == PP_DTYPE_F16 ? pp_f16_to_f32 (narrow[i])
        : pp_bf16_to_f32 (narrow[i]);
  return host;
}

static float
rounded (PpDType dtype, float x)
{
  return dtype == PP_DTYPE_F16 ? pp_f16_to_f32 (pp_f32_to_f16 (x))
      : pp_bf16_to_f32 (pp_f32_to_bf16 (x));
}

static void
check_rounded (const gchar * what, PpDType dtype, guint frame,
    const float *wide, const float *narrow, gsize n)
{
  for (gsize i = 0; i < n; i++)
    if (rounded (dtype, wide[i]) != narrow[i])
      g_error ("%s rows in %s, frame %u, element %" G_GSIZE_FORMAT ": %.9g, "
          "the float32 rows' %.9g rounds to %.9g", what,
          pp_dtype_weights_name (dtype), frame, i, narrow[i], wide[i],
          rounded (dtype, wide[i]));
}

static void
test_16_bit_rows (void)
{
  PpBackend *be = pp_backend_default ();
  const gsize own = ROWS * CHANNELS;

  for (PpDType dtype = PP_DTYPE_F16; dtype <= PP_DTYPE_BF16; dtype++) {
    g_autoptr (PpFeatureBank) wide_bank = pp_feature_bank_new (BANK_FRAMES,
        0.5);
    g_autoptr (PpFeatureBank) narrow_bank = pp_feature_bank_new (BANK_FRAMES,
        0.5);
    GRand *rand = g_rand_new_with_seed (11);
    float prev_o[ROWS * CHANNELS];

    for (guint f = 0; f < SEQUENCE; f++) {
      PpFeatureBank *banks[2] = { wide_bank, narrow_bank };
      const PpDType dtypes[2] = { PP_DTYPE_F32, dtype };
      float k[ROWS * CHANNELS], v[ROWS * CHANNELS], o[ROWS * CHANNELS];
      float *got[2][3] = { {NULL} };
      guint64 fused, candidates;
      gsize banked = 0;

      /* Values the dtype holds exactly; outputs near the last frame's. */
      for (gsize i = 0; i < own; i++) {
        k[i] = rounded (dtype, (float) g_rand_double_range (rand, -1, 1));
        v[i] = rounded (dtype, (float) g_rand_double_range (rand, -1, 1));
        o[i] = rounded (dtype, f > 0 && i % 3 != 0 ? prev_o[i]
            + (float) g_rand_double_range (rand, -0.05, 0.05)
            : (float) g_rand_double_range (rand, -1, 1));
      }
      memcpy (prev_o, o, sizeof o);
      for (guint b = 0; b < 2; b++) {
        const PpDType t = dtypes[b];
        PpBankLayer *layer;
        gpointer dk = to_device (be, k, t, own), dv = to_device (be, v, t, own);
        gpointer dout = to_device (be, o, t, own), ke, ve;
        gsize n;

        pp_feature_bank_begin (banks[b]);
        layer = pp_feature_bank_next (banks[b], CHANNELS);
        banked = (gsize) pp_bank_layer_rows (layer) * CHANNELS;
        n = own + banked;
        ke = pp_backend_alloc (be, n * sizeof (float), NULL);
        ve = pp_backend_alloc (be, n * sizeof (float), NULL);
        g_assert_true (ke != NULL && ve != NULL);
        pp_bank_layer_extend (layer, be, pp_view (dk, t, own),
            pp_view (dv, t, own), ROWS, pp_out (ke, t, n), pp_out (ve, t, n));
        got[b][0] = from_device (be, ke, t, n);
        got[b][1] = from_device (be, ve, t, n);
        pp_bank_layer_take (layer, be, pp_view (dk, t, own),
            pp_view (dv, t, own), pp_out (dout, t, own), ROWS, TRUE);
        got[b][2] = from_device (be, dout, t, own);
        for (gpointer *p = (gpointer[]) { dk, dv, dout, ke, ve, NULL }; *p;
            p++)
          pp_backend_free (be, *p);
      }
      check_rounded ("extended keys", dtype, f, got[0][0], got[1][0],
          own + banked);
      check_rounded ("extended values", dtype, f, got[0][1], got[1][1],
          own + banked);
      check_rounded ("fused outputs", dtype, f, got[0][2], got[1][2], own);
      for (guint b = 0; b < 2; b++)
        for (guint i = 0; i < 3; i++)
          g_free (got[b][i]);
      pp_feature_bank_fused (narrow_bank, &fused, &candidates);
      g_test_message ("%s frame %u: %" G_GSIZE_FORMAT " banked values, %"
          G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " rows fused",
          pp_dtype_weights_name (dtype), f, banked, fused, candidates);
    }
    g_rand_free (rand);
    {
      guint64 fused, candidates;

      /* The sequence fused some rows, and merged: the bank is full. */
      pp_feature_bank_fused (narrow_bank, &fused, &candidates);
      g_assert_cmpuint (fused, >, 0);
      g_assert_cmpuint (pp_feature_bank_rows (narrow_bank), ==,
          BANK_FRAMES * ROWS);
      g_assert_true (pp_feature_bank_steady (narrow_bank));
    }
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc != 2) {
    g_printerr ("usage: %s DATA_DIR\n", argv[0]);
    return 2;
  }
  data_dir = argv[1];
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree gchar *path = g_strdup_printf ("/feature-bank/%s/F%u",
        cases[i].name, cases[i].frames);

    g_test_add_data_func (path, &cases[i], test_sequence);
  }
  g_test_add_func ("/feature-bank/batch-refused", test_batch_refused);
  g_test_add_func ("/feature-bank/16-bit-rows", test_16_bit_rows);
  return g_test_run ();
}
