/* The CUDA backend's uploads, on the host: the staging plan's element and
 * byte arithmetic and its conversions, for every supported dtype pair and
 * counts around a staging buffer's size (0, 1, chunk − 1, chunk, chunk + 1,
 * several chunks), replayed into host memory the way pp-cuda-backend.c
 * copies them to the device: a staging buffer that still holds an earlier
 * chunk's bytes must never leak into the result. */
#include "pp-cuda-staging.h"
#include "pp-dtype-math.h"
#include "pp-error.h"

#include <string.h>

/* Small buffers give many chunks of a few elements. */
#define SMALL_STAGING 64
#define STALE_BYTE 0xab

typedef struct
{
  PpDType src, dst;
} Pair;

static const Pair pairs[] = {
  {PP_DTYPE_U8, PP_DTYPE_U8},
  {PP_DTYPE_F32, PP_DTYPE_F32},
  {PP_DTYPE_F32, PP_DTYPE_F16},
  {PP_DTYPE_F32, PP_DTYPE_BF16},
  {PP_DTYPE_F16, PP_DTYPE_F16},
  {PP_DTYPE_BF16, PP_DTYPE_BF16},
};

static gsize
size_of (PpDType dtype)
{
  return pp_dtype_size (dtype);
}

/* @count elements of @dtype, no two neighbours equal, none zero. */
static gpointer
make_source (PpDType dtype, gsize count)
{
  guint8 *buf = g_malloc (MAX (count * size_of (dtype), 1));

  for (gsize i = 0; i < count; i++) {
    switch (dtype) {
      case PP_DTYPE_F32:{
        const float v = (float) ((i % 977) + 1) * 0.37f - 11.0f
            + (float) (i / 977) * 1e-3f;

        memcpy (buf + i * 4, &v, 4);
        break;
      }
      case PP_DTYPE_F16:
      case PP_DTYPE_BF16:{
        const guint16 v = (guint16) (0x3c00 + i % 4093);

        memcpy (buf + i * 2, &v, 2);
        break;
      }
      default:
        buf[i] = (guint8) (i % 251 + 1);
        break;
    }
  }
  return buf;
}

/* What the device must hold: each element converted alone. */
static gpointer
expected (const Pair * p, gconstpointer src, gsize count)
{
  guint8 *out = g_malloc (MAX (count * size_of (p->dst), 1));
  const float *f = src;
  guint16 *h = (guint16 *) out;

  if (p->src == p->dst)
    memcpy (out, src, count * size_of (p->dst));
  else
    for (gsize i = 0; i < count; i++)
      h[i] = p->dst == PP_DTYPE_F16 ? pp_f32_to_f16 (f[i])
          : pp_f32_to_bf16 (f[i]);
  return out;
}

/* Replays an upload into host memory: every chunk staged into one of two
 * buffers that start out (and stay) dirty, then copied out. */
static void
check_upload (const Pair * p, gsize count, gsize staging_bytes)
{
  PpStagingPlan plan;
  GError *error = NULL;
  g_autofree gpointer src = make_source (p->src, count);
  g_autofree gpointer want = expected (p, src, count);
  g_autofree guint8 *device = g_malloc (count * size_of (p->dst) + 1);
  g_autofree guint8 *staging0 = g_malloc (staging_bytes);
  g_autofree guint8 *staging1 = g_malloc (staging_bytes);
  guint8 *staging[2] = { staging0, staging1 };
  gsize chunks, covered = 0;

  memset (staging[0], STALE_BYTE, staging_bytes);
  memset (staging[1], STALE_BYTE, staging_bytes);
  memset (device, 0, count * size_of (p->dst) + 1);
  g_assert_true (pp_staging_plan_init (&plan, count, p->src, p->dst,
          staging_bytes, &error));
  g_assert_no_error (error);
  chunks = pp_staging_n_chunks (&plan);
  g_assert_cmpuint (chunks, ==, (count + plan.per_chunk - 1)
      / plan.per_chunk);
  for (gsize i = 0; i < chunks; i++) {
    const PpStagingChunk c = pp_staging_chunk (&plan, i);

    g_assert_cmpuint (c.first, ==, covered);
    g_assert_cmpuint (c.n, >, 0);
    g_assert_cmpuint (c.dst_bytes, <=, staging_bytes);
    g_assert_cmpuint (c.dst_bytes, ==, c.n * size_of (p->dst));
    g_assert_cmpuint (c.src_offset, ==, c.first * size_of (p->src));
    g_assert_cmpuint (c.dst_offset, ==, c.first * size_of (p->dst));
    pp_staging_fill (&plan, &c, staging[i % 2], src);
    memcpy (device + c.dst_offset, staging[i % 2], c.dst_bytes);
    covered += c.n;
  }
  g_assert_cmpuint (covered, ==, count);
  if (memcmp (device, want, count * size_of (p->dst)) != 0) {
    gsize at = 0;

    while (device[at] == ((guint8 *) want)[at])
      at++;
    g_error ("%s → %s, %" G_GSIZE_FORMAT " elements through %" G_GSIZE_FORMAT
        "-byte buffers: byte %" G_GSIZE_FORMAT " is 0x%02x, expected 0x%02x",
        pp_dtype_name (p->src), pp_dtype_name (p->dst), count,
        staging_bytes, at, device[at], ((guint8 *) want)[at]);
  }
  /* Nothing past the end was written. */
  g_assert_cmpuint (device[count * size_of (p->dst)], ==, 0);
}

