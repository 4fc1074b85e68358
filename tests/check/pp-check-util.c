/* ppdiffuse tests — helpers. */
#include "pp-check-util.h"

#include <glib/gstdio.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_US 20000

static gboolean
read_stat (const gchar * pid, gchar ** comm, gint * ppid, gchar * state)
{
  g_autofree gchar *path = g_build_filename ("/proc", pid, "stat", NULL);
  g_autofree gchar *text = NULL;
  const gchar *open, *close;

  if (!g_file_get_contents (path, &text, NULL, NULL))
    return FALSE;
  open = strchr (text, '(');
  close = strrchr (text, ')');
  if (open == NULL || close == NULL)
    return FALSE;
  *comm = g_strndup (open + 1, close - open - 1);
  *state = close[2];
  *ppid = atoi (close + 4);
  return TRUE;
}

static gboolean
is_descendant (gint pid, GHashTable * parents, gint self)
{
  for (guint hops = 0; pid > 1 && hops < 64; hops++) {
    gpointer parent;
    if (pid == self)
      return TRUE;
    if (!g_hash_table_lookup_extended (parents, GINT_TO_POINTER (pid), NULL,
            &parent))
      return FALSE;
    pid = GPOINTER_TO_INT (parent);
  }
  return FALSE;
}

GArray *
pp_check_find_descendants (const gchar * name)
{
  g_autoptr (GHashTable) parents = g_hash_table_new (NULL, NULL);
  g_autoptr (GArray) matches = g_array_new (FALSE, FALSE, sizeof (gint));
  GArray *found = g_array_new (FALSE, FALSE, sizeof (gint));
  GDir *dir = g_dir_open ("/proc", 0, NULL);
  const gchar *entry;

  g_assert (dir != NULL);
  while ((entry = g_dir_read_name (dir)) != NULL) {
    g_autofree gchar *comm = NULL;
    gint pid = atoi (entry), ppid;
    gchar state;
    if (!g_ascii_isdigit (entry[0]) || !read_stat (entry, &comm, &ppid, &state))
      continue;
    g_hash_table_insert (parents, GINT_TO_POINTER (pid),
        GINT_TO_POINTER (ppid));
    if (g_str_has_prefix (comm, name) && state != 'Z' && state != 'X')
      g_array_append_val (matches, pid);
  }
  g_dir_close (dir);
  for (guint i = 0; i < matches->len; i++) {
    gint pid = g_array_index (matches, gint, i);
    if (is_descendant (pid, parents, getpid ()))
      g_array_append_val (found, pid);
  }
  return found;
}

guint
pp_check_count_descendants (const gchar * name)
{
  g_autoptr (GArray) found = pp_check_find_descendants (name);

  return found->len;
}

#define BELLS_PREFIX "ppdiffuse-bells-"

static gboolean
maps_bells (gint64 pid)
{
  g_autofree gchar *path = g_strdup_printf ("/proc/%" G_GINT64_FORMAT
      "/maps", pid);
  g_autofree gchar *maps = NULL;

  return g_file_get_contents (path, &maps, NULL, NULL)
      && strstr (maps, "/" BELLS_PREFIX) != NULL;
}

guint
pp_check_count_bells_mapped (GArray * pids)
{
  guint n = 0;

  if (pids == NULL)
    return maps_bells ((gint64) getpid ())? 1 : 0;
  for (guint i = 0; i < pids->len; i++)
    n += maps_bells (g_array_index (pids, gint, i));
  return n;
}

guint64
pp_check_bell_rings (guint rank)
{
  g_autofree gchar *maps = NULL;
  g_auto (GStrv) lines = NULL;

  if (!g_file_get_contents ("/proc/self/maps", &maps, NULL, NULL))
    return G_MAXUINT64;
  lines = g_strsplit (maps, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++) {
    guint64 start;

    if (strstr (lines[i], "/" BELLS_PREFIX) == NULL)
      continue;
    start = g_ascii_strtoull (lines[i], NULL, 16);
    return __atomic_load_n ((guint32 *) (gsize) (start + 64 * rank),
        __ATOMIC_ACQUIRE);
  }
  return G_MAXUINT64;
}

