/* ppdiffuse — element tests with a real worker mesh (MPI_Comm_spawn). */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/video/video.h>

#include "pp-check-util.h"

#define WIDTH 64
#define HEIGHT 48
#define FPS 25
#define FRAME_DURATION (GST_SECOND / FPS)
#define CAPS_STR "video/x-raw,format=RGBA,width=64,height=48,framerate=25/1"
#define MATRIX_FRAMES 50
#define START_STOP_CYCLES 20
#define CYCLE_FRAMES 3
#define ERROR_TIMEOUT_MS 3000

/* ---- frames ------------------------------------------------------------ */

/* Frame @index carries a pattern of its own in RGB and (255 - index) in
 * alpha, so an output can be matched to exactly one input. */
static guint8
pattern (guint index, guint x, guint y, guint c)
{
  return (guint8) ((x * 3 + y * 5 + c * 7 + index * 11) % 256);
}

static GstBuffer *
make_frame (guint index)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, WIDTH * HEIGHT * 4, NULL);
  GstMapInfo map;

  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (guint y = 0; y < HEIGHT; y++)
    for (guint x = 0; x < WIDTH; x++) {
      guint8 *px = map.data + (y * WIDTH + x) * 4;
      for (guint c = 0; c < 3; c++)
        px[c] = pattern (index, x, y, c);
      px[3] = (guint8) (255 - index);
    }
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = index * FRAME_DURATION;
  GST_BUFFER_DTS (buf) = index * FRAME_DURATION;
  GST_BUFFER_DURATION (buf) = FRAME_DURATION;
  if (index == 0)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
  if (index % 2)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DELTA_UNIT);
  return buf;
}

/* The stamp model's step k, written out again here (not shared with the
 * implementation): v ← (a(k) v + b(k, c)) mod 256. */
static guint
stamp (guint k, guint c, guint v)
{
  guint a = 2 * (k % 128) + 3;
  guint b = (37 * k + 101 * c + 11) % 256;
  return (a * v + b) % 256;
}

/* Checks that @out is frame @index after steps 0..n_steps-1, each once and
 * in order, with its timing and flags intact. */
static void
check_stamped (GstBuffer * out, guint index, guint n_steps)
{
  GstMapInfo map;

  fail_unless (out != NULL, "frame %u did not come out", index);
  fail_unless_equals_uint64 (GST_BUFFER_PTS (out), index * FRAME_DURATION);
  fail_unless_equals_uint64 (GST_BUFFER_DTS (out), index * FRAME_DURATION);
  fail_unless_equals_uint64 (GST_BUFFER_DURATION (out), FRAME_DURATION);
  fail_unless_equals_int (GST_BUFFER_FLAG_IS_SET (out,
          GST_BUFFER_FLAG_DELTA_UNIT), index % 2);
  if (index == 0)
    fail_unless (GST_BUFFER_FLAG_IS_SET (out, GST_BUFFER_FLAG_DISCONT));
  gst_buffer_map (out, &map, GST_MAP_READ);
  fail_unless_equals_int (map.size, WIDTH * HEIGHT * 4);
  for (guint y = 0; y < HEIGHT; y++)
    for (guint x = 0; x < WIDTH; x++) {
      const guint8 *px = map.data + (y * WIDTH + x) * 4;
      for (guint c = 0; c < 3; c++) {
        guint v = pattern (index, x, y, c);
        for (guint k = 0; k < n_steps; k++)
          v = stamp (k, c, v);
        if (px[c] != v) {
          gst_buffer_unmap (out, &map);
          fail ("frame %u pixel (%u,%u) channel %u: expected %u after %u "
              "steps, got %u", index, x, y, c, v, n_steps, px[c]);
        }
      }
      if (px[3] != 255 - index) {
        gst_buffer_unmap (out, &map);
        fail ("frame %u: alpha changed to %u", index, px[3]);
      }
    }
  gst_buffer_unmap (out, &map);
}

