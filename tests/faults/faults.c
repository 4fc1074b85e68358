/* ppdiffuse — break-it tests: broken, silent, lying and dying workers must
 * give a clear error within timeout-ms, never a hang.
 *
 * Each scenario runs in a process of its own (the first argument names the
 * test case): a spawn left stuck inside MPI must not taint the next one. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>

#include <signal.h>

#include "pp-check-util.h"

#define TIMEOUT_MS 2000
/* Time on top of timeout-ms for the error to reach the bus and for the
 * element to stop. */
#define SLACK_MS 4000
#define CAPS_STR "video/x-raw,format=RGBx,width=32,height=24,framerate=30/1"
#define FRAME_BYTES (32 * 24 * 4)
#define MAX_PUSHES 100

static const gchar *fake_dir;

static gchar *
fake (const gchar * name)
{
  return g_build_filename (fake_dir, name, NULL);
}

static GstElement *
make_element (guint ranks, guint steps, const gchar * model,
    const gchar * worker)
{
  GstElement *e = gst_element_factory_make ("ppdiffuse", NULL);

  fail_unless (e != NULL);
  g_object_set (e, "ranks", ranks, "steps", steps, "model", model,
      "timeout-ms", TIMEOUT_MS, NULL);
  if (worker != NULL)
    g_object_set (e, "worker", worker, NULL);
  return e;
}

GST_START_TEST (test_not_a_worker)
{
  gchar *path = fake ("not-a-worker.sh");
  const gchar *needles[] = { "could not start", "not-a-worker.sh", NULL };

  pp_check_expect_start_failure (make_element (2, 2, "builtin:stamp", path),
      TIMEOUT_MS + SLACK_MS, needles);
  g_free (path);
}

GST_END_TEST;

GST_START_TEST (test_protocol_mismatch)
{
  gchar *path = fake ("fake-worker-bad-version");
  /* "expected N" with this build's version, whatever it is */
  const gchar *needles[] = { "protocol version: expected ", "received 99",
    NULL
  };

  pp_check_expect_start_failure (make_element (1, 2, "builtin:stamp", path),
      TIMEOUT_MS + SLACK_MS, needles);
  /* The refused worker was identified and stopped. */
  fail_unless_equals_int (pp_check_wait_descendants_gone ("fake-worker",
          SLACK_MS), 0);
  g_free (path);
}

GST_END_TEST;

GST_START_TEST (test_silent_worker)
{
  gchar *path = fake ("fake-worker-silent");
  const gchar *needles[] = { "handshake reply", "deadline", NULL };

  pp_check_expect_start_failure (make_element (1, 2, "builtin:stamp", path),
      TIMEOUT_MS + SLACK_MS, needles);
  g_free (path);
}

GST_END_TEST;

/* Pushes frames until the element refuses one; it must refuse within the
 * deadline and the error must lead with @culprit and @needles (the
 * culprit's clause, not the states of all workers after it). */
