/* ppdiffuse — rank 0's device runs out of memory in the middle of a
 * stream (a caps change to larger frames): the element posts an error
 * naming rank 0, the device's memory and what to change, the application
 * lives on, and the same element started again streams frames equal to
 * those before the failure, on a model loaded again.  On the emulated
 * cuda backend ($PPDIFFUSE_CUDA_MODULE), whose cudaMalloc in this process
 * (rank 0) the test makes fail once (pp_cuda_emu_fail_malloc): in the
 * making of a tensor (an error returned), inside an op (the backend
 * halts) and on the collector's thread (decoding).  Real worker meshes
 * (MPI_Comm_spawn); the workers' devices do not fail.
 *
 * And a text prompt set while playing whose encoding on rank 0's device
 * does not fit: the settings are refused with a warning naming the
 * device's memory, and the stream goes on, its frames those it gave
 * before; a failure inside the prompt's ops (which halts the backend) is
 * taken back at once, the encoding having run with none of the stream's
 * work in flight.
 *
 * And rank 0's device faulting in a kernel ($PP_CUDA_EMU_FAULT_KERNEL,
 * a test of its own: the fault is the process's for good): the element's
 * error says the device's context is lost, and every start after it fails
 * in bounded time saying so, the application alive. */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gmodule.h>
#include <string.h>

#include "pp-check-util.h"

#define FPS 25
#define FRAME_DURATION (GST_SECOND / FPS)
#define SMALL 32
#define LARGE 48
#define FRAMES 2
#define TIMEOUT_MS 5000
#define ERROR_WITHIN_MS 5000
#define PROMPT "a photo of a cat"
/* The prompt's last allocations the sweep fails (its encoding's), and
 * under a sanitizer (slower) as many. */
#define PROMPT_LAST_ALLOCATIONS 6
#define PROMPT_LAST_ALLOCATIONS_SANITIZED 3

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

/* The element's debug records (rank 0's log lines among them), kept to
 * be searched; its warnings and errors also printed as they come, so that
 * a failure the test did not expect (a start that fails) says why. */
static GMutex log_lock;
static GString *log_text;

static void
keep_log (GstDebugCategory * category, GstDebugLevel level,
    const gchar * file, const gchar * function, gint line, GObject * object,
    GstDebugMessage * message, gpointer data)
{
  (void) data;
  if (level <= GST_LEVEL_WARNING)
    gst_debug_log_default (category, level, file, function, line, object,
        message, NULL);
  if (g_strcmp0 (gst_debug_category_get_name (category), "ppdiffuse") != 0)
    return;
  g_mutex_lock (&log_lock);
  g_string_append_printf (log_text, "%s\n", gst_debug_message_get (message));
  g_mutex_unlock (&log_lock);
}

static void
log_forget (void)
{
  g_mutex_lock (&log_lock);
  g_string_truncate (log_text, 0);
  g_mutex_unlock (&log_lock);
}

static gboolean
log_has (const gchar * needle)
{
  gboolean has;

  g_mutex_lock (&log_lock);
  has = strstr (log_text->str, needle) != NULL;
  g_mutex_unlock (&log_lock);
  return has;
}

/* Waits, within @within_ms, for a debug record saying @needle. */
static void
wait_log (const gchar * needle, guint within_ms)
{
  const gint64 deadline = g_get_monotonic_time () + within_ms * 1000;

  while (!log_has (needle)) {
    fail_unless (g_get_monotonic_time () < deadline, "no log line said "
        "'%s' within %u ms", needle, within_ms);
    g_usleep (10000);
  }
}

/* How a prompt set while playing came out (fail_prompt_allocation). */
typedef enum
{
  PROMPT_ACCEPTED,              /* its failure had another way */
  PROMPT_REFUSED,               /* the work returned the failure */
  PROMPT_TAKEN_BACK,            /* refused, the backend taken back */
} PromptOutcome;

/* Waits, within @within_ms from @since_us, for the settings to be
 * accepted or for the warning that refuses them, which must mention each
 * of @needles (other warnings, such as the stream's pace, are let by). */
