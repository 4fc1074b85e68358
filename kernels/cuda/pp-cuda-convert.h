/* ppdiffuse — the CUDA backend's dtype conversions (kernels/pp-dtype-math.h
 * on the device): weights and activations between float32 and the 16-bit
 * storage dtypes.  Each launches on @stream and returns the launch's
 * status; the caller checks it with PP_CUDA_TRY (ext/pp-cuda-check.h). */
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t pp_cuda_f32_to_f16 (const float *x, uint16_t *y, size_t n,
    cudaStream_t stream);
cudaError_t pp_cuda_f16_to_f32 (const uint16_t *x, float *y, size_t n,
    cudaStream_t stream);
cudaError_t pp_cuda_f32_to_bf16 (const float *x, uint16_t *y, size_t n,
    cudaStream_t stream);
cudaError_t pp_cuda_bf16_to_f32 (const uint16_t *x, float *y, size_t n,
    cudaStream_t stream);

#ifdef __cplusplus
}
#endif
