/* Unit tests for config.json reading: getters, defaults, broadcasting and
 * type errors naming file, key, expected and found. */
#include "pp-config.h"
#include "io-test-util.h"

static gchar *tmp_dir;
static gchar *cfg_path;

static const gchar config_json[] =
    "{\n"
    "  \"_class_name\": \"UNet2DConditionModel\",\n"
    "  \"in_channels\": 4,\n"
    "  \"norm_eps\": 1e-05,\n"
    "  \"scaling_factor\": 1,\n"
    "  \"use_linear_projection\": true,\n"
    "  \"act_fn\": \"silu\",\n"
    "  \"block_out_channels\": [32, 64],\n"
    "  \"attention_head_dim\": 8,\n"
    "  \"head_list\": [2, 4],\n"
    "  \"down_block_types\": [\"CrossAttnDownBlock2D\", \"DownBlock2D\"],\n"
    "  \"class_embed_type\": null,\n"
    "  \"mixed\": [1, \"two\"],\n"
    "  \"strings\": [\"a\", 3],\n"
    "  \"nested\": {\"a\": 1},\n"
    "  \"long_name\": \"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz\"\n"
    "}\n";

static PpConfig *
load (void)
{
  g_autoptr (GError) error = NULL;
  PpConfig *cfg = pp_config_load (cfg_path, &error);

  g_assert_no_error (error);
  g_assert_nonnull (cfg);
  return cfg;
}

static void
test_scalars (void)
{
  g_autoptr (PpConfig) cfg = load ();
  g_autoptr (GError) error = NULL;
  g_autofree gchar *act = NULL;
  g_autofree gchar *absent = NULL;
  g_autofree gchar *none = NULL;
  gint64 i;
  gdouble d;
  gboolean b;

  g_assert_cmpstr (pp_config_path (cfg), ==, cfg_path);
  g_assert_true (pp_config_get_int (cfg, "in_channels", 3, &i, &error));
  g_assert_cmpint (i, ==, 4);
  g_assert_true (pp_config_get_int (cfg, "out_channels", 3, &i, &error));
  g_assert_cmpint (i, ==, 3);
  /* null means "not set" */
  g_assert_true (pp_config_get_int (cfg, "class_embed_type", -1, &i, &error));
  g_assert_cmpint (i, ==, -1);
  g_assert_true (pp_config_require_int (cfg, "in_channels", &i, &error));
  g_assert_cmpint (i, ==, 4);

  g_assert_true (pp_config_get_double (cfg, "norm_eps", 0.0, &d, &error));
  g_assert_cmpfloat (d, ==, 1e-5);
  g_assert_true (pp_config_get_double (cfg, "scaling_factor", 0.0, &d,
          &error));
  g_assert_cmpfloat (d, ==, 1.0);
  g_assert_true (pp_config_get_double (cfg, "absent", 0.18215, &d, &error));
  g_assert_cmpfloat (d, ==, 0.18215);

  g_assert_true (pp_config_get_bool (cfg, "use_linear_projection", FALSE, &b,
          &error));
  g_assert_true (b);
  g_assert_true (pp_config_get_bool (cfg, "absent", TRUE, &b, &error));
  g_assert_true (b);

  g_assert_true (pp_config_get_string (cfg, "act_fn", "relu", &act, &error));
  g_assert_cmpstr (act, ==, "silu");
  g_assert_true (pp_config_get_string (cfg, "absent", "relu", &absent,
          &error));
  g_assert_cmpstr (absent, ==, "relu");
  g_assert_true (pp_config_get_string (cfg, "absent", NULL, &none, &error));
  g_assert_null (none);
  g_assert_no_error (error);

  g_assert_true (pp_config_has (cfg, "in_channels"));
  g_assert_false (pp_config_has (cfg, "class_embed_type"));
  g_assert_false (pp_config_has (cfg, "absent"));
  g_assert_true (json_object_has_member (pp_config_root (cfg), "nested"));
}

