/* ppdiffuse — model config.json files. */
#include "pp-config.h"
#include "pp-error.h"

/* Found strings quoted in errors are cut to this many characters. */
#define QUOTE_MAX 40

struct _PpConfig
{
  gchar *path;
  JsonParser *parser;
  JsonObject *root;             /* owned by parser */
};

static PpConfig *
config_from_parser (JsonParser * parser, const gchar * what, GError ** error)
{
  JsonNode *root = json_parser_get_root (parser);
  PpConfig *cfg;

  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: expected a JSON object at the top level, found %s", what,
        root == NULL ? "nothing" : JSON_NODE_HOLDS_ARRAY (root) ? "a list" :
        "a single value");
    g_object_unref (parser);
    return NULL;
  }
  cfg = g_new0 (PpConfig, 1);
  cfg->path = g_strdup (what);
  cfg->parser = parser;
  cfg->root = json_node_get_object (root);
  return cfg;
}

PpConfig *
pp_config_load (const gchar * path, GError ** error)
{
  JsonParser *parser = json_parser_new ();
  g_autoptr (GError) local = NULL;

  if (!json_parser_load_from_file (parser, path, &local)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "cannot read config %s: %s",
        path, local->message);
    g_object_unref (parser);
    return NULL;
  }
  return config_from_parser (parser, path, error);
}

PpConfig *
pp_config_load_from_data (const gchar * data, gssize length,
    const gchar * what, GError ** error)
{
  JsonParser *parser = json_parser_new ();
  g_autoptr (GError) local = NULL;

  if (what == NULL)
    what = "<config>";
  if (!json_parser_load_from_data (parser, data, length, &local)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "cannot parse config %s: %s", what, local->message);
    g_object_unref (parser);
    return NULL;
  }
  return config_from_parser (parser, what, error);
}

void
pp_config_free (PpConfig * cfg)
{
  if (cfg == NULL)
    return;
  g_free (cfg->path);
  g_clear_object (&cfg->parser);
  g_free (cfg);
}

const gchar *
pp_config_path (PpConfig * cfg)
{
  return cfg->path;
}

JsonObject *
pp_config_root (PpConfig * cfg)
{
  return cfg->root;
}

/* The member, or NULL when absent or null. */
static JsonNode *
lookup (PpConfig * cfg, const gchar * key)
{
  JsonNode *node = json_object_get_member (cfg->root, key);

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return NULL;
  return node;
}

gboolean
pp_config_has (PpConfig * cfg, const gchar * key)
{
  return lookup (cfg, key) != NULL;
}

/* "a string (\"relu\")", "an integer (3)", "a list of 2 elements", … */
static gchar *
describe (JsonNode * node)
{
  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return g_strdup ("null");
  if (JSON_NODE_HOLDS_OBJECT (node))
    return g_strdup ("an object");
  if (JSON_NODE_HOLDS_ARRAY (node))
    return g_strdup_printf ("a list of %u elements",
        json_array_get_length (json_node_get_array (node)));
  switch (json_node_get_value_type (node)) {
    case G_TYPE_INT64:
      return g_strdup_printf ("an integer (%" G_GINT64_FORMAT ")",
          json_node_get_int (node));
    case G_TYPE_DOUBLE:
      return g_strdup_printf ("a number (%g)", json_node_get_double (node));
    case G_TYPE_BOOLEAN:
      return g_strdup_printf ("a boolean (%s)",
          json_node_get_boolean (node) ? "true" : "false");
    case G_TYPE_STRING:{
      const gchar *s = json_node_get_string (node);

      if (g_utf8_strlen (s, -1) > QUOTE_MAX) {
        g_autofree gchar *cut = g_utf8_substring (s, 0, QUOTE_MAX);
        return g_strdup_printf ("a string (\"%s…\")", cut);
      }
      return g_strdup_printf ("a string (\"%s\")", s);
    }
  }
  return g_strdup ("a value");
}

static gboolean
type_error (PpConfig * cfg, const gchar * key, gint index,
    const gchar * expected, JsonNode * found, GError ** error)
{
  g_autofree gchar *what = describe (found);

  if (index >= 0)
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s'[%d]: expected %s, found %s", cfg->path, key, index,
        expected, what);
  else
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s': expected %s, found %s", cfg->path, key, expected, what);
  return FALSE;
}

static gboolean
missing (PpConfig * cfg, const gchar * key, const gchar * expected,
    GError ** error)
{
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "%s: key '%s' is missing or null (expected %s)", cfg->path, key,
      expected);
  return FALSE;
}

static gboolean
holds (JsonNode * node, GType type)
{
  return JSON_NODE_HOLDS_VALUE (node)
      && json_node_get_value_type (node) == type;
}

#define EXPECT_INT "an integer"
#define EXPECT_NUMBER "a number"
#define EXPECT_BOOL "a boolean"
#define EXPECT_STRING "a string"

gboolean
pp_config_get_int (PpConfig * cfg, const gchar * key, gint64 default_value,
    gint64 * out, GError ** error)
{
  JsonNode *node = lookup (cfg, key);

  if (node == NULL) {
    *out = default_value;
    return TRUE;
  }
  if (!holds (node, G_TYPE_INT64))
    return type_error (cfg, key, -1, EXPECT_INT, node, error);
  *out = json_node_get_int (node);
  return TRUE;
}

