/* ppdiffuse — image ↔ tensor conversion. */
/* Its float loops run on every frame on rank 0: vectorised. */
#include "pp-cpu-vectorize.h"

#include "pp-image.h"
#include "pp-error.h"
#include "pp-ops-math.h"

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

/* Whether @img's pixels are 3 or 4 bytes with R, G and B at distinct
 * offsets within them (every format GStreamer hands this): then whole
 * pixels are read and written in loops with constant offsets, which gcc
 * vectorises; *@other is the 4-byte pixel's byte that is not R, G or B
 * (-1 for 3 bytes). */
static gboolean
whole_pixels (const PpImage * img, gint * other)
{
  const gint ps = img->pixel_stride;

  if (ps != 3 && ps != 4)
    return FALSE;
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++) {
    if (img->offset[c] < 0 || img->offset[c] >= ps)
      return FALSE;
    for (gint k = 0; k < c; k++)
      if (img->offset[k] == img->offset[c])
        return FALSE;
  }
  *other = ps == 4 ? 6 - img->offset[0] - img->offset[1] - img->offset[2]
      : -1;
  return TRUE;
}

/* @n floats to bytes (pp_math_to_byte). */
PP_CPU_VECTOR_CLONES static void
to_bytes (const gfloat * s, guint8 * b, gint n)
{
  for (gint x = 0; x < n; x++)
    b[x] = pp_math_to_byte (s[x]);
}

/* Pixels a row is converted in at a time: the bytes of a span's planes
 * fit in L1 next to its floats. */
#define SPAN 512

/* @n pixels of @ps bytes (3 or 4) at @d into @ps byte planes: byte k of
 * pixel x to planes[k][x]. */
PP_CPU_VECTOR_CLONES static void
deinterleave (const guint8 * d, guint8 * const *planes, gint ps, gint n)
{
  guint8 *p0 = planes[0], *p1 = planes[1], *p2 = planes[2];

  if (ps == 3) {
    for (gint x = 0; x < n; x++) {
      p0[x] = d[3 * x];
      p1[x] = d[3 * x + 1];
      p2[x] = d[3 * x + 2];
    }
  } else {
    guint8 *p3 = planes[3];

    for (gint x = 0; x < n; x++) {
      p0[x] = d[4 * x];
      p1[x] = d[4 * x + 1];
      p2[x] = d[4 * x + 2];
      p3[x] = d[4 * x + 3];
    }
  }
}

/* The reverse: byte k of pixel x from planes[k][x]. */
PP_CPU_VECTOR_CLONES static void
interleave (guint8 * d, const guint8 * const *planes, gint ps, gint n)
{
  const guint8 *p0 = planes[0], *p1 = planes[1], *p2 = planes[2];

  if (ps == 3) {
    for (gint x = 0; x < n; x++) {
      d[3 * x] = p0[x];
      d[3 * x + 1] = p1[x];
      d[3 * x + 2] = p2[x];
    }
  } else {
    const guint8 *p3 = planes[3];

    for (gint x = 0; x < n; x++) {
      d[4 * x] = p0[x];
      d[4 * x + 1] = p1[x];
      d[4 * x + 2] = p2[x];
      d[4 * x + 3] = p3[x];
    }
  }
}

/* The R, G and B bytes of @n pixels at @d into @out[c], n bytes each. */
static void
read_span (const PpImage * img, gboolean whole, const guint8 * d, gint n,
    guint8 * const out[PP_IMAGE_CHANNELS])
{
  const gint ps = img->pixel_stride;

  if (whole) {
    guint8 spare[SPAN];
    guint8 *by_offset[4] = { spare, spare, spare, spare };

    for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
      by_offset[img->offset[c]] = out[c];
    deinterleave (d, by_offset, ps, n);
    return;
  }
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
    for (gint x = 0; x < n; x++)
      out[c][x] = d[(gsize) x * ps + img->offset[c]];
}

/* @n pixels at @d from the R, G and B bytes @in[c]: a 4-byte pixel's
 * other byte (alpha, padding) is read first and written back as it
 * was. */
