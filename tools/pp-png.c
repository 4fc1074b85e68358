/* ppdiffuse-tool — PNG I/O with libpng's simplified API. */
#include "pp-png.h"
#include "pp-error.h"

#include <png.h>
#include <string.h>

#define RGB_BYTES 3

gboolean
pp_png_load (const gchar * path, PpImage * image, GError ** error)
{
  png_image png;

  memset (&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file (&png, path)) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "%s: %s", path,
        png.message);
    return FALSE;
  }
  png.format = PNG_FORMAT_RGB;
  image->width = (gint) png.width;
  image->height = (gint) png.height;
  image->row_stride = (gint) PNG_IMAGE_ROW_STRIDE (png);
  image->pixel_stride = RGB_BYTES;
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
    image->offset[c] = c;
  image->data = g_malloc (PNG_IMAGE_SIZE (png));
  if (!png_image_finish_read (&png, NULL, image->data, 0, NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "%s: %s", path,
        png.message);
    pp_png_clear (image);
    return FALSE;
  }
  return TRUE;
}

gboolean
pp_png_save (const gchar * path, const PpImage * image, GError ** error)
{
  png_image png;
  g_autofree guint8 *rgb = g_malloc ((gsize) image->width * image->height *
      RGB_BYTES);

  /* Repack: the image may be any interleaved layout. */
  for (gint y = 0; y < image->height; y++)
    for (gint x = 0; x < image->width; x++)
      for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
        rgb[((gsize) y * image->width + x) * RGB_BYTES + c] =
            image->data[(gsize) y * image->row_stride +
            (gsize) x * image->pixel_stride + image->offset[c]];
  memset (&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  png.width = (png_uint_32) image->width;
  png.height = (png_uint_32) image->height;
  png.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file (&png, path, 0, rgb, 0, NULL)) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "%s: %s", path,
        png.message);
    return FALSE;
  }
  return TRUE;
}

void
pp_png_clear (PpImage * image)
{
  g_clear_pointer (&image->data, g_free);
}
