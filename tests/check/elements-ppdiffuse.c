/* ppdiffuse — element tests with a real worker mesh (MPI_Comm_spawn). */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/video/video.h>
#include <glib/gstdio.h>

#include <string.h>

#include "pp-check-util.h"
#include "pp-protocol.h"

#define WIDTH 64
#define HEIGHT 48
#define FPS 25
#define FRAME_DURATION (GST_SECOND / FPS)
#define CAPS_STR "video/x-raw,format=RGBA,width=64,height=48,framerate=25/1"
#define MATRIX_FRAMES 50
#define START_STOP_CYCLES 20
/* A sanitizer reports what goes wrong in a cycle the first time it runs. */
#define START_STOP_CYCLES_SANITIZED 4
#define CYCLE_FRAMES 3
#define ERROR_TIMEOUT_MS 3000
/* Bound of every wait for a bus message. */
#define MESSAGE_TIMEOUT (5 * GST_SECOND)

/* ---- frames ------------------------------------------------------------ */

/* A frame with the pixels of frame @content at the time of frame
 * @index. */
static GstBuffer *
make_frame_like (guint content, guint index)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, WIDTH * HEIGHT * 4, NULL);
  GstMapInfo map;

  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  pp_check_fill_pattern (map.data, WIDTH * 4, WIDTH, HEIGHT, content);
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

static GstBuffer *
make_frame (guint index)
{
  return make_frame_like (index, index);
}

/* Checks that the pixels at @data (laid out with @offset and @stride) are
 * frame @index after steps 0..n_steps-1, each once and in order, alpha
 * untouched. */
static void
check_stamped_pixels (const guint8 * data, gsize offset, gsize stride,
    guint index, guint n_steps)
{
  g_autofree gchar *why = NULL;

  if (!pp_check_is_stamped (data + offset, stride, WIDTH, HEIGHT, index,
          n_steps, 0, &why))
    fail ("%s", why);
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
  check_stamped_pixels (map.data, 0, WIDTH * 4, index, n_steps);
  gst_buffer_unmap (out, &map);
}

/* Pushes frames 0..@n-1, all in flight at once, then pulls them and
 * checks that each is its own frame after @n_steps steps. */
static void
push_and_check_stamped (GstHarness * h, guint n, guint n_steps)
{
  for (guint i = 0; i < n; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  for (guint i = 0; i < n; i++) {
    GstBuffer *out = gst_harness_pull (h);
    check_stamped (out, i, n_steps);
    gst_buffer_unref (out);
  }
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
  stats = pp_check_get_stats (element);
  /* mesh-chunks is only filled when the shutdown marker came back. */
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "mesh-chunks"), frames);
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

/* The rows a sanitizer's run takes: each rank count and each step count
 * once, which is every slicing rank 0 and the workers meet; the plain run
 * takes every pair. */
static const guint matrix_diagonal[] = { 0, 4, 8 };

GST_START_TEST (test_stamp_matrix)
{
  guint row = pp_check_sanitized ()? matrix_diagonal[__i__] : (guint) __i__;
  guint ranks = matrix[row][0], steps = matrix[row][1];
  GstHarness *h = pp_check_harness_new (pp_check_make_element (ranks, steps,
          "builtin:stamp"), CAPS_STR);

  GST_INFO ("ranks=%u steps=%u", ranks, steps);
  push_and_check_stamped (h, MATRIX_FRAMES, steps);
  fail_unless (gst_harness_try_pull (h) == NULL, "an extra frame came out");
  stop_and_check (h, MATRIX_FRAMES);
}

GST_END_TEST;

/* ---- warm-up: one pass before the first frame, invisible downstream ---- */

GST_START_TEST (test_warm_up)
{
  GstElement *element = pp_check_make_element (2, 4, "builtin:stamp");
  GstHarness *h;
  GstStructure *stats;

  g_object_set (element, "warm-up", TRUE, NULL);
  h = pp_check_harness_new (element, CAPS_STR);
  /* Every frame comes out once, stamped by exactly its own steps: the
   * pass neither shows up nor disturbs the stream. */
  push_and_check_stamped (h, MATRIX_FRAMES, 4);
  fail_unless (gst_harness_try_pull (h) == NULL, "an extra frame came out");
  /* mesh-chunks counts the frames only */
  stats = stop_and_check_stats (h, MATRIX_FRAMES);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "warm-up-passes"), 1);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-in"), MATRIX_FRAMES);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out"), MATRIX_FRAMES);
  gst_structure_free (stats);
}

GST_END_TEST;

/* The doorbells (mpi-helper/wire/pp-bells.h): rank 0 and both workers, on
 * this host, map them while the mesh runs, and each rank's bell rang for
 * every frame that came to it (and rank 0's also for each one it sent);
 * their name is gone from /dev/shm once the mesh is up, and rank 0's
 * mapping goes with the mesh. */
GST_START_TEST (test_doorbells)
{
  GstElement *element = pp_check_make_element (2, 2, "builtin:stamp");
  g_autoptr (GArray) workers = NULL;
  GstHarness *h = pp_check_harness_new (element, CAPS_STR);

  push_and_check_stamped (h, 2, 2);
  workers = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (workers->len, 2);
  fail_unless_equals_int (pp_check_count_bells_mapped (workers), 2);
  fail_unless_equals_int (pp_check_count_bells_mapped (NULL), 1);
  fail_unless_equals_int (pp_check_count_bells_files (), 0);
  for (guint rank = 0; rank <= 2; rank++)
    fail_unless (pp_check_bell_rings (rank) >= 2, "rank %u's bell rang %"
        G_GUINT64_FORMAT " times for 2 frames", rank,
        pp_check_bell_rings (rank));
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  fail_unless_equals_int (pp_check_count_bells_mapped (NULL), 0);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* PPDIFFUSE_NO_BELLS=1: no doorbells anywhere, and the frames flow as
 * they do between hosts (every wait polls). */
GST_START_TEST (test_no_doorbells)
{
  GstElement *element = pp_check_make_element (2, 2, "builtin:stamp");
  g_autoptr (GArray) workers = NULL;
  GstHarness *h;

  g_setenv ("PPDIFFUSE_NO_BELLS", "1", TRUE);
  h = pp_check_harness_new (element, CAPS_STR);
  push_and_check_stamped (h, 2, 2);
  workers = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (workers->len, 2);
  fail_unless_equals_int (pp_check_count_bells_mapped (workers), 0);
  fail_unless_equals_int (pp_check_count_bells_mapped (NULL), 0);
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_harness_teardown (h);
  g_unsetenv ("PPDIFFUSE_NO_BELLS");
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
  GstHarness *h = pp_check_harness_new (pp_check_make_element (1, 1,
          "builtin:stamp"), CAPS_STR);
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
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "dropped-qos"), n_late);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-in"), n_before + n_late + 1);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out"), n_before + 1);
  gst_structure_free (stats);
}

