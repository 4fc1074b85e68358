/* ppdiffuse — element types. */
#include "pp-dtype.h"
#include "pp-dtype-math.h"
#include "pp-error.h"

#include <string.h>

gsize
pp_dtype_size (PpDType dtype)
{
  switch (dtype) {
    case PP_DTYPE_F32:
      return 4;
    case PP_DTYPE_F64:
      return 8;
    case PP_DTYPE_U8:
      return 1;
    case PP_DTYPE_F16:
    case PP_DTYPE_BF16:
      return 2;
  }
  return 0;
}

const gchar *
pp_dtype_name (PpDType dtype)
{
  switch (dtype) {
    case PP_DTYPE_F32:
      return "F32";
    case PP_DTYPE_F64:
      return "F64";
    case PP_DTYPE_U8:
      return "U8";
    case PP_DTYPE_F16:
      return "F16";
    case PP_DTYPE_BF16:
      return "BF16";
  }
  return "invalid";
}

gboolean
pp_dtype_is_valid (guint value)
{
  return value >= PP_DTYPE_F32 && value <= PP_DTYPE_BF16;
}

static const struct
{
  const gchar *name;
  PpDType dtype;
} weight_dtypes[] = {
  { "f32", PP_DTYPE_F32 },
  { "f16", PP_DTYPE_F16 },
  { "bf16", PP_DTYPE_BF16 },
};

gboolean
pp_dtype_parse_weights (const gchar * name, PpDType * dtype, GError ** error)
{
  for (guint i = 0; i < G_N_ELEMENTS (weight_dtypes); i++)
    if (g_strcmp0 (name, weight_dtypes[i].name) == 0) {
      *dtype = weight_dtypes[i].dtype;
      return TRUE;
    }
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
      "unknown weight dtype '%s' (one of f32, f16, bf16)", name);
  return FALSE;
}

const gchar *
pp_dtype_weights_name (PpDType dtype)
{
  for (guint i = 0; i < G_N_ELEMENTS (weight_dtypes); i++)
    if (weight_dtypes[i].dtype == dtype)
      return weight_dtypes[i].name;
  return "invalid";
}

void
pp_dtype_round_floats (const float *src, float *dst, gsize n, PpDType dtype)
{
  switch (dtype) {
    case PP_DTYPE_F16:
      for (gsize i = 0; i < n; i++)
        dst[i] = pp_f16_to_f32 (pp_f32_to_f16 (src[i]));
      break;
    case PP_DTYPE_BF16:
      for (gsize i = 0; i < n; i++)
        dst[i] = pp_bf16_to_f32 (pp_f32_to_bf16 (src[i]));
      break;
    default:
      if (dst != src)
        memmove (dst, src, n * sizeof (float));
      break;
  }
}

void
pp_dtype_widen (const guint16 * src, PpDType dtype, float *dst, gsize n)
{
  g_return_if_fail (dtype == PP_DTYPE_F16 || dtype == PP_DTYPE_BF16);

  if (dtype == PP_DTYPE_F16)
    for (gsize i = 0; i < n; i++)
      dst[i] = pp_f16_to_f32 (src[i]);
  else
    for (gsize i = 0; i < n; i++)
      dst[i] = pp_bf16_to_f32 (src[i]);
}

void
pp_dtype_narrow (const float *src, PpDType dtype, guint16 * dst, gsize n)
{
  g_return_if_fail (dtype == PP_DTYPE_F16 || dtype == PP_DTYPE_BF16);

  if (dtype == PP_DTYPE_F16)
    for (gsize i = 0; i < n; i++)
      dst[i] = pp_f32_to_f16 (src[i]);
  else
    for (gsize i = 0; i < n; i++)
      dst[i] = pp_f32_to_bf16 (src[i]);
}
