/* ppdiffuse — CLIP's byte-level BPE tokenizer (see pp-clip-tokenizer.h). */
#include "pp-clip-tokenizer.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-text-clean.h"

#include <string.h>

/* CLIP reads at most this many merges (49152 tokens less the 256 bytes and
 * the two specials: simple_tokenizer's and CLIPTokenizer's slice). */
#define CLIP_MAX_MERGES (49152 - 256 - 2)
#define MERGES_HEADER "#version"
/* A longer model_max_length is taken for transformers' "no limit" value. */
#define MODEL_MAX_LENGTH_LIMIT 65536
/* Found text quoted in errors is cut to this many bytes. */
#define QUOTE_MAX 40

struct _PpClipTokenizer
{
  GHashTable *vocab;            /* token → id (GINT_TO_POINTER (id + 1)) */
  GHashTable *ranks;            /* "first second" → rank + 1 */
  gchar *byte_chars[PP_CLIP_N_BYTES];   /* bytes_to_unicode, as UTF-8 */
  guint model_max_length;
  gint32 bos, eos, pad, unk;    /* unk: -1 when the vocabulary has none */
};

/* ---- loading ----------------------------------------------------------- */

gboolean
pp_clip_byte_is_printable (guint8 b)
{
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

void
pp_clip_byte_chars (gchar * chars[PP_CLIP_N_BYTES])
{
  guint next = PP_CLIP_N_BYTES;

  for (guint b = 0; b < PP_CLIP_N_BYTES; b++) {
    gunichar c = pp_clip_byte_is_printable (b) ? b : next++;
    gchar buf[8] = { 0 };

    g_unichar_to_utf8 (c, buf);
    chars[b] = g_strdup (buf);
  }
}

static gboolean
vocab_lookup (PpClipTokenizer * tok, const gchar * token, gint32 * id)
{
  gpointer v = g_hash_table_lookup (tok->vocab, token);

  if (v == NULL)
    return FALSE;
  *id = GPOINTER_TO_INT (v) - 1;
  return TRUE;
}

static gboolean
load_vocab (PpClipTokenizer * tok, const gchar * path, GError ** error)
{
  g_autoptr (PpConfig) cfg = pp_config_load (path, error);
  JsonObjectIter iter;
  const gchar *token;
  JsonNode *node;

  if (cfg == NULL)
    return FALSE;
  json_object_iter_init (&iter, pp_config_root (cfg));
  while (json_object_iter_next (&iter, &token, &node)) {
    gint64 id;

    if (!JSON_NODE_HOLDS_VALUE (node)
        || json_node_get_value_type (node) != G_TYPE_INT64
        || (id = json_node_get_int (node)) < 0 || id > G_MAXINT32 - 1) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s: token '%.*s' has "
          "no id (expected a non-negative integer)", path, QUOTE_MAX, token);
      return FALSE;
    }
    g_hash_table_insert (tok->vocab, g_strdup (token),
        GINT_TO_POINTER ((gint) id + 1));
  }
  return TRUE;
}

static gboolean
load_merges (PpClipTokenizer * tok, const gchar * path, GError ** error)
{
  g_autofree gchar *text = NULL;
  g_auto (GStrv) lines = NULL;
  g_autoptr (GError) local = NULL;
  guint rank = 0;

  if (!g_file_get_contents (path, &text, NULL, &local)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "cannot read merges %s: %s",
        path, local->message);
    return FALSE;
  }
  if (!g_utf8_validate (text, -1, NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s is not UTF-8 text",
        path);
    return FALSE;
  }
  lines = g_strsplit (text, "\n", -1);
  /* Both references drop the first line unread: it must be the header. */
  if (!g_str_has_prefix (lines[0], MERGES_HEADER)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s:1: expected the "
        "'%s …' header line, found '%.*s'", path, MERGES_HEADER, QUOTE_MAX,
        lines[0]);
    return FALSE;
  }
  for (guint i = 1; lines[i] != NULL && rank < CLIP_MAX_MERGES; i++) {
    g_auto (GStrv) parts = NULL;

    g_strchomp (lines[i]);
    if (lines[i][0] == '\0')
      continue;
    parts = g_strsplit_set (g_strstrip (lines[i]), " \t", -1);
    if (g_strv_length (parts) != 2 || parts[0][0] == '\0'
        || parts[1][0] == '\0') {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s:%u: expected two "
          "symbols separated by one space, found '%.*s'", path, i + 1,
          QUOTE_MAX, lines[i]);
      return FALSE;
    }
    g_hash_table_insert (tok->ranks, g_strjoin (" ", parts[0], parts[1],
            NULL), GUINT_TO_POINTER (++rank));
  }
  return TRUE;
}

