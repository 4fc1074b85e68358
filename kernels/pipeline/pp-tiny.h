/* ppdiffuse — small random-weight models in diffusers layout, for tests and
 * demos (ppdiffuse-tool make-tiny).
 *
 * kind "taesd": DIR is one AutoencoderTiny component (config.json +
 * diffusion_pytorch_model.safetensors); kind "vae-kl" one AutoencoderKL
 * component, the SD VAE's layout at widths 8 and 16; kind "lora" a
 * kohya-layout LoRA for kind "sd15"'s UNet (LCM-LoRA's layout), in
 * DIR/PP_TINY_LORA_FILE.  Kinds "sd15" and "turbo": DIR is a
 * pipeline — unet/ (SD1.5-style conv projections, or SD2/Turbo-style linear
 * projections with per-block heads), vae/ (tiny TAESD), scheduler/
 * (LCMScheduler for sd15, EulerDiscreteScheduler with trailing spacing for
 * turbo), text_encoder/ (a two-layer CLIPTextModel as wide as the UNet's
 * cross_attention_dim, quick GELU for sd15 and GELU for turbo, a
 * vocabulary of PP_TINY_TEXT_VOCAB), tokenizer/ (a small real CLIP BPE
 * vocabulary, padded with <|endoftext|> for sd15 and "!" for turbo),
 * model_index.json, and prompt_embeds.npy ([1, 8, D] normal noise
 * standing in for text embeddings).  Kind "sd-turbo": the same pipeline at
 * the released sizes (stabilityai/sd-turbo's UNet, madebyollin/taesd, 77
 * prompt rows of 1024), seeded weights: ~3.5 GB on disk, for benchmarks
 * of the real shapes without downloading a model (no text encoder: the
 * released one alone would be another 1.4 GB). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_TINY_PROMPT_EMBEDS "prompt_embeds.npy"
/* Kind "lora"'s file: the name LCM-LoRA's is published under. */
#define PP_TINY_LORA_FILE "pytorch_lora_weights.safetensors"
/* The pipelines' tokenizer/ folder (pp-clip-tokenizer-tiny.h). */
#define PP_TINY_TOKENIZER "tokenizer"
/* The tiny text encoder's vocabulary: the tiny tokenizer's size (CLIP's
 * 49408 rows would make the embedding most of the model). */
#define PP_TINY_TEXT_VOCAB 1024

gboolean pp_tiny_write (const gchar * kind, const gchar * dir, guint64 seed,
                        GError ** error);

G_END_DECLS
