/* ppdiffuse — settings changed while playing: each frame computed with the
 * settings of one cache epoch, and once a frame of new settings is out no
 * frame of older ones follows; a bad change keeps the stream going; a caps
 * change with frames in flight.  Real worker meshes (MPI_Comm_spawn). */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/video/video.h>
#include <glib/gstdio.h>

#include <string.h>

#include "pp-check-util.h"

#define FPS 25
#define FRAME_DURATION (GST_SECOND / FPS)
/* Bound of every wait for a bus message. */
#define MESSAGE_TIMEOUT_MS 5000
/* A stamp step slower than a frame's interval at FPS. */
#define SLOW_STEP_MS "60"
/* Long enough for the settings thread to check a change. */
#define SETTLE_US (300 * G_TIME_SPAN_MILLISECOND)
#define STAMP_MARKS 3
#define STAMP_FRAMES 36
#define STAMP_STEPS 4

/* ---- frames of any size ------------------------------------------------ */

/* An RGBA frame @index of @w x @h: its own pattern in RGB, 255 - index in
 * alpha. */
static GstBuffer *
make_rgba (guint index, guint w, guint h)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, w * h * 4, NULL);
  GstMapInfo map;

  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  pp_check_fill_pattern (map.data, w * 4, w, h, index);
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = index * FRAME_DURATION;
  GST_BUFFER_DURATION (buf) = FRAME_DURATION;
  return buf;
}

/* TRUE when @out is RGBA frame @index of @w x @h after @n_steps stamp
 * steps with @mark, alpha untouched. */
static gboolean
is_stamped (GstBuffer * out, guint index, guint w, guint h, guint n_steps,
    guint mark)
{
  GstMapInfo map;
  gboolean same;

  gst_buffer_map (out, &map, GST_MAP_READ);
  same = map.size == w * h * 4 && pp_check_is_stamped (map.data, w * 4, w, h,
      index, n_steps, mark, NULL);
  gst_buffer_unmap (out, &map);
  return same;
}

/* Pulls the next frame out of @h: RGBA frame @index of @w x @ht after
 * @n_steps stamp steps with mark 0. */
static void
pull_stamped (GstHarness * h, guint index, guint w, guint ht, guint n_steps)
{
  GstBuffer *out = gst_harness_pull (h);

  fail_unless (out != NULL, "frame %u did not come out", index);
  fail_unless (is_stamped (out, index, w, ht, n_steps, 0),
      "frame %u (%ux%u) is not its own frame after %u steps", index, w, ht,
      n_steps);
  gst_buffer_unref (out);
}

/* A harness around @element (transfer floating) with raw video caps of
 * @format, @w x @h, stopped after the case if it fails before stop () or
 * stop_kept (). */
static GstHarness *
make_harness (GstElement * element, const gchar * format, guint w, guint h)
{
  g_autofree gchar *caps = g_strdup_printf ("video/x-raw,format=%s,"
      "width=%u,height=%u,framerate=%u/1", format, w, h, FPS);

  return pp_check_track_harness (pp_check_harness_new (element, caps));
}

static gchar *
model_uri (guint mark)
{
  return g_strdup_printf ("builtin:stamp?step-ms=5&mark=%u", mark);
}

/* Stops the element and checks that no worker is left. */
static void
stop (GstHarness * h)
{
  pp_check_untrack_harness ();
  fail_unless_equals_int (gst_element_set_state (h->element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  /* Gone at once; under a sanitizer each worker's exit first runs its
   * checks, on a machine that runs other such suites at once. */
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, pp_check_repeats (0, 15000)), 0);
  gst_harness_teardown (h);
}

/* Stops an element with kept workers (@element is the caller's
 * reference): its workers end with it. */
static void
stop_kept (GstHarness * h, GstElement * element)
{
  pp_check_untrack_harness ();
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_harness_teardown (h);
  gst_object_unref (element);
  /* Under a sanitizer each worker's exit runs its checks, on a machine
   * that runs two such suites at once. */
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, pp_check_repeats (5000, 15000)), 0);
}

/* Pops the first WARNING message from @bus within @timeout_ms, passing
 * over the pace's ("too slow for this stream", ppdiffuse-warning=pace in
 * its details): it comes when the first frame is back, which on a busy
 * machine may be before or after the warning a case waits for. */
static GstMessage *
pop_warning (GstBus * bus, guint timeout_ms)
{
  const gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms
      * G_TIME_SPAN_MILLISECOND;
  GstMessage *msg;

  for (;;) {
    const gint64 left_us = MAX (deadline - g_get_monotonic_time (), 0);
    const GstStructure *details = NULL;

    msg = gst_bus_timed_pop_filtered (bus, left_us * GST_USECOND,
        GST_MESSAGE_WARNING);
    if (msg == NULL)
      return NULL;
    gst_message_parse_warning_details (msg, &details);
    if (details == NULL || g_strcmp0 (gst_structure_get_string (details,
                "ppdiffuse-warning"), "pace") != 0)
      return msg;
    gst_message_unref (msg);
  }
}

/* stream-batch or frame-batch where nothing can batch (one step a
 * worker, or one frame in flight): a warning at start that says why, and
 * the frames go on. */
GST_START_TEST (test_stream_batch_nothing_to_batch)
{
  const struct
  {
    guint ranks, steps, max_in_flight;
    gboolean stream_batch;
    guint frame_batch;
    const gchar *needle;
  } cases[] = {
    {2, 2, 0, TRUE, 1, "each of the 2 workers runs one of the 2 steps"},
    {1, 2, 1, TRUE, 1, "max-in-flight lets one frame in flight"},
    {1, 1, 1, FALSE, 2, "frame-batch has nothing to batch: max-in-flight "
          "lets one frame in flight"},
  };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++) {
    g_autofree gchar *uri = model_uri (3);
    GstElement *element = pp_check_make_element (cases[c].ranks,
        cases[c].steps, uri);
    GstBus *bus = gst_bus_new ();
    GstHarness *h;
    GstMessage *msg;
    GError *gerror = NULL;

    g_object_set (element, "stream-batch", cases[c].stream_batch,
        "frame-batch", cases[c].frame_batch, "max-in-flight",
        cases[c].max_in_flight, NULL);
    gst_element_set_bus (element, bus);
    h = make_harness (element, "RGBA", 16, 8);
    fail_unless_equals_int (gst_harness_push (h, make_rgba (0, 16, 8)),
        GST_FLOW_OK);
    gst_buffer_unref (gst_harness_pull (h));
    msg = pop_warning (bus, MESSAGE_TIMEOUT_MS);
    fail_unless (msg != NULL, "no warning for case %u", c);
    gst_message_parse_warning (msg, &gerror, NULL);
    fail_unless (strstr (gerror->message, cases[c].needle) != NULL,
        "the warning does not say '%s': %s", cases[c].needle,
        gerror->message);
    g_error_free (gerror);
    gst_message_unref (msg);
    gst_element_set_bus (element, NULL);
    gst_object_unref (bus);
    stop (h);
  }
}

GST_END_TEST;

/* ---- zero stale frames --------------------------------------------------- */

/* The stamp model's mark changes twice while frames are in flight: every
 * frame out is stamped with exactly one mark, the marks only go forward,
 * the last frames carry the last one, and the workers are the same
 * processes throughout (no respawn). */