static GstElement *
make_element (guint ranks, guint steps, const gchar * model)
{
  GstElement *e = gst_element_factory_make ("ppdiffuse", NULL);

  fail_unless (e != NULL, "ppdiffuse not found: check GST_PLUGIN_PATH_1_0");
  g_object_set (e, "ranks", ranks, "steps", steps, "model", model, NULL);
  return e;
}

static GstHarness *
make_harness (GstElement * element)
{
  GstHarness *h = gst_harness_new_with_element (element, "sink", "src");

  gst_harness_set_src_caps_str (h, CAPS_STR);
  return h;
}

static GstStructure *
get_stats (GstElement * element)
{
  GstStructure *s = NULL;

  g_object_get (element, "stats", &s, NULL);
  fail_unless (s != NULL);
  return s;
}

static guint64
stat_u64 (GstStructure * s, const gchar * field)
{
  guint64 v = 0;

  fail_unless (gst_structure_get_uint64 (s, field, &v), "no %s", field);
  return v;
}

/* Stops the element (the mesh shuts down), checks that every worker is
 * gone and that the shutdown was the clean one, then frees the harness.
 * Returns the final stats: counters are settled once the element stopped. */
static GstStructure *
stop_and_check_stats (GstHarness * h, guint64 frames)
{
  GstElement *element = gst_object_ref (h->element);
  GstStructure *stats;

  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  stats = get_stats (element);
  /* mesh-chunks is only filled when the shutdown marker came back. */
  fail_unless_equals_uint64 (stat_u64 (stats, "mesh-chunks"), frames);
  fail_unless_equals_int (pp_check_count_descendants (PP_CHECK_WORKER_COMM),
      0);
  gst_object_unref (element);
  gst_harness_teardown (h);
  return stats;
}

static void
stop_and_check (GstHarness * h, guint64 frames)
{
  gst_structure_free (stop_and_check_stats (h, frames));
}

/* ---- every step exactly once, in order, on the frame's own data -------- */

static const guint matrix[][2] = {
  {1, 3}, {1, 4}, {1, 6},
  {2, 3}, {2, 4}, {2, 6},
  {3, 3}, {3, 4}, {3, 6},
};

GST_START_TEST (test_stamp_matrix)
{
  guint ranks = matrix[__i__][0], steps = matrix[__i__][1];
  GstHarness *h = make_harness (make_element (ranks, steps, "builtin:stamp"));

  GST_INFO ("ranks=%u steps=%u", ranks, steps);
  for (guint i = 0; i < MATRIX_FRAMES; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  for (guint i = 0; i < MATRIX_FRAMES; i++) {
    GstBuffer *out = gst_harness_pull (h);
    check_stamped (out, i, steps);
    gst_buffer_unref (out);
  }
  fail_unless (gst_harness_try_pull (h) == NULL, "an extra frame came out");
  stop_and_check (h, MATRIX_FRAMES);
}

GST_END_TEST;

/* ---- warm-up: one pass before the first frame, invisible downstream ---- */

GST_START_TEST (test_warm_up)
{
  GstElement *element = make_element (2, 4, "builtin:stamp");
  GstHarness *h;
  GstStructure *stats;

  g_object_set (element, "warm-up", TRUE, NULL);
  h = make_harness (element);
  for (guint i = 0; i < MATRIX_FRAMES; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  /* Every frame comes out once, stamped by exactly its own steps: the
   * pass neither shows up nor disturbs the stream. */
  for (guint i = 0; i < MATRIX_FRAMES; i++) {
    GstBuffer *out = gst_harness_pull (h);
    check_stamped (out, i, 4);
    gst_buffer_unref (out);
  }
  fail_unless (gst_harness_try_pull (h) == NULL, "an extra frame came out");
  /* mesh-chunks counts the frames only */
  stats = stop_and_check_stats (h, MATRIX_FRAMES);
  fail_unless_equals_uint64 (stat_u64 (stats, "warm-up-passes"), 1);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-in"), MATRIX_FRAMES);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-out"), MATRIX_FRAMES);
  gst_structure_free (stats);
}

GST_END_TEST;

