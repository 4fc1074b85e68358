/* ppdiffuse — the data plane: how a chunk's tensor payloads travel
 * once its envelope head has gone out over MPI.
 *
 * The control plane stays MPI whatever the data plane: the head names
 * the payloads (the manifest), the receiver checks it, then posts the
 * matching receives on the data plane.  Two planes implement this:
 * MPI point-to-point of host buffers (pp_data_plane_mpi, what every
 * chunk link uses unless told otherwise) and NCCL send/receive of device
 * buffers (pp-nccl-plane.h). */
#pragma once

#include "pp-envelope.h"
#include "pp-wait.h"

G_BEGIN_DECLS

typedef struct _PpDataPlane PpDataPlane;

/* Test-only ways for a sender to break the contract (fault injection). */
typedef enum
{
  PP_SEND_INTACT,
  PP_SEND_BAD_VERSION,          /* the head claims another major version */
  PP_SEND_BAD_SPEC,             /* the first payload is half its manifest size */
} PpSendDefect;

typedef enum
{
  PP_DATA_PLANE_DONE,
  /* Failed, and nothing was posted or everything posted completed: the
   * payload buffers may be reused. */
  PP_DATA_PLANE_FAILED,
  /* Failed with transfers posted that did not complete: the runtime may
   * still read or write the payload buffers, which must be left to it. */
  PP_DATA_PLANE_ABANDONED,
} PpDataPlaneResult;

typedef struct
{
  const gchar *name;
  /* Checks, before the head goes out, that @chunk's payloads can travel
   * on this plane: when it fails nothing has been sent.  May be NULL. */
  gboolean (*preflight) (PpDataPlane * plane, const PpWait * w,
      const PpChunk * chunk, GError ** error);
  /* Sends @chunk's payloads to w->peer, in manifest order, after its head
   * was posted; returns when they are sent or w says to stop. */
  PpDataPlaneResult (*send) (PpDataPlane * plane, const PpWait * w,
      const PpChunk * chunk, PpSendDefect defect, GError ** error);
  /* Receives @chunk's payloads from w->peer into its tensors (fitted to
   * the manifest of the head just received), each held to its manifest
   * size. */
  PpDataPlaneResult (*recv) (PpDataPlane * plane, const PpWait * w,
      PpChunk * chunk, GError ** error);
} PpDataPlaneClass;

struct _PpDataPlane
{
  const PpDataPlaneClass *klass;
};

/* MPI_Isend / MPI_Irecv of host payloads on PP_TAG_PAYLOAD of w->comm,
 * polled with MPI_Testall under w's deadline and liveness check.  One
 * shared, stateless instance: never freed. */
PpDataPlane *pp_data_plane_mpi (void);

static inline const gchar *
pp_data_plane_name (const PpDataPlane * plane)
{
  return plane->klass->name;
}

static inline gboolean
pp_data_plane_preflight (PpDataPlane * plane, const PpWait * w,
    const PpChunk * chunk, GError ** error)
{
  return plane->klass->preflight == NULL
      || plane->klass->preflight (plane, w, chunk, error);
}

static inline PpDataPlaneResult
pp_data_plane_send (PpDataPlane * plane, const PpWait * w,
    const PpChunk * chunk, PpSendDefect defect, GError ** error)
{
  return plane->klass->send (plane, w, chunk, defect, error);
}

static inline PpDataPlaneResult
pp_data_plane_recv (PpDataPlane * plane, const PpWait * w,
    PpChunk * chunk, GError ** error)
{
  return plane->klass->recv (plane, w, chunk, error);
}

G_END_DECLS
