/* ppdiffuse — slow is not dead: a mesh whose every step takes longer than
 * timeout-ms (the stamp model's emulated step time) returns every frame,
 * correct and in order, warning at the start that the stream is too fast
 * for it; and a step that runs far beyond its measured time (the slow
 * fault, held for many steps' time) is still an error, naming the rank,
 * the chunk, how long it ran, what was expected and what to change.
 *
 *   slow-pace CASE    (CASE: completes, stuck)
 *
 * Each case runs in a process of its own.  The deadline rule is
 * mpi-helper/liveness/pp-allowance.h. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>

#include <string.h>

#include "pp-check-util.h"

#define RANKS 2
#define STEPS 2
/* The warning's advice checked below is the one for a rank a step. */
G_STATIC_ASSERT (RANKS == STEPS);
/* Each step (one per worker) takes 1.5 × timeout-ms; timeout-ms is what
 * the mesh's start-up needs on a loaded machine. */
#define TIMEOUT_MS 2000
#define STEP_MS 3000
#define MODEL "builtin:stamp?step-ms=3000"
#define WIDTH 32
#define HEIGHT 24
#define FRAME_BYTES (WIDTH * HEIGHT * 4)
#define FRAME_DURATION (GST_SECOND / 30)
#define CAPS_STR "video/x-raw,format=RGBA,width=32,height=24,framerate=30/1"
#define FRAMES 3
/* The stuck case: the fault holds the second worker in a step of this
 * chunk (the warm-up pass is chunk 0, frame i is chunk i + 1) far longer
 * than its allowance, 3 × STEP_MS + timeout-ms / 4. */
#define STUCK_CHUNK 3
#define STUCK_MS 60000
/* Bound of every wait for a frame or a message: a round of the mesh and
 * its allowance, with room for a loaded machine. */
#define WAIT_MS 30000
/* From the stuck chunk's push to the error: it waits behind the chunk
 * before it on each worker (2 steps), then runs out its allowance. */
#define STUCK_BOUND_MS (2 * STEP_MS + 3 * STEP_MS + TIMEOUT_MS + 3000)

static guint8
pattern (guint index, guint x, guint y, guint c)
{
  return (guint8) ((x * 3 + y * 5 + c * 7 + index * 11) % 256);
}

/* The stamp model's step k (kernels/pp-model.c), written out again. */
static guint
stamp (guint k, guint c, guint v)
{
  return ((2 * (k % 128) + 3) * v + (37 * k + 101 * c + 11) % 256) % 256;
}

static GstBuffer *
make_frame (guint index)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, FRAME_BYTES, NULL);
  GstMapInfo map;

  fail_unless (gst_buffer_map (buf, &map, GST_MAP_WRITE));
  for (guint y = 0; y < HEIGHT; y++)
    for (guint x = 0; x < WIDTH; x++) {
      guint8 *px = map.data + (y * WIDTH + x) * 4;
      for (guint c = 0; c < 3; c++)
        px[c] = pattern (index, x, y, c);
      px[3] = (guint8) (255 - index);
    }
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = index * FRAME_DURATION;
  GST_BUFFER_DURATION (buf) = FRAME_DURATION;
  return buf;
}

/* Frame @index, every step run once, in order, on the right frame. */
static void
check_stamped (GstBuffer * out, guint index)
{
  GstMapInfo map;

  fail_unless (out != NULL, "frame %u did not come out", index);
  fail_unless_equals_uint64 (GST_BUFFER_PTS (out), index * FRAME_DURATION);
  fail_unless (gst_buffer_map (out, &map, GST_MAP_READ));
  fail_unless_equals_int (map.size, FRAME_BYTES);
  for (guint y = 0; y < HEIGHT; y++)
    for (guint x = 0; x < WIDTH; x++) {
      const guint8 *px = map.data + (y * WIDTH + x) * 4;
      for (guint c = 0; c < 3; c++) {
        guint v = pattern (index, x, y, c);
        for (guint k = 0; k < STEPS; k++)
          v = stamp (k, c, v);
        if (px[c] != v)
          fail ("frame %u pixel (%u,%u) channel %u: expected %u, got %u",
              index, x, y, c, v, px[c]);
      }
    }
  gst_buffer_unmap (out, &map);
}

