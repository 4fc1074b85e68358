/* restart-rss — what a start/stop cycle of ppdiffuse costs the process.
 *
 * Runs, in this process, --cycles times
 *
 *   videotestsrc num-buffers=F ! video/x-raw,format=RGBA,width=64,height=48 !
 *   ppdiffuse ranks=2 steps=2 model=builtin:stamp keep-workers=K !
 *   fakesink
 *
 * PLAYING → EOS → NULL, once with keep-workers off (every start spawns the
 * workers) and once on (the first start spawns them, the others reuse
 * them), and prints the growth of VmRSS per cycle after --warm-up cycles,
 * and the time per cycle.
 *
 * Exit status: 0 whatever the growth (it is a benchmark), non-zero on bad
 * options or when a pipeline fails or stalls. */
#include <gst/gst.h>

#include <stdio.h>
#include <stdlib.h>

#include "pp-bench-rss.h"

#define DEFAULT_CYCLES 100
#define DEFAULT_WARM_UP 10
#define CYCLE_FRAMES 3
/* A cycle that has not reached EOS by then counts as stalled. */
#define EOS_TIMEOUT_S 60
#define EXIT_BAD_OPTIONS 2
#define EXIT_PIPELINE_FAILED 1

static gboolean
run_cycle (GstElement * pipeline)
{
  GstBus *bus = gst_element_get_bus (pipeline);
  GstMessage *msg;
  gboolean ok;

  if (gst_element_set_state (pipeline, GST_STATE_PLAYING)
      == GST_STATE_CHANGE_FAILURE) {
    gst_object_unref (bus);
    return FALSE;
  }
  msg = gst_bus_timed_pop_filtered (bus, EOS_TIMEOUT_S * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  ok = msg != NULL && GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS;
  if (msg == NULL)
    fprintf (stderr, "no EOS within %d s\n", EOS_TIMEOUT_S);
  else if (!ok) {
    GError *error = NULL;

    gst_message_parse_error (msg, &error, NULL);
    fprintf (stderr, "error: %s\n", error->message);
    g_error_free (error);
  }
  gst_clear_message (&msg);
  gst_object_unref (bus);
  return gst_element_set_state (pipeline, GST_STATE_NULL)
      == GST_STATE_CHANGE_SUCCESS && ok;
}

static gboolean
measure (gboolean keep, gint cycles, gint warm_up)
{
  g_autofree gchar *desc = g_strdup_printf ("videotestsrc num-buffers=%d ! "
      "video/x-raw,format=RGBA,width=64,height=48 ! ppdiffuse ranks=2 "
      "steps=2 model=builtin:stamp keep-workers=%s ! fakesink", CYCLE_FRAMES,
      keep ? "true" : "false");
  GError *error = NULL;
  GstElement *pipeline = gst_parse_launch (desc, &error);
  guint64 before = 0, after;
  gint64 t0 = 0;

  if (pipeline == NULL) {
    fprintf (stderr, "%s: %s\n", desc, error->message);
    g_error_free (error);
    return FALSE;
  }
  for (gint i = 0; i < warm_up + cycles; i++) {
    if (i == warm_up) {
      before = pp_bench_rss_kb ();
      t0 = g_get_monotonic_time ();
    }
    if (!run_cycle (pipeline)) {
      fprintf (stderr, "cycle %d failed\n", i);
      gst_object_unref (pipeline);
      return FALSE;
    }
  }
  after = pp_bench_rss_kb ();
  printf ("keep-workers=%-5s %4d cycles: VmRSS %" G_GUINT64_FORMAT " -> %"
      G_GUINT64_FORMAT " kB, %+.1f kB/cycle, %.1f ms/cycle\n",
      keep ? "true" : "false", cycles, before, after,
      ((gdouble) after - (gdouble) before) / cycles,
      (g_get_monotonic_time () - t0) / 1e3 / cycles);
  gst_object_unref (pipeline);
  return TRUE;
}

int
main (int argc, char **argv)
{
  gint cycles = DEFAULT_CYCLES, warm_up = DEFAULT_WARM_UP;
  GOptionEntry entries[] = {
    {"cycles", 0, 0, G_OPTION_ARG_INT, &cycles, "Cycles measured", "N"},
    {"warm-up", 0, 0, G_OPTION_ARG_INT, &warm_up, "Cycles before measuring",
        "N"},
    {NULL}
  };
  GOptionContext *ctx = g_option_context_new ("- RSS per start/stop cycle");
  GError *error = NULL;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || cycles < 1
      || warm_up < 0) {
    fprintf (stderr, "%s\n", error ? error->message : "--cycles must be at "
        "least 1, --warm-up at least 0");
    return EXIT_BAD_OPTIONS;
  }
  g_option_context_free (ctx);
  if (!measure (FALSE, cycles, warm_up) || !measure (TRUE, cycles, warm_up))
    return EXIT_PIPELINE_FAILED;
  return 0;
}
