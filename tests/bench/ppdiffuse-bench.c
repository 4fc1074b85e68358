/* ppdiffuse-bench — throughput of the pipeline-parallel mesh versus W.
 *
 * For W = 1 .. --max-ranks, runs one after another in this process
 *
 *   videotestsrc num-buffers=N ! video/x-raw,format=RGBA,width=..,height=.. !
 *   ppdiffuse ranks=W steps=S model=builtin:stamp?step-ms=M max-in-flight=.. !
 *   fakesink sync=false
 *
 * The emulated compute per frame is fixed (S × M ms, slept by the workers),
 * so a perfect pipeline of W stages delivers W / (S·M/1000) frames/s.  Each
 * output buffer is timestamped on ppdiffuse's src pad:
 *
 *   steady-state fps = (N − 1) / (t_last − t_first)
 *   end-to-end fps   = N / (t_last − t_start)
 *
 * t_start is the first buffer entering ppdiffuse's sink pad, so end-to-end
 * includes filling and draining the pipeline but not spawning the workers.
 * After EOS the pipeline goes to NULL and the element's stats give the
 * OverlapScore (Σ worker busy time / (W × mesh wall time)).
 *
 * With --stream-batch, each W also runs with the element's stream-batch
 * (a worker runs one step of each frame it holds in one pass, and sleeps
 * step-ms once per pass, as a GPU takes about one step's time for a batch
 * of a few latents): with full batches a worker then hands on a frame
 * every M ms, whatever its share of the steps, so the ideal is 1000 / M
 * frames/s for any W, given max-in-flight ≥ S + W.  Both runs of a W are
 * printed side by side with their ratio.  With --frame-batch B, each W
 * also runs with the element's frame-batch B (with --stream-batch, in the
 * same runs): a worker takes up to B frames at each step into a pass, so
 * with full batches the ideal is B times the one above (B × 1000 / M with
 * the stream batch, given max-in-flight ≥ B × (S + W); frame-batch's
 * default is (W + 1) × B).
 *
 * Exit status: 0 whatever the efficiency (it is a benchmark), non-zero on
 * bad options or when a pipeline fails, stalls or loses frames. */
#include <gst/gst.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_STEPS 12
#define DEFAULT_STEP_MS 10
#define DEFAULT_FRAMES 120
#define DEFAULT_MAX_RANKS 4
#define DEFAULT_WIDTH 64
#define DEFAULT_HEIGHT 64
#define DEFAULT_MAX_IN_FLIGHT 0         /* the element's default: ranks + 1 */
/* A run that has not reached EOS by then counts as stalled. */
#define EOS_TIMEOUT_S 120
/* Steady state needs two output timestamps to span an interval. */
#define MIN_FRAMES 2
#define TARGET_EFFICIENCY 0.95
#define MS_PER_S 1000.0

#define EXIT_BAD_OPTIONS 2
#define EXIT_PIPELINE_FAILED 1

typedef struct
{
  gint steps;
  gint step_ms;
  gint frames;
  gint max_ranks;
  gint width;
  gint height;
  gint max_in_flight;
  gboolean stream_batch;        /* also run each W with stream-batch */
  gint frame_batch;             /* and, above 1, with frame-batch */
  gchar *hosts;                 /* the element's hosts, NULL for none */
} Options;

/* Timestamps written by the streaming threads, read after EOS. */
typedef struct
{
  gint64 t_start;               /* first buffer into ppdiffuse */
  gint64 t_first;               /* first buffer out of ppdiffuse */
  gint64 t_last;                /* last buffer out of ppdiffuse */
  guint n_out;
} Timing;

typedef struct
{
  guint ranks;
  gdouble fps;
  gdouble ideal_fps;
  gdouble efficiency;
  gdouble e2e_fps;
  gdouble overlap;
  gdouble mesh_wall_s;
  gdouble latency_ms;           /* smoothed submit → return of a frame */
} Result;

