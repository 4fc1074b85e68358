/* ppdiffuse — model config.json files (diffusers style) read with json-glib.
 *
 * Getters with a default treat an absent key and a JSON null alike (diffusers
 * writes null for "not set"); the require/list getters want the key present.
 * Every error names the file, the key, the expected type and what was found. */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

typedef struct _PpConfig PpConfig;

PpConfig    *pp_config_load        (const gchar * path, GError ** error);
/* The same from a string; @what names it in errors. */
PpConfig    *pp_config_load_from_data (const gchar * data, gssize length,
                                    const gchar * what, GError ** error);
void         pp_config_free        (PpConfig * cfg);
const gchar *pp_config_path        (PpConfig * cfg);
/* TRUE when @key is present and not null. */
gboolean     pp_config_has         (PpConfig * cfg, const gchar * key);
/* The top-level object, owned by @cfg. */
JsonObject  *pp_config_root        (PpConfig * cfg);

gboolean     pp_config_get_int     (PpConfig * cfg, const gchar * key,
                                    gint64 default_value, gint64 * out,
                                    GError ** error);
gboolean     pp_config_require_int (PpConfig * cfg, const gchar * key,
                                    gint64 * out, GError ** error);
/* The same for a gint in 1..G_MAXINT, @default_value when absent; another
 * value is an error naming the file and the key. */
gboolean     pp_config_get_positive_int (PpConfig * cfg, const gchar * key,
                                         gint64 default_value, gint * out,
                                         GError ** error);
/* Accepts integers too. */
gboolean     pp_config_get_double  (PpConfig * cfg, const gchar * key,
                                    gdouble default_value, gdouble * out,
                                    GError ** error);
gboolean     pp_config_get_bool    (PpConfig * cfg, const gchar * key,
                                    gboolean default_value, gboolean * out,
                                    GError ** error);
/* *out is a copy (g_free); NULL when absent and @default_value is NULL. */
gboolean     pp_config_get_string  (PpConfig * cfg, const gchar * key,
                                    const gchar * default_value, gchar ** out,
                                    GError ** error);
/* A list of integers (GArray of gint64, g_array_unref).  @expected_len 0
 * accepts any length; otherwise the list must have that many.  A single
 * integer where a list is expected is broadcast to @expected_len (to 1 when
 * @expected_len is 0), as diffusers does for attention_head_dim. */
gboolean     pp_config_get_int_list (PpConfig * cfg, const gchar * key,
                                    guint expected_len, GArray ** out,
                                    GError ** error);
/* A list of strings (g_strfreev). */
gboolean     pp_config_get_string_list (PpConfig * cfg, const gchar * key,
                                    GStrv * out, GError ** error);

/* Writes @root as indented JSON to @path. */
gboolean     pp_config_save_json   (const gchar * path, JsonNode * root,
                                    GError ** error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpConfig, pp_config_free)

G_END_DECLS
