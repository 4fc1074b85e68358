/* ppdiffuse — element tests of the similarity filter (similarity-threshold)
 * on a real 2-worker mesh running builtin:stamp: a skipped frame comes out
 * as a repeat of the last real output, with its own timestamps, in order;
 * still content skips most frames, moving content none; every frame is
 * accounted for. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>

#include "gstppdiffuse-similarity.h"
#include "pp-check-util.h"

#define WIDTH 64
#define HEIGHT 48
#define FPS 25
#define FRAME_DURATION (GST_SECOND / FPS)
#define CAPS_STR "video/x-raw,format=RGBA,width=64,height=48,framerate=25/1"
/* the same frames, another framerate: a caps change */
#define CAPS_STR_30 "video/x-raw,format=RGBA,width=64,height=48,framerate=30/1"
#define RANKS 2
#define STEPS 2
#define MODEL "builtin:stamp"
/* The threshold StreamDiffusion's examples use. */
#define THRESHOLD 0.98
#define FRAMES 60
/* A still scene skips at least this share of its frames at THRESHOLD. */
#define MIN_SKIPPED_PERCENT 80
/* Sensor noise of the still scene: every byte off by up to this much. */
#define NOISE_LEVELS 2
/* The moving disc: white on black, this radius, this many pixels a frame. */
#define DISC_RADIUS (HEIGHT / 4)
#define DISC_STEP 4
/* The still scene is alike itself at least this much (thumbnails). */
#define STILL_MIN_SIMILARITY 0.999
#define GROUP 5

/* The content of byte @c (R, G, B, A) of pixel (@x, @y) in frame @i. */
typedef guint8 (*Content) (guint i, guint x, guint y, guint c);

static guint8
base (guint x, guint y, guint c)
{
  return (guint8) ((x * 3 + y * 5 + c * 7) % 256);
}

/* The same picture in every frame; alpha (which the filter does not look
 * at) tells the frames apart. */
static guint8
constant (guint i, guint x, guint y, guint c)
{
  return c == 3 ? (guint8) (255 - i) : base (x, y, c);
}

/* The same picture with sensor noise of its own in every frame. */
static guint8
noisy_still (guint i, guint x, guint y, guint c)
{
  guint32 hash = (i * 73856093u) ^ (x * 19349663u) ^ (y * 83492791u)
      ^ (c * 2654435761u);
  gint v;

  if (c == 3)
    return 255;
  hash ^= hash >> 13;
  hash *= 0x5bd1e995u;
  hash ^= hash >> 15;
  v = base (x, y, c) + (gint) (hash % (2 * NOISE_LEVELS + 1)) - NOISE_LEVELS;
  return (guint8) CLAMP (v, 0, 255);
}

/* A white disc moving right over black, wrapping round. */
static guint8
moving_disc (guint i, guint x, guint y, guint c)
{
  const gint cx = DISC_RADIUS + (gint) (i * DISC_STEP) % (WIDTH
      - 2 * DISC_RADIUS);
  const gint dx = (gint) x - cx, dy = (gint) y - HEIGHT / 2;

  if (c == 3)
    return 255;
  return dx * dx + dy * dy <= DISC_RADIUS * DISC_RADIUS ? 255 : 0;
}

/* Groups of GROUP frames, the picture and its negative in turn; alpha
 * tells the frames apart. */
static guint8
groups (guint i, guint x, guint y, guint c)
{
  if (c == 3)
    return (guint8) (255 - i);
  return (i / GROUP) % 2 ? 255 - base (x, y, c) : base (x, y, c);
}

