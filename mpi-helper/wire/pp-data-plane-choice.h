/* ppdiffuse — the choice of the data plane: which one rank 0 puts in the
 * plan, and the NCCL table behind a plane that is NCCL, real or emulated.
 *
 * The emulated table (NCCL over MPI of host memory, so that a machine
 * without a GPU runs the NCCL plane's code) is test-only code: the test
 * builds link it in and hand it over with pp_data_plane_set_emulation; a
 * release build has none, and "nccl-emulated" is refused there. */
#pragma once

#include "pp-backend.h"
#include "pp-nccl-plane.h"
#include "pp-plan.h"        /* the planes' names */

G_BEGIN_DECLS

/* The data plane rank 0 puts in the plan for @backend and a mesh of
 * @n_ranks ranks (rank 0 included); @local: every rank runs on this host.
 * $PPDIFFUSE_DATA_PLANE decides when set (PP_DATA_PLANE_ENV); "auto" or
 * unset: "nccl" when the backend is cuda, this build has NCCL and (on one
 * host) every rank has a GPU of its own (NCCL refuses two ranks of a
 * communicator on one device), else "mpi".  NULL with @error when the
 * variable asks for what cannot be had. */
const gchar *pp_data_plane_choose (PpBackend * backend, guint n_ranks,
                                   gboolean local, GError ** error);

/* The NCCL table of @data_plane: the real one, or the emulated one over
 * @world; NULL with @error when this build has no NCCL. */
const PpNcclApi *pp_data_plane_api (const gchar * data_plane, MPI_Comm world,
                                    GError ** error);

/* The emulated table over @world (tests only). */
typedef const PpNcclApi *(*PpNcclEmulation) (MPI_Comm world);
/* Called once at load by the test builds' emulation; @make_api NULL
 * takes it back. */
void pp_data_plane_set_emulation (PpNcclEmulation make_api);

G_END_DECLS
