/* ppdiffuse — image ↔ tensor conversion on rank 0 (the image phases). */
#pragma once

#include "pp-tensor.h"

G_BEGIN_DECLS

#define PP_IMAGE_CHANNELS 3

/* A view of 8-bit interleaved pixels: the R, G and B bytes of pixel (x, y)
 * are at data + y * row_stride + x * pixel_stride + offset[c]. */
typedef struct
{
  guint8 *data;
  gint width;
  gint height;
  gint row_stride;
  gint pixel_stride;
  gint offset[PP_IMAGE_CHANNELS];
} PpImage;

/* Planar F32 [1, 3, H, W] tensor with values 0..255, named @name. */
PpTensor *pp_image_to_tensor   (const PpImage * image, const gchar * name,
                                GError ** error);
/* The same into @tensor, a host F32 tensor of [1, 3, H, W]'s size. */
void      pp_image_to_tensor_into (const PpImage * image, PpTensor * tensor);
/* Writes the tensor back (rounded, clamped to 0..255); the image's other
 * bytes (alpha, padding) are left as they are. */
gboolean  pp_image_from_tensor (PpImage * image, const PpTensor * tensor,
                                GError ** error);
gboolean  pp_image_check_tensor (const PpTensor * tensor, gint width,
                                 gint height, GError ** error);
/* The image's R, G and B bytes as three planes of width × height bytes
 * (@planes, 3 × width × height), and back: what a device turns into the
 * planar tensor itself (pp_bytes_to_floats), a quarter of the floats'
 * bytes over the bus.  pp_image_from_planes leaves the image's other
 * bytes as they are. */
void      pp_image_to_planes   (const PpImage * image, guint8 * planes);
void      pp_image_from_planes (PpImage * image, const guint8 * planes);

G_END_DECLS
