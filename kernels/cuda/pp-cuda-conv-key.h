/* ppdiffuse — the key of the CUDA convolution's per-shape cache: every
 * parameter that changes cuDNN's choice of algorithm or its descriptors;
 * and how that choice is made.  Plain C, no CUDA: the host tests check
 * it. */
#pragma once

#include <glib.h>

#include "pp-tensor.h"

G_BEGIN_DECLS

typedef struct
{
  gint n, cin, h, w, cout, kh, kw, stride, pad;
  PpDType dtype;                /* of the weights: the convolution's type */
  gboolean nhwc;                /* activations and filter channels-last */
} PpCudaConvKey;

/* The layout a 16-bit convolution runs in, as PPDIFFUSE_CUDA_CONV_LAYOUT
 * names it. */
typedef enum
{
  PP_CUDA_CONV_AUTO,            /* "auto", the default: the backend's
                                 * choice (today as padded) */
  PP_CUDA_CONV_NCHW,            /* "nchw": the ops' own layout */
  PP_CUDA_CONV_NHWC,            /* "nhwc": wherever the channels allow,
                                 * the others channels first */
  PP_CUDA_CONV_PADDED,          /* "padded": as nhwc, and the others with
                                 * their channels padded with zeros */
} PpCudaConvLayout;

/* Channels a channels-last 16-bit convolution wants in multiples of
 * (tensor cores' 16-byte rows). */
#define PP_CUDA_CONV_NHWC_CHANNELS 8

/* For a GHashTable keyed by PpCudaConvKey pointers. */
guint    pp_cuda_conv_key_hash  (gconstpointer key);
gboolean pp_cuda_conv_key_equal (gconstpointer a, gconstpointer b);
/* @key's convolution in words ("channels-last f16 1×320×64×64 → 320
 * channels, 3×3 kernel, stride 1, padding 1"), for the logs. */
gchar   *pp_cuda_conv_key_describe (const PpCudaConvKey * key);

/* PPDIFFUSE_CUDA_CONV_ALGO's @value: FALSE in *@timed for "heuristic"
 * (or NULL or empty), TRUE for "timed"; anything else is a
 * PP_ERROR_CONFIG error naming the variable and both choices. */
gboolean pp_cuda_conv_algo_parse (const gchar * value, gboolean * timed,
                                  GError ** error);
/* PPDIFFUSE_CUDA_CONV_LAYOUT's @value (NULL or empty: auto); FALSE with a
 * PP_ERROR_CONFIG error naming the variable and the choices. */
gboolean pp_cuda_conv_layout_parse (const gchar * value,
                                    PpCudaConvLayout * layout,
                                    GError ** error);
/* @layout's name, as PPDIFFUSE_CUDA_CONV_LAYOUT names it. */
const gchar *pp_cuda_conv_layout_name (PpCudaConvLayout layout);
/* Whether the convolution of @key (its nhwc field aside) runs
 * channels-last under @layout: under auto and nhwc, every one with 16-bit
 * weights and both channel counts multiples of
 * PP_CUDA_CONV_NHWC_CHANNELS.  (Auto once kept the layers whose filter
 * outweighs their input, a UNet's 8² and 16² ones, channels first: on an
 * H200 an SD-Turbo step took 9.8 ms that way and 7.1 ms with every layer
 * channels-last, docs/perf.md.) */
gboolean pp_cuda_conv_nhwc (PpCudaConvLayout layout,
                            const PpCudaConvKey * key);
/* Whether the convolution of @key (its nhwc field aside) runs
 * channels-last with its channels padded with zeros to multiples of
 * PP_CUDA_CONV_NHWC_CHANNELS: under padded and auto (on an H200 TAESD's
 * encode and decode took 12 % less time so, docs/perf.md), every one
 * with 16-bit weights
 * that pp_cuda_conv_nhwc leaves channels first (a model's first and last
 * convolutions: an image's 3 channels, a latent's 4). */
gboolean pp_cuda_conv_padded (PpCudaConvLayout layout,
                              const PpCudaConvKey * key);
/* @channels rounded up to a multiple of PP_CUDA_CONV_NHWC_CHANNELS. */
gint     pp_cuda_conv_pad_channels (gint channels);

G_END_DECLS
