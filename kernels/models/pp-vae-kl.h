/* ppdiffuse — the released Stable Diffusion VAE (diffusers AutoencoderKL):
 * images in [-1, 1] ⇄ latents scaled for the UNet. */
#pragma once

#include "pp-backend.h"
#include "pp-tap.h"
#include "pp-weights.h"

G_BEGIN_DECLS

typedef struct _PpVaeKl PpVaeKl;

/* Reads @config_path (config.json) and binds every weight by its diffusers
 * key from @weights, which must outlive the model, uploading it to @be.
 * The mid blocks' attention takes diffusers' keys (to_q, to_k, to_v,
 * to_out.0) or its older ones (query, key, value, proj_attn). */
PpVaeKl  *pp_vae_kl_new             (const gchar * config_path,
                                     PpWeights * weights, PpBackend * be,
                                     GError ** error);
/* config.json and the safetensors of @component_dir, the weights stored as
 * @dtype on @be (0: the backend's default); a key the model does not use is
 * an error too. */
PpVaeKl  *pp_vae_kl_load            (const gchar * component_dir,
                                     PpBackend * be, PpDType dtype,
                                     GError ** error);
/* The same from config file @config_path and weights @w (taken), such as
 * a single-file checkpoint's VAE (pp-checkpoint.h). */
PpVaeKl  *pp_vae_kl_load_weights    (const gchar * config_path,
                                     PpWeights * w, PpBackend * be,
                                     PpDType dtype, GError ** error);
/* @image [N, in_channels, H, W] in [-1, 1], H and W multiples of
 * pp_vae_kl_scale_factor → *@latents [N, latent_channels, H/f, W/f]: the
 * mean of the latent distribution (deterministic: diffusers' pipelines
 * sample it), (mean − shift_factor) · scaling_factor.  Inputs are host
 * tensors or tensors on the model's backend; the output is on the input's
 * side.  Taps (host copies): "encoder.conv_in", "encoder.down_blocks.{i}",
 * "encoder.mid_block", "encoder.conv_out", "quant_conv" (when the model has
 * one), then "latents". */
gboolean  pp_vae_kl_encode          (PpVaeKl * m, const PpTensor * image,
                                     PpTensor ** latents, PpTapFunc tap,
                                     gpointer tap_data, GError ** error);
/* @latents → *@image [N, out_channels, h·f, w·f], the decoder's output of
 * latents / scaling_factor + shift_factor, not clamped.  Taps:
 * "post_quant_conv" (when the model has one), "decoder.conv_in",
 * "decoder.mid_block", "decoder.up_blocks.{i}", then "image". */
gboolean  pp_vae_kl_decode          (PpVaeKl * m, const PpTensor * latents,
                                     PpTensor ** image, PpTapFunc tap,
                                     gpointer tap_data, GError ** error);
/* The same into tensors on the model's backend, of the right sizes. */
gboolean  pp_vae_kl_encode_into     (PpVaeKl * m, const PpTensor * image,
                                     PpTensor * latents, GError ** error);
gboolean  pp_vae_kl_decode_into     (PpVaeKl * m, const PpTensor * latents,
                                     PpTensor * image, GError ** error);
/* Adds the model's activation pools (encoder and decoder) to @sum. */
void      pp_vae_kl_pools           (PpVaeKl * m, PpPoolBytes * sum);
guint     pp_vae_kl_latent_channels (PpVaeKl * m);
/* The layout of its activations between each half's conv_in and conv_out
 * (pp_backend_act_layout). */
PpLayout  pp_vae_kl_act_layout      (PpVaeKl * m);
/* Image pixels per latent pixel along each axis (8 for SD's VAE). */
guint     pp_vae_kl_scale_factor    (PpVaeKl * m);
void      pp_vae_kl_free            (PpVaeKl * m);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpVaeKl, pp_vae_kl_free)

G_END_DECLS
