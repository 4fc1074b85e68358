/* ppdiffuse — the denoising UNet (diffusers UNet2DConditionModel, SD 1.x
 * and SD 2.x / Turbo layouts) in float32. */
#pragma once

#include "pp-backend.h"
#include "pp-tap.h"
#include "pp-lora.h"
#include "pp-weights.h"

G_BEGIN_DECLS

typedef struct _PpUnet PpUnet;

/* FALSE with @error when @component_dir's config.json names a class other
 * than UNet2DConditionModel (none named: TRUE, the loader checks the rest).
 * Rank 0 checks it before any worker is spawned. */
gboolean pp_unet_check_class (const gchar * component_dir, GError ** error);

/* Reads @config_path (config.json), refuses what it does not implement, and
 * binds every weight by its diffusers key from @weights, which must outlive
 * the model, uploading it to @be. A missing key or a wrong shape is an
 * error naming both. */
PpUnet   *pp_unet_new                 (const gchar * config_path,
                                       PpWeights * weights, PpBackend * be,
                                       GError ** error);
/* config.json and the safetensors of @component_dir, the weights stored as
 * @dtype on @be (0: the backend's default); a key the model does not use is
 * an error too. */
/* The temporal feature bank (pp-feature-bank.h) the next forwards read
 * and update, or NULL for none (the default); the caller keeps it, one per
 * stream and denoising step, and sets the step's before each forward.  A
 * forward with a bank takes one sample. */
typedef struct _PpFeatureBank PpFeatureBank;
void      pp_unet_set_bank            (PpUnet * m, PpFeatureBank * bank);
/* SHA-256 of the weights pp_unet_load read (NULL for other sources). */
const gchar *pp_unet_weights_digest  (PpUnet * m);
PpUnet   *pp_unet_load                (const gchar * component_dir,
                                       PpBackend * be, PpDType dtype,
                                       GError ** error);
/* The same with @lora's UNet pairs fused into the weights first (NULL:
 * none); pp_unet_weights_digest then covers them. */
PpUnet   *pp_unet_load_lora           (const gchar * component_dir,
                                       PpBackend * be, PpDType dtype,
                                       PpLora * lora, GError ** error);
/* The same from config file @config_path and weights @w (taken), such as
 * a single-file checkpoint's UNet (pp-checkpoint.h). */
PpUnet   *pp_unet_load_weights        (const gchar * config_path,
                                       PpWeights * w, PpBackend * be,
                                       PpDType dtype, PpLora * lora,
                                       GError ** error);
/* @sample [N, in_channels, H, W] (H, W multiples of pp_unet_size_multiple),
 * @encoder_hidden_states [N, L, cross_attention_dim] → *@out
 * [N, out_channels, H, W], the predicted noise.  Inputs are host tensors
 * or tensors on the model's backend; *@out is on the sample's side.
 * Taps (host copies): "time_emb" [N, 4·C0], "conv_in", "down_blocks.{i}",
 * "mid_block", "up_blocks.{i}", "out". */
gboolean  pp_unet_forward             (PpUnet * m, const PpTensor * sample,
                                       gdouble timestep,
                                       const PpTensor * encoder_hidden_states,
                                       PpTensor ** out, PpTapFunc tap,
                                       gpointer tap_data, GError ** error);
/* The same into @out, a tensor on the model's backend the sample's size:
 * once the model has run at a shape, this allocates nothing.
 *
 * Cross-attention K/V cache: the first call on an @encoder_hidden_states
 * tensor keeps every cross-attention's to_k / to_v projections of it, and
 * later calls on the same tensor (same pointer and data) reuse them, with
 * outputs bit-equal to computing them again.  The caller that frees,
 * replaces or rewrites that tensor's contents calls
 * pp_unet_context_changed before the next forward: a new tensor at a freed
 * one's address would otherwise reuse stale projections.
 * PPDIFFUSE_NO_KV_CACHE=1 in the environment when the model is built turns
 * the cache off.  pp_unet_forward (the reference path, with taps) never
 * uses it. */
gboolean  pp_unet_forward_into        (PpUnet * m, const PpTensor * sample,
                                       gdouble timestep,
                                       const PpTensor * encoder_hidden_states,
                                       PpTensor * out, GError ** error);
/* The same on a batch: sample i of @sample [N, C, H, W] at timestep
 * @timesteps[i] (N of them), every sample attending to the same
 * @encoder_hidden_states [1, L, D] (or one each, [N, L, D]).  Each
 * sample's output is the one pp_unet_forward_into gives it alone, to the
 * bit on the CPU backends (tests/kernels/models: a stream batch relies on
 * it).  No temporal feature bank. */
gboolean  pp_unet_forward_batch_into  (PpUnet * m, const PpTensor * sample,
                                       const gdouble * timesteps,
                                       const PpTensor * encoder_hidden_states,
                                       PpTensor * out, GError ** error);
/* Drops the K/V cache (its memory goes back to the activation pool): the
 * next pp_unet_forward_into builds it again. */
void      pp_unet_context_changed     (PpUnet * m);
/* How many times pp_unet_forward_into has built the K/V cache (0 with the
 * cache off). */
guint64   pp_unet_kv_cache_builds     (PpUnet * m);
/* Adds the model's activation pool to @sum (pp_pool_count). */
void      pp_unet_pools               (PpUnet * m, PpPoolBytes * sum);
/* The dtype its activations are kept in (pp_backend_act_dtype). */
PpDType   pp_unet_act_dtype           (PpUnet * m);
/* The layout its spatial activations are kept in between conv_in and
 * conv_out (pp_backend_act_layout). */
PpLayout  pp_unet_act_layout          (PpUnet * m);
guint     pp_unet_in_channels         (PpUnet * m);
guint     pp_unet_out_channels        (PpUnet * m);
guint     pp_unet_cross_attention_dim (PpUnet * m);
/* Sample height and width must be multiples of this (2^downsamplers). */
guint     pp_unet_size_multiple       (PpUnet * m);
/* How many of its self-attentions compute q, k and v as one stacked
 * product (all of them on a backend that stacks projections, none with a
 * temporal feature bank or elsewhere). */
guint     pp_unet_stacked_attentions  (PpUnet * m);
/* How many resnets' time embedding projections are rows of one stacked
 * linear (all of them on a backend that stacks projections, none
 * elsewhere): a forward of one sample computes them in one product. */
guint     pp_unet_stacked_time_projections (PpUnet * m);
void      pp_unet_free                (PpUnet * m);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpUnet, pp_unet_free)

G_END_DECLS