static GstHarness *
make_harness (GstBus * bus)
{
  GstElement *e = gst_element_factory_make ("ppdiffuse", NULL);
  GstHarness *h;

  fail_unless (e != NULL);
  g_object_set (e, "ranks", RANKS, "steps", STEPS, "model", MODEL,
      "timeout-ms", TIMEOUT_MS, "warm-up", TRUE, NULL);
  h = gst_harness_new_with_element (e, "sink", "src");
  gst_element_set_bus (h->element, bus);
  gst_object_unref (e);
  gst_harness_set_src_caps_str (h, CAPS_STR);
  return h;
}

/* The next frame out within WAIT_MS, or NULL. */
static GstBuffer *
pull_before_deadline (GstHarness * h)
{
  const gint64 deadline = g_get_monotonic_time () + WAIT_MS * 1000;
  GstBuffer *out;

  while ((out = gst_harness_try_pull (h)) == NULL
      && g_get_monotonic_time () < deadline)
    g_usleep (10000);
  return out;
}

/* The warning posted after the warm-up pass: too slow for 30 fps, with
 * the measured time per frame, the rank, the interval and what to
 * change. */
static void
expect_pace_warning (GstBus * bus)
{
  GstMessage *msg = gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING
      | GST_MESSAGE_ERROR);
  g_autoptr (GError) error = NULL;
  gchar *debug = NULL;

  fail_unless (msg != NULL, "no warning that the stream is too fast");
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    gst_message_parse_error (msg, &error, NULL);
    fail ("slow work ended in an error: %s", error->message);
  }
  gst_message_parse_warning (msg, &error, &debug);
  GST_INFO ("warning: %s (%s)", error->message, debug);
  for (const gchar * const *n = (const gchar * const[]) {
        "too slow for this stream", "ms on the slowest worker (rank ",
        "round the mesh", "every 33.3 ms (30/1 fps)", "smaller frame",
        "faster backend", "each rank runs one step already", NULL};
      *n != NULL; n++)
    fail_unless (strstr (error->message, *n) != NULL, "'%s' is not in the "
        "warning: %s", *n, error->message);
  /* A rank a step already (RANKS == STEPS): neither more ranks nor fewer
   * steps would shorten the slowest rank's work. */
  fail_unless (strstr (error->message, "more ranks") == NULL
      && strstr (error->message, "fewer steps") == NULL,
      "the warning advises what cannot help: %s", error->message);
  fail_unless (debug != NULL && strstr (debug, "ranks=2, steps=2") != NULL,
      "the warning's details do not give the settings: %s", debug);
  /* The estimate is the warm-up's: a frame takes at least a step. */
  {
    const gchar *about = strstr (error->message, "takes about ");
    guint64 ms;

    fail_unless (about != NULL);
    ms = g_ascii_strtoull (about + strlen ("takes about "), NULL, 10);
    fail_unless (ms >= STEP_MS && ms < 4 * STEP_MS, "estimate %"
        G_GUINT64_FORMAT " ms for a %d ms step", ms, STEP_MS);
  }
  /* The same figures in the details, for an application. */
  {
    const GstStructure *details = NULL;
    gdouble stage_ms = 0, interval_ms = 0;
    guint rank = 0;

    gst_message_parse_warning_details (msg, &details);
    fail_unless (details != NULL && g_strcmp0 (gst_structure_get_string
            (details, "ppdiffuse-warning"), "pace") == 0,
        "the warning's details do not say ppdiffuse-warning=pace");
    fail_unless (gst_structure_get_double (details, "stage-ms", &stage_ms)
        && gst_structure_get_double (details, "interval-ms", &interval_ms)
        && gst_structure_get_uint (details, "slowest-rank", &rank)
        && gst_structure_has_field_typed (details, "round-ms",
            G_TYPE_DOUBLE), "details: %" GST_PTR_FORMAT, details);
    fail_unless (stage_ms >= STEP_MS && stage_ms < 4 * STEP_MS,
        "stage-ms %.1f for a %d ms step", stage_ms, STEP_MS);
    fail_unless (interval_ms > 33.3 && interval_ms < 33.4,
        "interval-ms %.2f at 30 fps", interval_ms);
    fail_unless (rank >= 1, "slowest-rank %u", rank);
  }
  g_free (debug);
  gst_message_unref (msg);
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING | GST_MESSAGE_ERROR);
  fail_unless (msg == NULL, "a second %s after the warning",
      GST_MESSAGE_TYPE_NAME (msg));
}

