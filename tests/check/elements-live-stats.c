/* ppdiffuse — what live applications rely on, with a real worker mesh:
 * the qos switch, leaky following upstream liveness, the latency answer
 * (p95 of the measured submit→return times) and its LATENCY message, and
 * the periodic ppdiffuse-stats messages.  (The progress messages of a
 * start are tested in elements-ppdiffuse.c, test_progress_messages.) */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>

#include "pp-check-util.h"

#define FPS 30                  /* pp_check_make_flat_frame's */
#define FRAME_BYTES (64 * 48 * 4)
#define CAPS_STR "video/x-raw,format=RGBA,width=64,height=48,framerate=30/1"
/* Bound of every wait for a bus message. */
#define MESSAGE_TIMEOUT (5 * GST_SECOND)
/* The relative error of the element's percentiles (PP_LATENCY_RELATIVE_ERROR
 * of gstppdiffuse-stats.h: half a 1/64 bucket). */
#define PERCENTILE_ERROR (1.0 / 128)

static GstBuffer *
frame (guint index)
{
  GstBuffer *buf = pp_check_make_flat_frame (index, FRAME_BYTES);

  GST_BUFFER_DURATION (buf) = GST_SECOND / FPS;
  return buf;
}

static gdouble
stat_double (const GstStructure * s, const gchar * field)
{
  gdouble v = 0;

  fail_unless (gst_structure_get_double (s, field, &v), "no %s in %"
      GST_PTR_FORMAT, field, s);
  return v;
}

/* Every frame that went in came out or was counted as dropped. */
static void
check_accounted (const GstStructure * s)
{
  fail_unless_equals_uint64 (pp_check_stat_u64 (s, "frames-in"),
      pp_check_stat_u64 (s, "frames-out") + pp_check_stat_u64 (s, "dropped-flush")
      + pp_check_stat_u64 (s, "dropped-error") + pp_check_stat_u64 (s, "dropped-qos")
      + pp_check_stat_u64 (s, "dropped-leaky"));
}

static void
check_ordered (const GstStructure * s, const gchar * suffix)
{
  const gchar *names[] = { "latency-p50", "latency-p95", "latency-p99",
    "latency-max"
  };
  guint64 last = 0;

  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    gchar *field = g_strconcat (names[i], suffix, NULL);
    guint64 v = pp_check_stat_u64 (s, field);

    fail_unless (v >= last, "%s %" G_GUINT64_FORMAT " below %" G_GUINT64_FORMAT,
        field, v, last);
    last = v;
    g_free (field);
  }
}

/* A harness around @element (transfer floating) with the tests' caps,
 * stopped after the case if it fails before stop_with_stats (). */
static GstHarness *
harness_new (GstElement * element)
{
  return pp_check_track_harness (pp_check_harness_new (element, CAPS_STR));
}

