/* ppdiffuse — frames of every accepted format seen as RGB images (see
 * gstppdiffuse-rgb.h). */
#include "gstppdiffuse-rgb.h"
#include "pp-error.h"

struct _GstPpDiffuseRgb
{
  GstVideoInfo info;            /* the frames' */
  gboolean have_info;
  GstVideoInfo rgb_info;        /* RGB of their size */
  GstVideoConverter *to_rgb, *from_rgb;
  GstBuffer *scratch;           /* an RGB frame */
  /* The frame or scratch mapped between a read or write and its end. */
  GstVideoFrame frame, scratch_frame;
  gboolean frame_mapped, scratch_mapped, writing;
};

GstPpDiffuseRgb *
gst_pp_diffuse_rgb_new (void)
{
  return g_new0 (GstPpDiffuseRgb, 1);
}

static void
forget_info (GstPpDiffuseRgb * rgb)
{
  g_clear_pointer (&rgb->to_rgb, gst_video_converter_free);
  g_clear_pointer (&rgb->from_rgb, gst_video_converter_free);
  gst_clear_buffer (&rgb->scratch);
  rgb->have_info = FALSE;
}

void
gst_pp_diffuse_rgb_free (GstPpDiffuseRgb * rgb)
{
  if (rgb == NULL)
    return;
  gst_pp_diffuse_rgb_end (rgb, FALSE);
  forget_info (rgb);
  g_free (rgb);
}

gboolean
gst_pp_diffuse_rgb_in_place (const GstVideoInfo * info)
{
  return GST_VIDEO_INFO_IS_RGB (info) && GST_VIDEO_INFO_N_PLANES (info) == 1;
}

void
gst_pp_diffuse_image_from_frame (GstVideoFrame * frame, PpImage * image)
{
  image->data = GST_VIDEO_FRAME_PLANE_DATA (frame, 0);
  image->width = GST_VIDEO_FRAME_WIDTH (frame);
  image->height = GST_VIDEO_FRAME_HEIGHT (frame);
  image->row_stride = GST_VIDEO_FRAME_PLANE_STRIDE (frame, 0);
  image->pixel_stride = GST_VIDEO_FRAME_COMP_PSTRIDE (frame, 0);
  image->offset[0] = GST_VIDEO_FRAME_COMP_POFFSET (frame, GST_VIDEO_COMP_R);
  image->offset[1] = GST_VIDEO_FRAME_COMP_POFFSET (frame, GST_VIDEO_COMP_G);
  image->offset[2] = GST_VIDEO_FRAME_COMP_POFFSET (frame, GST_VIDEO_COMP_B);
}

/* The converters and scratch frame for frames of @info. */
static gboolean
use_info (GstPpDiffuseRgb * rgb, const GstVideoInfo * info)
{
  if (rgb->have_info && gst_video_info_is_equal (&rgb->info, info))
    return TRUE;
  forget_info (rgb);
  rgb->info = *info;
  gst_video_info_set_format (&rgb->rgb_info, GST_VIDEO_FORMAT_RGB,
      GST_VIDEO_INFO_WIDTH (info), GST_VIDEO_INFO_HEIGHT (info));
  /* A converter changes the format alone. */
  GST_VIDEO_INFO_FPS_N (&rgb->rgb_info) = GST_VIDEO_INFO_FPS_N (info);
  GST_VIDEO_INFO_FPS_D (&rgb->rgb_info) = GST_VIDEO_INFO_FPS_D (info);
  GST_VIDEO_INFO_PAR_N (&rgb->rgb_info) = GST_VIDEO_INFO_PAR_N (info);
  GST_VIDEO_INFO_PAR_D (&rgb->rgb_info) = GST_VIDEO_INFO_PAR_D (info);
  GST_VIDEO_INFO_INTERLACE_MODE (&rgb->rgb_info) =
      GST_VIDEO_INFO_INTERLACE_MODE (info);
  /* The converter's defaults are videoconvert's: the caps' matrix and
   * range, linear chroma resampling. */
  rgb->to_rgb = gst_video_converter_new ((GstVideoInfo *) info,
      &rgb->rgb_info, NULL);
  rgb->from_rgb = gst_video_converter_new (&rgb->rgb_info,
      (GstVideoInfo *) info, NULL);
  rgb->scratch = gst_buffer_new_allocate (NULL,
      GST_VIDEO_INFO_SIZE (&rgb->rgb_info), NULL);
  if (rgb->to_rgb == NULL || rgb->from_rgb == NULL || rgb->scratch == NULL) {
    forget_info (rgb);
    return FALSE;
  }
  rgb->have_info = TRUE;
  return TRUE;
}

