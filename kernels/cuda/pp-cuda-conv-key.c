/* ppdiffuse — the CUDA convolution cache's key, and the choice of
 * algorithm. */
#include "pp-cuda-conv-key.h"
#include "pp-cuda-backend.h"
#include "pp-cuda-choice.h"

/* The fields one by one, not the struct's bytes: padding is not hashed. */
static gint
field (const PpCudaConvKey * k, guint i)
{
  const gint fields[] = { k->n, k->cin, k->h, k->w, k->cout, k->kh, k->kw,
    k->stride, k->pad, (gint) k->dtype, k->nhwc
  };

  return fields[i];
}

#define N_FIELDS 11

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

gchar *
pp_cuda_conv_key_describe (const PpCudaConvKey * key)
{
  return g_strdup_printf ("%s %s %d×%d×%d×%d → %d channels, %d×%d kernel, "
      "stride %d, padding %d", key->nhwc ? "channels-last" : "channels-first",
      key->dtype == PP_DTYPE_F16 ? "f16" : key->dtype == PP_DTYPE_BF16
      ? "bf16" : "f32", key->n, key->cin, key->h, key->w, key->cout,
      key->kh, key->kw, key->stride, key->pad);
}

gboolean
pp_cuda_conv_key_equal (gconstpointer a, gconstpointer b)
{
  for (guint i = 0; i < N_FIELDS; i++)
    if (field (a, i) != field (b, i))
      return FALSE;
  return TRUE;
}

gboolean
pp_cuda_conv_algo_parse (const gchar * value, gboolean * timed,
    GError ** error)
{
  static const gchar *const names[] = { "heuristic", "timed", NULL };
  guint index;

  if (!pp_cuda_choice_parse (PP_CUDA_CONV_ALGO_ENV, value, names,
          &index, error))
    return FALSE;
  *timed = index == 1;
  return TRUE;
}

/* PPDIFFUSE_CUDA_CONV_LAYOUT's values, in the order of PpCudaConvLayout. */
static const gchar *const layout_names[] = { "auto", "nchw", "nhwc",
  "padded", NULL
};

const gchar *
pp_cuda_conv_layout_name (PpCudaConvLayout layout)
{
  return layout_names[layout];
}

gboolean
pp_cuda_conv_layout_parse (const gchar * value, PpCudaConvLayout * layout,
    GError ** error)
{
  guint index;

  if (!pp_cuda_choice_parse (PP_CUDA_CONV_LAYOUT_ENV, value, layout_names,
          &index, error))
    return FALSE;
  *layout = (PpCudaConvLayout) index;
  return TRUE;
}

gboolean
pp_cuda_conv_nhwc (PpCudaConvLayout layout, const PpCudaConvKey * key)
{
  return layout != PP_CUDA_CONV_NCHW && key->dtype != PP_DTYPE_F32
      && key->cin % PP_CUDA_CONV_NHWC_CHANNELS == 0
      && key->cout % PP_CUDA_CONV_NHWC_CHANNELS == 0;
}

gboolean
pp_cuda_conv_padded (PpCudaConvLayout layout, const PpCudaConvKey * key)
{
  return (layout == PP_CUDA_CONV_PADDED || layout == PP_CUDA_CONV_AUTO)
      && key->dtype != PP_DTYPE_F32 && !pp_cuda_conv_nhwc (layout, key);
}

gint
pp_cuda_conv_pad_channels (gint channels)
{
  return (channels + PP_CUDA_CONV_NHWC_CHANNELS - 1)
      / PP_CUDA_CONV_NHWC_CHANNELS * PP_CUDA_CONV_NHWC_CHANNELS;
}