guint
pp_check_count_bells_files (void)
{
  g_autofree gchar *prefix = g_strdup_printf (BELLS_PREFIX "%d-",
      (gint) getpid ());
  g_autoptr (GDir) dir = g_dir_open ("/dev/shm", 0, NULL);
  const gchar *name;
  guint n = 0;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    n += g_str_has_prefix (name, prefix);
  return n;
}

/* Prints each process of @pids as "pid P (state S, parent Q 'comm')":
 * what a failure needs to tell an exiting process (R, D) from one stuck
 * in a wait (S) and from one its parent has not reaped yet. */
static void
print_processes (const gchar * name, GArray * pids, guint waited_ms)
{
  g_printerr ("%u process(es) named '%s' still running %u ms after the "
      "stop:\n", pids->len, name, waited_ms);
  for (guint i = 0; i < pids->len; i++) {
    gint pid = g_array_index (pids, gint, i), ppid = 0, grand;
    g_autofree gchar *id = g_strdup_printf ("%d", pid);
    g_autofree gchar *comm = NULL, *parent_id = NULL, *parent = NULL;
    gchar state = '?', parent_state;

    if (read_stat (id, &comm, &ppid, &state)) {
      parent_id = g_strdup_printf ("%d", ppid);
      if (!read_stat (parent_id, &parent, &grand, &parent_state))
        parent = g_strdup ("?");
    }
    g_printerr ("  pid %d (state %c, parent %d '%s')\n", pid, state, ppid,
        parent != NULL ? parent : "?");
  }
}

guint
pp_check_wait_descendants_gone (const gchar * name, guint timeout_ms)
{
  const gint64 start = g_get_monotonic_time ();
  const gint64 deadline = start + (gint64) timeout_ms * 1000;
  g_autoptr (GArray) left = NULL;

  for (;;) {
    g_clear_pointer (&left, g_array_unref);
    left = pp_check_find_descendants (name);
    if (left->len == 0 || g_get_monotonic_time () >= deadline)
      break;
    g_usleep (POLL_US);
  }
  if (left->len > 0)
    print_processes (name, left,
        (guint) ((g_get_monotonic_time () - start) / 1000));
  return left->len;
}

GstMessage *
pp_check_pop_error (GstBus * bus, guint timeout_ms)
{
  return gst_bus_timed_pop_filtered (bus, timeout_ms * GST_MSECOND,
      GST_MESSAGE_ERROR);
}

void
pp_check_exit (int failed)
{
  fflush (stdout);
  fflush (stderr);
  _exit (failed == 0 ? 0 : 1);
}

void
pp_check_run_and_exit (Suite * suite, const gchar * name, const gchar * file)
{
  pp_check_exit (gst_check_run_suite (suite, name, file));
}

/* Pops an error from @bus that came within @within_ms of @since_us
 * (pp_check_bound_ms); returns its message, and in @text the message with
 * its debug text. */
static GError *
pop_timely_error (GstBus * bus, gint64 since_us, guint within_ms,
    gchar ** text)
{
  GstMessage *msg;
  gint64 took_ms;
  GError *error = NULL;
  gchar *debug = NULL;

  within_ms = pp_check_bound_ms (within_ms);
  msg = pp_check_pop_error (bus, within_ms);
  fail_unless (msg != NULL, "no error on the bus within %u ms", within_ms);
  took_ms = (g_get_monotonic_time () - since_us) / 1000;
  gst_message_parse_error (msg, &error, &debug);
  *text = g_strdup_printf ("%s | %s", error->message, debug ? debug : "");
  GST_INFO ("error after %" G_GINT64_FORMAT " ms: %s", took_ms, *text);
  fail_unless (took_ms <= within_ms, "the error took %" G_GINT64_FORMAT
      " ms, more than %u", took_ms, within_ms);
  g_free (debug);
  gst_message_unref (msg);
  return error;
}

