/* kernels/io + kernels/models: LoRA files fused at load against diffusers'
 * own key handling (tests/data/lora, tests/reference/make_lora_fixtures.py):
 * a kohya file (alphas, 1×1 and 3×3 convs, text-encoder pairs) and a
 * diffusers/PEFT file (mixed ranks, no alphas) at two scales.  Every
 * changed tensor of the tiny SD1.5 UNet and text encoder equals the
 * reference's fuse, every other one is untouched, the fused UNet's output
 * equals diffusers', the digest covers the LoRA, and what cannot be fused
 * is named.  The model runs on the backend PPDIFFUSE_BACKEND names (the
 * CPU by default), weights in float32.
 *
 * Usage: test-kernels-lora DATA_DIR [g_test options] */
#include "pp-clip-text.h"
#include "pp-error.h"
#include "pp-lora.h"
#include "pp-npy.h"
#include "pp-safetensors.h"
#include "pp-unet.h"

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

#define UNET_DIR "unet-sd15-tiny"
#define TEXT_DIR "clip-text/quick-gelu"
#define LORA_DIR "lora"
#define WEIGHTS_BOUND 1e-5      /* float32 sums against float64 ones */
#define OUT_BOUND 1e-4          /* docs/models.md, relative to max(1, |ref|) */

static const gchar *data_dir;

static gchar *
data_path (const gchar * dir, const gchar * file)
{
  return g_build_filename (data_dir, dir, file, NULL);
}

/* lora.json's setting with every file as a full path. */
static gchar *
setting (void)
{
  g_autofree gchar *path = data_path (LORA_DIR, "lora.json");
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) error = NULL;
  g_auto (GStrv) parts = NULL;
  GString *s = g_string_new (NULL);

  json_parser_load_from_file (parser, path, &error);
  g_assert_no_error (error);
  parts = g_strsplit (json_object_get_string_member (json_node_get_object
          (json_parser_get_root (parser)), "setting"), ",", -1);
  for (guint i = 0; parts[i] != NULL; i++) {
    g_autofree gchar *full = data_path (LORA_DIR, parts[i]);

    g_string_append_printf (s, "%s%s", i ? "," : "", full);
  }
  return g_string_free (s, FALSE);
}

static PpLora *
open_setting (void)
{
  g_autofree gchar *spec = setting ();
  g_autoptr (GError) error = NULL;
  PpLora *lora = pp_lora_open (spec, &error);

  g_assert_no_error (error);
  g_assert_true (pp_lora_targets (lora, PP_LORA_UNET));
  g_assert_true (pp_lora_targets (lora, PP_LORA_TEXT_ENCODER));
  return lora;
}

static const gfloat *
get (PpWeights * w, const gchar * key)
{
  gint64 shape[PP_ST_MAX_DIMS];
  guint ndim = 0;
  g_autoptr (GError) error = NULL;
  const gfloat *x;

  g_assert_true (pp_weights_shape (w, key, &ndim, shape));
  x = pp_weights_get (w, key, ndim, shape, &error);
  g_assert_no_error (error);
  return x;
}

/* Fuses the setting's @target pairs into the weights file @weights_file
 * and holds every tensor to fused-@ref_name or, when it has none, to the
 * file's own bytes. */
