/* ppdiffuse — CLIP's text clean-up (see pp-text-clean.h). */
#include "pp-text-clean.h"
#include "pp-text-tables.h"

#include <stdlib.h>
#include <string.h>

/* html.unescape: a named reference is at most this many characters before
 * its optional ';' (the regex's {1,32}). */
#define HTML_NAME_MAX_CHARS 32
/* ftfy's HTML_ENTITY_RE: &#?[0-9A-Za-z]{1,24}; */
#define FTFY_ENTITY_MAX_CHARS 24
/* html.unescape tries name prefixes down to this length. */
#define HTML_PREFIX_MIN_CHARS 2
#define REPLACEMENT_CHAR 0xFFFD
#define UNICODE_MAX 0x10FFFF
#define ESCAPE_CHAR 0x1B

gboolean
pp_text_is_white_space (gunichar c)
{
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0
      || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028
      || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Python's str.isspace (what str.strip removes): White_Space and the
 * information separators U+001C..U+001F. */
static gboolean
py_isspace (gunichar c)
{
  return pp_text_is_white_space (c) || (c >= 0x1C && c <= 0x1F);
}

static int
entity_cmp (const void *key, const void *member)
{
  return strcmp (key, ((const PpTextEntity *) member)->name);
}

static const gchar *
entity_lookup (const PpTextEntity * table, gsize len, const gchar * name)
{
  const PpTextEntity *e = bsearch (name, table, len, sizeof *e, entity_cmp);

  return e ? e->text : NULL;
}

static int
charmap_cmp (const void *key, const void *member)
{
  gunichar a = *(const gunichar *) key, b = ((const PpTextCharMap *) member)->c;

  return a < b ? -1 : a > b;
}

static const gchar *
charmap_lookup (const PpTextCharMap * table, gsize len, gunichar c)
{
  const PpTextCharMap *m = bsearch (&c, table, len, sizeof *m, charmap_cmp);

  return m ? m->text : NULL;
}

static int
unichar_cmp (const void *key, const void *member)
{
  gunichar a = *(const gunichar *) key, b = *(const gunichar *) member;

  return a < b ? -1 : a > b;
}

/* ---- html.unescape ----------------------------------------------------- */

static void
append_charref (GString * out, guint64 num)
{
  const gchar *text;

  if (num <= UNICODE_MAX && (text = charmap_lookup (pp_text_invalid_charrefs,
              pp_text_invalid_charrefs_len, (gunichar) num)) != NULL)
    g_string_append (out, text);
  else if ((num >= 0xD800 && num <= 0xDFFF) || num > UNICODE_MAX)
    g_string_append_unichar (out, REPLACEMENT_CHAR);
  else if (bsearch (&(gunichar) { (gunichar) num }, pp_text_invalid_codepoints,
          pp_text_invalid_codepoints_len, sizeof (gunichar), unichar_cmp))
    return;
  else
    g_string_append_unichar (out, (gunichar) num);
}

/* Parses the digits of a numeric reference from @p; the value saturates
 * above the Unicode range.  Returns the end, or @p when there is no digit. */
static const gchar *
parse_number (const gchar * p, guint base, guint64 * num)
{
  const gchar *q = p;

  *num = 0;
  for (;; q++) {
    gint d = base == 16 ? g_ascii_xdigit_value (*q) : g_ascii_digit_value (*q);

    if (d < 0)
      break;
    if (*num <= UNICODE_MAX)
      *num = *num * base + (guint) d;
  }
  return q;
}

/* One '&…' at @amp: appends its replacement and returns where the text goes
 * on, or NULL when nothing matches there (the '&' is kept). */
static const gchar *
unescape_at (const gchar * amp, GString * out)
{
  const gchar *p = amp + 1, *end, *ends[HTML_NAME_MAX_CHARS + 2];
  guint64 num;
  guint n = 0;

  if (*p == '#') {
    gboolean hex = p[1] == 'x' || p[1] == 'X';

    end = parse_number (p + (hex ? 2 : 1), hex ? 16 : 10, &num);
    if (end == p + (hex ? 2 : 1))
      return NULL;
    append_charref (out, num);
    return *end == ';' ? end + 1 : end;
  }
  /* [^\t\n\f <&#;]{1,32};? — ends[i] is the end of the first i chars. */
  end = p;
  ends[0] = p;
  while (n < HTML_NAME_MAX_CHARS && *end != '\0' && strchr ("\t\n\f <&#;",
          *end) == NULL) {
    end = g_utf8_next_char (end);
    ends[++n] = end;
  }
  if (n == 0)
    return NULL;
  if (*end == ';')
    ends[++n] = ++end;
  /* The whole name (x == n), else its longest known prefix (x < n). */
  for (guint x = n; x > 0 && (x == n || x >= HTML_PREFIX_MIN_CHARS); x--) {
    g_autofree gchar *name = g_strndup (p, ends[x] - p);
    const gchar *text = entity_lookup (pp_text_html5_entities,
        pp_text_html5_entities_len, name);

    if (text != NULL) {
      g_string_append (out, text);
      g_string_append_len (out, ends[x], end - ends[x]);
      return end;
    }
  }
  g_string_append_len (out, amp, end - amp);
  return end;
}

gchar *
pp_text_html_unescape (const gchar * utf8)
{
  GString *out = g_string_sized_new (strlen (utf8));
  const gchar *p = utf8;

  while (*p != '\0') {
    const gchar *next;

    if (*p == '&' && (next = unescape_at (p, out)) != NULL) {
      p = next;
      continue;
    }
    g_string_append_c (out, *p);
    p++;
  }
  return g_string_free (out, FALSE);
}

/* ---- ftfy.fix_text subset ---------------------------------------------- */

/* ftfy.fixes.unescape_html: &#?[0-9A-Za-z]{1,24}; only. */
static gchar *
ftfy_unescape (const gchar * s)
{
  GString *out = g_string_sized_new (strlen (s));

  while (*s != '\0') {
    const gchar *q = s + 1;
    guint n = 0;

    if (*s != '&') {
      g_string_append_c (out, *s++);
      continue;
    }
    if (*q == '#')
      q++;
    while (n <= FTFY_ENTITY_MAX_CHARS && g_ascii_isalnum (q[n]))
      n++;
    if (n == 0 || n > FTFY_ENTITY_MAX_CHARS || q[n] != ';') {
      g_string_append_c (out, *s++);
      continue;
    }
    {
      g_autofree gchar *name = g_strndup (s + 1, q + n + 1 - (s + 1));
      const gchar *text = entity_lookup (pp_text_html5_entities,
          pp_text_html5_entities_len, name);

      if (text == NULL)
        text = entity_lookup (pp_text_ftfy_upper_entities,
            pp_text_ftfy_upper_entities_len, name);
      if (text != NULL) {
        g_string_append (out, text);
      } else if (name[0] == '#') {
        g_autofree gchar *whole = g_strndup (s, q + n + 1 - s);
        g_autofree gchar *un = pp_text_html_unescape (whole);

        /* Only a reference that consumes its ';' counts. */
        g_string_append (out, strchr (un, ';') ? whole : un);
      } else {
        g_string_append_len (out, s, q + n + 1 - s);
      }
    }
    s = q + n + 1;
  }
  return g_string_free (out, FALSE);
}

/* The per-character fixes, in ftfy's order (each a pass of its own there).
 * A replacement's own text is not fixed again in the same round (ŉ → ʼn,
 * whose ʼ uncurl_quotes would straighten): the next round of
 * ftfy_fix_segment does it. */
static gchar *
ftfy_char_fixes (const gchar * s)
{
  GString *out = g_string_sized_new (strlen (s));

  for (; *s != '\0'; s = g_utf8_next_char (s)) {
    gunichar c = g_utf8_get_char (s);
    const gchar *text;

    /* fix_c1_controls: C1 controls read as Windows-1252. */
    if (c >= 0x80 && c <= 0x9F && (text = charmap_lookup
            (pp_text_invalid_charrefs, pp_text_invalid_charrefs_len, c)))
      c = g_utf8_get_char (text);
    if ((text = charmap_lookup (pp_text_ftfy_ligatures,
                pp_text_ftfy_ligatures_len, c)) != NULL
        || (text = charmap_lookup (pp_text_ftfy_widths,
                pp_text_ftfy_widths_len, c)) != NULL) {
      g_string_append (out, text);
      continue;
    }
    /* uncurl_quotes */
    if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B))
      c = '\'';
    else if (c >= 0x201C && c <= 0x201F)
      c = '"';
    g_string_append_unichar (out, c);
  }
  return g_string_free (out, FALSE);
}