void
pp_check_expect_error (GstBus * bus, gint64 since_us, guint within_ms,
    const gchar * const *needles)
{
  gchar *text;
  GError *error = pop_timely_error (bus, since_us, within_ms, &text);

  for (guint i = 0; needles[i] != NULL; i++)
    fail_unless (strstr (text, needles[i]) != NULL,
        "error '%s' does not mention '%s'", text, needles[i]);
  g_free (text);
  g_error_free (error);
}

void
pp_check_expect_culprit (GstBus * bus, gint64 since_us, guint within_ms,
    const gchar * culprit, const gchar * const *needles)
{
  gchar *text;
  GError *error = pop_timely_error (bus, since_us, within_ms, &text);
  const gchar *lead = strstr (error->message, "worker rank ");
  const gchar *symptom, *states;
  gsize lead_len;

  fail_unless (lead != NULL, "error '%s' names no worker rank", text);
  fail_unless (g_str_has_prefix (lead, culprit), "error '%s' does not lead "
      "with '%s'", text, culprit);
  symptom = strstr (lead, PP_CHECK_SYMPTOM_MARK);
  states = strstr (lead, PP_CHECK_STATES_MARK);
  lead_len = strlen (lead);
  if (symptom != NULL)
    lead_len = MIN (lead_len, (gsize) (symptom - lead));
  if (states != NULL)
    lead_len = MIN (lead_len, (gsize) (states - lead));
  for (guint i = 0; needles[i] != NULL; i++) {
    const gchar *at = g_strstr_len (lead, lead_len, needles[i]);

    fail_unless (at != NULL && at + strlen (needles[i]) <= lead + lead_len,
        "the leading clause '%.*s' of error '%s' does not mention '%s'",
        (int) lead_len, lead, text, needles[i]);
  }
  g_free (text);
  g_error_free (error);
}

/* @culprit NULL: the needles anywhere in the error. */
static void
expect_start_failure (GstElement * element, guint within_ms,
    const gchar * culprit, const gchar * const *needles)
{
  GstBus *bus = gst_bus_new ();
  gint64 start = g_get_monotonic_time ();

  gst_element_set_bus (element, bus);
  fail_unless_equals_int (gst_element_set_state (element, GST_STATE_PAUSED),
      GST_STATE_CHANGE_FAILURE);
  if (culprit != NULL)
    pp_check_expect_culprit (bus, start, within_ms, culprit, needles);
  else
    pp_check_expect_error (bus, start, within_ms, needles);
  gst_element_set_state (element, GST_STATE_NULL);
  gst_element_set_bus (element, NULL);
  gst_object_unref (bus);
  gst_object_unref (element);
}

void
pp_check_expect_start_failure (GstElement * element, guint within_ms,
    const gchar * const *needles)
{
  expect_start_failure (element, within_ms, NULL, needles);
}

void
pp_check_expect_start_culprit (GstElement * element, guint within_ms,
    const gchar * culprit, const gchar * const *needles)
{
  expect_start_failure (element, within_ms, culprit, needles);
}

void
pp_check_frames_accounted_after_error (GstElement * element)
{
  GstStructure *stats = NULL;
  guint64 in = 0, out = 0, flushed = 0, failed = 0, qos = 0, leaky = 0;

  g_object_get (element, "stats", &stats, NULL);
  fail_unless (gst_structure_get (stats, "frames-in", G_TYPE_UINT64, &in,
          "frames-out", G_TYPE_UINT64, &out, "dropped-flush", G_TYPE_UINT64,
          &flushed, "dropped-error", G_TYPE_UINT64, &failed, "dropped-qos",
          G_TYPE_UINT64, &qos, "dropped-leaky", G_TYPE_UINT64, &leaky, NULL));
  GST_INFO ("in %" G_GUINT64_FORMAT " out %" G_GUINT64_FORMAT " flush %"
      G_GUINT64_FORMAT " error %" G_GUINT64_FORMAT, in, out, flushed, failed);
  fail_unless_equals_uint64 (in, out + flushed + failed + qos + leaky);
  fail_unless (failed > 0, "the frames the error lost were not counted");
  gst_structure_free (stats);
}