GST_END_TEST;

/* leaky: a frame that finds max-in-flight frames in the mesh is dropped
 * (the chain does not block); without leaky the same pushes all go
 * through. */
GST_START_TEST (test_leaky_drops_when_full)
{
  const guint pushes = 5;
  GstElement *element = pp_check_make_element (1, 1, "builtin:stamp?step-ms=200");
  GstHarness *h;
  GstStructure *stats;
  guint64 dropped, out = 0;
  GstBuffer *buf;

  g_object_set (element, "leaky", TRUE, "max-in-flight", 1, NULL);
  h = pp_check_harness_new (element, CAPS_STR);
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
  dropped = pp_check_stat_u64 (stats, "dropped-leaky");
  fail_unless (dropped >= pushes - 2, "only %" G_GUINT64_FORMAT " dropped",
      dropped);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-in"), pushes);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out") + dropped +
      pp_check_stat_u64 (stats, "dropped-flush"), pushes);
  gst_structure_free (stats);
}

GST_END_TEST;

/* ---- EOS drains every chunk in flight ---------------------------------- */

GST_START_TEST (test_eos_drains_in_flight)
{
  const guint frames = 10;
  GstHarness *h = pp_check_harness_new (pp_check_make_element (2, 4,
          "builtin:stamp?step-ms=25"), CAPS_STR);
  GstStructure *stats;
  GstEvent *event;
  guint buffers = 0;

  for (guint i = 0; i < frames; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  /* 100 ms of work per frame: frames are surely still in flight. */
  stats = pp_check_get_stats (h->element);
  fail_unless (pp_check_stat_u64 (stats, "frames-in") == frames);
  fail_unless (pp_check_stat_u64 (stats, "frames-out") < frames,
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
  stats = pp_check_get_stats (h->element);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out"), frames);
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
  Trace t = { 0 };
  GstHarness *h;
  GstPad *src;

  /* Made before the element's threads start: the probe runs on its src
   * task, and that start is the hand-over ThreadSanitizer can see (the
   * pad's own lock, through which the probe is added, it cannot). */
  g_mutex_init (&t.lock);
  t.trace = g_string_new (NULL);
  h = pp_check_harness_new (pp_check_make_element (2, 2,
          "builtin:stamp?step-ms=10"), CAPS_STR);
  src = gst_element_get_static_pad (h->element, "src");
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
  GstHarness *h = pp_check_harness_new (pp_check_make_element (2, 2,
          "builtin:stamp?step-ms=20"), CAPS_STR);
  GstStructure *stats;
  guint pulled = 0;
  GstBuffer *out;

  for (guint i = 0; i < 3; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  pp_check_harness_flush (h);
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
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-in"), 8);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out")
      + pp_check_stat_u64 (stats, "dropped-flush"), 8);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out"), 5 + pulled);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "dropped-error"), 0);
  gst_structure_free (stats);
}

GST_END_TEST;

/* ---- the default model really diffuses --------------------------------- */

GST_START_TEST (test_anisotropic_smooths)
{
  GstHarness *h = pp_check_harness_new (pp_check_make_element (2, 4,
          "builtin:anisotropic"), CAPS_STR);
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
  GstHarness *h = pp_check_harness_new (pp_check_make_element (2, 2,
          "builtin:stamp?step-ms=20"), CAPS_STR);
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
  const guint cycles = pp_check_repeats (START_STOP_CYCLES,
      START_STOP_CYCLES_SANITIZED);

  for (guint cycle = 0; cycle < cycles; cycle++) {
    GstHarness *h = pp_check_harness_new (pp_check_make_element (2, 2,
            "builtin:stamp"), CAPS_STR);

    push_and_check_stamped (h, CYCLE_FRAMES, 2);
    /* Also checks that no worker is left behind after each stop. */
    stop_and_check (h, CYCLE_FRAMES);
  }
}

GST_END_TEST;

/* PMIX_MCA_gds as this process found it, before any start (NULL: unset). */
static gchar *app_pmix_gds;

/* The value of @name in process @pid's environment, or NULL. */
static gchar *
process_env (gint pid, const gchar * name)
{
  g_autofree gchar *path = g_strdup_printf ("/proc/%d/environ", pid);
  g_autofree gchar *contents = NULL;
  const gsize name_len = strlen (name);
  gsize len = 0;

  if (!g_file_get_contents (path, &contents, &len, NULL))
    return NULL;
  for (gsize at = 0; at < len; at += strlen (contents + at) + 1)
    if (strncmp (contents + at, name, name_len) == 0
        && contents[at + name_len] == '=')
      return g_strdup (contents + at + name_len + 1);
  return NULL;
}

/* The workers run with the PMIx store rank 0 chose before it initialised
 * MPI (pp-mpi-start.c): the hash store, or the application's own choice,
 * inherited through Open MPI's daemon. */
GST_START_TEST (test_workers_inherit_pmix_store)
{
  const gchar *want = app_pmix_gds != NULL ? app_pmix_gds : PP_PMIX_GDS;
  GstHarness *h = pp_check_harness_new (pp_check_make_element (2, 2,
          "builtin:stamp"), CAPS_STR);
  GArray *workers;

  push_and_check_stamped (h, CYCLE_FRAMES, 2);
  fail_unless_equals_string (g_getenv (PP_PMIX_GDS_ENV), want);
  workers = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (workers->len, 2);
  for (guint i = 0; i < workers->len; i++) {
    g_autofree gchar *got = process_env (g_array_index (workers, gint, i),
        PP_PMIX_GDS_ENV);

    fail_unless_equals_string (got, want);
  }
  g_array_unref (workers);
  stop_and_check (h, CYCLE_FRAMES);
}

GST_END_TEST;

/* ---- clear errors in bounded time -------------------------------------- */

GST_START_TEST (test_more_ranks_than_steps)
{
  GstElement *e = pp_check_make_element (4, 3, "builtin:stamp");
  const gchar *needles[] = { "ranks=4", "steps=3", NULL };

  g_object_set (e, "timeout-ms", ERROR_TIMEOUT_MS, NULL);
  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, needles);
  fail_unless_equals_int (pp_check_count_descendants (PP_CHECK_WORKER_COMM),
      0);
}

GST_END_TEST;

GST_START_TEST (test_missing_worker)
{
  GstElement *e = pp_check_make_element (2, 4, "builtin:stamp");
  const gchar *path = "/nonexistent/ppdiffuse-worker";
  const gchar *needles[] = { path, "worker", NULL };

  g_object_set (e, "timeout-ms", ERROR_TIMEOUT_MS, "worker", path, NULL);
  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, needles);
}

GST_END_TEST;

