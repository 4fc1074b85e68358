/* ppdiffuse — the CUDA backend: the ops of pp-ops-list.h on one NVIDIA
 * GPU, through cuBLAS (linear, matmul, attention), cuDNN (conv2d) and the
 * kernels of the .cu files here (everything else).
 *
 * One backend per device index, created on first use and kept for the
 * process.  Everything it does is enqueued on one stream of its own, in
 * call order; upload and download return when their copy is complete, and
 * synchronize waits for the rest.  Activations are float32; weights are
 * stored as float32, float16 or bfloat16 (default float16) and computed
 * with float32 accumulation.  Float32 GEMMs and convolutions are exact
 * float32 unless PPDIFFUSE_CUDA_TF32=1 allows TensorFloat-32.
 *
 * The backend needs cuDNN for its convolutions: a build without it (no
 * PP_HAVE_CUDNN) has no CUDA backend, and pp_cuda_backend_get says so. */
#pragma once

#include <glib.h>

#include "pp-backend-impl.h"

G_BEGIN_DECLS

/* Opts float32 GEMMs and convolutions into TensorFloat-32 tensor cores
 * (10-bit mantissa products) when set to 1. */
#define PP_CUDA_TF32_ENV "PPDIFFUSE_CUDA_TF32"
/* How attention with 16-bit weights runs: fused (the default: cuDNN's
 * flash attention where it has an engine for the shape, else gemm), gemm
 * (16-bit GEMMs on tensor cores and a float32 softmax) or f32 (float32
 * GEMMs, as with float32 weights). */
#define PP_CUDA_ATTENTION_ENV "PPDIFFUSE_CUDA_ATTENTION"
/* How a convolution shape's algorithm is chosen the first time it runs:
 * heuristic (the default: cuDNN's heuristics' first choice, nothing run,
 * the same in every process) or timed (cuDNN's trials on the op's
 * buffers, the fastest kept: two processes may pick differently, and
 * their results then differ in the last bits). */
#define PP_CUDA_CONV_ALGO_ENV "PPDIFFUSE_CUDA_CONV_ALGO"
/* The layout a 16-bit convolution runs in: auto (the default: as
 * padded), nchw (the ops' own layout, cuDNN changing it as it needs),
 * nhwc (channels-last wherever the channels are multiples of 8, the
 * others channels first) or padded (as nhwc, and the others channels-last
 * with their channels padded with zeros: a model's first and last). */
#define PP_CUDA_CONV_LAYOUT_ENV "PPDIFFUSE_CUDA_CONV_LAYOUT"
/* Who adds a convolution's bias, residual and ReLU: fused (the default:
 * cuDNN's cudnnConvolutionBiasActivationForward, in the convolution's
 * epilogue, where cuDNN runs it for the shape: the output's values
 * rounded once instead of twice; on an H200 TAESD's encode and decode
 * took 22 % less time) or pass (the backend's own kernel, a pass over the
 * output after cuDNN wrote it). */
#define PP_CUDA_CONV_EPILOGUE_ENV "PPDIFFUSE_CUDA_CONV_EPILOGUE"
/* How a cuBLASLt product's algorithm is chosen the first time its shape
 * runs: heuristic (the default: the heuristics' first, nothing run, the
 * same in every process) or timed (their first eight timed on the op's
 * operands, the fastest kept: two processes may pick differently). */
#define PP_CUDA_GEMM_ALGO_ENV "PPDIFFUSE_CUDA_GEMM_ALGO"
/* Which of cuDNN's APIs runs a 16-bit channels-last convolution: legacy
 * (the default: cudnnConvolutionForward, or the fused call above) or
 * graph (the convolution and its bias, residual and ReLU as one operation
 * graph of the backend API, whose heuristics rank every engine cuDNN has
 * for it; a graph it has none for takes the legacy API). */
#define PP_CUDA_CONV_API_ENV "PPDIFFUSE_CUDA_CONV_API"
/* The most output pixels (n · ho · wo) a 16-bit channels-last
 * convolution may have to run as a product: its patches laid out as the
 * rows of a matrix (im2col), then one cuBLASLt product with the filter
 * (its bias and residual in the product's epilogue): 0 (the default:
 * none; every convolution is cuDNN's), 64, 256 or 1024.  A UNet's 8×8
 * convolutions of 1280 channels read 29.5 MB of filter for 64 pixels:
 * cuDNN's kernels took 23 µs on an H200 where the filter's read alone
 * takes 6. */
