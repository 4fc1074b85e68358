/* ppdiffuse — keep-workers: the worker mesh outlives stop and start while
 * its settings are unchanged, survives idle time, ends when a setting
 * changes or the element is freed, and start/stop cycles cost no memory
 * that grows with their number. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>

#include <stdio.h>
#include <string.h>

#include "pp-check-util.h"

#define CAPS_STR "video/x-raw,format=RGBA,width=16,height=16,framerate=25/1"
#define FRAME_BYTES (16 * 16 * 4)
#define FRAME_DURATION (GST_SECOND / 25)
#define CYCLE_FRAMES 3
/* An idle period longer than timeout-ms: a kept mesh must not time out.
 * (Not much shorter: the spawn itself must fit in it, sanitizers too.) */
#define SHORT_TIMEOUT_MS 2000
#define IDLE_MS (3 * SHORT_TIMEOUT_MS)
#define WORKERS_GONE_TIMEOUT_MS 10000
/* The memory test: cycles before the first reading, cycles measured, and
 * the growth allowed over them. */
#define RSS_WARM_UP_CYCLES 50
#define RSS_CYCLES 1000
#define RSS_GROWTH_LIMIT_KB (10 * 1024)

static GstElement *
make_element (guint steps)
{
  GstElement *e = pp_check_make_element (2, steps, "builtin:stamp");

  /* Ours: the workers end when the last reference goes (free_element). */
  gst_object_ref_sink (e);
  g_object_set (e, "keep-workers", TRUE, NULL);
  return e;
}

/* Brings @h's element to PLAYING with a new stream (a stop cleared the
 * sticky events it had), then sends @n frames through. */
static void
run_frames (GstHarness * h, guint n)
{
  pp_check_harness_start (h, "restart", CAPS_STR);
  for (guint i = 0; i < n; i++) {
    GstBuffer *buf = pp_check_make_flat_frame (i, FRAME_BYTES);

    fail_unless_equals_int (gst_harness_push (h, buf), GST_FLOW_OK);
  }
  for (guint i = 0; i < n; i++) {
    GstBuffer *out = gst_harness_pull (h);

    fail_unless (out != NULL, "frame %u of %u did not come out", i, n);
    gst_buffer_unref (out);
  }
}

/* Tears @h down and frees its element: the kept workers end. */
static void
free_element (GstHarness * h)
{
  GstElement *element = h->element;

  gst_harness_teardown (h);
  gst_object_unref (element);
}

static void
stop (GstHarness * h)
{
  fail_unless_equals_int (gst_element_set_state (h->element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
}

static gboolean
same_pids (GArray * a, GArray * b)
{
  return a->len == b->len && memcmp (a->data, b->data,
      a->len * sizeof (gint)) == 0;
}

/* The same workers serve every start, through NULL and an idle period
 * longer than timeout-ms; a changed setting spawns new ones; freeing the
 * element ends them. */
GST_START_TEST (test_workers_kept)
{
  GstElement *element = make_element (2);
  GstHarness *h;
  GArray *spawned, *pids;

  g_object_set (element, "timeout-ms", SHORT_TIMEOUT_MS, NULL);
  h = gst_harness_new_with_element (element, "sink", "src");
  stop (h);
  run_frames (h, CYCLE_FRAMES);
  stop (h);
  spawned = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (spawned->len, 2);

  g_usleep (IDLE_MS * 1000);
  run_frames (h, CYCLE_FRAMES);
  stop (h);
  pids = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless (same_pids (spawned, pids), "the workers were spawned anew");
  g_array_unref (pids);

  /* A setting the workers were spawned with changed. */
  g_object_set (element, "steps", 4, NULL);
  run_frames (h, CYCLE_FRAMES);
  stop (h);
  pids = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (pids->len, 2);
  fail_unless (g_array_index (pids, gint, 0) != g_array_index (spawned, gint, 0)
      && g_array_index (pids, gint, 1) != g_array_index (spawned, gint, 1),
      "steps changed but the workers were kept");
  g_array_unref (pids);
  g_array_unref (spawned);

  free_element (h);
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, WORKERS_GONE_TIMEOUT_MS), 0);
}

GST_END_TEST;

/* A stop with frames still in the mesh drains them: the next start's
 * frames come out, and only they. */
GST_START_TEST (test_stop_with_frames_in_flight)
{
  GstElement *element = make_element (2);
  GstHarness *h = gst_harness_new_with_element (element, "sink", "src");
  GstStructure *stats;
  GstBuffer *out;

  g_object_set (element, "model", "builtin:stamp?step-ms=20", NULL);
  stop (h);
  run_frames (h, 0);
  for (guint i = 0; i < CYCLE_FRAMES; i++)
    fail_unless_equals_int (gst_harness_push (h,
            pp_check_make_flat_frame (i, FRAME_BYTES)), GST_FLOW_OK);
  stop (h);
  while ((out = gst_harness_try_pull (h)) != NULL)
    gst_buffer_unref (out);
  run_frames (h, CYCLE_FRAMES);
  fail_unless (gst_harness_try_pull (h) == NULL, "an extra frame came out");
  /* Counters are settled once stopped, and start again at each start. */
  stop (h);
  stats = pp_check_get_stats (element);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out"),
      CYCLE_FRAMES);
  gst_structure_free (stats);
  free_element (h);
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, WORKERS_GONE_TIMEOUT_MS), 0);
}

GST_END_TEST;

static guint64
rss_kb (void)
{
  gchar *status = NULL;
  const gchar *line;
  guint64 kb = 0;

  fail_unless (g_file_get_contents ("/proc/self/status", &status, NULL,
          NULL));
  line = strstr (status, "VmRSS:");
  fail_unless (line != NULL);
  fail_unless (sscanf (line, "VmRSS: %" G_GUINT64_FORMAT, &kb) == 1);
  g_free (status);
  return kb;
}

/* NULL → PLAYING with a few frames → NULL, a thousand times in one
 * process: the memory does not grow with the cycles. */
GST_START_TEST (test_start_stop_rss)
{
  GstHarness *h = gst_harness_new_with_element (make_element (2), "sink",
      "src");
  guint64 before, after;

  stop (h);
  for (guint i = 0; i < RSS_WARM_UP_CYCLES; i++) {
    run_frames (h, CYCLE_FRAMES);
    stop (h);
  }
  before = rss_kb ();
  for (guint i = 0; i < RSS_CYCLES; i++) {
    run_frames (h, CYCLE_FRAMES);
    stop (h);
  }
  after = rss_kb ();
  GST_INFO ("RSS %" G_GUINT64_FORMAT " kB → %" G_GUINT64_FORMAT " kB over %d "
      "cycles", before, after, RSS_CYCLES);
  fail_unless (after < before + RSS_GROWTH_LIMIT_KB, "RSS grew by %"
      G_GUINT64_FORMAT " kB over %d start/stop cycles", after - before,
      RSS_CYCLES);
  free_element (h);
}

GST_END_TEST;

static Suite *
restart_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-restart");
  TCase *tc = tcase_create ("keep-workers");

  tcase_set_timeout (tc, 600);
  tcase_add_test (tc, test_workers_kept);
  tcase_add_test (tc, test_stop_with_frames_in_flight);
  tcase_add_test (tc, test_start_stop_rss);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  gst_check_init (&argc, &argv);
  pp_check_run_and_exit (restart_suite (), "ppdiffuse-restart", __FILE__);
}