static GstBuffer *
make_frame (Content content, guint i)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, WIDTH * HEIGHT * 4, NULL);
  GstMapInfo map;

  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (guint y = 0; y < HEIGHT; y++)
    for (guint x = 0; x < WIDTH; x++)
      for (guint c = 0; c < 4; c++)
        map.data[(y * WIDTH + x) * 4 + c] = content (i, x, y, c);
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = i * FRAME_DURATION;
  GST_BUFFER_DTS (buf) = i * FRAME_DURATION;
  GST_BUFFER_DURATION (buf) = FRAME_DURATION;
  if (i == 0)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
  if (i % 2)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DELTA_UNIT);
  return buf;
}

/* What the filter sees of frame @i: its thumbnail. */
static void
thumb_of (Content content, guint i, PpSimilarityThumb * thumb)
{
  GstBuffer *buf = make_frame (content, i);
  GstMapInfo map;
  PpImage image = { NULL, WIDTH, HEIGHT, WIDTH * 4, 4, {0, 1, 2} };

  gst_buffer_map (buf, &map, GST_MAP_READ);
  image.data = map.data;
  pp_similarity_thumb (&image, thumb);
  gst_buffer_unmap (buf, &map);
  gst_buffer_unref (buf);
}

static gdouble
similarity (Content content, guint i, guint j)
{
  PpSimilarityThumb *a = g_new (PpSimilarityThumb, 1);
  PpSimilarityThumb *b = g_new (PpSimilarityThumb, 1);
  gdouble sim;

  thumb_of (content, i, a);
  thumb_of (content, j, b);
  sim = pp_similarity_cosine (a, b);
  g_free (a);
  g_free (b);
  return sim;
}

/* TRUE when @out holds frame @source after every step, alpha as it came
 * in. */
static gboolean
holds_stamped (GstBuffer * out, Content content, guint source)
{
  GstMapInfo map;
  gboolean same = TRUE;

  gst_buffer_map (out, &map, GST_MAP_READ);
  fail_unless_equals_int (map.size, WIDTH * HEIGHT * 4);
  for (guint y = 0; y < HEIGHT && same; y++)
    for (guint x = 0; x < WIDTH && same; x++)
      for (guint c = 0; c < 4 && same; c++) {
        guint v = content (source, x, y, c);

        if (c < 3)
          v = pp_check_stamp (v, c, STEPS, 0);
        same = map.data[(y * WIDTH + x) * 4 + c] == v;
      }
  gst_buffer_unmap (out, &map);
  return same;
}

/* The timing and flags of input frame @i. */
static void
check_times (GstBuffer * out, guint i)
{
  fail_unless_equals_uint64 (GST_BUFFER_PTS (out), i * FRAME_DURATION);
  fail_unless_equals_uint64 (GST_BUFFER_DTS (out), i * FRAME_DURATION);
  fail_unless_equals_uint64 (GST_BUFFER_DURATION (out), FRAME_DURATION);
  fail_unless_equals_int (GST_BUFFER_FLAG_IS_SET (out,
          GST_BUFFER_FLAG_DELTA_UNIT), i % 2);
  fail_unless_equals_int (GST_BUFFER_FLAG_IS_SET (out,
          GST_BUFFER_FLAG_DISCONT), i == 0);
}

/* Pulls the output of input frame @i and checks that it is frame @source
 * stamped (@source < @i: a repeat of @source's output) with @i's
 * timing. */
static void
pull_expect (GstHarness * h, Content content, guint i, guint source)
{
  GstBuffer *out = gst_harness_pull (h);

  fail_unless (out != NULL, "frame %u did not come out", i);
  check_times (out, i);
  fail_unless (holds_stamped (out, content, source), "the output of frame %u "
      "is not frame %u stamped", i, source);
  gst_buffer_unref (out);
}

/* A 2-worker mesh running the stamp model, with this similarity
 * threshold. */
static GstHarness *
make_harness (gdouble threshold)
{
  GstElement *e = pp_check_make_element (RANKS, STEPS, MODEL);

  g_object_set (e, "similarity-threshold", threshold, NULL);
  return pp_check_harness_new (e, CAPS_STR);
}

