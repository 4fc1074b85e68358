/* ppdiffuse — chunk lanes: shared memory that carries chunks between
 * consecutive ranks of the mesh's ring when both run on rank 0's host.
 *
 * Open MPI carries a chunk between rank 0 and the workers it spawned over
 * TCP, even on one host (its shared-memory transport does not reach
 * processes of another job), with a rendezvous per payload that both ends
 * must drive.  A lane is one direction of the ring, rank r to rank
 * (r + 1) mod n, with two slots: the sender copies a chunk's envelope
 * head and payloads into a free slot and rings the receiver's doorbell;
 * the receiver copies them out, frees the slot and rings the sender's.
 * Neither polls: a wait sleeps on its rank's bell (pp-bells.h) until the
 * ring.  Payloads too large for a slot follow the head on the link's data
 * plane instead (both ends tell from the manifest).
 *
 * The lanes live in the bells' shared memory object, after the bells.
 * Each rank that maps them joins before its handshake reply; rank 0 opens
 * them once every reply is in, when who joined is final.  A lane carries
 * chunks only when both its ranks joined; otherwise that link uses MPI as
 * between hosts.  Nothing here knows of MPI or of waiting: the transport
 * (pp-transport.c) does both. */
#pragma once

#include <glib.h>

#include "pp-envelope.h"

G_BEGIN_DECLS

typedef struct _PpLanes PpLanes;
typedef struct _PpLane PpLane;

/* Bytes of one slot: the slot's header, the envelope head and the
 * payloads.  A chunk whose head and payloads do not fit sends its
 * payloads on the data plane.  Rank 0 takes the size from
 * $PPDIFFUSE_LANE_SLOT_BYTES when set (PP_LANE_SLOT_BYTES_ENV): at least
 * the minimum, which holds the largest head and no payload. */
#define PP_LANE_SLOT_BYTES_DEFAULT (1024 * 1024)
#define PP_LANE_SLOT_BYTES_MIN (256 + 64 * 1024)
#define PP_LANE_SLOT_BYTES_MAX (256 * 1024 * 1024)
#define PP_LANE_SLOTS 2

/* What the lanes of a mesh take at most by default: for more ranks than
 * the default slots allow, the slots are smaller. */
#define PP_LANES_BUDGET_BYTES (64 * 1024 * 1024)

/* The slot size rank 0 makes the lanes of @n_ranks ranks with:
 * $PPDIFFUSE_LANE_SLOT_BYTES rounded up to a cache line when set, else the
 * default, made smaller (not below the minimum) where the lanes of
 * @n_ranks ranks would take more than PP_LANES_BUDGET_BYTES; FALSE (with
 * @error naming the variable) for a value that is not a size in range. */
gboolean  pp_lanes_slot_bytes_from_env (guint n_ranks, gsize * slot_bytes,
                                        GError ** error);
/* The bytes the lanes of a mesh of @n_ranks ranks take. */
gsize     pp_lanes_bytes      (guint n_ranks, gsize slot_bytes);
/* Rank 0: writes the lanes' header into @region (pp_lanes_bytes, zeroed)
 * and joins them as rank 0. */
void      pp_lanes_format     (gpointer region, guint n_ranks,
                               gsize slot_bytes);
/* The lanes in @region (@bytes long) of a mesh of @n_ranks ranks, their
 * slot size read from the header, or NULL with @error when the region
 * does not hold them (a header of another geometry, a size that is not
 * theirs). */
PpLanes  *pp_lanes_map        (gpointer region, gsize bytes, guint n_ranks,
                               GError ** error);
gsize     pp_lanes_slot_bytes (PpLanes * lanes);
/* The mapping stays; only the handle goes. */
void      pp_lanes_free       (PpLanes * lanes);

/* A rank that mapped the lanes, before its handshake reply. */
void      pp_lanes_join       (PpLanes * lanes, guint rank);
/* Rank 0, once every reply is in and before its first chunk: who joined
 * is final. */
void      pp_lanes_open       (PpLanes * lanes);
gboolean  pp_lanes_is_open    (PpLanes * lanes);
/* Once open: the lanes that carry chunks (both their ranks joined). */
guint     pp_lanes_count      (PpLanes * lanes);
/* The lane from @from to @to once open: NULL when they are not
 * consecutive in the ring or one of them did not join. */
PpLane   *pp_lanes_between    (PpLanes * lanes, guint from, guint to);

/* A slot as the transport fills and empties it. */
typedef struct
{
  guint8 *head;                 /* the envelope head, head_len bytes */
  gsize head_len;
  /* Payloads in manifest order, or n_payloads 0 and payloads_here FALSE
   * when they follow on the data plane. */
  gboolean payloads_here;
  guint n_payloads;
  guint8 *payload[PP_ENVELOPE_MAX_TENSORS];
  gsize payload_len[PP_ENVELOPE_MAX_TENSORS];
} PpLaneSlot;

/* Sender: whether a slot is free; when so, pp_lane_fill copies @head and,
 * if they fit with it, @chunk's payloads (@short_first: the first payload
 * is half its size, fault injection) into it and pp_lane_publish hands it
 * to the receiver.  pp_lane_fill returns whether the payloads went in. */
gboolean  pp_lane_writable    (PpLane * lane);
gboolean  pp_lane_fill        (PpLane * lane, const guint8 * head,
                               gsize head_len, const PpChunk * chunk,
                               gboolean short_first);
void      pp_lane_publish     (PpLane * lane);
/* Receiver: whether a chunk is waiting; when so, pp_lane_peek describes
 * its slot (read in place) and pp_lane_release frees it for the sender.
 * FALSE from pp_lane_peek (with @error): the slot's own header is not
 * one a sender wrote. */
gboolean  pp_lane_readable    (PpLane * lane);
gboolean  pp_lane_peek        (PpLane * lane, PpLaneSlot * slot,
                               GError ** error);
void      pp_lane_release     (PpLane * lane);

G_END_DECLS
