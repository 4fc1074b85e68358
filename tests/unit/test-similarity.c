/* Unit tests for the similarity filter's arithmetic
 * (gst/ppdiffuse/gstppdiffuse-similarity.c): thumbnails read through any
 * layout the element accepts, the cosine against a plain double-precision
 * reference written out here, StreamDiffusion's skip rule, and the
 * filter's draws. */
#include "gstppdiffuse-similarity.h"

#include <math.h>
#include <string.h>

#define S PP_SIMILARITY_SIZE
/* float thumbnails against the double reference */
#define REF_TOLERANCE 1e-6
/* A seeded run of draws at skip probability 1/2. */
#define DRAWS 400
#define DRAW_FRACTION_MIN 0.4
#define DRAW_FRACTION_MAX 0.6

/* ---- pictures ----------------------------------------------------------- */

typedef guint8 (*Picture) (gint x, gint y, gint c, gint w, gint h);

static guint8
texture (gint x, gint y, gint c, gint w, gint h)
{
  return (guint8) ((x * 7 + y * 13 + c * 61 + (x * y) % 23) % 256);
}

static guint8
inverted_texture (gint x, gint y, gint c, gint w, gint h)
{
  return 255 - texture (x, y, c, w, h);
}

/* The same texture with one corner block changed. */
static guint8
texture_with_patch (gint x, gint y, gint c, gint w, gint h)
{
  return x < w / 8 && y < h / 8 ? 255 : texture (x, y, c, w, h);
}

/* Left half white, right half black; and top half white, bottom black:
 * ±1 everywhere in thumbnail space, orthogonal (on even sizes). */
static guint8
halves_left (gint x, gint y, gint c, gint w, gint h)
{
  return x < w / 2 ? 255 : 0;
}

static guint8
halves_top (gint x, gint y, gint c, gint w, gint h)
{
  return y < h / 2 ? 255 : 0;
}

/* A layout the element accepts: bytes per pixel and where R, G, B are. */
typedef struct
{
  const gchar *name;
  gint pixel_stride;
  gint offset[PP_IMAGE_CHANNELS];
} Layout;

static const Layout layouts[] = {
  {"RGBA", 4, {0, 1, 2}},
  {"RGBx", 4, {0, 1, 2}},
  {"BGRx", 4, {2, 1, 0}},
  {"RGB", 3, {0, 1, 2}},
};

/* @picture at @w x @h in @layout, rows padded by @row_pad bytes and the
 * first pixel @lead bytes into the memory; padding and the fourth byte
 * are filled with junk that must not count.  Free image.data - @lead. */
static PpImage
make_image (Picture picture, gint w, gint h, const Layout * layout,
    gint row_pad, gint lead)
{
  const gint stride = w * layout->pixel_stride + row_pad;
  guint8 *mem = g_malloc (lead + (gsize) stride * h);
  PpImage image = { mem + lead, w, h, stride, layout->pixel_stride,
    {layout->offset[0], layout->offset[1], layout->offset[2]}
  };

  memset (mem, 0xA5, lead + (gsize) stride * h);
  for (gint y = 0; y < h; y++)
    for (gint x = 0; x < w; x++)
      for (gint c = 0; c < PP_IMAGE_CHANNELS; c++)
        image.data[y * stride + x * layout->pixel_stride + layout->offset[c]]
            = picture (x, y, c, w, h);
  return image;
}

static void
free_image (PpImage * image, gint lead)
{
  g_free (image->data - lead);
}

/* ---- the reference: plain doubles, straight from the picture ----------- */

/* The thumbnail as documented: cell (cx, cy) spans [cx·W/S, (cx+1)·W/S)
 * (integer division), the mean of each channel there mapped by
 * v / 127.5 − 1; an empty cell is 0. */