/* Stops the element and returns its stats, settled once it stopped. */
static GstStructure *
stop_with_stats (GstHarness * h)
{
  GstStructure *stats;

  pp_check_untrack_harness ();

  fail_unless_equals_int (gst_element_set_state (h->element,
          GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  stats = pp_check_get_stats (h->element);
  gst_harness_teardown (h);
  /* Under a sanitizer each worker's exit runs its checks, on a machine
   * that runs two such suites at once. */
  fail_unless_equals_int (pp_check_wait_descendants_gone
      (PP_CHECK_WORKER_COMM, pp_check_repeats (5000, 15000)), 0);
  return stats;
}

static void
stop (GstHarness * h)
{
  gst_structure_free (stop_with_stats (h));
}

static guint
count_messages (GstBus * bus, GstMessageType type)
{
  GstMessage *msg;
  guint n = 0;

  while ((msg = gst_bus_pop_filtered (bus, type)) != NULL) {
    gst_message_unref (msg);
    n++;
  }
  return n;
}

/* ---- qos ---------------------------------------------------------------- */

/* Downstream says it is a second behind: with qos on the frames before
 * that are dropped (dropped-qos, a QOS message each); with qos off every
 * one goes through the mesh and comes out, and no QOS message is posted. */
static void
run_late_frames (gboolean qos)
{
  const guint n_before = 2, n_late = 8;
  GstElement *element = pp_check_make_element (1, 1, "builtin:stamp");
  GstBus *bus = gst_bus_new ();
  GstStructure *stats;
  GstHarness *h;
  guint out = 0;
  GstBuffer *buf;

  g_object_set (element, "qos", qos, NULL);
  gst_element_set_bus (element, bus);
  h = harness_new (element);
  for (guint i = 0; i < n_before; i++) {
    fail_unless_equals_int (gst_harness_push (h, frame (i)), GST_FLOW_OK);
    gst_buffer_unref (gst_harness_pull (h));
  }
  fail_unless (gst_harness_push_upstream_event (h, gst_event_new_qos
          (GST_QOS_TYPE_UNDERFLOW, 0.5, GST_SECOND, GST_SECOND * n_before /
              FPS)));
  for (guint i = n_before; i < n_before + n_late; i++)
    fail_unless_equals_int (gst_harness_push (h, frame (i)), GST_FLOW_OK);
  /* 3 s: past the earliest time the QoS event set (~2.1 s) */
  fail_unless_equals_int (gst_harness_push (h, frame (3 * FPS)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  while ((buf = gst_harness_pull (h)) != NULL) {
    const gboolean in_time = GST_BUFFER_PTS (buf) == 3 * GST_SECOND;

    out++;
    gst_buffer_unref (buf);
    if (in_time)
      break;
  }
  gst_element_set_bus (element, NULL);
  stats = stop_with_stats (h);
  check_accounted (stats);
  if (qos) {
    fail_unless_equals_int (out, 1);
    fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "dropped-qos"), n_late);
    fail_unless_equals_int (count_messages (bus, GST_MESSAGE_QOS), n_late);
  } else {
    fail_unless_equals_int (out, n_late + 1);
    fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "dropped-qos"), 0);
    fail_unless_equals_int (count_messages (bus, GST_MESSAGE_QOS), 0);
  }
  gst_structure_free (stats);
  gst_object_unref (bus);
}

GST_START_TEST (test_qos_on_drops_late)
{
  GstElement *e = pp_check_make_element (1, 1, "builtin:stamp");
  gboolean qos = FALSE;

  g_object_get (e, "qos", &qos, NULL);
  fail_unless (qos, "qos is not on by default");
  gst_object_unref (e);
  run_late_frames (TRUE);
}

GST_END_TEST;

GST_START_TEST (test_qos_off_keeps_late)
{
  run_late_frames (FALSE);
}

GST_END_TEST;

/* ---- leaky follows upstream's liveness ----------------------------------- */

/* What the upstream end answers to a LATENCY query, and the harness's own
 * query function for everything else. */
static gboolean upstream_live;
static GstClockTime upstream_min;
static GstPadQueryFunction harness_src_query;

static gboolean
upstream_latency_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  if (GST_QUERY_TYPE (query) != GST_QUERY_LATENCY)
    return harness_src_query (pad, parent, query);
  gst_query_set_latency (query, upstream_live, upstream_min,
      GST_CLOCK_TIME_NONE);
  return TRUE;
}

static GstHarness *
make_harness_with_upstream (GstElement * element, gboolean live)
{
  GstHarness *h = harness_new (element);

  upstream_live = live;
  upstream_min = 0;
  harness_src_query = GST_PAD_QUERYFUNC (h->srcpad);
  gst_pad_set_query_function (h->srcpad, upstream_latency_query);
  return h;
}

/* The element's answer, as downstream asks it. */
static GstClockTime
query_latency (GstHarness * h, gboolean live)
{
  GstQuery *query = gst_query_new_latency ();
  GstClockTime min, max;
  gboolean is_live;

  fail_unless (gst_pad_peer_query (h->sinkpad, query));
  gst_query_parse_latency (query, &is_live, &min, &max);
  fail_unless_equals_int (is_live, live);
  gst_query_unref (query);
  return min;
}

/* One frame in flight at most and 200 ms of work per frame: pushes that
 * find the mesh full are dropped when leaky is in effect, else they wait.
 * @leaky: -1 unset, else the value set.  Returns the frames dropped. */
