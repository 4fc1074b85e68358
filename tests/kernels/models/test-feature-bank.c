/* kernels/models: the UNet's temporal feature bank (pp-feature-bank.h)
 * against diffusers' own UNet2DConditionModel with an attention processor
 * that implements the same rule, in float64 (tests/data/feature-bank,
 * tests/reference/make_feature_bank_fixtures.py): a sequence of frames of
 * two denoising steps (one bank each) with a reset in the middle, for bank
 * sizes of 1 and 2 frames, both UNet families.  The arrays hold
 * [frames · steps, 4, H, W], frame-major.  Every output within the
 * model tests' bound; the frames right after a reset equal the UNet
 * without a bank; the bank changes the others.
 *
 * Usage: test-kernels-feature-bank DATA_DIR [g_test options] */
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
      g_assert_cmpuint (pp_feature_bank_rows (banks[s]), ==, 0);
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
  return g_test_run ();
}