GST_START_TEST (test_stamp_mark_changes_in_lockstep)
{
  const guint marks[STAMP_MARKS] = { 0, 7, 200 };
  const guint switch_at[STAMP_MARKS] = { 0, 10, 22 };
  g_autofree gchar *first = model_uri (marks[0]);
  GstElement *element = pp_check_make_element (2, STAMP_STEPS, first);
  GstHarness *h;
  GArray *pids_before = NULL, *pids_after;
  guint seen = 0, first_of[STAMP_MARKS] = { 0 };

  g_object_set (element, "max-in-flight", 4, NULL);
  h = make_harness (element, "RGBA", 32, 24);
  for (guint i = 0; i < STAMP_FRAMES; i++) {
    for (guint m = 1; m < STAMP_MARKS; m++)
      if (i == switch_at[m]) {
        g_autofree gchar *uri = model_uri (marks[m]);
        g_object_set (element, "model", uri, NULL);
      }
    fail_unless_equals_int (gst_harness_push (h, make_rgba (i, 32, 24)),
        GST_FLOW_OK);
    if (i == 1)
      pids_before = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  }
  for (guint i = 0; i < STAMP_FRAMES; i++) {
    GstBuffer *out = gst_harness_pull (h);
    guint m;

    fail_unless (out != NULL, "frame %u did not come out", i);
    fail_unless_equals_uint64 (GST_BUFFER_PTS (out), i * FRAME_DURATION);
    for (m = 0; m < STAMP_MARKS; m++)
      if (is_stamped (out, i, 32, 24, STAMP_STEPS, marks[m]))
        break;
    fail_unless (m < STAMP_MARKS, "frame %u is stamped with no single mark "
        "of the settings it could have: a mix of settings", i);
    fail_unless (m >= seen, "frame %u carries mark %u after a frame of mark "
        "%u was out: a stale frame", i, marks[m], marks[seen]);
    fail_unless (i >= switch_at[m], "frame %u carries mark %u, set only "
        "before frame %u", i, marks[m], switch_at[m]);
    if (m > seen || i == 0)
      first_of[m] = i;
    seen = m;
    gst_buffer_unref (out);
  }
  fail_unless_equals_int (seen, STAMP_MARKS - 1);
  GST_INFO ("marks switched at frames %u and %u", first_of[1], first_of[2]);
  pids_after = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (pids_after->len, pids_before->len);
  fail_unless (memcmp (pids_after->data, pids_before->data,
          pids_after->len * sizeof (gint)) == 0,
      "the workers were respawned for a change of settings");
  g_array_unref (pids_before);
  g_array_unref (pids_after);
  stop (h);
}

GST_END_TEST;

/* Kept workers take the settings changed while the element was stopped:
 * the first frame after the restart carries them to every rank. */
GST_START_TEST (test_kept_workers_take_new_settings)
{
  g_autofree gchar *first = model_uri (0);
  g_autofree gchar *second = model_uri (7);
  GstElement *element = pp_check_make_element (2, 2, first);
  GstHarness *h;
  GArray *pids_before, *pids_after;
  const guint marks[] = { 0, 7 };

  /* Ours to free: the kept workers end only with the element. */
  gst_object_ref_sink (element);
  g_object_set (element, "keep-workers", TRUE, NULL);
  h = make_harness (element, "RGBA", 16, 8);
  pids_before = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  for (guint run = 0; run < G_N_ELEMENTS (marks); run++) {
    if (run > 0) {
      fail_unless_equals_int (gst_element_set_state (element,
              GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
      g_object_set (element, "model", second, NULL);
      gst_harness_play (h);
      gst_harness_set_src_caps_str (h, "video/x-raw,format=RGBA,width=16,"
          "height=8,framerate=25/1");
    }
    for (guint i = 0; i < 4; i++) {
      GstBuffer *out;

      fail_unless_equals_int (gst_harness_push (h, make_rgba (i, 16, 8)),
          GST_FLOW_OK);
      out = gst_harness_pull (h);
      fail_unless (out != NULL);
      fail_unless (is_stamped (out, i, 16, 8, 2, marks[run]), "run %u frame "
          "%u is not stamped with mark %u", run, i, marks[run]);
      gst_buffer_unref (out);
    }
  }
  pids_after = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (pids_after->len, pids_before->len);
  fail_unless (memcmp (pids_after->data, pids_before->data,
          pids_after->len * sizeof (gint)) == 0,
      "the workers were respawned for a change of live settings");
  g_array_unref (pids_before);
  g_array_unref (pids_after);
  stop_kept (h, element);
}

GST_END_TEST;

/* ---- a bad change keeps the stream going ------------------------------- */

GST_START_TEST (test_bad_change_keeps_stream)
{
  /* Steps slower than the frames come (25 fps): the pace's warning comes
   * too, before or after each of these. */
  const gchar *const bad[] = {
    "builtin:stamp?step-ms=" SLOW_STEP_MS "&mark=999",
    "builtin:anisotropic",
    "builtin:stamp?step-ms=" SLOW_STEP_MS "&cuda-graphs=1",
    "builtin:stamp?step-ms=" SLOW_STEP_MS "&bogus=1",
  };
  const gchar *const needles[] = {
    "mark", "needs a new one", "cannot change while the model runs",
    "no live parameter 'bogus'",
  };
  const gchar *good = "builtin:stamp?step-ms=" SLOW_STEP_MS "&mark=3";
  GstElement *element = pp_check_make_element (2, 2, good);
  GstHarness *h = make_harness (element, "RGBA", 16, 8);
  GstBus *bus = gst_bus_new ();
  guint n = 0;

  gst_element_set_bus (element, bus);
  for (guint b = 0; b < G_N_ELEMENTS (bad); b++) {
    GstMessage *msg;
    GError *gerror = NULL;
    gchar *now = NULL;

    fail_unless_equals_int (gst_harness_push (h, make_rgba (n++, 16, 8)),
        GST_FLOW_OK);
    g_object_set (element, "model", bad[b], NULL);
    msg = pop_warning (bus, MESSAGE_TIMEOUT_MS);
    fail_unless (msg != NULL, "no warning for model=%s", bad[b]);
    gst_message_parse_warning (msg, &gerror, NULL);
    fail_unless (strstr (gerror->message, needles[b]) != NULL,
        "the warning for model=%s does not say '%s': %s", bad[b], needles[b],
        gerror->message);
    g_error_free (gerror);
    gst_message_unref (msg);
    /* The property went back to what runs. */
    g_object_get (element, "model", &now, NULL);
    fail_unless_equals_string (now, good);
    g_free (now);
    fail_unless_equals_int (gst_harness_push (h, make_rgba (n++, 16, 8)),
        GST_FLOW_OK);
  }
  for (guint i = 0; i < n; i++) {
    GstBuffer *out = gst_harness_pull (h);

    fail_unless (out != NULL, "frame %u did not come out", i);
    fail_unless (is_stamped (out, i, 16, 8, 2, 3), "frame %u was not "
        "computed with the settings that run", i);
    gst_buffer_unref (out);
  }
  fail_unless (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR) == NULL);
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  stop (h);
}

GST_END_TEST;

/* ---- caps change with frames in flight --------------------------------- */

/* Frames of one size in flight when caps of another arrive: each comes
 * out at its own size with its own steps, the same mesh throughout. */
GST_START_TEST (test_caps_change_in_flight)
{
  const guint sizes[][2] = { {32, 24}, {20, 12}, {32, 24} };
  const guint per_size = 5;
  GstElement *element = pp_check_make_element (2, 3, "builtin:stamp?step-ms=10");
  GstHarness *h = make_harness (element, "RGBA", 32, 24);
  guint n = 0;

  g_object_set (element, "max-in-flight", 6, NULL);
  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++) {
    g_autofree gchar *caps = g_strdup_printf ("video/x-raw,format=RGBA,"
        "width=%u,height=%u,framerate=%u/1", sizes[s][0], sizes[s][1], FPS);

    if (s > 0)
      gst_harness_set_src_caps_str (h, caps);
    for (guint i = 0; i < per_size; i++, n++)
      fail_unless_equals_int (gst_harness_push (h, make_rgba (n, sizes[s][0],
                  sizes[s][1])), GST_FLOW_OK);
  }
  n = 0;
  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
    for (guint i = 0; i < per_size; i++, n++)
      pull_stamped (h, n, sizes[s][0], sizes[s][1], 3);
  stop (h);
}

GST_END_TEST;

/* The deadline cases' timeout-ms, and what their times are in units of
 * (twice as long under a sanitizer, whose processes may be starved of
 * the cores for longer). */
#define PACE_TIMEOUT_MS 1000

static guint
pace_scale (void)
{
  return pp_check_sanitized ()? 2 : 1;
}

/* A caps change whose frames cost far more than those before it (a
 * larger frame; here a slower stamp step with it): the mesh's measure of
 * a chunk starts again at the new size, so the first larger chunks get
 * the allowance of unmeasured work, not three times the smaller ones'
 * (each worker's slice of two steps takes 1.2 × timeout-ms). */
