/* Unit tests for the deadline rule of slow but healthy work (pp-allowance.h):
 * allowance = max (timeout-ms, PP_ALLOWANCE_FACTOR × expected + one heartbeat
 * period), and where expected comes from. */
#include "pp-allowance.h"
#include "pp-protocol.h"

#include <string.h>

#define MS 1000
#define TIMEOUT_MS 2000
#define MARGIN_US ((gint64) TIMEOUT_MS / PP_HEARTBEAT_DIVISOR * MS)

/* Fast work keeps timeout-ms: the break-it bounds stay what they were. */
static void
test_floor_is_timeout (void)
{
  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS, 0), ==,
      TIMEOUT_MS * MS);
  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS, 2 * MS), ==,
      TIMEOUT_MS * MS);
  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS, -5), ==,
      TIMEOUT_MS * MS);
  /* Just below the point where the measure takes over. */
  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS,
          (TIMEOUT_MS * MS - MARGIN_US) / PP_ALLOWANCE_FACTOR), ==,
      TIMEOUT_MS * MS);
}

/* Slow work gets PP_ALLOWANCE_FACTOR times its measured time, plus a period. */
static void
test_slow_work_scales (void)
{
  const gint64 step = 1500 * MS;        /* a 1080p UNet step on a CPU */

  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS, step), ==,
      PP_ALLOWANCE_FACTOR * step + MARGIN_US);
  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS, step), >, step);
  /* Monotonic in the measure and in timeout-ms. */
  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS, step + 1), >,
      pp_allowance_us (TIMEOUT_MS, step));
  g_assert_cmpint (pp_allowance_us (10 * TIMEOUT_MS, step), >=,
      pp_allowance_us (TIMEOUT_MS, step));
  /* No overflow for absurd measures. */
  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS, G_MAXINT64 / 2), ==,
      G_MAXINT64);
}

/* Busy time first, then another worker's, then the round trip, then two
 * timeouts per step. */
static void
test_expected_sources (void)
{
  const gchar *source = NULL;

  /* 10 chunks, 3 s busy: 300 ms each, whatever the round says. */
  g_assert_cmpint (pp_allowance_expected_slice_us (TIMEOUT_MS, 3000 * MS, 10,
          700 * MS, 9000 * MS, 2, 4, &source), ==, 300 * MS);
  g_assert_cmpstr (source, ==, PP_ALLOWANCE_BUSY);
  /* No busy time yet: the slice's share of the round (2 of 4 steps). */
  g_assert_cmpint (pp_allowance_expected_slice_us (TIMEOUT_MS, 0, 0, 0,
          9000 * MS, 2, 4, &source), ==, 4500 * MS);
  g_assert_cmpstr (source, ==, PP_ALLOWANCE_ROUND);
  /* Another worker's time per step before the round: 700 ms × 2 steps. */
  g_assert_cmpint (pp_allowance_expected_slice_us (TIMEOUT_MS, 0, 0, 700 * MS,
          9000 * MS, 2, 4, &source), ==, 1400 * MS);
  g_assert_cmpstr (source, ==, PP_ALLOWANCE_PEER);
  /* Busy time without a chunk sent counts as none. */
  g_assert_cmpint (pp_allowance_expected_slice_us (TIMEOUT_MS, 3000 * MS, 0,
          0, 9000 * MS, 1, 3, &source), ==, 3000 * MS);
  g_assert_cmpstr (source, ==, PP_ALLOWANCE_ROUND);
  /* Nothing measured: two timeouts per step of the slice. */
  g_assert_cmpint (PP_ALLOWANCE_UNMEASURED_STEP_TIMEOUTS, ==, 2);
  g_assert_cmpint (pp_allowance_expected_slice_us (TIMEOUT_MS, 0, 0, 0, 0, 3,
          6, &source), ==, 3 * 2 * TIMEOUT_MS * MS);
  g_assert_cmpstr (source, ==, PP_ALLOWANCE_UNMEASURED);
  g_assert_cmpint (pp_allowance_unmeasured_us (TIMEOUT_MS, 0), ==,
      2 * TIMEOUT_MS * MS);
  /* NULL source is allowed. */
  g_assert_cmpint (pp_allowance_expected_slice_us (TIMEOUT_MS, 0, 0, 0, 1, 1,
          1000, NULL), ==, 1);
}

/* A stuck step is still caught: an unmeasured first slice of n steps
 * runs out at PP_ALLOWANCE_FACTOR × 2 × n × timeout-ms (plus a period). */
static void
test_unmeasured_is_bounded (void)
{
  const gint64 expected = pp_allowance_expected_slice_us (TIMEOUT_MS, 0, 0, 0,
      0, 2, 4, NULL);

  g_assert_cmpint (pp_allowance_us (TIMEOUT_MS, expected), ==,
      PP_ALLOWANCE_FACTOR * 2 * 2 * TIMEOUT_MS * MS + MARGIN_US);
}

/* The round estimate follows a slower sample at once, a faster slowly. */
static void
test_round_estimate (void)
{
  gint64 e = pp_allowance_update_round_us (0, 1000);

  g_assert_cmpint (e, ==, 1000);
  e = pp_allowance_update_round_us (e, 5000);
  g_assert_cmpint (e, ==, 5000);
  e = pp_allowance_update_round_us (e, 1000);
  g_assert_cmpint (e, <, 5000);
  g_assert_cmpint (e, >, 4000);
  for (guint i = 0; i < 200; i++)
    e = pp_allowance_update_round_us (e, 1000);
  g_assert_cmpint (e, >=, 1000);
  g_assert_cmpint (e, <, 1100);
  /* A sample of nothing changes nothing. */
  g_assert_cmpint (pp_allowance_update_round_us (e, 0), ==, e);
}

static void
test_advice_names_what_to_change (void)
{
  const gchar *advice = pp_allowance_advice (2, 4);

  g_assert_nonnull (strstr (advice, "smaller frame"));
  g_assert_nonnull (strstr (advice, "more ranks"));
  g_assert_nonnull (strstr (advice, "fewer steps"));
  g_assert_nonnull (strstr (advice, "backend"));
  /* A rank a step: neither more ranks (at most one a step) nor fewer
   * steps shortens a rank's work. */
  for (guint n = 1; n <= 3; n++) {
    advice = pp_allowance_advice (n, n);
    g_assert_nonnull (strstr (advice, "smaller frame"));
    g_assert_nonnull (strstr (advice, "backend"));
    g_assert_null (strstr (advice, "more ranks"));
    g_assert_null (strstr (advice, "fewer steps"));
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/pace/floor-is-timeout", test_floor_is_timeout);
  g_test_add_func ("/pace/slow-work-scales", test_slow_work_scales);
  g_test_add_func ("/pace/expected-sources", test_expected_sources);
  g_test_add_func ("/pace/unmeasured-is-bounded",
      test_unmeasured_is_bounded);
  g_test_add_func ("/pace/round-estimate", test_round_estimate);
  g_test_add_func ("/pace/advice", test_advice_names_what_to_change);
  return g_test_run ();
}
