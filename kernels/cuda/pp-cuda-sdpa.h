/* ppdiffuse — attention fused by cuDNN (flash attention: the scores never
 * reach memory), through cuDNN 9's backend graph API from plain C.
 *
 *   out = softmax (q·kᵀ·scale) · v,  scale = 1/√head_dim
 *
 * q and out are [n, lq, heads·head_dim], k and v [n, lk, heads·head_dim],
 * row-major, head h being the columns [h·head_dim, (h+1)·head_dim): out's
 * rows heads·head_dim apart, q's @ld_q and k's and v's @ld_kv (as wide,
 * or wider where they are column ranges of one product: a stacked q, k, v
 * read in place; multiples of 8).  cuDNN reads them through strides,
 * nothing is transposed or copied.  All four are 16-bit (F16 or BF16, one
 * type for all) and start on 16 bytes; the softmax and both products
 * accumulate in float32.
 *
 * Causal attention is supported, aligned top-left: query i sees keys
 * 0..i (a text encoder's mask, lq = lk).
 *
 * Each shape gets an execution plan once (cuDNN's heuristics, mode A, the
 * first engine configuration that finalizes), kept in a table made by
 * pp_cuda_sdpa_plans_new.  A shape cuDNN has no engine for is kept too,
 * with the reason, so it is tried once and refused at once afterwards;
 * the caller then computes attention another way.  Both are logged at
 * info level ("cuda attention: …"), once per shape, as is a plan slow to
 * make (cuDNN may compile its kernels then).  What the fused engine
 * takes depends on the cuDNN version and the GPU and is left to cuDNN to
 * say, except what is refused without asking:
 *   - head_dim not a multiple of 8;
 *   - head_dim over 256, the largest cuDNN documents its fused attention
 *     for (cuDNN 9.19's heuristics for an H100, described to them without
 *     a GPU, made plans even for a VAE's single head of 512);
 *   - cuDNN 9.10.0 and 9.10.1 (known wrong results in this graph).
 * Otherwise cuDNN decides.
 *
 * A plan can take cuDNN a kernel compilation (NVRTC; about half a second
 * a configuration on a small host), so shapes are best met first outside
 * the stream: in a warm-up pass.
 *
 * Neither the table nor the functions are thread-safe: one table per
 * handle, used from one thread at a time; free the table before
 * destroying the handle. */
#pragma once

#include <glib.h>

#include <cuda_runtime.h>
#include <cudnn.h>

#include "pp-cuda-kernels.h"

G_BEGIN_DECLS

/* The plans of one cuDNN handle, keyed by shape (n, lq, lk, heads,
 * head_dim, type, causal, row strides); g_hash_table_unref frees them. */
GHashTable *pp_cuda_sdpa_plans_new (void);

/* Builds the plan for this shape on @handle if @plans has none yet and
 * sets *@workspace_bytes to the device workspace it needs.  FALSE with
 * @error (PP_ERROR_DEVICE; PP_ERROR_SHAPE for an argument out of range)
 * naming the shape and cuDNN's own status and message when cuDNN has no
 * engine for it. */
gboolean pp_cuda_sdpa_prepare    (cudnnHandle_t handle, GHashTable * plans,
                                  PpCudaType t, int n, int lq, int lk,
                                  int heads, int head_dim, gboolean causal,
                                  int ld_q, int ld_kv,
                                  gsize * workspace_bytes, GError ** error);

/* Enqueues out = attention (q, k, v) on the stream set on @handle
 * (cudnnSetStream), with the plan pp_cuda_sdpa_prepare built for this
 * shape and @workspace_bytes (at least what it said) of device memory at
 * @workspace (NULL when it said 0).  FALSE with @error when the shape was
 * not prepared or is unsupported, a pointer is not on 16 bytes or the
 * workspace is short (nothing enqueued), or cudnnBackendExecute fails. */
gboolean pp_cuda_sdpa_run        (cudnnHandle_t handle, GHashTable * plans,
                                  PpCudaType t, const void *q, const void *k,
                                  const void *v, void *out, int n, int lq,
                                  int lk, int heads, int head_dim,
                                  gboolean causal, int ld_q, int ld_kv,
                                  gpointer workspace,
                                  gsize workspace_bytes, GError ** error);

/* Whether @plans has tried this shape (a plan, or why there is none). */
gboolean pp_cuda_sdpa_known      (GHashTable * plans, PpCudaType t, int n,
                                  int lq, int lk, int heads, int head_dim,
                                  gboolean causal, int ld_q, int ld_kv);

/* Marks this shape unsupported, with @why: one cuDNN made but could not
 * run.  Its plan is kept (work enqueued with it, and graphs captured with
 * it, may still run its kernels), never run again; the caller computes
 * the shape another way from then on. */
void     pp_cuda_sdpa_refuse     (GHashTable * plans, PpCudaType t, int n,
                                  int lq, int lk, int heads, int head_dim,
                                  gboolean causal, int ld_q, int ld_kv,
                                  const gchar * why);

G_END_DECLS
