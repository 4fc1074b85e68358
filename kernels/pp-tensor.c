/* ppdiffuse — tensors. */
#include "pp-tensor.h"
#include "pp-backend-impl.h"
#include "pp-error.h"

#include <string.h>

gboolean
pp_tensor_shape_changed (const PpTensor * tensor,
    gint64 last[PP_TENSOR_MAX_DIMS])
{
  gint64 shape[PP_TENSOR_MAX_DIMS] = { 0 };

  memcpy (shape, tensor->shape, tensor->ndim * sizeof shape[0]);
  if (memcmp (shape, last, sizeof shape) == 0)
    return FALSE;
  memcpy (last, shape, sizeof shape);
  return TRUE;
}

gsize
pp_tensor_shape_bytes (PpDType dtype, guint ndim, const gint64 * shape)
{
  guint64 total = pp_dtype_size (dtype);

  if (total == 0 || ndim == 0 || ndim > PP_TENSOR_MAX_DIMS)
    return 0;
  for (guint i = 0; i < ndim; i++) {
    if (shape[i] < 1 || (guint64) shape[i] > G_MAXSIZE / total)
      return 0;
    total *= (guint64) shape[i];
  }
  return (gsize) total;
}

PpTensor *
pp_tensor_new_full (PpBackend * backend, const gchar * name, PpDType dtype,
    guint ndim, const gint64 * shape, GError ** error)
{
  gsize nbytes = pp_tensor_shape_bytes (dtype, ndim, shape);
  PpTensor *t;

  if (nbytes == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "tensor '%s': invalid shape or dtype (ndim %u, dtype %u)", name,
        ndim, dtype);
    return NULL;
  }
  if (strlen (name) > PP_TENSOR_NAME_MAX) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "tensor name '%s' is longer than %d bytes", name, PP_TENSOR_NAME_MAX);
    return NULL;
  }
  t = g_new0 (PpTensor, 1);
  g_strlcpy (t->name, name, sizeof t->name);
  t->dtype = dtype;
  t->ndim = ndim;
  memcpy (t->shape, shape, ndim * sizeof (gint64));
  t->nbytes = nbytes;
  t->backend = backend;
  if (backend != NULL) {
    t->data = backend->memory->alloc (backend, nbytes, error);
    if (t->data == NULL) {
      g_prefix_error (error, "tensor '%s' on %s: ", name, backend->name);
      g_free (t);
      return NULL;
    }
    return t;
  }
  t->data = g_try_malloc0 (nbytes);
  if (t->data == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "tensor '%s': cannot allocate %" G_GSIZE_FORMAT " bytes", name, nbytes);
    g_free (t);
    return NULL;
  }
  return t;
}

PpTensor *
pp_tensor_new (const gchar * name, PpDType dtype, guint ndim,
    const gint64 * shape, GError ** error)
{
  return pp_tensor_new_full (NULL, name, dtype, ndim, shape, error);
}

void
pp_tensor_free (PpTensor * tensor)
{
  if (tensor == NULL)
    return;
  /* Through the table: host-only builds (fuzzers) link no backend. */
  if (tensor->backend != NULL) {
    /* NULL: abandoned to a transfer that did not complete. */
    if (tensor->data != NULL)
      tensor->backend->memory->free (tensor->backend, tensor->data);
  }
  else
    g_free (tensor->data);
  g_free (tensor);
}

gint64
pp_tensor_numel (const PpTensor * tensor)
{
  return (gint64) (tensor->nbytes / pp_dtype_size (tensor->dtype));
}

gchar *
pp_tensor_describe (const PpTensor * tensor)
{
  GString *s = g_string_new (NULL);

  g_string_append_printf (s, "%s %s[", tensor->name,
      pp_dtype_name (tensor->dtype));
  for (guint i = 0; i < tensor->ndim; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? "," : "",
        tensor->shape[i]);
  g_string_append (s, "]");
  return g_string_free (s, FALSE);
}
