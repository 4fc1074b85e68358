/* ppdiffuse-tool tokenize --tokenizer DIR (--prompt TEXT | --prompts-file F)
 *
 * Prints, for each prompt (one per line of F; an empty line is an empty
 * prompt), one line of model_max_length token ids separated by single
 * spaces.  A prompt longer than that is truncated as the text encoder sees
 * it, with a warning on stderr that names its token count. */
#include "pp-tokenize.h"
#include "pp-clip-tokenizer.h"
#include "pp-error.h"

#include <stdio.h>
#include <string.h>

/* @where names the prompt in messages. */
static gboolean
print_prompt (PpClipTokenizer * tok, const gchar * prompt,
    const gchar * where, GError ** error)
{
  guint max = pp_clip_tokenizer_model_max_length (tok);
  g_autofree gint32 *ids = g_new (gint32, max);
  g_autoptr (GArray) tokens = pp_clip_tokenizer_tokenize (tok, prompt, error);
  g_autoptr (GString) line = g_string_new (NULL);

  if (tokens == NULL) {
    g_prefix_error (error, "%s: ", where);
    return FALSE;
  }
  if (pp_clip_tokenizer_pack (tok, (const gint32 *) tokens->data,
          tokens->len, ids))
    g_printerr ("ppdiffuse-tool tokenize: warning: %s has %u tokens with "
        "BOS and EOS, more than model_max_length %u: truncated to %u\n",
        where, tokens->len + 2, max, max);
  for (guint i = 0; i < max; i++)
    g_string_append_printf (line, i ? " %d" : "%d", ids[i]);
  printf ("%s\n", line->str);
  return TRUE;
}

gboolean
pp_cmd_tokenize (int argc, char **argv, GError ** error)
{
  g_autofree gchar *dir = NULL, *prompt = NULL, *file = NULL,
      *contents = NULL;
  GOptionEntry entries[] = {
    {"tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &dir,
        "a pipeline's tokenizer/ folder", "DIR"},
    {"prompt", 0, 0, G_OPTION_ARG_STRING, &prompt, "one prompt", "TEXT"},
    {"prompts-file", 0, 0, G_OPTION_ARG_FILENAME, &file,
        "prompts, one per line (an empty line is an empty prompt)", "F"},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx =
      g_option_context_new ("- print CLIP token ids, one line per prompt");
  g_autoptr (PpClipTokenizer) tok = NULL;
  g_auto (GStrv) lines = NULL;
  guint n_lines;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, error))
    return FALSE;
  if (dir == NULL || (prompt == NULL) == (file == NULL)) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
        "usage: tokenize --tokenizer DIR (--prompt TEXT | --prompts-file F)");
    return FALSE;
  }
  if ((tok = pp_clip_tokenizer_load (dir, error)) == NULL)
    return FALSE;
  if (prompt != NULL)
    return print_prompt (tok, prompt, "the prompt", error);
  if (!g_file_get_contents (file, &contents, NULL, error))
    return FALSE;
  lines = g_strsplit (contents, "\n", -1);
  n_lines = g_strv_length (lines);
  /* The text after the last newline is a prompt only when not empty. */
  if (n_lines > 0 && lines[n_lines - 1][0] == '\0')
    n_lines--;
  for (guint i = 0; i < n_lines; i++) {
    g_autofree gchar *where = g_strdup_printf ("%s:%u", file, i + 1);

    if (!print_prompt (tok, lines[i], where, error))
      return FALSE;
  }
  return TRUE;
}
