/* ppdiffuse — the live settings of a stream and their serialisation. */
#include "pp-settings.h"

#include "pp-error.h"

#include <string.h>

#define SETTINGS_TYPE "(ua{sv})"

void
pp_settings_init (PpSettings * s)
{
  memset (s, 0, sizeof *s);
  s->strength = PP_SETTINGS_DEFAULT_STRENGTH;
  s->seed = PP_SETTINGS_DEFAULT_SEED;
  s->bank_frames = PP_SETTINGS_DEFAULT_BANK_FRAMES;
  s->fusion_threshold = PP_SETTINGS_DEFAULT_FUSION_THRESHOLD;
}

void
pp_settings_clear (PpSettings * s)
{
  g_clear_pointer (&s->model, g_free);
  g_clear_pointer (&s->prompt, g_free);
  g_clear_pointer (&s->prompt_embeds, g_free);
  g_clear_pointer (&s->t_index_list, g_free);
  g_clear_pointer (&s->temporal, g_free);
}

void
pp_settings_copy (PpSettings * dst, const PpSettings * src)
{
  if (dst == src)
    return;
  pp_settings_clear (dst);
  *dst = *src;
  dst->model = g_strdup (src->model);
  dst->prompt = g_strdup (src->prompt);
  dst->prompt_embeds = g_strdup (src->prompt_embeds);
  dst->t_index_list = g_strdup (src->t_index_list);
  dst->temporal = g_strdup (src->temporal);
}

gboolean
pp_settings_equal (const PpSettings * a, const PpSettings * b)
{
  return g_strcmp0 (a->model, b->model) == 0
      && g_strcmp0 (a->prompt, b->prompt) == 0
      && g_strcmp0 (a->prompt_embeds, b->prompt_embeds) == 0
      && g_strcmp0 (a->t_index_list, b->t_index_list) == 0
      && a->strength == b->strength && a->seed == b->seed
      && pp_settings_has_feature_bank (a) == pp_settings_has_feature_bank (b)
      && a->bank_frames == b->bank_frames
      && a->fusion_threshold == b->fusion_threshold;
}

gboolean
pp_settings_has_feature_bank (const PpSettings * s)
{
  return g_strcmp0 (s->temporal, PP_SETTINGS_TEMPORAL_FEATURE_BANK) == 0;
}

gboolean
pp_settings_has_prompt (const PpSettings * s)
{
  return s->prompt != NULL && *s->prompt != '\0';
}

static const gchar *
or_none (const gchar * s)
{
  return s != NULL && *s != '\0' ? s : "(none)";
}

gchar *
pp_settings_describe (const PpSettings * s)
{
  if (pp_settings_has_feature_bank (s))
    return g_strdup_printf ("model=%s prompt-embeds=%s strength=%g seed=%"
        G_GUINT64_FORMAT " t-index-list=%s temporal=%s bank-frames=%"
        G_GUINT64_FORMAT " fusion-threshold=%g", or_none (s->model),
        or_none (s->prompt_embeds), s->strength, s->seed,
        or_none (s->t_index_list), s->temporal, s->bank_frames,
        s->fusion_threshold);
  return g_strdup_printf ("model=%s prompt-embeds=%s strength=%g seed=%"
      G_GUINT64_FORMAT " t-index-list=%s", or_none (s->model),
      or_none (s->prompt_embeds), s->strength, s->seed,
      or_none (s->t_index_list));
}

/* Strings go as "s"; an unset one is left out. */
static void
add_string (GVariantBuilder * b, const gchar * key, const gchar * value)
{
  if (value != NULL)
    g_variant_builder_add (b, "{sv}", key, g_variant_new_string (value));
}

