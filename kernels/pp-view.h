/* ppdiffuse — typed read-only views: how an op is handed a weight (or an
 * activation in a weight's place, such as the x of add).
 *
 * A view carries its dtype and element count with the pointer, as ggml's
 * tensors carry their type: a backend reads the data as what it is stored
 * as, never looking the dtype up by address, and the op wrappers
 * (pp-ops.c) refuse a view the backend has no kernel for, or one shorter
 * than what the op reads, before anything reads it.  Outputs and the other
 * inputs of ops (activations) stay float32 pointers. */
#pragma once

#include <glib.h>

#include "pp-dtype.h"

G_BEGIN_DECLS

typedef struct
{
  gconstpointer data;           /* device memory of the op's backend; NULL:
                                 * absent (an optional bias not given) */
  PpDType dtype;
  gsize numel;                  /* elements of @dtype at @data */
} PpView;

/* The bit of @dtype in a set of dtypes (PpBackend.view_dtypes). */
#define PP_DTYPE_BIT(dtype) (1u << (dtype))

static inline PpView
pp_view (gconstpointer data, PpDType dtype, gsize numel)
{
  PpView v = { data, dtype, numel };

  return v;
}

/* @numel float32 values at @data; absent when @data is NULL. */
static inline PpView
pp_view_f32 (const float *data, gsize numel)
{
  return pp_view (data, PP_DTYPE_F32, numel);
}

/* No view: an optional parameter not given. */
static inline PpView
pp_view_none (void)
{
  return pp_view (NULL, PP_DTYPE_F32, 0);
}

static inline gboolean
pp_view_is_none (PpView v)
{
  return v.data == NULL;
}

G_END_DECLS
