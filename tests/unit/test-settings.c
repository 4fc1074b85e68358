/* The live settings' serialisation: a round trip keeps every field, and
 * bytes of another version, garbled bytes and unknown fields are refused
 * with a message that says which. */
#include "pp-error.h"
#include "pp-settings.h"

#include <string.h>

static void
settings_fill (PpSettings * s)
{
  pp_settings_init (s);
  s->model = g_strdup ("/models/sd-turbo?dtype=f16");
  s->prompt = g_strdup ("a watercolor city:0.7|neon night:0.3");
  s->prompt_embeds = g_strdup ("chunk:0123abcd");
  s->strength = 0.3125;
  s->seed = G_MAXUINT64 - 7;
  s->t_index_list = g_strdup ("32,45");
  s->temporal = g_strdup (PP_SETTINGS_TEMPORAL_FEATURE_BANK);
  s->bank_frames = 3;
  s->fusion_threshold = 0.875;
}

static void
test_round_trip (void)
{
  PpSettings in, out = { 0 };
  g_autoptr (GBytes) bytes = NULL;
  g_autoptr (GError) error = NULL;
  gsize size;
  const guint8 *data;

  settings_fill (&in);
  bytes = pp_settings_serialize (&in);
  data = g_bytes_get_data (bytes, &size);
  g_assert_true (pp_settings_deserialize (data, size, &out, &error));
  g_assert_no_error (error);
  g_assert_true (pp_settings_equal (&in, &out));
  g_assert_cmpfloat (out.strength, ==, 0.3125);
  g_assert_cmpuint (out.seed, ==, G_MAXUINT64 - 7);
  g_assert_true (pp_settings_has_feature_bank (&out));
  g_assert_cmpuint (out.bank_frames, ==, 3);
  g_assert_cmpfloat (out.fusion_threshold, ==, 0.875);
  /* each bank setting is part of what the settings are */
  out.bank_frames = 2;
  g_assert_false (pp_settings_equal (&in, &out));
  out.bank_frames = 3;
  out.fusion_threshold = 0.5;
  g_assert_false (pp_settings_equal (&in, &out));
  pp_settings_clear (&out);

  /* Unset strings stay unset; the defaults come back as they went. */
  pp_settings_clear (&in);
  pp_settings_init (&in);
  g_clear_pointer (&bytes, g_bytes_unref);
  bytes = pp_settings_serialize (&in);
  data = g_bytes_get_data (bytes, &size);
  g_assert_true (pp_settings_deserialize (data, size, &out, &error));
  g_assert_null (out.model);
  g_assert_null (out.t_index_list);
  g_assert_cmpfloat (out.strength, ==, PP_SETTINGS_DEFAULT_STRENGTH);
  g_assert_false (pp_settings_has_feature_bank (&out));
  g_assert_cmpuint (out.bank_frames, ==, PP_SETTINGS_DEFAULT_BANK_FRAMES);
  g_assert_true (pp_settings_equal (&in, &out));
  pp_settings_clear (&out);
}

static void
expect_refused (GVariant * v, const gchar * needle)
{
  g_autoptr (GVariant) owned = g_variant_ref_sink (v);
  g_autoptr (GError) error = NULL;
  PpSettings out = { 0 };

  g_assert_false (pp_settings_deserialize (g_variant_get_data (owned),
          g_variant_get_size (owned), &out, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  if (strstr (error->message, needle) == NULL)
    g_error ("'%s' does not mention '%s'", error->message, needle);
  g_assert_null (out.model);
}

static void
test_version_mismatch (void)
{
  GVariantBuilder fields;

  g_variant_builder_init (&fields, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&fields, "{sv}", "strength",
      g_variant_new_double (0.5));
  expect_refused (g_variant_new ("(ua{sv})", PP_SETTINGS_VERSION + 1,
          &fields), "this build reads version");
}

static void
test_unknown_field (void)
{
  GVariantBuilder fields;

  g_variant_builder_init (&fields, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&fields, "{sv}", "guidance",
      g_variant_new_double (7.5));
  expect_refused (g_variant_new ("(ua{sv})", PP_SETTINGS_VERSION, &fields),
      "unknown field 'guidance'");
  g_variant_builder_init (&fields, G_VARIANT_TYPE_VARDICT);
  g_variant_builder_add (&fields, "{sv}", "seed", g_variant_new_string ("3"));
  expect_refused (g_variant_new ("(ua{sv})", PP_SETTINGS_VERSION, &fields),
      "'seed' is of type 's'");
}

static void
test_garbled (void)
{
  PpSettings in;
  g_autoptr (GBytes) bytes = NULL;
  g_autofree guint8 *cut = NULL;
  g_autoptr (GError) error = NULL;
  PpSettings out = { 0 };
  const guint8 *data;
  gsize size;

  settings_fill (&in);
  bytes = pp_settings_serialize (&in);
  pp_settings_clear (&in);
  /* The version survives, the dictionary does not. */
  data = g_bytes_get_data (bytes, &size);
  cut = g_memdup2 (data, size);
  memset (cut + 8, 0xff, 12);
  g_assert_false (pp_settings_deserialize (cut, size - 3, &out, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "well-formed"));
  g_clear_error (&error);
  /* Too short to hold even a version. */
  g_assert_false (pp_settings_deserialize (cut, 2, &out, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/settings/round-trip", test_round_trip);
  g_test_add_func ("/settings/version-mismatch", test_version_mismatch);
  g_test_add_func ("/settings/unknown-field", test_unknown_field);
  g_test_add_func ("/settings/garbled", test_garbled);
  return g_test_run ();
}