/* remove_terminal_escapes (ESC '[' [0-9;]* [A-Za-z]) and
 * remove_control_chars. */
static gchar *
ftfy_remove_controls (const gchar * s)
{
  GString *out = g_string_sized_new (strlen (s));

  while (*s != '\0') {
    gunichar c = g_utf8_get_char (s);

    if (c == ESCAPE_CHAR && s[1] == '[') {
      const gchar *q = s + 2;

      while (g_ascii_isdigit (*q) || *q == ';')
        q++;
      if (g_ascii_isalpha (*q)) {
        s = q + 1;
        continue;
      }
    }
    s = g_utf8_next_char (s);
    if (c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F
        || (c >= 0x206A && c <= 0x206F) || c == 0xFEFF
        || (c >= 0xFFF9 && c <= 0xFFFC))
      continue;
    g_string_append_unichar (out, c);
  }
  return g_string_free (out, FALSE);
}

/* ftfy.fix_and_explain on one segment: the fixes until nothing changes. */
static gchar *
ftfy_fix_segment (const gchar * segment, gboolean unescape)
{
  gchar *text = g_strdup (segment);

  for (;;) {
    gchar *a = unescape ? ftfy_unescape (text) : g_strdup (text);
    gchar *b = ftfy_char_fixes (a);
    gchar *c = ftfy_remove_controls (b);
    gchar *d = g_utf8_normalize (c, -1, G_NORMALIZE_NFC);
    gboolean same = strcmp (d, text) == 0;

    g_free (a);
    g_free (b);
    g_free (c);
    g_free (text);
    text = d;
    if (same)
      return text;
  }
}

