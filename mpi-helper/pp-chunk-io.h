/* ppdiffuse — rank 0's chunk traffic (pp-chunk-io.c): the sends and
 * receives beneath pp_mesh_submit, pp_mesh_warm_up and pp_mesh_collect,
 * and beneath the shutdown marker's round. */
#pragma once

#include "pp-mesh.h"
#include "pp-mesh-private.h"

G_BEGIN_DECLS

/* Assigns @chunk the next chunk_id, tells @assigned (may be NULL), and
 * sends it to the first worker under @deadline_us; takes @chunk. */
gboolean pp_mesh_send_next    (PpMesh * mesh, PpChunk * chunk,
                               gint64 deadline_us,
                               PpMeshAssignedFunc assigned,
                               gpointer user_data, GError ** error);
/* Receives the next chunk from the last worker and checks it; a shutdown
 * marker is accepted only when @shutdown. */
PpChunk *pp_mesh_receive_next (PpMesh * mesh, gboolean shutdown,
                               GError ** error);

G_END_DECLS
