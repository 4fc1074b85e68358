/* kernels/models: the CLIP text encoder against the float64 reference
 * fixtures in tests/data/clip-text (tests/reference/
 * make-clip-text-fixtures.py): every layer's output and the last hidden
 * state, so that a mismatch names the layer where it starts; the output
 * written to the device as well as to the host; and the errors a person
 * can meet (an id outside the vocabulary, too many tokens, an activation
 * the model does not have, a weight missing).
 *
 * Usage: test-kernels-clip-text DATA_DIR [g_test options] */
#include "pp-clip-text.h"
#include "pp-error.h"
#include "pp-npy.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

/* The acceptance bound on |C − float64 reference|, every element. */
#define MAX_ABS_ERROR 1e-4
#define SEQ_DIMS 3
#define FIXTURE_DIR "clip-text"

static const gchar *data_dir;

typedef struct
{
  const gchar *config;
  const gchar *seq;
  const gchar *path;
} Case;

static const Case cases[] = {
  { "quick-gelu", "short", "/clip-text/quick-gelu/short" },
  { "quick-gelu", "padded", "/clip-text/quick-gelu/padded" },
  { "quick-gelu", "random", "/clip-text/quick-gelu/random" },
  { "gelu", "short", "/clip-text/gelu/short" },
  { "gelu", "padded", "/clip-text/gelu/padded" },
  { "gelu", "random", "/clip-text/gelu/random" },
};

static gchar *
model_dir (const gchar * config)
{
  return g_build_filename (data_dir, FIXTURE_DIR, config, NULL);
}

/* The ids of ids-@seq.txt (space separated). */
static GArray *
read_ids (const gchar * config, const gchar * seq)
{
  g_autofree gchar *dir = model_dir (config);
  g_autofree gchar *name = g_strdup_printf ("ids-%s.txt", seq);
  g_autofree gchar *path = g_build_filename (dir, name, NULL);
  g_autofree gchar *text = NULL;
  g_auto (GStrv) words = NULL;
  g_autoptr (GError) error = NULL;
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (gint32));

  g_file_get_contents (path, &text, NULL, &error);
  g_assert_no_error (error);
  words = g_strsplit_set (g_strstrip (text), " ", -1);
  for (guint i = 0; words[i] != NULL; i++) {
    gint32 id = (gint32) g_ascii_strtoll (words[i], NULL, 10);

    g_array_append_val (ids, id);
  }
  return ids;
}

typedef struct
{
  const Case *c;
  guint compared;
  gchar *first_bad;             /* the first tap past the bound */
  gdouble worst;
} Check;

/* Max |a − b| over equal shapes. */
static gdouble
max_abs_diff (const PpTensor * a, const PpTensor * b)
{
  const gfloat *x = a->data, *y = b->data;
  gdouble worst = 0.0;

  g_assert_cmpuint (a->ndim, ==, b->ndim);
  for (guint i = 0; i < a->ndim; i++)
    g_assert_cmpint (a->shape[i], ==, b->shape[i]);
  for (gint64 i = 0; i < pp_tensor_numel (a); i++) {
    gdouble d = fabs ((gdouble) x[i] - y[i]);

    if (!(d <= worst))
      worst = isnan (d) ? INFINITY : d;
  }
  return worst;
}

static PpTensor *
load_fixture (const Case * c, const gchar * file)
{
  g_autofree gchar *dir = model_dir (c->config);
  g_autofree gchar *path = g_build_filename (dir, c->seq, file, NULL);
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_npy_load (path, &error);

  g_assert_no_error (error);
  return t;
}

static void
check_tap (const gchar * name, const PpTensor * t, gpointer user_data)
{
  Check *check = user_data;
  g_autofree gchar *file = g_str_equal (name, "last_hidden_state")
      ? g_strdup ("last_hidden_state.npy") : g_strdup_printf ("tap-%s.npy",
      name);
  g_autoptr (PpTensor) ref = load_fixture (check->c, file);
  gdouble err = max_abs_diff (t, ref);

  g_test_message ("%s %s: %s max |c - ref| %.3g", check->c->config,
      check->c->seq, name, err);
  check->compared++;
  check->worst = MAX (check->worst, err);
  if (!(err <= MAX_ABS_ERROR) && check->first_bad == NULL)
    check->first_bad = g_strdup_printf ("%s (max |c - ref| %.3g > %g)", name,
        err, MAX_ABS_ERROR);
}

