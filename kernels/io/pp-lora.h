/* ppdiffuse — LoRA adapters fused into a model's weights at load.
 *
 * A setting "PATH[:SCALE][,PATH[:SCALE]…]" names safetensors files of
 * low-rank pairs (SCALE a decimal, default 1).  For each pair targeting a
 * weight W (a Linear [out, in] or a Conv [out, in, kh, kw]):
 *
 *   W ← W + SCALE · (alpha / r) · up · down
 *
 * with down [r, in·kh·kw], up [out, r], alpha the pair's own (a ".alpha"
 * scalar) or, for a pair without one, what diffusers gives it: the most
 * common alpha of the file's pairs for that component, else the rank of
 * its first pair by key (r for a file of one rank), as diffusers'
 * load_lora_weights + fuse_lora(lora_scale) do.  The key layouts read:
 *   diffusers / PEFT    unet.MODULE.lora_A.weight, .lora_B.weight
 *                       (text_encoder.MODULE for the text encoder)
 *   older diffusers     unet.MODULE.lora.down.weight, .lora.up.weight;
 *                       unet.PARENT.processor.to_q_lora.down.weight …
 *   kohya               lora_unet_MODULE_WITH_UNDERSCORES.lora_down.weight,
 *                       .lora_up.weight, .alpha (lora_te_ for the text
 *                       encoder), LCM-LoRA's layout
 * MODULE in diffusers' names.  A key of none of these layouts, a pair
 * missing its other half, or a pair that matches no weight of the
 * component it targets is an error naming the keys. */
#pragma once

#include "pp-weights.h"

G_BEGIN_DECLS

typedef struct _PpLora PpLora;

typedef enum
{
  PP_LORA_UNET,
  PP_LORA_TEXT_ENCODER,
} PpLoraTarget;

/* Parses @spec and reads every file's keys; NULL with an error naming the
 * file or the part of @spec at fault. */
PpLora   *pp_lora_open      (const gchar * spec, GError ** error);
/* TRUE when some pair targets @target. */
gboolean  pp_lora_targets   (PpLora * lora, PpLoraTarget target);
/* Fuses every pair that targets @target into @w (before a model binds
 * it), noting each file's digest and scale in @w's digest. */
gboolean  pp_lora_fuse      (PpLora * lora, PpLoraTarget target,
                             PpWeights * w, GError ** error);
/* The same checks without changing @w: every pair that targets @target
 * matches a weight of @w and fits its shape (reads only the file's
 * header). */
gboolean  pp_lora_check     (PpLora * lora, PpLoraTarget target,
                             PpWeights * w, GError ** error);
/* One line per file: its pairs by component, their ranks and the layouts
 * of its keys ("unet 12 pairs, text_encoder 4 pairs; rank 4; kohya"). */
gchar    *pp_lora_describe  (PpLora * lora);
void      pp_lora_free      (PpLora * lora);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpLora, pp_lora_free)

G_END_DECLS
