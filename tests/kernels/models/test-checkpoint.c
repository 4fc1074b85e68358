/* kernels/io: single-file checkpoints in the original Stable Diffusion
 * layout (tests/data/single-file, tests/reference/make_single_file_fixtures.py):
 * every part of a tiny SD 1.x and a tiny SD 2.x checkpoint, read as
 * diffusers' keys, holds exactly the tensors diffusers' own single-file
 * conversion gives (key, shape and the SHA-256 of the float32 values, from
 * F-expected.txt); the family is told by the keys; the parts build the
 * models; what is not a checkpoint of these families, and a key that maps
 * to nothing, is named.
 *
 * Usage: test-kernels-checkpoint DATA_DIR [g_test options] */
#include "pp-checkpoint.h"
#include "pp-clip-text.h"
#include "pp-error.h"
#include "pp-unet.h"
#include "pp-vae.h"

#include <glib/gstdio.h>
#include <string.h>

#define DIGEST_HEX 16

static const gchar *data_dir;

typedef struct
{
  const gchar *name;            /* sd15, turbo */
  PpFamily family;
} Family;

static const Family families[] = {
  {"sd15", PP_FAMILY_SD1},
  {"turbo", PP_FAMILY_SD2},
};

static const gchar *const part_dirs[] = {
  [PP_CHECKPOINT_UNET] = "unet", [PP_CHECKPOINT_VAE] = "vae",
  [PP_CHECKPOINT_TEXT_ENCODER] = "text_encoder",
};

static gchar *
checkpoint_path (const Family * f)
{
  g_autofree gchar *file = g_strdup_printf ("%s-tiny.safetensors", f->name);

  return g_build_filename (data_dir, "single-file", file, NULL);
}

static gchar *
config_path (const Family * f, PpCheckpointPart part)
{
  g_autofree gchar *dir = g_strdup_printf ("%s-config", f->name);

  return g_build_filename (data_dir, "single-file", dir, part_dirs[part],
      "config.json", NULL);
}

/* F-expected.txt's lines of @part: key → "SHAPE SHA". */
static GHashTable *
expected (const Family * f, PpCheckpointPart part)
{
  g_autofree gchar *file = g_strdup_printf ("%s-expected.txt", f->name);
  g_autofree gchar *path = g_build_filename (data_dir, "single-file", file,
      NULL);
  g_autofree gchar *text = NULL;
  g_autoptr (GError) error = NULL;
  g_auto (GStrv) lines = NULL;
  GHashTable *keys = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      g_free);

  g_file_get_contents (path, &text, NULL, &error);
  g_assert_no_error (error);
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++) {
    g_auto (GStrv) w = g_strsplit (lines[i], " ", -1);

    if (lines[i][0] == '#' || g_strv_length (w) != 4
        || !g_str_equal (w[0], part_dirs[part]))
      continue;
    g_hash_table_insert (keys, g_strdup (w[1]), g_strdup_printf ("%s %s",
            w[2], w[3]));
  }
  g_assert_cmpuint (g_hash_table_size (keys), >, 0);
  return keys;
}

/* "SHAPE SHA" of tensor @i of @w, as F-expected.txt writes it. */
static gchar *
describe (PpWeights * w, guint i, const gchar ** key)
{
  gint64 shape[PP_ST_MAX_DIMS];
  guint ndim;
  g_autoptr (GError) error = NULL;
  g_autoptr (GString) dims = g_string_new (NULL);
  g_autofree gchar *sha = NULL;
  const gfloat *x;
  gsize n = 1;

  *key = pp_weights_key (w, i, &ndim, shape);
  for (guint d = 0; d < ndim; d++) {
    g_string_append_printf (dims, "%s%" G_GINT64_FORMAT, d ? "," : "",
        shape[d]);
    n *= (gsize) shape[d];
  }
  x = pp_weights_get (w, *key, ndim, shape, &error);
  g_assert_no_error (error);
  /* little-endian floats: this test runs on little-endian hosts */
  sha = g_compute_checksum_for_data (G_CHECKSUM_SHA256, (const guchar *) x,
      n * sizeof (gfloat));
  sha[DIGEST_HEX] = '\0';
  return g_strdup_printf ("%s %s", dims->str, sha);
}