GST_START_TEST (test_unknown_model)
{
  GstElement *e = pp_check_make_element (2, 4, "builtin:nosuchmodel");
  const gchar *needles[] = { "nosuchmodel", NULL };

  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, needles);
}

GST_END_TEST;

/* A model path that is not there says so, and what a model can be; a
 * prompt on a built-in model says they take none.  Both before any spawn. */
GST_START_TEST (test_model_mistakes)
{
  const gchar *missing[] = { "'/nonexistent/sd-turbo' does not exist",
    "builtin:stamp, builtin:anisotropic, a diffusers pipeline", NULL
  };
  const gchar *prompt[] = { "built-in models take no prompt", NULL };
  GstElement *e = pp_check_make_element (2, 4, "/nonexistent/sd-turbo");

  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, missing);
  fail_unless_equals_int (pp_check_count_descendants ("ppdiffuse-worker"), 0);

  e = pp_check_make_element (2, 4, "builtin:anisotropic");
  g_object_set (e, "prompt", "a cat", NULL);
  pp_check_expect_start_failure (e, ERROR_TIMEOUT_MS, prompt);
  fail_unless_equals_int (pp_check_count_descendants ("ppdiffuse-worker"), 0);
}

GST_END_TEST;

/* No GPU on the test machines: backend=cuda fails at start, before any
 * worker is spawned, naming rank 0 and what CUDA said (or that the build
 * has no CUDA): the module loaded in the plugin, so the runtime could say
 * it. */
#define CUDA_FAILURE_WITHIN_MS 3000

GST_START_TEST (test_cuda_backend_unavailable)
{
#ifdef PP_TEST_HAVE_CUDA
  /* What the runtime said: the plugin loaded the CUDA module. */
  const gchar *needles[] = { "rank 0 (pid", "no usable CUDA device", NULL };
#else
  const gchar *needles[] = { "rank 0 (pid", "no CUDA backend", NULL };
#endif
  GstElement *e = pp_check_make_element (2, 4, "builtin:stamp");

  gst_util_set_object_arg (G_OBJECT (e), "backend", "cuda");
  pp_check_expect_start_failure (e, CUDA_FAILURE_WITHIN_MS, needles);
  fail_unless_equals_int (pp_check_wait_descendants_gone ("ppdiffuse-worker",
          ERROR_TIMEOUT_MS), 0);
}

GST_END_TEST;

/* backend=auto on a machine without a GPU computes on the CPU, quietly:
 * whether or not the build has CUDA, no warning (the reason CUDA was
 * passed over is logged at info level). */
GST_START_TEST (test_auto_backend_falls_back)
{
  GstElement *e = pp_check_make_element (1, 1, "builtin:stamp");
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;

  if (g_getenv ("PPDIFFUSE_BACKEND") != NULL) {
    GST_INFO ("PPDIFFUSE_BACKEND names the backend: nothing to fall back");
    gst_object_unref (bus);
    gst_object_unref (e);
    return;
  }
  gst_element_set_bus (e, bus);
  fail_unless (gst_element_set_state (e, GST_STATE_PAUSED)
      != GST_STATE_CHANGE_FAILURE);
  msg = gst_bus_timed_pop_filtered (bus, 0, GST_MESSAGE_WARNING);
  if (msg != NULL) {
    GError *warning = NULL;

    gst_message_parse_warning (msg, &warning, NULL);
    fail ("a warning on the CPU fallback: '%s'", warning->message);
  }
  gst_element_set_state (e, GST_STATE_NULL);
  gst_element_set_bus (e, NULL);
  gst_object_unref (bus);
  gst_object_unref (e);
}

GST_END_TEST;

/* cuda-device-id names a GPU of the cuda backend: with a CPU backend the
 * start fails naming both settings, with auto it asks for cuda (here, no
 * GPU: the failure of backend=cuda), in bounded time and before any
 * worker is spawned.  -1 (unset) by default. */
GST_START_TEST (test_cuda_device_id)
{
  const gchar *cpu[] = { "cuda-device-id=1 names a GPU of the cuda backend",
    "backend is cpu", "set backend=cuda", NULL
  };
#ifdef PP_TEST_HAVE_CUDA
  const gchar *on_auto[] = { "rank 0 (pid", "no usable CUDA device", NULL };
#else
  const gchar *on_auto[] = { "rank 0 (pid", "no CUDA backend", NULL };
#endif
  GstElement *e = pp_check_make_element (1, 1, "builtin:stamp");
  gint id = 0;

  g_object_get (e, "cuda-device-id", &id, NULL);
  fail_unless_equals_int (id, -1);
  g_object_set (e, "cuda-device-id", 1, NULL);
  gst_util_set_object_arg (G_OBJECT (e), "backend", "cpu");
  pp_check_expect_start_failure (e, CUDA_FAILURE_WITHIN_MS, cpu);
  e = pp_check_make_element (1, 1, "builtin:stamp");
  g_object_set (e, "cuda-device-id", 0, NULL);
  if (g_getenv ("PPDIFFUSE_BACKEND") == NULL)
    pp_check_expect_start_failure (e, CUDA_FAILURE_WITHIN_MS, on_auto);
  else
    gst_object_unref (e);
  fail_unless_equals_int (pp_check_wait_descendants_gone ("ppdiffuse-worker",
          ERROR_TIMEOUT_MS), 0);
}

GST_END_TEST;

/* dtype: auto by default, the values by name; a pipeline directory's URI
 * carries it to every rank (the tiny-pipeline tests run it). */
GST_START_TEST (test_dtype_property)
{
  GstElement *e = pp_check_make_element (1, 1, "builtin:stamp");
  const gchar *const names[] = { "f32", "f16", "bf16", "auto" };
  gint value = -1;

  g_object_get (e, "dtype", &value, NULL);
  fail_unless_equals_int (value, 0);
  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    GEnumValue *v;

    gst_util_set_object_arg (G_OBJECT (e), "dtype", names[i]);
    g_object_get (e, "dtype", &value, NULL);
    v = g_enum_get_value (g_type_class_peek (G_PARAM_SPEC_VALUE_TYPE
            (g_object_class_find_property (G_OBJECT_GET_CLASS (e),
                    "dtype"))), value);
    fail_unless_equals_string (v->value_nick, names[i]);
  }
  gst_object_unref (e);
}

GST_END_TEST;

/* ---- leaky: each dropped frame announced, the next one out DISCONT ----- */

/* leaky with one frame allowed in flight and 500 ms of work per frame:
 * the frames pushed while one computes are dropped, each with a QOS
 * message that names it and counts the drops so far, and the first frame
 * out after a drop carries DISCONT; the ones before and after do not. */