static GstPadProbeReturn
on_input (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Timing *timing = user_data;

  /* Only the chain thread writes this. */
  if (timing->t_start == 0)
    timing->t_start = g_get_monotonic_time ();
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn
on_output (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Timing *timing = user_data;
  gint64 now = g_get_monotonic_time ();

  /* Only ppdiffuse's src task writes these. */
  if (timing->n_out == 0)
    timing->t_first = now;
  timing->t_last = now;
  timing->n_out++;
  return GST_PAD_PROBE_OK;
}

static GstElement *
make_element (GstElement * pipeline, const gchar * factory, GError ** error)
{
  GstElement *element = gst_element_factory_make (factory, NULL);

  if (element == NULL) {
    g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_MISSING_PLUGIN,
        "element '%s' is not available (is GST_PLUGIN_PATH_1_0 set to the "
        "build's gst/ppdiffuse?)", factory);
    return NULL;
  }
  gst_bin_add (GST_BIN (pipeline), element);
  return element;
}

static GstElement *
build_pipeline (const Options * opt, guint ranks, gboolean batch,
    Timing * timing, GstElement ** diffuse_out, GError ** error)
{
  GstElement *pipeline = gst_pipeline_new ("bench");
  GstElement *src, *filter, *diffuse, *sink;
  g_autofree gchar *model = NULL;
  GstCaps *caps;
  GstPad *pad;

  src = make_element (pipeline, "videotestsrc", error);
  filter = src ? make_element (pipeline, "capsfilter", error) : NULL;
  diffuse = filter ? make_element (pipeline, "ppdiffuse", error) : NULL;
  sink = diffuse ? make_element (pipeline, "fakesink", error) : NULL;
  if (sink == NULL) {
    gst_object_unref (pipeline);
    return NULL;
  }

  caps = gst_caps_new_simple ("video/x-raw", "format", G_TYPE_STRING, "RGBA",
      "width", G_TYPE_INT, opt->width, "height", G_TYPE_INT, opt->height,
      NULL);
  model = g_strdup_printf ("builtin:stamp?step-ms=%d", opt->step_ms);
  g_object_set (src, "num-buffers", opt->frames, NULL);
  g_object_set (filter, "caps", caps, NULL);
  gst_caps_unref (caps);
  g_object_set (diffuse, "ranks", ranks, "steps", (guint) opt->steps,
      "model", model, "max-in-flight", (guint) opt->max_in_flight,
      "stream-batch", batch && opt->stream_batch, "frame-batch",
      (guint) (batch ? opt->frame_batch : 1), NULL);
  if (opt->hosts != NULL)
    g_object_set (diffuse, "hosts", opt->hosts, NULL);
  /* Measure the mesh, not the clock: render as fast as frames come. */
  g_object_set (sink, "sync", FALSE, NULL);

  if (!gst_element_link_many (src, filter, diffuse, sink, NULL)) {
    g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_NEGOTIATION,
        "cannot link videotestsrc ! capsfilter ! ppdiffuse ! fakesink");
    gst_object_unref (pipeline);
    return NULL;
  }

  pad = gst_element_get_static_pad (diffuse, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, on_input, timing, NULL);
  gst_object_unref (pad);
  pad = gst_element_get_static_pad (diffuse, "src");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, on_output, timing, NULL);
  gst_object_unref (pad);

  *diffuse_out = diffuse;
  return pipeline;
}

/* Sets @error from an ERROR message. */
static void
error_from_message (GstMessage * msg, GError ** error)
{
  GError *gerror = NULL;
  g_autofree gchar *debug = NULL;

  gst_message_parse_error (msg, &gerror, &debug);
  g_set_error (error, gerror->domain, gerror->code, "%s: %s%s%s",
      GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), gerror->message,
      debug ? "\n  debug: " : "", debug ? debug : "");
  g_error_free (gerror);
}

/* Waits up to @timeout for a message of a type in @want; NULL when the
 * time ran out. */
static GstMessage *
pop_message (GstElement * pipeline, GstClockTime timeout,
    GstMessageType want)
{
  GstBus *bus = gst_element_get_bus (pipeline);
  GstMessage *msg = gst_bus_timed_pop_filtered (bus, timeout, want);

  gst_object_unref (bus);
  return msg;
}

/* Runs @pipeline to EOS; FALSE with @error when it fails or stalls. */
static gboolean
play_to_eos (GstElement * pipeline, GError ** error)
{
  GstMessage *msg;
  gboolean ok = FALSE;

  if (gst_element_set_state (pipeline, GST_STATE_PLAYING)
      == GST_STATE_CHANGE_FAILURE) {
    /* A failed state change has already posted its reason. */
    msg = pop_message (pipeline, 0, GST_MESSAGE_ERROR);
    if (msg != NULL)
      error_from_message (msg, error);
    else
      g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_STATE_CHANGE,
          "the pipeline refused to start");
  } else {
    msg = pop_message (pipeline, EOS_TIMEOUT_S * GST_SECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
    if (msg == NULL)
      g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_FAILED,
          "no EOS within %d s: the pipeline stalled", EOS_TIMEOUT_S);
    else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR)
      error_from_message (msg, error);
    else
      ok = TRUE;
  }
  if (msg != NULL)
    gst_message_unref (msg);
  return ok;
}