GBytes *
pp_settings_serialize (const PpSettings * s)
{
  GVariantBuilder fields;
  GVariant *v;
  GBytes *bytes;

  g_variant_builder_init (&fields, G_VARIANT_TYPE_VARDICT);
  add_string (&fields, "model", s->model);
  add_string (&fields, "prompt", s->prompt);
  add_string (&fields, "prompt-embeds", s->prompt_embeds);
  g_variant_builder_add (&fields, "{sv}", "strength",
      g_variant_new_double (s->strength));
  g_variant_builder_add (&fields, "{sv}", "seed",
      g_variant_new_uint64 (s->seed));
  add_string (&fields, "t-index-list", s->t_index_list);
  add_string (&fields, "temporal", s->temporal);
  g_variant_builder_add (&fields, "{sv}", "bank-frames",
      g_variant_new_uint64 (s->bank_frames));
  g_variant_builder_add (&fields, "{sv}", "fusion-threshold",
      g_variant_new_double (s->fusion_threshold));
  v = g_variant_ref_sink (g_variant_new ("(ua{sv})", PP_SETTINGS_VERSION,
          &fields));
  bytes = g_variant_get_data_as_bytes (v);
  g_variant_unref (v);
  return bytes;
}

/* Takes one field of the dictionary into @s: a field names a string, a
 * number or a count of the settings. */
static gboolean
read_field (PpSettings * s, const gchar * key, GVariant * value,
    GError ** error)
{
  gchar **string = NULL;
  gdouble *number = NULL;
  guint64 *count = NULL;
  const GVariantType *want;

  if (g_str_equal (key, "model"))
    string = &s->model;
  else if (g_str_equal (key, "prompt"))
    string = &s->prompt;
  else if (g_str_equal (key, "prompt-embeds"))
    string = &s->prompt_embeds;
  else if (g_str_equal (key, "t-index-list"))
    string = &s->t_index_list;
  else if (g_str_equal (key, "strength"))
    number = &s->strength;
  else if (g_str_equal (key, "seed"))
    count = &s->seed;
  else if (g_str_equal (key, "temporal"))
    string = &s->temporal;
  else if (g_str_equal (key, "bank-frames"))
    count = &s->bank_frames;
  else if (g_str_equal (key, "fusion-threshold"))
    number = &s->fusion_threshold;
  else {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the settings have an unknown field '%s'", key);
    return FALSE;
  }
  want = string != NULL ? G_VARIANT_TYPE_STRING : number != NULL
      ? G_VARIANT_TYPE_DOUBLE : G_VARIANT_TYPE_UINT64;
  if (!g_variant_is_of_type (value, want)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the settings' field '%s' is of type '%s', not '%s'", key,
        g_variant_get_type_string (value), (const gchar *) want);
    return FALSE;
  }
  if (string != NULL) {
    g_free (*string);
    *string = g_variant_dup_string (value, NULL);
  } else if (number != NULL) {
    *number = g_variant_get_double (value);
  } else {
    *count = g_variant_get_uint64 (value);
  }
  return TRUE;
}

gboolean
pp_settings_deserialize (const guint8 * data, gsize size, PpSettings * s,
    GError ** error)
{
  g_autoptr (GBytes) bytes = g_bytes_new (data, size);
  g_autoptr (GVariant) v = NULL;
  g_autoptr (GVariant) version = NULL;
  g_autoptr (GVariant) fields = NULL;
  GVariantIter iter;
  const gchar *key;
  GVariant *value;

  pp_settings_clear (s);
  pp_settings_init (s);
  v = g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE
          (SETTINGS_TYPE), bytes, FALSE));
  /* The version is read before the rest, so that a peer of another
   * version is told so rather than that its bytes are garbled. */
  version = g_variant_get_child_value (v, 0);
  if (g_variant_get_uint32 (version) != PP_SETTINGS_VERSION) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the settings are of version %u; this build reads version %u "
        "(rank 0 and the workers must be the same build)",
        g_variant_get_uint32 (version), PP_SETTINGS_VERSION);
    return FALSE;
  }
  if (!g_variant_is_normal_form (v)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the settings are not a well-formed '%s' GVariant (%" G_GSIZE_FORMAT
        " bytes)", SETTINGS_TYPE, size);
    return FALSE;
  }
  fields = g_variant_get_child_value (v, 1);
  g_variant_iter_init (&iter, fields);
  while (g_variant_iter_next (&iter, "{&sv}", &key, &value)) {
    gboolean ok = read_field (s, key, value, error);

    g_variant_unref (value);
    if (!ok) {
      pp_settings_clear (s);
      return FALSE;
    }
  }
  return TRUE;
}