GST_START_TEST (test_leaky_qos_and_discont)
{
  const guint first = 1, pushes = 5, late_pushes = 2;
  GstElement *element = pp_check_make_element (1, 1, "builtin:stamp?step-ms=500");
  GstBus *bus = gst_bus_new ();
  gboolean dropped[8] = { FALSE };
  gboolean discont_due = FALSE;
  guint64 n_dropped = 0;
  GstStructure *stats;
  GstHarness *h;
  GstMessage *msg;

  g_object_set (element, "leaky", TRUE, "max-in-flight", 1, NULL);
  gst_element_set_bus (element, bus);
  h = pp_check_harness_new (element, CAPS_STR);
  /* one frame that computes, then frames that find the mesh full */
  for (guint i = first; i < first + pushes - late_pushes; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
        GST_FLOW_OK);
  /* drop_frame posts before the chain returns: the messages are here */
  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_QOS)) != NULL) {
    GstClockTime running, stream, timestamp, duration;
    guint64 processed, count;
    gboolean live;
    GstFormat format;
    guint index;

    gst_message_parse_qos (msg, &live, &running, &stream, &timestamp,
        &duration);
    gst_message_parse_qos_stats (msg, &format, &processed, &count);
    fail_unless (GST_MESSAGE_SRC (msg) == GST_OBJECT (element));
    index = (guint) (timestamp / FRAME_DURATION);
    fail_unless (index > first && index < first + pushes - late_pushes,
        "QOS message for frame %u, which was not dropped", index);
    fail_unless_equals_uint64 (timestamp, index * FRAME_DURATION);
    fail_unless_equals_uint64 (running, index * FRAME_DURATION);
    fail_unless_equals_uint64 (duration, FRAME_DURATION);
    fail_unless_equals_int (format, GST_FORMAT_BUFFERS);
    fail_unless_equals_uint64 (count, ++n_dropped);
    fail_unless_equals_uint64 (processed, index - first + 1 - n_dropped);
    fail_if (dropped[index], "two QOS messages for frame %u", index);
    dropped[index] = TRUE;
    gst_message_unref (msg);
  }
  fail_unless (n_dropped > 0, "no frame was dropped: the test proves nothing");
  /* The rest go in one by one, each after the last came out. */
  for (guint i = first; i < first + pushes; i++) {
    GstBuffer *out;

    if (i >= first + pushes - late_pushes)
      fail_unless_equals_int (gst_harness_push (h, make_frame (i)),
          GST_FLOW_OK);
    if (dropped[i]) {
      discont_due = TRUE;
      continue;
    }
    out = gst_harness_pull (h);
    fail_unless (out != NULL);
    fail_unless_equals_uint64 (GST_BUFFER_PTS (out), i * FRAME_DURATION);
    fail_unless_equals_int (GST_BUFFER_FLAG_IS_SET (out,
            GST_BUFFER_FLAG_DISCONT), discont_due);
    check_stamped (out, i, 1);
    discont_due = FALSE;
    gst_buffer_unref (out);
  }
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_QOS) == NULL,
      "a QOS message without a drop");
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  stats = stop_and_check_stats (h, pushes - n_dropped);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "dropped-leaky"), n_dropped);
  gst_structure_free (stats);
}

GST_END_TEST;

/* ---- LATENCY query: the max term ----------------------------------------- */

/* What the upstream end answers to a LATENCY query, and the harness's own
 * query function for everything else. */
static GstClockTime upstream_min, upstream_max;
static GstPadQueryFunction harness_src_query;

static gboolean
upstream_latency_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  if (GST_QUERY_TYPE (query) != GST_QUERY_LATENCY)
    return harness_src_query (pad, parent, query);
  gst_query_set_latency (query, TRUE, upstream_min, upstream_max);
  return TRUE;
}

/* The element's answer, as downstream asks it. */
static void
query_latency (GstHarness * h, GstClockTime * min, GstClockTime * max)
{
  GstQuery *query = gst_query_new_latency ();
  gboolean live;

  fail_unless (gst_pad_peer_query (h->sinkpad, query));
  gst_query_parse_latency (query, &live, min, max);
  fail_unless (live);
  gst_query_unref (query);
}

/* max = upstream max + max-in-flight × frame duration when both are
 * known, else none; min = upstream min + the measured latency. */
GST_START_TEST (test_latency_query_max)
{
  const guint limit = 3;
  GstElement *element = pp_check_make_element (1, 1, "builtin:stamp");
  GstClockTime min, max;
  GstStructure *stats;
  GstHarness *h;

  g_object_set (element, "max-in-flight", limit, NULL);
  h = pp_check_harness_new (element, CAPS_STR);
  harness_src_query = GST_PAD_QUERYFUNC (h->srcpad);
  gst_pad_set_query_function (h->srcpad, upstream_latency_query);
  fail_unless_equals_int (gst_harness_push (h, make_frame (0)), GST_FLOW_OK);
  gst_buffer_unref (gst_harness_pull (h));

  upstream_min = 10 * GST_MSECOND;
  upstream_max = 100 * GST_MSECOND;
  query_latency (h, &min, &max);
  stats = pp_check_get_stats (element);
  fail_unless_equals_uint64 (min, upstream_min + pp_check_stat_u64 (stats, "latency"));
  gst_structure_free (stats);
  fail_unless_equals_uint64 (max, upstream_max + limit * FRAME_DURATION);

  /* Upstream without a bound: none either. */
  upstream_max = GST_CLOCK_TIME_NONE;
  query_latency (h, &min, &max);
  fail_unless_equals_uint64 (max, GST_CLOCK_TIME_NONE);

  /* No frame rate, no frame duration: none. */
  upstream_max = 100 * GST_MSECOND;
  gst_harness_set_src_caps_str (h,
      "video/x-raw,format=RGBA,width=64,height=48,framerate=0/1");
  query_latency (h, &min, &max);
  fail_unless_equals_uint64 (max, GST_CLOCK_TIME_NONE);
  stop_and_check (h, 1);
}

GST_END_TEST;

/* ---- LATENCY message: posted again when the latency grows --------------- */

/* After the first frame's message and a query, steady frames post nothing;
 * a burst that queues frames in the mesh makes the latency grow past
 * 1.25 × the last reported value, and the element posts LATENCY again. */
