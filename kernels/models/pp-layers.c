/* ppdiffuse — layers, activations, taps and config checks shared by the
 * models. */
#include "pp-layers.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-model.h"
#include "pp-ops.h"

#include <json-glib/json-glib.h>
#include <string.h>

#define CONV_DIMS 4
#define LINEAR_DIMS 2
#define VECTOR_DIMS 1

PpBinder
pp_binder_init (PpWeights * weights, PpBackend * be)
{
  PpBinder b = { weights, be, NULL, NULL };

  return b;
}

void
pp_device_weights_free (PpBackend * be, GPtrArray * device)
{
  if (device == NULL)
    return;
  for (guint i = 0; i < device->len; i++)
    pp_backend_free (be, g_ptr_array_index (device, i));
  g_ptr_array_unref (device);
}

/* The dtype the binder stores weights as: the weights' own choice, else
 * the backend's default. */
static PpDType
binder_dtype (const PpBinder * b)
{
  const PpDType dtype = pp_weights_storage_dtype (b->weights);

  return dtype != 0 ? dtype : b->be->default_weight_dtype;
}

/* The host data of weight @key (float32, of @shape), or NULL with the
 * binder's error set (the weights' own, else that it could not be read). */
static const gfloat *
read_weight (PpBinder * b, const gchar * key, PpWeightKind kind, guint ndim,
    const gint64 * shape)
{
  const gfloat *data = pp_weights_get_kind (b->weights, key, kind, ndim,
      shape, &b->error);

  if (data == NULL && b->error == NULL)
    g_set_error (&b->error, PP_ERROR, PP_ERROR_MODEL,
        "weight '%s' could not be read", key);
  return data;
}

/* The weight @prefix@suffix, uploaded to the binder's backend (once: at
 * bind time); none after an error. */
static PpView
bind_one (PpBinder * b, const gchar * prefix, const gchar * suffix,
    PpWeightKind kind, guint ndim, const gint64 * shape)
{
  g_autofree gchar *key = NULL;
  const gfloat *data;
  PpView device;
  gpointer owned = NULL;
  gsize n = 1;
  const PpDType dtype = binder_dtype (b);

  if (b->error != NULL)
    return pp_view_none ();
  key = g_strconcat (prefix, suffix, NULL);
  data = read_weight (b, key, kind, ndim, shape);
  if (data == NULL)
    return pp_view_none ();
  for (guint i = 0; i < ndim; i++)
    n *= (gsize) shape[i];
  device = pp_backend_upload_weights (b->be, data, n, dtype, &owned,
      &b->error);
  if (owned != NULL) {
    if (b->device == NULL)
      b->device = g_ptr_array_new ();
    g_ptr_array_add (b->device, owned);
  }
  if (pp_view_is_none (device))
    g_prefix_error (&b->error, "weight '%s': ", key);
  return device;
}

void
pp_bind_conv (PpBinder * b, PpConv * conv, gint cin, gint cout, gint kernel,
    gint stride, gint pad, gboolean with_bias, const gchar * fmt, ...)
{
  const gint64 wshape[CONV_DIMS] = { cout, cin, kernel, kernel };
  const gint64 bshape[VECTOR_DIMS] = { cout };
  g_autofree gchar *prefix = NULL;
  va_list ap;

  va_start (ap, fmt);
  prefix = g_strdup_vprintf (fmt, ap);
  va_end (ap);

  conv->cin = cin;
  conv->cout = cout;
  conv->kernel = kernel;
  conv->stride = stride;
  conv->pad = pad;
  conv->phases = FALSE;
  conv->weight = bind_one (b, prefix, ".weight", PP_WEIGHT_DEFAULT,
      CONV_DIMS, wshape);
  conv->bias = with_bias ? bind_one (b, prefix, ".bias", PP_WEIGHT_BIAS,
      VECTOR_DIMS, bshape) : pp_view_none ();
}

/* Uploads @host (@n floats, consumed) as a weight the model owns: a
 * derived weight has no PpWeights entry to point into.  None after an
 * error, as bind_one. */