/* A special token from special_tokens_map.json, else tokenizer_config.json:
 * a string, or an object whose "content" is the string (AddedToken). */
static gboolean
special_token (PpConfig * special, PpConfig * config, const gchar * key,
    const gchar * fallback, gchar ** out, GError ** error)
{
  PpConfig *from = special && pp_config_has (special, key) ? special
      : pp_config_has (config, key) ? config : NULL;
  JsonNode *node;

  if (from == NULL) {
    *out = g_strdup (fallback);
    return TRUE;
  }
  node = json_object_get_member (pp_config_root (from), key);
  if (JSON_NODE_HOLDS_OBJECT (node)) {
    JsonObject *o = json_node_get_object (node);

    node = json_object_get_member (o, "content");
  }
  if (node == NULL || !JSON_NODE_HOLDS_VALUE (node)
      || json_node_get_value_type (node) != G_TYPE_STRING) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s: %s must be a string "
        "or an object with a string \"content\"", pp_config_path (from), key);
    return FALSE;
  }
  *out = g_strdup (json_node_get_string (node));
  return TRUE;
}

static gboolean
special_id (PpClipTokenizer * tok, const gchar * text, const gchar * key,
    const gchar * vocab_path, gint32 * id, GError ** error)
{
  if (text[0] != '\0' && vocab_lookup (tok, text, id))
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s names '%.*s' but %s has "
      "no such token", key, QUOTE_MAX, text, vocab_path);
  return FALSE;
}

static gboolean
load_config (PpClipTokenizer * tok, const gchar * dir,
    const gchar * vocab_path, GError ** error)
{
  g_autofree gchar *config_path = g_build_filename (dir,
      PP_CLIP_TOKENIZER_CONFIG, NULL);
  g_autofree gchar *special_path = g_build_filename (dir,
      PP_CLIP_TOKENIZER_SPECIAL, NULL);
  g_autofree gchar *bos = NULL, *eos = NULL, *pad = NULL, *unk = NULL;
  g_autoptr (PpConfig) config = NULL, special = NULL;
  gint64 max_length;

  config = pp_config_load (config_path, error);
  if (config == NULL)
    return FALSE;
  if (g_file_test (special_path, G_FILE_TEST_EXISTS)
      && (special = pp_config_load (special_path, error)) == NULL)
    return FALSE;
  if (!pp_config_require_int (config, "model_max_length", &max_length,
          error))
    return FALSE;
  /* BOS and EOS besides at least nothing. */
  if (max_length < 2 || max_length > MODEL_MAX_LENGTH_LIMIT) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s: model_max_length %"
        G_GINT64_FORMAT " is outside 2..%d", config_path, max_length,
        MODEL_MAX_LENGTH_LIMIT);
    return FALSE;
  }
  tok->model_max_length = (guint) max_length;
  if (!special_token (special, config, "bos_token", PP_CLIP_BOS,
          &bos, error)
      || !special_token (special, config, "eos_token", PP_CLIP_EOS,
          &eos, error)
      || !special_token (special, config, "pad_token", PP_CLIP_EOS,
          &pad, error)
      || !special_token (special, config, "unk_token", PP_CLIP_EOS,
          &unk, error)
      || !special_id (tok, bos, "bos_token", vocab_path, &tok->bos,
          error)
      || !special_id (tok, eos, "eos_token", vocab_path, &tok->eos,
          error)
      || !special_id (tok, pad, "pad_token", vocab_path, &tok->pad, error))
    return FALSE;
  if (!vocab_lookup (tok, unk, &tok->unk))
    tok->unk = -1;
  return TRUE;
}

PpClipTokenizer *
pp_clip_tokenizer_load (const gchar * dir, GError ** error)
{
  g_autofree gchar *vocab_path = g_build_filename (dir,
      PP_CLIP_TOKENIZER_VOCAB, NULL);
  g_autofree gchar *merges_path = g_build_filename (dir,
      PP_CLIP_TOKENIZER_MERGES, NULL);
  PpClipTokenizer *tok = g_new0 (PpClipTokenizer, 1);

  tok->vocab = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  tok->ranks = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  pp_clip_byte_chars (tok->byte_chars);
  if (!load_vocab (tok, vocab_path, error)
      || !load_merges (tok, merges_path, error)
      || !load_config (tok, dir, vocab_path, error)) {
    g_prefix_error (error, "tokenizer %s: ", dir);
    pp_clip_tokenizer_free (tok);
    return NULL;
  }
  return tok;
}

