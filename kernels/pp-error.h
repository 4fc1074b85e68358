/* ppdiffuse — the one error domain shared by kernels, mesh and element. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_ERROR (pp_error_quark ())
GQuark pp_error_quark (void);

typedef enum
{
  PP_ERROR_CONFIG,              /* a setting a person must change */
  PP_ERROR_MODEL,               /* unknown model or bad model parameter */
  PP_ERROR_SHAPE,               /* a tensor has the wrong shape or dtype */
  PP_ERROR_RESOURCE,            /* memory, files, processes */
  PP_ERROR_SPAWN,               /* workers could not be started */
  PP_ERROR_TIMEOUT,             /* a deadline passed */
  PP_ERROR_PROTOCOL,            /* a peer sent something the contract forbids */
  PP_ERROR_MPI,                 /* MPI reported an error */
  PP_ERROR_DEVICE,              /* a device runtime (CUDA, cuBLAS, cuDNN,
                                 * NCCL) reported an error */
} PpErrorCode;

G_END_DECLS
