/* ppdiffuse — the CUDA module: the CUDA backend and the real NCCL table,
 * with the CUDA runtime, cuBLAS, cuDNN and NCCL linked into it, loaded on
 * first use.  A process that computes on the CPU never maps those
 * libraries (hundreds of megabytes, a fifth of a second to load, more
 * under a sanitizer); one that asks for CUDA loads them once.
 *
 * The module is found at $PPDIFFUSE_CUDA_MODULE, else where it is
 * installed, else in the build tree it was built in. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_CUDA_MODULE_ENV "PPDIFFUSE_CUDA_MODULE"

/* The address of @symbol in the module, loaded on the first call (and
 * kept); NULL with a PP_ERROR_DEVICE error naming the file and the
 * loader's reason when the module cannot be loaded or lacks @symbol. */
gpointer     pp_cuda_module_symbol (const gchar * symbol, GError ** error);
/* The file pp_cuda_module_symbol loads (or would load). */
const gchar *pp_cuda_module_path   (void);

G_END_DECLS