GST_START_TEST (test_latency_message_on_growth)
{
  const guint steady = 3, burst = 6;
  /* Steps long enough that a loaded machine's hiccup cannot pass for a
   * 1.25× growth while the latency holds. */
  GstElement *element = pp_check_make_element (1, 1, "builtin:stamp?step-ms=200");
  GstBus *bus = gst_bus_new ();
  GstClockTime min, max, first;
  GstMessage *msg;
  GstHarness *h;
  guint index = 0;

  g_object_set (element, "max-in-flight", burst, NULL);
  gst_element_set_bus (element, bus);
  h = pp_check_harness_new (element, CAPS_STR);
  gst_harness_set_upstream_latency (h, 0);
  fail_unless_equals_int (gst_harness_push (h, make_frame (index)),
      GST_FLOW_OK);
  gst_buffer_unref (gst_harness_pull (h));
  index++;
  msg = gst_bus_timed_pop_filtered (bus, MESSAGE_TIMEOUT,
      GST_MESSAGE_LATENCY);
  fail_unless (msg != NULL, "no LATENCY message after the first frame");
  gst_message_unref (msg);
  query_latency (h, &first, &max);

  /* One frame at a time: each takes as long as the first. */
  for (guint i = 0; i < steady; i++, index++) {
    fail_unless_equals_int (gst_harness_push (h, make_frame (index)),
        GST_FLOW_OK);
    gst_buffer_unref (gst_harness_pull (h));
  }
  msg = gst_bus_timed_pop_filtered (bus, MESSAGE_TIMEOUT / 10,
      GST_MESSAGE_LATENCY);
  fail_unless (msg == NULL, "LATENCY posted while the latency held");

  /* A burst: frame k waits for the k before it. */
  for (guint i = 0; i < burst; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (index + i)),
        GST_FLOW_OK);
  for (guint i = 0; i < burst; i++)
    gst_buffer_unref (gst_harness_pull (h));
  msg = gst_bus_timed_pop_filtered (bus, MESSAGE_TIMEOUT,
      GST_MESSAGE_LATENCY);
  fail_unless (msg != NULL, "no LATENCY message after the latency grew");
  gst_message_unref (msg);
  query_latency (h, &min, &max);
  GST_INFO ("latency %" GST_TIME_FORMAT " → %" GST_TIME_FORMAT,
      GST_TIME_ARGS (first), GST_TIME_ARGS (min));
  fail_unless (min * 4 >= first * 5, "latency %" GST_TIME_FORMAT " is not "
      "1.25 × %" GST_TIME_FORMAT, GST_TIME_ARGS (min), GST_TIME_ARGS (first));
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  stop_and_check (h, index + burst);
}

GST_END_TEST;

/* ---- frames of any layout: stride and offset of a GstVideoMeta ---------- */

#define ODD_OFFSET 40
#define ODD_STRIDE (WIDTH * 4 + 24)
#define ODD_TAIL 16
#define ODD_SIZE (ODD_OFFSET + ODD_STRIDE * HEIGHT + ODD_TAIL)

/* Every byte of the buffer, padding included, before the pixels go in. */
static guint8
background (gsize i)
{
  return (guint8) (i * 13 + 5);
}

/* The element asks for GstVideoMeta, and a frame whose meta says another
 * stride and offset than the caps' default comes out correctly stamped in
 * that layout, every byte outside the pixels' RGB untouched. */
GST_START_TEST (test_allocation_stride_offset)
{
  gsize offsets[GST_VIDEO_MAX_PLANES] = { ODD_OFFSET };
  gint strides[GST_VIDEO_MAX_PLANES] = { ODD_STRIDE };
  const guint index = 3, steps = 2;
  GstHarness *h = pp_check_harness_new (pp_check_make_element (1, steps,
          "builtin:stamp"), CAPS_STR);
  GstCaps *caps = gst_caps_from_string (CAPS_STR);
  GstQuery *query = gst_query_new_allocation (caps, TRUE);
  GstBuffer *in = gst_buffer_new_allocate (NULL, ODD_SIZE, NULL), *out;
  GstVideoMeta *meta;
  GstMapInfo map;

  fail_unless (gst_pad_peer_query (h->srcpad, query));
  fail_unless (gst_query_find_allocation_meta (query, GST_VIDEO_META_API_TYPE,
          NULL), "the element does not ask for GstVideoMeta");
  gst_query_unref (query);
  gst_caps_unref (caps);

  gst_buffer_map (in, &map, GST_MAP_WRITE);
  for (gsize i = 0; i < map.size; i++)
    map.data[i] = background (i);
  pp_check_fill_pattern (map.data + ODD_OFFSET, ODD_STRIDE, WIDTH, HEIGHT,
      index);
  gst_buffer_unmap (in, &map);
  gst_buffer_add_video_meta_full (in, GST_VIDEO_FRAME_FLAG_NONE,
      GST_VIDEO_FORMAT_RGBA, WIDTH, HEIGHT, 1, offsets, strides);
  GST_BUFFER_PTS (in) = index * FRAME_DURATION;
  fail_unless_equals_int (gst_harness_push (h, in), GST_FLOW_OK);

  out = gst_harness_pull (h);
  fail_unless (out != NULL);
  meta = gst_buffer_get_video_meta (out);
  fail_unless (meta != NULL && meta->offset[0] == ODD_OFFSET
      && meta->stride[0] == ODD_STRIDE, "the output lost its layout");
  gst_buffer_map (out, &map, GST_MAP_READ);
  fail_unless_equals_int (map.size, ODD_SIZE);
  check_stamped_pixels (map.data, ODD_OFFSET, ODD_STRIDE, index, steps);
  /* Bytes outside the pixels: before the offset, at the end of each row,
   * after the last row. */
  for (gsize i = 0; i < map.size; i++) {
    const gboolean pixel = i >= ODD_OFFSET
        && i < ODD_OFFSET + ODD_STRIDE * HEIGHT
        && (i - ODD_OFFSET) % ODD_STRIDE < WIDTH * 4;
    if (!pixel && map.data[i] != background (i))
      fail ("padding byte %" G_GSIZE_FORMAT " changed", i);
  }
  gst_buffer_unmap (out, &map);
  gst_buffer_unref (out);
  stop_and_check (h, 1);
}

GST_END_TEST;

/* ---- a shared input is copied, never written in place ------------------- */

/* TRUE when @buf still holds frame @index as it went in. */
static gboolean
holds_frame (GstBuffer * buf, guint index)
{
  g_autoptr (GstBuffer) expected = make_frame (index);

  return pp_check_same_bytes (expected, buf);
}

/* What a tee does: the same buffer goes to another branch too (a second
 * reference), or a copy that shares its memory does.  The other branch
 * must still see the original bytes, this one the stamped ones. */
GST_START_TEST (test_shared_input_copied)
{
  GstHarness *h = pp_check_harness_new (pp_check_make_element (1, 2,
          "builtin:stamp"), CAPS_STR);
  GstBuffer *in = make_frame (0), *shared = make_frame (1), *out;

  /* a second reference to the buffer */
  fail_unless_equals_int (gst_harness_push (h, gst_buffer_ref (in)),
      GST_FLOW_OK);
  out = gst_harness_pull (h);
  check_stamped (out, 0, 2);
  fail_unless (out != in);
  fail_unless (holds_frame (in, 0), "the other branch's buffer was written");
  gst_buffer_unref (out);

  /* a writable buffer whose memory another buffer shares */
  fail_unless_equals_int (gst_harness_push (h, gst_buffer_copy (shared)),
      GST_FLOW_OK);
  out = gst_harness_pull (h);
  check_stamped (out, 1, 2);
  fail_unless (holds_frame (shared, 1), "memory shared with another buffer "
      "was written");
  gst_buffer_unref (out);
  gst_buffer_unref (in);
  gst_buffer_unref (shared);
  stop_and_check (h, 2);
}