static guint64
run_full_mesh (gboolean live, gint leaky)
{
  const guint pushes = 4;
  GstElement *element = pp_check_make_element (1, 1, "builtin:stamp?step-ms=200");
  GstStructure *stats;
  gboolean in_effect;
  guint64 dropped;
  GstHarness *h;

  g_object_set (element, "max-in-flight", 1, NULL);
  if (leaky >= 0)
    g_object_set (element, "leaky", leaky, NULL);
  h = make_harness_with_upstream (element, live);
  /* What a pipeline does before PLAYING. */
  query_latency (h, live);
  g_object_get (element, "leaky", &in_effect, NULL);
  fail_unless_equals_int (in_effect, leaky >= 0 ? leaky : live);
  for (guint i = 0; i < pushes; i++)
    fail_unless_equals_int (gst_harness_push (h, frame (i)), GST_FLOW_OK);
  stats = pp_check_get_stats (element);
  dropped = pp_check_stat_u64 (stats, "dropped-leaky");
  gst_structure_free (stats);
  for (guint64 i = 0; i < pushes - dropped; i++)
    gst_buffer_unref (gst_harness_pull (h));
  stats = stop_with_stats (h);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-in"), pushes);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-out"),
      pushes - dropped);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "dropped-leaky"), dropped);
  check_accounted (stats);
  gst_structure_free (stats);
  return dropped;
}

GST_START_TEST (test_leaky_unset_live_drops)
{
  fail_unless (run_full_mesh (TRUE, -1) > 0,
      "live upstream, leaky unset: nothing was dropped");
}

GST_END_TEST;

GST_START_TEST (test_leaky_unset_not_live_blocks)
{
  fail_unless_equals_uint64 (run_full_mesh (FALSE, -1), 0);
}

GST_END_TEST;

GST_START_TEST (test_leaky_set_overrides)
{
  fail_unless_equals_uint64 (run_full_mesh (TRUE, FALSE), 0);
  fail_unless (run_full_mesh (FALSE, TRUE) > 0,
      "leaky=true on a non-live upstream: nothing was dropped");
}

GST_END_TEST;

/* ---- latency: the p95 of the measured times ---------------------------- */

static gint
cmp_time (gconstpointer a, gconstpointer b)
{
  const GstClockTime x = *(const GstClockTime *) a;
  const GstClockTime y = *(const GstClockTime *) b;

  return x < y ? -1 : x > y;
}

/* Nearest-rank p95 of @n times (sorted in place). */
static GstClockTime
p95 (GstClockTime * times, guint n)
{
  guint rank = (guint) ((95 * n + 99) / 100);

  qsort (times, n, sizeof *times, cmp_time);
  return times[CLAMP (rank, 1, n) - 1];
}

/* Frames one at a time: the answer is upstream's min + the p95 of the
 * submit→return times, which the test brackets by its own push→pull
 * times (each holds a submit→return and a little more): at most their
 * p95, and at least their median less a slack (a p95 of 12 times is
 * their largest, and one push→pull stretched by the machine's load would
 * pass any slack the test could give the largest).  A burst then
 * queues frames in the mesh: the p95 grows past 1.25 × the last answer,
 * a LATENCY message is posted, and the next answer is the new p95. */