static gboolean
settings_refused (GstBus * bus, gint64 since_us, guint within_ms,
    const gchar * const *needles)
{
  const gint64 deadline = since_us + within_ms * 1000;
  gchar *text = NULL;

  while (text == NULL) {
    GstMessage *msg;
    GError *error = NULL;
    gchar *debug = NULL;

    if (log_has ("new settings accepted"))
      return FALSE;
    fail_unless (g_get_monotonic_time () < deadline, "the settings were "
        "neither accepted nor refused within %u ms", within_ms);
    msg = gst_bus_timed_pop_filtered (bus, 10 * GST_MSECOND,
        GST_MESSAGE_WARNING);
    if (msg == NULL)
      continue;
    gst_message_parse_warning (msg, &error, &debug);
    text = g_strdup_printf ("%s (%s)", error->message, debug ? debug : "");
    if (strstr (text, "Ignoring new settings") == NULL)
      g_clear_pointer (&text, g_free);
    g_free (debug);
    g_error_free (error);
    gst_message_unref (msg);
  }
  for (guint i = 0; needles[i] != NULL; i++)
    fail_unless (strstr (text, needles[i]) != NULL,
        "warning '%s' does not mention '%s'", text, needles[i]);
  g_free (text);
  return TRUE;
}

/* The device allocations rank 0 makes for PROMPT set while playing (the
 * text encoder's load and the prompt's encoding), counted in a run that
 * does not fail, the stream idle meanwhile. */
static guint64
prompt_allocations (void)
{
  GstElement *e = make_element ();
  GstHarness *h = gst_harness_new_with_element (e, "sink", "src");
  GstBuffer *out[FRAMES];
  guint64 before, total;

  start (h, SMALL);
  run_frames (h, SMALL, 0, out);
  for (guint i = 0; i < FRAMES; i++)
    gst_buffer_unref (out[i]);
  log_forget ();
  before = malloc_calls ();
  g_object_set (e, "prompt", PROMPT, NULL);
  wait_log ("new settings accepted", pp_check_bound_ms (ERROR_WITHIN_MS));
  total = malloc_calls () - before;
  stop (h);
  gst_harness_teardown (h);
  gst_object_unref (e);
  return total;
}

/* A stream at SMALL, then PROMPT set with rank 0's device full from the
 * prompt's allocation @n on: a warning says the settings were refused
 * and why (or, where the failure had another way, they are accepted), no
 * error comes, and the frames after it are those before it; with room
 * again the prompt goes in. */
