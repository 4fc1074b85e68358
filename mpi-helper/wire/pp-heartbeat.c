/* ppdiffuse — heartbeat and report messages (pp-heartbeat.h). */
#include "pp-heartbeat.h"
#include "pp-error.h"

#include <string.h>

guint
pp_heartbeat_period_ms (guint timeout_ms)
{
  return MAX (timeout_ms / PP_HEARTBEAT_DIVISOR, PP_HEARTBEAT_MIN_PERIOD_MS);
}

static GVariant *
parse (GBytes * bytes, const gchar * type, const gchar * what,
    GError ** error)
{
  GVariant *v = g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE
          (type), bytes, FALSE));

  if (!g_variant_is_normal_form (v)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "%s: not a well-formed %s message (%" G_GSIZE_FORMAT " bytes)", what,
        type, g_bytes_get_size (bytes));
    g_variant_unref (v);
    return NULL;
  }
  return v;
}

void
pp_heartbeat_write (const PpHeartbeat * hb, guint8 out[PP_HEARTBEAT_SIZE])
{
  const guint32 u[2] = { hb->rank, (guint32) hb->state };
  const guint64 t[13] = { hb->chunk_id, hb->state_us, hb->received,
    hb->sent, hb->seq, hb->busy_us, hb->cache_builds, hb->stream_bytes,
    hb->batched_steps, hb->pace.us, hb->pace.passes, hb->pace.work,
    hb->cpu_us
  };

  memcpy (out, u, sizeof u);
  memcpy (out + sizeof u, t, sizeof t);
}

gboolean
pp_heartbeat_read (const guint8 * data, gsize len, PpHeartbeat * hb,
    GError ** error)
{
  guint32 u[2];
  guint64 t[13];

  /* A fixed-size tuple is in normal form exactly when it has its size. */
  if (len != PP_HEARTBEAT_SIZE) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "heartbeat: not a well-formed %s message (%" G_GSIZE_FORMAT
        " bytes)", PP_HEARTBEAT_TYPE, len);
    return FALSE;
  }
  memcpy (u, data, sizeof u);
  memcpy (t, data + sizeof u, sizeof t);
  if (u[1] > PP_WORK_DONE) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "heartbeat field state: expected 0 to %d, received %u", PP_WORK_DONE,
        u[1]);
    return FALSE;
  }
  hb->rank = u[0];
  hb->state = (PpWorkState) u[1];
  hb->chunk_id = t[0];
  hb->state_us = t[1];
  hb->received = t[2];
  hb->sent = t[3];
  hb->seq = t[4];
  hb->busy_us = t[5];
  hb->cache_builds = t[6];
  hb->stream_bytes = t[7];
  hb->batched_steps = t[8];
  hb->pace.us = t[9];
  hb->pace.passes = t[10];
  hb->pace.work = t[11];
  hb->cpu_us = t[12];
  return TRUE;
}

GBytes *
pp_report_encode (gint rank, gint blamed, const gchar * text)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_REPORT_TYPE,
          (guint32) rank, (guint32) blamed, text));

  return g_variant_get_data_as_bytes (v);
}

gchar *
pp_report_decode (GBytes * bytes, gint * rank, gint * blamed,
    GError ** error)
{
  g_autoptr (GVariant) v = parse (bytes, PP_REPORT_TYPE, "error report",
      error);
  guint32 r, b;
  const gchar *text;

  if (v == NULL)
    return NULL;
  g_variant_get (v, "(uu&s)", &r, &b, &text);
  *rank = (gint) r;
  *blamed = (gint) b;
  return g_strdup (text);
}

const gchar *
pp_work_state_name (PpWorkState state)
{
  switch (state) {
    case PP_WORK_IDLE:
      return "idle";
    case PP_WORK_COMPUTING:
      return "computing";
    case PP_WORK_DONE:
      return "done";
  }
  return "?";
}

static gchar *
chunk_text (guint64 id)
{
  return id == PP_HEARTBEAT_NONE ? g_strdup ("none")
      : g_strdup_printf ("%" G_GUINT64_FORMAT, id);
}

gchar *
pp_heartbeat_describe (const PpHeartbeat * hb, gint64 age_us)
{
  g_autofree gchar *received = chunk_text (hb->received);
  g_autofree gchar *sent = chunk_text (hb->sent);
  g_autofree gchar *what = hb->state == PP_WORK_COMPUTING
      ? g_strdup_printf ("computing chunk %" G_GUINT64_FORMAT, hb->chunk_id)
      : g_strdup (pp_work_state_name (hb->state));

  return g_strdup_printf ("%s for %" G_GUINT64_FORMAT " ms, last chunk "
      "received %s, sent %s; last heartbeat %" G_GINT64_FORMAT " ms ago",
      what, hb->state_us / 1000, received, sent, age_us / 1000);
}