static PpView
bind_derived (PpBinder * b, const gchar * key, gfloat * host, gsize n)
{
  const PpDType dtype = binder_dtype (b);
  gpointer owned = NULL;
  PpView view;

  if (b->error != NULL) {
    g_free (host);
    return pp_view_none ();
  }
  view = pp_backend_upload_weights (b->be, host, n, dtype, &owned, &b->error);
  if (!pp_view_is_none (view) && owned == NULL) {
    /* A float32 view of @host itself: copy it into backend memory. */
    owned = pp_backend_alloc (b->be, n * sizeof (gfloat), &b->error);
    if (owned != NULL) {
      pp_backend_upload (b->be, owned, host, n * sizeof (gfloat));
      view = pp_view_f32 (owned, n);
    } else
      view = pp_view_none ();
  }
  g_free (host);
  if (owned != NULL) {
    if (b->device == NULL)
      b->device = g_ptr_array_new ();
    g_ptr_array_add (b->device, owned);
  }
  if (pp_view_is_none (view))
    g_prefix_error (&b->error, "weight '%s': ", key);
  return view;
}

#define PAD_AFTER_KERNEL 3
#define PAD_AFTER_BOUND 4

void
pp_bind_conv_pad_after (PpBinder * b, PpConv * conv, gint cin, gint cout,
    const gchar * fmt, ...)
{
  const gint k = PAD_AFTER_KERNEL, kb = PAD_AFTER_BOUND;
  const gint64 wshape[CONV_DIMS] = { cout, cin, k, k };
  const gint64 bshape[VECTOR_DIMS] = { cout };
  g_autofree gchar *prefix = NULL, *key = NULL;
  const gfloat *w;
  gfloat *bound;
  va_list ap;

  va_start (ap, fmt);
  prefix = g_strdup_vprintf (fmt, ap);
  va_end (ap);

  conv->cin = cin;
  conv->cout = cout;
  conv->kernel = kb;
  conv->stride = 2;
  conv->pad = 1;
  conv->weight = pp_view_none ();
  conv->bias = bind_one (b, prefix, ".bias", PP_WEIGHT_BIAS, VECTOR_DIMS,
      bshape);
  if (b->error != NULL)
    return;
  key = g_strconcat (prefix, ".weight", NULL);
  w = pp_weights_get_kind (b->weights, key, PP_WEIGHT_DEFAULT, CONV_DIMS,
      wshape, &b->error);
  if (w == NULL)
    return;
  /* [cout, cin, 4, 4]: row 0 and column 0 zero, the 3×3 kernel after. */
  bound = g_new0 (gfloat, (gsize) cout * cin * kb * kb);
  for (gsize oc = 0; oc < (gsize) cout * cin; oc++)
    for (gint y = 0; y < k; y++)
      memcpy (bound + (oc * kb + y + 1) * kb + 1, w + (oc * k + y) * k,
          k * sizeof (gfloat));
  conv->weight = bind_derived (b, key, bound, (gsize) cout * cin * kb * kb);
}

#define UP2_KERNEL 3
#define UP2_PHASE_KERNEL 2
#define UP2_FACTOR 2

/* The 3×3 kernel's rows (or columns) that phase offset @a's tap @t sums:
 * [first, last].  Offset 0 reads input rows i - 1 (kernel row 0) and i
 * (rows 1 and 2: the upsampled rows 2i and 2i + 1); offset 1 reads rows
 * i (rows 0 and 1) and i + 1 (row 2). */
static void
up2_taps (gint a, gint t, gint * first, gint * last)
{
  static const gint taps[2][2][2] = { {{0, 0}, {1, 2}}, {{0, 1}, {2, 2}} };

  *first = taps[a][t][0];
  *last = taps[a][t][1];
}

/* $PPDIFFUSE_UPSAMPLE_CONV: TRUE for the phases. */
static gboolean
up2_phases (PpBinder * b)
{
  const gchar *value = pp_model_upsample_conv ();

  if (g_str_equal (value, "phases"))
    return TRUE;
  if (!g_str_equal (value, "upsample") && b->error == NULL)
    g_set_error (&b->error, PP_ERROR, PP_ERROR_CONFIG, "%s=%s: expected "
        "phases (a 3×3 convolution of a ×2 upsampling as its four 2×2 "
        "output phases, the default) or upsample (the upsampling and the "
        "convolution apart)", PP_UPSAMPLE_CONV_ENV, value);
  return FALSE;
}

