/* libFuzzer target for the CLIP tokenizer (kernels/text): any bytes as a
 * prompt must give either model_max_length ids in the vocabulary (BOS
 * first, EOS after the tokens, the pad after it), or, for text that is not
 * UTF-8, an error that says so — never a crash, a leak, a hang or undefined
 * behaviour (built with ASan and UBSan).  The tokenizer is the sd15 fixture
 * (PP_FUZZ_TOKENIZER_DIR, set by tests/fuzz/meson.build). */
#include "pp-clip-tokenizer.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t * data, size_t size);

static PpClipTokenizer *
tokenizer (void)
{
  static PpClipTokenizer *tok;

  if (tok == NULL) {
    GError *error = NULL;

    tok = pp_clip_tokenizer_load (PP_FUZZ_TOKENIZER_DIR, &error);
    if (tok == NULL)
      g_error ("%s", error->message);
  }
  return tok;
}

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  PpClipTokenizer *tok = tokenizer ();
  guint max = pp_clip_tokenizer_model_max_length (tok);
  gint32 vocab = (gint32) pp_clip_tokenizer_vocab_size (tok);
  gchar *text = g_strndup ((const gchar *) data, size);
  gint32 *ids = g_new (gint32, max);
  GError *error = NULL;
  gboolean truncated;

  if (!pp_clip_tokenizer_encode (tok, text, ids, &truncated, &error)) {
    if (g_utf8_validate (text, -1, NULL) || error == NULL
        || strstr (error->message, "UTF-8") == NULL)
      __builtin_trap ();
    g_error_free (error);
  } else {
    GArray *tokens = pp_clip_tokenizer_tokenize (tok, text, NULL);
    guint n = MIN (tokens->len, max - 2);

    /* BOS, the tokens (as many as fit), EOS, pads. */
    if (!g_utf8_validate (text, -1, NULL) || truncated != (n < tokens->len)
        || ids[0] != pp_clip_tokenizer_bos_id (tok)
        || (n > 0 && memcmp (ids + 1, tokens->data, n * sizeof *ids) != 0)
        || ids[n + 1] != pp_clip_tokenizer_eos_id (tok))
      __builtin_trap ();
    for (guint i = n + 2; i < max; i++)
      if (ids[i] != pp_clip_tokenizer_pad_id (tok))
        __builtin_trap ();
    for (guint i = 0; i < max; i++)
      if (ids[i] < 0 || ids[i] >= vocab)
        __builtin_trap ();
    g_array_unref (tokens);
  }
  g_free (ids);
  g_free (text);
  return 0;
}
