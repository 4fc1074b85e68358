/* ppdiffuse — a tiny CLIP tokenizer folder (see pp-clip-tokenizer-tiny.h). */
#include "pp-clip-tokenizer-tiny.h"
#include "pp-clip-tokenizer.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-text-clean.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <string.h>

/* Merges learned at most; fewer when every word of the text is whole. */
#define TINY_MAX_MERGES 300
#define TINY_MIN_PAIR_COUNT 1
#define DIR_MODE 0755

const gchar *const pp_clip_tiny_sentences[] = {
  "a photo of a cat sitting on the table",
  "a painting of a dog in the style of van gogh",
  "portrait of a woman with red hair, studio lighting",
  "a beautiful landscape with mountains and a river at sunset",
  "a cyberpunk street at night, cinematic, highly detailed",
  NULL
};

/* The training text: the sentences above and a few more of their kind. */
static const gchar *const training_extra[] = {
  "an astronaut riding a horse on the moon, digital art",
  "there's a castle in the clouds; it's raining and they're walking home",
  "oil painting of a city street, trending on artstation, 4k",
  "a cat and a dog sitting together, watercolor illustration",
  "the mountains at sunrise, photorealistic, sharp focus, masterpiece",
  NULL
};

typedef struct
{
  GPtrArray *symbols;           /* gchar* */
  guint count;
} Word;

static void
word_free (gpointer p)
{
  Word *w = p;

  g_ptr_array_unref (w->symbols);
  g_free (w);
}

/* Every pre-token of @text, as symbols (byte characters, </w> on the last),
 * counted into @words (key: the symbols joined by spaces). */
static void
add_text (GHashTable * words, gchar ** byte_chars, const gchar * text)
{
  g_autofree gchar *clean = pp_text_clip_clean (text);
  const gchar *p = clean;
  gboolean special;
  gsize n;

  while ((n = pp_clip_tokenizer_next_piece (p, &p, &special)) != 0) {
    g_autoptr (GString) key = g_string_new (NULL);
    Word *w;

    for (gsize i = 0; i < n; i++) {
      if (i > 0)
        g_string_append_c (key, ' ');
      g_string_append (key, byte_chars[(guchar) p[i]]);
    }
    g_string_append (key, PP_CLIP_END_OF_WORD);
    p += n;
    if ((w = g_hash_table_lookup (words, key->str)) == NULL) {
      g_auto (GStrv) parts = g_strsplit (key->str, " ", -1);

      w = g_new0 (Word, 1);
      w->symbols = g_ptr_array_new_with_free_func (g_free);
      for (guint i = 0; parts[i] != NULL; i++)
        g_ptr_array_add (w->symbols, g_strdup (parts[i]));
      g_hash_table_insert (words, g_strdup (key->str), w);
    }
    w->count++;
  }
}

/* The most frequent adjacent pair (ties: the smaller "a b" key) into
 * @best; FALSE when none is left. */
static gboolean
best_pair (GHashTable * words, GString * best)
{
  g_autoptr (GHashTable) counts = g_hash_table_new_full (g_str_hash,
      g_str_equal, g_free, NULL);
  GHashTableIter it;
  gpointer key, value;
  guint best_count = 0;

  g_hash_table_iter_init (&it, words);
  while (g_hash_table_iter_next (&it, NULL, &value)) {
    Word *w = value;

    for (guint i = 0; i + 1 < w->symbols->len; i++) {
      gchar *pair = g_strjoin (" ", (gchar *) w->symbols->pdata[i],
          (gchar *) w->symbols->pdata[i + 1], NULL);
      guint c = GPOINTER_TO_UINT (g_hash_table_lookup (counts, pair));

      g_hash_table_replace (counts, pair, GUINT_TO_POINTER (c + w->count));
    }
  }
  g_hash_table_iter_init (&it, counts);
  while (g_hash_table_iter_next (&it, &key, &value)) {
    guint c = GPOINTER_TO_UINT (value);

    if (c > best_count || (c == best_count && strcmp (key, best->str) < 0)) {
      best_count = c;
      g_string_assign (best, key);
    }
  }
  return best_count >= TINY_MIN_PAIR_COUNT;
}

static void
apply_merge (GHashTable * words, const gchar * first, const gchar * second)
{
  GHashTableIter it;
  gpointer value;

  g_hash_table_iter_init (&it, words);
  while (g_hash_table_iter_next (&it, NULL, &value)) {
    Word *w = value;
    GPtrArray *merged = g_ptr_array_new_with_free_func (g_free);

    for (guint i = 0; i < w->symbols->len; i++) {
      const gchar *s = w->symbols->pdata[i];

      if (i + 1 < w->symbols->len && strcmp (s, first) == 0
          && strcmp (w->symbols->pdata[i + 1], second) == 0) {
        g_ptr_array_add (merged, g_strconcat (first, second, NULL));
        i++;
      } else {
        g_ptr_array_add (merged, g_strdup (s));
      }
    }
    g_ptr_array_unref (w->symbols);
    w->symbols = merged;
  }
}

static void
add_token (JsonBuilder * b, const gchar * token, gint64 * id)
{
  json_builder_set_member_name (b, token);
  json_builder_add_int_value (b, (*id)++);
}

