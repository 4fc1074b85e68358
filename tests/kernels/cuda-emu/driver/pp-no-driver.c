/* tests/kernels/cuda-emu/driver: a library named as the NVIDIA driver's
 * (libcuda.so.1) with nothing in it.  The backend's "auto" loads the CUDA
 * module only where that library loads (kernels/pp-backend.c,
 * cuda_driver_present); the emulated module never calls it.  On
 * LD_LIBRARY_PATH it lets "auto" choose over the emulated GPU. */
int pp_no_driver;
