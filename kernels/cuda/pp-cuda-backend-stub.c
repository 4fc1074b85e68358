/* Placeholder until the CUDA backend lands: no device is ever usable. */
#include "pp-backend.h"
#include "pp-cuda-check.h"
#include "pp-error.h"

PpBackend *pp_cuda_backend_get (gint device, GError ** error);
gint pp_cuda_backend_n_devices (GError ** error);

gint
pp_cuda_backend_n_devices (GError ** error)
{
  return pp_cuda_device_count (error);
}

PpBackend *
pp_cuda_backend_get (gint device, GError ** error)
{
  gint n = pp_cuda_device_count (error);

  if (n >= 0)
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "device %d: the CUDA "
        "backend is not built yet", device);
  return NULL;
}