GST_START_TEST (test_caps_change_slower_frames)
{
  const guint k = pace_scale ();
  const guint sizes[][2] = { {32, 24}, {64, 48} };
  g_autofree gchar *fast = g_strdup_printf ("builtin:stamp?step-ms=%u",
      5 * k);
  g_autofree gchar *slow = g_strdup_printf ("builtin:stamp?step-ms=%u",
      PACE_TIMEOUT_MS * 6 / 10 * k);
  const gchar *const models[] = { fast, slow };
  const guint per_size[] = { 12, 2 };
  GstElement *element = pp_check_make_element (2, 4, models[0]);
  GstHarness *h;
  guint n = 0;

  g_object_set (element, "max-in-flight", 2, "timeout-ms", PACE_TIMEOUT_MS * k,
      NULL);
  h = make_harness (element, "RGBA", 32, 24);
  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++) {
    guint first = n;

    if (s > 0) {
      g_autofree gchar *caps = g_strdup_printf ("video/x-raw,format=RGBA,"
          "width=%u,height=%u,framerate=%u/1", sizes[s][0], sizes[s][1], FPS);

      /* Taken before the new size's first frame. */
      g_object_set (element, "model", models[s], NULL);
      g_usleep (SETTLE_US);
      gst_harness_set_src_caps_str (h, caps);
    }
    for (guint i = 0; i < per_size[s]; i++, n++)
      fail_unless_equals_int (gst_harness_push (h, make_rgba (n, sizes[s][0],
                  sizes[s][1])), GST_FLOW_OK);
    for (guint i = first; i < n; i++)
      pull_stamped (h, i, sizes[s][0], sizes[s][1], 4);
  }
  stop (h);
}

GST_END_TEST;

/* frame-batch 8 with frames queued: a pass runs 8 frames in the time of
 * one step (a GPU's batch; builtin models sleep step-ms once a pass), so a
 * frame's share of the busy time is an eighth of the pass that computes
 * it.  Each wait on it is allowed from the pass's time, not that share:
 * passes of 1.5 × timeout-ms all come out. */
GST_START_TEST (test_frame_batch_slow_passes)
{
  const guint k = pace_scale ();
  const guint frames = 24;
  g_autofree gchar *model = g_strdup_printf ("builtin:stamp?step-ms=%u",
      PACE_TIMEOUT_MS * 3 / 2 * k);
  GstElement *element = pp_check_make_element (1, 1, model);
  GstHarness *h;

  g_object_set (element, "timeout-ms", PACE_TIMEOUT_MS * k, "max-in-flight",
      16, "frame-batch", 8, NULL);
  h = make_harness (element, "RGBA", 32, 24);
  for (guint i = 0; i < frames; i++)
    fail_unless_equals_int (gst_harness_push (h, make_rgba (i, 32, 24)),
        GST_FLOW_OK);
  for (guint i = 0; i < frames; i++)
    pull_stamped (h, i, 32, 24, 1);
  stop (h);
}

GST_END_TEST;

/* ---- stress: frames, settings, flushes and caps at once ---------------- */

#define STRESS_SECONDS 3
#define STRESS_SETTINGS_SLEEP_US 3000
#define STRESS_FLUSH_SLEEP_US 150000
#define STRESS_CAPS_SLEEP_US 40000
#define STRESS_PUSH_SLEEP_US 500

/* Two sizes of the same byte count: the stress buffer fits either. */
static const gchar *const stress_caps_strs[] = {
  "video/x-raw,format=RGBA,width=32,height=24,framerate=25/1",
  "video/x-raw,format=BGRx,width=48,height=16,framerate=25/1",
};

static void
stress_settings (GstHarnessThread * t, gpointer data)
{
  static guint n;
  GstElement *element = data;
  g_autofree gchar *uri = g_strdup_printf ("builtin:stamp?step-ms=1&"
      "mark=%u", n++ % 256);

  g_object_set (element, "model", (n % 7) ? uri : "builtin:stamp?mark=999",
      NULL);
}

/* A flush removes the segment: frames go out again only behind a new one.
 * The pushing thread holds this around each push, and the flushing thread
 * around its FLUSH_STOP and new segment; FLUSH_START goes out without it,
 * so that it can wake a push that waits for room. */
static GMutex stress_push_lock;
static GstBuffer *stress_frame;

static void
push_segment (GstHarness * h)
{
  GstSegment segment;

  gst_segment_init (&segment, GST_FORMAT_TIME);
  gst_harness_push_event (h, gst_event_new_segment (&segment));
}

static void
stress_push (GstHarnessThread * t, gpointer data)
{
  GstHarness *h = data;

  g_mutex_lock (&stress_push_lock);
  gst_harness_push (h, gst_buffer_ref (stress_frame));
  g_mutex_unlock (&stress_push_lock);
}

static void
stress_flush (GstHarnessThread * t, gpointer data)
{
  GstHarness *h = data;

  gst_harness_push_event (h, gst_event_new_flush_start ());
  g_mutex_lock (&stress_push_lock);
  gst_harness_push_event (h, gst_event_new_flush_stop (TRUE));
  push_segment (h);
  g_mutex_unlock (&stress_push_lock);
}

static void
stress_caps (GstHarnessThread * t, gpointer data)
{
  static guint n;
  GstHarness *h = data;
  GstCaps *c = gst_caps_from_string (stress_caps_strs[++n % 2]);

  /* Refused while a flush runs: that is what a source sees too. */
  gst_harness_push_event (h, gst_event_new_caps (c));
  gst_caps_unref (c);
}

/* Frames pushed from one thread while others change settings (some of them
 * bad), flush and change caps, for a bounded time: no deadlock, every frame
 * that went in is accounted for, every frame the sink got was counted. */
GST_START_TEST (test_stress_live_changes)
{
  GstElement *element = pp_check_make_element (2, 2, "builtin:stamp?step-ms=1");
  GstHarness *h;
  GstHarnessThread *push, *settings, *flush, *caps;
  GstStructure *stats;
  GstEvent *event;
  guint64 in, out, drops;
  guint n_settings, n_flushes, n_caps, n_pushes;

  g_object_set (element, "max-in-flight", 3, NULL);
  h = pp_check_harness_new (element, stress_caps_strs[0]);
  stress_frame = make_rgba (1, 32, 24);
  push = gst_harness_stress_custom_start (h, NULL, (GFunc) stress_push, h,
      STRESS_PUSH_SLEEP_US);
  settings = gst_harness_stress_custom_start (h, NULL, (GFunc) stress_settings,
      element, STRESS_SETTINGS_SLEEP_US);
  flush = gst_harness_stress_custom_start (h, NULL, (GFunc) stress_flush, h,
      STRESS_FLUSH_SLEEP_US);
  caps = gst_harness_stress_custom_start (h, NULL, (GFunc) stress_caps, h,
      STRESS_CAPS_SLEEP_US);
  g_usleep (STRESS_SECONDS * G_USEC_PER_SEC);
  n_settings = gst_harness_stress_thread_stop (settings);
  n_flushes = gst_harness_stress_thread_stop (flush);
  n_caps = gst_harness_stress_thread_stop (caps);
  n_pushes = gst_harness_stress_thread_stop (push);
  GST_INFO ("stress: %u settings, %u flushes, %u caps, %u pushes",
      n_settings, n_flushes, n_caps, n_pushes);
  fail_unless (n_settings > 0 && n_flushes > 0 && n_caps > 0 && n_pushes > 0);
  gst_clear_buffer (&stress_frame);

  /* EOS drains what is left; the harness waits for it with a deadline. */
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  while ((event = gst_harness_pull_event (h)) != NULL) {
    gboolean eos = GST_EVENT_TYPE (event) == GST_EVENT_EOS;

    gst_event_unref (event);
    if (eos)
      break;
  }
  fail_unless (event != NULL, "EOS did not come out");
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  stats = pp_check_get_stats (element);
  in = pp_check_stat_u64 (stats, "frames-in");
  out = pp_check_stat_u64 (stats, "frames-out");
  drops = pp_check_stat_u64 (stats, "dropped-flush") + pp_check_stat_u64 (stats,
      "dropped-error") + pp_check_stat_u64 (stats, "dropped-qos") + pp_check_stat_u64 (stats,
      "dropped-leaky");
  GST_INFO ("stress: %" G_GUINT64_FORMAT " in, %" G_GUINT64_FORMAT " out, %"
      G_GUINT64_FORMAT " dropped", in, out, drops);
  fail_unless (in > 0 && out > 0, "no frame went through");
  fail_unless_equals_uint64 (in, out + drops);
  fail_unless_equals_uint64 (out, gst_harness_buffers_received (h));
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "dropped-error"), 0);
  gst_structure_free (stats);
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, pp_check_repeats (0, 15000)), 0);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ---- a pipeline model: strength while playing, against the tool -------- */