GST_END_TEST;

/* ---- progress messages while starting ----------------------------------- */

/* The PROGRESS messages @element posted on @bus, as "TYPE:text" lines
 * (START, CONTINUE, COMPLETE, ERROR, …); every message
 * carries the start's code, and the CONTINUE percentages never decrease. */
static gchar *
progress_stages (GstBus * bus, GstElement * element)
{
  GString *stages = g_string_new (NULL);
  gint last_percent = 0;
  GstMessage *msg;

  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_PROGRESS)) != NULL) {
    GstProgressType type;
    gchar *code, *text;
    gint percent = -1;

    fail_unless (GST_MESSAGE_SRC (msg) == GST_OBJECT (element));
    gst_message_parse_progress (msg, &type, &code, &text);
    fail_unless_equals_string (code, "ppdiffuse-start");
    if (type == GST_PROGRESS_TYPE_CONTINUE) {
      fail_unless (gst_structure_get_int (gst_message_get_structure (msg),
              "percent", &percent), "CONTINUE without percent");
      fail_unless (percent >= last_percent && percent <= 100,
          "progress went from %d%% to %d%%", last_percent, percent);
      last_percent = percent;
    }
    g_string_append_printf (stages, "%s%s:%s", stages->len ? "\n" : "",
        type == GST_PROGRESS_TYPE_START ? "START"
        : type == GST_PROGRESS_TYPE_CONTINUE ? "CONTINUE"
        : type == GST_PROGRESS_TYPE_COMPLETE ? "COMPLETE"
        : type == GST_PROGRESS_TYPE_ERROR ? "ERROR" : "OTHER", text);
    g_free (code);
    g_free (text);
    gst_message_unref (msg);
  }
  return g_string_free (stages, FALSE);
}

/* A start posts PROGRESS START, then CONTINUE for the model, the spawn and
 * every rank's handshake, then COMPLETE; a start that fails ends with
 * ERROR after the stage that failed. */
GST_START_TEST (test_progress_messages)
{
  GstElement *element = pp_check_make_element (2, 2, "builtin:stamp");
  GstBus *bus = gst_bus_new ();
  gchar *stages;

  gst_element_set_bus (element, bus);
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_PAUSED),
      GST_STATE_CHANGE_SUCCESS);
  stages = progress_stages (bus, element);
  fail_unless_equals_string (stages, "START:starting the ppdiffuse worker "
      "mesh\nCONTINUE:loading model\nCONTINUE:starting 2 workers\n"
      "CONTINUE:waiting for rank 1\nCONTINUE:rank 1 ready\n"
      "CONTINUE:waiting for rank 2\nCONTINUE:rank 2 ready\n"
      "COMPLETE:the ppdiffuse worker mesh is up");
  g_free (stages);
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);

  /* The workers cannot start. */
  g_object_set (element, "worker", "/nonexistent/ppdiffuse-worker", NULL);
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  stages = progress_stages (bus, element);
  fail_unless (g_str_has_prefix (stages, "START:starting the ppdiffuse "
          "worker mesh\nCONTINUE:loading model\nCONTINUE:starting 2 workers\n"
          "ERROR:"), "%s", stages);
  fail_unless (strstr (stages, "/nonexistent/ppdiffuse-worker") != NULL,
      "%s", stages);
  g_free (stages);
  gst_element_set_state (element, GST_STATE_NULL);

  /* A worker that exits at once: its handshake never comes. */
  g_object_set (element, "worker", "/bin/false", "timeout-ms", 2000, NULL);
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  stages = progress_stages (bus, element);
  fail_unless (g_str_has_prefix (stages, "START:starting the ppdiffuse "
          "worker mesh\nCONTINUE:loading model\nCONTINUE:starting 2 workers\n"),
      "%s", stages);
  fail_unless (strstr (stages, "\nERROR:") != NULL
      && strchr (strstr (stages, "\nERROR:") + 1, '\n') == NULL,
      "not one ERROR last: %s", stages);
  g_free (stages);
  gst_element_set_state (element, GST_STATE_NULL);

  /* The model cannot load. */
  g_object_set (element, "model", "builtin:nosuchmodel", NULL);
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  stages = progress_stages (bus, element);
  fail_unless (g_str_has_prefix (stages, "START:starting the ppdiffuse "
          "worker mesh\nCONTINUE:loading model\nERROR:"), "%s", stages);
  fail_unless (strstr (stages, "nosuchmodel") != NULL, "%s", stages);
  g_free (stages);
  gst_element_set_state (element, GST_STATE_NULL);
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  gst_object_unref (element);
}

GST_END_TEST;

/* ---- stats: mesh-wall-s and overlap-score of a known run ---------------- */

/* W workers of one step of S ms each, N frames: rank 0 measures from the
 * first submit to the last return, which lies inside the wall time seen
 * here and lasts at least (N + W - 1) × S (the last frame leaves the first
 * worker after N × S); every worker is busy at least N × S, at most the
 * whole run, so overlap-score = Σ busy / (W × mesh-wall-s) lies in
 * [N × S / mesh-wall-s, 1]. */
GST_START_TEST (test_stats_overlap)
{
  const guint workers = 2, frames = 20, step_ms = 20;
  g_autofree gchar *model = g_strdup_printf ("builtin:stamp?step-ms=%u",
      step_ms);
  GstHarness *h = pp_check_harness_new (pp_check_make_element (workers,
          workers, model), CAPS_STR);
  const gdouble step_s = step_ms / 1e3;
  gdouble wall_s, mesh_wall_s, overlap;
  GstStructure *stats;
  gint64 start;

  start = g_get_monotonic_time ();
  push_and_check_stamped (h, frames, workers);
  wall_s = (g_get_monotonic_time () - start) / 1e6;
  stats = stop_and_check_stats (h, frames);
  fail_unless (gst_structure_get_double (stats, "mesh-wall-s", &mesh_wall_s));
  fail_unless (gst_structure_get_double (stats, "overlap-score", &overlap));
  GST_INFO ("wall %.3f s, mesh-wall-s %.3f s, overlap-score %.3f", wall_s,
      mesh_wall_s, overlap);
  fail_unless (mesh_wall_s <= wall_s, "mesh-wall-s %.3f s is longer than "
      "the run, %.3f s", mesh_wall_s, wall_s);
  fail_unless (mesh_wall_s >= (frames + workers - 1) * step_s,
      "mesh-wall-s %.3f s is shorter than the work, %.3f s", mesh_wall_s,
      (frames + workers - 1) * step_s);
  fail_unless (overlap <= 1.0, "overlap-score %f above 1", overlap);
  fail_unless (overlap >= frames * step_s / mesh_wall_s, "overlap-score %f: "
      "less busy time than %u frames of %u ms per worker", overlap, frames,
      step_ms);
  gst_structure_free (stats);
}

