/* ppdiffuse — text prompts: a pipeline's tokenizer/ and text_encoder/ turn
 * a prompt (or a weighted blend of prompts) into the encoder hidden states
 * the UNet's cross-attention takes.
 *
 * Blend syntax: prompts separated by '|', each optionally followed by
 * ":WEIGHT" (a non-negative decimal number; 1 when left out), e.g.
 *   "a watercolor city:0.7|neon night:0.3"
 * The weights are normalised to sum 1 and the prompts' hidden states are
 * mixed with them.  A ':' not followed by a number to the end of its part
 * belongs to the prompt ("time: 10pm").  An empty part, or weights that
 * sum to 0, is an error. */
#pragma once

#include "pp-backend.h"

G_BEGIN_DECLS

/* The prefix of a model URI's prompt-embeds value that says the hidden
 * states travel with the first chunk of the epoch (the tensor named
 * PP_PROMPT_TENSOR) instead of being read from a file; the rest of the
 * value is the states' digest (pp_prompt_ref). */
#define PP_PROMPT_REF_PREFIX "chunk:"
#define PP_PROMPT_TENSOR "prompt_embeds"

typedef struct _PpPromptEncoder PpPromptEncoder;

/* The tokenizer/ and text_encoder/ of pipeline @dir, on @backend, with
 * the text-encoder pairs of the LoRA setting @lora_spec fused (NULL or "":
 * none; pp-lora.h); checks that the encoder's width is the UNet's
 * cross_attention_dim.  @dir may be a single-file checkpoint
 * (pp-checkpoint.h): its text encoder, with the tokenizer and the configs
 * of the pipeline folder @config_dir (its model's config= parameter). */
PpPromptEncoder *pp_prompt_encoder_new  (const gchar * dir,
                                         const gchar * config_dir,
                                         const gchar * lora_spec,
                                         PpBackend * backend,
                                         GError ** error);
void             pp_prompt_encoder_free (PpPromptEncoder * enc);

/* @prompt (a blend, see above) → host F32 [1, L, D], L the text encoder's
 * positions (77).  *@truncated (may be NULL): a prompt was cut to fit. */
PpTensor        *pp_prompt_encode       (PpPromptEncoder * enc,
                                         const gchar * prompt,
                                         gboolean * truncated,
                                         GError ** error);

/* "chunk:" and the first 16 hex digits of the SHA-256 of @states' shape
 * and bytes: what a model URI says for prompt-embeds when the states come
 * with the chunk. */
gchar           *pp_prompt_ref          (const PpTensor * states);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpPromptEncoder, pp_prompt_encoder_free)

G_END_DECLS