/* Under a sanitizer the frames go through the same changes and come out,
 * and the comparison with the tool's frames (a program run per frame) is
 * left to the plain run (pp_check_sanitized). */

#define TINY_W 48
#define TINY_H 32
#define TINY_STEPS 2
#define TINY_FRAMES 10
#define TINY_SWITCH 3
#define TINY_SWITCH_PROMPT 6

static gchar *tiny_dir;

static gchar *
tiny_path (const gchar * name)
{
  return g_build_filename (tiny_dir, name, NULL);
}

static void
run_tool (const gchar * const *argv)
{
  gchar *err = NULL;
  gint status = -1;

  fail_unless (g_spawn_sync (NULL, (gchar **) argv, NULL,
          G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err, &status, NULL));
  fail_unless (g_spawn_check_wait_status (status, NULL), "%s %s: %s",
      argv[0], argv[1], err);
  g_free (err);
}

static void
tiny_setup (void)
{
  const gchar *tool = g_getenv ("PPDIFFUSE_TOOL");
  g_autofree gchar *model = NULL;

  fail_unless (tool != NULL, "PPDIFFUSE_TOOL must name ppdiffuse-tool");
  tiny_dir = g_dir_make_tmp ("ppdiffuse-live-XXXXXX", NULL);
  fail_unless (tiny_dir != NULL);
  model = tiny_path ("model");
  {
    const gchar *argv[] = { tool, "make-tiny", "--kind", "turbo", "--out",
      model, "--seed", "2", NULL
    };
    run_tool (argv);
  }
  /* Another tiny model of the same kind: its prompt embeddings are another
   * prompt of the same shape. */
  g_free (model);
  model = tiny_path ("other");
  {
    const gchar *argv[] = { tool, "make-tiny", "--kind", "turbo", "--out",
      model, "--seed", "5", NULL
    };
    run_tool (argv);
  }
}

static void
tiny_teardown (void)
{
  pp_check_remove_tree (tiny_dir);
  g_clear_pointer (&tiny_dir, g_free);
}

/* An RGB frame @index of @w x @h (rows of 4-byte multiples: @w a
 * multiple of 4). */
static GstBuffer *
make_rgb_sized (guint index, guint w, guint h)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, w * h * 3, NULL);
  GstMapInfo map;

  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (guint y = 0; y < h; y++)
    for (guint x = 0; x < w; x++)
      for (guint c = 0; c < 3; c++)
        map.data[(y * w + x) * 3 + c] = pp_check_pattern (index, x, y, c);
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = index * FRAME_DURATION;
  GST_BUFFER_DURATION (buf) = FRAME_DURATION;
  return buf;
}

static GstBuffer *
make_rgb (guint index)
{
  return make_rgb_sized (index, TINY_W, TINY_H);
}

static gchar *
rgb_caps (guint w, guint h)
{
  return g_strdup_printf ("video/x-raw,format=RGB,width=%u,height=%u", w, h);
}

/* Frames 0, 1, … as RGB, @per_size at each of the @n sizes in turn, the
 * caps changed between (the harness starts at the first size). */
static void
push_at_sizes (GstHarness * h, const guint sizes[][2], guint n,
    guint per_size)
{
  for (guint s = 0; s < n; s++) {
    if (s > 0) {
      g_autofree gchar *caps = rgb_caps (sizes[s][0], sizes[s][1]);
      g_autofree gchar *caps_rate = g_strconcat (caps, ",framerate=25/1",
          NULL);

      gst_harness_set_src_caps_str (h, caps_rate);
    }
    for (guint i = 0; i < per_size; i++)
      fail_unless_equals_int (gst_harness_push (h, make_rgb_sized (s
                  * per_size + i, sizes[s][0], sizes[s][1])), GST_FLOW_OK);
  }
}

static void
write_png (GstBuffer * rgb, guint w, guint h, const gchar * path)
{
  GstHarness *hn = gst_harness_new ("pngenc");
  g_autofree gchar *caps = rgb_caps (w, h);
  g_autofree gchar *caps_rate = g_strconcat (caps, ",framerate=25/1", NULL);
  GstBuffer *png;
  GstMapInfo map;

  gst_harness_set_src_caps_str (hn, caps_rate);
  png = gst_harness_push_and_pull (hn, gst_buffer_ref (rgb));
  fail_unless (png != NULL);
  gst_buffer_map (png, &map, GST_MAP_READ);
  fail_unless (g_file_set_contents (path, (const gchar *) map.data, map.size,
          NULL));
  gst_buffer_unmap (png, &map);
  gst_buffer_unref (png);
  gst_harness_teardown (hn);
}

static GstBuffer *
read_png (const gchar * path, guint w, guint h)
{
  GstHarness *hn = gst_harness_new_parse ("pngdec ! videoconvert");
  g_autofree gchar *caps = rgb_caps (w, h);
  g_autofree gchar *png_caps = g_strdup_printf ("image/png,width=%u,"
      "height=%u,framerate=0/1,parsed=(boolean)true", w, h);
  gchar *data = NULL;
  gsize len = 0;
  GstBuffer *rgb;

  fail_unless (g_file_get_contents (path, &data, &len, NULL), "%s", path);
  gst_harness_set_src_caps_str (hn, png_caps);
  gst_harness_set_sink_caps_str (hn, caps);
  fail_unless_equals_int (gst_harness_push (hn, gst_buffer_new_wrapped (data,
              len)), GST_FLOW_OK);
  /* EOS drains a decoder that waits for more data. */
  fail_unless (gst_harness_push_event (hn, gst_event_new_eos ()));
  rgb = gst_harness_pull (hn);
  fail_unless (rgb != NULL, "%s did not decode", path);
  gst_harness_teardown (hn);
  return rgb;
}

/* With $PP_TEST_CUDA_GRAPHS=1, the element captures its work as graphs
 * (emulated by cpu-strict): rank 0's encoding must be captured again at
 * each settings epoch and frame size, or its launches read the buffers
 * the settings replaced, which cpu-strict fails. */
static void
graphs_from_env (GstElement * element)
{
  if (g_strcmp0 (g_getenv ("PP_TEST_CUDA_GRAPHS"), "1") == 0)
    g_object_set (element, "cuda-graphs", TRUE, NULL);
}

static gchar *
embeds_of (const gchar * model_name)
{
  return g_build_filename (tiny_dir, model_name, "prompt_embeds.npy", NULL);
}

/* ppdiffuse-tool img2img of input @index with @strength and the prompt
 * embeddings of tiny model @prompt. */
static GstBuffer *
tool_frame_sized (guint index, guint w, guint h, const gchar * strength,
    const gchar * prompt)
{
  const gchar *tool = g_getenv ("PPDIFFUSE_TOOL");
  g_autofree gchar *model = tiny_path ("model");
  g_autofree gchar *embeds = embeds_of (prompt);
  g_autofree gchar *in = g_strdup_printf ("%s/in-%u-%ux%u.png", tiny_dir,
      index, w, h);
  g_autofree gchar *out = g_strdup_printf ("%s/tool-%u-%ux%u-%s-%s.png",
      tiny_dir, index, w, h, strength, prompt);
  const gchar *argv[] = { tool, "img2img", "--model", model, "--in", in,
    "--out", out, "--prompt-embeds", embeds, "--steps",
    G_STRINGIFY (TINY_STEPS), "--strength", strength, "--seed", "4", NULL
  };

  if (!g_file_test (in, G_FILE_TEST_EXISTS)) {
    GstBuffer *rgb = make_rgb_sized (index, w, h);
    write_png (rgb, w, h, in);
    gst_buffer_unref (rgb);
  }
  run_tool (argv);
  return read_png (out, w, h);
}

