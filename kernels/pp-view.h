/* ppdiffuse — typed views: how an op is handed every tensor it reads
 * (PpView) or writes (PpOut), weights and activations alike.
 *
 * A view carries its dtype and element count with the pointer, as ggml's
 * tensors carry their type: a backend reads the data as what it is stored
 * as, never looking the dtype up by address, and the op wrappers
 * (pp-ops.c) refuse a view the backend has no kernel for, or one shorter
 * than what the op reads or writes, before anything touches it. */
#pragma once

#include <glib.h>

#include "pp-dtype.h"

G_BEGIN_DECLS

/* How a spatial tensor [n, c, h, w] lies in memory: channels first (the
 * ops' own layout, as their comments state), or channels last ([n, h, w,
 * c]: each pixel's channels together, as 16-bit tensor-core convolutions
 * read them and as a transformer's tokens are).  Only the ops that see
 * space read it, each view as its own layout says (pp-ops-list.h names
 * them: conv2d, group_norm, upsample_nearest, interleave_phases,
 * resize_bilinear, concat_channels, add_channel, the spatial side of
 * nchw_to_nlc and nlc_to_nchw); every other op reads elements in order,
 * whatever it says. */
typedef enum
{
  PP_LAYOUT_NCHW = 0,
  PP_LAYOUT_NHWC = 1,
} PpLayout;

typedef struct
{
  gconstpointer data;           /* device memory of the op's backend; NULL:
                                 * absent (an optional bias not given) */
  PpDType dtype;
  gsize numel;                  /* elements of @dtype at @data */
  PpLayout layout;              /* of a spatial tensor */
} PpView;

/* The bit of @dtype in a set of dtypes (PpBackend.view_dtypes). */
#define PP_DTYPE_BIT(dtype) (1u << (dtype))

static inline PpView
pp_view (gconstpointer data, PpDType dtype, gsize numel)
{
  PpView v = { data, dtype, numel, PP_LAYOUT_NCHW };

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

/* A writable view: an op's output, or a tensor it updates in place (the x
 * of silu, the y of add). */
typedef struct
{
  gpointer data;                /* device memory of the op's backend */
  PpDType dtype;
  gsize numel;                  /* elements of @dtype at @data */
  PpLayout layout;              /* of a spatial tensor */
} PpOut;

static inline PpOut
pp_out (gpointer data, PpDType dtype, gsize numel)
{
  PpOut o = { data, dtype, numel, PP_LAYOUT_NCHW };

  return o;
}

/* @numel float32 values at @data. */
static inline PpOut
pp_out_f32 (float *data, gsize numel)
{
  return pp_out (data, PP_DTYPE_F32, numel);
}

/* The same memory, to read. */
static inline PpView
pp_out_as_view (PpOut o)
{
  PpView v = { o.data, o.dtype, o.numel, o.layout };

  return v;
}

/* @v, @o as laid out in @layout. */
static inline PpView
pp_view_laid (PpView v, PpLayout layout)
{
  v.layout = layout;
  return v;
}

static inline PpOut
pp_out_laid (PpOut o, PpLayout layout)
{
  o.layout = layout;
  return o;
}

/* Elements [@offset, @offset + @numel) of @v: the byte offset follows the
 * dtype, so model code never does pointer arithmetic on typed memory. */
static inline PpView
pp_view_range (PpView v, gsize offset, gsize numel)
{
  g_assert (offset + numel <= v.numel);
  return pp_view_laid (pp_view ((const guint8 *) v.data
          + offset * pp_dtype_size (v.dtype), v.dtype, numel), v.layout);
}

static inline PpOut
pp_out_range (PpOut o, gsize offset, gsize numel)
{
  g_assert (offset + numel <= o.numel);
  return pp_out_laid (pp_out ((guint8 *) o.data
          + offset * pp_dtype_size (o.dtype), o.dtype, numel), o.layout);
}

/* A 16-bit or channels-last activation copied into scratch for one op's
 * kernel: a backend's note of what to round (and lay out) back when the
 * kernel returns.  The CPU backends' copy is float32 channels first
 * (kernels/cpu/pp-cpu-backend.c); CUDA's is float32 for a widened one, and
 * of the activation's own dtype for one laid out channels first
 * (kernels/cuda/pp-cuda-private.c: @wide then holds 16-bit data). */
typedef struct
{
  gpointer data;                /* the activation */
  PpDType dtype;
  gsize numel;
  float *wide;                  /* its scratch copy */
  gboolean written;             /* round back into @data */
  /* PP_LAYOUT_NHWC: @data is [n, hw, c] and @wide [n, c, hw]. */
  PpLayout layout;
  int n, c, hw;
} PpWidened;

G_END_DECLS