static void
write_span (const PpImage * img, gboolean whole, gint other, guint8 * d,
    gint n, const guint8 * const in[PP_IMAGE_CHANNELS])
{
  const gint ps = img->pixel_stride;

  if (whole) {
    guint8 kept[SPAN];
    const guint8 *by_offset[4];

    for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
      by_offset[img->offset[c]] = in[c];
    if (other >= 0) {
      for (gint x = 0; x < n; x++)
        kept[x] = d[4 * x + other];
      by_offset[other] = kept;
    }
    interleave (d, by_offset, ps, n);
    return;
  }
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
    for (gint x = 0; x < n; x++)
      d[(gsize) x * ps + img->offset[c]] = in[c][x];
}

/* Each conversion goes row by row, a span of pixels at a time: the
 * pixels to and from byte planes (read_span, write_span), and the planes
 * to and from floats in contiguous loops (vectorised). */

void
pp_image_to_tensor_into (const PpImage * img, PpTensor * t)
{
  const gsize plane = (gsize) img->width * img->height;
  gint other;
  const gboolean whole = whole_pixels (img, &other);

  g_return_if_fail (t->backend == NULL
      && t->nbytes == PP_IMAGE_CHANNELS * plane * sizeof (gfloat));
  for (gint y = 0; y < img->height; y++) {
    const guint8 *row = img->data + (gsize) y * img->row_stride;
    gfloat *dst = (gfloat *) t->data + (gsize) y * img->width;

    for (gint x0 = 0; x0 < img->width; x0 += SPAN) {
      const gint n = MIN (SPAN, img->width - x0);
      guint8 bytes[PP_IMAGE_CHANNELS][SPAN];
      guint8 *const out[PP_IMAGE_CHANNELS] = { bytes[0], bytes[1], bytes[2] };

      read_span (img, whole, row + (gsize) x0 * img->pixel_stride, n, out);
      for (gint c = 0; c < PP_IMAGE_CHANNELS; c++) {
        gfloat *o = dst + c * plane + x0;

        for (gint x = 0; x < n; x++)
          o[x] = bytes[c][x];
      }
    }
  }
}

gboolean
pp_image_from_tensor (PpImage * img, const PpTensor * t, GError ** error)
{
  const gsize plane = (gsize) img->width * img->height;
  gint other;
  const gboolean whole = whole_pixels (img, &other);

  if (!pp_image_check_tensor (t, img->width, img->height, error))
    return FALSE;
  for (gint y = 0; y < img->height; y++) {
    guint8 *row = img->data + (gsize) y * img->row_stride;
    const gfloat *src = (const gfloat *) t->data + (gsize) y * img->width;

    for (gint x0 = 0; x0 < img->width; x0 += SPAN) {
      const gint n = MIN (SPAN, img->width - x0);
      guint8 bytes[PP_IMAGE_CHANNELS][SPAN];
      const guint8 *const in[PP_IMAGE_CHANNELS] = { bytes[0], bytes[1],
        bytes[2]
      };

      for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
        to_bytes (src + c * plane + x0, bytes[c], n);
      write_span (img, whole, other, row + (gsize) x0 * img->pixel_stride, n,
          in);
    }
  }
  return TRUE;
}

void
pp_image_to_planes (const PpImage * img, guint8 * planes)
{
  const gsize plane = (gsize) img->width * img->height;
  gint other;
  const gboolean whole = whole_pixels (img, &other);

  for (gint y = 0; y < img->height; y++) {
    const guint8 *row = img->data + (gsize) y * img->row_stride;
    guint8 *dst = planes + (gsize) y * img->width;

    for (gint x0 = 0; x0 < img->width; x0 += SPAN) {
      guint8 *const out[PP_IMAGE_CHANNELS] = { dst + x0, dst + plane + x0,
        dst + 2 * plane + x0
      };

      read_span (img, whole, row + (gsize) x0 * img->pixel_stride,
          MIN (SPAN, img->width - x0), out);
    }
  }
}

void
pp_image_from_planes (PpImage * img, const guint8 * planes)
{
  const gsize plane = (gsize) img->width * img->height;
  gint other;
  const gboolean whole = whole_pixels (img, &other);

  for (gint y = 0; y < img->height; y++) {
    guint8 *row = img->data + (gsize) y * img->row_stride;
    const guint8 *src = planes + (gsize) y * img->width;

    for (gint x0 = 0; x0 < img->width; x0 += SPAN) {
      const guint8 *const in[PP_IMAGE_CHANNELS] = { src + x0,
        src + plane + x0, src + 2 * plane + x0
      };

      write_span (img, whole, other, row + (gsize) x0 * img->pixel_stride,
          MIN (SPAN, img->width - x0), in);
    }
  }
}