static GstBuffer *
tool_frame (guint index, const gchar * strength, const gchar * prompt)
{
  return tool_frame_sized (index, TINY_W, TINY_H, strength, prompt);
}

/* ppdiffuse-tool img2img of input @index with the text prompt @text
 * (@tag names its output). */
static GstBuffer *
tool_frame_text (guint index, const gchar * text, const gchar * tag)
{
  const gchar *tool = g_getenv ("PPDIFFUSE_TOOL");
  g_autofree gchar *model = tiny_path ("model");
  g_autofree gchar *in = g_strdup_printf ("%s/in-%u-%ux%u.png", tiny_dir,
      index, TINY_W, TINY_H);
  g_autofree gchar *out = g_strdup_printf ("%s/tool-%u-text-%s.png",
      tiny_dir, index, tag);
  const gchar *argv[] = { tool, "img2img", "--model", model, "--in", in,
    "--out", out, "--prompt", text, "--steps", G_STRINGIFY (TINY_STEPS),
    "--strength", "0.5", "--seed", "4", NULL
  };

  if (!g_file_test (in, G_FILE_TEST_EXISTS)) {
    GstBuffer *rgb = make_rgb (index);
    write_png (rgb, TINY_W, TINY_H, in);
    gst_buffer_unref (rgb);
  }
  run_tool (argv);
  return read_png (out, TINY_W, TINY_H);
}

/* The prompt changes while playing, from a prompt to a weighted blend:
 * every frame out equals the tool's img2img with the old or the new
 * prompt, and once a frame of the new one is out no frame of the old one
 * follows; the workers never load a file (the states come with the
 * chunks). */
GST_START_TEST (test_prompt_changes_against_tool)
{
  const gchar *const prompts[] = { "a photo of a cat",
    "a watercolor city:0.7|neon night:0.3"
  };
  const gchar *const tags[] = { "cat", "blend" };
  g_autofree gchar *model = tiny_path ("model");
  GstElement *element = pp_check_make_element (2, TINY_STEPS, model);
  GstHarness *h;
  guint seen = 0;
  const gboolean compare = !pp_check_sanitized ();

  g_object_set (element, "prompt", prompts[0], "seed", (guint64) 4,
      "strength", 0.5, "max-in-flight", 3, NULL);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  for (guint i = 0; i < TINY_FRAMES; i++) {
    if (i == TINY_SWITCH) {
      g_object_set (element, "prompt", prompts[1], NULL);
      g_usleep (SETTLE_US);
    }
    fail_unless_equals_int (gst_harness_push (h, make_rgb (i)), GST_FLOW_OK);
  }
  for (guint i = 0; i < TINY_FRAMES; i++) {
    GstBuffer *out = gst_harness_pull (h);
    GstBuffer *refs[2];
    guint which = 2;

    fail_unless (out != NULL, "frame %u did not come out", i);
    if (!compare) {
      gst_buffer_unref (out);
      continue;
    }
    for (guint p = 0; p < 2; p++) {
      refs[p] = tool_frame_text (i, prompts[p], tags[p]);
      if (pp_check_same_bytes (out, refs[p]))
        which = p;
    }
    fail_if (pp_check_same_bytes (refs[0], refs[1]), "the prompts give the "
        "same frame: the prompt is not used");
    fail_unless (which < 2, "frame %u equals the tool's with neither "
        "prompt", i);
    fail_unless (which >= seen, "frame %u has the old prompt after a frame "
        "with the new one: a stale frame", i);
    fail_unless (which == 0 || i >= TINY_SWITCH, "frame %u has the new "
        "prompt, set only before frame %u", i, TINY_SWITCH);
    seen = which;
    gst_buffer_unref (refs[0]);
    gst_buffer_unref (refs[1]);
    gst_buffer_unref (out);
  }
  fail_unless (!compare || seen == 1, "the new prompt never came out");
  {
    gchar *embeds = NULL;

    g_object_get (element, "prompt-embeds", &embeds, NULL);
    fail_unless (embeds == NULL, "prompt did not clear prompt-embeds");
  }
  stop (h);
}

GST_END_TEST;

/* A malformed blend while playing is refused with a warning and the stream
 * goes on with the prompt it had. */
GST_START_TEST (test_bad_prompt_keeps_stream)
{
  g_autofree gchar *model = tiny_path ("model");
  GstElement *element = pp_check_make_element (1, TINY_STEPS, model);
  GstBus *bus = gst_bus_new ();
  GstHarness *h;
  GstMessage *msg;
  GError *gerror = NULL;
  gchar *now = NULL;

  g_object_set (element, "prompt", "a photo of a cat", "seed", (guint64) 4,
      NULL);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  gst_element_set_bus (element, bus);
  g_object_set (element, "prompt", "a cat:0.5||a dog", NULL);
  msg = pop_warning (bus, MESSAGE_TIMEOUT_MS);
  fail_unless (msg != NULL, "no warning for a malformed blend");
  gst_message_parse_warning (msg, &gerror, NULL);
  fail_unless (strstr (gerror->message, "blend part 2") != NULL,
      "the warning does not name the empty part: %s", gerror->message);
  g_error_free (gerror);
  gst_message_unref (msg);
  g_object_get (element, "prompt", &now, NULL);
  fail_unless_equals_string (now, "a photo of a cat");
  g_free (now);
  fail_unless_equals_int (gst_harness_push (h, make_rgb (0)), GST_FLOW_OK);
  {
    GstBuffer *out = gst_harness_pull (h);
    GstBuffer *ref = tool_frame_text (0, "a photo of a cat", "cat1");

    fail_unless (out != NULL && pp_check_same_bytes (out, ref));
    gst_buffer_unref (out);
    gst_buffer_unref (ref);
  }
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  stop (h);
}

GST_END_TEST;

/* TRUE once every worker's batched-steps in @element's stats is above 0
 * (the heartbeats carry it: within @timeout_ms). */
static gboolean
workers_batched (GstElement * element, guint ranks, guint timeout_ms)
{
  const gint64 deadline = g_get_monotonic_time () + timeout_ms * 1000;
  gboolean all = FALSE;

  while (!all && g_get_monotonic_time () < deadline) {
    GstStructure *st = pp_check_get_stats (element);
    const GValue *steps = gst_structure_get_value (st, "batched-steps");

    fail_unless (steps != NULL && GST_VALUE_HOLDS_ARRAY (steps),
        "no batched-steps array in %" GST_PTR_FORMAT, st);
    all = gst_value_array_get_size (steps) == ranks;
    for (guint i = 0; all && i < ranks; i++)
      all = g_value_get_uint64 (gst_value_array_get_value (steps, i)) > 0;
    gst_structure_free (st);
    if (!all)
      g_usleep (50 * 1000);
  }
  return all;
}

/* strength, then the prompt, change while frames are in flight through
 * @ranks workers, with @stream_batch and @frame_batch: every frame out
 * equals the tool's img2img of its input with the settings of one of the
 * three epochs, the epochs only go forward, and each new one starts no
 * earlier than the frame pushed after its change.  With either batch,
 * every worker ran frames batched too. */
