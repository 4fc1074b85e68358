/* ppdiffuse — init handshake messages. */
#include "pp-handshake.h"
#include "pp-error.h"

#include <unistd.h>

static GVariant *
variant_from_bytes (GBytes * bytes, const gchar * type, const gchar * what,
    GError ** error)
{
  GVariant *v = g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE
          (type), bytes, FALSE));

  if (!g_variant_is_normal_form (v)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "%s: not a well-formed %s message (%" G_GSIZE_FORMAT " bytes); "
        "are rank 0 and the worker from the same ppdiffuse build?", what,
        type, g_bytes_get_size (bytes));
    g_variant_unref (v);
    return NULL;
  }
  return v;
}

static gboolean
check_version (guint32 version, const gchar * what, GError ** error)
{
  if (version == PP_PROTOCOL_VERSION)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
      "%s field protocol version: expected %d, received %u; install the same "
      "ppdiffuse version for the element and ppdiffuse-worker", what,
      PP_PROTOCOL_VERSION, version);
  return FALSE;
}

GBytes *
pp_handshake_hello_new (const PpPlan * plan)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_HELLO_TYPE,
          (guint32) PP_PROTOCOL_VERSION, (gint64) getpid (),
          g_get_host_name (), pp_plan_to_variant (plan), plan->plan_id));

  return g_variant_get_data_as_bytes (v);
}

PpPlan *
pp_handshake_hello_parse (GBytes * bytes, gint64 * rank0_pid,
    gchar ** rank0_host, GError ** error)
{
  g_autoptr (GVariant) v = variant_from_bytes (bytes, PP_HELLO_TYPE,
      "handshake hello", error);
  g_autoptr (GVariant) plan_v = NULL;
  guint32 version, plan_id;
  const gchar *host;
  PpPlan *plan;

  if (v == NULL)
    return NULL;
  g_variant_get (v, "(ux&svu)", &version, rank0_pid, &host, &plan_v,
      &plan_id);
  if (!check_version (version, "handshake hello", error))
    return NULL;
  plan = pp_plan_from_variant (plan_v, plan_id, error);
  if (plan != NULL)
    *rank0_host = g_strdup (host);
  return plan;
}

GBytes *
pp_handshake_reply_new (guint32 plan_id, gint rank, const gchar * error_text)
{
  g_autoptr (GVariant) v = g_variant_ref_sink (g_variant_new (PP_REPLY_TYPE,
          (guint32) PP_PROTOCOL_VERSION, plan_id, (guint32) rank,
          (gint64) getpid (), g_get_host_name (),
          error_text ? error_text : ""));

  return g_variant_get_data_as_bytes (v);
}

gboolean
pp_handshake_reply_parse (GBytes * bytes, PpWorkerInfo * info,
    GError ** error)
{
  g_autoptr (GVariant) v = variant_from_bytes (bytes, PP_REPLY_TYPE,
      "handshake reply", error);
  guint32 version, rank;
  const gchar *host, *text;

  if (v == NULL)
    return FALSE;
  g_variant_get (v, "(uuux&s&s)", &version, &info->plan_id, &rank,
      &info->pid, &host, &text);
  /* Who answered is kept even when the answer is refused: rank 0 uses it
   * to stop that process. */
  info->host = g_strdup (host);
  if (!check_version (version, "handshake reply", error))
    return FALSE;
  info->rank = (gint) rank;
  info->error = *text ? g_strdup (text) : NULL;
  return TRUE;
}

void
pp_worker_info_clear (PpWorkerInfo * info)
{
  g_clear_pointer (&info->host, g_free);
  g_clear_pointer (&info->error, g_free);
}
