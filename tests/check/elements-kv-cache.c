/* ppdiffuse — the workers' cross-attention K/V cache on a tiny turbo
 * pipeline with two workers: the seed changes twice while playing, and the
 * stats' kv-cache-builds says each worker built its cache once per
 * cache epoch it computed in (docs/operator/cache-lifecycle.md: the start,
 * each accepted settings change, and a caps change, which starts a cache
 * epoch too).  The same stream with PPDIFFUSE_NO_KV_CACHE=1 gives the
 * same bytes and no builds: it runs in a child process of this test
 * started with that environment, because Open MPI's daemon, started at
 * this process's first spawn, hands its own environment to every worker
 * it spawns later (a g_setenv here would not reach them).  Real worker
 * meshes (MPI_Comm_spawn). */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <glib/gstdio.h>

#include "pp-check-util.h"

#define NO_KV_CACHE_ENV "PPDIFFUSE_NO_KV_CACHE"
/* Set in the child: the tiny model's folder, and where to write the
 * frames out. */
#define CHILD_DIR_ENV "PP_KV_CACHE_TEST_DIR"
#define CHILD_OUT_ENV "PP_KV_CACHE_TEST_OUT"
#define FPS 25
#define FRAME_DURATION (GST_SECOND / FPS)
#define TINY_W 48
#define TINY_H 32
#define TINY_STEPS 2
/* ranks: two workers, each running one step of every frame. */
#define RANKS 2
#define WORKERS RANKS
#define FRAMES_PER_EPOCH 3
/* Long enough for the settings thread to check a change. */
#define SETTLE_US (300 * G_TIME_SPAN_MILLISECOND)
/* Heartbeats come every timeout-ms / 4: the stats see a build within a
 * few of them.  timeout-ms also bounds the handshake, which a sanitized
 * worker on a busy machine can take more than a second to answer. */
#define TIMEOUT_MS 3000
#define STATS_INTERVAL_MS 50
#define STATS_DEADLINE_US (10 * G_TIME_SPAN_SECOND)
/* After the count is reached: two more heartbeats, to see it stay. */
#define STAY_US (2 * TIMEOUT_MS / 4 * G_TIME_SPAN_MILLISECOND)

/* The seed of each settings epoch: the first, then two changes. */
static const guint64 epoch_seeds[] = { 4, 9, 17 };

static gchar *tiny_dir;
static const gchar *self_path;

static void
tiny_setup (void)
{
  const gchar *tool = g_getenv ("PPDIFFUSE_TOOL");
  g_autofree gchar *model = NULL;
  gchar *err = NULL;
  gint status = -1;

  fail_unless (tool != NULL, "PPDIFFUSE_TOOL must name ppdiffuse-tool");
  tiny_dir = g_dir_make_tmp ("ppdiffuse-kv-XXXXXX", NULL);
  fail_unless (tiny_dir != NULL);
  model = g_build_filename (tiny_dir, "model", NULL);
  {
    const gchar *argv[] = { tool, "make-tiny", "--kind", "turbo", "--out",
      model, "--seed", "2", NULL
    };
    fail_unless (g_spawn_sync (NULL, (gchar **) argv, NULL,
            G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err, &status,
            NULL));
    fail_unless (g_spawn_check_wait_status (status, NULL), "make-tiny: %s",
        err);
    g_free (err);
  }
}

static void
tiny_teardown (void)
{
  pp_check_remove_tree (tiny_dir);
  g_clear_pointer (&tiny_dir, g_free);
}

static GstBuffer *
make_rgb (guint index)
{
  return pp_check_make_rgb_frame (index, TINY_W, TINY_H, FRAME_DURATION);
}

/* TRUE when every worker's kv-cache-builds in @element's stats is @want. */
static gboolean
builds_are (GstElement * element, guint64 want, gchar ** got)
{
  GstStructure *s = pp_check_get_stats (element);
  const GValue *builds;
  gboolean all = TRUE;

  builds = gst_structure_get_value (s, "kv-cache-builds");
  fail_unless (builds != NULL && GST_VALUE_HOLDS_ARRAY (builds),
      "no kv-cache-builds array in %" GST_PTR_FORMAT, s);
  fail_unless_equals_int (gst_value_array_get_size (builds), WORKERS);
  for (guint i = 0; i < WORKERS; i++)
    all = all && g_value_get_uint64 (gst_value_array_get_value (builds,
            i)) == want;
  g_free (*got);
  *got = gst_value_serialize (builds);
  gst_structure_free (s);
  return all;
}

/* Waits (with a deadline) until every worker reports @want builds, then
 * checks that the count stays there. */
static void
expect_builds (GstElement * element, guint64 want)
{
  const gint64 deadline = g_get_monotonic_time () + STATS_DEADLINE_US;
  g_autofree gchar *got = NULL;

  while (!builds_are (element, want, &got)
      && g_get_monotonic_time () < deadline)
    g_usleep (STATS_INTERVAL_MS * G_TIME_SPAN_MILLISECOND);
  fail_unless (builds_are (element, want, &got), "kv-cache-builds %s, "
      "expected %" G_GUINT64_FORMAT " per worker", got, want);
  g_usleep (STAY_US);
  fail_unless (builds_are (element, want, &got), "kv-cache-builds %s, "
      "expected %" G_GUINT64_FORMAT " per worker", got, want);
}

/* Runs the stream (one frame in, one out, the seed changed between
 * epochs, the caps changed in the last one) and returns the frames out;
 * checks the workers' builds: one per cache epoch, none with @cache
 * FALSE. */