static gboolean
run_one (const Options * opt, guint ranks, gboolean batch, Result * result,
    GError ** error)
{
  Timing timing = { 0 };
  GstElement *diffuse = NULL;
  GstElement *pipeline;
  GstStructure *stats = NULL;
  guint64 mesh_chunks = 0, latency_ns = 0;
  gdouble total_step_s = opt->steps * (gdouble) opt->step_ms / MS_PER_S;
  gboolean ok = TRUE;

  pipeline = build_pipeline (opt, ranks, batch, &timing, &diffuse, error);
  if (pipeline == NULL)
    return FALSE;
  if (!play_to_eos (pipeline, error)) {
    gst_element_set_state (pipeline, GST_STATE_NULL);
    gst_object_unref (pipeline);
    return FALSE;
  }
  /* PAUSED→READY stops the mesh and fills in the mesh figures. */
  gst_element_set_state (pipeline, GST_STATE_NULL);
  g_object_get (diffuse, "stats", &stats, NULL);
  gst_structure_get_uint64 (stats, "mesh-chunks", &mesh_chunks);

  if (timing.n_out != (guint) opt->frames) {
    g_set_error (error, GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
        "W=%u: %u of %d frames came out", ranks, timing.n_out, opt->frames);
    ok = FALSE;
  } else if (mesh_chunks != (guint64) opt->frames) {
    /* The mesh figures are zero unless the workers shut down cleanly. */
    g_set_error (error, GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED,
        "W=%u: the mesh reports %" G_GUINT64_FORMAT " chunks for %d frames "
        "(did it stop cleanly?)", ranks, mesh_chunks, opt->frames);
    ok = FALSE;
  } else {
    result->ranks = ranks;
    result->fps = (timing.n_out - 1) * (gdouble) G_USEC_PER_SEC
        / MAX (timing.t_last - timing.t_first, 1);
    /* With full stream batches every worker hands on a frame per pass of
     * step-ms (one of a single step too), whatever its share; with full
     * frame batches, frame-batch frames where it handed on one. */
    result->ideal_fps = !batch ? ranks / total_step_s
        : opt->frame_batch * (opt->stream_batch ? MS_PER_S / opt->step_ms
        : ranks / total_step_s);
    result->efficiency = result->fps / result->ideal_fps;
    result->e2e_fps = timing.n_out * (gdouble) G_USEC_PER_SEC
        / MAX (timing.t_last - timing.t_start, 1);
    result->overlap = 0;
    result->mesh_wall_s = 0;
    gst_structure_get_double (stats, "overlap-score", &result->overlap);
    gst_structure_get_double (stats, "mesh-wall-s", &result->mesh_wall_s);
    gst_structure_get_uint64 (stats, "latency", &latency_ns);
    result->latency_ms = (gdouble) latency_ns / GST_MSECOND;
  }
  gst_structure_free (stats);
  gst_object_unref (pipeline);
  return ok;
}

static gboolean
check_options (const Options * opt, GError ** error)
{
  const gchar *bad = NULL;

  if (opt->steps < 1)
    bad = "--steps must be at least 1";
  else if (opt->step_ms <= 0)
    bad = "--step-ms must be positive (the ideal rate divides by it)";
  else if (opt->frames < MIN_FRAMES)
    bad = "--frames must be at least " G_STRINGIFY (MIN_FRAMES)
        " (steady state spans two output frames)";
  else if (opt->max_ranks < 1)
    bad = "--max-ranks must be at least 1";
  else if (opt->max_ranks > opt->steps)
    bad = "--max-ranks must not exceed --steps (every worker needs a step)";
  else if (opt->width < 1 || opt->height < 1)
    bad = "--width and --height must be positive";
  else if (opt->max_in_flight < 0)
    bad = "--max-in-flight must not be negative";
  else if (opt->frame_batch < 1)
    bad = "--frame-batch must be at least 1";
  if (bad != NULL)
    g_set_error_literal (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, bad);
  return bad == NULL;
}