/* ---- frames dropped before the mesh: QoS and leaky --------------------- */

static guint
count_qos_messages (GstBus * bus)
{
  GstMessage *msg;
  guint n = 0;

  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_QOS)) != NULL) {
    guint64 processed = 0, dropped = 0;
    GstFormat format;

    gst_message_parse_qos_stats (msg, &format, &processed, &dropped);
    fail_unless_equals_int (format, GST_FORMAT_BUFFERS);
    fail_unless (dropped > 0);
    gst_message_unref (msg);
    n++;
  }
  return n;
}

/* Downstream says it is a second behind: frames whose running time is
 * before that are dropped unseen, counted, announced; the first frame in
 * time again goes through marked DISCONT. */
GST_START_TEST (test_qos_drops_late)
{
  const guint n_before = 2, n_late = 8, fps = 25;
  GstHarness *h = make_harness (make_element (1, 1, "builtin:stamp"));
  GstBus *bus = gst_bus_new ();
  GstStructure *stats;
  GstBuffer *out;

  gst_element_set_bus (h->element, bus);
  for (guint i = 0; i < n_before; i++) {
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
    gst_buffer_unref (gst_harness_pull (h));
  }
  fail_unless (gst_harness_push_upstream_event (h, gst_event_new_qos
          (GST_QOS_TYPE_UNDERFLOW, 0.5, GST_SECOND, GST_SECOND * n_before /
              fps)));
  for (guint i = n_before; i < n_before + n_late; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  /* 3 s: past the earliest time the QoS event set (~2.1 s) */
  fail_unless_equals_int (gst_harness_push (h, make_frame (3 * fps)),
      GST_FLOW_OK);
  out = gst_harness_pull (h);
  fail_unless_equals_uint64 (GST_BUFFER_PTS (out), 3 * GST_SECOND);
  fail_unless (GST_BUFFER_FLAG_IS_SET (out, GST_BUFFER_FLAG_DISCONT));
  gst_buffer_unref (out);
  fail_unless (gst_harness_try_pull (h) == NULL, "a late frame came out");
  fail_unless_equals_int (count_qos_messages (bus), n_late);
  gst_element_set_bus (h->element, NULL);
  gst_object_unref (bus);
  stats = stop_and_check_stats (h, n_before + 1);
  fail_unless_equals_uint64 (stat_u64 (stats, "dropped-qos"), n_late);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-in"), n_before + n_late + 1);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-out"), n_before + 1);
  gst_structure_free (stats);
}

GST_END_TEST;

/* leaky: a frame that finds max-in-flight frames in the mesh is dropped
 * (the chain does not block); without leaky the same pushes all go
 * through. */
GST_START_TEST (test_leaky_drops_when_full)
{
  const guint pushes = 5;
  GstElement *element = make_element (1, 1, "builtin:stamp?step-ms=200");
  GstHarness *h;
  GstStructure *stats;
  guint64 dropped, out = 0;
  GstBuffer *buf;

  g_object_set (element, "leaky", TRUE, "max-in-flight", 1, NULL);
  h = make_harness (element);
  for (guint i = 0; i < pushes; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  gst_buffer_unref (gst_harness_pull (h));
  out++;
  while ((buf = gst_harness_try_pull (h)) != NULL) {
    gst_buffer_unref (buf);
    out++;
  }
  stats = stop_and_check_stats (h, out);
  dropped = stat_u64 (stats, "dropped-leaky");
  fail_unless (dropped >= pushes - 2, "only %" G_GUINT64_FORMAT " dropped",
      dropped);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-in"), pushes);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-out") + dropped +
      stat_u64 (stats, "dropped-flush"), pushes);
  gst_structure_free (stats);
}

GST_END_TEST;

/* ---- EOS drains every chunk in flight ---------------------------------- */

