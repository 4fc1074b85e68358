/* ppdiffuse — rank 0's device runs out of memory in the middle of a
 * stream (a caps change to larger frames): the element posts an error
 * naming rank 0, the device's memory and what to change, the application
 * lives on, and the same element started again streams frames equal to
 * those before the failure, on a model loaded again.  On the emulated
 * cuda backend ($PPDIFFUSE_CUDA_MODULE), whose cudaMalloc in this process
 * (rank 0) the test makes fail once (pp_cuda_emu_fail_malloc): in the
 * making of a tensor (an error returned), inside an op (the backend
 * halts) and on the collector's thread (decoding).  Real worker meshes
 * (MPI_Comm_spawn); the workers' devices do not fail. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gmodule.h>

#include "pp-check-util.h"

#define FPS 25
#define FRAME_DURATION (GST_SECOND / FPS)
#define SMALL 32
#define LARGE 48
#define FRAMES 2
#define TIMEOUT_MS 5000
#define ERROR_WITHIN_MS 5000

static gchar *tiny_dir;
static guint64 (*malloc_calls) (void);
static void (*fail_malloc) (guint64 n, guint64 count);

static void
setup (void)
{
  const gchar *tool = g_getenv ("PPDIFFUSE_TOOL");
  const gchar *module_path = g_getenv ("PPDIFFUSE_CUDA_MODULE");
  const gchar *argv[] = { tool, "make-tiny", "--kind", "turbo", "--out",
    NULL, "--seed", "3", NULL
  };
  g_autofree gchar *model = NULL;
  gchar *err = NULL;
  gint status = -1;
  GModule *module;

  fail_unless (tool != NULL, "PPDIFFUSE_TOOL must name ppdiffuse-tool");
  fail_unless (module_path != NULL, "PPDIFFUSE_CUDA_MODULE must name the "
      "emulated cuda module");
  tiny_dir = g_dir_make_tmp ("ppdiffuse-device-XXXXXX", NULL);
  fail_unless (tiny_dir != NULL);
  model = g_build_filename (tiny_dir, "model", NULL);
  argv[5] = model;
  fail_unless (g_spawn_sync (NULL, (gchar **) argv, NULL,
          G_SPAWN_STDOUT_TO_DEV_NULL, NULL, NULL, NULL, &err, &status, NULL));
  fail_unless (g_spawn_check_wait_status (status, NULL), "make-tiny: %s",
      err);
  g_free (err);
  /* The emulation the element's backend loads, for its allocations. */
  module = g_module_open (module_path, G_MODULE_BIND_LAZY);
  fail_unless (module != NULL, "%s: %s", module_path, g_module_error ());
  fail_unless (g_module_symbol (module, "pp_cuda_emu_malloc_calls",
          (gpointer *) & malloc_calls));
  fail_unless (g_module_symbol (module, "pp_cuda_emu_fail_malloc",
          (gpointer *) & fail_malloc));
}

static void
teardown (void)
{
  pp_check_remove_tree (tiny_dir);
  g_clear_pointer (&tiny_dir, g_free);
}

static GstElement *
make_element (void)
{
  g_autofree gchar *model = g_build_filename (tiny_dir, "model", NULL);
  g_autofree gchar *embeds = g_build_filename (model, "prompt_embeds.npy",
      NULL);
  GstElement *e = pp_check_make_element (1, 1, model);

  /* Ours: kept workers would serve the next start, but not rank 0's
   * spoiled model. */
  gst_object_ref_sink (e);
  g_object_set (e, "keep-workers", TRUE, "prompt-embeds", embeds,
      "timeout-ms", TIMEOUT_MS, NULL);
  return e;
}

static GstBuffer *
make_rgb (guint side, guint index)
{
  return pp_check_make_rgb_frame (index, side, side, FRAME_DURATION);
}

/* The caps of frames @side pixels square (free them). */
static gchar *
caps_of (guint side)
{
  return g_strdup_printf ("video/x-raw,format=RGB,width=%u,height=%u,"
      "framerate=%d/1", side, side, FPS);
}

static void
push_caps (GstHarness * h, guint side)
{
  g_autofree gchar *caps = caps_of (side);

  fail_unless (gst_harness_push_event (h,
          gst_event_new_caps (gst_caps_from_string (caps))));
}

/* Brings @h's element to PLAYING with a new stream of frames @side
 * pixels square. */
static void
start (GstHarness * h, guint side)
{
  g_autofree gchar *caps = caps_of (side);

  pp_check_harness_start (h, "device", caps);
}

/* FRAMES frames @side pixels square through @h, from index @first; the
 * outputs in @out (FRAMES buffers, owned by the caller). */
static void
run_frames (GstHarness * h, guint side, guint first, GstBuffer ** out)
{
  for (guint i = 0; i < FRAMES; i++)
    fail_unless_equals_int (gst_harness_push (h, make_rgb (side, first + i)),
        GST_FLOW_OK);
  for (guint i = 0; i < FRAMES; i++) {
    out[i] = gst_harness_pull (h);
    fail_unless (out[i] != NULL, "frame %u of %u did not come out", i,
        FRAMES);
  }
}

