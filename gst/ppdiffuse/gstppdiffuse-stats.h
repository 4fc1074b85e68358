/* GStreamer ppdiffuse — latency percentiles: plain GLib, no GStreamer, so
 * that it can be tested on its own (tests/unit/test-latency-tracker.c).
 *
 * A PpLatencyHistogram is a log-bucketed histogram of non-negative
 * integers (nanoseconds here), the layout of an HDR histogram: values
 * below 2^PP_LATENCY_SUB_BITS each have a bucket of their own (exact);
 * above, every power of two [2^e, 2^(e+1)) is cut into 2^PP_LATENCY_SUB_BITS
 * equal buckets.  A bucket is at most 2^-PP_LATENCY_SUB_BITS of its lower
 * bound wide, and a percentile is answered with the middle of its bucket
 * (kept within the exact minimum and maximum), so it is off by at most
 * PP_LATENCY_RELATIVE_ERROR of the exact value, whatever the number of
 * samples or their spread.  Memory is fixed (PP_LATENCY_BUCKETS counters,
 * about 30 KiB), recording is O(1) and a percentile O(buckets); unlike a
 * fixed-size reservoir, no sample is ever forgotten, so the tail
 * percentiles since start stay right on streams of any length.
 *
 * Percentiles are nearest-rank: p of n samples is the ceil(p/100 × n)-th
 * smallest (the smallest for p = 0).  Not thread-safe: callers lock. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_LATENCY_SUB_BITS 6
#define PP_LATENCY_SUB_BUCKETS (1u << PP_LATENCY_SUB_BITS)
/* The exact buckets, then 2^SUB_BITS per power of two up to 2^63. */
#define PP_LATENCY_BUCKETS \
  (PP_LATENCY_SUB_BUCKETS + (64 - PP_LATENCY_SUB_BITS) * PP_LATENCY_SUB_BUCKETS)
/* Bound of |answer - exact| / exact of every percentile: half a bucket. */
#define PP_LATENCY_RELATIVE_ERROR (1.0 / (2 * PP_LATENCY_SUB_BUCKETS))

typedef struct
{
  guint64 count;
  guint64 min;
  guint64 max;
  guint64 buckets[PP_LATENCY_BUCKETS];
} PpLatencyHistogram;

void     pp_latency_histogram_reset      (PpLatencyHistogram * h);
void     pp_latency_histogram_record     (PpLatencyHistogram * h,
                                          guint64 value);
/* The @percent (0–100) percentile; 0 when empty. */
guint64  pp_latency_histogram_percentile (const PpLatencyHistogram * h,
                                          gdouble percent);

/* Submit→return times over the current interval and since start. */
typedef struct
{
  PpLatencyHistogram interval;
  PpLatencyHistogram total;
} PpLatencyTracker;

/* The percentiles the element reports, of one histogram. */
typedef struct
{
  guint64 p50, p95, p99, max;
} PpLatencySummary;

PpLatencyTracker *pp_latency_tracker_new    (void);
void              pp_latency_tracker_free   (PpLatencyTracker * t);
/* Forgets everything (a new run). */
void              pp_latency_tracker_reset  (PpLatencyTracker * t);
void              pp_latency_tracker_record (PpLatencyTracker * t,
                                             guint64 value);
/* The interval's summary; the next interval starts empty. */
void              pp_latency_tracker_end_interval (PpLatencyTracker * t,
                                                   PpLatencySummary * out);
void              pp_latency_tracker_total  (const PpLatencyTracker * t,
                                             PpLatencySummary * out);

G_END_DECLS