/* Every part holds exactly diffusers' tensors. */
static void
test_parts (gconstpointer data)
{
  const Family *f = data;
  g_autofree gchar *path = checkpoint_path (f);
  PpFamily family;
  g_autoptr (GError) error = NULL;

  g_assert_true (pp_checkpoint_is_file (path));
  pp_checkpoint_family (path, &family, &error);
  g_assert_no_error (error);
  g_assert_cmpint (family, ==, f->family);
  for (PpCheckpointPart part = PP_CHECKPOINT_UNET;
      part <= PP_CHECKPOINT_TEXT_ENCODER; part++) {
    g_autofree gchar *config = config_path (f, part);
    g_autoptr (GHashTable) want = expected (f, part);
    g_autoptr (PpWeights) w = pp_checkpoint_part (path, part, config,
        &error);
    guint bad = 0;

    g_assert_no_error (error);
    for (guint i = 0; i < pp_weights_n_tensors (w); i++) {
      const gchar *key;
      g_autofree gchar *got = describe (w, i, &key);
      const gchar *ref = g_hash_table_lookup (want, key);

      if (g_strcmp0 (got, ref) != 0 && bad++ < 5)
        g_printerr ("%s %s: '%s', diffusers: '%s'\n", part_dirs[part], key,
            got, ref ? ref : "(no such key)");
    }
    g_assert_cmpuint (bad, ==, 0);
    g_assert_cmpuint (pp_weights_n_tensors (w), ==, g_hash_table_size (want));
    g_test_message ("%s %s: %u tensors as diffusers converts them", f->name,
        part_dirs[part], pp_weights_n_tensors (w));
  }
}

/* The parts build the models of their configs. */
static void
test_models (gconstpointer data)
{
  const Family *f = data;
  g_autofree gchar *path = checkpoint_path (f);
  g_autofree gchar *unet_config = config_path (f, PP_CHECKPOINT_UNET);
  g_autofree gchar *vae_config = config_path (f, PP_CHECKPOINT_VAE);
  g_autofree gchar *text_config = config_path (f,
      PP_CHECKPOINT_TEXT_ENCODER);
  g_autoptr (GError) error = NULL;
  PpBackend *be = pp_backend_default ();
  g_autoptr (PpUnet) unet = pp_unet_load_weights (unet_config,
      pp_checkpoint_part (path, PP_CHECKPOINT_UNET, unet_config, &error),
      be, PP_DTYPE_F32, NULL, &error);
  g_autoptr (PpVae) vae = NULL;
  g_autoptr (PpClipText) text = NULL;

  g_assert_no_error (error);
  vae = pp_vae_load_checkpoint (vae_config, pp_checkpoint_part (path,
          PP_CHECKPOINT_VAE, vae_config, &error), be, PP_DTYPE_F32, &error);
  g_assert_no_error (error);
  text = pp_clip_text_load_weights (text_config, pp_checkpoint_part (path,
          PP_CHECKPOINT_TEXT_ENCODER, text_config, &error), be, PP_DTYPE_F32,
      NULL, &error);
  g_assert_no_error (error);
  g_assert_nonnull (pp_unet_weights_digest (unet));
}

/* Without config=, the family's released configurations: the tiny
 * checkpoint's tensors are named against them, by shape. */
static void
test_family_configs (gconstpointer data)
{
  const Family *f = data;
  g_autofree gchar *path = checkpoint_path (f);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("family-XXXXXX", &error);
  g_autofree gchar *unet_config = NULL;
  PpWeights *w;
  PpUnet *unet;

  g_assert_no_error (error);
  g_assert_true (pp_family_write_configs (f->family, dir, &error));
  unet_config = g_build_filename (dir, "unet", "config.json", NULL);
  /* The tiny UNet's blocks are not the released ones: either its keys
   * number blocks the released layout does not have, or its shapes are
   * not the released ones. */
  w = pp_checkpoint_part (path, PP_CHECKPOINT_UNET, unet_config, &error);
  unet = w != NULL ? pp_unet_load_weights (unet_config, w,
      pp_backend_default (), PP_DTYPE_F32, NULL, &error) : NULL;
  g_assert_null (unet);
  g_assert_nonnull (error);
  g_test_message ("expected error: %s", error->message);
  if (w == NULL) {
    g_assert_nonnull (strstr (error->message, "map to no diffusers weight"));
    g_assert_nonnull (strstr (error->message, unet_config));
  } else
    g_assert_nonnull (strstr (error->message, "the model expects"));
  pp_family_remove_configs (dir);
  g_assert_false (g_file_test (dir, G_FILE_TEST_EXISTS));
}

