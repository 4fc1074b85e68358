/* ppdiffuse — the CLIP text encoder (transformers CLIPTextModel, the
 * text_encoder/ of a diffusers pipeline), in float32: 77 token ids → the
 * last hidden state [1, 77, D] that conditions the UNet's cross-attention,
 * as diffusers' StableDiffusionPipeline takes it (no pooling, no
 * projection). */
#pragma once

#include "pp-backend.h"
#include "pp-tap.h"
#include "pp-lora.h"
#include "pp-weights.h"

G_BEGIN_DECLS

typedef struct _PpClipText PpClipText;

/* transformers' file names in a text_encoder/ directory. */
#define PP_CLIP_TEXT_WEIGHTS_FILE "model.safetensors"
#define PP_CLIP_TEXT_WEIGHTS_FILE_FP16 "model.fp16.safetensors"

/* Reads @config_path (CLIPTextConfig's config.json) and binds every weight
 * by its transformers key (text_model.…) from @weights, which must outlive
 * the model, uploading it to @be.  A missing key or a wrong shape is an
 * error naming both. */
PpClipText *pp_clip_text_new        (const gchar * config_path,
                                     PpWeights * weights, PpBackend * be,
                                     GError ** error);
/* config.json and model.safetensors (else model.fp16.safetensors) of
 * @dir, the weights stored as @dtype on @be (0: the backend's default); a
 * key the model does not use is an error too. */
PpClipText *pp_clip_text_load       (const gchar * dir, PpBackend * be,
                                     PpDType dtype, GError ** error);
/* The same from config file @config_path and weights @w (taken), such as
 * a single-file checkpoint's text encoder (pp-checkpoint.h). */
PpClipText *pp_clip_text_load_weights (const gchar * config_path,
                                     PpWeights * w, PpBackend * be,
                                     PpDType dtype, PpLora * lora,
                                     GError ** error);
/* The same with @lora's text-encoder pairs fused first (NULL: none). */
PpClipText *pp_clip_text_load_lora  (const gchar * dir, PpBackend * be,
                                     PpDType dtype, PpLora * lora,
                                     GError ** error);
/* @ids (@n_tokens of them, 1 ≤ n ≤ max positions, each < the vocabulary
 * size) → @out_hidden, F32 [1, n_tokens, hidden size], on the host or on
 * the model's backend. */
gboolean  pp_clip_text_forward      (PpClipText * m, const gint32 * ids,
                                     guint n_tokens, PpTensor * out_hidden,
                                     GError ** error);
/* The same, calling @tap with host copies [1, n, D] of "embeddings",
 * "encoder.layers.{i}" (each layer's output, transformers' hidden_states
 * 1…L) and "last_hidden_state". */
gboolean  pp_clip_text_forward_tap  (PpClipText * m, const gint32 * ids,
                                     guint n_tokens, PpTensor * out_hidden,
                                     PpTapFunc tap, gpointer tap_data,
                                     GError ** error);
/* The UNet of the pipeline whose text_encoder/ @m is must take its states:
 * its config's cross_attention_dim (@unet_config_path) equals D; otherwise
 * an error naming both numbers and both files (@text_encoder_dir's
 * config.json). */
gboolean  pp_clip_text_check_unet   (PpClipText * m,
                                     const gchar * text_encoder_dir,
                                     const gchar * unet_config_path,
                                     GError ** error);
/* D, the width of the hidden states (the UNet's cross_attention_dim). */
guint     pp_clip_text_hidden_size  (PpClipText * m);
/* The most tokens a prompt may have (77 for every released CLIP). */
guint     pp_clip_text_max_positions (PpClipText * m);
guint     pp_clip_text_vocab_size   (PpClipText * m);
guint     pp_clip_text_n_layers     (PpClipText * m);
void      pp_clip_text_free         (PpClipText * m);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpClipText, pp_clip_text_free)

G_END_DECLS