GstBuffer *
pp_check_make_flat_frame (guint index, gsize bytes)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, bytes, NULL);

  gst_buffer_memset (buf, 0, (guint8) index, bytes);
  GST_BUFFER_PTS (buf) = index * GST_SECOND / 30;
  return buf;
}

GstBuffer *
pp_check_make_rgb_frame (guint index, guint width, guint height,
    GstClockTime duration)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, (gsize) width * height * 3,
      NULL);
  GstMapInfo map;

  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (gsize i = 0; i < map.size; i++)
    map.data[i] = (guint8) ((i * 7 + index * 13) % 256);
  gst_buffer_unmap (buf, &map);
  GST_BUFFER_PTS (buf) = index * duration;
  GST_BUFFER_DURATION (buf) = duration;
  return buf;
}

void
pp_check_harness_start (GstHarness * h, const gchar * stream_id,
    const gchar * caps_str)
{
  GstSegment segment;

  fail_unless (gst_element_set_state (h->element, GST_STATE_PLAYING)
      != GST_STATE_CHANGE_FAILURE);
  gst_segment_init (&segment, GST_FORMAT_TIME);
  fail_unless (gst_harness_push_event (h,
          gst_event_new_stream_start (stream_id)));
  fail_unless (gst_harness_push_event (h,
          gst_event_new_caps (gst_caps_from_string (caps_str))));
  fail_unless (gst_harness_push_event (h, gst_event_new_segment (&segment)));
}

GstElement *
pp_check_make_element (guint ranks, guint steps, const gchar * model)
{
  GstElement *e = gst_element_factory_make ("ppdiffuse", NULL);

  fail_unless (e != NULL, "ppdiffuse not found: check GST_PLUGIN_PATH_1_0");
  g_object_set (e, "ranks", ranks, "steps", steps, "model", model, NULL);
  return e;
}

GstHarness *
pp_check_harness_new (GstElement * element, const gchar * caps_str)
{
  GstHarness *h;

  gst_object_ref_sink (element);
  h = gst_harness_new_with_element (element, "sink", "src");
  gst_object_unref (element);
  gst_harness_set_src_caps_str (h, caps_str);
  return h;
}

static GstHarness *tracked;

GstHarness *
pp_check_track_harness (GstHarness * h)
{
  tracked = h;
  return h;
}

void
pp_check_untrack_harness (void)
{
  tracked = NULL;
}

void
pp_check_stop_left_over (void)
{
  GstHarness *h = g_steal_pointer (&tracked);

  if (h == NULL)
    return;
  gst_element_set_state (h->element, GST_STATE_NULL);
  gst_harness_teardown (h);
  pp_check_wait_descendants_gone (PP_CHECK_WORKER_COMM,
      pp_check_repeats (5000, 15000));
}

void
pp_check_harness_flush (GstHarness * h)
{
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_start ()));
  fail_unless (gst_harness_push_event (h, gst_event_new_flush_stop (TRUE)));
  fail_unless (gst_harness_push_event (h,
          gst_event_new_segment (&(GstSegment) {
              .format = GST_FORMAT_TIME,.rate = 1.0,.applied_rate = 1.0,
              .stop = GST_CLOCK_TIME_NONE,.duration = GST_CLOCK_TIME_NONE})));
}

GstStructure *
pp_check_get_stats (GstElement * element)
{
  GstStructure *s = NULL;

  g_object_get (element, "stats", &s, NULL);
  fail_unless (s != NULL, "%s has no stats", GST_ELEMENT_NAME (element));
  return s;
}

guint64
pp_check_stat_u64 (const GstStructure * s, const gchar * field)
{
  guint64 v = 0;

  fail_unless (gst_structure_get_uint64 (s, field, &v), "no %s in %"
      GST_PTR_FORMAT, field, s);
  return v;
}

