/* ppdiffuse — a small real CLIP tokenizer folder for tiny pipelines
 * (ppdiffuse-tool make-tiny): BPE merges learned, deterministically, on a
 * built-in text of prompt-like sentences, the vocabulary laid out as CLIP's
 * (the 256 byte characters, the same with </w>, one token per merge, the
 * two specials), model_max_length 77. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_CLIP_TINY_MODEL_MAX_LENGTH 77

/* Writes vocab.json, merges.txt, tokenizer_config.json and
 * special_tokens_map.json into @dir (made when missing); @pad_token is
 * "<|endoftext|>" (SD 1.x) or "!" (SD 2.x). */
gboolean pp_clip_tokenizer_write_tiny (const gchar * dir,
                                       const gchar * pad_token,
                                       GError ** error);

/* Sentences the tiny tokenizer splits into multi-character tokens. */
extern const gchar *const pp_clip_tiny_sentences[];

G_END_DECLS