GST_START_TEST (test_eos_drains_in_flight)
{
  const guint frames = 10;
  GstHarness *h = make_harness (make_element (2, 4,
          "builtin:stamp?step-ms=25"));
  GstStructure *stats;
  GstEvent *event;
  guint buffers = 0;

  for (guint i = 0; i < frames; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  /* 100 ms of work per frame: frames are surely still in flight. */
  stats = get_stats (h->element);
  fail_unless (stat_u64 (stats, "frames-in") == frames);
  fail_unless (stat_u64 (stats, "frames-out") < frames,
      "nothing was in flight at EOS: the test proves nothing");
  gst_structure_free (stats);

  for (;;) {
    GstBuffer *out = gst_harness_pull (h);
    fail_unless (out != NULL, "only %u of %u frames before EOS", buffers,
        frames);
    check_stamped (out, buffers, 4);
    gst_buffer_unref (out);
    if (++buffers == frames)
      break;
  }
  /* EOS comes after the last frame, and nothing follows it. */
  while ((event = gst_harness_pull_event (h)) != NULL) {
    gboolean eos = GST_EVENT_TYPE (event) == GST_EVENT_EOS;
    gst_event_unref (event);
    if (eos)
      break;
  }
  fail_unless (event != NULL, "EOS never came out");
  fail_unless (gst_harness_try_pull (h) == NULL);
  stats = get_stats (h->element);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-out"), frames);
  gst_structure_free (stats);
  stop_and_check (h, frames);
}

GST_END_TEST;

/* ---- serialized events keep their place among frames in flight --------- */

typedef struct
{
  GMutex lock;
  GString *trace;               /* "B" per buffer, "E" per custom event */
} Trace;

static GstPadProbeReturn
trace_probe (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Trace *t = data;

  g_mutex_lock (&t->lock);
  if (GST_PAD_PROBE_INFO_TYPE (info) & GST_PAD_PROBE_TYPE_BUFFER)
    g_string_append_c (t->trace, 'B');
  else if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) ==
      GST_EVENT_CUSTOM_DOWNSTREAM)
    g_string_append_c (t->trace, 'E');
  g_mutex_unlock (&t->lock);
  return GST_PAD_PROBE_OK;
}

GST_START_TEST (test_events_keep_order)
{
  GstHarness *h = make_harness (make_element (2, 2,
          "builtin:stamp?step-ms=10"));
  GstPad *src = gst_element_get_static_pad (h->element, "src");
  Trace t = { 0 };

  g_mutex_init (&t.lock);
  t.trace = g_string_new (NULL);
  gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, trace_probe, &t, NULL);
  for (guint i = 0; i < 6; i++) {
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
    if (i == 2 || i == 4)
      fail_unless (gst_harness_push_event (h,
              gst_event_new_custom (GST_EVENT_CUSTOM_DOWNSTREAM,
                  gst_structure_new_empty ("marker"))));
  }
  for (guint i = 0; i < 6; i++) {
    GstBuffer *out = gst_harness_pull (h);
    check_stamped (out, i, 2);
    gst_buffer_unref (out);
  }
  /* The last marker may still be on its way out after frame 5's pull. */
  for (guint tries = 0; tries < 200; tries++) {
    g_mutex_lock (&t.lock);
    gboolean done = t.trace->len == 8;
    g_mutex_unlock (&t.lock);
    if (done)
      break;
    g_usleep (10000);
  }
  fail_unless_equals_string (t.trace->str, "BBBEBBEB");
  gst_object_unref (src);
  stop_and_check (h, 6);
  g_string_free (t.trace, TRUE);
  g_mutex_clear (&t.lock);
}

GST_END_TEST;

/* ---- flushing discards what is in flight; the stream goes on ----------- */