/* A file of @n F32 scalars named @keys. */
static gchar *
write_keys (const gchar * const *keys, guint n)
{
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("ckpt-XXXXXX", &error);
  g_autoptr (GArray) entries = g_array_new (FALSE, TRUE, sizeof (PpStEntry));
  static const gfloat one = 1.0f;
  gchar *path;

  g_assert_no_error (error);
  for (guint i = 0; i < n; i++) {
    PpStEntry e = { 0 };

    e.name = (gchar *) keys[i];
    e.dtype = PP_ST_F32;
    e.ndim = 1;
    e.shape[0] = 1;
    e.nbytes = sizeof one;
    e.data = (const guint8 *) &one;
    g_array_append_val (entries, e);
  }
  path = g_build_filename (dir, "model.safetensors", NULL);
  g_assert_true (pp_safetensors_write_entries (path, n,
          (const PpStEntry *) entries->data, NULL, &error));
  g_assert_no_error (error);
  return path;
}

static void
remove_file (const gchar * path)
{
  g_autofree gchar *dir = g_path_get_dirname (path);

  g_unlink (path);
  g_rmdir (dir);
}

/* SDXL, a file without a text encoder, a key a part cannot map. */
static void
test_refused (void)
{
  static const gchar *const sdxl[] = {
    "model.diffusion_model.input_blocks.0.0.weight",
    "conditioner.embedders.0.transformer.text_model.final_layer_norm.weight",
  };
  static const gchar *const lone[] = {
    "model.diffusion_model.input_blocks.0.0.weight",
  };
  static const gchar *const odd[] = {
    "model.diffusion_model.input_blocks.0.0.weight",
    "model.diffusion_model.label_emb.0.0.weight",
    "cond_stage_model.transformer.text_model.final_layer_norm.weight",
  };
  const Family *f = &families[0];
  g_autofree gchar *a = write_keys (sdxl, G_N_ELEMENTS (sdxl));
  g_autofree gchar *b = write_keys (lone, G_N_ELEMENTS (lone));
  g_autofree gchar *c = write_keys (odd, G_N_ELEMENTS (odd));
  g_autofree gchar *unet_config = config_path (f, PP_CHECKPOINT_UNET);
  g_autoptr (GError) error = NULL;
  PpFamily family;
  PpWeights *w;

  g_assert_false (pp_checkpoint_family (a, &family, &error));
  g_test_message ("expected error: %s", error->message);
  g_assert_nonnull (strstr (error->message, "'conditioner.embedders.0."));
  g_clear_error (&error);
  g_assert_false (pp_checkpoint_family (b, &family, &error));
  g_assert_nonnull (strstr (error->message, "no text encoder keys"));
  g_clear_error (&error);
  w = pp_checkpoint_part (c, PP_CHECKPOINT_UNET, unet_config, &error);
  g_assert_null (w);
  g_test_message ("expected error: %s", error->message);
  g_assert_nonnull (strstr (error->message,
          "'model.diffusion_model.label_emb.0.0.weight'"));
  g_assert_nonnull (strstr (error->message, "map to no diffusers weight"));
  remove_file (a);
  remove_file (b);
  remove_file (c);
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
  for (guint i = 0; i < G_N_ELEMENTS (families); i++) {
    g_autofree gchar *parts = g_strdup_printf ("/checkpoint/%s/parts",
        families[i].name);
    g_autofree gchar *models = g_strdup_printf ("/checkpoint/%s/models",
        families[i].name);
    g_autofree gchar *fam = g_strdup_printf ("/checkpoint/%s/family-configs",
        families[i].name);

    g_test_add_data_func (parts, &families[i], test_parts);
    g_test_add_data_func (models, &families[i], test_models);
    g_test_add_data_func (fam, &families[i], test_family_configs);
  }
  g_test_add_func ("/checkpoint/refused", test_refused);
  return g_test_run ();
}