/* Stops the element, checks that @sent frames went through the mesh,
 * @skipped were skipped, and that every one of @frames in came out, and
 * frees the harness. */
static void
stop_and_check (GstHarness * h, guint64 frames, guint64 sent,
    guint64 skipped)
{
  GstElement *element = gst_object_ref (h->element);
  GstStructure *s;

  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  s = pp_check_get_stats (element);
  fail_unless_equals_uint64 (pp_check_stat_u64 (s, "mesh-chunks"), sent);
  fail_unless_equals_uint64 (pp_check_stat_u64 (s, "skipped-similar"), skipped);
  /* The identity: a repeat is a frame out. */
  fail_unless_equals_uint64 (pp_check_stat_u64 (s, "frames-in"), frames);
  fail_unless_equals_uint64 (pp_check_stat_u64 (s, "frames-out"), frames);
  fail_unless_equals_uint64 (pp_check_stat_u64 (s, "frames-in"),
      pp_check_stat_u64 (s, "frames-out") + pp_check_stat_u64 (s, "dropped-flush")
      + pp_check_stat_u64 (s, "dropped-error") + pp_check_stat_u64 (s, "dropped-qos")
      + pp_check_stat_u64 (s, "dropped-leaky"));
  fail_unless_equals_uint64 (sent + skipped, frames);
  gst_structure_free (s);
  fail_unless_equals_int (pp_check_count_descendants (PP_CHECK_WORKER_COMM),
      0);
  gst_object_unref (element);
  gst_harness_teardown (h);
}

/* ---- a still scene skips most frames ----------------------------------- */

/* A still scene with sensor noise: each output is either its own frame
 * stamped or the previous output again (a repeat), with its own timing;
 * at THRESHOLD at least MIN_SKIPPED_PERCENT of the frames are repeats. */
GST_START_TEST (test_still_skips_most)
{
  GstHarness *h = make_harness (THRESHOLD);
  GstBuffer *prev = NULL;
  guint sent = 0;

  /* the premise: alike enough to be skipped nearly always */
  fail_unless (similarity (noisy_still, 0, 1) > STILL_MIN_SIMILARITY);
  fail_unless (similarity (noisy_still, 0, 1) < 1.0, "no noise");
  for (guint i = 0; i < FRAMES; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (noisy_still, i)),
        GST_FLOW_OK);
  for (guint i = 0; i < FRAMES; i++) {
    GstBuffer *out = gst_harness_pull (h);

    fail_unless (out != NULL, "frame %u did not come out", i);
    check_times (out, i);
    if (holds_stamped (out, noisy_still, i))
      sent++;
    else
      fail_unless (prev != NULL && pp_check_same_bytes (prev, out),
          "frame %u is neither its own output nor a repeat of the last one",
          i);
    gst_clear_buffer (&prev);
    prev = out;
  }
  gst_clear_buffer (&prev);
  fail_unless (gst_harness_try_pull (h) == NULL, "an extra frame came out");
  GST_INFO ("%u of %u frames sent", sent, FRAMES);
  fail_unless ((FRAMES - sent) * 100 >= MIN_SKIPPED_PERCENT * FRAMES,
      "only %u of %u frames skipped", FRAMES - sent, FRAMES);
  stop_and_check (h, FRAMES, sent, FRAMES - sent);
}

GST_END_TEST;

/* ---- moving content skips none ----------------------------------------- */

GST_START_TEST (test_moving_skips_none)
{
  GstHarness *h = make_harness (THRESHOLD);

  /* the premise: each frame is unlike the one before, past the threshold
   * by enough that the skip probability is 0 */
  for (guint i = 1; i < FRAMES; i++)
    fail_unless (pp_similarity_skip_probability (similarity (moving_disc,
                i - 1, i), THRESHOLD) == 0.0, "frames %u and %u are too "
        "alike for this test", i - 1, i);
  for (guint i = 0; i < FRAMES; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (moving_disc, i)),
        GST_FLOW_OK);
  for (guint i = 0; i < FRAMES; i++)
    pull_expect (h, moving_disc, i, i);
  stop_and_check (h, FRAMES, FRAMES, 0);
}

