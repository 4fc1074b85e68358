/* ppdiffuse — MPI point-to-point under deadlines: bytes and whole chunks.
 *
 * Nothing here blocks inside MPI: requests are started non-blocking and
 * polled with MPI_Test (matched probes for receives) until they complete,
 * the deadline passes, or the liveness check says the peer is gone. */
#pragma once

#include <mpi.h>

#include "pp-envelope.h"
#include "pp-protocol.h"

G_BEGIN_DECLS

/* Test-only ways for a sender to break the contract (fault injection). */
typedef enum
{
  PP_SEND_INTACT,
  PP_SEND_BAD_VERSION,          /* the head claims another major version */
  PP_SEND_BAD_SPEC,             /* the first payload is half its manifest size */
} PpSendDefect;

/* Called between polls of an open-ended wait: FALSE (with error) stops it. */
typedef gboolean (*PpAliveFunc) (gpointer data, GError ** error);

typedef struct
{
  MPI_Comm comm;
  gint peer;                    /* rank in comm */
  gint64 deadline_us;           /* monotonic; PP_NO_DEADLINE for none */
  PpAliveFunc alive;            /* may be NULL */
  gpointer alive_data;
} PpWait;

gint64    pp_deadline_in_ms   (guint timeout_ms);
gboolean  pp_mpi_check        (int rc, const gchar * what, GError ** error);

gboolean  pp_transport_send_bytes (const PpWait * w, gint tag,
                                   GBytes * bytes, const gchar * what,
                                   GError ** error);
GBytes   *pp_transport_recv_bytes (const PpWait * w, gint tag,
                                   gsize max_len, const gchar * what,
                                   GError ** error);
/* Sends head then payloads; takes ownership of @chunk (its buffers are
 * leaked, never freed under MPI, when the send does not complete). */
gboolean  pp_transport_send_chunk (const PpWait * w, PpChunk * chunk,
                                   GError ** error);
gboolean  pp_transport_send_chunk_as (const PpWait * w, PpChunk * chunk,
                                   PpSendDefect defect, GError ** error);
/* A message of @tag from any rank of @comm if one has arrived (*@source set),
 * else NULL without error; never waits for one to come. */
GBytes   *pp_transport_try_recv_bytes (MPI_Comm comm, gint tag,
                                   gsize max_len, gint * source,
                                   GError ** error);
/* Waits for a head (under w->deadline_us), then for its payloads (under
 * @payload_timeout_ms from the head). */
PpChunk  *pp_transport_recv_chunk (const PpWait * w, guint payload_timeout_ms,
                                   GError ** error);

G_END_DECLS
