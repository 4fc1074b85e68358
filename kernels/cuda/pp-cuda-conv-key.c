/* ppdiffuse — the CUDA convolution cache's key. */
#include "pp-cuda-conv-key.h"

/* The fields one by one, not the struct's bytes: padding is not hashed. */
static gint
field (const PpCudaConvKey * k, guint i)
{
  const gint fields[] = { k->n, k->cin, k->h, k->w, k->cout, k->kh, k->kw,
    k->stride, k->pad, (gint) k->dtype
  };

  return fields[i];
}

#define N_FIELDS 10

guint
pp_cuda_conv_key_hash (gconstpointer key)
{
  /* FNV-1a over the fields' values. */
  guint32 h = 2166136261u;

  for (guint i = 0; i < N_FIELDS; i++) {
    h ^= (guint32) field (key, i);
    h *= 16777619u;
  }
  return h;
}

gboolean
pp_cuda_conv_key_equal (gconstpointer a, gconstpointer b)
{
  for (guint i = 0; i < N_FIELDS; i++)
    if (field (a, i) != field (b, i))
      return FALSE;
  return TRUE;
}