GST_END_TEST;

/* videotestsrc's moving ball at 640x480, the documented threshold: no
 * frame is skipped (a small object over a still background counts). */
#define BALL_FRAMES 60
#define BALL_TIMEOUT (120 * GST_SECOND)

GST_START_TEST (test_videotestsrc_ball_skips_none)
{
  g_autofree gchar *launch = g_strdup_printf ("videotestsrc pattern=ball "
      "num-buffers=%d ! video/x-raw,format=RGBx,width=640,height=480 ! "
      "ppdiffuse name=d model=builtin:stamp ranks=1 steps=1 "
      "similarity-threshold=%g ! fakesink", BALL_FRAMES, THRESHOLD);
  GstElement *pipeline = gst_parse_launch (launch, NULL);
  GstElement *element;
  GstBus *bus;
  GstMessage *msg;
  GstStructure *stats;

  fail_unless (pipeline != NULL);
  element = gst_bin_get_by_name (GST_BIN (pipeline), "d");
  bus = gst_element_get_bus (pipeline);
  gst_element_set_state (pipeline, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (bus, BALL_TIMEOUT,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  fail_unless (msg != NULL && GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS,
      "the stream did not end with EOS in time");
  gst_message_unref (msg);
  stats = pp_check_get_stats (element);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "frames-in"),
      BALL_FRAMES);
  fail_unless_equals_uint64 (pp_check_stat_u64 (stats, "skipped-similar"), 0);
  gst_structure_free (stats);
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (element);
  gst_object_unref (bus);
  gst_object_unref (pipeline);
}

GST_END_TEST;

/* New settings show in a still scene: the first frame after they were
 * accepted is sent to the mesh whatever its similarity, and the repeats
 * after it repeat its output. */
#define MARK 9
#define SETTLE_US (300 * G_TIME_SPAN_MILLISECOND)

GST_START_TEST (test_new_settings_are_sent)
{
  GstHarness *h = make_harness (THRESHOLD);
  g_autofree gchar *marked = g_strdup_printf ("%s?mark=%d", MODEL, MARK);

  for (guint i = 0; i < 2 * GROUP; i++) {
    if (i == GROUP) {
      g_object_set (h->element, "model", marked, NULL);
      g_usleep (SETTLE_US);
    }
    fail_unless_equals_int (gst_harness_push (h, make_frame (constant, i)),
        GST_FLOW_OK);
  }
  for (guint i = 0; i < GROUP; i++)
    pull_expect (h, constant, i, 0);
  for (guint i = GROUP; i < 2 * GROUP; i++) {
    GstBuffer *out = gst_harness_pull (h);
    GstMapInfo map;
    guint v = constant (GROUP, 0, 0, 0);

    fail_unless (out != NULL, "frame %u did not come out", i);
    check_times (out, i);
    v = pp_check_stamp (v, 0, STEPS, MARK);
    gst_buffer_map (out, &map, GST_MAP_READ);
    fail_unless_equals_int (map.data[0], v);
    /* alpha tells which input it is: frame GROUP's, the first new one */
    fail_unless_equals_int (map.data[3], constant (GROUP, 0, 0, 3));
    gst_buffer_unmap (out, &map);
    gst_buffer_unref (out);
  }
  stop_and_check (h, 2 * GROUP, 2, 2 * GROUP - 2);
}

GST_END_TEST;

/* ---- off: nothing is skipped, not even identical frames ---------------- */

GST_START_TEST (test_threshold_zero_never_skips)
{
  GstHarness *h = make_harness (0.0);

  for (guint i = 0; i < FRAMES; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (constant, i)),
        GST_FLOW_OK);
  /* alpha tells each frame's own output from a repeat */
  for (guint i = 0; i < FRAMES; i++)
    pull_expect (h, constant, i, i);
  stop_and_check (h, FRAMES, FRAMES, 0);
}