GST_START_TEST (test_latency_answer_is_p95)
{
  const guint steady = 12, burst = 6;
  /* Steps long enough that the test's own overhead is small beside them
   * (under a sanitizer, on a loaded machine, less small: 40 ms seen). */
  const GstClockTime step = 100 * GST_MSECOND;
  const GstClockTime slack = pp_check_repeats (30, 100) * GST_MSECOND;
  GstElement *element = pp_check_make_element (1, 1, "builtin:stamp?step-ms=100");
  GstClockTime times[32], measured, median, answer, grown;
  GstBus *bus = gst_bus_new ();
  GstStructure *stats;
  GstMessage *msg;
  GstHarness *h;

  g_object_set (element, "max-in-flight", burst, NULL);
  gst_element_set_bus (element, bus);
  h = make_harness_with_upstream (element, FALSE);
  upstream_min = 7 * GST_MSECOND;
  fail_unless_equals_uint64 (query_latency (h, FALSE), upstream_min);
  for (guint i = 0; i < steady; i++) {
    const gint64 t0 = g_get_monotonic_time ();

    fail_unless_equals_int (gst_harness_push (h, frame (i)), GST_FLOW_OK);
    gst_buffer_unref (gst_harness_pull (h));
    times[i] = (g_get_monotonic_time () - t0) * GST_USECOND;
  }
  measured = p95 (times, steady);
  median = times[steady / 2];   /* p95 sorted them */
  answer = query_latency (h, FALSE) - upstream_min;
  stats = pp_check_get_stats (element);
  fail_unless_equals_uint64 (answer, pp_check_stat_u64 (stats, "latency-p95-total"));
  fail_unless_equals_uint64 (answer, pp_check_stat_u64 (stats, "latency"));
  check_ordered (stats, "-total");
  gst_structure_free (stats);
  GST_INFO ("answer %" GST_TIME_FORMAT ", p95 of push→pull %"
      GST_TIME_FORMAT, GST_TIME_ARGS (answer), GST_TIME_ARGS (measured));
  fail_unless (answer >= step, "latency %" GST_TIME_FORMAT " is below the "
      "step's %" GST_TIME_FORMAT, GST_TIME_ARGS (answer), GST_TIME_ARGS (step));
  fail_unless (answer <= measured * (1 + PERCENTILE_ERROR),
      "latency %" GST_TIME_FORMAT " above the p95 of push→pull %"
      GST_TIME_FORMAT, GST_TIME_ARGS (answer), GST_TIME_ARGS (measured));
  fail_unless (answer + slack >= median, "latency %" GST_TIME_FORMAT
      " far below the median push→pull %" GST_TIME_FORMAT,
      GST_TIME_ARGS (answer), GST_TIME_ARGS (median));
  /* Answered: the steady frames asked once, at the first frame. */
  count_messages (bus, GST_MESSAGE_LATENCY);

  for (guint i = 0; i < burst; i++)
    fail_unless_equals_int (gst_harness_push (h, frame (steady + i)),
        GST_FLOW_OK);
  for (guint i = 0; i < burst; i++)
    gst_buffer_unref (gst_harness_pull (h));
  msg = gst_bus_timed_pop_filtered (bus, MESSAGE_TIMEOUT,
      GST_MESSAGE_LATENCY);
  fail_unless (msg != NULL, "no LATENCY message after the p95 grew");
  gst_message_unref (msg);
  grown = query_latency (h, FALSE) - upstream_min;
  stats = pp_check_get_stats (element);
  fail_unless_equals_uint64 (grown, pp_check_stat_u64 (stats, "latency-p95-total"));
  /* The p95 of 18 samples is the largest: the last frame of the burst,
   * which waited for the five before it. */
  fail_unless_equals_uint64 (grown, pp_check_stat_u64 (stats, "latency-max-total"));
  gst_structure_free (stats);
  fail_unless (grown * 4 > answer * 5, "latency %" GST_TIME_FORMAT " is not "
      "1.25 × %" GST_TIME_FORMAT, GST_TIME_ARGS (grown),
      GST_TIME_ARGS (answer));
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  stop (h);
}

GST_END_TEST;

/* ---- ppdiffuse-stats messages -------------------------------------------- */

#define STATS_INTERVAL_MS 200

/* The next ppdiffuse-stats message within @timeout, or NULL. */
static GstStructure *
pop_stats (GstBus * bus, GstElement * element, GstClockTime timeout)
{
  const gint64 deadline = g_get_monotonic_time () + timeout / GST_USECOND;

  for (;;) {
    const gint64 left = deadline - g_get_monotonic_time ();
    GstMessage *msg = gst_bus_timed_pop_filtered (bus,
        MAX (left, 0) * GST_USECOND, GST_MESSAGE_ELEMENT);
    GstStructure *s;

    if (msg == NULL)
      return NULL;
    if (!gst_structure_has_name (gst_message_get_structure (msg),
            "ppdiffuse-stats")) {
      gst_message_unref (msg);
      continue;
    }
    fail_unless (GST_MESSAGE_SRC (msg) == GST_OBJECT (element));
    s = gst_structure_copy (gst_message_get_structure (msg));
    gst_message_unref (msg);
    return s;
  }
}