/* Stops @h's element (NULL), frees the harness and @bus, and checks that
 * no worker is left. */
static void
stop_harness (GstHarness * h, GstBus * bus)
{
  fail_unless (gst_element_set_state (h->element, GST_STATE_NULL) ==
      GST_STATE_CHANGE_SUCCESS);
  gst_element_set_bus (h->element, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, 5000), 0);
}

GST_START_TEST (test_slow_completes)
{
  GstBus *bus = gst_bus_new ();
  GstHarness *h = make_harness (bus);

  for (guint i = 0; i < FRAMES; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  for (guint i = 0; i < FRAMES; i++) {
    GstBuffer *out = pull_before_deadline (h);

    check_stamped (out, i);
    gst_buffer_unref (out);
  }
  fail_unless (gst_harness_try_pull (h) == NULL, "an extra frame came out");
  /* One warning, no error. */
  expect_pace_warning (bus);
  stop_harness (h, bus);
}

GST_END_TEST;

GST_START_TEST (test_stuck_step)
{
  g_autofree gchar *spec = g_strdup_printf ("rank:%d,chunk:%d,kind:slow,"
      "ms:%d", RANKS, STUCK_CHUNK, STUCK_MS);
  const gchar *needles[] = { "computing chunk 3 for ", "expected ",
    "measured compute", "allowed ", "timeout-ms 2000", "raise timeout-ms",
    "smaller frame", NULL
  };
  GstBus *bus;
  GstHarness *h;
  GstFlowReturn ret = GST_FLOW_OK;
  gint64 stuck_push = 0;
  guint pushes = 0;

  g_setenv ("PPDIFFUSE_FAULT", spec, TRUE);
  bus = gst_bus_new ();
  h = make_harness (bus);
  /* Frames 0 and 1 go through at their slow pace; frame 2 is chunk 3. */
  while (ret == GST_FLOW_OK && pushes < 20) {
    GstBuffer *out;

    if (pushes + 1 == STUCK_CHUNK)
      stuck_push = g_get_monotonic_time ();
    ret = gst_harness_push (h, make_frame (pushes++));
    while ((out = gst_harness_try_pull (h)) != NULL)
      gst_buffer_unref (out);
  }
  fail_unless (ret != GST_FLOW_OK, "the stuck step was never noticed");
  fail_unless (stuck_push != 0, "failed before the stuck chunk");
  pp_check_expect_culprit (bus, stuck_push, STUCK_BOUND_MS,
      "worker rank 2 (", needles);
  fail_unless (gst_element_set_state (h->element, GST_STATE_NULL) ==
      GST_STATE_CHANGE_SUCCESS);
  pp_check_frames_accounted_after_error (h->element);
  stop_harness (h, bus);
}

GST_END_TEST;

static const gchar *case_name;

static Suite *
slow_pace_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-slow-pace");
  TCase *tc = tcase_create ("slow-pace");

  tcase_set_timeout (tc, 120);
  if (g_str_equal (case_name, "stuck"))
    tcase_add_test (tc, test_stuck_step);
  else
    tcase_add_test (tc, test_slow_completes);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  if (argc != 2 || (!g_str_equal (argv[1], "completes")
          && !g_str_equal (argv[1], "stuck"))) {
    g_printerr ("usage: %s completes|stuck\n", argv[0]);
    return 2;
  }
  case_name = argv[1];
  gst_check_init (NULL, NULL);
  pp_check_run_and_exit (slow_pace_suite (), "ppdiffuse-slow-pace",
      __FILE__);
}
