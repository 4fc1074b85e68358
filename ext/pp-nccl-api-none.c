/* ppdiffuse — builds without NCCL: no table to give. */
#include "pp-nccl-api.h"
#include "pp-error.h"

const PpNcclApi *
pp_nccl_api_get (GError ** error)
{
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "this build has no NCCL: "
      "configure it with NCCL under cuda-root (meson option nccl)");
  return NULL;
}