static void
check_worker_busy (const GstStructure * s, guint ranks, gdouble * most)
{
  const GValue *busy = gst_structure_get_value (s, "worker-busy");

  fail_unless (busy != NULL && GST_VALUE_HOLDS_ARRAY (busy));
  fail_unless_equals_int (gst_value_array_get_size (busy), ranks);
  for (guint i = 0; i < ranks; i++) {
    gdouble b = g_value_get_double (gst_value_array_get_value (busy, i));

    fail_unless (b >= 0 && b <= 1, "worker-busy %f", b);
    *most = MAX (*most, b);
  }
}

/* The CPU loads: rank 0's and one a worker, each at least 0 and at most
 * every core of this host busy (with room for the clocks' grain). */
static void
check_cpu_loads (const GstStructure * s, guint ranks, gdouble * most_rank0,
    gdouble * most_worker)
{
  const gdouble cores = g_get_num_processors () * 1.5;
  const GValue *cpu = gst_structure_get_value (s, "worker-cpu-load");
  gdouble load = -1;

  fail_unless (gst_structure_get_double (s, "cpu-load", &load));
  fail_unless (load >= 0 && load <= cores, "cpu-load %f", load);
  *most_rank0 = MAX (*most_rank0, load);
  fail_unless (cpu != NULL && GST_VALUE_HOLDS_ARRAY (cpu));
  fail_unless_equals_int (gst_value_array_get_size (cpu), ranks);
  for (guint i = 0; i < ranks; i++) {
    load = g_value_get_double (gst_value_array_get_value (cpu, i));
    fail_unless (load >= 0 && load <= cores, "worker-cpu-load %f", load);
    *most_worker = MAX (*most_worker, load);
  }
}

/* Rank 0's compute device, named as its backend names it: the CPU's
 * ("CPU, N cores, …") or a GPU's ("cuda:N NAME, sm_XY, …"); and each
 * worker's as its handshake said it, with its backend, its host's CPU and
 * the host. */
static void
check_device (const GstStructure * s, guint ranks)
{
  const gchar *device = gst_structure_get_string (s, "device");
  const GValue *workers = gst_structure_get_value (s, "worker-devices");

  fail_unless (device != NULL, "no device field");
  fail_unless (g_str_has_prefix (device, "CPU, ")
      || g_str_has_prefix (device, "cuda:"), "device '%s'", device);
  fail_unless (workers != NULL && GST_VALUE_HOLDS_ARRAY (workers));
  fail_unless_equals_int (gst_value_array_get_size (workers), ranks);
  for (guint i = 0; i < ranks; i++) {
    const gchar *w = g_value_get_string (gst_value_array_get_value (workers,
            i));

    fail_unless ((g_str_has_prefix (w, "cpu: CPU, ")
            || g_str_has_prefix (w, "cuda: cuda:"))
        && strstr (w, "(cpu: ") != NULL && strstr (w, ") on ") != NULL,
        "worker-devices[%u] '%s'", i, w);
  }
}

/* With no frame flowing, messages come every interval; while frames flow
 * their counts, rates and percentiles hold together; once the stream is
 * drained every frame is accounted for; stats-interval-ms=0, set while
 * playing, stops them, and setting it again starts them. */
