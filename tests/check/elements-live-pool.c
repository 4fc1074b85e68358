/* ppdiffuse — a source with a small fixed pool (a camera) is never
 * starved: the element lets each input buffer go once its frame is
 * encoded, and asks upstream for the buffers it does hold. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/video/video.h>

#include "pp-check-util.h"

#define WIDTH 64
#define HEIGHT 48
#define FRAME_BYTES (WIDTH * HEIGHT * 4)
#define FRAME_DURATION (GST_SECOND / 25)
#define CAPS_STR "video/x-raw,format=RGBA,width=64,height=48,framerate=25/1"
#define RANKS 2
#define STEPS 2
#define FRAMES 24
/* Bound of every wait for a buffer of the source's pool. */
#define ACQUIRE_TIMEOUT_US (10 * G_USEC_PER_SEC)
#define ACQUIRE_POLL_US 1000
/* What the element holds of upstream's buffers (gstppdiffuse-pool.h). */
#define INPUT_FRAMES_HELD 1

static void
fill_frame (GstBuffer * buf, guint index)
{
  GstMapInfo map;

  fail_unless (gst_buffer_map (buf, &map, GST_MAP_WRITE));
  pp_check_fill_pattern (map.data, WIDTH * 4, WIDTH, HEIGHT, index);
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = index * FRAME_DURATION;
  GST_BUFFER_DURATION (buf) = FRAME_DURATION;
}

/* Checks that @out is frame @index after the STEPS stamp steps. */
static void
check_stamped (GstBuffer * out, guint index)
{
  g_autofree gchar *why = NULL;
  GstMapInfo map;

  fail_unless (out != NULL, "frame %u did not come out", index);
  fail_unless_equals_uint64 (GST_BUFFER_PTS (out), index * FRAME_DURATION);
  fail_unless (gst_buffer_map (out, &map, GST_MAP_READ));
  fail_unless_equals_int (map.size, FRAME_BYTES);
  if (!pp_check_is_stamped (map.data, WIDTH * 4, WIDTH, HEIGHT, index, STEPS,
          0, &why))
    fail ("%s", why);
  gst_buffer_unmap (out, &map);
}

/* The source's pool: exactly @n buffers, never more. */
static GstBufferPool *
make_source_pool (guint n)
{
  GstBufferPool *pool = gst_buffer_pool_new ();
  GstStructure *config = gst_buffer_pool_get_config (pool);
  GstCaps *caps = gst_caps_from_string (CAPS_STR);

  gst_buffer_pool_config_set_params (config, caps, FRAME_BYTES, n, n);
  gst_caps_unref (caps);
  fail_unless (gst_buffer_pool_set_config (pool, config));
  fail_unless (gst_buffer_pool_set_active (pool, TRUE));
  return pool;
}

/* A buffer of @pool as a camera gets one: waiting while the pool is
 * empty, here up to a deadline, so that a stall fails the test. */
static GstBuffer *
acquire_before_deadline (GstBufferPool * pool, guint index)
{
  GstBufferPoolAcquireParams params = {.flags =
        GST_BUFFER_POOL_ACQUIRE_FLAG_DONTWAIT };
  const gint64 deadline = g_get_monotonic_time () + ACQUIRE_TIMEOUT_US;
  GstBuffer *buf = NULL;

  while (gst_buffer_pool_acquire_buffer (pool, &buf, &params) != GST_FLOW_OK) {
    fail_unless (g_get_monotonic_time () < deadline, "frame %u: the source's "
        "pool stayed empty for %d s: its buffers are held downstream", index,
        (gint) (ACQUIRE_TIMEOUT_US / G_USEC_PER_SEC));
    g_usleep (ACQUIRE_POLL_US);
  }
  return buf;
}

/* How many buffers @pool has free now. */
static guint
count_free (GstBufferPool * pool)
{
  GstBufferPoolAcquireParams params = {.flags =
        GST_BUFFER_POOL_ACQUIRE_FLAG_DONTWAIT };
  GPtrArray *taken = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_buffer_unref);
  GstBuffer *buf;
  guint n;

  while (gst_buffer_pool_acquire_buffer (pool, &buf, &params) == GST_FLOW_OK)
    g_ptr_array_add (taken, buf);
  n = taken->len;
  g_ptr_array_unref (taken);
  return n;
}

static const guint pool_cases[][2] = {
  /* buffers in the source's pool, max-in-flight */
  {3, 2}, {3, 3}, {3, 4}, {3, 6}, {3, 8},
  {4, 2}, {4, 3}, {4, 4}, {4, 6}, {4, 8},
};

