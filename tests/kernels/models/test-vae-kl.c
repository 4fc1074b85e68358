/* kernels/models: AutoencoderKL (the released SD VAE) against diffusers'
 * own AutoencoderKL run in float64 on a tiny seeded configuration
 * (tests/data/vae-kl-tiny, tests/reference/make_vae_kl_fixtures.py):
 * every tap of an encode and of a decode, loaded by class through
 * pp_vae_load; the older attention key names; the classes refused.  On
 * the backend PPDIFFUSE_BACKEND names (the CPU by default), weights in
 * float32.
 *
 * Usage: test-kernels-vae-kl DATA_DIR [g_test options] */
#include "pp-error.h"
#include "pp-npy.h"
#include "pp-safetensors.h"
#include "pp-vae.h"
#include "pp-weights.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#define FIXTURE "vae-kl-tiny"
#define CONFIG_FILE "config.json"
/* docs/models.md: |c − ref| ≤ 1e-4 · max(1, max|ref|) per tensor. */
#define TOLERANCE 1e-4

static const gchar *data_dir;

static gchar *
fixture_path (const gchar * file)
{
  return g_build_filename (data_dir, FIXTURE, file, NULL);
}

typedef struct
{
  GHashTable *tensors;          /* name → PpTensor (host copy) */
} Taps;

static void
record_tap (const gchar * name, const PpTensor * t, gpointer data)
{
  Taps *taps = data;
  g_autoptr (GError) error = NULL;
  PpTensor *copy = pp_tensor_new (name, t->dtype, t->ndim, t->shape, &error);

  g_assert_no_error (error);
  memcpy (copy->data, t->data, t->nbytes);
  g_hash_table_replace (taps->tensors, g_strdup (name), copy);
}

static void
taps_init (Taps * taps)
{
  taps->tensors = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      (GDestroyNotify) pp_tensor_free);
}

static PpTensor *
load_fixture (const gchar * file)
{
  g_autofree gchar *path = fixture_path (file);
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_npy_load (path, &error);

  g_assert_no_error (error);
  return t;
}

/* Max |a − ref| against the bound; shapes must agree. */
static void
assert_close (const PpTensor * a, const PpTensor * ref, const gchar * what)
{
  const gfloat *x = a->data, *r = ref->data;
  gdouble d = 0.0, m = 0.0;

  g_assert_cmpuint (a->ndim, ==, ref->ndim);
  g_assert_cmpmem (a->shape, a->ndim * sizeof (gint64), ref->shape,
      ref->ndim * sizeof (gint64));
  for (gint64 i = 0; i < pp_tensor_numel (ref); i++) {
    gdouble e = fabs ((gdouble) x[i] - r[i]);

    /* NaN never passes */
    if (!(e <= d))
      d = isnan (e) ? INFINITY : e;
    m = MAX (m, fabs (r[i]));
  }
  g_test_message ("%s: max|diff| %.3e, max|ref| %.4g", what, d, m);
  if (!(d <= TOLERANCE * MAX (1.0, m)))
    g_error ("%s: max|diff| %.3e past the bound %.1e (max|ref| %.4g)", what,
        d, TOLERANCE * MAX (1.0, m), m);
}

/* Every tap-*.npy of the fixture whose name starts with one of @prefixes
 * was emitted and is within the bound, in the order the model ran: the
 * first tap past it names the block where the two models part. */
