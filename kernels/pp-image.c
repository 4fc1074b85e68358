/* ppdiffuse — image ↔ tensor conversion. */
#include "pp-image.h"
#include "pp-error.h"

#include <math.h>

gboolean
pp_image_check_tensor (const PpTensor * t, gint width, gint height,
    GError ** error)
{
  if (t->dtype != PP_DTYPE_F32 || t->ndim != 4 || t->shape[0] != 1
      || t->shape[1] != PP_IMAGE_CHANNELS || t->shape[2] != height
      || t->shape[3] != width) {
    g_autofree gchar *got = pp_tensor_describe (t);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "tensor shape mismatch: expected F32[1,%d,%d,%d], got %s",
        PP_IMAGE_CHANNELS, height, width, got);
    return FALSE;
  }
  return TRUE;
}

PpTensor *
pp_image_to_tensor (const PpImage * img, const gchar * name, GError ** error)
{
  const gint64 shape[4] = { 1, PP_IMAGE_CHANNELS, img->height, img->width };
  PpTensor *t = pp_tensor_new (name, PP_DTYPE_F32, 4, shape, error);

  if (t != NULL)
    pp_image_to_tensor_into (img, t);
  return t;
}

void
pp_image_to_tensor_into (const PpImage * img, PpTensor * t)
{
  gsize plane = (gsize) img->width * img->height;

  g_return_if_fail (t->backend == NULL
      && t->nbytes == PP_IMAGE_CHANNELS * plane * sizeof (gfloat));
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++) {
    gfloat *dst = (gfloat *) t->data + c * plane;
    for (gint y = 0; y < img->height; y++) {
      const guint8 *row = img->data + (gsize) y * img->row_stride
          + img->offset[c];
      for (gint x = 0; x < img->width; x++)
        dst[(gsize) y * img->width + x] = row[(gsize) x * img->pixel_stride];
    }
  }
}

gboolean
pp_image_from_tensor (PpImage * img, const PpTensor * t, GError ** error)
{
  gsize plane = (gsize) img->width * img->height;

  if (!pp_image_check_tensor (t, img->width, img->height, error))
    return FALSE;
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++) {
    const gfloat *src = (const gfloat *) t->data + c * plane;
    for (gint y = 0; y < img->height; y++) {
      guint8 *row = img->data + (gsize) y * img->row_stride + img->offset[c];
      for (gint x = 0; x < img->width; x++) {
        gfloat v = rintf (src[(gsize) y * img->width + x]);
        /* NaN fails both comparisons and lands on 0. */
        row[(gsize) x * img->pixel_stride] =
            (guint8) (v > 255.f ? 255.f : (v >= 0.f ? v : 0.f));
      }
    }
  }
  return TRUE;
}