GST_START_TEST (test_flush_discards_and_recovers)
{
  GstHarness *h = make_harness (make_element (2, 2,
          "builtin:stamp?step-ms=20"));
  GstStructure *stats;
  guint pulled = 0;
  GstBuffer *out;

  for (guint i = 0; i < 3; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_start ()));
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_stop (TRUE)));
  fail_unless (gst_harness_push_event (h,
          gst_event_new_segment (&(GstSegment) {
              .format = GST_FORMAT_TIME,.rate = 1.0,.applied_rate = 1.0,
              .stop = GST_CLOCK_TIME_NONE,.duration = GST_CLOCK_TIME_NONE})));
  /* Frames pushed before the flush may or may not have come out. */
  while ((out = gst_harness_try_pull (h)) != NULL) {
    gst_buffer_unref (out);
    pulled++;
  }
  for (guint i = 3; i < 8; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  for (guint i = 3; i < 8; i++) {
    out = gst_harness_pull (h);
    /* Any late pre-flush frame here would be a bug: it must be dropped. */
    check_stamped (out, i, 2);
    gst_buffer_unref (out);
  }
  stats = stop_and_check_stats (h, 8);
  /* Every frame accounted for: pushed out or dropped by the flush. */
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-in"), 8);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-out")
      + stat_u64 (stats, "dropped-flush"), 8);
  fail_unless_equals_uint64 (stat_u64 (stats, "frames-out"), 5 + pulled);
  fail_unless_equals_uint64 (stat_u64 (stats, "dropped-error"), 0);
  gst_structure_free (stats);
}

GST_END_TEST;

/* ---- the default model really diffuses --------------------------------- */

GST_START_TEST (test_anisotropic_smooths)
{
  GstHarness *h = make_harness (make_element (2, 4, "builtin:anisotropic"));
  GstBuffer *in = make_frame (0), *out;
  GstMapInfo a, b;
  GRand *rand = g_rand_new_with_seed (7);
  gdouble rough_in = 0, rough_out = 0;

  /* Flat grey plus small noise: diffusion must flatten it. */
  gst_buffer_map (in, &a, GST_MAP_WRITE);
  for (gsize i = 0; i < a.size; i++)
    a.data[i] = (i % 4 == 3) ? 255 : 128 + g_rand_int_range (rand, -8, 9);
  gst_buffer_unmap (in, &a);
  gst_buffer_ref (in);
  fail_unless_equals_int (gst_harness_push (h, in), GST_FLOW_OK);
  out = gst_harness_pull (h);
  fail_unless (out != NULL);
  gst_buffer_map (in, &a, GST_MAP_READ);
  gst_buffer_map (out, &b, GST_MAP_READ);
  for (gsize i = 4; i < a.size; i++) {
    if (i % 4 == 3)
      continue;
    rough_in += ABS ((gint) a.data[i] - (gint) a.data[i - 4]);
    rough_out += ABS ((gint) b.data[i] - (gint) b.data[i - 4]);
  }
  gst_buffer_unmap (in, &a);
  gst_buffer_unmap (out, &b);
  GST_INFO ("roughness %f → %f", rough_in, rough_out);
  fail_unless (rough_out < 0.5 * rough_in, "roughness %f → %f", rough_in,
      rough_out);
  gst_buffer_unref (in);
  gst_buffer_unref (out);
  g_rand_free (rand);
  stop_and_check (h, 1);
}

GST_END_TEST;

/* ---- latency: measured, reported, announced ---------------------------- */

GST_START_TEST (test_latency_reported)
{
  /* Two workers of 20 ms each: a frame spends at least 40 ms in the mesh. */
  GstHarness *h = make_harness (make_element (2, 2,
          "builtin:stamp?step-ms=20"));
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;
  GstClockTime min;

  gst_element_set_bus (h->element, bus);
  gst_harness_set_upstream_latency (h, 0);
  for (guint i = 0; i < 3; i++) {
    GstBuffer *out;
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
    out = gst_harness_pull (h);
    check_stamped (out, i, 2);
    gst_buffer_unref (out);
  }
  /* The first measurement asks the pipeline to recompute its latency. */
  msg = gst_bus_timed_pop_filtered (bus, 5 * GST_SECOND, GST_MESSAGE_LATENCY);
  fail_unless (msg != NULL, "no LATENCY message");
  gst_message_unref (msg);
  min = gst_harness_query_latency (h);
  GST_INFO ("latency %" GST_TIME_FORMAT, GST_TIME_ARGS (min));
  fail_unless (min >= 40 * GST_MSECOND, "latency %" GST_TIME_FORMAT
      " is below the 40 ms of compute", GST_TIME_ARGS (min));
  gst_element_set_bus (h->element, NULL);
  gst_object_unref (bus);
  stop_and_check (h, 3);
}