static void
reference_thumb (Picture picture, gint w, gint h, gdouble * out)
{
  for (gint cy = 0; cy < S; cy++)
    for (gint cx = 0; cx < S; cx++)
      for (gint c = 0; c < PP_IMAGE_CHANNELS; c++) {
        gdouble sum = 0;
        gint n = 0;

        for (gint y = cy * h / S; y < (cy + 1) * h / S; y++)
          for (gint x = cx * w / S; x < (cx + 1) * w / S; x++) {
            sum += picture (x, y, c, w, h);
            n++;
          }
        out[(cy * S + cx) * PP_IMAGE_CHANNELS + c] =
            n ? sum / n / 127.5 - 1.0 : 0.0;
      }
}

static gdouble
reference_cosine (Picture a, Picture b, gint w, gint h)
{
  gdouble *ta = g_new (gdouble, PP_SIMILARITY_VALUES);
  gdouble *tb = g_new (gdouble, PP_SIMILARITY_VALUES);
  gdouble dot = 0, aa = 0, bb = 0;

  gdouble ma[3] = { 0 }, mb[3] = { 0 };

  reference_thumb (a, w, h, ta);
  reference_thumb (b, w, h, tb);
  for (gint i = 0; i < PP_SIMILARITY_VALUES; i++) {
    ma[i % 3] += ta[i] / (S * S);
    mb[i % 3] += tb[i] / (S * S);
  }
  for (gint i = 0; i < PP_SIMILARITY_VALUES; i++) {
    dot += (ta[i] - ma[i % 3]) * (tb[i] - mb[i % 3]);
    aa += (ta[i] - ma[i % 3]) * (ta[i] - ma[i % 3]);
    bb += (tb[i] - mb[i % 3]) * (tb[i] - mb[i % 3]);
  }
  g_free (ta);
  g_free (tb);
  return dot / (sqrt (aa) * sqrt (bb));
}

/* The element's cosine of @a and @b laid out in @layout. */
static gdouble
cosine_in (Picture a, Picture b, gint w, gint h, const Layout * layout,
    gint row_pad, gint lead)
{
  PpImage ia = make_image (a, w, h, layout, row_pad, lead);
  PpImage ib = make_image (b, w, h, layout, row_pad, lead);
  PpSimilarityThumb *ta = g_new (PpSimilarityThumb, 1);
  PpSimilarityThumb *tb = g_new (PpSimilarityThumb, 1);
  gdouble sim;

  pp_similarity_thumb (&ia, ta);
  pp_similarity_thumb (&ib, tb);
  sim = pp_similarity_cosine (ta, tb);
  g_free (ta);
  g_free (tb);
  free_image (&ia, lead);
  free_image (&ib, lead);
  return sim;
}

/* ---- the tests ---------------------------------------------------------- */

/* Sizes: larger than the grid with cells of unequal sizes, a multiple of
 * it, and smaller than it (empty cells) with an odd width. */
static const gint sizes[][2] = { {640, 480}, {64, 64}, {29, 17}, {100, 37} };

static void
test_identical_is_one (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    g_assert_cmpfloat (cosine_in (texture, texture, sizes[i][0], sizes[i][1],
            &layouts[0], 0, 0), ==, 1.0);
}

static void
test_inverted_is_minus_one (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++) {
    gdouble sim = cosine_in (texture, inverted_texture, sizes[i][0],
        sizes[i][1], &layouts[0], 0, 0);

    g_assert_cmpfloat_with_epsilon (sim, -1.0, REF_TOLERANCE);
    g_assert_cmpfloat (pp_similarity_skip_probability (sim, 0.5), ==, 0.0);
  }
}

static void
test_orthogonal_is_zero (void)
{
  gdouble sim = cosine_in (halves_left, halves_top, 64, 48, &layouts[0], 0,
      0);

  g_assert_cmpfloat_with_epsilon (sim, 0.0, REF_TOLERANCE);
  g_assert_cmpfloat_with_epsilon (sim, reference_cosine (halves_left,
          halves_top, 64, 48), REF_TOLERANCE);
}