static void
test_lists (void)
{
  g_autoptr (PpConfig) cfg = load ();
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) channels = NULL;
  g_autoptr (GArray) heads = NULL;
  g_autoptr (GArray) one = NULL;
  g_autoptr (GArray) list = NULL;
  g_auto (GStrv) types = NULL;

  g_assert_true (pp_config_get_int_list (cfg, "block_out_channels", 0,
          &channels, &error));
  g_assert_cmpuint (channels->len, ==, 2);
  g_assert_cmpint (g_array_index (channels, gint64, 0), ==, 32);
  g_assert_cmpint (g_array_index (channels, gint64, 1), ==, 64);

  /* An int where a list is expected is broadcast. */
  g_assert_true (pp_config_get_int_list (cfg, "attention_head_dim", 4,
          &heads, &error));
  g_assert_cmpuint (heads->len, ==, 4);
  for (guint i = 0; i < 4; i++)
    g_assert_cmpint (g_array_index (heads, gint64, i), ==, 8);
  g_assert_true (pp_config_get_int_list (cfg, "attention_head_dim", 0, &one,
          &error));
  g_assert_cmpuint (one->len, ==, 1);
  g_assert_cmpint (g_array_index (one, gint64, 0), ==, 8);
  g_assert_true (pp_config_get_int_list (cfg, "head_list", 2, &list, &error));
  g_assert_cmpint (g_array_index (list, gint64, 1), ==, 4);

  g_assert_true (pp_config_get_string_list (cfg, "down_block_types", &types,
          &error));
  g_assert_no_error (error);
  g_assert_cmpuint (g_strv_length (types), ==, 2);
  g_assert_cmpstr (types[0], ==, "CrossAttnDownBlock2D");
  g_assert_cmpstr (types[1], ==, "DownBlock2D");
}

static void
test_type_errors (void)
{
  g_autoptr (PpConfig) cfg = load ();
  GError *error = NULL;
  GArray *list = NULL;
  GStrv strv = NULL;
  gchar *s = NULL;
  gint64 i;
  gdouble d;
  gboolean b;

  g_assert_false (pp_config_get_int (cfg, "act_fn", 0, &i, &error));
  io_assert_error (error, cfg_path, "'act_fn'", "expected an integer",
      "found a string (\"silu\")", NULL);
  error = NULL;
  g_assert_false (pp_config_get_int (cfg, "norm_eps", 0, &i, &error));
  io_assert_error (error, cfg_path, "'norm_eps'", "expected an integer",
      "found a number (1e-05)", NULL);
  error = NULL;
  g_assert_false (pp_config_require_int (cfg, "out_channels", &i, &error));
  io_assert_error (error, cfg_path, "'out_channels'", "missing",
      "an integer", NULL);
  error = NULL;
  g_assert_false (pp_config_require_int (cfg, "class_embed_type", &i,
          &error));
  io_assert_error (error, cfg_path, "'class_embed_type'", "null", NULL);
  error = NULL;
  g_assert_false (pp_config_get_double (cfg, "use_linear_projection", 0, &d,
          &error));
  io_assert_error (error, cfg_path, "'use_linear_projection'",
      "expected a number", "found a boolean (true)", NULL);
  error = NULL;
  g_assert_false (pp_config_get_bool (cfg, "in_channels", FALSE, &b, &error));
  io_assert_error (error, cfg_path, "'in_channels'", "expected a boolean",
      "found an integer (4)", NULL);
  error = NULL;
  g_assert_false (pp_config_get_string (cfg, "block_out_channels", NULL, &s,
          &error));
  io_assert_error (error, cfg_path, "'block_out_channels'",
      "expected a string", "found a list of 2 elements", NULL);
  g_assert_null (s);
  error = NULL;
  g_assert_false (pp_config_get_string (cfg, "nested", NULL, &s, &error));
  io_assert_error (error, cfg_path, "found an object", NULL);
  error = NULL;
  g_assert_false (pp_config_get_int (cfg, "long_name", 0, &i, &error));
  io_assert_error (error, cfg_path, "abcdefghijklmnopqrstuvwxyzabcdefghijklmn…",
      NULL);

  /* Lists. */
  error = NULL;
  g_assert_false (pp_config_get_int_list (cfg, "block_out_channels", 4,
          &list, &error));
  io_assert_error (error, cfg_path, "'block_out_channels'",
      "expected a list of 4 integers", "found a list of 2 elements", NULL);
  error = NULL;
  g_assert_false (pp_config_get_int_list (cfg, "mixed", 0, &list, &error));
  io_assert_error (error, cfg_path, "'mixed'[1]", "expected an integer",
      "found a string (\"two\")", NULL);
  error = NULL;
  g_assert_false (pp_config_get_int_list (cfg, "act_fn", 2, &list, &error));
  io_assert_error (error, cfg_path, "'act_fn'", "found a string", NULL);
  error = NULL;
  g_assert_false (pp_config_get_int_list (cfg, "absent", 2, &list, &error));
  io_assert_error (error, cfg_path, "'absent'", "missing", NULL);
  g_assert_null (list);
  error = NULL;
  g_assert_false (pp_config_get_string_list (cfg, "strings", &strv, &error));
  io_assert_error (error, cfg_path, "'strings'[1]", "expected a string",
      "found an integer (3)", NULL);
  error = NULL;
  g_assert_false (pp_config_get_string_list (cfg, "act_fn", &strv, &error));
  io_assert_error (error, cfg_path, "'act_fn'", "expected a list of strings",
      NULL);
  g_assert_null (strv);
}

