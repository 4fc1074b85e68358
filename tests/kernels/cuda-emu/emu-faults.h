/* tests/kernels/cuda-emu: kernels with faults (emu-faults.cu). */
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[b] = the sum of x[b · threads …], block b of @blocks; without
 * @barrier, a race on shared memory. */
cudaError_t emu_faults_block_sum (const float *x, int blocks, int threads,
    int barrier, float *y);
/* Writes y[0…n], one element past the end of y [n]. */
cudaError_t emu_faults_overrun (float *y, size_t n);
/* One block of @threads of which those past @n skip the barrier. */
cudaError_t emu_faults_early_exit (float *y, int threads, int n);
/* @blocks blocks of @threads that meet @rounds times, each time
 * (pp_cuda_blocks_meet, @expected blocks, @counts its count and
 * generation) after writing its index to slots [round · blocks + block],
 * then count in seen[block] the round's slots that hold their blocks'
 * indices; a cooperative launch with @cooperative. */
cudaError_t emu_faults_meet (unsigned *counts, int blocks, int threads,
    int rounds, int cooperative, unsigned expected, unsigned *slots,
    unsigned *seen);
/* An empty kernel on a grid and a block of the given dimensions. */
cudaError_t emu_faults_launch (unsigned gx, unsigned gy, unsigned gz,
    unsigned bx, unsigned by, unsigned bz);

#ifdef __cplusplus
}
#endif