void
pp_bind_conv_up2 (PpBinder * b, PpConv * conv, gint cin, gint cout,
    gboolean with_bias, const gchar * fmt, ...)
{
  const gint k = UP2_KERNEL, kp = UP2_PHASE_KERNEL;
  const gint64 wshape[CONV_DIMS] = { cout, cin, k, k };
  const gint64 bshape[VECTOR_DIMS] = { cout };
  g_autofree gchar *prefix = NULL, *wkey = NULL, *bkey = NULL;
  const gfloat *w, *bias = NULL;
  gfloat *phases, *phase_bias;
  const gsize per_phase = (gsize) cout * cin * kp * kp;
  va_list ap;

  va_start (ap, fmt);
  prefix = g_strdup_vprintf (fmt, ap);
  va_end (ap);

  if (!up2_phases (b)) {
    pp_bind_conv (b, conv, cin, cout, k, 1, 1, with_bias, "%s", prefix);
    return;
  }
  conv->cin = cin;
  conv->cout = cout;
  conv->kernel = kp;
  conv->stride = 1;
  conv->pad = 1;
  conv->phases = TRUE;
  conv->weight = conv->bias = pp_view_none ();
  if (b->error != NULL)
    return;
  wkey = g_strconcat (prefix, ".weight", NULL);
  w = read_weight (b, wkey, PP_WEIGHT_DEFAULT, CONV_DIMS, wshape);
  if (w == NULL)
    return;
  if (with_bias) {
    bkey = g_strconcat (prefix, ".bias", NULL);
    bias = read_weight (b, bkey, PP_WEIGHT_BIAS, VECTOR_DIMS, bshape);
    if (bias == NULL)
      return;
  }
  /* [4 (a, b), cout, cin, 2, 2]: phase (a, b)'s tap (r, s) is the sum of
   * the kernel's rows and columns up2_taps names, in row-major order. */
  phases = g_new (gfloat, 4 * per_phase);
  for (gint a = 0; a < UP2_FACTOR; a++)
    for (gint bb = 0; bb < UP2_FACTOR; bb++)
      for (gsize oi = 0; oi < (gsize) cout * cin; oi++)
        for (gint r = 0; r < kp; r++)
          for (gint t = 0; t < kp; t++) {
            const gfloat *w3 = w + oi * k * k;
            gint y0, y1, x0, x1;
            gfloat sum = 0.0f;

            up2_taps (a, r, &y0, &y1);
            up2_taps (bb, t, &x0, &x1);
            for (gint y = y0; y <= y1; y++)
              for (gint x = x0; x <= x1; x++)
                sum += w3[y * k + x];
            phases[(a * UP2_FACTOR + bb) * per_phase + (oi * kp + r) * kp
                + t] = sum;
          }
  conv->weight = bind_derived (b, wkey, phases, 4 * per_phase);
  if (!with_bias)
    return;
  phase_bias = g_new (gfloat, 4 * (gsize) cout);
  for (gint p = 0; p < 4; p++)
    memcpy (phase_bias + (gsize) p * cout, bias, cout * sizeof (gfloat));
  conv->bias = bind_derived (b, bkey, phase_bias, 4 * (gsize) cout);
}

void
pp_bind_linear (PpBinder * b, PpLinear * lin, gint in, gint out,
    gboolean with_bias, const gchar * fmt, ...)
{
  const gint64 wshape[LINEAR_DIMS] = { out, in };
  const gint64 bshape[VECTOR_DIMS] = { out };
  g_autofree gchar *prefix = NULL;
  va_list ap;

  va_start (ap, fmt);
  prefix = g_strdup_vprintf (fmt, ap);
  va_end (ap);

  lin->in = in;
  lin->out = out;
  lin->weight = bind_one (b, prefix, ".weight", PP_WEIGHT_DEFAULT,
      LINEAR_DIMS, wshape);
  lin->bias = with_bias ? bind_one (b, prefix, ".bias", PP_WEIGHT_BIAS,
      VECTOR_DIMS, bshape) : pp_view_none ();
}

void
pp_bind_linear_stacked (PpBinder * b, PpLinear * stacked, PpLinear * parts,
    guint n, gint in, gint out, const gchar * const *prefixes)
{
  g_autofree gint *outs = g_new (gint, n);

  for (guint i = 0; i < n; i++)
    outs[i] = out;
  pp_bind_linear_concat (b, stacked, parts, n, in, outs, prefixes, NULL);
}

