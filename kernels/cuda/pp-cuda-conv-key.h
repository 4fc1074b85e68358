/* ppdiffuse — the key of the CUDA convolution's per-shape cache: every
 * parameter that changes cuDNN's choice of algorithm or its descriptors.
 * Plain C, no CUDA: the host tests check it. */
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

G_END_DECLS