/* f32 narrowed to f16 by pp_staging_convert (eight at a time with the
 * CPU's conversion where it has one) against pp_f32_to_f16, bit for bit:
 * a stride through every f32 bit pattern, and for every exponent and
 * sign the mantissas around each rounding boundary (the 13 dropped bits
 * just under, at and just over half, with the kept bit odd and even),
 * the largest values that round to f16's largest or to infinity,
 * infinities, quiet and signalling NaNs with payloads, zeros and f32
 * subnormals; in runs of every length from 1 to 17, so that both the
 * vector part and its tail convert each value. */
static void
test_f16_bits (void)
{
  static const guint32 low[] = { 0x0000, 0x0001, 0x0fff, 0x1000, 0x1001,
    0x1fff, 0x0800, 0x17ff, 0x1800
  };
  GArray *bits = g_array_new (FALSE, FALSE, sizeof (guint32));
  gsize n, checked = 0;
  float *src;
  guint16 *got;

  for (guint64 b = 0; b < ((guint64) 1 << 32); b += 4093) {
    const guint32 v = (guint32) b;

    g_array_append_val (bits, v);
  }
  for (guint32 sign = 0; sign < 2; sign++)
    for (guint32 exp = 0; exp < 256; exp++)
      for (guint32 high = 0; high < 4; high++)
        for (guint i = 0; i < G_N_ELEMENTS (low); i++) {
          const guint32 mant_high = high == 0 ? 0 : high == 1 ? 0x2000
              : high == 2 ? 0x7fe000 : 0x3fe000;
          const guint32 v = sign << 31 | exp << 23 | mant_high | low[i];

          g_array_append_val (bits, v);
        }
  n = bits->len;
  src = g_new (float, n);
  got = g_new (guint16, n + 1);
  memcpy (src, bits->data, n * sizeof (float));
  for (gsize run = 1; run <= 17; run++)
    for (gsize at = 0; at < n; at += run) {
      const gsize len = MIN (run, n - at);

      got[at + len] = 0x5a5a;
      pp_staging_convert (got + at, PP_DTYPE_F16, src + at, PP_DTYPE_F32,
          len);
      g_assert_cmpuint (got[at + len], ==, 0x5a5a);
      for (gsize i = at; i < at + len; i++) {
        const guint16 want = pp_f32_to_f16 (src[i]);

        if (got[i] != want)
          g_error ("f32 0x%08x narrowed to f16 0x%04x, expected 0x%04x",
              g_array_index (bits, guint32, i), got[i], want);
        checked++;
      }
      if (run > 1 && at > 64 * 1024)
        break;                  /* the other runs on the first values */
    }
  g_test_message ("%" G_GSIZE_FORMAT " conversions checked", checked);
  g_free (src);
  g_free (got);
  g_array_unref (bits);
}

static void
test_counts_around_a_chunk (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (pairs); i++) {
    const gsize chunk = SMALL_STAGING / size_of (pairs[i].dst);
    const gsize counts[] = { 0, 1, chunk - 1, chunk, chunk + 1, 2 * chunk,
      5 * chunk + 3
    };

    for (guint k = 0; k < G_N_ELEMENTS (counts); k++)
      check_upload (&pairs[i], counts[k], SMALL_STAGING);
  }
}

/* A staging buffer that is not a multiple of the element size: chunks are
 * still whole elements. */
static void
test_odd_buffer (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (pairs); i++)
    check_upload (&pairs[i], 1000, 30);
}

/* Chunks large enough to be narrowed on several threads. */
static void
test_large_chunks (void)
{
  const gsize staging = (gsize) 4 << 20;

  for (guint i = 0; i < G_N_ELEMENTS (pairs); i++)
    check_upload (&pairs[i], 3 * staging / size_of (pairs[i].dst) + 7,
        staging);
}

static void
test_refusals (void)
{
  PpStagingPlan plan;
  GError *error = NULL;

  /* Widening and 8-bit conversions are no upload's job. */
  g_assert_false (pp_staging_plan_init (&plan, 4, PP_DTYPE_F16,
          PP_DTYPE_F32, SMALL_STAGING, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_assert_nonnull (strstr (error->message, "f16"));
  g_assert_nonnull (strstr (error->message, "f32"));
  g_clear_error (&error);
  g_assert_false (pp_staging_plan_init (&plan, 4, PP_DTYPE_U8,
          PP_DTYPE_F16, SMALL_STAGING, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_clear_error (&error);
  /* A buffer too small for one element. */
  g_assert_false (pp_staging_plan_init (&plan, 4, PP_DTYPE_F32,
          PP_DTYPE_F32, 3, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  g_clear_error (&error);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cuda-staging/counts-around-a-chunk",
      test_counts_around_a_chunk);
  g_test_add_func ("/cuda-staging/odd-buffer", test_odd_buffer);
  g_test_add_func ("/cuda-staging/large-chunks", test_large_chunks);
  g_test_add_func ("/cuda-staging/refusals", test_refusals);
  g_test_add_func ("/cuda-staging/f16-bits", test_f16_bits);
  return g_test_run ();
}