GST_START_TEST (test_stats_messages)
{
  const guint ranks = 2, frames = 30;
  /* Two stages of 20 ms: at most 50 frames a second come out. */
  const gdouble max_fps = 1000.0 / 20;
  GstElement *element = pp_check_make_element (ranks, ranks,
      "builtin:stamp?step-ms=20");
  GstBus *bus = gst_bus_new ();
  GstStructure *s, *last = NULL, *prop;
  gdouble most_busy = 0, most_fps = 0, most_cpu = 0, most_worker_cpu = 0;
  guint64 frames_out = 0;
  guint n_messages = 0;
  GstHarness *h;
  gint64 t;

  /* Heartbeats every 500 ms carry the busy time.  timeout-ms is also the
   * workers' start budget, which 1 s made tight under ASan. */
  g_object_set (element, "stats-interval-ms", STATS_INTERVAL_MS,
      "timeout-ms", 2000, NULL);
  gst_element_set_bus (element, bus);
  h = harness_new (element);

  /* Idle: the messages come at the interval all the same. */
  s = pop_stats (bus, element, MESSAGE_TIMEOUT);
  fail_unless (s != NULL, "no ppdiffuse-stats message");
  gst_structure_free (s);
  t = g_get_monotonic_time ();
  for (guint i = 0; i < 3; i++) {
    gint64 now;

    s = pop_stats (bus, element, MESSAGE_TIMEOUT);
    fail_unless (s != NULL, "no ppdiffuse-stats message while idle");
    now = g_get_monotonic_time ();
    fail_unless (now - t >= STATS_INTERVAL_MS * 1000 / 2, "two messages %"
        G_GINT64_FORMAT " µs apart, interval %u ms", now - t,
        STATS_INTERVAL_MS);
    fail_unless_equals_uint64 (pp_check_stat_u64 (s, "frames-in"), 0);
    fail_unless (stat_double (s, "fps") == 0, "fps while idle");
    check_device (s, ranks);
    t = now;
    gst_structure_free (s);
  }

  for (guint i = 0; i < frames; i++)
    fail_unless_equals_int (gst_harness_push (h, frame (i)), GST_FLOW_OK);
  fail_unless (gst_harness_push_event (h, gst_event_new_eos ()));
  for (guint i = 0; i < frames; i++)
    gst_buffer_unref (gst_harness_pull (h));
  /* One whole interval after the last frame came out. */
  g_usleep (2 * STATS_INTERVAL_MS * 1000);

  while ((s = pop_stats (bus, element, 0)) != NULL) {
    const guint64 out = pp_check_stat_u64 (s, "frames-out");
    const gdouble fps = stat_double (s, "fps");
    const gdouble overlap = stat_double (s, "overlap-score");

    n_messages++;
    fail_unless (out >= frames_out, "frames-out went back");
    frames_out = out;
    fail_unless (fps >= 0 && fps <= max_fps * 1.5, "fps %f", fps);
    most_fps = MAX (most_fps, fps);
    fail_unless (overlap >= 0 && overlap <= 1, "overlap %f", overlap);
    check_ordered (s, "");
    check_ordered (s, "-total");
    check_worker_busy (s, ranks, &most_busy);
    check_cpu_loads (s, ranks, &most_cpu, &most_worker_cpu);
    check_device (s, ranks);
    fail_unless (pp_check_stat_u64 (s, "frames-in") >= out);
    fail_unless_equals_uint64 (pp_check_stat_u64 (s, "skipped-similar"), 0);
    fail_unless (gst_structure_has_field_typed (s, "cache-epoch",
            G_TYPE_UINT));
    fail_unless (gst_structure_has_field_typed (s, "in-flight",
            G_TYPE_UINT));
    if (pp_check_stat_u64 (s, "latency-max") > 0)
      fail_unless (pp_check_stat_u64 (s, "latency-max") >= ranks * 20 * GST_MSECOND);
    if (last != NULL)
      gst_structure_free (last);
    last = s;
  }
  fail_unless (n_messages >= 2, "%u messages", n_messages);
  fail_unless (most_fps > 0, "no interval saw a frame out");
  fail_unless (most_busy > 0, "no worker was ever busy");
  /* Rank 0 converted and sent every frame; the workers received, stamped
   * and sent them, over heartbeats 500 ms apart. */
  fail_unless (most_cpu > 0, "rank 0's process never used the CPU");
  fail_unless (most_worker_cpu > 0, "no worker's process used the CPU");
  /* Drained: the last message and the property agree, and add up. */
  fail_unless_equals_uint64 (pp_check_stat_u64 (last, "frames-in"), frames);
  fail_unless_equals_uint64 (pp_check_stat_u64 (last, "frames-out"), frames);
  {
    guint in_flight = G_MAXUINT;

    fail_unless (gst_structure_get_uint (last, "in-flight", &in_flight));
    fail_unless_equals_int (in_flight, 0);
  }
  check_accounted (last);
  fail_unless (pp_check_stat_u64 (last, "latency-max-total") >= ranks * 20 *
      GST_MSECOND);
  prop = pp_check_get_stats (element);
  fail_unless_equals_uint64 (pp_check_stat_u64 (prop, "frames-in"), frames);
  fail_unless_equals_uint64 (pp_check_stat_u64 (prop, "latency-p95-total"),
      pp_check_stat_u64 (last, "latency-p95-total"));
  gst_structure_free (prop);
  gst_structure_free (last);

  /* Off while playing: none. */
  g_object_set (element, "stats-interval-ms", 0, NULL);
  g_usleep (STATS_INTERVAL_MS * 1000);
  while ((s = pop_stats (bus, element, 0)) != NULL)
    gst_structure_free (s);
  s = pop_stats (bus, element, 3 * STATS_INTERVAL_MS * GST_MSECOND);
  fail_unless (s == NULL, "a ppdiffuse-stats message with "
      "stats-interval-ms=0");
  /* On again. */
  g_object_set (element, "stats-interval-ms", STATS_INTERVAL_MS, NULL);
  s = pop_stats (bus, element, MESSAGE_TIMEOUT);
  fail_unless (s != NULL, "no message once stats-interval-ms was set again");
  gst_structure_free (s);
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  stop (h);
}