static void
check_fused (const gchar * component_dir, const gchar * weights_file,
    PpLoraTarget target, const gchar * ref_name, guint expected_changed)
{
  g_autofree gchar *path = data_path (component_dir, weights_file);
  g_autofree gchar *ref_path = data_path (LORA_DIR, ref_name);
  g_autoptr (PpLora) lora = open_setting ();
  g_autoptr (GError) error = NULL;
  g_autoptr (PpWeights) w = pp_weights_open (path, &error);
  g_autoptr (PpWeights) plain = pp_weights_open (path, &error);
  g_autoptr (PpSafetensors) ref = pp_safetensors_open (ref_path, &error);
  g_autofree gchar *plain_digest = NULL;
  guint changed = 0;

  g_assert_no_error (error);
  plain_digest = g_strdup (pp_weights_digest (plain));
  g_assert_true (pp_lora_fuse (lora, target, w, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (pp_weights_digest (w), !=, plain_digest);
  for (guint i = 0; i < pp_weights_n_tensors (w); i++) {
    const gchar *key = pp_weights_key (w, i, NULL, NULL);
    const PpStEntry *e = pp_safetensors_find (ref, key);
    const gfloat *x = get (w, key), *y = get (plain, key);
    gint64 shape[PP_ST_MAX_DIMS];
    guint ndim;
    gsize n = 1;

    pp_weights_key (w, i, &ndim, shape);
    for (guint d = 0; d < ndim; d++)
      n *= (gsize) shape[d];
    if (e == NULL) {
      g_assert_cmpmem (x, n * sizeof (gfloat), y, n * sizeof (gfloat));
      continue;
    } else {
      g_autofree gfloat *r = g_new (gfloat, n);
      gdouble d = 0.0, moved = 0.0;

      g_assert_cmpuint (pp_st_entry_numel (e), ==, n);
      pp_safetensors_read_f32 (e, r);
      for (gsize j = 0; j < n; j++) {
        gdouble diff = fabs ((gdouble) x[j] - r[j]);

        if (!(diff <= d))
          d = isnan (diff) ? INFINITY : diff;
        moved = MAX (moved, fabs ((gdouble) r[j] - y[j]));
      }
      g_test_message ("%s: max|diff| %.2e, the LoRA moved it by up to %.3g",
          key, d, moved);
      g_assert_cmpfloat (d, <=, WEIGHTS_BOUND);
      /* a fixture that changed nothing would test nothing */
      g_assert_cmpfloat (moved, >, 100 * WEIGHTS_BOUND);
      changed++;
    }
  }
  g_assert_cmpuint (changed, ==, expected_changed);
  g_assert_cmpuint (changed, ==, pp_safetensors_n_entries (ref));
}

static void
test_unet_weights (void)
{
  check_fused (UNET_DIR, "diffusion_pytorch_model.safetensors",
      PP_LORA_UNET, "fused-unet.safetensors", 10);
}

static void
test_text_weights (void)
{
  check_fused (TEXT_DIR, "model.safetensors", PP_LORA_TEXT_ENCODER,
      "fused-text.safetensors", 4);
}

/* The UNet loaded with the setting gives diffusers' output of the fused
 * model; the text encoder loads with its pairs. */
static void
test_unet_forward (void)
{
  g_autofree gchar *dir = g_build_filename (data_dir, UNET_DIR, NULL);
  g_autofree gchar *text_dir = g_build_filename (data_dir, TEXT_DIR, NULL);
  g_autofree gchar *sample_path = data_path (UNET_DIR, "sample.npy");
  g_autofree gchar *ctx_path = data_path (UNET_DIR,
      "encoder_hidden_states.npy");
  g_autofree gchar *t_path = data_path (UNET_DIR, "timestep.txt");
  g_autofree gchar *ref_path = data_path (LORA_DIR, "out.npy");
  g_autofree gchar *t_text = NULL;
  g_autoptr (PpLora) lora = open_setting ();
  g_autoptr (GError) error = NULL;
  g_autoptr (PpUnet) unet = NULL, plain = NULL;
  g_autoptr (PpClipText) text = NULL;
  g_autoptr (PpTensor) sample = NULL, ctx = NULL, ref = NULL, out = NULL;
  gdouble d = 0.0, m = 0.0;
  const gfloat *x, *r;

  unet = pp_unet_load_lora (dir, pp_backend_default (), PP_DTYPE_F32, lora,
      &error);
  g_assert_no_error (error);
  plain = pp_unet_load (dir, pp_backend_default (), PP_DTYPE_F32, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (pp_unet_weights_digest (unet), !=,
      pp_unet_weights_digest (plain));
  text = pp_clip_text_load_lora (text_dir, pp_backend_default (), 0, lora,
      &error);
  g_assert_no_error (error);
  sample = pp_npy_load (sample_path, &error);
  ctx = pp_npy_load (ctx_path, &error);
  ref = pp_npy_load (ref_path, &error);
  g_file_get_contents (t_path, &t_text, NULL, &error);
  g_assert_no_error (error);
  g_assert_true (pp_unet_forward (unet, sample, g_ascii_strtod (t_text,
              NULL), ctx, &out, NULL, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpint (pp_tensor_numel (out), ==, pp_tensor_numel (ref));
  x = out->data;
  r = ref->data;
  for (gint64 i = 0; i < pp_tensor_numel (ref); i++) {
    gdouble e = fabs ((gdouble) x[i] - r[i]);

    if (!(e <= d))
      d = isnan (e) ? INFINITY : e;
    m = MAX (m, fabs (r[i]));
  }
  g_test_message ("fused UNet out: max|diff| %.3e, max|ref| %.4g", d, m);
  g_assert_cmpfloat (d, <=, OUT_BOUND * MAX (1.0, m));
}

/* A LoRA file of @n_keys keys (each @ndim-d of @dims) in a new file. */
static gchar *
write_lora (const gchar * const *keys, const gint64 (*shapes)[2], guint n)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("lora-XXXXXX", &error);
  g_autoptr (GArray) entries = g_array_new (FALSE, TRUE, sizeof (PpStEntry));
  g_autoptr (GPtrArray) data = g_ptr_array_new_with_free_func (g_free);
  gchar *path;

  g_assert_no_error (error);
  for (guint i = 0; i < n; i++) {
    PpStEntry e = { 0 };
    gsize numel = (gsize) (shapes[i][0] * shapes[i][1]);
    gfloat *x = g_new0 (gfloat, numel);

    for (gsize j = 0; j < numel; j++)
      x[j] = 0.01f * (gfloat) (j % 7);
    g_ptr_array_add (data, x);
    e.name = (gchar *) keys[i];
    e.dtype = PP_ST_F32;
    e.ndim = 2;
    e.shape[0] = shapes[i][0];
    e.shape[1] = shapes[i][1];
    e.nbytes = numel * sizeof (gfloat);
    e.data = (const guint8 *) x;
    g_array_append_val (entries, e);
  }
  path = g_build_filename (dir, "lora.safetensors", NULL);
  g_assert_true (pp_safetensors_write_entries (path, n,
          (const PpStEntry *) entries->data, NULL, &error));
  g_assert_no_error (error);
  return path;
}

static void
remove_lora (const gchar * path)
{
  g_autofree gchar *dir = g_path_get_dirname (path);

  g_unlink (path);
  g_rmdir (dir);
}

typedef struct
{
  const gchar *path;
  const gchar *keys[2];
  gint64 shapes[2][2];
  gboolean at_open;             /* refused when the file is read */
  const gchar *needles[3];
} RefusedCase;

#define ATTN1_Q "unet.down_blocks.0.attentions.0.transformer_blocks.0." \
  "attn1.to_q"

static const RefusedCase refused_cases[] = {
  {"/lora/refused/no-match",
        {"lora_unet_down_blocks_9_resnets_0_conv1.lora_down.weight",
          "lora_unet_down_blocks_9_resnets_0_conv1.lora_up.weight"},
        {{2, 32}, {32, 2}}, FALSE,
      {"match no weight of the unet", "lora_unet_down_blocks_9_resnets_0"
            "_conv1"}},
  {"/lora/refused/layout", {"unet.conv_in.hada_w1_a", "unet.conv_in.x"},
        {{2, 4}, {4, 2}}, TRUE,
      {"no LoRA layout", "'unet.conv_in.hada_w1_a'"}},
  {"/lora/refused/half", {ATTN1_Q ".lora_A.weight", NULL},
        {{2, 32}, {0, 0}}, TRUE,
      {ATTN1_Q, "not its up (B) one"}},
  {"/lora/refused/shape", {ATTN1_Q ".lora_A.weight", ATTN1_Q
            ".lora_B.weight"},
        {{2, 31}, {32, 2}}, FALSE,
      {"does not fit weight", ATTN1_Q}},
};

static void
test_refused (gconstpointer data)
{
  const RefusedCase *c = data;
  const guint n = c->keys[1] != NULL ? 2 : 1;
  g_autofree gchar *path = write_lora (c->keys, c->shapes, n);
  g_autofree gchar *dir = g_build_filename (data_dir, UNET_DIR, NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpLora) lora = pp_lora_open (path, &error);

  if (c->at_open)
    g_assert_null (lora);
  else {
    PpUnet *unet;

    g_assert_no_error (error);
    unet = pp_unet_load_lora (dir, pp_backend_default (), 0, lora, &error);
    g_assert_null (unet);
  }
  g_assert_nonnull (error);
  g_test_message ("expected error: %s", error->message);
  for (guint i = 0; c->needles[i] != NULL; i++)
    if (strstr (error->message, c->needles[i]) == NULL)
      g_error ("error '%s' does not mention '%s'", error->message,
          c->needles[i]);
  remove_lora (path);
}

/* The setting's syntax: a scale after the last ':', a missing file. */
static void
test_setting (void)
{
  g_autofree gchar *file = data_path (LORA_DIR, "lora-kohya.safetensors");
  g_autofree gchar *scaled = g_strdup_printf ("%s:0.25", file);
  g_autofree gchar *missing = g_strdup_printf ("%s.nowhere:0.5", file);
  g_autofree gchar *dir = g_build_filename (data_dir, UNET_DIR, NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpLora) a = pp_lora_open (file, &error);
  g_autoptr (PpLora) b = pp_lora_open (scaled, &error);
  g_autoptr (PpUnet) ua = NULL, ub = NULL;
  PpLora *none;

  g_assert_no_error (error);
  ua = pp_unet_load_lora (dir, pp_backend_default (), 0, a, &error);
  ub = pp_unet_load_lora (dir, pp_backend_default (), 0, b, &error);
  g_assert_no_error (error);
  /* the scale is part of what the weights are */
  g_assert_cmpstr (pp_unet_weights_digest (ua), !=,
      pp_unet_weights_digest (ub));
  none = pp_lora_open (missing, &error);
  g_assert_null (none);
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, ".nowhere"));
  g_clear_error (&error);
  none = pp_lora_open ("", &error);
  g_assert_null (none);
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
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
  g_test_add_func ("/lora/unet/weights", test_unet_weights);
  g_test_add_func ("/lora/text-encoder/weights", test_text_weights);
  g_test_add_func ("/lora/unet/forward", test_unet_forward);
  g_test_add_func ("/lora/setting", test_setting);
  for (guint i = 0; i < G_N_ELEMENTS (refused_cases); i++)
    g_test_add_data_func (refused_cases[i].path, &refused_cases[i],
        test_refused);
  return g_test_run ();
}
