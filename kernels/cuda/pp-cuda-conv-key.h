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
} PpCudaConvKey;

/* For a GHashTable keyed by PpCudaConvKey pointers. */
guint    pp_cuda_conv_key_hash  (gconstpointer key);
gboolean pp_cuda_conv_key_equal (gconstpointer a, gconstpointer b);

/* PPDIFFUSE_CUDA_CONV_ALGO's @value: TRUE in *@timed for "timed" (or NULL
 * or empty), FALSE for "heuristic"; anything else is a PP_ERROR_CONFIG
 * error naming the variable and both choices. */
gboolean pp_cuda_conv_algo_parse (const gchar * value, gboolean * timed,
                                  GError ** error);

G_END_DECLS