static void
test_fixture (gconstpointer data)
{
  const Case *c = data;
  g_autofree gchar *dir = model_dir (c->config);
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) ids = read_ids (c->config, c->seq);
  PpBackend *be = pp_backend_default ();
  g_autoptr (PpClipText) m = pp_clip_text_load (dir, be, 0, &error);
  g_autoptr (PpTensor) host = NULL, device = NULL, back = NULL,
      ref = NULL;
  Check check = { c, 0, NULL, 0.0 };
  gint64 shape[SEQ_DIMS];

  g_assert_no_error (error);
  shape[0] = 1;
  shape[1] = ids->len;
  shape[2] = pp_clip_text_hidden_size (m);
  host = pp_tensor_new ("hidden", PP_DTYPE_F32, SEQ_DIMS, shape, &error);
  g_assert_no_error (error);
  g_assert_true (pp_clip_text_forward_tap (m, (const gint32 *) ids->data,
          ids->len, host, check_tap, &check, &error));
  g_assert_no_error (error);
  if (check.first_bad != NULL)
    g_error ("%s %s: the first layer past the bound is %s", c->config,
        c->seq, check.first_bad);
  /* embeddings, every layer, last_hidden_state */
  g_assert_cmpuint (check.compared, ==, pp_clip_text_n_layers (m) + 2);
  ref = load_fixture (c, "last_hidden_state.npy");
  g_assert_cmpfloat (max_abs_diff (host, ref), <=, MAX_ABS_ERROR);

  /* The same states written to the device. */
  device = pp_tensor_new_on (be, "hidden", PP_DTYPE_F32, SEQ_DIMS, shape,
      &error);
  g_assert_no_error (error);
  g_assert_true (pp_clip_text_forward (m, (const gint32 *) ids->data,
          ids->len, device, &error));
  back = pp_tensor_new ("back", PP_DTYPE_F32, SEQ_DIMS, shape, &error);
  g_assert_true (pp_tensor_download (back, device, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (back->data, back->nbytes, host->data, host->nbytes);
}

static PpClipText *
load_quick (void)
{
  g_autofree gchar *dir = model_dir ("quick-gelu");
  g_autoptr (GError) error = NULL;
  PpClipText *m = pp_clip_text_load (dir, pp_backend_default (), 0, &error);

  g_assert_no_error (error);
  return m;
}

static void
test_bad_ids (void)
{
  g_autoptr (PpClipText) m = load_quick ();
  const guint max = pp_clip_text_max_positions (m);
  const gint64 shape[SEQ_DIMS] = { 1, max, pp_clip_text_hidden_size (m) };
  const gint64 long_shape[SEQ_DIMS] = { 1, max + 1,
    pp_clip_text_hidden_size (m)
  };
  g_autoptr (PpTensor) out = pp_tensor_new ("out", PP_DTYPE_F32, SEQ_DIMS,
      shape, NULL);
  g_autoptr (PpTensor) long_out = pp_tensor_new ("out", PP_DTYPE_F32,
      SEQ_DIMS, long_shape, NULL);
  g_autofree gint32 *ids = g_new0 (gint32, max + 1);
  g_autoptr (GError) error = NULL;

  ids[3] = pp_clip_text_vocab_size (m);
  g_assert_false (pp_clip_text_forward (m, ids, max, out, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, "token 3"));
  g_assert_nonnull (strstr (error->message, "vocabulary"));
  g_clear_error (&error);

  ids[3] = 0;
  g_assert_false (pp_clip_text_forward (m, ids, max + 1, long_out, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, "max_position_embeddings"));
  g_clear_error (&error);

  /* An output of the wrong length. */
  g_assert_false (pp_clip_text_forward (m, ids, max - 1, out, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
}

/* A copy of the quick-gelu fixture in a temporary directory, @old_text
 * of its config replaced by @new_text, its weights under the fp16 name
 * when @fp16_name. */
static gchar *
edited_copy (const gchar * old_text, const gchar * new_text,
    gboolean fp16_name)
{
  g_autofree gchar *src = model_dir ("quick-gelu");
  g_autofree gchar *cfg_path = g_build_filename (src, "config.json", NULL);
  g_autofree gchar *w_path = g_build_filename (src,
      PP_CLIP_TEXT_WEIGHTS_FILE, NULL);
  g_autofree gchar *cfg = NULL, *weights = NULL, *edited = NULL;
  g_autoptr (GError) error = NULL;
  gchar *dir = g_dir_make_tmp ("clip-text-XXXXXX", &error);
  g_autofree gchar *dst_cfg = g_build_filename (dir, "config.json", NULL);
  g_autofree gchar *dst_w = g_build_filename (dir, fp16_name
      ? PP_CLIP_TEXT_WEIGHTS_FILE_FP16 : PP_CLIP_TEXT_WEIGHTS_FILE, NULL);
  gsize len;
  g_auto (GStrv) parts = NULL;

  g_assert_no_error (error);
  g_assert_true (g_file_get_contents (cfg_path, &cfg, NULL, NULL));
  g_assert_nonnull (strstr (cfg, old_text));
  parts = g_strsplit (cfg, old_text, 2);
  edited = g_strjoinv (new_text, parts);
  g_assert_true (g_file_set_contents (dst_cfg, edited, -1, NULL));
  g_assert_true (g_file_get_contents (w_path, &weights, &len, NULL));
  g_assert_true (g_file_set_contents (dst_w, weights, len, NULL));
  return dir;
}

static void
remove_copy (gchar * dir)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  while ((name = g_dir_read_name (d)) != NULL) {
    g_autofree gchar *path = g_build_filename (dir, name, NULL);

    g_assert_cmpint (g_remove (path), ==, 0);
  }
  g_assert_cmpint (g_rmdir (dir), ==, 0);
  g_free (dir);
}

static void
test_config_errors (void)
{
  g_autoptr (GError) error = NULL;
  gchar *dir = edited_copy ("\"quick_gelu\"", "\"relu\"", FALSE);
  PpClipText *m = pp_clip_text_load (dir, pp_backend_default (), 0, &error);

  g_assert_null (m);
  g_assert_error (error, PP_ERROR, PP_ERROR_MODEL);
  g_assert_nonnull (strstr (error->message, "hidden_act"));
  g_assert_nonnull (strstr (error->message, "\"relu\""));
  g_clear_error (&error);
  remove_copy (dir);

  /* One layer more than the weights have: the missing key is named. */
  dir = edited_copy ("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3",
      FALSE);
  m = pp_clip_text_load (dir, pp_backend_default (), 0, &error);
  g_assert_null (m);
  g_assert_error (error, PP_ERROR, PP_ERROR_MODEL);
  g_assert_nonnull (strstr (error->message,
          "text_model.encoder.layers.2.layer_norm1.weight"));
  g_clear_error (&error);
  remove_copy (dir);

  /* One layer fewer: the unused keys are an error too. */
  dir = edited_copy ("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1",
      FALSE);
  m = pp_clip_text_load (dir, pp_backend_default (), 0, &error);
  g_assert_null (m);
  g_assert_nonnull (strstr (error->message, "text_model.encoder.layers.1."));
  g_clear_error (&error);
  remove_copy (dir);

  /* model.fp16.safetensors is found when model.safetensors is not. */
  dir = edited_copy ("\"quick_gelu\"", "\"quick_gelu\"", TRUE);
  m = pp_clip_text_load (dir, pp_backend_default (), 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (pp_clip_text_hidden_size (m), ==, 32);
  pp_clip_text_free (m);
  remove_copy (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc < 2)
    g_error ("usage: %s DATA_DIR", argv[0]);
  data_dir = argv[1];

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    g_test_add_data_func (cases[i].path, &cases[i], test_fixture);
  g_test_add_func ("/clip-text/errors/ids", test_bad_ids);
  g_test_add_func ("/clip-text/errors/config", test_config_errors);
  return g_test_run ();
}
