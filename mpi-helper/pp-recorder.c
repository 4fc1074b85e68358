/* ppdiffuse — the flight recorder. */
#include "pp-recorder.h"
#include "pp-log.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

typedef struct
{
  guint64 id;                   /* 0: empty slot */
  PpRecOp op;
  PpRecState state;
  guint64 chunk_id;
  gint peer;
  gsize bytes;
  gint64 start_us, end_us;      /* monotonic; end 0 while started */
} Event;

static GMutex lock;
static Event ring[PP_RECORDER_EVENTS];
static guint64 next_id = 1;

static const gchar *const op_names[] = {
  [PP_REC_SEND] = "send",
  [PP_REC_RECV] = "recv",
  [PP_REC_COMPUTE] = "compute",
  [PP_REC_SUBMIT] = "submit",
  [PP_REC_COLLECT] = "collect",
  [PP_REC_HEARTBEAT] = "heartbeat-missing",
  [PP_REC_REPORT] = "report",
  [PP_REC_FAULT] = "fault",
};

static const gchar *const state_names[] = {
  [PP_REC_STARTED] = "started",
  [PP_REC_DONE] = "done",
  [PP_REC_FAILED] = "failed",
};

guint64
pp_recorder_begin (PpRecOp op, guint64 chunk_id, gint peer, gsize bytes)
{
  guint64 id;
  Event *e;

  g_mutex_lock (&lock);
  id = next_id++;
  e = &ring[id % PP_RECORDER_EVENTS];
  e->id = id;
  e->op = op;
  e->state = PP_REC_STARTED;
  e->chunk_id = chunk_id;
  e->peer = peer;
  e->bytes = bytes;
  e->start_us = g_get_monotonic_time ();
  e->end_us = 0;
  g_mutex_unlock (&lock);
  return id;
}

void
pp_recorder_end (guint64 id, PpRecState state)
{
  Event *e = &ring[id % PP_RECORDER_EVENTS];

  g_mutex_lock (&lock);
  if (e->id == id) {
    e->state = state;
    e->end_us = g_get_monotonic_time ();
  }
  g_mutex_unlock (&lock);
}

void
pp_recorder_note (PpRecOp op, guint64 chunk_id, gint peer, gsize bytes,
    PpRecState state)
{
  pp_recorder_end (pp_recorder_begin (op, chunk_id, peer, bytes), state);
}

gchar *
pp_recorder_format (gint rank, const gchar * reason)
{
  GString *s = g_string_new (NULL);
  const gint64 now = g_get_monotonic_time ();
  guint64 first;

  g_mutex_lock (&lock);
  first = next_id > PP_RECORDER_EVENTS ? next_id - PP_RECORDER_EVENTS : 1;
  g_string_append_printf (s, "flight recorder of rank %d (pid %d): %s\n"
      "last %" G_GUINT64_FORMAT " events, times in ms before now\n"
      "   event        op  chunk  peer      bytes    state    start      end\n",
      rank, (int) getpid (), reason, next_id - first);
  for (guint64 id = first; id < next_id; id++) {
    const Event *e = &ring[id % PP_RECORDER_EVENTS];
    g_autofree gchar *chunk = e->chunk_id == PP_RECORDER_NO_CHUNK
        ? g_strdup ("-") : g_strdup_printf ("%" G_GUINT64_FORMAT, e->chunk_id);
    g_autofree gchar *end = e->end_us == 0 ? g_strdup ("-")
        : g_strdup_printf ("%.3f", (now - e->end_us) / 1e3);

    if (e->id != id)
      continue;
    g_string_append_printf (s, "%8" G_GUINT64_FORMAT " %9s %6s %5d %10"
        G_GSIZE_FORMAT " %8s %8.3f %8s\n", id, op_names[e->op], chunk,
        e->peer, e->bytes, state_names[e->state], (now - e->start_us) / 1e3,
        end);
  }
  g_mutex_unlock (&lock);
  return g_string_free (s, FALSE);
}

gchar *
pp_recorder_dump (const gchar * dir, gint rank, const gchar * reason)
{
  g_autofree gchar *text = pp_recorder_format (rank, reason);
  g_autofree gchar *name = NULL;
  gchar *path;
  GError *error = NULL;

  PP_ERROR_LOG ("%s", text);
  if (dir == NULL || *dir == '\0')
    return NULL;
  name = g_strdup_printf ("ppdiffuse-rank%d-pid%d.txt", rank, (int) getpid ());
  path = g_build_filename (dir, name, NULL);
  if (g_mkdir_with_parents (dir, 0755) != 0
      || !g_file_set_contents (path, text, -1, &error)) {
    PP_WARN ("could not write the flight recorder to %s: %s", path,
        error ? error->message : g_strerror (errno));
    g_clear_error (&error);
    g_free (path);
    return NULL;
  }
  return path;
}
