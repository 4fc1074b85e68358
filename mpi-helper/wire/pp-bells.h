/* ppdiffuse — the mesh's doorbells: one word per rank in shared memory,
 * for the ranks on rank 0's host.
 *
 * A polled wait (pp-wait.h) sleeps between polls; when the mesh has bells
 * it sleeps on its rank's bell instead, and the rank that sends it a chunk
 * rings that bell after posting the send (and the receiver rings the
 * sender's once the payloads are in), so that a waiting thread wakes as
 * the bytes arrive rather than at the end of its back-off period.  A rank
 * on another host has no bells and polls as before; a ring it would have
 * heard is then only a missed shortcut, never a lost message: the polls
 * go on.
 *
 * Rank 0 makes the bells (a POSIX shared memory object named after its
 * pid and a serial) before the handshake and names them in the hello; a
 * worker on the same host maps them before it replies; rank 0 unlinks the
 * name once every reply is in (or the start failed), so nothing is left in
 * /dev/shm whatever happens next: the mappings live as long as the
 * processes.  The bells hang on the mesh's communicator (an MPI
 * attribute) and go with it. */
#pragma once

#include <glib.h>
#include <mpi.h>

G_BEGIN_DECLS

typedef struct _PpBells PpBells;
struct _PpLanes;

/* Rank 0: new bells for @n_ranks ranks under a fresh name (*@name); when
 * @lane_slot_bytes is not 0, with chunk lanes (pp-lanes.h) of slots that
 * size after them, reserved in the host's shared memory now (without
 * them, and a warning, when there is no room). */
PpBells  *pp_bells_create      (guint n_ranks, gsize lane_slot_bytes,
                                gchar ** name, GError ** error);
/* A worker: the bells @name for @n_ranks ranks (with their lanes when
 * rank 0 made them), or NULL (with @error) when this host has no such
 * object (another host's rank 0). */
PpBells  *pp_bells_open        (const gchar * name, guint n_ranks,
                                GError ** error);
/* Rank 0: removes the name (idempotent); the mappings stay. */
void      pp_bells_unlink      (PpBells * bells);
void      pp_bells_free        (PpBells * bells);

/* Hangs @bells (taken) on @comm: freed when @comm is. */
void      pp_bells_attach      (MPI_Comm comm, PpBells * bells);
/* The bells on @comm, or NULL. */
PpBells  *pp_bells_of          (MPI_Comm comm);

/* The chunk lanes in the bells' object, or NULL (none, or @bells NULL). */
struct _PpLanes *pp_bells_lanes (PpBells * bells);

guint32   pp_bells_read        (PpBells * bells, guint rank);
/* Rings @rank's bell: every thread of that rank waiting on it wakes. */
void      pp_bells_ring        (PpBells * bells, guint rank);
/* Waits until @rank's bell differs from @seen or @timeout_us passed. */
void      pp_bells_wait        (PpBells * bells, guint rank, guint32 seen,
                                gulong timeout_us);

G_END_DECLS