GST_END_TEST;

/* ---- pipeline models: prompt-embeds files, the same noise every frame --- */

/* A make-tiny pipeline model, its prompt_embeds.npy [1, L, D] and the same
 * embeddings in the other forms the element takes, written here by hand
 * (not with the loader's own code): made once for the "models" case. */
#define TINY_KIND "turbo"
#define TINY_SEED "1"
#define TINY_RANKS 1
#define TINY_STEPS 2
#define NPY_MAGIC "\x93NUMPY\x01\x00"
#define NPY_MAGIC_LEN 8
/* .npy v1 and safetensors headers are padded to these sizes */
#define NPY_ALIGN 64
#define SAFETENSORS_ALIGN 8

static gchar *tiny_dir;
static gchar *tiny_model;

static gchar *
tiny_path (const gchar * name)
{
  return g_build_filename (tiny_dir, name, NULL);
}

/* The F32 data of a .npy file [1, L, D]. */
static GBytes *
read_embeds_npy (const gchar * path, gint64 * tokens, gint64 * dim)
{
  gchar *text = NULL;
  gsize len = 0;
  guint header_len;
  gchar *header;
  const gchar *shape;
  GBytes *data;

  fail_unless (g_file_get_contents (path, &text, &len, NULL));
  fail_unless (len > NPY_MAGIC_LEN + 2
      && memcmp (text, NPY_MAGIC, NPY_MAGIC_LEN) == 0, "%s: not .npy v1",
      path);
  header_len = (guint8) text[8] | (guint) (guint8) text[9] << 8;
  header = g_strndup (text + NPY_MAGIC_LEN + 2, header_len);
  fail_unless (strstr (header, "'<f4'") != NULL, "%s: not F32", path);
  shape = strstr (header, "'shape': (");
  fail_unless (shape != NULL && sscanf (shape, "'shape': (1, %" G_GINT64_FORMAT
          ", %" G_GINT64_FORMAT ")", tokens, dim) == 2, "%s: shape in %s",
      path, header);
  fail_unless_equals_uint64 (len - NPY_MAGIC_LEN - 2 - header_len,
      *tokens * *dim * sizeof (gfloat));
  data = g_bytes_new (text + NPY_MAGIC_LEN + 2 + header_len,
      len - NPY_MAGIC_LEN - 2 - header_len);
  g_free (header);
  g_free (text);
  return data;
}

static void
write_file (const gchar * path, GString * head, GBytes * data)
{
  g_string_append_len (head, g_bytes_get_data (data, NULL),
      g_bytes_get_size (data));
  fail_unless (g_file_set_contents (path, head->str, head->len, NULL));
  g_string_free (head, TRUE);
}

/* A 2-D .npy [L, D]. */
static void
write_npy_2d (const gchar * path, GBytes * data, gint64 tokens, gint64 dim)
{
  GString *header = g_string_new (NULL);
  GString *file = g_string_new_len (NPY_MAGIC, NPY_MAGIC_LEN);

  g_string_printf (header, "{'descr': '<f4', 'fortran_order': False, "
      "'shape': (%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "), }", tokens, dim);
  while ((NPY_MAGIC_LEN + 2 + header->len + 1) % NPY_ALIGN != 0)
    g_string_append_c (header, ' ');
  g_string_append_c (header, '\n');
  g_string_append_c (file, (gchar) (header->len & 0xff));
  g_string_append_c (file, (gchar) (header->len >> 8));
  g_string_append_len (file, header->str, header->len);
  g_string_free (header, TRUE);
  write_file (path, file, data);
}

/* A safetensors file of one F32 tensor @name with @shape. */
static void
write_safetensors (const gchar * path, const gchar * name, GBytes * data,
    const gchar * shape)
{
  GString *header = g_string_new (NULL);
  GString *file = g_string_new (NULL);
  guint64 len;

  g_string_printf (header, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],"
      "\"data_offsets\":[0,%" G_GSIZE_FORMAT "]}}", name, shape,
      g_bytes_get_size (data));
  while (header->len % SAFETENSORS_ALIGN != 0)
    g_string_append_c (header, ' ');
  len = GUINT64_TO_LE ((guint64) header->len);
  g_string_append_len (file, (const gchar *) &len, sizeof len);
  g_string_append_len (file, header->str, header->len);
  g_string_free (header, TRUE);
  write_file (path, file, data);
}

/* The same numbers, negated: embeddings that must change the output. */
static GBytes *
negated (GBytes * data)
{
  gsize n = g_bytes_get_size (data) / sizeof (gfloat);
  gfloat *v = g_memdup2 (g_bytes_get_data (data, NULL), n * sizeof (gfloat));

  for (gsize i = 0; i < n; i++)
    v[i] = -v[i];
  return g_bytes_new_take (v, n * sizeof (gfloat));
}

static void
tiny_setup (void)
{
  const gchar *tool = g_getenv ("PPDIFFUSE_TOOL");
  g_autofree gchar *embeds = NULL, *path = NULL, *shape2 = NULL,
      *shape3 = NULL;
  gchar *err = NULL;
  gint status = -1;
  gint64 tokens, dim;
  GBytes *data, *other;

  fail_unless (tool != NULL, "PPDIFFUSE_TOOL must name ppdiffuse-tool");
  tiny_dir = g_dir_make_tmp ("ppdiffuse-tiny-XXXXXX", NULL);
  fail_unless (tiny_dir != NULL);
  tiny_model = tiny_path ("model");
  {
    const gchar *argv[] = { tool, "make-tiny", "--kind", TINY_KIND, "--out",
      tiny_model, "--seed", TINY_SEED, NULL
    };
    fail_unless (g_spawn_sync (NULL, (gchar **) argv, NULL,
            G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err, &status,
            NULL));
    fail_unless (g_spawn_check_wait_status (status, NULL), "make-tiny: %s",
        err);
    g_free (err);
  }
  embeds = g_build_filename (tiny_model, "prompt_embeds.npy", NULL);
  data = read_embeds_npy (embeds, &tokens, &dim);
  shape2 = g_strdup_printf ("%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT, tokens,
      dim);
  shape3 = g_strdup_printf ("1,%s", shape2);
  path = tiny_path ("embeds-2d.npy");
  write_npy_2d (path, data, tokens, dim);
  g_free (path);
  path = tiny_path ("embeds-3d.safetensors");
  write_safetensors (path, "prompt_embeds", data, shape3);
  g_free (path);
  /* one tensor under another name: the loader takes the only one */
  path = tiny_path ("embeds-2d.safetensors");
  write_safetensors (path, "encoder_hidden_states", data, shape2);
  g_free (path);
  other = negated (data);
  path = tiny_path ("embeds-other.npy");
  write_npy_2d (path, other, tokens, dim);
  g_bytes_unref (other);
  g_bytes_unref (data);
}