static GPtrArray *
run_stream (gboolean cache)
{
  g_autofree gchar *model = g_build_filename (tiny_dir, "model", NULL);
  g_autofree gchar *embeds = g_build_filename (tiny_dir, "model",
      "prompt_embeds.npy", NULL);
  g_autofree gchar *caps = g_strdup_printf ("video/x-raw,format=RGB,"
      "width=%u,height=%u,framerate=%u/1", TINY_W, TINY_H, FPS);
  g_autofree gchar *other_caps = g_strdup_printf ("video/x-raw,format=RGB,"
      "width=%u,height=%u,framerate=%u/1", TINY_W, TINY_H, FPS * 2);
  GPtrArray *outs = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_buffer_unref);
  GstElement *element = pp_check_make_element (RANKS, TINY_STEPS, model);
  GstHarness *h;
  guint n = 0;

  g_object_set (element, "prompt-embeds", embeds, "seed", epoch_seeds[0],
      "strength", 0.5, "timeout-ms", TIMEOUT_MS, "stats-interval-ms",
      STATS_INTERVAL_MS, NULL);
  h = pp_check_harness_new (element, caps);
  for (guint e = 0; e < G_N_ELEMENTS (epoch_seeds); e++) {
    if (e > 0) {
      g_object_set (element, "seed", epoch_seeds[e], NULL);
      g_usleep (SETTLE_US);
    }
    for (guint i = 0; i < FRAMES_PER_EPOCH; i++, n++) {
      /* A caps change (same size, another rate) in the last settings
       * epoch: a new cache epoch, built once more. */
      if (e == G_N_ELEMENTS (epoch_seeds) - 1 && i == 1)
        gst_harness_set_src_caps_str (h, other_caps);
      fail_unless_equals_int (gst_harness_push (h, make_rgb (n)),
          GST_FLOW_OK);
      g_ptr_array_add (outs, gst_harness_pull (h));
      fail_unless (g_ptr_array_index (outs, n) != NULL,
          "frame %u did not come out", n);
    }
  }
  expect_builds (element, cache ? G_N_ELEMENTS (epoch_seeds) + 1 : 0);
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_harness_teardown (h);
  return outs;
}

/* The child: the stream without the cache, its frames' bytes one after
 * the other into $PP_KV_CACHE_TEST_OUT. */
GST_START_TEST (test_child_stream_without_cache)
{
  g_autoptr (GPtrArray) outs = NULL;
  g_autoptr (GByteArray) bytes = g_byte_array_new ();

  fail_unless_equals_string (g_getenv (NO_KV_CACHE_ENV), "1");
  outs = run_stream (FALSE);
  for (guint i = 0; i < outs->len; i++) {
    GstMapInfo map;

    gst_buffer_map (g_ptr_array_index (outs, i), &map, GST_MAP_READ);
    g_byte_array_append (bytes, map.data, map.size);
    gst_buffer_unmap (g_ptr_array_index (outs, i), &map);
  }
  fail_unless (g_file_set_contents (g_getenv (CHILD_OUT_ENV),
          (const gchar *) bytes->data, bytes->len, NULL));
}

GST_END_TEST;

GST_START_TEST (test_builds_per_settings_epoch)
{
  g_autoptr (GPtrArray) with = run_stream (TRUE);
  g_autofree gchar *out = g_build_filename (tiny_dir, "without.bin", NULL);
  g_autofree gchar *without = NULL;
  g_auto (GStrv) envp = g_get_environ ();
  const gchar *argv[] = { self_path, NULL };
  gchar *err = NULL;
  gint status = -1;
  gsize len = 0, at = 0;

  envp = g_environ_setenv (envp, NO_KV_CACHE_ENV, "1", TRUE);
  envp = g_environ_setenv (envp, CHILD_DIR_ENV, tiny_dir, TRUE);
  envp = g_environ_setenv (envp, CHILD_OUT_ENV, out, TRUE);
  /* The child's check run has the test's own default timeout. */
  fail_unless (g_spawn_sync (NULL, (gchar **) argv, envp,
          G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err, &status, NULL));
  fail_unless (g_spawn_check_wait_status (status, NULL),
      "the run without the cache failed: %s", err);
  g_free (err);
  fail_unless (g_file_get_contents (out, &without, &len, NULL));
  for (guint i = 0; i < with->len; i++) {
    GstBuffer *frame = g_ptr_array_index (with, i);
    const gsize size = gst_buffer_get_size (frame);

    fail_unless (at + size <= len, "frame %u missing without the cache", i);
    fail_unless (gst_buffer_memcmp (frame, 0, without + at, size) == 0,
        "frame %u differs without the K/V cache", i);
    at += size;
  }
  fail_unless_equals_uint64 (at, len);
}

GST_END_TEST;

static Suite *
kv_cache_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-kv-cache");
  TCase *tc = tcase_create ("pipeline");

  tcase_add_unchecked_fixture (tc, tiny_setup, tiny_teardown);
  tcase_add_test (tc, test_builds_per_settings_epoch);
  suite_add_tcase (s, tc);
  return s;
}

static Suite *
child_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-kv-cache-child");
  TCase *tc = tcase_create ("without-cache");

  tcase_add_test (tc, test_child_stream_without_cache);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  gst_check_init (&argc, &argv);
  self_path = argv[0];
  if (g_getenv (CHILD_DIR_ENV) != NULL) {
    tiny_dir = g_strdup (g_getenv (CHILD_DIR_ENV));
    pp_check_run_and_exit (child_suite (), "ppdiffuse-kv-cache-child",
        __FILE__);
  }
  pp_check_run_and_exit (kv_cache_suite (), "ppdiffuse-kv-cache", __FILE__);
}