GST_END_TEST;

/* ---- a change while PLAYING applies from the next frame ---------------- */

GST_START_TEST (test_threshold_change_while_playing)
{
  GstHarness *h = make_harness (0.0);
  guint i;

  /* identical frames: similarity 1, skipped whenever the filter is on */
  for (i = 0; i < 10; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (constant, i)),
        GST_FLOW_OK);
  g_object_set (h->element, "similarity-threshold", THRESHOLD, NULL);
  for (; i < 20; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (constant, i)),
        GST_FLOW_OK);
  g_object_set (h->element, "similarity-threshold", 0.0, NULL);
  for (; i < 30; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (constant, i)),
        GST_FLOW_OK);
  /* off; on: the first frame goes (no reference yet), the others repeat
   * it; off again */
  for (i = 0; i < 11; i++)
    pull_expect (h, constant, i, i);
  for (; i < 20; i++)
    pull_expect (h, constant, i, 10);
  for (; i < 30; i++)
    pull_expect (h, constant, i, i);
  stop_and_check (h, 30, 21, 9);
}

GST_END_TEST;

/* ---- a repeat is of the last real output ------------------------------- */

GST_START_TEST (test_repeats_follow_last_output)
{
  const guint frames = 4 * GROUP;
  GstHarness *h = make_harness (THRESHOLD);

  fail_unless (pp_similarity_skip_probability (similarity (groups, 0, GROUP),
          THRESHOLD) == 0.0);
  for (guint i = 0; i < frames; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (groups, i)),
        GST_FLOW_OK);
  /* each group's first frame is sent, the others repeat it */
  for (guint i = 0; i < frames; i++)
    pull_expect (h, groups, i, i - i % GROUP);
  stop_and_check (h, frames, frames / GROUP, frames - frames / GROUP);
}

GST_END_TEST;

/* ---- a flush or a caps change resets the reference ---------------------- */

GST_START_TEST (test_flush_and_caps_reset_reference)
{
  GstHarness *h = make_harness (THRESHOLD);
  guint i;

  for (i = 0; i < GROUP; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (constant, i)),
        GST_FLOW_OK);
  for (i = 0; i < GROUP; i++)
    pull_expect (h, constant, i, 0);

  pp_check_harness_flush (h);
  for (; i < 2 * GROUP; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (constant, i)),
        GST_FLOW_OK);
  for (i = GROUP; i < 2 * GROUP; i++)
    pull_expect (h, constant, i, GROUP);

  gst_harness_set_src_caps_str (h, CAPS_STR_30);
  for (; i < 3 * GROUP; i++)
    fail_unless_equals_int (gst_harness_push (h, make_frame (constant, i)),
        GST_FLOW_OK);
  for (i = 2 * GROUP; i < 3 * GROUP; i++)
    pull_expect (h, constant, i, 2 * GROUP);
  stop_and_check (h, 3 * GROUP, 3, 3 * GROUP - 3);
}

GST_END_TEST;

static Suite *
live_similar_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-live-similar");
  TCase *tc = tcase_create ("similarity");

  tcase_add_test (tc, test_still_skips_most);
  tcase_add_test (tc, test_moving_skips_none);
  tcase_add_test (tc, test_videotestsrc_ball_skips_none);
  tcase_add_test (tc, test_new_settings_are_sent);
  tcase_add_test (tc, test_threshold_zero_never_skips);
  tcase_add_test (tc, test_threshold_change_while_playing);
  tcase_add_test (tc, test_repeats_follow_last_output);
  tcase_add_test (tc, test_flush_and_caps_reset_reference);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  gst_check_init (&argc, &argv);
  pp_check_run_and_exit (live_similar_suite (), "ppdiffuse-live-similar",
      __FILE__);
}