/* Maps @buf (a frame of @info) for @flags, and the scratch RGB frame
 * behind it unless the frame is RGB itself: @image is the RGB view either
 * way, until gst_pp_diffuse_rgb_end. */
static gboolean
begin (GstPpDiffuseRgb * rgb, const GstVideoInfo * info, GstBuffer * buf,
    GstMapFlags flags, PpImage * image, GError ** error)
{
  g_return_val_if_fail (!rgb->frame_mapped && !rgb->scratch_mapped, FALSE);
  if (!gst_video_frame_map (&rgb->frame, (GstVideoInfo *) info, buf, flags)) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "the buffer does not hold "
        "a %dx%d %s frame", GST_VIDEO_INFO_WIDTH (info),
        GST_VIDEO_INFO_HEIGHT (info), GST_VIDEO_INFO_NAME (info));
    return FALSE;
  }
  rgb->frame_mapped = TRUE;
  rgb->writing = (flags & GST_MAP_WRITE) != 0;
  if (gst_pp_diffuse_rgb_in_place (info)) {
    gst_pp_diffuse_image_from_frame (&rgb->frame, image);
    return TRUE;
  }
  if (!use_info (rgb, info) || !gst_video_frame_map (&rgb->scratch_frame,
          &rgb->rgb_info, rgb->scratch, GST_MAP_READWRITE)) {
    gst_pp_diffuse_rgb_end (rgb, FALSE);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "no conversion between "
        "%dx%d %s frames and RGB", GST_VIDEO_INFO_WIDTH (info),
        GST_VIDEO_INFO_HEIGHT (info), GST_VIDEO_INFO_NAME (info));
    return FALSE;
  }
  rgb->scratch_mapped = TRUE;
  gst_pp_diffuse_image_from_frame (&rgb->scratch_frame, image);
  return TRUE;
}

gboolean
gst_pp_diffuse_rgb_read (GstPpDiffuseRgb * rgb, const GstVideoInfo * info,
    GstBuffer * buf, PpImage * image, GError ** error)
{
  if (!begin (rgb, info, buf, GST_MAP_READ, image, error))
    return FALSE;
  if (rgb->scratch_mapped)
    gst_video_converter_frame (rgb->to_rgb, &rgb->frame, &rgb->scratch_frame);
  return TRUE;
}

gboolean
gst_pp_diffuse_rgb_write (GstPpDiffuseRgb * rgb, const GstVideoInfo * info,
    GstBuffer * buf, PpImage * image, GError ** error)
{
  return begin (rgb, info, buf, GST_MAP_WRITE, image, error);
}

void
gst_pp_diffuse_rgb_end (GstPpDiffuseRgb * rgb, gboolean commit)
{
  if (rgb->scratch_mapped) {
    if (rgb->writing && commit && rgb->frame_mapped)
      gst_video_converter_frame (rgb->from_rgb, &rgb->scratch_frame,
          &rgb->frame);
    gst_video_frame_unmap (&rgb->scratch_frame);
    rgb->scratch_mapped = FALSE;
  }
  if (rgb->frame_mapped) {
    gst_video_frame_unmap (&rgb->frame);
    rgb->frame_mapped = FALSE;
  }
}