static gboolean
save (JsonBuilder * b, const gchar * dir, const gchar * name, GError ** error)
{
  g_autofree gchar *path = g_build_filename (dir, name, NULL);
  g_autoptr (JsonNode) root = json_builder_get_root (b);

  return pp_config_save_json (path, root, error);
}

static void
add_special (JsonBuilder * b, const gchar * key, const gchar * content)
{
  json_builder_set_member_name (b, key);
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "content");
  json_builder_add_string_value (b, content);
  json_builder_end_object (b);
}

static gboolean
write_configs (const gchar * dir, const gchar * pad_token, GError ** error)
{
  g_autoptr (JsonBuilder) config = json_builder_new ();
  g_autoptr (JsonBuilder) special = json_builder_new ();

  json_builder_begin_object (config);
  add_special (config, "bos_token", PP_CLIP_BOS);
  add_special (config, "eos_token", PP_CLIP_EOS);
  add_special (config, "unk_token", PP_CLIP_EOS);
  json_builder_set_member_name (config, "pad_token");
  json_builder_add_string_value (config, pad_token);
  json_builder_set_member_name (config, "do_lower_case");
  json_builder_add_boolean_value (config, TRUE);
  json_builder_set_member_name (config, "model_max_length");
  json_builder_add_int_value (config, PP_CLIP_TINY_MODEL_MAX_LENGTH);
  json_builder_set_member_name (config, "tokenizer_class");
  json_builder_add_string_value (config, "CLIPTokenizer");
  json_builder_end_object (config);

  json_builder_begin_object (special);
  add_special (special, "bos_token", PP_CLIP_BOS);
  add_special (special, "eos_token", PP_CLIP_EOS);
  add_special (special, "unk_token", PP_CLIP_EOS);
  json_builder_set_member_name (special, "pad_token");
  json_builder_add_string_value (special, pad_token);
  json_builder_end_object (special);
  return save (config, dir, PP_CLIP_TOKENIZER_CONFIG, error)
      && save (special, dir, PP_CLIP_TOKENIZER_SPECIAL, error);
}

gboolean
pp_clip_tokenizer_write_tiny (const gchar * dir, const gchar * pad_token,
    GError ** error)
{
  g_autoptr (GHashTable) words = g_hash_table_new_full (g_str_hash,
      g_str_equal, g_free, word_free);
  g_autoptr (GString) merges = g_string_new ("#version: 0.2\n");
  g_autoptr (GString) pair = g_string_new (NULL);
  g_autoptr (JsonBuilder) vocab = json_builder_new ();
  g_autoptr (GHashTable) merged = g_hash_table_new_full (g_str_hash,
      g_str_equal, g_free, NULL);
  g_autofree gchar *merges_path = g_build_filename (dir,
      PP_CLIP_TOKENIZER_MERGES, NULL);
  gchar *byte_chars[PP_CLIP_N_BYTES];
  gint64 id = 0;
  gboolean ok;

  if (g_mkdir_with_parents (dir, DIR_MODE) != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "cannot create %s: %s",
        dir, g_strerror (errno));
    return FALSE;
  }
  pp_clip_byte_chars (byte_chars);
  for (guint i = 0; pp_clip_tiny_sentences[i] != NULL; i++)
    add_text (words, byte_chars, pp_clip_tiny_sentences[i]);
  for (guint i = 0; training_extra[i] != NULL; i++)
    add_text (words, byte_chars, training_extra[i]);

  /* CLIP's order: the printable bytes' characters, then the others (each
   * in byte order), the same with </w>, the merges, the specials. */
  json_builder_begin_object (vocab);
  for (guint with_end = 0; with_end < 2; with_end++)
    for (guint printable = 1; printable < 3; printable++)
      for (guint b = 0; b < PP_CLIP_N_BYTES; b++) {
        g_autofree gchar *token = NULL;

        if (pp_clip_byte_is_printable (b) != (printable == 1))
          continue;
        token = g_strconcat (byte_chars[b], with_end ? PP_CLIP_END_OF_WORD
            : "", NULL);
        add_token (vocab, token, &id);
      }
  for (guint m = 0; m < TINY_MAX_MERGES && best_pair (words, pair); m++) {
    g_auto (GStrv) parts = g_strsplit (pair->str, " ", 2);
    g_autofree gchar *joined = g_strconcat (parts[0], parts[1], NULL);

    apply_merge (words, parts[0], parts[1]);
    g_string_append_printf (merges, "%s\n", pair->str);
    /* Two merges can make one token ("a bc", "ab c"): it has one id. */
    if (g_hash_table_add (merged, g_strdup (joined)))
      add_token (vocab, joined, &id);
  }
  add_token (vocab, PP_CLIP_BOS, &id);
  add_token (vocab, PP_CLIP_EOS, &id);
  json_builder_end_object (vocab);
  for (guint b = 0; b < PP_CLIP_N_BYTES; b++)
    g_free (byte_chars[b]);

  ok = save (vocab, dir, PP_CLIP_TOKENIZER_VOCAB, error)
      && g_file_set_contents (merges_path, merges->str, merges->len, error)
      && write_configs (dir, pad_token, error);
  return ok;
}
