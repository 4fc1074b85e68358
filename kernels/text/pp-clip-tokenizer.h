/* ppdiffuse — CLIP's byte-level BPE tokenizer, read from a diffusers
 * pipeline's tokenizer/ folder (vocab.json, merges.txt,
 * tokenizer_config.json, special_tokens_map.json).
 *
 * encode() gives what transformers' CLIPTokenizer gives with
 * padding="max_length", truncation=True: BOS, the prompt's tokens, EOS,
 * truncated to model_max_length keeping EOS last, then the pad token.  The
 * prompt is cleaned as OpenAI's simple_tokenizer does (pp-text-clean.h),
 * lower-cased, split with CLIP's pattern, its UTF-8 bytes mapped to
 * characters (bytes_to_unicode) and merged by rank. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_CLIP_TOKENIZER_VOCAB "vocab.json"
#define PP_CLIP_TOKENIZER_MERGES "merges.txt"
#define PP_CLIP_TOKENIZER_CONFIG "tokenizer_config.json"
#define PP_CLIP_TOKENIZER_SPECIAL "special_tokens_map.json"

#define PP_CLIP_BOS "<|startoftext|>"
#define PP_CLIP_EOS "<|endoftext|>"
#define PP_CLIP_END_OF_WORD "</w>"
#define PP_CLIP_N_BYTES 256

typedef struct _PpClipTokenizer PpClipTokenizer;

/* vocab.json, merges.txt and tokenizer_config.json must be there;
 * special_tokens_map.json, when there, names the special tokens (else
 * tokenizer_config.json does, else CLIP's defaults). */
PpClipTokenizer *pp_clip_tokenizer_load     (const gchar * dir,
                                             GError ** error);
void             pp_clip_tokenizer_free     (PpClipTokenizer * tok);

/* The prompt's token ids, without BOS and EOS, however many (g_array_unref;
 * elements gint32).  NULL with @error when @utf8 is not valid UTF-8. */
GArray          *pp_clip_tokenizer_tokenize (PpClipTokenizer * tok,
                                             const gchar * utf8,
                                             GError ** error);
/* BOS + @tokens + EOS, truncated and padded to model_max_length ids.
 * Returns TRUE when tokens were cut off. */
gboolean         pp_clip_tokenizer_pack     (PpClipTokenizer * tok,
                                             const gint32 * tokens,
                                             guint n_tokens, gint32 * ids);
/* tokenize + pack: @ids holds model_max_length ids; *@truncated (may be
 * NULL) tells whether the prompt was cut. */
gboolean         pp_clip_tokenizer_encode   (PpClipTokenizer * tok,
                                             const gchar * utf8,
                                             gint32 * ids,
                                             gboolean * truncated,
                                             GError ** error);

guint            pp_clip_tokenizer_model_max_length (PpClipTokenizer * tok);
gint32           pp_clip_tokenizer_bos_id   (PpClipTokenizer * tok);
gint32           pp_clip_tokenizer_eos_id   (PpClipTokenizer * tok);
gint32           pp_clip_tokenizer_pad_id   (PpClipTokenizer * tok);
gint32           pp_clip_tokenizer_unk_id   (PpClipTokenizer * tok);
guint            pp_clip_tokenizer_vocab_size (PpClipTokenizer * tok);

/* The pieces of the BPE, for the writer of tiny tokenizers as well. */

/* The next match of CLIP's pattern
 *   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|
 *   [\p{N}]|[^\s\p{L}\p{N}]+
 * at or after @text (cleaned, lower-cased): its start in *@start, its byte
 * length returned (0 at the end).  *@special: it is one of the two
 * specials.  \p{L} is Lu Ll Lt Lm Lo, \p{N} Nd Nl No, \s White_Space, as
 * Python's regex module has them. */
gsize            pp_clip_tokenizer_next_piece (const gchar * text,
                                               const gchar ** start,
                                               gboolean * special);
/* bytes_to_unicode: the character (UTF-8, g_free each) standing for each
 * byte; the printable Latin-1 bytes stand for themselves. */
void             pp_clip_byte_chars         (gchar * chars[PP_CLIP_N_BYTES]);
gboolean         pp_clip_byte_is_printable  (guint8 b);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpClipTokenizer, pp_clip_tokenizer_free)

G_END_DECLS
