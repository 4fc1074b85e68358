/* ppdiffuse — the end of rank 0's mesh (pp-shutdown.c): pp_mesh_stop is
 * in pp-mesh.h; these serve a start that fails half way. */
#pragma once

#include "pp-mesh-private.h"

G_BEGIN_DECLS

void     pp_mesh_kill_workers (PpMesh * mesh);
void     pp_mesh_free         (PpMesh * mesh);

G_END_DECLS