void
pp_clip_tokenizer_free (PpClipTokenizer * tok)
{
  if (tok == NULL)
    return;
  g_hash_table_unref (tok->vocab);
  g_hash_table_unref (tok->ranks);
  for (guint b = 0; b < PP_CLIP_N_BYTES; b++)
    g_free (tok->byte_chars[b]);
  g_free (tok);
}

/* ---- BPE --------------------------------------------------------------- */

static guint
pair_rank (PpClipTokenizer * tok, GString * key, const gchar * a,
    const gchar * b)
{
  g_string_assign (key, a);
  g_string_append_c (key, ' ');
  g_string_append (key, b);
  return GPOINTER_TO_UINT (g_hash_table_lookup (tok->ranks, key->str));
}

/* One pre-token's ids: its bytes as characters, "</w>" on the last, merged
 * lowest rank first (each time every occurrence, left to right). */
static gboolean
bpe (PpClipTokenizer * tok, const gchar * token, gsize len, GArray * ids,
    GError ** error)
{
  g_autoptr (GPtrArray) word = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GString) key = g_string_new (NULL);

  for (gsize i = 0; i < len; i++)
    g_ptr_array_add (word, g_strdup (tok->byte_chars[(guchar) token[i]]));
  {
    gchar *last = word->pdata[word->len - 1];

    word->pdata[word->len - 1] = g_strconcat (last, PP_CLIP_END_OF_WORD,
        NULL);
    g_free (last);
  }
  while (word->len > 1) {
    guint best = 0, best_at = 0;
    GPtrArray *merged;
    const gchar *first, *second;

    for (guint i = 0; i + 1 < word->len; i++) {
      guint r = pair_rank (tok, key, word->pdata[i], word->pdata[i + 1]);

      if (r != 0 && (best == 0 || r < best)) {
        best = r;
        best_at = i;
      }
    }
    if (best == 0)
      break;
    first = word->pdata[best_at];
    second = word->pdata[best_at + 1];
    merged = g_ptr_array_new_with_free_func (g_free);
    for (guint i = 0; i < word->len; i++) {
      if (i + 1 < word->len && strcmp (word->pdata[i], first) == 0
          && strcmp (word->pdata[i + 1], second) == 0) {
        g_ptr_array_add (merged, g_strconcat (first, second, NULL));
        i++;
      } else {
        g_ptr_array_add (merged, g_strdup (word->pdata[i]));
      }
    }
    g_ptr_array_unref (word);
    word = merged;
  }
  for (guint i = 0; i < word->len; i++) {
    gint32 id;

    if (!vocab_lookup (tok, word->pdata[i], &id)) {
      if (tok->unk < 0) {
        g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "the vocabulary has "
            "neither the symbol '%.*s' nor an unknown token", QUOTE_MAX,
            (const gchar *) word->pdata[i]);
        return FALSE;
      }
      id = tok->unk;
    }
    g_array_append_val (ids, id);
  }
  return TRUE;
}

/* ---- CLIP's split pattern ---------------------------------------------- */

static gboolean
is_letter (gunichar c)
{
  switch (g_unichar_type (c)) {
    case G_UNICODE_UPPERCASE_LETTER:
    case G_UNICODE_LOWERCASE_LETTER:
    case G_UNICODE_TITLECASE_LETTER:
    case G_UNICODE_MODIFIER_LETTER:
    case G_UNICODE_OTHER_LETTER:
      return TRUE;
    default:
      return FALSE;
  }
}

static gboolean
is_number (gunichar c)
{
  switch (g_unichar_type (c)) {
    case G_UNICODE_DECIMAL_NUMBER:
    case G_UNICODE_LETTER_NUMBER:
    case G_UNICODE_OTHER_NUMBER:
      return TRUE;
    default:
      return FALSE;
  }
}

/* The length of the contraction at @p ('s 't 're 've 'm 'll 'd, matched
 * ignoring case as the pattern is: ſ, LATIN SMALL LETTER LONG S, folds to
 * s), or 0. */
static gsize
contraction_len (const gchar * p)
{
  static const gchar *const suffixes[] = { "s", "\xc5\xbf", "t", "re", "ve",
    "m", "ll", "d"
  };

  if (*p != '\'')
    return 0;
  for (guint i = 0; i < G_N_ELEMENTS (suffixes); i++)
    if (g_str_has_prefix (p + 1, suffixes[i]))
      return 1 + strlen (suffixes[i]);
  return 0;
}