GST_END_TEST;

/* ---- start/stop many times in one process ------------------------------ */

GST_START_TEST (test_start_stop_cycles)
{
  for (guint cycle = 0; cycle < START_STOP_CYCLES; cycle++) {
    GstHarness *h = make_harness (make_element (2, 2, "builtin:stamp"));
    for (guint i = 0; i < CYCLE_FRAMES; i++)
      fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
          GST_FLOW_OK);
    for (guint i = 0; i < CYCLE_FRAMES; i++) {
      GstBuffer *out = gst_harness_pull (h);
      check_stamped (out, i, 2);
      gst_buffer_unref (out);
    }
    /* Also checks that no worker is left behind after each stop. */
    stop_and_check (h, CYCLE_FRAMES);
  }
}

GST_END_TEST;

/* ---- clear errors in bounded time -------------------------------------- */

GST_START_TEST (test_more_ranks_than_steps)
{
  GstElement *e = make_element (4, 3, "builtin:stamp");
  const gchar *needles[] = { "ranks=4", "steps=3", NULL };

  g_object_set (e, "timeout-ms", ERROR_TIMEOUT_MS, NULL);
  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, needles);
  fail_unless_equals_int (pp_check_count_descendants (PP_CHECK_WORKER_COMM),
      0);
}

GST_END_TEST;

GST_START_TEST (test_missing_worker)
{
  GstElement *e = make_element (2, 4, "builtin:stamp");
  const gchar *path = "/nonexistent/ppdiffuse-worker";
  const gchar *needles[] = { path, "worker", NULL };

  g_object_set (e, "timeout-ms", ERROR_TIMEOUT_MS, "worker", path, NULL);
  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, needles);
}

GST_END_TEST;

GST_START_TEST (test_unknown_model)
{
  GstElement *e = make_element (2, 4, "builtin:nosuchmodel");
  const gchar *needles[] = { "nosuchmodel", NULL };

  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, needles);
}

GST_END_TEST;

GST_START_TEST (test_cuda_backend_unavailable)
{
  GstElement *e = make_element (2, 4, "builtin:stamp");
  const gchar *needles[] = { "backend=cuda", NULL };

  gst_util_set_object_arg (G_OBJECT (e), "backend", "cuda");
  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, needles);
}

GST_END_TEST;

static Suite *
ppdiffuse_suite (void)
{
  Suite *s = suite_create ("ppdiffuse");
  TCase *tc;

  tc = tcase_create ("schedule");
  tcase_add_loop_test (tc, test_stamp_matrix, 0, G_N_ELEMENTS (matrix));
  suite_add_tcase (s, tc);

  tc = tcase_create ("stream");
  tcase_add_test (tc, test_warm_up);
  tcase_add_test (tc, test_qos_drops_late);
  tcase_add_test (tc, test_leaky_drops_when_full);
  tcase_add_test (tc, test_eos_drains_in_flight);
  tcase_add_test (tc, test_events_keep_order);
  tcase_add_test (tc, test_flush_discards_and_recovers);
  tcase_add_test (tc, test_anisotropic_smooths);
  tcase_add_test (tc, test_latency_reported);
  suite_add_tcase (s, tc);

  tc = tcase_create ("lifecycle");
  tcase_add_test (tc, test_start_stop_cycles);
  suite_add_tcase (s, tc);

  tc = tcase_create ("errors");
  tcase_add_test (tc, test_more_ranks_than_steps);
  tcase_add_test (tc, test_missing_worker);
  tcase_add_test (tc, test_unknown_model);
  tcase_add_test (tc, test_cuda_backend_unavailable);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  gst_check_init (&argc, &argv);
  pp_check_run_and_exit (ppdiffuse_suite (), "ppdiffuse", __FILE__);
}
