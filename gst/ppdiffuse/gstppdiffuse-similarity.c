/* GStreamer ppdiffuse — the stochastic similarity filter.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

#include "gstppdiffuse-similarity.h"

#include <math.h>
#include <string.h>

/* An 8-bit mean v maps to v / PIXEL_HALF − 1. */
#define PIXEL_HALF 127.5

struct _PpSimilarityFilter
{
  GRand *rand;
  PpSimilarityThumb *reference; /* the last frame let through */
  PpSimilarityThumb *current;   /* scratch for the frame being decided */
  gboolean have_reference;
};

/* The first index of cell @cell of @cells over @length: cells partition
 * [0, length) in order, and cell @cells ends at @length. */
static gint
cell_start (gint cell, gint cells, gint length)
{
  return (gint) ((gint64) cell * length / cells);
}

void
pp_similarity_thumb (const PpImage * image, PpSimilarityThumb * thumb)
{
  const gint s = PP_SIMILARITY_SIZE;

  for (gint cy = 0; cy < s; cy++) {
    const gint y0 = cell_start (cy, s, image->height);
    const gint y1 = cell_start (cy + 1, s, image->height);
    guint64 sums[PP_SIMILARITY_SIZE][PP_IMAGE_CHANNELS] = { {0} };

    for (gint y = y0; y < y1; y++) {
      const guint8 *row = image->data + (gsize) y * image->row_stride;

      for (gint cx = 0; cx < s; cx++) {
        const gint x1 = cell_start (cx + 1, s, image->width);

        for (gint x = cell_start (cx, s, image->width); x < x1; x++) {
          const guint8 *px = row + (gsize) x * image->pixel_stride;

          for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
            sums[cx][c] += px[image->offset[c]];
        }
      }
    }
    for (gint cx = 0; cx < s; cx++) {
      const gint64 n = (gint64) (cell_start (cx + 1, s, image->width)
          - cell_start (cx, s, image->width)) * (y1 - y0);
      gfloat *v = thumb->v + (cy * s + cx) * PP_IMAGE_CHANNELS;

      for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
        v[c] = n == 0 ? 0.0f
            : (gfloat) ((gdouble) sums[cx][c] / ((gdouble) n * PIXEL_HALF)
            - 1.0);
    }
  }
}

/* Each channel's mean over the cells of @t. */
static void
channel_means (const PpSimilarityThumb * t, gdouble mean[PP_IMAGE_CHANNELS])
{
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
    mean[c] = 0;
  for (guint i = 0; i < PP_SIMILARITY_VALUES; i++)
    mean[i % PP_IMAGE_CHANNELS] += t->v[i];
  for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
    mean[c] /= PP_SIMILARITY_VALUES / PP_IMAGE_CHANNELS;
}

gdouble
pp_similarity_cosine (const PpSimilarityThumb * a, const PpSimilarityThumb * b)
{
  gdouble dot = 0, aa = 0, bb = 0, sim;
  gdouble ma[PP_IMAGE_CHANNELS], mb[PP_IMAGE_CHANNELS];

  /* Equal thumbnails (flat ones included) are exactly alike, whatever
   * the rounding of the sums below would say. */
  if (memcmp (a->v, b->v, sizeof a->v) == 0)
    return 1.0;
  /* Without each channel's mean, what the frames share everywhere (a still
   * background, the overall brightness) does not hide what moves. */
  channel_means (a, ma);
  channel_means (b, mb);
  for (guint i = 0; i < PP_SIMILARITY_VALUES; i++) {
    const gdouble x = a->v[i] - ma[i % PP_IMAGE_CHANNELS];
    const gdouble y = b->v[i] - mb[i % PP_IMAGE_CHANNELS];

    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  if (aa == 0 || bb == 0)
    return 0.0;                 /* one flat, the other not */
  sim = dot / sqrt (aa * bb);
  /* Rounding must not take it out of range. */
  return CLAMP (sim, -1.0, 1.0);
}

gdouble
pp_similarity_skip_probability (gdouble similarity, gdouble threshold)
{
  if (threshold <= 0)
    return 0.0;
  if (threshold >= 1)
    return similarity >= 1 ? 1.0 : 0.0;
  return CLAMP (1.0 - (1.0 - similarity) / (1.0 - threshold), 0.0, 1.0);
}

PpSimilarityFilter *
pp_similarity_filter_new (guint64 seed)
{
  PpSimilarityFilter *filter = g_new0 (PpSimilarityFilter, 1);

  filter->reference = g_new0 (PpSimilarityThumb, 1);
  filter->current = g_new0 (PpSimilarityThumb, 1);
  pp_similarity_filter_reseed (filter, seed);
  return filter;
}

void
pp_similarity_filter_free (PpSimilarityFilter * filter)
{
  if (filter == NULL)
    return;
  g_clear_pointer (&filter->rand, g_rand_free);
  g_free (filter->reference);
  g_free (filter->current);
  g_free (filter);
}

void
pp_similarity_filter_reseed (PpSimilarityFilter * filter, guint64 seed)
{
  /* All 64 bits of the seed count. */
  const guint32 words[] = { (guint32) seed, (guint32) (seed >> 32) };

  g_clear_pointer (&filter->rand, g_rand_free);
  filter->rand = g_rand_new_with_seed_array (words, G_N_ELEMENTS (words));
  filter->have_reference = FALSE;
}

void
pp_similarity_filter_forget (PpSimilarityFilter * filter)
{
  filter->have_reference = FALSE;
}

gboolean
pp_similarity_filter_has_reference (const PpSimilarityFilter * filter)
{
  return filter->have_reference;
}

gboolean
pp_similarity_filter_skip (PpSimilarityFilter * filter, const PpImage * image,
    gdouble threshold, gdouble * similarity)
{
  gdouble sim = -1.0;
  gboolean skip = FALSE;

  if (threshold <= 0) {
    filter->have_reference = FALSE;
    if (similarity != NULL)
      *similarity = sim;
    return FALSE;
  }
  pp_similarity_thumb (image, filter->current);
  if (filter->have_reference) {
    sim = pp_similarity_cosine (filter->reference, filter->current);
    skip = g_rand_double (filter->rand)
        < pp_similarity_skip_probability (sim, threshold);
  }
  if (!skip) {
    PpSimilarityThumb *t = filter->reference;

    filter->reference = filter->current;
    filter->current = t;
    filter->have_reference = TRUE;
  }
  if (similarity != NULL)
    *similarity = sim;
  return skip;
}
