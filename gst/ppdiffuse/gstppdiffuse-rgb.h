/* ppdiffuse — frames of every accepted format seen as RGB images: the RGB
 * family as they are, the YUV formats of cameras and decoders (YUY2,
 * UYVY, NV12, I420) converted by GStreamer's own video converter (the
 * matrix and range of the caps' colorimetry, as videoconvert does). */
#pragma once

#include <gst/video/video.h>

#include "pp-image.h"

G_BEGIN_DECLS

/* The formats the element takes and gives (the output keeps the input's
 * format and layout). */
#define GST_PP_DIFFUSE_FORMATS "{ RGBA, RGBx, BGRx, RGB, YUY2, UYVY, NV12, I420 }"

/* One thread's conversions, for frames of one video info at a time (a
 * new info makes a new converter). */
typedef struct _GstPpDiffuseRgb GstPpDiffuseRgb;

GstPpDiffuseRgb *gst_pp_diffuse_rgb_new  (void);
void             gst_pp_diffuse_rgb_free (GstPpDiffuseRgb * rgb);

/* Whether frames of @info are read and written in place (the RGB
 * family), without a conversion. */
gboolean gst_pp_diffuse_rgb_in_place (const GstVideoInfo * info);

/* @buf, a frame of @info, as an RGB image in @image until
 * gst_pp_diffuse_rgb_end: the frame itself, or its conversion.  FALSE
 * with @error when the buffer holds no such frame or the format has no
 * conversion. */
gboolean gst_pp_diffuse_rgb_read   (GstPpDiffuseRgb * rgb,
                                    const GstVideoInfo * info,
                                    GstBuffer * buf, PpImage * image,
                                    GError ** error);
/* An RGB image in @image to be written, which gst_pp_diffuse_rgb_end
 * puts into @buf (a writable frame of @info): the frame itself, or an
 * image converted into it at the end.  The RGB family keeps the bytes the
 * image does not cover (alpha, padding). */
gboolean gst_pp_diffuse_rgb_write  (GstPpDiffuseRgb * rgb,
                                    const GstVideoInfo * info,
                                    GstBuffer * buf, PpImage * image,
                                    GError ** error);
/* Ends a read or a write (@commit: a write's image goes into its buffer;
 * FALSE drops it). */
void     gst_pp_diffuse_rgb_end    (GstPpDiffuseRgb * rgb, gboolean commit);

/* The RGB view of a mapped frame of the RGB family. */
void gst_pp_diffuse_image_from_frame (GstVideoFrame * frame, PpImage * image);

G_END_DECLS
