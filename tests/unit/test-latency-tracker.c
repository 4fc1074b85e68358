/* Unit tests for the latency percentiles (gst/ppdiffuse/gstppdiffuse-stats.h):
 * every percentile the histogram gives is within PP_LATENCY_RELATIVE_ERROR
 * of the exact nearest-rank percentile of the sorted samples, on several
 * distributions and sizes, with values on both sides of the exact/log
 * bucket boundary (PP_LATENCY_SUB_BUCKETS). */
#include "gstppdiffuse-stats.h"

#include <math.h>

static const gdouble percents[] = { 0, 1, 25, 50, 90, 95, 99, 99.9, 100 };
static const guint sizes[] = { 1, 2, 3, 10, 63, 64, 65, 1000, 100000 };

typedef guint64 (*Draw) (GRand * rand);

static gint
cmp_u64 (gconstpointer a, gconstpointer b)
{
  const guint64 x = *(const guint64 *) a, y = *(const guint64 *) b;

  return x < y ? -1 : x > y;
}

/* Nearest rank of the sorted samples. */
static guint64
exact_percentile (const guint64 * sorted, guint n, gdouble percent)
{
  guint64 rank = (guint64) ceil (percent / 100.0 * n);

  return sorted[CLAMP (rank, 1, n) - 1];
}

/* Below the boundary: every value has a bucket of its own. */
static guint64
draw_small (GRand * rand)
{
  return g_rand_int_range (rand, 0, PP_LATENCY_SUB_BUCKETS);
}

/* Across it. */
static guint64
draw_around (GRand * rand)
{
  return g_rand_int_range (rand, 0, 4 * PP_LATENCY_SUB_BUCKETS);
}

/* Frame latencies: 20 to 80 ms, uniform. */
static guint64
draw_uniform_ms (GRand * rand)
{
  return (guint64) g_rand_double_range (rand, 20e6, 80e6);
}

/* A long tail: log-uniform from 1 µs to 100 s. */
static guint64
draw_log_uniform (GRand * rand)
{
  return (guint64) pow (10, g_rand_double_range (rand, 3, 11));
}

/* Mostly steady with rare stalls (what a p99 is for). */
static guint64
draw_bimodal (GRand * rand)
{
  return g_rand_int_range (rand, 0, 100) == 0
      ? (guint64) g_rand_double_range (rand, 1e9, 3e9)
      : (guint64) g_rand_double_range (rand, 40e6, 41e6);
}

/* One value repeated. */
static guint64
draw_constant (GRand * rand)
{
  return 123456789;
}

static void
check_distribution (Draw draw)
{
  GRand *rand = g_rand_new_with_seed (42);

  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++) {
    const guint n = sizes[s];
    guint64 *values = g_new (guint64, n);
    PpLatencyHistogram *h = g_new (PpLatencyHistogram, 1);

    pp_latency_histogram_reset (h);
    for (guint i = 0; i < n; i++) {
      values[i] = draw (rand);
      pp_latency_histogram_record (h, values[i]);
    }
    qsort (values, n, sizeof *values, cmp_u64);
    g_assert_cmpuint (h->count, ==, n);
    g_assert_cmpuint (h->min, ==, values[0]);
    g_assert_cmpuint (h->max, ==, values[n - 1]);
    for (guint p = 0; p < G_N_ELEMENTS (percents); p++) {
      const guint64 exact = exact_percentile (values, n, percents[p]);
      const guint64 got = pp_latency_histogram_percentile (h, percents[p]);
      const gdouble error = fabs ((gdouble) got - (gdouble) exact);

      if (exact < PP_LATENCY_SUB_BUCKETS)
        g_assert_cmpuint (got, ==, exact);
      else if (error > PP_LATENCY_RELATIVE_ERROR * exact)
        g_error ("n %u p%g: %" G_GUINT64_FORMAT " for %" G_GUINT64_FORMAT
            ", off by %g, more than %g", n, percents[p], got, exact,
            error / exact, PP_LATENCY_RELATIVE_ERROR);
    }
    g_free (h);
    g_free (values);
  }
  g_rand_free (rand);
}

static void
test_small (void)
{
  check_distribution (draw_small);
}

static void
test_around_boundary (void)
{
  check_distribution (draw_around);
}

static void
test_uniform_ms (void)
{
  check_distribution (draw_uniform_ms);
}

static void
test_log_uniform (void)
{
  check_distribution (draw_log_uniform);
}

static void
test_bimodal (void)
{
  check_distribution (draw_bimodal);
}

static void
test_constant (void)
{
  check_distribution (draw_constant);
}

/* The extremes of the range land in buckets and come back. */
static void
test_extremes (void)
{
  PpLatencyHistogram *h = g_new (PpLatencyHistogram, 1);

  pp_latency_histogram_reset (h);
  g_assert_cmpuint (pp_latency_histogram_percentile (h, 95), ==, 0);
  pp_latency_histogram_record (h, G_MAXUINT64);
  pp_latency_histogram_record (h, 0);
  g_assert_cmpuint (pp_latency_histogram_percentile (h, 50), ==, 0);
  g_assert_cmpuint (pp_latency_histogram_percentile (h, 100), ==,
      G_MAXUINT64);
  g_free (h);
}

/* The interval starts empty after each end; the total keeps everything. */
static void
test_tracker_intervals (void)
{
  PpLatencyTracker *t = pp_latency_tracker_new ();
  PpLatencySummary s;

  for (guint64 v = 1; v <= 100; v++)
    pp_latency_tracker_record (t, v * 1000000);
  pp_latency_tracker_end_interval (t, &s);
  g_assert_cmpuint (s.max, ==, 100000000);
  g_assert_cmpfloat (fabs ((gdouble) s.p50 - 50e6), <=,
      PP_LATENCY_RELATIVE_ERROR * 50e6);
  g_assert_cmpfloat (fabs ((gdouble) s.p95 - 95e6), <=,
      PP_LATENCY_RELATIVE_ERROR * 95e6);
  g_assert_cmpfloat (fabs ((gdouble) s.p99 - 99e6), <=,
      PP_LATENCY_RELATIVE_ERROR * 99e6);

  pp_latency_tracker_end_interval (t, &s);
  g_assert_cmpuint (s.p50, ==, 0);
  g_assert_cmpuint (s.max, ==, 0);

  pp_latency_tracker_record (t, 7);
  pp_latency_tracker_end_interval (t, &s);
  g_assert_cmpuint (s.p50, ==, 7);
  g_assert_cmpuint (s.p99, ==, 7);
  g_assert_cmpuint (s.max, ==, 7);

  pp_latency_tracker_total (t, &s);
  g_assert_cmpuint (s.max, ==, 100000000);
  g_assert_cmpfloat (fabs ((gdouble) s.p50 - 50e6), <=,
      PP_LATENCY_RELATIVE_ERROR * 50e6);

  pp_latency_tracker_reset (t);
  pp_latency_tracker_total (t, &s);
  g_assert_cmpuint (s.p95, ==, 0);
  g_assert_cmpuint (s.max, ==, 0);
  pp_latency_tracker_free (t);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/latency/small", test_small);
  g_test_add_func ("/latency/around-boundary", test_around_boundary);
  g_test_add_func ("/latency/uniform-ms", test_uniform_ms);
  g_test_add_func ("/latency/log-uniform", test_log_uniform);
  g_test_add_func ("/latency/bimodal", test_bimodal);
  g_test_add_func ("/latency/constant", test_constant);
  g_test_add_func ("/latency/extremes", test_extremes);
  g_test_add_func ("/latency/tracker-intervals", test_tracker_intervals);
  return g_test_run ();
}