gsize
pp_clip_tokenizer_next_piece (const gchar * p, const gchar ** start,
    gboolean * special)
{
  *special = FALSE;
  for (; *p != '\0'; p = g_utf8_next_char (p)) {
    gunichar c = g_utf8_get_char (p);
    const gchar *q = p;
    gsize n;

    *start = p;
    if (g_str_has_prefix (p, PP_CLIP_BOS)
        || g_str_has_prefix (p, PP_CLIP_EOS)) {
      *special = TRUE;
      return strlen (g_str_has_prefix (p, PP_CLIP_BOS) ? PP_CLIP_BOS
          : PP_CLIP_EOS);
    }
    if ((n = contraction_len (p)) != 0)
      return n;
    if (is_letter (c)) {
      while (*q != '\0' && is_letter (g_utf8_get_char (q)))
        q = g_utf8_next_char (q);
      return q - p;
    }
    if (is_number (c))
      return g_utf8_next_char (p) - p;
    if (pp_text_is_white_space (c))
      continue;
    while (*q != '\0') {
      gunichar d = g_utf8_get_char (q);

      if (pp_text_is_white_space (d) || is_letter (d) || is_number (d))
        break;
      q = g_utf8_next_char (q);
    }
    return q - p;
  }
  *start = p;
  return 0;
}

/* ---- encoding ---------------------------------------------------------- */

GArray *
pp_clip_tokenizer_tokenize (PpClipTokenizer * tok, const gchar * utf8,
    GError ** error)
{
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (gint32));
  g_autofree gchar *text = NULL;
  const gchar *end, *p;
  gsize n;

  if (!g_utf8_validate (utf8, -1, &end)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "the prompt is not valid "
        "UTF-8: byte 0x%02x at byte offset %" G_GSIZE_FORMAT " starts no "
        "character", (guchar) * end, (gsize) (end - utf8));
    return NULL;
  }
  text = pp_text_clip_clean (utf8);
  for (p = text;; p += n) {
    gboolean special;

    n = pp_clip_tokenizer_next_piece (p, &p, &special);
    if (n == 0)
      break;
    if (special) {
      g_autofree gchar *name = g_strndup (p, n);
      gint32 id;

      /* The pattern's own specials, looked up as any other token. */
      if (!vocab_lookup (tok, name, &id))
        id = g_str_equal (name, PP_CLIP_BOS) ? tok->bos : tok->eos;
      g_array_append_val (ids, id);
    } else if (!bpe (tok, p, n, ids, error)) {
      return NULL;
    }
  }
  return g_steal_pointer (&ids);
}

gboolean
pp_clip_tokenizer_pack (PpClipTokenizer * tok, const gint32 * tokens,
    guint n_tokens, gint32 * ids)
{
  guint max = tok->model_max_length, kept = MIN (n_tokens, max - 2), i = 0;

  ids[i++] = tok->bos;
  if (kept > 0)
    memcpy (ids + i, tokens, kept * sizeof *ids);
  i += kept;
  ids[i++] = tok->eos;
  while (i < max)
    ids[i++] = tok->pad;
  return kept < n_tokens;
}

gboolean
pp_clip_tokenizer_encode (PpClipTokenizer * tok, const gchar * utf8,
    gint32 * ids, gboolean * truncated, GError ** error)
{
  g_autoptr (GArray) tokens = pp_clip_tokenizer_tokenize (tok, utf8, error);
  gboolean cut;

  if (tokens == NULL)
    return FALSE;
  cut = pp_clip_tokenizer_pack (tok, (const gint32 *) tokens->data,
      tokens->len, ids);
  if (truncated != NULL)
    *truncated = cut;
  return TRUE;
}

guint
pp_clip_tokenizer_model_max_length (PpClipTokenizer * tok)
{
  return tok->model_max_length;
}

gint32
pp_clip_tokenizer_bos_id (PpClipTokenizer * tok)
{
  return tok->bos;
}

gint32
pp_clip_tokenizer_eos_id (PpClipTokenizer * tok)
{
  return tok->eos;
}

gint32
pp_clip_tokenizer_pad_id (PpClipTokenizer * tok)
{
  return tok->pad;
}

gint32
pp_clip_tokenizer_unk_id (PpClipTokenizer * tok)
{
  return tok->unk;
}

guint
pp_clip_tokenizer_vocab_size (PpClipTokenizer * tok)
{
  return g_hash_table_size (tok->vocab);
}
