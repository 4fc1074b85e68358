/* ppdiffuse — the real NCCL table, from the CUDA module (pp-cuda-module.h):
 * the mesh links no NCCL or CUDA library of its own. */
#include "pp-cuda-module.h"
#include "pp-nccl-api.h"

typedef const PpNcclApi *(*RealApiFunc) (void);

const PpNcclApi *
pp_nccl_api_get (GError ** error)
{
  RealApiFunc real = (RealApiFunc) pp_cuda_module_symbol ("pp_nccl_api_real",
      error);

  return real != NULL ? real () : NULL;
}
