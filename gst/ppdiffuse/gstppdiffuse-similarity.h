/* GStreamer ppdiffuse — the stochastic similarity filter: how alike two
 * frames are, and whether a frame alike the last one sent is skipped.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include <glib.h>

#include "pp-stream.h"

G_BEGIN_DECLS

/* A frame is compared through its thumbnail: the mean R, G and B of each
 * cell of a PP_SIMILARITY_SIZE × PP_SIMILARITY_SIZE grid over the frame
 * (cell (cx, cy) covers columns [cx·W/S, (cx+1)·W/S) and rows
 * [cy·H/S, (cy+1)·H/S), integer division; a frame narrower or lower than
 * S leaves some cells empty, and those are 0), each mean v mapped to
 * v / 127.5 − 1, in [-1, 1], as StreamDiffusion's image tensors are. */
#define PP_SIMILARITY_SIZE 32
#define PP_SIMILARITY_VALUES \
  (PP_SIMILARITY_SIZE * PP_SIMILARITY_SIZE * PP_IMAGE_CHANNELS)

typedef struct
{
  gfloat v[PP_SIMILARITY_VALUES];       /* cell-major: (cy·S + cx)·3 + c */
} PpSimilarityThumb;

/* Fills @thumb from @image, read through its strides and offsets. */
void pp_similarity_thumb (const PpImage * image, PpSimilarityThumb * thumb);

/* Cosine similarity of two thumbnails with each one's channel means taken
 * out (their correlation), in [-1, 1]: exactly 1 for equal thumbnails; 0
 * when only one of them is flat.  Without the means, a small object moving
 * over a still background would look alike from frame to frame: the
 * background dominates a plain cosine. */
gdouble pp_similarity_cosine (const PpSimilarityThumb * a,
    const PpSimilarityThumb * b);

/* StreamDiffusion's rule: max(0, 1 − (1 − similarity) / (1 − threshold)),
 * 0 below the threshold, growing linearly to 1 at similarity 1.  A
 * threshold of 1 or more skips only exact equals (similarity 1); 0 or less
 * skips nothing. */
gdouble pp_similarity_skip_probability (gdouble similarity,
    gdouble threshold);

/* The filter: the thumbnail of the last frame let through (the
 * reference) and the random source of its draws.  Not thread-safe: one
 * thread at a time. */
typedef struct _PpSimilarityFilter PpSimilarityFilter;

PpSimilarityFilter *pp_similarity_filter_new (guint64 seed);
void pp_similarity_filter_free (PpSimilarityFilter * filter);
/* Forgets the reference and restarts the draws from @seed. */
void pp_similarity_filter_reseed (PpSimilarityFilter * filter, guint64 seed);
/* Forgets the reference: the next frame is let through. */
void pp_similarity_filter_forget (PpSimilarityFilter * filter);
/* Whether the filter holds a reference. */
gboolean pp_similarity_filter_has_reference (const PpSimilarityFilter *
    filter);

/* Decides on @image: TRUE to skip it, with the probability above at
 * @threshold (one uniform draw in [0, 1) per frame compared; the frame is
 * skipped when the draw is below the probability).  A frame let through
 * becomes the reference; with no reference the frame is let through
 * without a draw.  @similarity (may be NULL) gets the similarity to the
 * reference, or -1 when there was none.  A @threshold of 0 or less
 * turns the filter off: the frame is let through unseen and the reference
 * forgotten, so the first frame after the filter is turned on again is
 * let through. */
gboolean pp_similarity_filter_skip (PpSimilarityFilter * filter,
    const PpImage * image, gdouble threshold, gdouble * similarity);

G_END_DECLS
