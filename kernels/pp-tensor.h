/* ppdiffuse — tensors: a named, typed, shaped block of memory, on the host
 * (I/O, frames, npy, chunks) or on a backend's device.  Host and device
 * tensors meet only through pp_tensor_upload and pp_tensor_download
 * (pp-backend.h). */
#pragma once

#include <glib.h>

#include "pp-dtype.h"

G_BEGIN_DECLS

#define PP_TENSOR_MAX_DIMS 4
#define PP_TENSOR_NAME_MAX 31

typedef struct
{
  gchar name[PP_TENSOR_NAME_MAX + 1];
  PpDType dtype;
  guint ndim;
  gint64 shape[PP_TENSOR_MAX_DIMS];
  gsize nbytes;
  gpointer data;                /* owned, nbytes long: g_malloc'd host
                                 * memory, or the backend's device memory */
  struct _PpBackend *backend;   /* NULL: host memory */
} PpTensor;

/* Allocates zeroed storage for the given shape. NULL (with error) when the
 * shape is invalid or too large to address. */
PpTensor    *pp_tensor_new     (const gchar * name, PpDType dtype, guint ndim,
                                const gint64 * shape, GError ** error);
/* On the host (@backend NULL, zeroed) or the device, uncounted: use
 * pp_tensor_new or pp_tensor_new_on (pp-backend.h). */
PpTensor    *pp_tensor_new_full (struct _PpBackend * backend,
                                 const gchar * name, PpDType dtype,
                                 guint ndim, const gint64 * shape,
                                 GError ** error);
void         pp_tensor_free    (PpTensor * tensor);
gint64       pp_tensor_numel   (const PpTensor * tensor);
/* Byte count a shape implies, or 0 when it is invalid (dimension < 1,
 * overflow). */
gsize        pp_tensor_shape_bytes (PpDType dtype, guint ndim, const gint64 * shape);
gchar       *pp_tensor_describe (const PpTensor * tensor);
/* Whether @tensor's shape differs from @last, a shape zero past its
 * dimensions (zeros: none yet), which then becomes it: what a cache or a
 * measure kept per sample shape asks of each sample. */
gboolean     pp_tensor_shape_changed (const PpTensor * tensor,
                                      gint64 last[PP_TENSOR_MAX_DIMS]);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpTensor, pp_tensor_free)

G_END_DECLS