/* The sum of the [@n] biases under @prefixes into @host, in their order. */
static gboolean
sum_biases (PpBinder * b, gint n, const gchar * const *prefixes,
    gfloat * host)
{
  const gint64 shape[VECTOR_DIMS] = { n };

  for (guint i = 0; prefixes[i] != NULL; i++) {
    g_autofree gchar *key = g_strconcat (prefixes[i], ".bias", NULL);
    const gfloat *bias = read_weight (b, key, PP_WEIGHT_BIAS, VECTOR_DIMS,
        shape);

    if (bias == NULL)
      return FALSE;
    for (gint c = 0; c < n; c++)
      host[c] += bias[c];
  }
  return TRUE;
}

void
pp_bind_linear_concat (PpBinder * b, PpLinear * stacked, PpLinear * parts,
    guint n, gint in, const gint * outs, const gchar * const *weights,
    const gchar * const *const *biases)
{
  g_autofree gchar *name = NULL;
  gsize rows = 0, row = 0;
  gfloat *host, *bias_host;

  for (guint i = 0; i < n; i++) {
    parts[i].in = in;
    parts[i].out = outs[i];
    parts[i].weight = parts[i].bias = pp_view_none ();
    rows += (gsize) outs[i];
  }
  stacked->in = in;
  stacked->out = (gint) rows;
  stacked->weight = stacked->bias = pp_view_none ();
  if (b->error != NULL)
    return;
  host = g_new (gfloat, rows * in);
  bias_host = biases != NULL ? g_new0 (gfloat, rows) : NULL;
  for (guint i = 0; i < n; i++) {
    const gint64 wshape[LINEAR_DIMS] = { outs[i], in };
    g_autofree gchar *key = g_strconcat (weights[i], ".weight", NULL);
    const gfloat *w = read_weight (b, key, PP_WEIGHT_DEFAULT, LINEAR_DIMS,
        wshape);

    if (w == NULL || (bias_host != NULL && !sum_biases (b, outs[i],
                biases[i], bias_host + row))) {
      g_free (host);
      g_free (bias_host);
      return;
    }
    memcpy (host + row * in, w, (gsize) outs[i] * in * sizeof (gfloat));
    row += (gsize) outs[i];
  }
  name = g_strjoinv (" + ", (gchar **) weights);
  stacked->weight = bind_derived (b, name, host, rows * in);
  if (bias_host != NULL)
    stacked->bias = bind_derived (b, name, bias_host, rows);
  if (pp_view_is_none (stacked->weight)
      || (biases != NULL && pp_view_is_none (stacked->bias)))
    return;
  row = 0;
  for (guint i = 0; i < n; i++) {
    parts[i].weight = pp_view_range (stacked->weight, row * in,
        (gsize) outs[i] * in);
    if (biases != NULL)
      parts[i].bias = pp_view_range (stacked->bias, row, outs[i]);
    row += (gsize) outs[i];
  }
}

PpView
pp_bind_bias_sum (PpBinder * b, gint n, const gchar * const *prefixes)
{
  g_autofree gchar *joined = NULL, *name = NULL;
  gfloat *host;

  if (b->error != NULL)
    return pp_view_none ();
  host = g_new0 (gfloat, n);
  if (!sum_biases (b, n, prefixes, host)) {
    g_free (host);
    return pp_view_none ();
  }
  joined = g_strjoinv (".bias + ", (gchar **) prefixes);
  name = g_strconcat (joined, ".bias", NULL);
  return bind_derived (b, name, host, n);
}

void
pp_bind_norm (PpBinder * b, PpNorm * norm, gint channels,
    const gchar * fmt, ...)
{
  const gint64 shape[VECTOR_DIMS] = { channels };
  g_autofree gchar *prefix = NULL;
  va_list ap;

  va_start (ap, fmt);
  prefix = g_strdup_vprintf (fmt, ap);
  va_end (ap);

  norm->channels = channels;
  norm->gamma = bind_one (b, prefix, ".weight", PP_WEIGHT_NORM_SCALE,
      VECTOR_DIMS, shape);
  norm->beta = bind_one (b, prefix, ".bias", PP_WEIGHT_NORM_SHIFT,
      VECTOR_DIMS, shape);
}

gboolean
pp_binder_finish (PpBinder * b, GError ** error)
{
  if (b->error == NULL)
    return TRUE;
  pp_device_weights_free (b->be, g_steal_pointer (&b->device));
  g_propagate_error (error, b->error);
  b->error = NULL;
  return FALSE;
}

/* Activations */

gsize
pp_act_numel (const PpAct * a)
{
  return (gsize) a->n * a->c * a->h * a->w;
}

PpBackend *
pp_act_backend (const PpAct * a)
{
  return pp_pool_backend (a->pool);
}