static PromptOutcome
fail_prompt_allocation (guint64 n)
{
  static const gchar *const needles[] = { "prompt '" PROMPT "'",
    "out of device memory", NULL
  };
  GstElement *e = make_element ();
  GstHarness *h = gst_harness_new_with_element (e, "sink", "src");
  GstBus *bus = gst_bus_new ();
  GstBuffer *before[FRAMES], *after[FRAMES];
  PromptOutcome outcome = PROMPT_ACCEPTED;
  GstMessage *error;
  gint64 since;

  gst_element_set_bus (e, bus);
  start (h, SMALL);
  run_frames (h, SMALL, 0, before);
  log_forget ();
  since = g_get_monotonic_time ();
  fail_malloc (n, G_MAXUINT64);
  g_object_set (e, "prompt", PROMPT, NULL);
  if (settings_refused (bus, since, pp_check_bound_ms (ERROR_WITHIN_MS),
          needles))
    outcome = log_has ("was taken back") ? PROMPT_TAKEN_BACK
        : PROMPT_REFUSED;
  fail_malloc (0, 0);
  if (outcome != PROMPT_ACCEPTED) {
    /* The stream goes on with the settings it had. */
    run_frames (h, SMALL, 0, after);
    for (guint i = 0; i < FRAMES; i++) {
      fail_unless (pp_check_same_bytes (before[i], after[i]),
          "frame %u after the refused prompt differs from the one before",
          i);
      gst_buffer_unref (after[i]);
    }
    /* With room again, the same prompt goes in (the backend whole). */
    log_forget ();
    g_object_set (e, "prompt", PROMPT, NULL);
    wait_log ("new settings accepted", pp_check_bound_ms (ERROR_WITHIN_MS));
  }
  run_frames (h, SMALL, 0, after);
  fail_if (pp_check_same_bytes (before[0], after[0]), "the prompt taken "
      "changed nothing (the device full from its allocation %"
      G_GUINT64_FORMAT ", the prompt %s)", n, outcome == PROMPT_ACCEPTED
      ? "accepted at once" : outcome == PROMPT_REFUSED ? "refused, then "
      "accepted" : "refused and the backend taken back, then accepted");
  for (guint i = 0; i < FRAMES; i++) {
    gst_buffer_unref (before[i]);
    gst_buffer_unref (after[i]);
  }
  error = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (error == NULL, "an error came after the prompt's failure");
  stop (h);
  gst_element_set_bus (e, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  gst_object_unref (e);
  return outcome;
}

GST_START_TEST (test_prompt_out_of_memory)
{
  guint outcomes[3] = { 0 };
  guint64 total, first_last, last;

  log_text = g_string_new (NULL);
  gst_debug_set_threshold_for_name ("ppdiffuse", GST_LEVEL_INFO);
  gst_debug_remove_log_function (gst_debug_log_default);
  gst_debug_add_log_function (keep_log, NULL, NULL);
  total = prompt_allocations ();
  g_print ("rank 0 allocates %" G_GUINT64_FORMAT " times for a prompt set "
      "while playing\n", total);
  fail_unless (total >= 3, "only %" G_GUINT64_FORMAT " allocations", total);
  /* The device full from the text encoder's first allocation, from one
   * in the middle (not under a sanitizer), and from each of the last (the
   * encoding's). */
  last = pp_check_repeats (PROMPT_LAST_ALLOCATIONS,
      PROMPT_LAST_ALLOCATIONS_SANITIZED);
  first_last = total > last ? total - last + 1 : 1;
  for (guint64 n = 1; n <= total; n++)
    if (n == 1 || n >= first_last
        || (n == (total + 1) / 2 && !pp_check_sanitized ()))
      outcomes[fail_prompt_allocation (n)]++;
  g_print ("prompts set with the device full from one of their "
      "allocations: %u refused, %u refused and rank 0's backend taken "
      "back, %u accepted (another way)\n", outcomes[PROMPT_REFUSED],
      outcomes[PROMPT_TAKEN_BACK], outcomes[PROMPT_ACCEPTED]);
  fail_unless (outcomes[PROMPT_REFUSED] > 0, "no failure was the work's");
  fail_unless (outcomes[PROMPT_TAKEN_BACK] > 0, "no failure came inside the "
      "prompt's ops");
  gst_debug_remove_log_function (keep_log);
  gst_debug_add_log_function (gst_debug_log_default, NULL, NULL);
  g_string_free (log_text, TRUE);
}

GST_END_TEST;

GST_START_TEST (test_rank0_out_of_memory)
{
  guint64 total;
  guint anew = 0;

  /* Counted the second time: the first grows what rank 0's backend keeps
   * from stream to stream (its scratch), which the runs below find
   * grown. */
  (void) large_allocations ();
  total = large_allocations ();

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

/* The kernel that writes the first frame's bytes faults on rank 0's
 * device: the stream fails naming rank 0 and the lost context, and the
 * element started again fails at once with the same cause, twice (never
 * taken back: nothing runs on that device again in this process). */
GST_START_TEST (test_rank0_device_lost)
{
  static const gchar *const needles[] = { "rank 0 (pid ",
    "the device's context is lost", "restart the application",
    "cudaErrorIllegalAddress", NULL
  };
  GstElement *e = make_element ();
  GstHarness *h = gst_harness_new_with_element (e, "sink", "src");
  GstBus *bus = gst_bus_new ();
  GstFlowReturn ret = GST_FLOW_OK;
  gint64 since;

  gst_element_set_bus (e, bus);
  start (h, SMALL);
  since = g_get_monotonic_time ();
  for (guint i = 0; i < 4 * FRAMES && ret == GST_FLOW_OK; i++)
    ret = gst_harness_push (h, make_rgb (SMALL, i));
  pp_check_expect_error (bus, since, ERROR_WITHIN_MS, needles);
  stop (h);
  gst_element_set_bus (e, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
  gst_object_unref (e);
  for (guint again = 0; again < 2; again++) {
    /* (The check drops make_element's reference.) */
    pp_check_expect_start_failure (make_element (), ERROR_WITHIN_MS,
        needles);
  }
}

GST_END_TEST;

static Suite *
device_failure_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-device-failure");
  TCase *tc = tcase_create ("device-failure");

  tcase_set_timeout (tc, 240);
  tcase_add_unchecked_fixture (tc, setup, teardown);
  if (g_getenv ("PP_CUDA_EMU_FAULT_KERNEL") != NULL) {
    tcase_add_test (tc, test_rank0_device_lost);
  } else {
    tcase_add_test (tc, test_rank0_out_of_memory);
    tcase_add_test (tc, test_prompt_out_of_memory);
  }
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