static void
settings_change_against_tool (guint ranks, gboolean stream_batch,
    guint frame_batch)
{
  const gboolean batch = stream_batch || frame_batch > 1;
  const struct
  {
    const gchar *strength, *prompt;
    guint from;
  } epochs[] = {
    {"0.5", "model", 0}, {"0.9", "model", TINY_SWITCH},
    {"0.9", "other", TINY_SWITCH_PROMPT},
  };
  g_autofree gchar *model = tiny_path ("model");
  g_autofree gchar *embeds = embeds_of ("model");
  g_autofree gchar *other = embeds_of ("other");
  /* With a batch, 30 ms a pass: the frames pushed meanwhile wait, and a
   * change meets frames still in a batch. */
  g_autofree gchar *uri = batch ? g_strconcat (model, "?step-ms=30",
      NULL) : g_strdup (model);
  GstElement *element = pp_check_make_element (ranks, TINY_STEPS, uri);
  GstHarness *h;
  guint seen = 0;
  const gboolean compare = !pp_check_sanitized ();

  g_object_set (element, "prompt-embeds", embeds, "seed", (guint64) 4,
      "strength", g_ascii_strtod (epochs[0].strength, NULL),
      "max-in-flight", frame_batch > 1 ? 2 * frame_batch : 3,
      "stream-batch", stream_batch, "frame-batch", frame_batch, NULL);
  graphs_from_env (element);
  /* Heartbeats (the stats' batched-steps) every second. */
  if (batch)
    g_object_set (element, "timeout-ms", 4000, NULL);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  for (guint i = 0; i < TINY_FRAMES; i++) {
    /* With a batch, no pause. */
    if (i == epochs[1].from) {
      g_object_set (element, "strength", g_ascii_strtod (epochs[1].strength,
              NULL), NULL);
      if (!batch)
        g_usleep (SETTLE_US);
    } else if (i == epochs[2].from) {
      g_object_set (element, "prompt-embeds", other, NULL);
      if (!batch)
        g_usleep (SETTLE_US);
    }
    fail_unless_equals_int (gst_harness_push (h, make_rgb (i)), GST_FLOW_OK);
  }
  for (guint i = 0; i < TINY_FRAMES; i++) {
    GstBuffer *out = gst_harness_pull (h);
    guint e, matches = 0, which = 0;

    fail_unless (out != NULL, "frame %u did not come out", i);
    if (!compare) {
      gst_buffer_unref (out);
      continue;
    }
    for (e = 0; e < G_N_ELEMENTS (epochs); e++) {
      GstBuffer *ref = tool_frame (i, epochs[e].strength, epochs[e].prompt);

      if (pp_check_same_bytes (out, ref)) {
        matches++;
        which = e;
      }
      gst_buffer_unref (ref);
    }
    fail_unless_equals_int (matches, 1);
    fail_unless (which >= seen, "frame %u has the settings of epoch %u "
        "after a frame of epoch %u: a stale frame", i, which, seen);
    fail_unless (i >= epochs[which].from, "frame %u has settings set only "
        "before frame %u", i, epochs[which].from);
    seen = which;
    gst_buffer_unref (out);
  }
  fail_unless (!compare || seen == G_N_ELEMENTS (epochs) - 1,
      "the last epoch never came out");
  if (batch)
    fail_unless (workers_batched (element, ranks, 10000),
        "a worker never ran two frames in one pass");
  stop (h);
}

GST_START_TEST (test_settings_change_against_tool)
{
  settings_change_against_tool (2, FALSE, 1);
}

GST_END_TEST;

/* The same through one worker that runs both steps with the stream
 * batch: a frame of a new epoch joins no batch, so the epochs still only
 * go forward, and each frame has its bytes alone. */
GST_START_TEST (test_stream_batch_settings_change_against_tool)
{
  settings_change_against_tool (1, TRUE, 1);
}

GST_END_TEST;

/* The same through two workers of one step each, taking up to three
 * waiting frames into a pass (frame-batch): a batch's frames leave
 * together, in order, and a frame of a new epoch starts a batch of its
 * own. */
GST_START_TEST (test_frame_batch_settings_change_against_tool)
{
  settings_change_against_tool (2, FALSE, 3);
}

GST_END_TEST;

/* And both: one worker with both steps, two frames at each (batches of
 * up to four, at two steps). */
GST_START_TEST (test_stream_frame_batch_settings_change_against_tool)
{
  settings_change_against_tool (1, TRUE, 2);
}

GST_END_TEST;

/* ppdiffuse-tool img2img of inputs @indices (@n of them, in order, each
 * @w × @h) as one sequence with the feature bank (the settings of the
 * temporal tests below) and @strength: the frames, in order.  @tag names
 * the files. */
static GPtrArray *
tool_sequence_of (const guint * indices, guint n, const gchar * strength,
    guint w, guint h, const gchar * tag)
{
  const gchar *tool = g_getenv ("PPDIFFUSE_TOOL");
  g_autofree gchar *model = tiny_path ("model");
  g_autofree gchar *embeds = embeds_of ("model");
  g_autofree gchar *in = g_strdup_printf ("%s/seq-%s-%%02d.png", tiny_dir,
      tag);
  g_autofree gchar *out = g_strdup_printf ("%s/tool-seq-%s-%%02d.png",
      tiny_dir, tag);
  g_autofree gchar *frames = g_strdup_printf ("%u", n);
  const gchar *argv[] = { tool, "img2img", "--model", model, "--in", in,
    "--out", out, "--prompt-embeds", embeds, "--steps",
    G_STRINGIFY (TINY_STEPS), "--strength", strength, "--seed", "4",
    "--frames", frames, "--temporal", "feature-bank", "--bank-frames", "2",
    "--fusion-threshold", "0.9", NULL
  };
  GPtrArray *refs = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_buffer_unref);

  for (guint k = 0; k < n; k++) {
    g_autofree gchar *path = g_strdup_printf ("%s/seq-%s-%02u.png", tiny_dir,
        tag, k);
    GstBuffer *rgb = make_rgb_sized (indices[k], w, h);

    write_png (rgb, w, h, path);
    gst_buffer_unref (rgb);
  }
  run_tool (argv);
  for (guint k = 0; k < n; k++) {
    g_autofree gchar *path = g_strdup_printf ("%s/tool-seq-%s-%02u.png",
        tiny_dir, tag, k);

    g_ptr_array_add (refs, read_png (path, w, h));
  }
  return refs;
}

/* A 2-worker element on the tiny model with the settings of the tool's
 * sequences above (tool_sequence_of): the prompt, seed 4, strength 0.5,
 * the feature bank of 2 frames at fusion-threshold 0.9. */
static GstElement *
banked_element (void)
{
  g_autofree gchar *model = tiny_path ("model");
  g_autofree gchar *embeds = embeds_of ("model");
  GstElement *element = pp_check_make_element (2, TINY_STEPS, model);

  g_object_set (element, "prompt-embeds", embeds, "seed", (guint64) 4,
      "strength", 0.5, "bank-frames", 2, "fusion-threshold", 0.9, NULL);
  gst_util_set_object_arg (G_OBJECT (element), "temporal", "feature-bank");
  return element;
}

/* The same for inputs @first … @first + @n − 1. */
static GPtrArray *
tool_sequence_sized (guint first, guint n, const gchar * strength, guint w,
    guint h)
{
  g_autofree guint *indices = g_new (guint, n);
  g_autofree gchar *tag = g_strdup_printf ("%u-%ux%u-%s", first, w, h,
      strength);

  for (guint k = 0; k < n; k++)
    indices[k] = first + k;
  return tool_sequence_of (indices, n, strength, w, h, tag);
}

static GPtrArray *
tool_sequence_at (guint first, guint n, const gchar * strength)
{
  return tool_sequence_sized (first, n, strength, TINY_W, TINY_H);
}

static GPtrArray *
tool_sequence (guint first, guint n)
{
  return tool_sequence_at (first, n, "0.5");
}

/* temporal=feature-bank and a settings change (strength) with frames in
 * flight: the frames before the new epoch are the old sequence's; the new
 * epoch starts no earlier than the frame pushed after the change, with
 * every bank empty, so from there on the frames are the tool's sequence
 * from that frame with the new strength. */
GST_START_TEST (test_temporal_settings_change_resets_bank)
{
  const guint frames = 8, change = 3, in_flight = 3;
  GstElement *element = banked_element ();
  g_autoptr (GPtrArray) outs = g_ptr_array_new_with_free_func (
      (GDestroyNotify) gst_buffer_unref);
  g_autoptr (GPtrArray) old = NULL, fresh = NULL;
  const gboolean compare = !pp_check_sanitized ();
  guint boundary;
  GstHarness *h;

  g_object_set (element, "max-in-flight", in_flight, NULL);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  for (guint i = 0; i < frames; i++) {
    if (i == change) {
      g_object_set (element, "strength", 0.9, NULL);
      g_usleep (SETTLE_US);
    }
    fail_unless_equals_int (gst_harness_push (h, make_rgb (i)), GST_FLOW_OK);
  }
  for (guint i = 0; i < frames; i++) {
    GstBuffer *out = gst_harness_pull (h);

    fail_unless (out != NULL, "frame %u did not come out", i);
    g_ptr_array_add (outs, out);
  }
  stop (h);
  if (!compare)
    return;
  old = tool_sequence_at (0, frames, "0.5");
  for (boundary = 0; boundary < frames; boundary++)
    if (!pp_check_same_bytes (g_ptr_array_index (outs, boundary),
            g_ptr_array_index (old, boundary)))
      break;
  fail_unless (boundary >= change && boundary <= change + in_flight,
      "the old sequence ends at frame %u, the change was made before frame "
      "%u", boundary, change);
  fresh = tool_sequence_at (boundary, frames - boundary, "0.9");
  for (guint i = boundary; i < frames; i++)
    fail_unless (pp_check_same_bytes (g_ptr_array_index (outs, i),
            g_ptr_array_index (fresh, i - boundary)), "frame %u is not the "
        "new epoch's fresh sequence from frame %u", i, boundary);
}