gsize
pp_act_bytes (const PpAct * a)
{
  return pp_act_numel (a) * pp_dtype_size (a->dtype);
}

PpAct
pp_act_new_as (PpPool * pool, PpDType dtype, gint n, gint c, gint h, gint w)
{
  PpAct a = { NULL, dtype, n, c, h, w, pool, FALSE };

  /* Uninitialised: every op writes its whole output. */
  a.data = pp_pool_acquire (pool, pp_act_bytes (&a));
  return a;
}

PpAct
pp_act_new (PpPool * pool, gint n, gint c, gint h, gint w)
{
  return pp_act_new_as (pool, pp_pool_act_dtype (pool), n, c, h, w);
}

void
pp_act_convert (PpAct * a, PpDType dtype)
{
  PpAct to;

  if (a->dtype == dtype)
    return;
  to = pp_act_new_as (a->pool, dtype, a->n, a->c, a->h, a->w);
  to.layout = a->layout;
  /* y = 1·x + 0·y: x in y's dtype (pp-ops-list.h). */
  pp_axpby (pp_act_backend (a), pp_act_out (&to), 1.0f, pp_act_in (a), 0.0f,
      pp_act_numel (a));
  pp_act_replace (a, to);
}

void
pp_act_lay (PpAct * a, PpLayout layout)
{
  const gint hw = a->h * a->w;
  PpAct to;

  if (a->layout == layout)
    return;
  to = pp_act_new_as (a->pool, a->dtype, a->n, a->c, a->h, a->w);
  to.layout = layout;
  /* [n, c, hw] and [n, hw, c], read and written as the ops' own layout. */
  if (layout == PP_LAYOUT_NHWC)
    pp_nchw_to_nlc (pp_act_backend (a), pp_view_laid (pp_act_in (a),
            PP_LAYOUT_NCHW), a->n, a->c, hw, pp_out_laid (pp_act_out (&to),
            PP_LAYOUT_NCHW));
  else
    pp_nlc_to_nchw (pp_act_backend (a), pp_view_laid (pp_act_in (a),
            PP_LAYOUT_NCHW), a->n, a->c, hw, pp_out_laid (pp_act_out (&to),
            PP_LAYOUT_NCHW));
  pp_act_replace (a, to);
}

PpAct
pp_act_view (PpPool * pool, gpointer data, PpDType dtype, gint n, gint c,
    gint h, gint w)
{
  PpAct a = { data, dtype, n, c, h, w, pool, TRUE };

  return a;
}

PpAct
pp_act_copy (const PpAct * a)
{
  PpAct copy = *a;

  /* Of @a's dtype, from its pool, whether @a is a view or not. */
  copy.view = FALSE;
  copy.data = pp_pool_acquire (a->pool, pp_act_bytes (a));
  pp_backend_copy (pp_act_backend (a), copy.data, a->data, pp_act_bytes (a));
  return copy;
}

PpView
pp_act_in (const PpAct * a)
{
  return pp_view_laid (pp_view (a->data, a->dtype, pp_act_numel (a)),
      a->layout);
}

PpOut
pp_act_out (const PpAct * a)
{
  return pp_out_laid (pp_out (a->data, a->dtype, pp_act_numel (a)),
      a->layout);
}

void
pp_act_clear (PpAct * a)
{
  if (a->data != NULL && !a->view)
    pp_pool_release (a->pool, a->data, pp_act_bytes (a));
  a->data = NULL;
}

void
pp_act_replace (PpAct * dst, PpAct src)
{
  pp_act_clear (dst);
  *dst = src;
}

PpAct
pp_conv_apply (const PpConv * conv, const PpAct * x)
{
  return pp_conv_apply_laid (conv, x, x->layout);
}

static PpAct
conv_apply (const PpConv * conv, const PpAct * x, PpLayout layout,
    const PpAct * residual, gboolean relu)
{
  gint ho = pp_conv2d_out_size (x->h, conv->kernel, conv->stride, conv->pad);
  gint wo = pp_conv2d_out_size (x->w, conv->kernel, conv->stride, conv->pad);
  PpAct y;

  g_assert (x->c == conv->cin);
  y = pp_act_new (x->pool, x->n, conv->cout, ho, wo);
  y.layout = layout;
  pp_conv2d (pp_act_backend (x), pp_act_in (x), x->n, x->c, x->h, x->w,
      conv->weight, conv->bias, conv->cout, conv->kernel, conv->kernel,
      conv->stride, conv->pad,
      residual != NULL ? pp_act_in (residual) : pp_view_none (), relu,
      pp_act_out (&y));
  return y;
}