/* Every layout, with and without row padding and a leading offset, gives
 * the very same thumbnail, and the cosine the reference gives. */
static void
test_layouts_agree_with_reference (void)
{
  const gint pads[][2] = { {0, 0}, {13, 0}, {5, 7} };   /* row pad, lead */

  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++) {
    const gint w = sizes[s][0], h = sizes[s][1];
    const gdouble ref = reference_cosine (texture, texture_with_patch, w, h);
    PpSimilarityThumb *first = NULL;

    g_assert_cmpfloat (ref, <, 1.0);
    for (guint l = 0; l < G_N_ELEMENTS (layouts); l++)
      for (guint p = 0; p < G_N_ELEMENTS (pads); p++) {
        PpImage image = make_image (texture, w, h, &layouts[l], pads[p][0],
            pads[p][1]);
        PpSimilarityThumb *thumb = g_new (PpSimilarityThumb, 1);

        pp_similarity_thumb (&image, thumb);
        free_image (&image, pads[p][1]);
        if (first == NULL)
          first = thumb;
        else {
          g_assert_cmpmem (thumb->v, sizeof thumb->v, first->v,
              sizeof first->v);
          g_free (thumb);
        }
        g_assert_cmpfloat_with_epsilon (cosine_in (texture,
                texture_with_patch, w, h, &layouts[l], pads[p][0],
                pads[p][1]), ref, REF_TOLERANCE);
      }
    g_free (first);
  }
}

/* The thumbnail itself is the documented one. */
static void
test_thumb_matches_reference (void)
{
  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++) {
    const gint w = sizes[s][0], h = sizes[s][1];
    gdouble *ref = g_new (gdouble, PP_SIMILARITY_VALUES);
    PpSimilarityThumb *thumb = g_new (PpSimilarityThumb, 1);
    PpImage image = make_image (texture, w, h, &layouts[3], 3, 1);

    reference_thumb (texture, w, h, ref);
    pp_similarity_thumb (&image, thumb);
    for (gint i = 0; i < PP_SIMILARITY_VALUES; i++)
      g_assert_cmpfloat_with_epsilon (thumb->v[i], ref[i], REF_TOLERANCE);
    free_image (&image, 1);
    g_free (thumb);
    g_free (ref);
  }
}

static void
test_skip_probability_rule (void)
{
  /* below and at the threshold: never; at 1: always; linear between */
  g_assert_cmpfloat (pp_similarity_skip_probability (0.5, 0.98), ==, 0.0);
  g_assert_cmpfloat_with_epsilon (pp_similarity_skip_probability (0.98,
          0.98), 0.0, 1e-12);
  g_assert_cmpfloat_with_epsilon (pp_similarity_skip_probability (0.99,
          0.98), 0.5, 1e-9);
  g_assert_cmpfloat (pp_similarity_skip_probability (1.0, 0.98), ==, 1.0);
  g_assert_cmpfloat (pp_similarity_skip_probability (-1.0, 0.98), ==, 0.0);
  /* off, and the edge of the range */
  g_assert_cmpfloat (pp_similarity_skip_probability (1.0, 0.0), ==, 0.0);
  g_assert_cmpfloat (pp_similarity_skip_probability (1.0, 1.0), ==, 1.0);
  g_assert_cmpfloat (pp_similarity_skip_probability (0.999999, 1.0), ==,
      0.0);
}

/* Decides on @picture at 64x48 RGBA. */
static gboolean
filter_skip (PpSimilarityFilter * filter, Picture picture, gdouble threshold,
    gdouble * sim)
{
  PpImage image = make_image (picture, 64, 48, &layouts[0], 0, 0);
  gboolean skip = pp_similarity_filter_skip (filter, &image, threshold, sim);

  free_image (&image, 0);
  return skip;
}