/* Checks the numbers against ppdiffuse's own property ranges, so that an
 * out-of-range value fails here instead of silently keeping a default. */
static gboolean
check_element_limits (const Options * opt, GError ** error)
{
  g_autoptr (GstElement) diffuse = gst_element_factory_make ("ppdiffuse",
      NULL);
  static const gchar *const props[] = { "ranks", "steps", "max-in-flight",
    "frame-batch"
  };
  const gint values[] = { opt->max_ranks, opt->steps, opt->max_in_flight,
    opt->frame_batch
  };

  if (diffuse == NULL) {
    g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_MISSING_PLUGIN,
        "element 'ppdiffuse' is not available (is GST_PLUGIN_PATH_1_0 set "
        "to the build's gst/ppdiffuse?)");
    return FALSE;
  }
  for (guint i = 0; i < G_N_ELEMENTS (props); i++) {
    GParamSpecUInt *spec = G_PARAM_SPEC_UINT (g_object_class_find_property
        (G_OBJECT_GET_CLASS (diffuse), props[i]));
    if ((guint) values[i] > spec->maximum) {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
          "ppdiffuse accepts %s up to %u, not %d", props[i], spec->maximum,
          values[i]);
      return FALSE;
    }
  }
  return TRUE;
}

/* What one hop of a chunk costs at the least: a memcpy of its payload, the
 * frame as builtin:stamp's sample (F32, one plane per colour channel). */
#define PAYLOAD_CHANNELS 3
#define MEMCPY_REPEATS 200

static void
print_memcpy_cost (const Options * opt)
{
  const gsize bytes = (gsize) PAYLOAD_CHANNELS * opt->width * opt->height
      * sizeof (gfloat);
  g_autofree guint8 *a = g_malloc (bytes);
  g_autofree guint8 *b = g_malloc (bytes);
  gint64 t0;
  gdouble us;

  memset (a, 1, bytes);
  memset (b, 2, bytes);
  t0 = g_get_monotonic_time ();
  for (gint i = 0; i < MEMCPY_REPEATS; i++) {
    memcpy (i % 2 ? a : b, i % 2 ? b : a, bytes);
    /* Keep the copies: each reads what the one before wrote. */
    __asm__ __volatile__ ("":::"memory");
  }
  us = (gdouble) (g_get_monotonic_time () - t0) / MEMCPY_REPEATS;
  printf ("chunk payload: %" G_GSIZE_FORMAT " bytes; memcpy of it: %.1f us "
      "(%.2f GB/s)\n", bytes, us, bytes / (us * 1e3));
}