gboolean
pp_config_require_int (PpConfig * cfg, const gchar * key, gint64 * out,
    GError ** error)
{
  if (lookup (cfg, key) == NULL)
    return missing (cfg, key, EXPECT_INT, error);
  return pp_config_get_int (cfg, key, 0, out, error);
}

gboolean
pp_config_get_double (PpConfig * cfg, const gchar * key,
    gdouble default_value, gdouble * out, GError ** error)
{
  JsonNode *node = lookup (cfg, key);

  if (node == NULL) {
    *out = default_value;
    return TRUE;
  }
  if (holds (node, G_TYPE_INT64))
    *out = (gdouble) json_node_get_int (node);
  else if (holds (node, G_TYPE_DOUBLE))
    *out = json_node_get_double (node);
  else
    return type_error (cfg, key, -1, EXPECT_NUMBER, node, error);
  return TRUE;
}

gboolean
pp_config_get_bool (PpConfig * cfg, const gchar * key,
    gboolean default_value, gboolean * out, GError ** error)
{
  JsonNode *node = lookup (cfg, key);

  if (node == NULL) {
    *out = default_value;
    return TRUE;
  }
  if (!holds (node, G_TYPE_BOOLEAN))
    return type_error (cfg, key, -1, EXPECT_BOOL, node, error);
  *out = json_node_get_boolean (node);
  return TRUE;
}

gboolean
pp_config_get_string (PpConfig * cfg, const gchar * key,
    const gchar * default_value, gchar ** out, GError ** error)
{
  JsonNode *node = lookup (cfg, key);

  if (node == NULL) {
    *out = g_strdup (default_value);
    return TRUE;
  }
  if (!holds (node, G_TYPE_STRING))
    return type_error (cfg, key, -1, EXPECT_STRING, node, error);
  *out = g_strdup (json_node_get_string (node));
  return TRUE;
}

gboolean
pp_config_get_int_list (PpConfig * cfg, const gchar * key,
    guint expected_len, GArray ** out, GError ** error)
{
  g_autofree gchar *expected = expected_len > 0 ?
      g_strdup_printf ("a list of %u integers (or one integer)",
      expected_len) : g_strdup ("a list of integers");
  JsonNode *node = lookup (cfg, key);
  g_autoptr (GArray) list = g_array_new (FALSE, FALSE, sizeof (gint64));
  JsonArray *arr;

  if (node == NULL)
    return missing (cfg, key, expected, error);
  if (holds (node, G_TYPE_INT64)) {
    gint64 v = json_node_get_int (node);

    for (guint i = 0; i < MAX (expected_len, 1); i++)
      g_array_append_val (list, v);
    *out = g_steal_pointer (&list);
    return TRUE;
  }
  if (!JSON_NODE_HOLDS_ARRAY (node))
    return type_error (cfg, key, -1, expected, node, error);
  arr = json_node_get_array (node);
  if (expected_len > 0 && json_array_get_length (arr) != expected_len)
    return type_error (cfg, key, -1, expected, node, error);
  for (guint i = 0; i < json_array_get_length (arr); i++) {
    JsonNode *el = json_array_get_element (arr, i);
    gint64 v;

    if (!holds (el, G_TYPE_INT64))
      return type_error (cfg, key, (gint) i, EXPECT_INT, el, error);
    v = json_node_get_int (el);
    g_array_append_val (list, v);
  }
  *out = g_steal_pointer (&list);
  return TRUE;
}

gboolean
pp_config_get_string_list (PpConfig * cfg, const gchar * key, GStrv * out,
    GError ** error)
{
  static const gchar expected[] = "a list of strings";
  JsonNode *node = lookup (cfg, key);
  g_autoptr (GPtrArray) list = NULL;
  JsonArray *arr;

  if (node == NULL)
    return missing (cfg, key, expected, error);
  if (!JSON_NODE_HOLDS_ARRAY (node))
    return type_error (cfg, key, -1, expected, node, error);
  arr = json_node_get_array (node);
  list = g_ptr_array_new_with_free_func (g_free);
  for (guint i = 0; i < json_array_get_length (arr); i++) {
    JsonNode *el = json_array_get_element (arr, i);

    if (!holds (el, G_TYPE_STRING))
      return type_error (cfg, key, (gint) i, EXPECT_STRING, el, error);
    g_ptr_array_add (list, g_strdup (json_node_get_string (el)));
  }
  g_ptr_array_add (list, NULL);
  g_ptr_array_set_free_func (list, NULL);
  *out = (GStrv) g_ptr_array_free (g_steal_pointer (&list), FALSE);
  return TRUE;
}

gboolean
pp_config_save_json (const gchar * path, JsonNode * root, GError ** error)
{
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (GError) local = NULL;
  g_autofree gchar *text = NULL;
  gsize len;

  json_generator_set_pretty (gen, TRUE);
  json_generator_set_indent (gen, 2);
  json_generator_set_root (gen, root);
  text = json_generator_to_data (gen, &len);
  if (!g_file_set_contents (path, text, (gssize) len, &local)) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "cannot write config %s: %s", path, local->message);
    return FALSE;
  }
  return TRUE;
}

gboolean
pp_config_get_positive_int (PpConfig * cfg, const gchar * key,
    gint64 default_value, gint * out, GError ** error)
{
  gint64 v;

  if (!pp_config_get_int (cfg, key, default_value, &v, error))
    return FALSE;
  if (v < 1 || v > G_MAXINT) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' is %" G_GINT64_FORMAT "; expected a positive integer",
        cfg->path, key, v);
    return FALSE;
  }
  *out = (gint) v;
  return TRUE;
}
