/* GStreamer ppdiffuse — latency percentiles (gstppdiffuse-stats.h). */
#include "gstppdiffuse-stats.h"

#include <math.h>
#include <string.h>

static guint
bucket_of (guint64 value)
{
  guint e;

  if (value < PP_LATENCY_SUB_BUCKETS)
    return (guint) value;
  e = 63 - (guint) __builtin_clzll (value);     /* e >= SUB_BITS */
  return PP_LATENCY_SUB_BUCKETS + (e - PP_LATENCY_SUB_BITS)
      * PP_LATENCY_SUB_BUCKETS + (guint) ((value >> (e - PP_LATENCY_SUB_BITS))
      - PP_LATENCY_SUB_BUCKETS);
}

/* The middle of bucket @b: its only value for an exact bucket. */
static guint64
bucket_middle (guint b)
{
  guint e, sub;
  guint64 width;

  if (b < PP_LATENCY_SUB_BUCKETS)
    return b;
  e = (b - PP_LATENCY_SUB_BUCKETS) / PP_LATENCY_SUB_BUCKETS
      + PP_LATENCY_SUB_BITS;
  sub = (b - PP_LATENCY_SUB_BUCKETS) % PP_LATENCY_SUB_BUCKETS;
  width = G_GUINT64_CONSTANT (1) << (e - PP_LATENCY_SUB_BITS);
  return ((guint64) (PP_LATENCY_SUB_BUCKETS + sub) << (e -
          PP_LATENCY_SUB_BITS)) + width / 2;
}

void
pp_latency_histogram_reset (PpLatencyHistogram * h)
{
  memset (h, 0, sizeof *h);
}

void
pp_latency_histogram_record (PpLatencyHistogram * h, guint64 value)
{
  if (h->count == 0 || value < h->min)
    h->min = value;
  if (h->count == 0 || value > h->max)
    h->max = value;
  h->count++;
  h->buckets[bucket_of (value)]++;
}

guint64
pp_latency_histogram_percentile (const PpLatencyHistogram * h,
    gdouble percent)
{
  guint64 rank, seen = 0;

  if (h->count == 0)
    return 0;
  rank = (guint64) ceil (CLAMP (percent, 0.0, 100.0) / 100.0 * h->count);
  rank = CLAMP (rank, 1, h->count);
  if (rank == h->count)
    return h->max;
  for (guint b = 0; b < PP_LATENCY_BUCKETS; b++) {
    seen += h->buckets[b];
    if (seen >= rank)
      return CLAMP (bucket_middle (b), h->min, h->max);
  }
  g_assert_not_reached ();
  return h->max;
}

PpLatencyTracker *
pp_latency_tracker_new (void)
{
  return g_new0 (PpLatencyTracker, 1);
}

void
pp_latency_tracker_free (PpLatencyTracker * t)
{
  g_free (t);
}

void
pp_latency_tracker_reset (PpLatencyTracker * t)
{
  pp_latency_histogram_reset (&t->interval);
  pp_latency_histogram_reset (&t->total);
}

void
pp_latency_tracker_record (PpLatencyTracker * t, guint64 value)
{
  pp_latency_histogram_record (&t->interval, value);
  pp_latency_histogram_record (&t->total, value);
}

static void
summarise (const PpLatencyHistogram * h, PpLatencySummary * out)
{
  out->p50 = pp_latency_histogram_percentile (h, 50);
  out->p95 = pp_latency_histogram_percentile (h, 95);
  out->p99 = pp_latency_histogram_percentile (h, 99);
  out->max = h->max;
}

void
pp_latency_tracker_end_interval (PpLatencyTracker * t, PpLatencySummary * out)
{
  summarise (&t->interval, out);
  pp_latency_histogram_reset (&t->interval);
}

void
pp_latency_tracker_total (const PpLatencyTracker * t, PpLatencySummary * out)
{
  summarise (&t->total, out);
}