static void
expect_stream_failure (GstHarness * h, const gchar * culprit,
    const gchar * const *needles)
{
  GstBus *bus = gst_bus_new ();
  gint64 start = g_get_monotonic_time ();
  GstFlowReturn ret = GST_FLOW_OK;
  guint pushes = 0;

  gst_element_set_bus (h->element, bus);
  while (ret == GST_FLOW_OK && pushes++ < MAX_PUSHES)
    ret = gst_harness_push (h, pp_check_make_flat_frame (pushes,
            FRAME_BYTES));
  fail_unless (ret != GST_FLOW_OK, "the element never noticed");
  pp_check_expect_culprit (bus, start, TIMEOUT_MS + SLACK_MS, culprit,
      needles);

  start = g_get_monotonic_time ();
  fail_unless (gst_element_set_state (h->element, GST_STATE_NULL) ==
      GST_STATE_CHANGE_SUCCESS);
  fail_unless ((g_get_monotonic_time () - start) / 1000 <
      pp_check_bound_ms (TIMEOUT_MS + SLACK_MS),
      "stopping after the error took too long");
  pp_check_frames_accounted_after_error (h->element);
  gst_element_set_bus (h->element, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
}

GST_START_TEST (test_chunk_id_gap)
{
  gchar *path = fake ("fake-worker-skip-chunk");
  GstHarness *h = gst_harness_new_with_element (make_element (1, 1,
          "builtin:stamp", path), "sink", "src");
  const gchar *needles[] = { "chunk_id", "expected 0, received 1", NULL };

  gst_harness_set_src_caps_str (h, CAPS_STR);
  expect_stream_failure (h, "worker rank 1 (", needles);
  fail_unless_equals_int (pp_check_wait_descendants_gone ("fake-worker",
          SLACK_MS), 0);
  g_free (path);
}

GST_END_TEST;

GST_START_TEST (test_killed_worker)
{
  GstHarness *h = gst_harness_new_with_element (make_element (2, 2,
          "builtin:stamp?step-ms=5", NULL), "sink", "src");
  g_autofree gchar *victim = NULL;
  GArray *pids;

  gst_harness_set_src_caps_str (h, CAPS_STR);
  for (guint i = 0; i < 5; i++) {
    fail_unless_equals_int (gst_harness_push (h, pp_check_make_flat_frame (i,
                FRAME_BYTES)), GST_FLOW_OK);
    gst_buffer_unref (gst_harness_pull (h));
  }
  pids = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (pids->len, 2);
  /* The error leads with the worker of that pid, whichever rank it is. */
  victim = g_strdup_printf ("(pid %d on ", g_array_index (pids, gint, 1));
  GST_INFO ("killing worker pid %d", g_array_index (pids, gint, 1));
  kill (g_array_index (pids, gint, 1), SIGKILL);
  g_array_unref (pids);
  {
    const gchar *needles[] = { victim, "has exited", NULL };

    expect_stream_failure (h, "worker rank ", needles);
  }
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, SLACK_MS), 0);
}

GST_END_TEST;

/* A worker whose cuda backend chose other kernels than rank 0's (its
 * environment, through other-kernels.sh): start fails naming the key and
 * both values, and the worker is stopped.  Run with the cuda backend over
 * the emulated libraries. */
GST_START_TEST (test_kernel_ways_mismatch)
{
  gchar *path = fake ("other-kernels.sh");
  const gchar *needles[] = { "parity", "rank 1: kernel-ways = ",
    "gemm-algo=timed", "(rank 0: ", "gemm-algo=heuristic",
    "give every host the same PPDIFFUSE_* variables", NULL
  };

  pp_check_expect_start_failure (make_element (1, 2, "builtin:stamp", path),
      TIMEOUT_MS + SLACK_MS, needles);
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, SLACK_MS), 0);
  g_free (path);
}

GST_END_TEST;

static Suite *
faults_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-faults");
  TCase *tc = tcase_create ("faults");

  tcase_add_test (tc, test_not_a_worker);
  tcase_add_test (tc, test_protocol_mismatch);
  tcase_add_test (tc, test_silent_worker);
  tcase_add_test (tc, test_chunk_id_gap);
  tcase_add_test (tc, test_killed_worker);
  tcase_add_test (tc, test_kernel_ways_mismatch);
  suite_add_tcase (s, tc);
  return s;
}

/* faults FAKE_DIR TEST_NAME */
int
main (int argc, char **argv)
{
  if (argc != 3) {
    g_printerr ("usage: %s FAKE_WORKER_DIR TEST_NAME\n", argv[0]);
    return 2;
  }
  fake_dir = argv[1];
  g_setenv ("GST_CHECKS", argv[2], TRUE);
  gst_check_init (NULL, NULL);
  pp_check_run_and_exit (faults_suite (), "ppdiffuse-faults", __FILE__);
}