PpAct
pp_conv_apply_laid (const PpConv * conv, const PpAct * x, PpLayout layout)
{
  return conv_apply (conv, x, layout, NULL, FALSE);
}

PpAct
pp_act_upsample (const PpAct * x, gint factor)
{
  PpAct y = pp_act_new (x->pool, x->n, x->c, x->h * factor, x->w * factor);

  y.layout = x->layout;
  pp_upsample_nearest (pp_act_backend (x), pp_act_in (x), x->n, x->c, x->h,
      x->w, factor, pp_act_out (&y));
  return y;
}

PpAct
pp_conv_up2_apply (const PpConv * conv, const PpAct * x)
{
  PpBackend *be = pp_act_backend (x);
  PpAct z, y;

  if (!conv->phases) {
    PpAct up = pp_act_upsample (x, UP2_FACTOR);

    y = pp_conv_apply (conv, &up);
    pp_act_clear (&up);
    return y;
  }
  g_assert (x->c == conv->cin);
  z = pp_act_new (x->pool, x->n, 4 * conv->cout, x->h + 1, x->w + 1);
  z.layout = x->layout;
  pp_conv2d (be, pp_act_in (x), x->n, x->c, x->h, x->w, conv->weight,
      conv->bias, 4 * conv->cout, conv->kernel, conv->kernel, 1, conv->pad,
      pp_view_none (), FALSE, pp_act_out (&z));
  y = pp_act_new (x->pool, x->n, conv->cout, x->h * UP2_FACTOR,
      x->w * UP2_FACTOR);
  y.layout = x->layout;
  pp_interleave_phases (be, pp_act_in (&z), x->n, conv->cout, x->h, x->w,
      pp_act_out (&y));
  pp_act_clear (&z);
  return y;
}

PpAct
pp_conv_relu_apply (const PpConv * conv, const PpAct * x)
{
  return conv_apply (conv, x, x->layout, NULL, TRUE);
}

PpAct
pp_conv_residual_apply (const PpConv * conv, const PpAct * x,
    const PpAct * residual, gboolean relu)
{
  g_assert (residual->layout == x->layout);
  return conv_apply (conv, x, x->layout, residual, relu);
}

PpAct
pp_linear_apply (const PpLinear * lin, const PpAct * x)
{
  PpBackend *be = pp_act_backend (x);
  /* Sample by sample where the backend asks for it: a GEMM's summation
   * order may depend on its row count (OpenBLAS picks kernels by size). */
  const gint n = pp_backend_samples_apart (be) ? x->n : 1;
  const gint rows = x->n / n * x->c * x->h;
  const gsize in = (gsize) rows * lin->in, out = (gsize) rows * lin->out;
  PpAct y;

  g_assert (x->w == lin->in);
  y = pp_act_new (x->pool, x->n, x->c, x->h, lin->out);
  for (gint b = 0; b < n; b++)
    pp_linear (be, pp_view_range (pp_act_in (x), b * in, in), rows, lin->in,
        lin->weight, lin->bias, lin->out,
        pp_out_range (pp_act_out (&y), b * out, out));
  return y;
}

/* Taps */

gboolean
pp_act_from_tensor (PpPool * pool, const PpTensor * t, const gchar * what,
    gint channels, guint multiple, PpAct * out, GError ** error)
{
  PpBackend *be = pp_pool_backend (pool);
  /* Described only on error: a frame allocates nothing. */
  g_autofree gchar *desc = NULL;

  if (t->dtype != PP_DTYPE_F32 || t->ndim != CONV_DIMS
      || t->shape[1] != channels) {
    desc = pp_tensor_describe (t);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: expected F32[N,%d,H,W], received %s", what, channels, desc);
    return FALSE;
  }
  if (t->shape[2] % multiple != 0 || t->shape[3] % multiple != 0) {
    desc = pp_tensor_describe (t);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: height and width must be multiples of %u, received %s", what,
        multiple, desc);
    return FALSE;
  }
  if (t->shape[0] > G_MAXINT || t->shape[2] > G_MAXINT
      || t->shape[3] > G_MAXINT) {
    desc = pp_tensor_describe (t);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "%s: %s is too large",
        what, desc);
    return FALSE;
  }
  if (t->backend != NULL && t->backend != be) {
    desc = pp_tensor_describe (t);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "%s on %s: %s is on %s",
        what, be->name, desc, t->backend->name);
    return FALSE;
  }
  /* A byte copy of the float32 tensor, then in the pool's dtype. */
  *out = pp_act_new_as (pool, PP_DTYPE_F32, (gint) t->shape[0], channels,
      (gint) t->shape[2], (gint) t->shape[3]);
  if (t->backend != NULL)
    pp_backend_copy (be, out->data, t->data, pp_act_bytes (out));
  else
    pp_backend_upload (be, out->data, t->data, pp_act_bytes (out));
  pp_act_convert (out, pp_pool_act_dtype (pool));
  return TRUE;
}

