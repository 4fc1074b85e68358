/* ppdiffuse — the flight recorder: the last PP_RECORDER_EVENTS events of
 * this process (chunk sends and receives, computes, heartbeats missed,
 * faults), kept in a ring and dumped when something goes wrong, so that a
 * failure shows what each rank was doing just before it.
 *
 * One recorder per process; recording is a mutex and a few stores, cheap
 * next to an MPI message. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_RECORDER_EVENTS 256
#define PP_RECORDER_NO_CHUNK G_MAXUINT64
#define PP_RECORDER_NO_PEER (-1)

typedef enum
{
  PP_REC_SEND,                  /* a chunk: head and payloads */
  PP_REC_RECV,
  PP_REC_COMPUTE,               /* a worker's steps on a chunk */
  PP_REC_SUBMIT,                /* rank 0: a frame entered the mesh */
  PP_REC_COLLECT,               /* rank 0: a chunk came back */
  PP_REC_HEARTBEAT,             /* a peer's heartbeat went missing */
  PP_REC_REPORT,                /* an error report sent or received */
  PP_REC_FAULT,                 /* an injected fault fired */
} PpRecOp;

typedef enum
{
  PP_REC_STARTED,
  PP_REC_DONE,
  PP_REC_FAILED,
} PpRecState;

/* Starts an event; returns its id for pp_recorder_end. */
guint64  pp_recorder_begin (PpRecOp op, guint64 chunk_id, gint peer,
                            gsize bytes);
/* Ends event @id (ignored when the ring has moved past it). */
void     pp_recorder_end   (guint64 id, PpRecState state);
/* A complete event at once. */
void     pp_recorder_note  (PpRecOp op, guint64 chunk_id, gint peer,
                            gsize bytes, PpRecState state);
/* The events, oldest first, one line each, headed by @rank and @reason. */
gchar   *pp_recorder_format (gint rank, const gchar * reason);
/* Writes pp_recorder_format to the log (errors) and, when @dir is set, to
 * @dir/ppdiffuse-rank<R>-pid<P>.txt; returns that path or NULL. */
gchar   *pp_recorder_dump  (const gchar * dir, gint rank,
                            const gchar * reason);

G_END_DECLS