gboolean
pp_check_sanitized (void)
{
  const gchar *v = g_getenv ("PP_TEST_SANITIZED");

  return v != NULL && *v != '\0' && !g_str_equal (v, "0");
}

guint
pp_check_repeats (guint plain, guint sanitized)
{
  return pp_check_sanitized ()? sanitized : plain;
}

/* The bounds are what a plain build on a loaded machine needs.  Under a
 * sanitizer every process of a mesh also maps its shadow memory at start
 * and runs its checks at exit: on CI, start-up failures came 0.2 to 0.8 s
 * past bounds of 5 and 6 s, and on a slower machine 0.5 to 0.9 s past 6 s
 * with twice the bound.  Three times is still far short of a hang. */
#define SANITIZED_BOUND_FACTOR 3

guint
pp_check_bound_ms (guint plain_ms)
{
  return pp_check_sanitized ()? SANITIZED_BOUND_FACTOR * plain_ms : plain_ms;
}

gboolean
pp_check_same_bytes (GstBuffer * a, GstBuffer * b)
{
  GstMapInfo map;
  gboolean same;

  gst_buffer_map (a, &map, GST_MAP_READ);
  same = gst_buffer_get_size (b) == map.size
      && gst_buffer_memcmp (b, 0, map.data, map.size) == 0;
  gst_buffer_unmap (a, &map);
  return same;
}

void
pp_check_remove_tree (const gchar * path)
{
  GDir *dir = g_dir_open (path, 0, NULL);
  const gchar *name;

  if (dir != NULL) {
    while ((name = g_dir_read_name (dir)) != NULL) {
      g_autofree gchar *child = g_build_filename (path, name, NULL);
      pp_check_remove_tree (child);
    }
    g_dir_close (dir);
  }
  g_remove (path);
}

guint
pp_check_stamp (guint v, guint c, guint n_steps, guint mark)
{
  for (guint k = 0; k < n_steps; k++) {
    guint a = 2 * (k % 128) + 3;
    guint b = (37 * k + 101 * c + 11) % 256;
    v = (a * v + b + mark) % 256;
  }
  return v;
}

guint8
pp_check_pattern (guint index, guint x, guint y, guint c)
{
  return (guint8) ((x * 3 + y * 5 + c * 7 + index * 11) % 256);
}

void
pp_check_fill_pattern (guint8 * data, gsize stride, guint width,
    guint height, guint index)
{
  for (guint y = 0; y < height; y++)
    for (guint x = 0; x < width; x++) {
      guint8 *px = data + y * stride + x * 4;
      for (guint c = 0; c < 3; c++)
        px[c] = pp_check_pattern (index, x, y, c);
      px[3] = (guint8) (255 - index);
    }
}

gboolean
pp_check_is_stamped (const guint8 * data, gsize stride, guint width,
    guint height, guint index, guint n_steps, guint mark, gchar ** why)
{
  /* Compared by hand, not with fail_unless: that records every call, and
   * a frame has tens of thousands of bytes. */
  for (guint y = 0; y < height; y++)
    for (guint x = 0; x < width; x++) {
      const guint8 *px = data + y * stride + x * 4;
      for (guint c = 0; c < 3; c++) {
        guint v = pp_check_stamp (pp_check_pattern (index, x, y, c), c,
            n_steps, mark);
        if (px[c] != v) {
          if (why != NULL)
            *why = g_strdup_printf ("frame %u pixel (%u,%u) channel %u: "
                "expected %u after %u steps with mark %u, got %u", index, x,
                y, c, v, n_steps, mark, px[c]);
          return FALSE;
        }
      }
      if (px[3] != (guint8) (255 - index)) {
        if (why != NULL)
          *why = g_strdup_printf ("frame %u pixel (%u,%u): alpha changed "
              "from %u to %u", index, x, y, (guint8) (255 - index), px[3]);
        return FALSE;
      }
    }
  return TRUE;
}