/* The cases a sanitizer's run takes: each max-in-flight once, the two
 * pool sizes in turn (more, equal and fewer frames in flight than the
 * pool has buffers, with either pool); the plain run takes every pair. */
static const guint pool_cases_sanitized[] = { 0, 6, 2, 8, 4 };

/* More frames in flight than the source has buffers: every frame goes
 * through (impossible if the element kept the inputs in flight), equal to
 * the stamp reference, and each input is back in the source's pool once
 * the element took it (its push returned). */
GST_START_TEST (test_fixed_source_pool)
{
  const guint row = pp_check_sanitized ()? pool_cases_sanitized[__i__] :
      (guint) __i__;
  const guint n_pool = pool_cases[row][0], limit = pool_cases[row][1];
  GstElement *element = pp_check_make_element (RANKS, STEPS,
      "builtin:stamp");
  GstBufferPool *pool = make_source_pool (n_pool);
  GstStructure *stats;
  GstHarness *h;

  GST_INFO ("source pool of %u, max-in-flight %u", n_pool, limit);
  g_object_set (element, "max-in-flight", limit, NULL);
  h = pp_check_harness_new (element, CAPS_STR);
  for (guint i = 0; i < FRAMES; i++) {
    GstBuffer *buf = acquire_before_deadline (pool, i);

    fill_frame (buf, i);
    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
    fail_unless_equals_int (count_free (pool), n_pool);
  }
  for (guint i = 0; i < FRAMES; i++) {
    GstBuffer *out = gst_harness_pull (h);

    check_stamped (out, i);
    gst_buffer_unref (out);
  }
  fail_unless (gst_harness_try_pull (h) == NULL, "an extra frame came out");
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  stats = pp_check_get_stats (element);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-in"), FRAMES);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out"), FRAMES);
  gst_structure_free (stats);
  gst_harness_teardown (h);
  fail_unless (gst_buffer_pool_set_active (pool, FALSE));
  gst_object_unref (pool);
}

GST_END_TEST;

/* Upstream is asked for the buffers the element holds: an entry of its
 * own with that many, or that many more in an entry already there; and
 * for GstVideoMeta. */
GST_START_TEST (test_allocation_min_buffers)
{
  const guint upstream_min = 3, upstream_max = 3;
  GstCaps *caps = gst_caps_from_string (CAPS_STR);
  GstQuery *query = gst_query_new_allocation (caps, TRUE);
  GstHarness *h = pp_check_harness_new (pp_check_make_element (1, 1,
          "builtin:stamp"), CAPS_STR);
  guint size, min, max;
  GstBufferPool *pool;

  fail_unless (gst_pad_peer_query (h->srcpad, query));
  fail_unless_equals_int (gst_query_get_n_allocation_pools (query), 1);
  gst_query_parse_nth_allocation_pool (query, 0, &pool, &size, &min, &max);
  fail_unless (pool == NULL);
  fail_unless_equals_int (size, FRAME_BYTES);
  fail_unless_equals_int (min, INPUT_FRAMES_HELD);
  fail_unless_equals_int (max, 0);
  fail_unless (gst_query_find_allocation_meta (query, GST_VIDEO_META_API_TYPE,
          NULL));
  gst_query_unref (query);

  query = gst_query_new_allocation (caps, TRUE);
  gst_query_add_allocation_pool (query, NULL, FRAME_BYTES, upstream_min,
      upstream_max);
  fail_unless (gst_pad_peer_query (h->srcpad, query));
  gst_query_parse_nth_allocation_pool (query, 0, &pool, &size, &min, &max);
  fail_unless_equals_int (min, upstream_min + INPUT_FRAMES_HELD);
  fail_unless (max == 0 || max >= min);
  gst_query_unref (query);
  gst_caps_unref (caps);
  gst_harness_teardown (h);
}

GST_END_TEST;

static Suite *
live_pool_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-live-pool");
  TCase *tc = tcase_create ("pool");

  tcase_add_loop_test (tc, test_fixed_source_pool, 0,
      pp_check_repeats (G_N_ELEMENTS (pool_cases),
          G_N_ELEMENTS (pool_cases_sanitized)));
  tcase_add_test (tc, test_allocation_min_buffers);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  gst_check_init (&argc, &argv);
  pp_check_run_and_exit (live_pool_suite (), "ppdiffuse-live-pool",
      __FILE__);
}