static void
check_taps (Taps * taps, const gchar * const *prefixes, guint expected)
{
  g_autofree gchar *dir = g_build_filename (data_dir, FIXTURE, NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (GDir) d = g_dir_open (dir, 0, &error);
  const gchar *file;
  guint checked = 0;

  g_assert_no_error (error);
  while ((file = g_dir_read_name (d)) != NULL) {
    g_autofree gchar *name = NULL;
    g_autoptr (PpTensor) ref = NULL;
    const PpTensor *got;
    gboolean in = FALSE;

    if (!g_str_has_prefix (file, "tap-") || !g_str_has_suffix (file, ".npy"))
      continue;
    name = g_strndup (file + 4, strlen (file) - 8);
    for (guint i = 0; prefixes[i] != NULL; i++)
      in |= g_str_has_prefix (name, prefixes[i]);
    if (!in)
      continue;
    got = g_hash_table_lookup (taps->tensors, name);
    if (got == NULL)
      g_error ("fixture tap '%s' was not emitted by the C model", name);
    ref = load_fixture (file);
    assert_close (got, ref, name);
    checked++;
  }
  g_assert_cmpuint (checked, ==, expected);
}

static PpVae *
load_vae (const gchar * dir)
{
  g_autoptr (GError) error = NULL;
  /* float32 weights whatever the backend's default: the bound is
   * float32's (the GPU check runs this on CUDA). */
  PpVae *v = pp_vae_load (dir, pp_backend_default (), PP_DTYPE_F32, &error);

  g_assert_no_error (error);
  g_assert_cmpstr (pp_vae_class (v), ==, "AutoencoderKL");
  g_assert_cmpuint (pp_vae_latent_channels (v), ==, 4);
  g_assert_cmpuint (pp_vae_scale_factor (v), ==, 8);
  g_assert_cmpint (pp_vae_act_layout (v), ==,
      pp_backend_act_layout (pp_backend_default (), PP_DTYPE_F32));
  return v;
}

static void
test_encode (void)
{
  /* conv_in, 4 down blocks, mid, conv_out, quant_conv */
  static const gchar *const prefixes[] = { "encoder.", "quant_conv", NULL };
  g_autofree gchar *dir = g_build_filename (data_dir, FIXTURE, NULL);
  g_autoptr (PpVae) v = load_vae (dir);
  g_autoptr (PpTensor) image = load_fixture ("image.npy");
  g_autoptr (PpTensor) ref = load_fixture ("latents.npy");
  g_autoptr (PpTensor) latents = NULL;
  g_autoptr (GError) error = NULL;
  Taps taps;

  taps_init (&taps);
  g_assert_true (pp_vae_encode (v, image, &latents, record_tap, &taps,
          &error));
  g_assert_no_error (error);
  check_taps (&taps, prefixes, 8);
  assert_close (latents, ref, "latents");
  g_assert_cmpmem (latents->data, latents->nbytes,
      ((PpTensor *) g_hash_table_lookup (taps.tensors, "latents"))->data,
      latents->nbytes);
  g_hash_table_unref (taps.tensors);
}

static void
test_decode (void)
{
  /* post_quant_conv, conv_in, mid, 4 up blocks */
  static const gchar *const prefixes[] = { "decoder.", "post_quant_conv",
    NULL
  };
  g_autofree gchar *dir = g_build_filename (data_dir, FIXTURE, NULL);
  g_autoptr (PpVae) v = load_vae (dir);
  g_autoptr (PpTensor) latents = load_fixture ("latents.npy");
  g_autoptr (PpTensor) ref = load_fixture ("decoded.npy");
  g_autoptr (PpTensor) image = NULL;
  g_autoptr (GError) error = NULL;
  Taps taps;

  taps_init (&taps);
  g_assert_true (pp_vae_decode (v, latents, &image, record_tap, &taps,
          &error));
  g_assert_no_error (error);
  check_taps (&taps, prefixes, 7);
  assert_close (image, ref, "image");
  g_hash_table_unref (taps.tensors);
}

/* A copy of the fixture in a new directory: its config.json with
 * @config_edit (NULL: as it is) replacing @config_from, and its weights
 * with the mid blocks' attention under the names of checkpoints saved
 * before diffusers' Attention class when @old_names. */
static gchar *
fixture_copy (gboolean old_names, const gchar * config_from,
    const gchar * config_edit)
{
  static const gchar *const renames[][2] = {
    {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."},
    {".to_out.0.", ".proj_attn."},
  };
  g_autofree gchar *src = fixture_path (PP_WEIGHTS_FILE);
  g_autofree gchar *cfg_src = fixture_path (CONFIG_FILE);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpSafetensors) st = pp_safetensors_open (src, &error);
  g_autoptr (GArray) entries = g_array_new (FALSE, TRUE, sizeof (PpStEntry));
  g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  g_autofree gchar *dir = g_dir_make_tmp ("vae-kl-XXXXXX", &error);
  g_autofree gchar *dst = NULL, *cfg_dst = NULL, *cfg_text = NULL;
  g_autofree gchar *edited = NULL;
  guint renamed = 0;

  g_assert_no_error (error);
  for (guint i = 0; i < pp_safetensors_n_entries (st); i++) {
    PpStEntry e = *pp_safetensors_entry (st, i);

    for (guint r = 0; old_names && r < G_N_ELEMENTS (renames); r++) {
      const gchar *at = strstr (e.name, renames[r][0]);
      gchar *name;

      if (at == NULL || strstr (e.name, "attentions.0") == NULL)
        continue;
      name = g_strdup_printf ("%.*s%s%s", (int) (at - e.name), e.name,
          renames[r][1], at + strlen (renames[r][0]));
      g_ptr_array_add (names, name);
      e.name = name;
      renamed++;
    }
    g_array_append_val (entries, e);
  }
  /* 2 mid blocks × 4 linears × weight and bias */
  if (old_names)
    g_assert_cmpuint (renamed, ==, 16);
  dst = g_build_filename (dir, PP_WEIGHTS_FILE, NULL);
  g_assert_true (pp_safetensors_write_entries (dst, entries->len,
          (const PpStEntry *) entries->data, NULL, &error));
  g_file_get_contents (cfg_src, &cfg_text, NULL, &error);
  g_assert_no_error (error);
  if (config_edit != NULL) {
    g_assert_nonnull (strstr (cfg_text, config_from));
    {
      g_auto (GStrv) parts = g_strsplit (cfg_text, config_from, 2);

      edited = g_strjoin (config_edit, parts[0], parts[1], NULL);
    }
  }
  cfg_dst = g_build_filename (dir, CONFIG_FILE, NULL);
  g_assert_true (g_file_set_contents (cfg_dst, edited ? edited : cfg_text,
          -1, &error));
  return g_steal_pointer (&dir);
}

static void
remove_copy (const gchar * dir)
{
  g_autofree gchar *w = g_build_filename (dir, PP_WEIGHTS_FILE, NULL);
  g_autofree gchar *c = g_build_filename (dir, CONFIG_FILE, NULL);

  g_unlink (w);
  g_unlink (c);
  g_rmdir (dir);
}

/* The older attention names load the same model: the same bytes out. */
static void
test_old_attention_names (void)
{
  g_autofree gchar *dir = g_build_filename (data_dir, FIXTURE, NULL);
  g_autofree gchar *old = fixture_copy (TRUE, NULL, NULL);
  g_autoptr (PpVae) a = load_vae (dir);
  g_autoptr (PpVae) b = load_vae (old);
  g_autoptr (PpTensor) latents = load_fixture ("latents.npy");
  g_autoptr (PpTensor) x = NULL, y = NULL;
  g_autoptr (GError) error = NULL;

  g_assert_true (pp_vae_decode (a, latents, &x, NULL, NULL, &error));
  g_assert_true (pp_vae_decode (b, latents, &y, NULL, NULL, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (x->data, x->nbytes, y->data, y->nbytes);
  remove_copy (old);
}

typedef struct
{
  const gchar *path;
  const gchar *from, *to;       /* the config.json edit */
  const gchar *needles[4];      /* the error names these */
} RefusedCase;

static const RefusedCase refused_cases[] = {
  {"/vae-kl/refused/class", "\"AutoencoderKL\"", "\"VQModel\"",
      {"VQModel", "_class_name", "AutoencoderTiny (TAESD) and AutoencoderKL"}},
  {"/vae-kl/refused/no-class", "\"_class_name\"", "\"_not_class_name\"",
      {"names no VAE class", "AutoencoderKL"}},
  {"/vae-kl/refused/block", "\"DownEncoderBlock2D\",",
        "\"AttnDownEncoderBlock2D\",",
      {"down_block_types", "AttnDownEncoderBlock2D", "DownEncoderBlock2D"}},
  {"/vae-kl/refused/latents-mean", "\"latents_mean\": null",
        "\"latents_mean\": [0.1, 0.2, 0.3, 0.4]",
      {"latents_mean", "does not support"}},
  {"/vae-kl/refused/groups", "\"norm_num_groups\": 4",
        "\"norm_num_groups\": 3",
      {"block_out_channels", "norm_num_groups (3)"}},
};

static void
test_refused (gconstpointer data)
{
  const RefusedCase *c = data;
  g_autofree gchar *dir = fixture_copy (FALSE, c->from, c->to);
  g_autoptr (GError) error = NULL;
  PpVae *v = pp_vae_load (dir, pp_backend_default (), 0, &error);

  g_assert_null (v);
  g_assert_error (error, PP_ERROR, PP_ERROR_MODEL);
  g_test_message ("expected error: %s", error->message);
  for (guint i = 0; c->needles[i] != NULL; i++)
    if (strstr (error->message, c->needles[i]) == NULL)
      g_error ("error '%s' does not mention '%s'", error->message,
          c->needles[i]);
  remove_copy (dir);
}

/* An image whose sides are not multiples of 8 is refused, naming both. */
static void
test_input_shapes (void)
{
  const gint64 shape[4] = { 1, 3, 20, 40 };
  g_autofree gchar *dir = g_build_filename (data_dir, FIXTURE, NULL);
  g_autoptr (PpVae) v = load_vae (dir);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) odd = pp_tensor_new ("image", PP_DTYPE_F32, 4, shape,
      &error);
  PpTensor *out = NULL;

  g_assert_no_error (error);
  g_assert_false (pp_vae_encode (v, odd, &out, NULL, NULL, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, "multiples of 8"));
  g_assert_nonnull (strstr (error->message, "[1,3,20,40]"));
  g_assert_null (out);
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
  g_test_add_func ("/vae-kl/encode", test_encode);
  g_test_add_func ("/vae-kl/decode", test_decode);
  g_test_add_func ("/vae-kl/old-attention-names", test_old_attention_names);
  for (guint i = 0; i < G_N_ELEMENTS (refused_cases); i++)
    g_test_add_data_func (refused_cases[i].path, &refused_cases[i],
        test_refused);
  g_test_add_func ("/vae-kl/input-shapes", test_input_shapes);
  return g_test_run ();
}
