/* ppdiffuse — the CUDA backend's weights table: which device address
 * ranges hold weights stored in 16 bits.
 *
 * Ops get bare pointers; a parameter pointer (a weight, a bias, a slice of
 * either) is looked up here to learn how to read it.  Every block that
 * upload_weights made is one interval [start, start + bytes) with its
 * dtype; an address inside no interval is float32 (activations, and
 * weights a model keeps in buffers of its own).  Intervals are in bytes
 * of the stored type: a pointer into a 16-bit block must be offset in
 * 16-bit elements (a float * offset by k points at element 2k).  Plain C,
 * no CUDA: the host tests check it.  Not thread-safe: the backend's lock
 * guards it. */
#pragma once

#include <glib.h>

#include "pp-tensor.h"

G_BEGIN_DECLS

typedef struct _PpCudaWeights PpCudaWeights;

PpCudaWeights *pp_cuda_weights_new    (void);
void           pp_cuda_weights_free   (PpCudaWeights * w);
/* Records [start, start + bytes) as weights of @dtype.  Blocks never
 * overlap (they are distinct allocations); bytes > 0. */
void           pp_cuda_weights_add    (PpCudaWeights * w, gconstpointer start,
                                       gsize bytes, PpDType dtype);
/* Forgets the block starting at @start; FALSE when there is none. */
gboolean       pp_cuda_weights_remove (PpCudaWeights * w, gconstpointer start);
/* The dtype of the block holding @p, PP_DTYPE_F32 when none does. */
PpDType        pp_cuda_weights_lookup (const PpCudaWeights * w,
                                       gconstpointer p);
guint          pp_cuda_weights_count  (const PpCudaWeights * w);

G_END_DECLS