int
main (int argc, char **argv)
{
  Options opt = {
    .steps = DEFAULT_STEPS,
    .step_ms = DEFAULT_STEP_MS,
    .frames = DEFAULT_FRAMES,
    .max_ranks = DEFAULT_MAX_RANKS,
    .width = DEFAULT_WIDTH,
    .height = DEFAULT_HEIGHT,
    .frame_batch = 1,
    .max_in_flight = DEFAULT_MAX_IN_FLIGHT,
  };
  GOptionEntry entries[] = {
    {"steps", 0, 0, G_OPTION_ARG_INT, &opt.steps,
        "Denoising steps per frame (S)", "S"},
    {"step-ms", 0, 0, G_OPTION_ARG_INT, &opt.step_ms,
        "Emulated GPU milliseconds per step (M)", "M"},
    {"frames", 0, 0, G_OPTION_ARG_INT, &opt.frames,
        "Frames per run (N)", "N"},
    {"max-ranks", 0, 0, G_OPTION_ARG_INT, &opt.max_ranks,
        "Run W = 1 .. this many workers", "W"},
    {"width", 0, 0, G_OPTION_ARG_INT, &opt.width, "Frame width", "PX"},
    {"height", 0, 0, G_OPTION_ARG_INT, &opt.height, "Frame height", "PX"},
    {"max-in-flight", 0, 0, G_OPTION_ARG_INT, &opt.max_in_flight,
        "ppdiffuse max-in-flight (0 = the element's default, (ranks + 1) "
        "× frame-batch)", "F"},
    {"stream-batch", 0, 0, G_OPTION_ARG_NONE, &opt.stream_batch,
        "Also run each W with stream-batch, side by side", NULL},
    {"frame-batch", 0, 0, G_OPTION_ARG_INT, &opt.frame_batch,
        "Also run each W with frame-batch B (with --stream-batch, in the "
        "same runs), side by side", "B"},
    {"hosts", 0, 0, G_OPTION_ARG_STRING, &opt.hosts,
        "ppdiffuse hosts: where the workers run (default: this host)",
        "H1,H2"},
    {NULL}
  };
  g_autoptr (GOptionContext) context = NULL;
  g_autofree Result *results = NULL;
  g_autofree Result *batched = NULL;
  GError *error = NULL;
  gint failed_ranks = 0, completed;
  gboolean batched_runs;

  context = g_option_context_new ("- ppdiffuse pipeline-parallel scaling");
  g_option_context_add_main_entries (context, entries, NULL);
  g_option_context_add_group (context, gst_init_get_option_group ());
  if (!g_option_context_parse (context, &argc, &argv, &error)
      || !check_options (&opt, &error)
      || !check_element_limits (&opt, &error)) {
    g_printerr ("ppdiffuse-bench: %s\n", error->message);
    g_error_free (error);
    return EXIT_BAD_OPTIONS;
  }

  printf ("ppdiffuse-bench: steps=%d step-ms=%d frames=%d %dx%d "
      "max-in-flight=%d%s\n", opt.steps, opt.step_ms, opt.frames, opt.width,
      opt.height, opt.max_in_flight,
      opt.max_in_flight == 0 ? " ((ranks + 1) × frame-batch)" : "");
  printf ("fixed step cost per frame: %d ms; ideal fps = W / %.3f s\n",
      opt.steps * opt.step_ms, opt.steps * opt.step_ms / MS_PER_S);
  print_memcpy_cost (&opt);
  printf ("workers on: %s\n\n", opt.hosts ? opt.hosts : "this host");
  fflush (stdout);

  batched_runs = opt.stream_batch || opt.frame_batch > 1;
  results = g_new0 (Result, opt.max_ranks);
  batched = g_new0 (Result, opt.max_ranks);
  for (gint w = 1; w <= opt.max_ranks; w++) {
    if (!run_one (&opt, (guint) w, FALSE, &results[w - 1], &error)
        || (batched_runs && !run_one (&opt, (guint) w, TRUE,
                &batched[w - 1], &error))) {
      failed_ranks = w;
      break;
    }
    if (opt.steps % w != 0)
      printf ("note: W=%d does not divide S=%d; the slowest stage runs %d "
          "steps, so the ideal is out of reach\n", w, opt.steps,
          (opt.steps + w - 1) / w);
  }

  completed = failed_ranks != 0 ? failed_ranks - 1 : opt.max_ranks;
  if (completed > 0)
    printf ("%3s %9s %9s %10s %9s %12s %11s %10s\n", "W", "fps", "ideal",
        "efficiency", "e2e fps", "OverlapScore", "mesh wall s", "latency ms");
  for (gint w = 1; w <= completed; w++) {
    const Result *r = &results[w - 1];
    printf ("%3u %9.2f %9.2f %10.3f %9.2f %12.3f %11.3f %10.1f\n", r->ranks,
        r->fps, r->ideal_fps, r->efficiency, r->e2e_fps, r->overlap,
        r->mesh_wall_s, r->latency_ms);
  }
  if (batched_runs && completed > 0) {
    printf ("\nstream-batch=%s frame-batch=%d, the same W, run right after "
        "each above:\n", opt.stream_batch ? "true" : "false",
        opt.frame_batch);
    printf ("%3s %9s %9s %10s %10s %10s\n", "W", "fps", "ideal",
        "efficiency", "latency ms", "fps ratio");
    for (gint w = 1; w <= completed; w++) {
      const Result *r = &batched[w - 1];
      printf ("%3u %9.2f %9.2f %10.3f %10.1f %10.2f\n", r->ranks, r->fps,
          r->ideal_fps, r->efficiency, r->latency_ms,
          r->fps / MAX (results[w - 1].fps, 1e-9));
    }
  }
  if (failed_ranks != 0) {
    fflush (stdout);
    g_printerr ("ppdiffuse-bench: run with W=%d failed: %s\n", failed_ranks,
        error->message);
    g_error_free (error);
    return EXIT_PIPELINE_FAILED;
  }
  printf ("efficiency at W=%d: %.3f (target >= %.2f)\n", opt.max_ranks,
      results[opt.max_ranks - 1].efficiency, TARGET_EFFICIENCY);
  return EXIT_SUCCESS;
}