/* Stops @h's element, dropping what came out and was not pulled. */
static void
stop (GstHarness * h)
{
  GstBuffer *left;

  fail_unless_equals_int (gst_element_set_state (h->element, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  while ((left = gst_harness_try_pull (h)) != NULL)
    gst_buffer_unref (left);
}

/* The device allocations rank 0 makes for the first frames at LARGE
 * after a stream at SMALL: counted in a run that does not fail. */
static guint64
large_allocations (void)
{
  GstElement *e = make_element ();
  GstHarness *h = gst_harness_new_with_element (e, "sink", "src");
  GstBuffer *out[FRAMES];
  guint64 before;

  start (h, SMALL);
  run_frames (h, SMALL, 0, out);
  for (guint i = 0; i < FRAMES; i++)
    gst_buffer_unref (out[i]);
  before = malloc_calls ();
  push_caps (h, LARGE);
  run_frames (h, LARGE, 0, out);
  for (guint i = 0; i < FRAMES; i++)
    gst_buffer_unref (out[i]);
  stop (h);
  gst_harness_teardown (h);
  gst_object_unref (e);
  return malloc_calls () - before;
}

/* A stream at SMALL, then at LARGE with rank 0's device full from its
 * allocation @n for the new size on: the element's error says what, the
 * application goes on, and the element started again gives the frames it
 * gave before, at SMALL and at LARGE.  TRUE when the start after the
 * failure spawned new workers (rank 0's model was spoiled: an op's buffer
 * failed, which halted the backend), FALSE when it kept them (a tensor
 * could not be made, which the work returned as its error). */
static gboolean
fail_allocation (guint64 n)
{
  static const gchar *const needles[] = { "rank 0 (pid ",
    "out of device memory", "use a smaller frame", NULL
  };
  GstElement *e = make_element ();
  GstHarness *h = gst_harness_new_with_element (e, "sink", "src");
  GstBus *bus = gst_bus_new ();
  GstBuffer *before[FRAMES], *after[FRAMES];
  GstFlowReturn ret = GST_FLOW_OK;
  GArray *workers, *restarted;
  gboolean anew;
  gint64 since;

  gst_element_set_bus (e, bus);
  start (h, SMALL);
  run_frames (h, SMALL, 0, before);
  push_caps (h, LARGE);
  since = g_get_monotonic_time ();
  /* From allocation @n on, the device is full. */
  fail_malloc (n, G_MAXUINT64);
  /* The chain fails at once when encoding failed; a decoding's failure
   * fails the frames pushed after it. */
  for (guint i = 0; i < 4 * FRAMES && ret == GST_FLOW_OK; i++)
    ret = gst_harness_push (h, make_rgb (LARGE, i));
  pp_check_expect_error (bus, since, ERROR_WITHIN_MS, needles);
  stop (h);
  fail_malloc (0, 0);
  workers = pp_check_find_descendants (PP_CHECK_WORKER_COMM);

  /* Started again: a new model and mesh, the device's memory given
   * back. */
  start (h, SMALL);
  restarted = pp_check_find_descendants (PP_CHECK_WORKER_COMM);
  fail_unless_equals_int (workers->len, 1);
  fail_unless_equals_int (restarted->len, 1);
  anew = g_array_index (workers, gint, 0) != g_array_index (restarted, gint,
      0);
  g_array_unref (workers);
  g_array_unref (restarted);
  run_frames (h, SMALL, 0, after);
  for (guint i = 0; i < FRAMES; i++) {
    fail_unless (pp_check_same_bytes (before[i], after[i]),
        "frame %u after the failure differs from the one before", i);
    gst_buffer_unref (before[i]);
    gst_buffer_unref (after[i]);
  }
  push_caps (h, LARGE);
  run_frames (h, LARGE, 0, after);
  for (guint i = 0; i < FRAMES; i++)
    gst_buffer_unref (after[i]);
  stop (h);
  gst_element_set_bus (e, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  gst_object_unref (e);
  return anew;
}

GST_START_TEST (test_rank0_out_of_memory)
{
  const guint64 total = large_allocations ();
  guint anew = 0;

  g_print ("rank 0 allocates %" G_GUINT64_FORMAT " times for frames of a "
      "new size\n", total);
  fail_unless (total >= 3, "only %" G_GUINT64_FORMAT " allocations",
      total);
  /* The device full from the first allocation, from one in the middle
   * and from the last: the encoding's first tensor, the decoding's
   * (on the collector's thread), and an op's buffer in both. */
  anew += fail_allocation (1);
  anew += fail_allocation ((total + 1) / 2);
  anew += fail_allocation (total);
  /* Both ways a failure comes back were taken. */
  fail_unless (anew > 0 && anew < 3, "%u of 3 starts after a failure "
      "spawned new workers", anew);
}

GST_END_TEST;

static Suite *
device_failure_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-device-failure");
  TCase *tc = tcase_create ("device-failure");

  tcase_set_timeout (tc, 240);
  tcase_add_unchecked_fixture (tc, setup, teardown);
  tcase_add_test (tc, test_rank0_out_of_memory);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  gst_check_init (&argc, &argv);
  pp_check_run_and_exit (device_failure_suite (), "ppdiffuse-device-failure",
      __FILE__);
}
