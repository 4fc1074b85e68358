/* ppdiffuse — the VAE a pipeline encodes and decodes frames with, of the
 * class its config.json names: AutoencoderTiny (TAESD) or AutoencoderKL
 * (the released SD VAE).  Either way latents are what the UNet takes. */
#pragma once

#include "pp-backend.h"
#include "pp-tap.h"
#include "pp-weights.h"

G_BEGIN_DECLS

typedef struct _PpVae PpVae;

/* The classes pp_vae_load runs, for messages. */
#define PP_VAE_CLASSES "AutoencoderTiny (TAESD) and AutoencoderKL"

/* Loads @component_dir (config.json and its safetensors) as the class its
 * config.json's "_class_name" names; another class, or none, is an error
 * naming it and the classes supported. */
PpVae       *pp_vae_load            (const gchar * component_dir,
                                     PpBackend * be, PpDType dtype,
                                     GError ** error);
/* A single-file checkpoint's VAE (always an AutoencoderKL) from config
 * file @config_path and weights @w (taken; pp-checkpoint.h). */
PpVae       *pp_vae_load_checkpoint (const gchar * config_path,
                                     PpWeights * w, PpBackend * be,
                                     PpDType dtype, GError ** error);
/* The diffusers class name of the loaded model. */
const gchar *pp_vae_class           (PpVae * v);
/* As pp_taesd_encode / pp_vae_kl_encode and their _decode and _into
 * forms (pp-taesd.h, pp-vae-kl.h): images in [-1, 1], latents as the UNet
 * takes them. */
gboolean     pp_vae_encode          (PpVae * v, const PpTensor * image,
                                     PpTensor ** latents, PpTapFunc tap,
                                     gpointer tap_data, GError ** error);
gboolean     pp_vae_decode          (PpVae * v, const PpTensor * latents,
                                     PpTensor ** image, PpTapFunc tap,
                                     gpointer tap_data, GError ** error);
gboolean     pp_vae_encode_into     (PpVae * v, const PpTensor * image,
                                     PpTensor * latents, GError ** error);
gboolean     pp_vae_decode_into     (PpVae * v, const PpTensor * latents,
                                     PpTensor * image, GError ** error);
/* Adds its activation pools to @sum (pp_pool_count). */
void         pp_vae_pools           (PpVae * v, PpPoolBytes * sum);
guint        pp_vae_latent_channels (PpVae * v);
guint        pp_vae_scale_factor    (PpVae * v);
/* The layout of its inner activations (pp_backend_act_layout). */
PpLayout     pp_vae_act_layout      (PpVae * v);
void         pp_vae_free            (PpVae * v);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpVae, pp_vae_free)

G_END_DECLS