GST_END_TEST;

/* stats-interval-ms=0 from the start: no message at all. */
GST_START_TEST (test_stats_interval_off)
{
  GstElement *element = pp_check_make_element (1, 1, "builtin:stamp");
  GstBus *bus = gst_bus_new ();
  GstStructure *s;
  GstHarness *h;

  g_object_set (element, "stats-interval-ms", 0, NULL);
  gst_element_set_bus (element, bus);
  h = harness_new (element);
  for (guint i = 0; i < 3; i++) {
    fail_unless_equals_int (gst_harness_push (h, frame (i)), GST_FLOW_OK);
    gst_buffer_unref (gst_harness_pull (h));
  }
  s = pop_stats (bus, element, 1500 * GST_MSECOND);
  fail_unless (s == NULL, "a ppdiffuse-stats message with "
      "stats-interval-ms=0");
  s = pp_check_get_stats (element);
  fail_unless_equals_uint64 (pp_check_stat_u64 (s, "frames-out"), 3);
  gst_structure_free (s);
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  stop (h);
}

GST_END_TEST;

static Suite *
live_stats_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-live-stats");
  TCase *tc;

  tc = tcase_create ("qos");
  tcase_add_checked_fixture (tc, NULL, pp_check_stop_left_over);
  tcase_add_test (tc, test_qos_on_drops_late);
  tcase_add_test (tc, test_qos_off_keeps_late);
  suite_add_tcase (s, tc);

  tc = tcase_create ("leaky");
  tcase_add_checked_fixture (tc, NULL, pp_check_stop_left_over);
  tcase_add_test (tc, test_leaky_unset_live_drops);
  tcase_add_test (tc, test_leaky_unset_not_live_blocks);
  tcase_add_test (tc, test_leaky_set_overrides);
  suite_add_tcase (s, tc);

  tc = tcase_create ("latency");
  tcase_add_checked_fixture (tc, NULL, pp_check_stop_left_over);
  tcase_add_test (tc, test_latency_answer_is_p95);
  suite_add_tcase (s, tc);

  tc = tcase_create ("stats");
  tcase_add_checked_fixture (tc, NULL, pp_check_stop_left_over);
  tcase_add_test (tc, test_stats_messages);
  tcase_add_test (tc, test_stats_interval_off);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  gst_check_init (&argc, &argv);
  pp_check_run_and_exit (live_stats_suite (), "ppdiffuse-live-stats",
      __FILE__);
}
