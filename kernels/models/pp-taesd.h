/* ppdiffuse — TAESD, the tiny autoencoder (diffusers AutoencoderTiny), in
 * float32: images in [-1, 1] ⇄ latents that the UNet uses directly
 * (scaling factor 1). */
#pragma once

#include "pp-backend.h"
#include "pp-tap.h"
#include "pp-weights.h"

G_BEGIN_DECLS

typedef struct _PpTaesd PpTaesd;

/* Reads @config_path (config.json) and binds every weight by its diffusers
 * key from @weights, which must outlive the model, uploading it to @be. A
 * missing key or a wrong shape is an error naming both. */
PpTaesd  *pp_taesd_new              (const gchar * config_path,
                                     PpWeights * weights, PpBackend * be,
                                     GError ** error);
/* config.json and the safetensors of @component_dir, the weights stored as
 * @dtype on @be (0: the backend's default); a key the model does not use is
 * an error too. */
PpTaesd  *pp_taesd_load             (const gchar * component_dir,
                                     PpBackend * be, PpDType dtype,
                                     GError ** error);
/* @image [N, in_channels, H, W] in [-1, 1], H and W multiples of
 * pp_taesd_scale_factor → *@latents [N, latent_channels, H/f, W/f].
 * Inputs are host tensors or tensors on the model's backend; the output
 * is on the input's side.  Taps get host copies.
 * Taps: "encoder.layers.{i}" for every layer, then "latents". */
gboolean  pp_taesd_encode           (PpTaesd * m, const PpTensor * image,
                                     PpTensor ** latents, PpTapFunc tap,
                                     gpointer tap_data, GError ** error);
/* @latents [N, latent_channels, h, w] → *@image [N, out_channels, h·f, w·f]
 * in [-1, 1]. Taps: "decoder.layers.{i}" for every layer, then "image". */
gboolean  pp_taesd_decode           (PpTaesd * m, const PpTensor * latents,
                                     PpTensor ** image, PpTapFunc tap,
                                     gpointer tap_data, GError ** error);
/* The same into tensors on the model's backend, of the right sizes: once
 * the model has run at a size, these allocate nothing. */
gboolean  pp_taesd_encode_into      (PpTaesd * m, const PpTensor * image,
                                     PpTensor * latents, GError ** error);
gboolean  pp_taesd_decode_into      (PpTaesd * m, const PpTensor * latents,
                                     PpTensor * image, GError ** error);
/* Adds the model's activation pools (encoder and decoder) to @sum. */
void      pp_taesd_pools            (PpTaesd * m, PpPoolBytes * sum);
guint     pp_taesd_latent_channels  (PpTaesd * m);
/* Image pixels per latent pixel along each axis (8 for real TAESD). */
guint     pp_taesd_scale_factor     (PpTaesd * m);
/* The layout of its activations between a half's first and last
 * convolution (pp_backend_act_layout). */
PpLayout  pp_taesd_act_layout       (PpTaesd * m);
/* The dtype its activations are kept in (pp_backend_act_dtype). */
PpDType   pp_taesd_act_dtype        (PpTaesd * m);
void      pp_taesd_free             (PpTaesd * m);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpTaesd, pp_taesd_free)

G_END_DECLS