static void
test_load_errors (void)
{
  g_autofree gchar *bad = g_build_filename (tmp_dir, "bad.json", NULL);
  g_autofree gchar *list = g_build_filename (tmp_dir, "list.json", NULL);
  g_autofree gchar *missing = g_build_filename (tmp_dir, "missing.json",
      NULL);
  GError *error = NULL;

  io_write_file (bad, "{\"a\": ", 6);
  g_assert_null (pp_config_load (bad, &error));
  io_assert_error (error, bad, NULL);
  io_write_file (list, "[1, 2]", 6);
  error = NULL;
  g_assert_null (pp_config_load (list, &error));
  io_assert_error (error, list, "JSON object", "found a list", NULL);
  error = NULL;
  g_assert_null (pp_config_load (missing, &error));
  io_assert_error (error, missing, NULL);
  error = NULL;
  g_assert_null (pp_config_load_from_data ("7", -1, "inline", &error));
  io_assert_error (error, "inline", NULL);
}

static void
test_save (void)
{
  g_autofree gchar *path = g_build_filename (tmp_dir, "saved.json", NULL);
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autoptr (JsonNode) root = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (PpConfig) cfg = NULL;
  g_autoptr (GArray) list = NULL;
  gint64 i;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "latent_channels");
  json_builder_add_int_value (b, 4);
  json_builder_set_member_name (b, "num_encoder_blocks");
  json_builder_begin_array (b);
  for (guint k = 0; k < 4; k++)
    json_builder_add_int_value (b, k == 0 ? 1 : 3);
  json_builder_end_array (b);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  g_assert_true (pp_config_save_json (path, root, &error));
  g_assert_no_error (error);

  cfg = pp_config_load (path, &error);
  g_assert_no_error (error);
  g_assert_true (pp_config_require_int (cfg, "latent_channels", &i, &error));
  g_assert_cmpint (i, ==, 4);
  g_assert_true (pp_config_get_int_list (cfg, "num_encoder_blocks", 4, &list,
          &error));
  g_assert_cmpint (g_array_index (list, gint64, 3), ==, 3);
}

int
main (int argc, char **argv)
{
  int ret;

  g_test_init (&argc, &argv, NULL);
  tmp_dir = io_tmp_dir ();
  cfg_path = g_build_filename (tmp_dir, "config.json", NULL);
  io_write_file (cfg_path, config_json, strlen (config_json));
  g_test_add_func ("/io/config/scalars", test_scalars);
  g_test_add_func ("/io/config/lists", test_lists);
  g_test_add_func ("/io/config/type-errors", test_type_errors);
  g_test_add_func ("/io/config/load-errors", test_load_errors);
  g_test_add_func ("/io/config/save", test_save);
  ret = g_test_run ();
  io_rm_dir (tmp_dir);
  g_free (cfg_path);
  g_free (tmp_dir);
  return ret;
}
