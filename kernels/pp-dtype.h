/* ppdiffuse — element types: of tensors, of the views ops read, and of
 * weights as a backend stores them. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum
{
  PP_DTYPE_F32 = 1,
  PP_DTYPE_F64 = 2,
  PP_DTYPE_U8 = 3,
  /* 16-bit storage of weights on a backend (IEEE half, bfloat16). */
  PP_DTYPE_F16 = 4,
  PP_DTYPE_BF16 = 5,
} PpDType;

gsize        pp_dtype_size     (PpDType dtype);
const gchar *pp_dtype_name     (PpDType dtype);
gboolean     pp_dtype_is_valid (guint value);
/* The weight storage dtypes by their property names: "f32", "f16",
 * "bf16"; FALSE with an error naming them otherwise. */
gboolean     pp_dtype_parse_weights (const gchar * name, PpDType * dtype,
                                     GError ** error);
/* "f32", "f16", "bf16" (the names pp_dtype_parse_weights reads). */
const gchar *pp_dtype_weights_name (PpDType dtype);
/* dst[i] = src[i] rounded to @dtype's precision (round to nearest even)
 * and widened back; a plain copy for F32.  dst may equal src. */
void         pp_dtype_round_floats (const float * src, float * dst, gsize n,
                                    PpDType dtype);
/* @n values stored as 16-bit @dtype (F16 or BF16) at @src, widened into
 * @dst; and @n floats rounded to @dtype (round to nearest even) into
 * 16-bit @dst. */
void         pp_dtype_widen        (const guint16 * src, PpDType dtype,
                                    float * dst, gsize n);
void         pp_dtype_narrow       (const float * src, PpDType dtype,
                                    guint16 * dst, gsize n);

G_END_DECLS
