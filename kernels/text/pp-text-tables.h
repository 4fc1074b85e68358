/* ppdiffuse — tables for the CLIP text clean-up (pp-text-clean.c), generated
 * by gen-text-tables.py from Python's html module and ftfy. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A named character reference: name without the '&' (with its ';' where the
 * name has one), and its UTF-8 text.  Sorted by name (bytewise). */
typedef struct
{
  const gchar *name;
  const gchar *text;
} PpTextEntity;

/* A code point replaced by a UTF-8 text.  Sorted by code point. */
typedef struct
{
  gunichar c;
  const gchar *text;
} PpTextCharMap;

extern const PpTextEntity pp_text_html5_entities[];
extern const gsize pp_text_html5_entities_len;
extern const PpTextEntity pp_text_ftfy_upper_entities[];
extern const gsize pp_text_ftfy_upper_entities_len;
extern const PpTextCharMap pp_text_invalid_charrefs[];
extern const gsize pp_text_invalid_charrefs_len;
extern const gunichar pp_text_invalid_codepoints[];
extern const gsize pp_text_invalid_codepoints_len;
extern const PpTextCharMap pp_text_ftfy_ligatures[];
extern const gsize pp_text_ftfy_ligatures_len;
extern const PpTextCharMap pp_text_ftfy_widths[];
extern const gsize pp_text_ftfy_widths_len;

G_END_DECLS