#define PP_CUDA_CONV_GEMM_ENV "PPDIFFUSE_CUDA_CONV_GEMM"
/* How a group norm spreads over the device: ticket (the default:
 * channels last eight channels a thread with 16-byte loads, two
 * launches, one pass of sums a tile, combined by the last tile of a
 * sample to finish; on an H200 an SD-Turbo step 4.62 ms where vector
 * gave 4.93, docs/perf.md), vector (as split, channels last eight
 * channels a thread, three launches), split (each group's values over
 * several blocks, two kernels; channels last, tiles of pixels, a thread a
 * channel, three), whole (one block per group), single (channels last,
 * one launch, a block per group) or fold (as vector in two launches, the
 * tiles' statistics combined by the normalising blocks) or grid (the
 * ticket way's sums and normalisation in one cooperative launch, its
 * tiles waiting for each other). */
#define PP_CUDA_GROUP_NORM_ENV "PPDIFFUSE_CUDA_GROUP_NORM"
/* The fewest values a channels-last group norm's tile takes in the
 * vector, split and fold ways (the ticket way sizes its own), so how many
 * blocks its statistics and normalisation run in: 2048 (the default: a
 * 64×64×320 norm in 512 tiles of 8 pixels; the fold way's tiles four
 * times as large), 512, 1024, 4096, 8192, 16384 or 32768.  Another tile
 * sums in another order (another parity key). */
#define PP_CUDA_GROUP_NORM_TILE_ENV "PPDIFFUSE_CUDA_GROUP_NORM_TILE"
/* How a layer norm spreads over the device: width (the default: octet
 * for rows of 1024 values or more, vector for shorter ones), vector (as
 * warp, eight values a 16-byte load), warp (a warp per row of up to 1536
 * values, the row in its registers), block (a block per row, the first
 * way) or octet (a thread per eight values of a row, several rows a
 * block).  Vector norms took an SD-Turbo step on an H200 from 5.94 to
 * 5.05 ms, width a step's layer norms from 0.348 to 0.283 ms
 * (docs/perf.md). */
#define PP_CUDA_LAYER_NORM_ENV "PPDIFFUSE_CUDA_LAYER_NORM"
/* The dtype models keep their activations in: weights (the default: the
 * weights' 16-bit dtype, the 16-bit graph, each kernel reading and
 * writing 16 bits) or f32 (float32, a 16-bit product narrowing a copy of
 * its operand). */
#define PP_CUDA_ACTIVATIONS_ENV "PPDIFFUSE_CUDA_ACTIVATIONS"
/* How a linear op writes a 16-bit output of its weights' type: act (the
 * default: cuBLASLt writes it as it is, the bias added in float32 in the
 * product's epilogue, one rounding) or f32 (through float32 scratch, the
 * bias by a kernel, then narrowed: the float32 kernel's bits rounded). */
#define PP_CUDA_GEMM_OUT_ENV "PPDIFFUSE_CUDA_GEMM_OUT"
/* How the backend's own kernels are launched: off (the default: plain
 * launches, each kernel starting once the one before it has finished) or
 * on (programmatic dependent launches, compute capability 9.0 and later:
 * each may start while the one before it finishes, and waits for it
 * before touching memory, pp-cuda-common.cuh; the gap between two kernels
 * hidden). */
#define PP_CUDA_PDL_ENV "PPDIFFUSE_CUDA_PDL"
/* How a host thread waits for an event of the backend's (the device's
 * copy of an upload or a download and the work queued before it, a
 * profile's mark): spin (the default, CUDA's
 * own for a process with fewer contexts than cores: the thread polls,
 * the quickest to see the copy done, a core busy for as long as it
 * waits) or sleep (blocking-sync events: the thread sleeps until the
 * device signals, the core free for the application, tens of µs later
 * awake).  The bits are the same either way. */
#define PP_CUDA_WAIT_ENV "PPDIFFUSE_CUDA_WAIT"
/* Where a channels-last convolution's 16-bit filter is laid out: in-place
 * (the default: in the filter's own bytes at its first use, laid back
 * before anything else reads it, no device memory more) or copy (a
 * channels-last copy beside it, made at its first use: the way before,
 * 1 GiB more for SD-Turbo's UNet).  The bits are the same either way. */
#define PP_CUDA_FILTERS_ENV "PPDIFFUSE_CUDA_FILTERS"

/* The "cuda" backend of device @device (0-based), created once per device
 * (thread-safe); NULL with a PP_ERROR_DEVICE error that names the CUDA
 * status when there is no such usable device. */
PpBackend *pp_cuda_backend_get        (gint device, GError ** error);
/* The CUDA devices this process sees; -1 with @error when the runtime
 * cannot say (no driver). */
gint       pp_cuda_backend_n_devices  (GError ** error);
/* The cudaStream_t @be (a cuda backend) enqueues everything on. */
gpointer   pp_cuda_backend_stream     (PpBackend * be);
/* cudaSetDevice to @be's device in the calling thread. */
void       pp_cuda_backend_make_current (PpBackend * be);

G_END_DECLS
