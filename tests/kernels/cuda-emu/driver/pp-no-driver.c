/* tests/kernels/cuda-emu/driver: a library named as the NVIDIA driver's
 * (libcuda.so.1) for the emulated GPUs.  The backend's "auto" loads the
 * CUDA module only where that library loads (kernels/pp-backend.c,
 * cuda_driver_present), and asks it how many GPUs there are where CUDA
 * could not be used (driver_devices); the emulated module never calls
 * it.  On LD_LIBRARY_PATH it lets "auto" choose over the emulated GPUs. */
#include <stdlib.h>

/* CUDA_SUCCESS */
int
cuInit (unsigned int flags)
{
  (void) flags;
  return 0;
}

/* The emulation's GPUs: $PP_CUDA_EMU_DEVICES, else one
 * (emu-libraries.c). */
int
cuDeviceGetCount (int *count)
{
  const char *n = getenv ("PP_CUDA_EMU_DEVICES");

  *count = n != NULL ? atoi (n) : 1;
  return 0;
}