GST_END_TEST;

/* temporal=feature-bank and a caps change with frames in flight: the
 * frames of the old size are the old sequence's; the first frame of the
 * new size starts a new epoch with every bank empty, so those frames are
 * the tool's fresh sequence at the new size. */
GST_START_TEST (test_temporal_caps_change_resets_bank)
{
  const guint sizes[][2] = { {TINY_W, TINY_H}, {40, 24} };
  const guint per_size = 3;
  GstElement *element = banked_element ();
  const gboolean compare = !pp_check_sanitized ();
  GstHarness *h;
  guint n = 0;

  g_object_set (element, "max-in-flight", 4, NULL);
  h = make_harness (element, "RGB", sizes[0][0], sizes[0][1]);
  push_at_sizes (h, sizes, G_N_ELEMENTS (sizes), per_size);
  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++) {
    g_autoptr (GPtrArray) refs = compare ? tool_sequence_sized (s * per_size,
        per_size, "0.5", sizes[s][0], sizes[s][1]) : NULL;

    for (guint i = 0; i < per_size; i++, n++) {
      GstBuffer *out = gst_harness_pull (h);

      fail_unless (out != NULL, "frame %u did not come out", n);
      fail_unless_equals_uint64 (gst_buffer_get_size (out),
          sizes[s][0] * sizes[s][1] * 3);
      if (compare)
        fail_unless (pp_check_same_bytes (out, g_ptr_array_index (refs, i)),
            "frame %u (%ux%u) is not its size's fresh sequence", n,
            sizes[s][0], sizes[s][1]);
      gst_buffer_unref (out);
    }
  }
  stop (h);
}

GST_END_TEST;

/* temporal=feature-bank with keep-workers: after a stop and a start the
 * same workers take the stream again, and their banks start empty: the
 * second run's frames are the tool's fresh sequence. */
GST_START_TEST (test_temporal_restart_kept_workers)
{
  const guint per_run = 3;
  g_autofree gchar *caps = rgb_caps (TINY_W, TINY_H);
  g_autofree gchar *caps_rate = g_strconcat (caps, ",framerate=25/1", NULL);
  GstElement *element = banked_element ();
  const gboolean compare = !pp_check_sanitized ();
  GstHarness *h;

  /* Ours to free: the kept workers end only with the element. */
  gst_object_ref_sink (element);
  g_object_set (element, "keep-workers", TRUE, NULL);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  for (guint run = 0; run < 2; run++) {
    g_autoptr (GPtrArray) refs = compare ? tool_sequence (run * per_run,
        per_run) : NULL;

    if (run > 0) {
      fail_unless_equals_int (gst_element_set_state (element,
              GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
      gst_harness_play (h);
      gst_harness_set_src_caps_str (h, caps_rate);
    }
    for (guint i = 0; i < per_run; i++) {
      GstBuffer *out;

      fail_unless_equals_int (gst_harness_push (h, make_rgb (run * per_run
                  + i)), GST_FLOW_OK);
      out = gst_harness_pull (h);
      fail_unless (out != NULL);
      if (compare)
        fail_unless (pp_check_same_bytes (out, g_ptr_array_index (refs, i)),
            "run %u frame %u is not the fresh sequence's", run, i);
      gst_buffer_unref (out);
    }
  }
  stop_kept (h, element);
}

GST_END_TEST;

/* temporal=feature-bank with leaky: frames that find the mesh full are
 * dropped before any work, so no bank takes them: the frames that come
 * out are the tool's sequence of exactly the inputs that were computed
 * (told by their timestamps), in order. */
GST_START_TEST (test_temporal_dropped_frames_skip_bank)
{
  const guint pushes = 8;
  GstElement *element = banked_element ();
  g_autoptr (GstBus) bus = gst_bus_new ();
  g_autoptr (GPtrArray) refs = NULL;
  g_autoptr (GPtrArray) outs = g_ptr_array_new_with_free_func (
      (GDestroyNotify) gst_buffer_unref);
  g_autofree guint *computed = g_new (guint, pushes);
  const gboolean compare = !pp_check_sanitized ();
  guint n_dropped = 0;
  GstHarness *h;
  GstMessage *msg;

  g_object_set (element, "leaky", TRUE, "max-in-flight", 1, NULL);
  gst_element_set_bus (element, bus);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  for (guint i = 0; i < pushes; i++)
    fail_unless_equals_int (gst_harness_push (h, make_rgb (i)), GST_FLOW_OK);
  /* a drop posts its QOS message before the chain returns */
  while ((msg = gst_bus_pop_filtered (bus, GST_MESSAGE_QOS)) != NULL) {
    n_dropped++;
    gst_message_unref (msg);
  }
  fail_unless (n_dropped > 0, "no frame was dropped: the test proves "
      "nothing");
  for (guint k = 0; k < pushes - n_dropped; k++) {
    GstBuffer *out = gst_harness_pull (h);

    fail_unless (out != NULL, "output %u did not come out", k);
    computed[k] = (guint) (GST_BUFFER_PTS (out) / FRAME_DURATION);
    fail_unless (k == 0 || computed[k] > computed[k - 1]);
    g_ptr_array_add (outs, out);
  }
  if (compare) {
    refs = tool_sequence_of (computed, outs->len, "0.5", TINY_W, TINY_H,
        "dropped");
    for (guint k = 0; k < outs->len; k++)
      fail_unless (pp_check_same_bytes (g_ptr_array_index (outs, k),
              g_ptr_array_index (refs, k)), "output %u (input %u) is not "
          "the tool's sequence of the computed inputs", k, computed[k]);
  }
  stop (h);
}

GST_END_TEST;

/* temporal=feature-bank with the similarity filter: a frame that repeats
 * the last one sent (threshold 1: only the same picture, always) is
 * skipped before any work and goes out as a repeat of the last output, so
 * no bank takes it: the frames computed are the tool's sequence of the
 * distinct inputs, and each repeat is its predecessor's bytes. */
GST_START_TEST (test_temporal_similar_skips_bank)
{
  static const guint content[] = { 0, 0, 1, 2, 2, 2, 3 };
  static const guint distinct[] = { 0, 1, 2, 3 };
  const guint pushes = G_N_ELEMENTS (content);
  GstElement *element = banked_element ();
  g_autoptr (GPtrArray) refs = NULL;
  g_autoptr (GPtrArray) outs = g_ptr_array_new_with_free_func (
      (GDestroyNotify) gst_buffer_unref);
  GstStructure *stats;
  GstHarness *h;

  g_object_set (element, "similarity-threshold", 1.0, NULL);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  for (guint k = 0; k < pushes; k++) {
    GstBuffer *in = make_rgb (content[k]);

    GST_BUFFER_PTS (in) = k * FRAME_DURATION;
    fail_unless_equals_int (gst_harness_push (h, in), GST_FLOW_OK);
  }
  for (guint k = 0; k < pushes; k++) {
    GstBuffer *out = gst_harness_pull (h);

    fail_unless (out != NULL, "output %u did not come out", k);
    fail_unless_equals_uint64 (GST_BUFFER_PTS (out), k * FRAME_DURATION);
    g_ptr_array_add (outs, out);
  }
  stats = pp_check_get_stats (element);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "skipped-similar"),
      pushes - G_N_ELEMENTS (distinct));
  gst_structure_free (stats);
  if (!pp_check_sanitized ()) {
    refs = tool_sequence_of (distinct, G_N_ELEMENTS (distinct), "0.5",
        TINY_W, TINY_H, "similar");
    for (guint k = 0; k < pushes; k++)
      fail_unless (pp_check_same_bytes (g_ptr_array_index (outs, k),
              g_ptr_array_index (refs, content[k])), "output %u (input %u) "
          "is not the tool's frame of that input in the sequence of the "
          "distinct inputs", k, content[k]);
  }
  stop (h);
}