gboolean
pp_act_to_tensor (PpAct * a, const gchar * what, const gchar * name,
    gboolean device, PpTensor ** out, GError ** error)
{
  PpBackend *be = pp_act_backend (a);
  const gint64 shape[CONV_DIMS] = { a->n, a->c, a->h, a->w };
  gsize bytes;
  PpTensor *t = *out;

  /* Tensors are float32 NCHW. */
  pp_act_lay (a, PP_LAYOUT_NCHW);
  pp_act_convert (a, PP_DTYPE_F32);
  bytes = pp_act_bytes (a);
  if (t == NULL)
    t = device ? pp_tensor_new_on (be, name, PP_DTYPE_F32, CONV_DIMS, shape,
        error)
        : pp_tensor_new (name, PP_DTYPE_F32, CONV_DIMS, shape, error);
  else if (t->backend != be || t->nbytes != bytes) {
    g_autofree gchar *got = pp_tensor_describe (t);

    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "%s: expected F32[%d,%d,%d,%d] on %s, received %s", what, a->n, a->c,
        a->h, a->w, be->name, got);
    t = NULL;
  }
  if (t != NULL && t->backend != NULL)
    pp_backend_copy (be, t->data, a->data, bytes);
  else if (t != NULL)
    pp_backend_download (be, t->data, a->data, bytes);
  pp_act_clear (a);
  *out = t;
  return t != NULL;
}

void
pp_tap_act (PpTapFunc tap, gpointer tap_data, const PpAct * a, guint ndim,
    const gchar * fmt, ...)
{
  g_autofree gchar *name = NULL;
  PpTensor view = { 0 };
  const gint64 dims[PP_TENSOR_MAX_DIMS] = { a->n, a->c, a->h, a->w };
  va_list ap;

  if (tap == NULL)
    return;
  g_assert (ndim >= 2 && ndim <= PP_TENSOR_MAX_DIMS);

  va_start (ap, fmt);
  name = g_strdup_vprintf (fmt, ap);
  va_end (ap);

  g_strlcpy (view.name, name, sizeof view.name);
  view.dtype = PP_DTYPE_F32;
  view.ndim = ndim;
  /* Fewer dimensions fold the trailing ones: [N, C·H·W] for ndim 2. */
  view.shape[0] = dims[0];
  for (guint i = 1; i < ndim; i++)
    view.shape[i] = dims[i];
  for (guint i = ndim; i < PP_TENSOR_MAX_DIMS; i++)
    view.shape[ndim - 1] *= dims[i];
  /* Taps are handed float32 NCHW tensors: a 16-bit activation widened, a
   * channels-last one transposed first. */
  view.nbytes = pp_act_numel (a) * sizeof (gfloat);
  view.data = g_malloc (view.nbytes);
  if (a->layout != PP_LAYOUT_NCHW) {
    PpAct nchw = pp_act_copy (a);

    pp_act_lay (&nchw, PP_LAYOUT_NCHW);
    pp_backend_download_floats (pp_act_backend (a), view.data,
        pp_act_in (&nchw));
    pp_act_clear (&nchw);
  } else
    pp_backend_download_floats (pp_act_backend (a), view.data,
        pp_act_in (a));
  tap (name, &view, tap_data);
  g_free (view.data);
}

/* Config checks */

static const struct
{
  const gchar *name;
  PpActFn fn;
} act_fn_names[] = {
  { "relu", PP_ACT_RELU },
  { "silu", PP_ACT_SILU },
  { "swish", PP_ACT_SILU },     /* diffusers' other name for SiLU */
};