gchar *
pp_text_ftfy_fix (const gchar * utf8)
{
  GString *out = g_string_sized_new (strlen (utf8));
  gboolean unescape = TRUE;
  const gchar *p = utf8;

  /* fix_text works line by line (each with its '\n'); one line with a '<'
   * turns entity decoding off for it and every line after. */
  while (*p != '\0') {
    const gchar *nl = strchr (p, '\n');
    gsize len = nl ? (gsize) (nl + 1 - p) : strlen (p);
    g_autofree gchar *segment = g_strndup (p, len);
    g_autofree gchar *fixed = NULL;

    if (strchr (segment, '<') != NULL)
      unescape = FALSE;
    fixed = ftfy_fix_segment (segment, unescape);
    g_string_append (out, fixed);
    p += len;
  }
  return g_string_free (out, FALSE);
}

/* ---- white space and case ---------------------------------------------- */

/* str.strip(): the text between the first and last non-space. */
static gchar *
py_strip (const gchar * s)
{
  const gchar *end = s + strlen (s);

  while (*s != '\0' && py_isspace (g_utf8_get_char (s)))
    s = g_utf8_next_char (s);
  while (end > s) {
    const gchar *prev = g_utf8_prev_char (end);

    if (!py_isspace (g_utf8_get_char (prev)))
      break;
    end = prev;
  }
  return g_strndup (s, end - s);
}

/* re.sub(r'\s+', ' ', s) */
static gchar *
collapse_white_space (const gchar * s)
{
  GString *out = g_string_sized_new (strlen (s));
  gboolean in_space = FALSE;

  for (; *s != '\0'; s = g_utf8_next_char (s)) {
    gunichar c = g_utf8_get_char (s);

    if (pp_text_is_white_space (c)) {
      if (!in_space)
        g_string_append_c (out, ' ');
      in_space = TRUE;
      continue;
    }
    in_space = FALSE;
    g_string_append_unichar (out, c);
  }
  return g_string_free (out, FALSE);
}

gchar *
pp_text_clip_clean (const gchar * utf8)
{
  g_autofree gchar *fixed = pp_text_ftfy_fix (utf8);
  g_autofree gchar *once = pp_text_html_unescape (fixed);
  g_autofree gchar *twice = pp_text_html_unescape (once);
  g_autofree gchar *stripped = py_strip (twice);
  g_autofree gchar *collapsed = collapse_white_space (stripped);
  g_autofree gchar *clean = py_strip (collapsed);

  return g_utf8_strdown (clean, -1);
}