GST_END_TEST;

/* The stats' bank-bytes: with the feature bank every worker reports the
 * bytes its banks hold, which its heartbeats carry. */
GST_START_TEST (test_temporal_bank_bytes_in_stats)
{
  GstElement *element = banked_element ();
  gint64 deadline;
  GstHarness *h;
  gboolean all = FALSE;

  /* Heartbeats every second.  timeout-ms is also the workers' start
   * budget: loading the tiny model took over a second under ASan on a
   * loaded machine. */
  g_object_set (element, "timeout-ms", 4000, "stats-interval-ms", 100, NULL);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  for (guint i = 0; i < 3; i++) {
    GstBuffer *out;

    fail_unless_equals_int (gst_harness_push (h, make_rgb (i)), GST_FLOW_OK);
    out = gst_harness_pull (h);
    fail_unless (out != NULL);
    gst_buffer_unref (out);
  }
  /* heartbeats every second, the stats every 100 ms */
  deadline = g_get_monotonic_time () + 10 * G_USEC_PER_SEC;
  while (!all && g_get_monotonic_time () < deadline) {
    GstStructure *st = pp_check_get_stats (element);
    const GValue *bytes = gst_structure_get_value (st, "bank-bytes");

    fail_unless (bytes != NULL && GST_VALUE_HOLDS_ARRAY (bytes),
        "no bank-bytes array in %" GST_PTR_FORMAT, st);
    all = gst_value_array_get_size (bytes) == 2;
    for (guint i = 0; all && i < 2; i++)
      all = g_value_get_uint64 (gst_value_array_get_value (bytes, i)) > 0;
    gst_structure_free (st);
    if (!all)
      g_usleep (50 * 1000);
  }
  fail_unless (all, "the workers' bank-bytes never came above 0");
  stop (h);
}

GST_END_TEST;

/* temporal=feature-bank and a flush with frames in flight: the frames of
 * the stream before it that came out are the tool's sequence from the
 * first frame; after it every bank starts empty, so the frames are the
 * tool's sequence from the first frame after the flush, none a
 * continuation of the old one (docs/operator/cache-lifecycle.md). */
GST_START_TEST (test_temporal_flush_resets_bank)
{
  const guint before = 4, after = 4;
  GstElement *element = banked_element ();
  g_autoptr (GPtrArray) old = NULL, fresh = NULL, carried = NULL;
  const gboolean compare = !pp_check_sanitized ();
  guint pulled = 0;
  GstHarness *h;
  GstBuffer *out;

  g_object_set (element, "max-in-flight", 3, NULL);
  h = make_harness (element, "RGB", TINY_W, TINY_H);
  if (compare) {
    old = tool_sequence (0, before);
    fresh = tool_sequence (before, after);
  }
  for (guint i = 0; i < before; i++)
    fail_unless_equals_int (gst_harness_push (h, make_rgb (i)), GST_FLOW_OK);
  pp_check_harness_flush (h);
  /* Frames pushed before the flush may or may not have come out. */
  while ((out = gst_harness_try_pull (h)) != NULL) {
    if (compare)
      fail_unless (pp_check_same_bytes (out, g_ptr_array_index (old,
                  pulled)), "pre-flush frame %u is not the sequence's",
          pulled);
    gst_buffer_unref (out);
    pulled++;
  }
  for (guint i = before; i < before + after; i++)
    fail_unless_equals_int (gst_harness_push (h, make_rgb (i)), GST_FLOW_OK);
  for (guint k = 0; k < after; k++) {
    out = gst_harness_pull (h);
    fail_unless (out != NULL, "frame %u did not come out", before + k);
    if (compare)
      fail_unless (pp_check_same_bytes (out, g_ptr_array_index (fresh, k)),
          "frame %u after the flush is not the fresh sequence's (a bank "
          "kept across the flush?)", before + k);
    gst_buffer_unref (out);
  }
  stop (h);
}

GST_END_TEST;

/* A pipeline model's frames change size twice with frames in flight: each
 * equals the tool's img2img of its input at its own size (the per-size
 * noise and buffers rebuilt, no respawn in between). */
GST_START_TEST (test_pipeline_caps_change_in_flight)
{
  const guint sizes[][2] = { {48, 32}, {40, 24}, {48, 32} };
  const guint per_size = 3;
  g_autofree gchar *model = tiny_path ("model");
  g_autofree gchar *embeds = embeds_of ("model");
  GstElement *element = pp_check_make_element (2, TINY_STEPS, model);
  GstHarness *h;
  guint n = 0;

  g_object_set (element, "prompt-embeds", embeds, "seed", (guint64) 4,
      "strength", 0.5, "max-in-flight", 4, NULL);
  graphs_from_env (element);
  h = make_harness (element, "RGB", sizes[0][0], sizes[0][1]);
  push_at_sizes (h, sizes, G_N_ELEMENTS (sizes), per_size);
  for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
    for (guint i = 0; i < per_size; i++, n++) {
      GstBuffer *out = gst_harness_pull (h);
      GstBuffer *ref;

      fail_unless (out != NULL, "frame %u did not come out", n);
      fail_unless_equals_uint64 (gst_buffer_get_size (out),
          sizes[s][0] * sizes[s][1] * 3);
      if (pp_check_sanitized ()) {
        gst_buffer_unref (out);
        continue;
      }
      ref = tool_frame_sized (n, sizes[s][0], sizes[s][1], "0.5", "model");
      fail_unless (pp_check_same_bytes (out, ref), "frame %u (%ux%u) differs "
          "from the tool's", n, sizes[s][0], sizes[s][1]);
      gst_buffer_unref (out);
      gst_buffer_unref (ref);
    }
  stop (h);
}

GST_END_TEST;

static Suite *
live_settings_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-live-settings");
  TCase *tc = tcase_create ("stamp");

  tcase_add_checked_fixture (tc, NULL, pp_check_stop_left_over);
  tcase_add_test (tc, test_stamp_mark_changes_in_lockstep);
  tcase_add_test (tc, test_kept_workers_take_new_settings);
  tcase_add_test (tc, test_bad_change_keeps_stream);
  tcase_add_test (tc, test_stream_batch_nothing_to_batch);
  tcase_add_test (tc, test_caps_change_in_flight);
  tcase_add_test (tc, test_caps_change_slower_frames);
  tcase_add_test (tc, test_frame_batch_slow_passes);
  tcase_add_test (tc, test_stress_live_changes);
  suite_add_tcase (s, tc);
  tc = tcase_create ("pipeline");
  tcase_add_unchecked_fixture (tc, tiny_setup, tiny_teardown);
  tcase_add_checked_fixture (tc, NULL, pp_check_stop_left_over);
  tcase_add_test (tc, test_settings_change_against_tool);
  tcase_add_test (tc, test_stream_batch_settings_change_against_tool);
  tcase_add_test (tc, test_frame_batch_settings_change_against_tool);
  tcase_add_test (tc, test_stream_frame_batch_settings_change_against_tool);
  tcase_add_test (tc, test_temporal_flush_resets_bank);
  tcase_add_test (tc, test_temporal_settings_change_resets_bank);
  tcase_add_test (tc, test_temporal_caps_change_resets_bank);
  tcase_add_test (tc, test_temporal_restart_kept_workers);
  tcase_add_test (tc, test_temporal_dropped_frames_skip_bank);
  tcase_add_test (tc, test_temporal_similar_skips_bank);
  tcase_add_test (tc, test_temporal_bank_bytes_in_stats);
  tcase_add_test (tc, test_pipeline_caps_change_in_flight);
  tcase_add_test (tc, test_prompt_changes_against_tool);
  tcase_add_test (tc, test_bad_prompt_keeps_stream);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  gst_check_init (&argc, &argv);
  pp_check_run_and_exit (live_settings_suite (), "ppdiffuse-live-settings",
      __FILE__);
}