gboolean
pp_config_act_fn (const gchar * path, const gchar * value,
    const gchar * key, guint allowed, PpActFn * out, GError ** error)
{
  g_autoptr (GString) names = g_string_new (NULL);

  for (guint i = 0; i < G_N_ELEMENTS (act_fn_names); i++) {
    if ((allowed & (1u << act_fn_names[i].fn)) == 0)
      continue;
    if (g_strcmp0 (value, act_fn_names[i].name) == 0) {
      *out = act_fn_names[i].fn;
      return TRUE;
    }
    g_string_append_printf (names, "%s\"%s\"", names->len ? ", " : "",
        act_fn_names[i].name);
  }
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "%s: key '%s' is \"%s\"; supported: %s", path, key,
      value ? value : "(null)", names->str);
  return FALSE;
}

void
pp_act_fn_apply (PpActFn fn, PpAct * x)
{
  switch (fn) {
    case PP_ACT_RELU:
      pp_relu (pp_act_backend (x), pp_act_out (x), pp_act_numel (x));
      break;
    case PP_ACT_SILU:
      pp_silu (pp_act_backend (x), pp_act_out (x), pp_act_numel (x));
      break;
  }
}

/* null, false, or a list of nothing but those */
static gboolean
json_is_unset (JsonNode * node)
{
  if (JSON_NODE_HOLDS_NULL (node))
    return TRUE;
  if (JSON_NODE_HOLDS_VALUE (node)
      && json_node_get_value_type (node) == G_TYPE_BOOLEAN)
    return !json_node_get_boolean (node);
  if (JSON_NODE_HOLDS_ARRAY (node)) {
    JsonArray *array = json_node_get_array (node);

    for (guint i = 0; i < json_array_get_length (array); i++)
      if (!json_is_unset (json_array_get_element (array, i)))
        return FALSE;
    return TRUE;
  }
  return FALSE;
}

gboolean
pp_config_refuse_keys (PpConfig * cfg, const gchar * const * keys,
    GError ** error)
{
  JsonObject *obj = pp_config_root (cfg);

  for (guint i = 0; keys[i] != NULL; i++) {
    JsonNode *node = json_object_get_member (obj, keys[i]);
    g_autofree gchar *text = NULL;

    if (node == NULL || json_is_unset (node))
      continue;
    text = json_to_string (node, FALSE);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' is %s, a feature this implementation does not "
        "support (expected null or false)", pp_config_path (cfg), keys[i],
        text);
    return FALSE;
  }
  return TRUE;
}

gchar *
pp_component_class (const gchar * component_dir)
{
  g_autofree gchar *path = g_build_filename (component_dir,
      PP_COMPONENT_CONFIG, NULL);
  gchar *klass = NULL;
  PpConfig *cfg;

  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR))
    return NULL;
  cfg = pp_config_load (path, NULL);
  if (cfg == NULL)
    return NULL;
  if (!pp_config_get_string (cfg, "_class_name", NULL, &klass, NULL))
    klass = NULL;
  pp_config_free (cfg);
  return klass;
}

gpointer
pp_component_load (const gchar * component_dir, PpBackend * be,
    PpDType dtype, PpComponentNewFunc make, GDestroyNotify free_component,
    PpLora * lora, PpLoraTarget target, PpWeights ** weights,
    GError ** error)
{
  g_autofree gchar *config_path = g_build_filename (component_dir,
      PP_COMPONENT_CONFIG, NULL);
  g_autofree gchar *weights_path = pp_model_dir_weights_path (component_dir,
      error);
  PpWeights *w;

  if (weights_path == NULL)
    return NULL;
  w = pp_weights_open (weights_path, error);
  if (w == NULL)
    return NULL;
  return pp_component_build (config_path, w, be, dtype, make,
      free_component, lora, target, weights, error);
}

gpointer
pp_component_build (const gchar * config_path, PpWeights * w,
    PpBackend * be, PpDType dtype, PpComponentNewFunc make,
    GDestroyNotify free_component, PpLora * lora, PpLoraTarget target,
    PpWeights ** weights, GError ** error)
{
  gpointer component;

  pp_weights_set_storage_dtype (w, dtype);
  if (lora != NULL && !pp_lora_fuse (lora, target, w, error)) {
    pp_weights_free (w);
    return NULL;
  }
  component = make (config_path, w, be, error);
  if (component == NULL || !pp_weights_check_all_used (w, error)) {
    g_clear_pointer (&component, free_component);
    pp_weights_free (w);
    return NULL;
  }
  *weights = w;
  return component;
}
