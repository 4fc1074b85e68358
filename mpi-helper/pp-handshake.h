/* ppdiffuse — the init handshake between rank 0 and each worker.
 *
 * rank 0 → worker:  PP_HELLO_TYPE  (protocol version, rank 0 pid, rank 0
 *                   host, plan, plan_id)
 * worker → rank 0:  PP_REPLY_TYPE  (protocol version, plan_id as the worker
 *                   derived it, world rank, pid, host, error text or "")
 */
#pragma once

#include "pp-plan.h"

G_BEGIN_DECLS

#define PP_PROTOCOL_VERSION 1
#define PP_HELLO_TYPE "(uxsvu)"
#define PP_REPLY_TYPE "(uuuxss)"
#define PP_HANDSHAKE_MAX (64 * 1024)

typedef struct
{
  guint32 plan_id;
  gint rank;
  gint64 pid;
  gchar *host;
  gchar *error;                 /* NULL when the worker accepted the plan */
} PpWorkerInfo;

GBytes   *pp_handshake_hello_new   (const PpPlan * plan);
/* Validates a hello; returns the plan and rank 0's identity. */
PpPlan   *pp_handshake_hello_parse (GBytes * bytes, gint64 * rank0_pid,
                                    gchar ** rank0_host, GError ** error);
GBytes   *pp_handshake_reply_new   (guint32 plan_id, gint rank,
                                    const gchar * error_text);
gboolean  pp_handshake_reply_parse (GBytes * bytes, PpWorkerInfo * info,
                                    GError ** error);
void      pp_worker_info_clear     (PpWorkerInfo * info);

G_END_DECLS
