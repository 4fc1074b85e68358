/* ppdiffuse — which of a build's device code a GPU runs.  nvcc builds the
 * kernels for the cuda-archs option's GPUs (a binary each, sm_XY) and as
 * PTX for the newest of them (compute_XY); CUDA runs a binary for sm_XY
 * on a device of compute capability X.Y' with Y' ≥ Y (the same X), and
 * compiles the PTX at load for any device of compute capability XY or
 * later.  A device neither fits cannot run one kernel of the build: the
 * backend refuses it when it is made, naming what to rebuild with, rather
 * than failing at a model's first kernel.  Plain C, no CUDA: the host
 * tests check it. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum
{
  PP_CUDA_CODE_NONE,            /* nothing of the build runs there */
  PP_CUDA_CODE_BINARY,          /* a binary built for it, or for an earlier
                                 * minor revision of its architecture */
  PP_CUDA_CODE_PTX,             /* the PTX, compiled by the driver at load */
} PpCudaCode;

/* What of a build with binaries for @archs (SM versions, comma-separated:
 * "80,89,90"; "" for none) and PTX for compute capability @ptx (90; 0 for
 * none) a device of compute capability @major.@minor runs, and in
 * *@arch the SM version it runs (the binary's, or the PTX's; 0 for
 * none). */
PpCudaCode   pp_cuda_code_for      (const gchar * archs, gint ptx,
                                    gint major, gint minor, gint * arch);
/* The build's device code in words: "binaries for sm_80, sm_89 and sm_90
 * and PTX for compute_90", "PTX for compute_90 alone".  Free it. */
gchar       *pp_cuda_code_describe (const gchar * archs, gint ptx);

G_END_DECLS