static void
tiny_teardown (void)
{
  pp_check_remove_tree (tiny_dir);
  g_clear_pointer (&tiny_dir, g_free);
  g_clear_pointer (&tiny_model, g_free);
}

/* Runs the tiny model with @embeds (under the model folder when relative)
 * and @seed over frames with the pixels of @contents; returns the outputs. */
static GPtrArray *
run_tiny (const gchar * embeds, guint64 seed, const guint * contents,
    guint n)
{
  g_autofree gchar *path = g_path_is_absolute (embeds)
      ? g_strdup (embeds) : tiny_path (embeds);
  GstElement *element = pp_check_make_element (TINY_RANKS, TINY_STEPS, tiny_model);
  GPtrArray *outs = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_buffer_unref);
  GstHarness *h;

  g_object_set (element, "prompt-embeds", path, "seed", seed, NULL);
  h = pp_check_harness_new (element, CAPS_STR);
  for (guint i = 0; i < n; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame_like (contents[i],
                i)), GST_FLOW_OK);
  for (guint i = 0; i < n; i++) {
    GstBuffer *out = gst_harness_pull (h);

    fail_unless (out != NULL, "frame %u did not come out", i);
    g_ptr_array_add (outs, out);
  }
  stop_and_check (h, n);
  return outs;
}

/* prompt-embeds as a 2-D .npy, as a 3-D and a 2-D .safetensors: the same
 * output as the 3-D .npy the model came with; other embeddings, another
 * output (so the file is read at all). */
GST_START_TEST (test_prompt_embeds_forms)
{
  const gchar *forms[] = { "embeds-2d.npy", "embeds-3d.safetensors",
    "embeds-2d.safetensors"
  };
  const guint contents[] = { 0 };
  g_autofree gchar *npy = g_build_filename (tiny_model, "prompt_embeds.npy",
      NULL);
  GPtrArray *reference = run_tiny (npy, 0, contents, 1), *outs;

  for (guint i = 0; i < G_N_ELEMENTS (forms); i++) {
    outs = run_tiny (forms[i], 0, contents, 1);
    fail_unless (pp_check_same_bytes (outs->pdata[0], reference->pdata[0]),
        "prompt-embeds %s gives another output than %s", forms[i], npy);
    g_ptr_array_unref (outs);
  }
  outs = run_tiny ("embeds-other.npy", 0, contents, 1);
  fail_if (pp_check_same_bytes (outs->pdata[0], reference->pdata[0]),
      "other prompt-embeds give the same output: are they read?");
  g_ptr_array_unref (outs);
  g_ptr_array_unref (reference);
}

GST_END_TEST;

/* The same seed, the same noise for every frame: two identical frames give
 * identical outputs, a different frame another; another seed changes the
 * output of the same frame. */
GST_START_TEST (test_same_noise_every_frame)
{
  const guint contents[] = { 0, 0, 5, 0 };
  const guint one[] = { 0 };
  GPtrArray *outs = run_tiny ("embeds-2d.npy", 7, contents,
      G_N_ELEMENTS (contents)), *reseeded;

  fail_unless (pp_check_same_bytes (outs->pdata[0], outs->pdata[1]),
      "two identical frames in a row came out different");
  fail_unless (pp_check_same_bytes (outs->pdata[0], outs->pdata[3]),
      "the same frame later in the stream came out different");
  fail_if (pp_check_same_bytes (outs->pdata[0], outs->pdata[2]),
      "a different frame came out the same: the input is ignored");
  reseeded = run_tiny ("embeds-2d.npy", 8, one, 1);
  fail_if (pp_check_same_bytes (outs->pdata[0], reseeded->pdata[0]),
      "another seed gave the same output");
  g_ptr_array_unref (reseeded);
  g_ptr_array_unref (outs);
}

GST_END_TEST;

static Suite *
ppdiffuse_suite (void)
{
  Suite *s = suite_create ("ppdiffuse");
  TCase *tc;

  tc = tcase_create ("schedule");
  tcase_add_loop_test (tc, test_stamp_matrix, 0,
      pp_check_repeats (G_N_ELEMENTS (matrix),
          G_N_ELEMENTS (matrix_diagonal)));
  suite_add_tcase (s, tc);

  tc = tcase_create ("stream");
  tcase_add_test (tc, test_warm_up);
  tcase_add_test (tc, test_doorbells);
  tcase_add_test (tc, test_no_doorbells);
  tcase_add_test (tc, test_qos_drops_late);
  tcase_add_test (tc, test_leaky_drops_when_full);
  tcase_add_test (tc, test_eos_drains_in_flight);
  tcase_add_test (tc, test_events_keep_order);
  tcase_add_test (tc, test_flush_discards_and_recovers);
  tcase_add_test (tc, test_anisotropic_smooths);
  tcase_add_test (tc, test_latency_reported);
  tcase_add_test (tc, test_leaky_qos_and_discont);
  tcase_add_test (tc, test_latency_query_max);
  tcase_add_test (tc, test_latency_message_on_growth);
  tcase_add_test (tc, test_allocation_stride_offset);
  tcase_add_test (tc, test_shared_input_copied);
  tcase_add_test (tc, test_stats_overlap);
  suite_add_tcase (s, tc);

  tc = tcase_create ("models");
  tcase_add_unchecked_fixture (tc, tiny_setup, tiny_teardown);
  tcase_add_test (tc, test_prompt_embeds_forms);
  tcase_add_test (tc, test_same_noise_every_frame);
  suite_add_tcase (s, tc);

  tc = tcase_create ("lifecycle");
  tcase_add_test (tc, test_start_stop_cycles);
  tcase_add_test (tc, test_progress_messages);
  tcase_add_test (tc, test_workers_inherit_pmix_store);
  suite_add_tcase (s, tc);

  tc = tcase_create ("errors");
  tcase_add_test (tc, test_more_ranks_than_steps);
  tcase_add_test (tc, test_missing_worker);
  tcase_add_test (tc, test_unknown_model);
  tcase_add_test (tc, test_model_mistakes);
  tcase_add_test (tc, test_cuda_backend_unavailable);
  tcase_add_test (tc, test_auto_backend_falls_back);
  tcase_add_test (tc, test_dtype_property);
  tcase_add_test (tc, test_cuda_device_id);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  app_pmix_gds = g_strdup (g_getenv (PP_PMIX_GDS_ENV));
  gst_check_init (&argc, &argv);
  pp_check_run_and_exit (ppdiffuse_suite (), "ppdiffuse", __FILE__);
}