static void
test_filter_reference (void)
{
  PpSimilarityFilter *filter = pp_similarity_filter_new (1);
  gdouble sim;

  /* No reference: let through, no similarity. */
  g_assert_false (filter_skip (filter, texture, 0.98, &sim));
  g_assert_cmpfloat (sim, ==, -1.0);
  g_assert_true (pp_similarity_filter_has_reference (filter));
  /* The same again: similarity 1, always skipped. */
  for (guint i = 0; i < 10; i++) {
    g_assert_true (filter_skip (filter, texture, 0.98, &sim));
    g_assert_cmpfloat (sim, ==, 1.0);
  }
  /* Far below the threshold: let through, and becomes the reference. */
  g_assert_false (filter_skip (filter, inverted_texture, 0.98, &sim));
  g_assert_cmpfloat (sim, <, 0.0);
  g_assert_true (filter_skip (filter, inverted_texture, 0.98, &sim));
  /* Forgotten: let through. */
  pp_similarity_filter_forget (filter);
  g_assert_false (filter_skip (filter, inverted_texture, 0.98, &sim));
  /* Threshold 0: off; the reference is forgotten, so the first frame
   * after it comes on again is let through. */
  g_assert_false (filter_skip (filter, inverted_texture, 0.0, NULL));
  g_assert_false (pp_similarity_filter_has_reference (filter));
  g_assert_false (filter_skip (filter, inverted_texture, 0.98, NULL));
  g_assert_true (filter_skip (filter, inverted_texture, 0.98, NULL));
  pp_similarity_filter_free (filter);
}

/* The decisions of a run at skip probability 1/2: about half skipped. */
static GString *
draw_run (guint64 seed, gdouble threshold)
{
  PpSimilarityFilter *filter = pp_similarity_filter_new (seed);
  GString *run = g_string_new (NULL);

  for (guint i = 0; i < DRAWS; i++) {
    pp_similarity_filter_forget (filter);
    g_assert_false (filter_skip (filter, texture, threshold, NULL));
    g_string_append_c (run, filter_skip (filter, texture_with_patch,
            threshold, NULL) ? 's' : '.');
  }
  pp_similarity_filter_free (filter);
  return run;
}

static void
test_filter_draws_seeded (void)
{
  const gdouble sim = reference_cosine (texture, texture_with_patch, 64, 48);
  /* the threshold at which this pair skips half the time */
  const gdouble threshold = 2 * sim - 1;
  GString *a = draw_run (7, threshold), *b = draw_run (7, threshold);
  GString *c = draw_run (8, threshold);
  guint skipped = 0;

  g_assert_cmpfloat (threshold, >, 0.0);
  g_assert_cmpfloat_with_epsilon (pp_similarity_skip_probability (sim,
          threshold), 0.5, 1e-9);
  for (guint i = 0; i < a->len; i++)
    skipped += a->str[i] == 's';
  g_assert_cmpfloat ((gdouble) skipped / DRAWS, >, DRAW_FRACTION_MIN);
  g_assert_cmpfloat ((gdouble) skipped / DRAWS, <, DRAW_FRACTION_MAX);
  g_assert_cmpstr (a->str, ==, b->str);
  g_assert_cmpstr (a->str, !=, c->str);
  g_string_free (a, TRUE);
  g_string_free (b, TRUE);
  g_string_free (c, TRUE);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/similarity/cosine/identical", test_identical_is_one);
  g_test_add_func ("/similarity/cosine/inverted", test_inverted_is_minus_one);
  g_test_add_func ("/similarity/cosine/orthogonal", test_orthogonal_is_zero);
  g_test_add_func ("/similarity/thumb/layouts",
      test_layouts_agree_with_reference);
  g_test_add_func ("/similarity/thumb/reference", test_thumb_matches_reference);
  g_test_add_func ("/similarity/skip-probability", test_skip_probability_rule);
  g_test_add_func ("/similarity/filter/reference", test_filter_reference);
  g_test_add_func ("/similarity/filter/seeded", test_filter_draws_seeded);
  return g_test_run ();
}
