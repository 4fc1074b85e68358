/* ppdiffuse-tool test-ops — every op of the op list on one backend against
 * float64 references, as ggml's test-backend-ops checks its backends.
 *
 * Data flows as a model's does: inputs are made on the host (seeded, so
 * every run sees the same values), put on the device with
 * pp_backend_upload into pp_backend_alloc buffers, the op runs through its
 * pp_NAME wrapper, and the outputs come back with pp_backend_download to be
 * compared on the host.  The host never touches device memory: on
 * cpu-strict a stray access faults.  Output buffers are filled with NaN on
 * the device first, so a value an op fails to write (or, for axpby with
 * b = 0, reads) comes back non-finite.
 *
 * Coverage is checked, not promised: the case table is indexed by PpOp,
 * which pp-ops.h generates from PP_OPS_LIST, so an op added to the list
 * without cases here fails the run ("op X has no reference"); and the op
 * profile proves that each op's cases called it through its wrapper.
 *
 * The references are written here from the definitions in pp-ops-list.h
 * and the diffusers/PyTorch semantics they follow, with direct loops in
 * double.  Each case states how its float32 rounding error grows (its
 * "growth", see the bounds below).
 *
 * Every op that takes a weight (a PP_OPS_VIEW parameter of the list) also
 * runs cases with its views in F16 and in BF16, narrowed on the host and
 * uploaded as 16-bit values, so that every backend's dispatch on the
 * view's dtype runs; their reference is the same op on the weights rounded
 * to that dtype and widened, in double.  Activations are float32 views.
 *
 * --inject-error OP, for testing this checker (hidden from --help), adds a
 * wrong value to each of OP's downloaded outputs: the run must then fail. */
#include "pp-test-ops.h"

#include "pp-backend.h"
#include "pp-dtype-math.h"
#include "pp-error.h"
#include "pp-ops.h"
#include "pp-ops-math.h"
#include "pp-ops-reference.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* F32 bounds.  eps = FLT_EPSILON = 2^-23 ≈ 1.19e-7; one float operation
 * rounds with a relative error of at most eps/2.
 *
 * Element-wise and layout ops (growth 1): each output is a few roundings of
 * its inputs, and pp-ops-math.h's exp and erf are within about one eps, so
 * the relative error is a few eps and the NMSE ~ (few eps)² ≈ 1e-13
 * (copies: 0).  The bound lets the RMS relative error reach F32_RMS_EPS
 * eps: NMSE ≤ (64 eps)² ≈ 5.8e-11, the 1e-10 of test-backend-ops, where a
 * wrong index or formula gives an NMSE of order 1.
 *
 * Reductions of K terms (growth K: the dot products of conv2d, linear,
 * matmul and attention, the mean and variance of the norms): a float sum of
 * K terms of random sign drifts like a random walk of K roundings of
 * partial sums of size ~σ√j, an error² ~ (eps/2)²·σ²·K²/2 against a
 * result² ~ σ²·K, so the NMSE grows like K·eps² (blocked and pairwise sums
 * more slowly).  Bound: NMSE ≤ K·(64 eps)², e.g. 3.3e-8 for a 3×3
 * convolution of 64 channels (K = 576), 3.7e-8 for a linear of 640 inputs.
 *
 * The largest single error: at most F32_MAX_EPS eps · √growth · max |ref|,
 * four times the RMS allowance, so that one wrong value in a large output
 * (which the NMSE averages away) fails too.
 *
 * Each case states its growth where it is built: 1 for element-wise and
 * layout ops, K for reductions, and for attention and the timestep
 * embedding, whose errors also grow with their scores and arguments, the
 * factor derived there. */
#define F32_RMS_EPS 64.0
#define F32_MAX_EPS 256.0

/* Cases with 16-bit views (weights of dtype epsilon e: 2^-10 for F16, 2^-7
 * for BF16) add a floor to the float32 bounds.  Their reference has the
 * very values the op reads, but a backend may compute with such a weight
 * in its dtype: a GPU narrows the float32 operand to it for tensor cores
 * and may produce the output in it, one rounding of at most e/2 relative
 * each, so an NMSE of about 2·(e/2)² whatever the growth (the floor:
 * (HALF_RMS_EPS e)², 8 times that) and a largest error of a few e/2 of
 * max |ref| (the floor: HALF_MAX_EPS e · max |ref|).  Reading 16-bit
 * values as floats, or a bias as absent, is off by far more. */
#define HALF_RMS_EPS 2.0
#define HALF_MAX_EPS 4.0
#define F16_EPSILON (1.0 / 1024.0)
#define BF16_EPSILON (1.0 / 128.0)

typedef struct
{
  const gchar *dtype;
  double nmse;                  /* NMSE per unit of growth */
  double max_rel;               /* max abs error per √growth · max |ref| */
  double nmse_floor;            /* NMSE allowed whatever the growth */
  double max_floor;             /* max abs error per max |ref|, the same */
} Bounds;

static const Bounds f32_bounds = {
  "F32",
  (F32_RMS_EPS * FLT_EPSILON) * (F32_RMS_EPS * FLT_EPSILON),
  F32_MAX_EPS * FLT_EPSILON, 0.0, 0.0,
};

static const Bounds f16_bounds = {
  "F16 views",
  (F32_RMS_EPS * FLT_EPSILON) * (F32_RMS_EPS * FLT_EPSILON),
  F32_MAX_EPS * FLT_EPSILON,
  (HALF_RMS_EPS * F16_EPSILON) * (HALF_RMS_EPS * F16_EPSILON),
  HALF_MAX_EPS * F16_EPSILON,
};

static const Bounds bf16_bounds = {
  "BF16 views",
  (F32_RMS_EPS * FLT_EPSILON) * (F32_RMS_EPS * FLT_EPSILON),
  F32_MAX_EPS * FLT_EPSILON,
  (HALF_RMS_EPS * BF16_EPSILON) * (HALF_RMS_EPS * BF16_EPSILON),
  HALF_MAX_EPS * BF16_EPSILON,
};

/* The 16-bit dtypes the weight-taking ops' extra cases use. */
static const PpDType half_dtypes[] = { PP_DTYPE_F16, PP_DTYPE_BF16 };

/* Seed of the inputs; each op's cases draw from SEED + its PpOp. */
#define SEED 20240611
/* --inject-error adds the output's largest magnitude (1 when it is all
 * zero) to the middle value: an error of the size of the output. */
#define INJECT_MIN_MAGNITUDE 1.0

typedef struct
{
  guint cases, failed;
} OpTally;

typedef struct
{
  PpBackend *be;
  GRand *rng;
  gboolean verbose;
  int inject;                   /* PpOp whose outputs are perturbed, or -1 */
  GPtrArray *device;            /* the current case's device buffers */
  PpDType views;                /* the dtype of the current case's 16-bit
                                 * views (its bounds), or F32 */
  gchar *problem;               /* a failure of the case besides its values */
  OpTally tally[PP_OP_COUNT];
  guint cases, passed, failed;
} Run;

typedef void (*CasesFunc) (Run * r);

static const gchar *
op_name (PpOp op)
{
  PpOpProfile p;

  pp_ops_get_profile (op, &p);
  return p.name;
}

static guint64
op_calls (PpOp op)
{
  PpOpProfile p;

  pp_ops_get_profile (op, &p);
  return p.calls;
}

/* ---- host and device buffers ------------------------------------------ */

static float *
random_host (Run * r, size_t n, double amplitude)
{
  float *p = g_new (float, MAX (n, 1));

  for (size_t i = 0; i < n; i++)
    p[i] = (float) g_rand_double_range (r->rng, -amplitude, amplitude);
  return p;
}

/* A device buffer of the current case; aborts when the device is out of
 * memory, as g_malloc does (the cases need a few MB). */
static gpointer
device_bytes (Run * r, size_t bytes)
{
  GError *error = NULL;
  gpointer mem = pp_backend_alloc (r->be, bytes, &error);

  if (mem == NULL)
    g_error ("test-ops: %s", error->message);
  g_ptr_array_add (r->device, mem);
  return mem;
}

static float *
device_new (Run * r, size_t n)
{
  return device_bytes (r, n * sizeof (float));
}

static float *
upload (Run * r, const float *host, size_t n)
{
  float *dev = device_new (r, n);

  pp_backend_upload (r->be, dev, host, n * sizeof (float));
  return dev;
}

/* @host (@n values) on the device as an op's input activation. */
static PpView
upload_in (Run * r, const float *host, size_t n)
{
  return pp_view_f32 (upload (r, host, n), n);
}

/* The same as an activation the op updates in place. */
static PpOut
upload_out (Run * r, const float *host, size_t n)
{
  return pp_out_f32 (upload (r, host, n), n);
}

/* @host (@n values) on the device as a view of @dtype: F32 as it is; a
 * 16-bit dtype narrowed on the host and uploaded in 16 bits, with @host
 * rounded to it in place, so that the reference computes with the values
 * the op reads (and the case gets that dtype's bounds).  NULL @host: no
 * view. */
static PpView
upload_view (Run * r, float *host, size_t n, PpDType dtype)
{
  g_autofree guint16 *narrow = NULL;
  gpointer dev;

  if (host == NULL)
    return pp_view_none ();
  if (dtype == PP_DTYPE_F32)
    return pp_view_f32 (upload (r, host, n), n);
  narrow = g_new (guint16, MAX (n, 1));
  for (size_t i = 0; i < n; i++) {
    narrow[i] = dtype == PP_DTYPE_F16 ? pp_f32_to_f16 (host[i])
        : pp_f32_to_bf16 (host[i]);
    host[i] = dtype == PP_DTYPE_F16 ? pp_f16_to_f32 (narrow[i])
        : pp_bf16_to_f32 (narrow[i]);
  }
  dev = device_bytes (r, MAX (n, 1) * sizeof (guint16));
  pp_backend_upload (r->be, dev, narrow, n * sizeof (guint16));
  r->views = dtype;
  return pp_view (dev, dtype, n);
}

/* ", F16 views" for a case of 16-bit views, "" otherwise. */
static const gchar *
views_label (PpDType dtype)
{
  return dtype == PP_DTYPE_F16 ? ", F16 views" : dtype == PP_DTYPE_BF16
      ? ", BF16 views" : "";
}

/* An output activation: NaN until the op writes it. */
static PpOut
device_nan (Run * r, size_t n)
{
  float *dev = device_new (r, n);

  pp_backend_fill (r->be, dev, NAN, n);
  return pp_out_f32 (dev, n);
}

static float *
download (Run * r, const float *dev, size_t n)
{
  float *host = g_new (float, MAX (n, 1));

  pp_backend_synchronize (r->be);
  pp_backend_download (r->be, host, dev, n * sizeof (float));
  return host;
}

static void
release_case (Run * r)
{
  for (guint i = 0; i < r->device->len; i++)
    pp_backend_free (r->be, g_ptr_array_index (r->device, i));
  g_ptr_array_set_size (r->device, 0);
  r->views = PP_DTYPE_F32;
  g_clear_pointer (&r->problem, g_free);
}

/* ---- comparison --------------------------------------------------------- */

/* Compares @got (host, downloaded) with the float64 reference @ref, prints
 * the case and tallies it, and releases the case's device buffers.  NMSE =
 * Σ(got - ref)² / Σ ref²; for an all-zero reference, whose scale is 0, the
 * mean squared error itself (and the max abs error is bounded as if max
 * |ref| were 1).  Takes @shape. */
static void
check (Run * r, PpOp op, gchar * shape, float *got, const double *ref,
    size_t n, double growth)
{
  const Bounds *b = r->views == PP_DTYPE_F16 ? &f16_bounds
      : r->views == PP_DTYPE_BF16 ? &bf16_bounds : &f32_bounds;
  double sum_err = 0.0, sum_ref = 0.0, max_abs = 0.0, max_ref = 0.0;
  double nmse, bound_nmse, bound_abs;
  size_t non_finite = 0;
  g_autoptr (GString) why = g_string_new (NULL);

  for (size_t i = 0; i < n; i++)
    max_ref = MAX (max_ref, fabs (ref[i]));
  if ((int) op == r->inject && n > 0)
    got[n / 2] += (float) MAX (max_ref, INJECT_MIN_MAGNITUDE);
  for (size_t i = 0; i < n; i++) {
    const double d = (double) got[i] - ref[i];

    if (!isfinite (got[i])) {
      non_finite++;
      continue;
    }
    sum_err += d * d;
    sum_ref += ref[i] * ref[i];
    max_abs = MAX (max_abs, fabs (d));
  }
  nmse = sum_ref > 0.0 ? sum_err / sum_ref : sum_err / MAX (n, 1);
  bound_nmse = b->nmse * growth + b->nmse_floor;
  bound_abs = (b->max_rel * sqrt (growth) + b->max_floor)
      * (max_ref > 0.0 ? max_ref : 1.0);
  if (non_finite > 0)
    g_string_append_printf (why, "; %zu of %zu values not finite",
        non_finite, n);
  if (!(nmse <= bound_nmse))
    g_string_append_printf (why, "; NMSE above %.2g", bound_nmse);
  if (!(max_abs <= bound_abs))
    g_string_append_printf (why, "; max abs error above %.2g", bound_abs);
  if (r->problem != NULL)
    g_string_append_printf (why, "; %s", r->problem);

  r->cases++;
  r->tally[op].cases++;
  if (why->len == 0)
    r->passed++;
  else {
    r->failed++;
    r->tally[op].failed++;
  }
  printf ("  %-18s %-44s NMSE %8.2e  max abs %8.2e  %s%s\n", op_name (op),
      shape, nmse, max_abs, why->len ? "FAIL" : "ok",
      why->len ? why->str + 1 : "");
  if (r->verbose)
    printf ("    bounds (%s, growth %.3g): NMSE %.2e, max abs %.2e; max "
        "|ref| %.3g\n", b->dtype, growth, bound_nmse, bound_abs, max_ref);
  g_free (shape);
  release_case (r);
}

/* Downloads @dev (@n of its values) and checks it. */
static void
check_device (Run * r, PpOp op, gchar * shape, PpOut dev, const double *ref,
    size_t n, double growth)
{
  g_autofree float *got = download (r, dev.data, n);

  check (r, op, shape, got, ref, n, growth);
}

/* ---- references --------------------------------------------------------- */

/* ---- conv2d ------------------------------------------------------------- */

typedef struct
{
  int n, cin, h, w, cout, kh, kw, stride, pad;
  gboolean bias;
  gboolean relu;                /* the activation fused */
  gboolean residual;            /* a residual of y's shape added first */
} ConvCase;

/* @dtype: of the weight and bias views. */
static void
conv_one (Run * r, const ConvCase * c, PpDType dtype)
{
  const int ho = pp_conv2d_out_size (c->h, c->kh, c->stride, c->pad);
  const int wo = pp_conv2d_out_size (c->w, c->kw, c->stride, c->pad);
  const size_t n_in = (size_t) c->n * c->cin * c->h * c->w;
  const size_t n_w = (size_t) c->cout * c->cin * c->kh * c->kw;
  const size_t n_out = (size_t) c->n * c->cout * ho * wo;
  g_autofree float *x = random_host (r, n_in, 1.0);
  g_autofree float *wt = random_host (r, n_w, 0.5);
  g_autofree float *bias = c->bias ? random_host (r, c->cout, 1.0) : NULL;
  g_autofree float *res = c->residual ? random_host (r, n_out, 1.0) : NULL;
  g_autofree double *ref = g_new (double, n_out);
  const PpOut dy = device_nan (r, n_out);

  pp_conv2d (r->be, upload_in (r, x, n_in), c->n, c->cin, c->h, c->w,
      upload_view (r, wt, n_w, dtype), upload_view (r, bias, c->cout, dtype),
      c->cout, c->kh, c->kw, c->stride, c->pad,
      res != NULL ? upload_in (r, res, n_out) : pp_view_none (), c->relu, dy);
  pp_ref_conv2d (x, c->n, c->cin, c->h, c->w, wt, bias, c->cout, c->kh,
      c->kw, c->stride, c->pad, ref);
  for (size_t i = 0; res != NULL && i < n_out; i++)
    ref[i] += res[i];
  for (size_t i = 0; c->relu && i < n_out; i++)
    ref[i] = ref[i] < 0.0 ? 0.0 : ref[i];
  check_device (r, PP_OP_CONV2D, g_strdup_printf ("n%d %dx%dx%d -> %d "
          "k%dx%d s%d p%d%s%s%s%s", c->n, c->cin, c->h, c->w, c->cout,
          c->kh, c->kw, c->stride, c->pad, c->bias ? " bias" : "",
          res != NULL ? " residual" : "", c->relu ? " relu" : "",
          views_label (dtype)), dy, ref, n_out,
      (double) c->cin * c->kh * c->kw + c->bias + c->residual);
}

static void
cases_conv2d (Run * r)
{
  static const ConvCase cases[] = {
    {2, 5, 9, 13, 7, 3, 3, 1, 1, TRUE},
    {2, 5, 9, 13, 7, 3, 3, 2, 1, FALSE},
    {1, 4, 17, 17, 8, 3, 3, 2, 1, TRUE},        /* a downsampler */
    {2, 5, 9, 13, 7, 1, 1, 1, 0, TRUE},
    {1, 5, 9, 13, 3, 1, 1, 2, 0, FALSE},
    {1, 2, 5, 6, 3, 5, 5, 3, 2, TRUE},
    {2, 4, 7, 10, 3, 3, 1, 1, 1, TRUE},
    {1, 3, 1, 1, 4, 3, 3, 1, 1, TRUE},  /* only the centre tap inside */
    {1, 1, 1, 1, 1, 1, 1, 1, 0, FALSE},
    {1, 64, 32, 32, 64, 3, 3, 1, 1, TRUE},      /* split across threads */
    /* Channels in multiples of 8 (a GPU's channels-last convolutions):
     * two samples of an odd size, a downsampler, a 1×1, a filter larger
     * than its input. */
    {2, 16, 12, 20, 24, 3, 3, 1, 1, TRUE},
    {1, 32, 33, 33, 32, 3, 3, 2, 1, TRUE},
    {1, 64, 16, 16, 32, 1, 1, 1, 0, TRUE},
    {1, 64, 4, 4, 64, 3, 3, 1, 1, FALSE},
    /* With the ReLU fused (a TAESD block's): with and without a bias, split
     * across threads, channels in multiples of 8. */
    {2, 5, 9, 13, 7, 3, 3, 1, 1, TRUE, TRUE},
    {1, 64, 32, 32, 64, 3, 3, 1, 1, TRUE, TRUE},
    {2, 16, 12, 20, 24, 3, 3, 1, 1, TRUE, TRUE},
    {1, 64, 4, 4, 64, 3, 3, 1, 1, FALSE, TRUE},
    /* With a residual (a ResNet's shortcut; a TAESD block's skip, then the
     * ReLU): odd channels, channels in multiples of 8, strided. */
    {2, 5, 9, 13, 7, 3, 3, 1, 1, TRUE, FALSE, TRUE},
    {2, 16, 12, 20, 24, 3, 3, 1, 1, TRUE, TRUE, TRUE},
    {1, 64, 32, 32, 64, 3, 3, 1, 1, TRUE, FALSE, TRUE},
    {1, 32, 33, 33, 32, 3, 3, 2, 1, FALSE, TRUE, TRUE},
    /* The residual alone: added after cuDNN where its epilogue does not
     * run. */
    {2, 16, 12, 20, 24, 3, 3, 1, 1, FALSE, FALSE, TRUE},
    /* Input channels not a multiple of 8 into output channels that are
     * (a latent's 4 into a model's first 64, then TAESD's ReLU; an
     * image's 3, with a residual): on a GPU the input's channels padded
     * and the output's not, so that cuDNN's epilogue adds the rest. */
    {1, 4, 9, 11, 8, 3, 3, 1, 1, TRUE, TRUE},
    {2, 3, 9, 13, 16, 3, 3, 1, 1, TRUE, TRUE, TRUE},
  };

  /* 3×3, strided without bias, 1×1, a 3×3 split across threads, the
   * channel-aligned ones, the fused ReLUs, the residuals and the padded
   * inputs. */
  static const guint half_cases[] = { 0, 1, 3, 9, 10, 11, 12, 13, 14, 15,
    16, 17, 18, 19, 20, 21, 22, 23, 24
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    conv_one (r, &cases[i], PP_DTYPE_F32);
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++)
    for (guint i = 0; i < G_N_ELEMENTS (half_cases); i++)
      conv_one (r, &cases[half_cases[i]], half_dtypes[d]);
}

/* ---- group_norm, layer_norm --------------------------------------------- */

/* @offset + values in [-1, 1); -@offset for every odd sample. */
static float *
shifted_host (Run * r, size_t n, size_t per_sample, double offset)
{
  float *x = random_host (r, n, 1.0);

  for (size_t i = 0; offset != 0.0 && i < n; i++)
    x[i] = (float) (x[i] + (i / per_sample % 2 ? -offset : offset));
  return x;
}

/* @offset: added to the values (a large common offset, which a mean
 * held as one float would lose the values' spread to); @dtype: of the
 * gamma and beta views; @silu: the activation fused; @shift_on: a shift
 * per (sample, channel) added first (the float sums normalised). */
static void
group_norm_at (Run * r, double offset, int n, int c, int hw, int groups,
    gboolean gamma_on, gboolean beta_on, gboolean in_place, gboolean silu,
    gboolean shift_on, PpDType dtype)
{
  const float eps = 1e-5f;
  const size_t total = (size_t) n * c * hw;
  const int per = c / groups;
  g_autofree float *x = shifted_host (r, total, (size_t) c * hw, offset);
  g_autofree float *gamma = gamma_on ? random_host (r, c, 1.0) : NULL;
  g_autofree float *beta = beta_on ? random_host (r, c, 1.0) : NULL;
  g_autofree float *shift = shift_on ? random_host (r, (size_t) n * c, 1.0)
      : NULL;
  g_autofree double *ref = g_new (double, total);
  const PpOut dx = upload_out (r, x, total);
  const PpOut dy = in_place ? dx : device_nan (r, total);

  pp_group_norm (r->be, pp_out_as_view (dx),
      shift_on ? upload_in (r, shift, (size_t) n * c) : pp_view_none (), n,
      c, hw, groups, eps, upload_view (r, gamma, c, dtype),
      upload_view (r, beta, c, dtype), silu, dy);
  for (size_t at = 0; at < total && shift_on; at++)
    x[at] += shift[at / hw];
  for (int b = 0; b < n; b++)
    for (int g = 0; g < groups; g++) {
      const size_t first = ((size_t) b * c + (size_t) g * per) * hw;
      double mean, rstd;

      pp_ref_moments (x + first, (size_t) per * hw, eps, &mean, &rstd);
      for (int ch = g * per; ch < (g + 1) * per; ch++)
        for (int i = 0; i < hw; i++) {
          const size_t at = ((size_t) b * c + ch) * hw + i;
          const double v = (x[at] - mean) * rstd;

          ref[at] = (gamma ? v * gamma[ch] : v) + (beta ? beta[ch] : 0.0);
          if (silu)
            ref[at] = pp_ref_silu (ref[at]);
        }
    }
  check_device (r, PP_OP_GROUP_NORM, g_strdup_printf ("n%d c%d hw%d "
          "groups %d%s%s%s%s%s%s%s", n, c, hw, groups, gamma ? " gamma" : "",
          beta ? " beta" : "", silu ? " silu" : "",
          in_place ? " in place" : "", offset != 0.0 ? " offset" : "",
          shift ? " shift" : "", views_label (dtype)), dy, ref, total,
      (double) per * hw + shift_on);
}

static void
group_norm_one (Run * r, int n, int c, int hw, int groups, gboolean gamma_on,
    gboolean beta_on, gboolean in_place, gboolean silu, PpDType dtype)
{
  group_norm_at (r, 0.0, n, c, hw, groups, gamma_on, beta_on, in_place,
      silu, FALSE, dtype);
}

static void
cases_group_norm (Run * r)
{
  const PpDType f32 = PP_DTYPE_F32;
  const gboolean on = TRUE, off = FALSE;

  group_norm_one (r, 2, 12, 35, 4, on, on, off, off, f32);
  group_norm_one (r, 1, 6, 1, 3, off, off, off, off, f32);
  group_norm_one (r, 1, 7, 3, 7, on, on, on, off, f32);
  group_norm_one (r, 2, 12, 35, 3, off, on, off, off, f32);
  group_norm_one (r, 1, 1, 1, 1, on, on, off, off, f32);       /* y = beta */
  group_norm_one (r, 2, 64, 17 * 17, 32, on, off, on, off, f32);
  group_norm_one (r, 1, 128, 32 * 32, 32, on, on, off, off, f32);
  /* Groups a GPU splits into slices of unequal length: 3 slices, in place;
   * the most slices, the last one shorter. */
  group_norm_one (r, 1, 64, 3001, 32, on, on, on, off, f32);
  group_norm_one (r, 1, 4, 65537, 1, on, on, off, off, f32);
  /* The SiLU in the norm's pass: one block a group, and split. */
  group_norm_one (r, 2, 12, 35, 4, on, on, off, on, f32);
  group_norm_one (r, 1, 64, 3001, 32, on, on, on, on, f32);
  /* Values ±1 about ±10⁴: one block a group, and split. */
  group_norm_at (r, 1e4, 2, 12, 35, 4, on, on, off, off, off, f32);
  group_norm_at (r, 1e4, 2, 64, 3001, 32, on, on, off, off, off, f32);
  /* A shift per (sample, channel) first (a ResNet's time embedding):
   * one block a group, split, in place, and a UNet's shape. */
  group_norm_at (r, 0.0, 2, 12, 35, 4, on, on, off, on, on, f32);
  group_norm_at (r, 0.0, 1, 64, 3001, 32, on, on, on, on, on, f32);
  group_norm_at (r, 0.0, 2, 320, 32 * 32, 32, on, on, off, on, on, f32);
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++) {
    group_norm_one (r, 2, 12, 35, 4, on, on, off, off, half_dtypes[d]);
    group_norm_one (r, 2, 12, 35, 3, off, on, off, off, half_dtypes[d]);
    group_norm_one (r, 1, 128, 32 * 32, 32, on, on, on, off,
        half_dtypes[d]);
    group_norm_one (r, 1, 128, 32 * 32, 32, on, on, off, on,
        half_dtypes[d]);
  }
}

/* @offset as group_norm_at's (about every row); @dtype: of the gamma
 * and beta views. */
static void
layer_norm_at (Run * r, double offset, int rows, int dim, gboolean gamma_on,
    gboolean beta_on, gboolean in_place, PpDType dtype)
{
  const float eps = 1e-5f;
  const size_t total = (size_t) rows * dim;
  g_autofree float *x = shifted_host (r, total, dim, offset);
  g_autofree float *gamma = gamma_on ? random_host (r, dim, 1.0) : NULL;
  g_autofree float *beta = beta_on ? random_host (r, dim, 1.0) : NULL;
  g_autofree double *ref = g_new (double, total);
  const PpOut dx = upload_out (r, x, total);
  const PpOut dy = in_place ? dx : device_nan (r, total);

  pp_layer_norm (r->be, pp_out_as_view (dx), rows, dim, eps,
      upload_view (r, gamma, dim, dtype), upload_view (r, beta, dim, dtype),
      dy);
  for (int row = 0; row < rows; row++) {
    double mean, rstd;

    pp_ref_moments (x + (size_t) row * dim, dim, eps, &mean, &rstd);
    for (int i = 0; i < dim; i++) {
      const size_t at = (size_t) row * dim + i;
      const double v = (x[at] - mean) * rstd;

      ref[at] = (gamma ? v * gamma[i] : v) + (beta ? beta[i] : 0.0);
    }
  }
  check_device (r, PP_OP_LAYER_NORM, g_strdup_printf ("%dx%d%s%s%s%s%s",
          rows, dim, gamma ? " gamma" : "", beta ? " beta" : "",
          in_place ? " in place" : "", offset != 0.0 ? " offset" : "",
          views_label (dtype)), dy, ref, total, dim);
}

static void
layer_norm_one (Run * r, int rows, int dim, gboolean gamma_on,
    gboolean beta_on, gboolean in_place, PpDType dtype)
{
  layer_norm_at (r, 0.0, rows, dim, gamma_on, beta_on, in_place, dtype);
}

static void
cases_layer_norm (Run * r)
{
  const PpDType f32 = PP_DTYPE_F32;

  layer_norm_one (r, 5, 1, TRUE, TRUE, FALSE, f32);     /* y = beta */
  layer_norm_one (r, 4, 9, FALSE, FALSE, FALSE, f32);
  layer_norm_one (r, 13, 37, TRUE, TRUE, TRUE, f32);
  layer_norm_one (r, 3, 700, TRUE, FALSE, FALSE, f32);
  layer_norm_one (r, 3, 77, FALSE, TRUE, FALSE, f32);
  layer_norm_one (r, 300, 320, TRUE, TRUE, FALSE, f32);
  layer_norm_at (r, 1e4, 3, 700, TRUE, TRUE, FALSE, f32);
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++) {
    layer_norm_one (r, 13, 37, TRUE, TRUE, TRUE, half_dtypes[d]);
    layer_norm_one (r, 3, 700, TRUE, FALSE, FALSE, half_dtypes[d]);
    layer_norm_one (r, 300, 320, TRUE, TRUE, FALSE, half_dtypes[d]);
  }
}

/* ---- linear, matmul ----------------------------------------------------- */

/* @dtype: of the w and b views; @add: linear_add, y holding random
 * values first. */
static void
linear_at (Run * r, int rows, int in, int out, gboolean with_bias,
    gboolean add, PpDType dtype)
{
  const size_t ny = (size_t) rows * out;
  g_autofree float *x = random_host (r, (size_t) rows * in, 1.0);
  g_autofree float *w = random_host (r, (size_t) out * in, 1.0);
  g_autofree float *b = with_bias ? random_host (r, out, 1.0) : NULL;
  g_autofree float *y = add ? random_host (r, ny, 1.0) : NULL;
  g_autofree double *ref = g_new (double, ny);
  const PpOut dy = add ? upload_out (r, y, ny) : device_nan (r, ny);
  const PpView dx = upload_in (r, x, (size_t) rows * in);
  const PpView dw = upload_view (r, w, (size_t) out * in, dtype);
  const PpView db = upload_view (r, b, out, dtype);

  if (add)
    pp_linear_add (r->be, dx, rows, in, dw, db, out, dy);
  else
    pp_linear (r->be, dx, rows, in, dw, db, out, dy);
  for (int i = 0; i < rows; i++)
    for (int o = 0; o < out; o++) {
      double acc = (b ? b[o] : 0.0) + (add ? y[(size_t) i * out + o] : 0.0);

      for (int k = 0; k < in; k++)
        acc += (double) x[(size_t) i * in + k] * w[(size_t) o * in + k];
      ref[(size_t) i * out + o] = acc;
    }
  check_device (r, add ? PP_OP_LINEAR_ADD : PP_OP_LINEAR,
      g_strdup_printf ("%dx%d -> %d%s%s%s", rows, in, out, b ? " bias" : "",
          add ? " +=" : "", views_label (dtype)), dy, ref, ny,
      (double) in + with_bias + add);
}

static void
linear_one (Run * r, int rows, int in, int out, gboolean with_bias,
    PpDType dtype)
{
  linear_at (r, rows, in, out, with_bias, FALSE, dtype);
}

/* The shapes of linear's cases, added to y; and a transformer's own. */
static void
cases_linear_add (Run * r)
{
  const PpDType f32 = PP_DTYPE_F32;

  linear_at (r, 13, 37, 11, TRUE, TRUE, f32);
  linear_at (r, 1, 5, 3, FALSE, TRUE, f32);
  linear_at (r, 300, 320, 640, TRUE, TRUE, f32);
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++) {
    linear_at (r, 13, 37, 11, TRUE, TRUE, half_dtypes[d]);
    linear_at (r, 77, 256, 200, FALSE, TRUE, half_dtypes[d]);
    linear_at (r, 256, 1280, 320, TRUE, TRUE, half_dtypes[d]);
  }
}

static void
cases_linear (Run * r)
{
  const PpDType f32 = PP_DTYPE_F32;

  linear_one (r, 13, 37, 11, TRUE, f32);
  linear_one (r, 1, 5, 3, FALSE, f32);
  linear_one (r, 1, 1, 1, TRUE, f32);
  linear_one (r, 7, 129, 1, TRUE, f32);
  linear_one (r, 77, 256, 200, FALSE, f32);
  linear_one (r, 300, 320, 640, TRUE, f32);
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++) {
    linear_one (r, 13, 37, 11, TRUE, half_dtypes[d]);
    linear_one (r, 77, 256, 200, FALSE, half_dtypes[d]);
    linear_one (r, 300, 320, 640, TRUE, half_dtypes[d]);
  }
}

/* Strided operands: SLACK floats past each row of a, b and y, which y's
 * must keep. */
#define MATMUL_SLACK 5

/* @a_dtype, @b_dtype: of the a and b views (a model's weight is a or b,
 * the other operand an activation). */
static void
matmul_one (Run * r, gboolean ta, gboolean tb, int m, int n, int k,
    gboolean accumulate, PpDType a_dtype, PpDType b_dtype)
{
  const int a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int b_rows = tb ? n : k, b_cols = tb ? k : n;
  const int lda = a_cols + MATMUL_SLACK, ldb = b_cols + MATMUL_SLACK;
  const int ldy = n + MATMUL_SLACK;
  const size_t ny = (size_t) m * ldy;
  g_autofree float *a = random_host (r, (size_t) a_rows * lda, 1.0);
  g_autofree float *b = random_host (r, (size_t) b_rows * ldb, 1.0);
  g_autofree float *y = random_host (r, ny, 1.0);
  g_autofree double *ref = g_new (double, ny);
  const PpOut dy = upload_out (r, y, ny);

  pp_matmul (r->be, ta, tb, m, n, k,
      upload_view (r, a, (size_t) a_rows * lda, a_dtype), lda,
      upload_view (r, b, (size_t) b_rows * ldb, b_dtype), ldb, accumulate,
      dy, ldy);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < ldy; j++) {
      double acc = accumulate || j >= n ? y[(size_t) i * ldy + j] : 0.0;

      for (int p = 0; p < k && j < n; p++)
        acc += (double) (ta ? a[(size_t) p * lda + i]
            : a[(size_t) i * lda + p]) * (tb ? b[(size_t) j * ldb + p]
            : b[(size_t) p * ldb + j]);
      ref[(size_t) i * ldy + j] = acc;
    }
  check_device (r, PP_OP_MATMUL, g_strdup_printf ("%c%c %dx%dx%d lda %d "
          "ldb %d ldy %d%s%s%s%s%s", ta ? 'T' : 'N', tb ? 'T' : 'N', m, n,
          k, lda, ldb, ldy, accumulate ? " +=" : "",
          a_dtype != PP_DTYPE_F32 ? ", a " : "",
          a_dtype != PP_DTYPE_F32 ? pp_dtype_name (a_dtype) : "",
          b_dtype != PP_DTYPE_F32 ? ", b " : "",
          b_dtype != PP_DTYPE_F32 ? pp_dtype_name (b_dtype) : ""), dy, ref,
      ny, (double) k + accumulate);
}

static void
cases_matmul (Run * r)
{
  const PpDType f32 = PP_DTYPE_F32;

  matmul_one (r, FALSE, FALSE, 1, 1, 1, FALSE, f32, f32);
  for (int t = 0; t < 4; t++) {
    const gboolean ta = t & 1, tb = t >> 1;

    matmul_one (r, ta, tb, 9, 7, 5, FALSE, f32, f32);
    matmul_one (r, ta, tb, 9, 7, 5, TRUE, f32, f32);
    matmul_one (r, ta, tb, 201, 40, 70, t % 2 == 0, f32, f32);
  }
  matmul_one (r, FALSE, TRUE, 64, 200, 64, TRUE, f32, f32);
  /* A 16-bit weight as a (the UNet's proj_out: y += w · hᵀ) or as b, and
   * both operands in 16 bits. */
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++) {
    const PpDType h = half_dtypes[d];

    matmul_one (r, FALSE, TRUE, 64, 200, 64, TRUE, h, f32);
    matmul_one (r, TRUE, FALSE, 9, 7, 5, FALSE, h, f32);
    matmul_one (r, FALSE, TRUE, 201, 40, 70, FALSE, f32, h);
    matmul_one (r, TRUE, TRUE, 9, 7, 5, TRUE, h, h);
  }
  /* One operand of each 16-bit type. */
  matmul_one (r, TRUE, FALSE, 9, 7, 5, TRUE, PP_DTYPE_F16, PP_DTYPE_BF16);
}

/* ---- attention ---------------------------------------------------------- */

/* @x (@n values) rounded in place to @dtype (F32: as it is). */
static void
round_host (float *x, size_t n, PpDType dtype)
{
  for (size_t i = 0; i < n && dtype != PP_DTYPE_F32; i++)
    x[i] = dtype == PP_DTYPE_F16 ? pp_f16_to_f32 (pp_f32_to_f16 (x[i]))
        : pp_bf16_to_f32 (pp_f32_to_bf16 (x[i]));
}

/* q, k, v (@nq, @nk, @nk values) as an attention computing in @dtype
 * (16-bit: a GPU rounds them to it) reads them: rounded to it, so that the
 * reference has the op's inputs; the case gets that dtype's bounds, whose
 * floor covers the probabilities and the output rounded to it (their
 * errors do not grow with the scores). */
static void
attention_inputs (Run * r, float *q, float *k, float *v, size_t nq,
    size_t nk, PpDType dtype)
{
  round_host (q, nq, dtype);
  round_host (k, nk, dtype);
  round_host (v, nk, dtype);
  r->views = dtype;
}

static const gchar *
compute_label (PpDType dtype)
{
  return dtype == PP_DTYPE_F16 ? ", F16 compute" : dtype == PP_DTYPE_BF16
      ? ", BF16 compute" : "";
}

/* @packed ([rows, width]) spread to rows @ld apart, NaN between them: an
 * op that reads past a row's @width values gives NaN. */
static float *
spread_rows (const float *packed, size_t rows, int width, int ld)
{
  float *p = g_new (float, MAX (pp_strided_numel ((int) rows, width, ld),
          1));

  for (size_t i = 0; i < rows; i++) {
    memcpy (p + i * ld, packed + i * width, width * sizeof (float));
    for (int j = width; j < ld && i + 1 < rows; j++)
      p[i * ld + j] = NAN;
  }
  return p;
}

/* Growth: the scores are dot products of head_dim terms and the outputs
 * sums of lk; a score's rounding error moves its softmax weight by that
 * error times |score| (relative), so the squared error also grows with the
 * largest score².  q's rows @ld_q apart, k's and v's @ld_kv (a fused QKV's
 * column ranges are 3·heads·hd apart), q, k and v activations of @views
 * (a GPU reads 16-bit ones of the compute dtype in place). */
static void
attention_strided_one (Run * r, int n, int lq, int lk, int heads, int hd,
    int ld_q, int ld_kv, double amplitude, PpDType dtype, PpDType views)
{
  const int width = heads * hd;
  const size_t nq = (size_t) n * lq * width;
  const size_t nk = (size_t) n * lk * width;
  const size_t sq = pp_strided_numel (n * lq, width, ld_q);
  const size_t sk = pp_strided_numel (n * lk, width, ld_kv);
  g_autofree float *q = random_host (r, nq, amplitude);
  g_autofree float *k = random_host (r, nk, amplitude);
  g_autofree float *v = random_host (r, nk, 1.0);
  g_autofree float *qs = NULL, *ks = NULL, *vs = NULL;
  g_autofree double *ref = g_new (double, nq);
  const PpOut dout = device_nan (r, nq);
  double max_score;

  attention_inputs (r, q, k, v, nq, nk, dtype);
  qs = spread_rows (q, (size_t) n * lq, width, ld_q);
  ks = spread_rows (k, (size_t) n * lk, width, ld_kv);
  vs = spread_rows (v, (size_t) n * lk, width, ld_kv);
  pp_attention (r->be, upload_view (r, qs, sq, views), upload_view (r, ks,
          sk, views), upload_view (r, vs, sk, views), n, lq, lk, heads, hd,
      ld_q, ld_kv, dtype, dout);
  max_score = pp_ref_attention (q, k, v, n, lq, lk, heads, hd, ref);
  check_device (r, PP_OP_ATTENTION, g_strdup_printf ("n%d lq%d lk%d %d "
          "heads of %d%s, amplitude %g%s%s", n, lq, lk, heads, hd,
          ld_q == width && ld_kv == width ? "" : ld_q == ld_kv
          ? ", q k v rows 3 apart (fused QKV)" : ", q rows 3 apart",
          amplitude, compute_label (dtype), views_label (views)), dout, ref,
      nq, (double) (hd + lk)
      * MAX (1.0, max_score * max_score));
}

static void
attention_one (Run * r, int n, int lq, int lk, int heads, int hd,
    double amplitude, PpDType dtype)
{
  attention_strided_one (r, n, lq, lk, heads, hd, heads * hd, heads * hd,
      amplitude, dtype, PP_DTYPE_F32);
}

/* Self-attention's q, k and v as column ranges of a fused QKV projection's
 * rows ([rows, 3·heads·hd]); with @cross, only q is (a cross-attention
 * keeps its keys and values packed); activations of @views. */
static void
attention_qkv_one (Run * r, int n, int lq, int lk, int heads, int hd,
    gboolean cross, PpDType dtype, PpDType views)
{
  const int fused = 3 * heads * hd;

  attention_strided_one (r, n, lq, lk, heads, hd, fused, cross ? heads * hd
      : fused, 1.0, dtype, views);
}

static void
cases_attention (Run * r)
{
  const PpDType f32 = PP_DTYPE_F32;

  attention_one (r, 1, 1, 1, 1, 1, 1.0, f32);
  attention_one (r, 1, 13, 5, 3, 8, 1.0, f32);
  attention_one (r, 2, 7, 77, 2, 40, 1.0, f32);  /* cross-attention */
  attention_one (r, 1, 17, 33, 2, 5, 1.0, f32);
  attention_one (r, 1, 70, 77, 2, 32, 1.0, f32);
  attention_one (r, 1, 33, 29, 2, 64, 4.0, f32); /* large scores */
  attention_one (r, 1, 300, 300, 5, 64, 1.0, f32);
  attention_qkv_one (r, 2, 13, 13, 3, 8, FALSE, f32, f32);
  attention_qkv_one (r, 1, 70, 70, 2, 32, FALSE, f32, f32);
  attention_qkv_one (r, 2, 64, 64, 5, 64, FALSE, f32, f32);
  attention_qkv_one (r, 2, 7, 77, 2, 40, TRUE, f32, f32);
  /* In 16 bits (a GPU's fused or GEMM path): the UNets' head sizes (SD2's
   * 64, SD1.5's 40 and 160), text keys, an odd head size no fused kernel
   * takes, and several samples. */
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++) {
    const PpDType h = half_dtypes[d];

    attention_one (r, 1, 1, 1, 1, 1, 1.0, h);
    attention_one (r, 2, 7, 77, 2, 40, 1.0, h);
    attention_one (r, 1, 17, 33, 2, 5, 1.0, h);
    attention_one (r, 1, 33, 29, 2, 64, 4.0, h);
    attention_one (r, 1, 512, 512, 5, 64, 1.0, h);
    attention_one (r, 2, 256, 77, 10, 64, 1.0, h);
    attention_one (r, 1, 64, 64, 8, 160, 1.0, h);
    attention_one (r, 1, 256, 256, 1, 512, 1.0, h);    /* a VAE's */
    attention_qkv_one (r, 2, 64, 64, 5, 64, FALSE, h, f32);
    attention_qkv_one (r, 1, 256, 256, 8, 40, FALSE, h, f32);
    attention_qkv_one (r, 2, 7, 77, 2, 40, TRUE, h, f32);
    /* The same as 16-bit activations of the compute dtype, which a GPU's
     * fused kernel reads in place through their row strides. */
    attention_qkv_one (r, 2, 64, 64, 5, 64, FALSE, h, h);
    attention_qkv_one (r, 1, 256, 256, 8, 40, FALSE, h, h);
    attention_qkv_one (r, 2, 7, 77, 2, 40, TRUE, h, h);
  }
}

/* Growth as attention's, with l keys at most. */
static void
attention_causal_one (Run * r, int n, int l, int heads, int hd,
    double amplitude, PpDType dtype)
{
  const size_t count = (size_t) n * l * heads * hd;
  g_autofree float *q = random_host (r, count, amplitude);
  g_autofree float *k = random_host (r, count, amplitude);
  g_autofree float *v = random_host (r, count, 1.0);
  g_autofree double *ref = g_new (double, count);
  const PpOut dout = device_nan (r, count);
  double max_score;

  attention_inputs (r, q, k, v, count, count, dtype);
  pp_attention_causal (r->be, upload_in (r, q, count),
      upload_in (r, k, count), upload_in (r, v, count), n, l, heads, hd,
      dtype, dout);
  max_score = pp_ref_attention_causal (q, k, v, n, l, heads, hd, ref);
  check_device (r, PP_OP_ATTENTION_CAUSAL, g_strdup_printf ("n%d l%d %d "
          "heads of %d, amplitude %g%s", n, l, heads, hd, amplitude,
          compute_label (dtype)), dout, ref, count, (double) (hd + l)
      * MAX (1.0, max_score * max_score));
}

static void
cases_attention_causal (Run * r)
{
  const PpDType f32 = PP_DTYPE_F32;

  attention_causal_one (r, 1, 1, 1, 1, 1.0, f32);
  attention_causal_one (r, 1, 5, 3, 8, 1.0, f32);
  attention_causal_one (r, 2, 77, 4, 8, 1.0, f32);       /* a tiny text encoder */
  attention_causal_one (r, 1, 77, 12, 64, 1.0, f32);     /* CLIP ViT-L/14's */
  attention_causal_one (r, 1, 33, 2, 64, 4.0, f32);      /* large scores */
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++) {
    attention_causal_one (r, 2, 77, 4, 8, 1.0, half_dtypes[d]);
    attention_causal_one (r, 1, 77, 16, 64, 1.0, half_dtypes[d]);
  }
}

/* ---- element-wise ------------------------------------------------------- */

/* Sizes of the element-wise cases: one, either side of a 16-float vector,
 * and one large enough to split across threads (odd, so that the last
 * chunk and vector are partial). */
static const size_t element_sizes[] = { 1, 15, 17, 262147 };

typedef void (*UnaryOp) (PpBackend * be, PpOut x, size_t n);
typedef double (*UnaryRef) (double x);

static void
unary_one (Run * r, PpOp op, UnaryOp fn, UnaryRef ref_fn, size_t n,
    double amplitude)
{
  g_autofree float *x = random_host (r, n, amplitude);
  g_autofree double *ref = g_new (double, n);
  const PpOut dx = upload_out (r, x, n);

  fn (r->be, dx, n);
  for (size_t i = 0; i < n; i++)
    ref[i] = ref_fn (x[i]);
  check_device (r, op, g_strdup_printf ("%zu in place, x in ±%g", n,
          amplitude), dx, ref, n, 1.0);
}

static void
unary_cases (Run * r, PpOp op, UnaryOp fn, UnaryRef ref_fn)
{
  for (guint i = 0; i < G_N_ELEMENTS (element_sizes); i++)
    unary_one (r, op, fn, ref_fn, element_sizes[i], 6.0);
}

static void
cases_silu (Run * r)
{
  unary_cases (r, PP_OP_SILU, pp_silu, pp_ref_silu);
}

static void
cases_relu (Run * r)
{
  unary_cases (r, PP_OP_RELU, pp_relu, pp_ref_relu);
}

static void
cases_tanh (Run * r)
{
  unary_cases (r, PP_OP_TANH, pp_tanh, tanh);
}

static void
cases_gelu (Run * r)
{
  unary_cases (r, PP_OP_GELU, pp_gelu, pp_ref_gelu);
}

static void
cases_quick_gelu (Run * r)
{
  unary_cases (r, PP_OP_QUICK_GELU, pp_quick_gelu, pp_ref_quick_gelu);
}

/* x [rows, 2d]: d values then d gates per row. */
static void
geglu_one (Run * r, int rows, int d)
{
  const size_t total = (size_t) rows * d;
  g_autofree float *x = random_host (r, 2 * total, 4.0);
  g_autofree double *ref = g_new (double, total);
  const PpOut dy = device_nan (r, total);

  pp_geglu (r->be, upload_in (r, x, 2 * total), rows, d, dy);
  for (int row = 0; row < rows; row++)
    for (int i = 0; i < d; i++) {
      const double value = x[(size_t) row * 2 * d + i];
      const double gate = x[(size_t) row * 2 * d + d + i];

      ref[(size_t) row * d + i] = value * pp_ref_gelu (gate);
    }
  check_device (r, PP_OP_GEGLU, g_strdup_printf ("%dx(2x%d)", rows, d), dy,
      ref, total, 1.0);
}

static void
cases_geglu (Run * r)
{
  geglu_one (r, 1, 1);
  geglu_one (r, 11, 13);
  geglu_one (r, 300, 640);
}

/* add, scale, affine, axpby: y and x of n values. */
typedef enum
{
  BINARY_ADD,
  BINARY_SCALE,
  BINARY_AFFINE,
  BINARY_AXPBY,
} Binary;

/* The scalars of scale, affine and axpby (b = 0 too). */
#define TEST_SCALE (-0.375f)
#define TEST_MUL 1.25f
#define TEST_ADD (-0.5f)
#define TEST_A 0.8f
#define TEST_B (-0.6f)

/* @x_dtype: of add's x view (F32 for the others). */
static void
binary_one (Run * r, PpOp op, Binary kind, size_t n, float b,
    PpDType x_dtype)
{
  g_autofree float *x = random_host (r, n, 1.0);
  g_autofree float *y = random_host (r, n, 1.0);
  g_autofree double *ref = g_new (double, n);
  /* axpby with b = 0 writes y without reading it: NaN proves it. */
  const PpOut dy = kind == BINARY_AXPBY && b == 0.0f ? device_nan (r, n)
      : upload_out (r, y, n);
  gchar *shape = NULL;

  switch (kind) {
    case BINARY_ADD:
      pp_add (r->be, dy, upload_view (r, x, n, x_dtype), n);
      for (size_t i = 0; i < n; i++)
        ref[i] = (double) y[i] + x[i];
      shape = g_strdup_printf ("%zu, y += x%s", n, views_label (x_dtype));
      break;
    case BINARY_SCALE:
      pp_scale (r->be, dy, n, TEST_SCALE);
      for (size_t i = 0; i < n; i++)
        ref[i] = (double) y[i] * TEST_SCALE;
      shape = g_strdup_printf ("%zu in place, s %g", n, TEST_SCALE);
      break;
    case BINARY_AFFINE:
      pp_affine (r->be, dy, n, TEST_MUL, TEST_ADD);
      for (size_t i = 0; i < n; i++)
        ref[i] = (double) y[i] * TEST_MUL + TEST_ADD;
      shape = g_strdup_printf ("%zu in place, mul %g add %g", n, TEST_MUL,
          TEST_ADD);
      break;
    case BINARY_AXPBY:
      pp_axpby (r->be, dy, TEST_A, upload_in (r, x, n), b, n);
      for (size_t i = 0; i < n; i++)
        ref[i] = TEST_A * (double) x[i] + (b == 0.0f ? 0.0 : b * (double) y[i]);
      shape = g_strdup_printf ("%zu, a %g b %g%s", n, TEST_A, b,
          b == 0.0f ? " (y NaN before)" : "");
      break;
  }
  check_device (r, op, shape, dy, ref, n, 1.0);
}

static void
binary_cases (Run * r, PpOp op, Binary kind)
{
  for (guint i = 0; i < G_N_ELEMENTS (element_sizes); i++)
    binary_one (r, op, kind, element_sizes[i], TEST_B, PP_DTYPE_F32);
}

static void
cases_add (Run * r)
{
  binary_cases (r, PP_OP_ADD, BINARY_ADD);
  /* x as a 16-bit view (CLIP adds its position embedding so). */
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++)
    for (guint i = 0; i < G_N_ELEMENTS (element_sizes); i++)
      binary_one (r, PP_OP_ADD, BINARY_ADD, element_sizes[i], TEST_B,
          half_dtypes[d]);
}

static void
cases_scale (Run * r)
{
  binary_cases (r, PP_OP_SCALE, BINARY_SCALE);
}

static void
cases_affine (Run * r)
{
  binary_cases (r, PP_OP_AFFINE, BINARY_AFFINE);
}

static void
cases_axpby (Run * r)
{
  binary_cases (r, PP_OP_AXPBY, BINARY_AXPBY);
  for (guint i = 0; i < G_N_ELEMENTS (element_sizes); i++)
    binary_one (r, PP_OP_AXPBY, BINARY_AXPBY, element_sizes[i], 0.0f,
        PP_DTYPE_F32);
}

/* x [n,c,hw] += v [n,c], v a view of @dtype. */
static void
add_channel_one (Run * r, int n, int c, int hw, PpDType dtype)
{
  const size_t total = (size_t) n * c * hw;
  g_autofree float *x = random_host (r, total, 1.0);
  g_autofree float *v = random_host (r, (size_t) n * c, 1.0);
  g_autofree double *ref = g_new (double, total);
  const PpOut dx = upload_out (r, x, total);

  pp_add_channel (r->be, dx, n, c, hw,
      upload_view (r, v, (size_t) n * c, dtype));
  for (size_t plane = 0; plane < (size_t) n * c; plane++)
    for (int i = 0; i < hw; i++)
      ref[plane * hw + i] = (double) x[plane * hw + i] + v[plane];
  check_device (r, PP_OP_ADD_CHANNEL, g_strdup_printf ("n%d c%d hw%d%s", n,
          c, hw, views_label (dtype)), dx, ref, total, 1.0);
}

static void
cases_add_channel (Run * r)
{
  add_channel_one (r, 1, 1, 1, PP_DTYPE_F32);
  add_channel_one (r, 2, 3, 17, PP_DTYPE_F32);
  add_channel_one (r, 2, 320, 32 * 32, PP_DTYPE_F32);
  /* v as a 16-bit bias (the UNet's transformers add proj_out.bias so). */
  for (guint d = 0; d < G_N_ELEMENTS (half_dtypes); d++) {
    add_channel_one (r, 2, 3, 17, half_dtypes[d]);
    add_channel_one (r, 1, 320, 32 * 32, half_dtypes[d]);
  }
}

/* A step from ᾱ = 0.3 to ᾱ = 0.7, with a boundary condition that weighs
 * both terms (a schedule's is nearly c_out = 1, c_skip = 0 past its first
 * timesteps). */
static const PpLcmCoeffs lcm_test_coeffs = {
  .sa = 0.5477226f,             /* √0.3 */
  .sb = 0.8366600f,             /* √0.7 */
  .c_out = 0.8f,
  .c_skip = 0.2f,
  .na = 0.8366600f,             /* √0.7 */
  .nb = 0.5477226f,             /* √0.3 */
};

static void
lcm_step_one (Run * r, size_t n, gboolean last)
{
  PpLcmCoeffs c = lcm_test_coeffs;
  g_autofree float *x = random_host (r, n, 1.0);
  g_autofree float *eps = random_host (r, n, 1.0);
  g_autofree float *noise = last ? NULL : random_host (r, n, 1.0);
  g_autofree double *ref = g_new (double, n);
  const PpOut dx = upload_out (r, x, n);

  c.last = last;
  pp_lcm_step (r->be, dx, upload_in (r, eps, n),
      noise ? upload_in (r, noise, n) : pp_view_none (), n, &c);
  for (size_t i = 0; i < n; i++) {
    /* x̂0 = (x - √(1-ᾱ) ε̂) / √ᾱ; d = c_out x̂0 + c_skip x; then the
     * next sample √ᾱ' d + √(1-ᾱ') ε, or d on the last step. */
    const double x0 = ((double) x[i] - (double) c.sb * eps[i]) / c.sa;
    const double d = (double) c.c_out * x0 + (double) c.c_skip * x[i];

    ref[i] = last ? d : (double) c.na * d + (double) c.nb * noise[i];
  }
  check_device (r, PP_OP_LCM_STEP, g_strdup_printf ("%zu in place, %s", n,
          last ? "last (noise absent)" : "with noise"), dx, ref, n, 1.0);
}

static void
cases_lcm_step (Run * r)
{
  for (guint i = 0; i < G_N_ELEMENTS (element_sizes); i++) {
    lcm_step_one (r, element_sizes[i], FALSE);
    lcm_step_one (r, element_sizes[i], TRUE);
  }
}

/* y [dim] = [sin(t f), cos(t f)] ([cos, sin] flipped), f_k =
 * exp(-ln(10000) k / (half - freq_shift)); an odd dim ends in 0.  Growth:
 * the mean of (1 + |t f|)² over the outputs, since the argument t·f is
 * rounded to float before sin and cos (as in PyTorch), an absolute error
 * of a few |t f| eps. */
static void
embedding_one (Run * r, float t, int dim, gboolean flip, float shift)
{
  const int half = dim / 2;
  g_autofree double *ref = g_new (double, dim);
  const PpOut dy = device_nan (r, dim);
  double growth = dim % 2;

  pp_timestep_embedding (r->be, t, dim, flip, shift, dy);
  for (int k = 0; k < half; k++) {
    const double f = exp (-log (10000.0) * k / (half - (double) shift));

    ref[flip ? half + k : k] = sin (t * f);
    ref[flip ? k : half + k] = cos (t * f);
    growth += 2.0 * (1.0 + fabs (t * f)) * (1.0 + fabs (t * f));
  }
  if (dim % 2)
    ref[dim - 1] = 0.0;
  check_device (r, PP_OP_TIMESTEP_EMBEDDING, g_strdup_printf ("t %g dim %d "
          "%s shift %g", t, dim, flip ? "[cos,sin]" : "[sin,cos]", shift),
      dy, ref, dim, growth / dim);
}

static void
cases_timestep_embedding (Run * r)
{
  embedding_one (r, 0.0f, 8, TRUE, 0.0f);
  embedding_one (r, 1.0f, 8, FALSE, 0.0f);
  embedding_one (r, 357.0f, 8, TRUE, 0.0f);
  embedding_one (r, 999.0f, 320, TRUE, 0.0f);   /* SD 1.5 */
  embedding_one (r, 0.5f, 32, FALSE, 1.0f);
  embedding_one (r, 42.0f, 7, TRUE, 0.0f);      /* odd: a trailing 0 */
  embedding_one (r, 42.0f, 1, FALSE, 0.0f);     /* no frequency: [0] */
}

/* ---- layout ------------------------------------------------------------- */

static void
upsample_one (Run * r, int n, int c, int h, int w, int f)
{
  const size_t n_in = (size_t) n * c * h * w;
  const size_t n_out = n_in * f * f;
  g_autofree float *x = random_host (r, n_in, 1.0);
  g_autofree double *ref = g_new (double, n_out);
  const PpOut dy = device_nan (r, n_out);

  pp_upsample_nearest (r->be, upload_in (r, x, n_in), n, c, h, w, f, dy);
  for (size_t p = 0; p < (size_t) n * c; p++)
    for (int oy = 0; oy < h * f; oy++)
      for (int ox = 0; ox < w * f; ox++)
        ref[(p * h * f + oy) * w * f + ox] = x[(p * h + oy / f) * w + ox / f];
  check_device (r, PP_OP_UPSAMPLE_NEAREST, g_strdup_printf ("n%d c%d %dx%d "
          "x%d", n, c, h, w, f), dy, ref, n_out, 1.0);
}

static void
cases_upsample_nearest (Run * r)
{
  upsample_one (r, 1, 1, 1, 1, 3);
  upsample_one (r, 2, 3, 5, 7, 2);
  upsample_one (r, 1, 2, 3, 4, 1);
  upsample_one (r, 1, 64, 32, 32, 2);
}

static void
interleave_one (Run * r, int n, int c, int h, int w)
{
  const size_t zh = h + 1, zw = w + 1;
  const size_t n_in = (size_t) n * 4 * c * zh * zw;
  const size_t n_out = (size_t) n * c * 4 * h * w;
  g_autofree float *z = random_host (r, n_in, 1.0);
  g_autofree double *ref = g_new (double, n_out);
  const PpOut dy = device_nan (r, n_out);

  pp_interleave_phases (r->be, upload_in (r, z, n_in), n, c, h, w, dy);
  for (int s = 0; s < n; s++)
    for (int k = 0; k < c; k++)
      for (int oy = 0; oy < 2 * h; oy++)
        for (int ox = 0; ox < 2 * w; ox++) {
          const int a = oy % 2, b = ox % 2;

          ref[(((size_t) s * c + k) * 2 * h + oy) * 2 * w + ox] =
              z[(((size_t) s * 4 + 2 * a + b) * c + k) * zh * zw
              + (size_t) (oy / 2 + a) * zw + ox / 2 + b];
        }
  check_device (r, PP_OP_INTERLEAVE_PHASES, g_strdup_printf ("n%d c%d "
          "%dx%d", n, c, h, w), dy, ref, n_out, 1.0);
}

static void
cases_interleave_phases (Run * r)
{
  interleave_one (r, 1, 1, 1, 1);
  interleave_one (r, 2, 3, 5, 7);
  interleave_one (r, 1, 8, 4, 6);
  interleave_one (r, 1, 64, 8, 8);
}

/* One axis of torch's bilinear interpolate (align_corners=False): the
 * source coordinate of output @o with half-pixel centres, clamped to the
 * edges; its two taps and the weight of the second. */
static void
ref_bilinear_taps (int o, int in, int out, int *i0, int *i1, double *frac)
{
  double src = (o + 0.5) * in / out - 0.5;

  src = CLAMP (src, 0.0, in - 1.0);
  *i0 = (int) floor (src);
  *i1 = MIN (*i0 + 1, in - 1);
  *frac = src - *i0;
}

static void
resize_one (Run * r, int c, int h, int w, int ho, int wo)
{
  const size_t n_in = (size_t) c * h * w, n_out = (size_t) c * ho * wo;
  g_autofree float *x = random_host (r, n_in, 1.0);
  g_autofree double *ref = g_new (double, n_out);
  const PpOut dy = device_nan (r, n_out);

  pp_resize_bilinear (r->be, upload_in (r, x, n_in), c, h, w, dy, ho, wo);
  for (int ch = 0; ch < c; ch++)
    for (int oy = 0; oy < ho; oy++)
      for (int ox = 0; ox < wo; ox++) {
        const float *p = x + (size_t) ch * h * w;
        int y0, y1, x0, x1;
        double fy, fx, top, bottom;

        ref_bilinear_taps (oy, h, ho, &y0, &y1, &fy);
        ref_bilinear_taps (ox, w, wo, &x0, &x1, &fx);
        top = p[y0 * w + x0] * (1.0 - fx) + p[y0 * w + x1] * fx;
        bottom = p[y1 * w + x0] * (1.0 - fx) + p[y1 * w + x1] * fx;
        ref[((size_t) ch * ho + oy) * wo + ox] = top * (1.0 - fy)
            + bottom * fy;
      }
  check_device (r, PP_OP_RESIZE_BILINEAR, g_strdup_printf ("c%d %dx%d -> "
          "%dx%d (%s)", c, h, w, ho, wo, (size_t) ho * wo > (size_t) h * w
          ? "up" : (size_t) ho * wo < (size_t) h * w ? "down" : "same size"),
      dy, ref, n_out, 1.0);
}

static void
cases_resize_bilinear (Run * r)
{
  resize_one (r, 3, 5, 7, 11, 16);
  resize_one (r, 3, 32, 32, 13, 9);
  resize_one (r, 1, 8, 8, 8, 8);
  resize_one (r, 2, 1, 1, 4, 5);
  resize_one (r, 1, 7, 1, 3, 6);
  resize_one (r, 3, 240, 320, 144, 200);
  resize_one (r, 4, 64, 64, 128, 96);
}

/* a [n,ca,hw], b [n,cb,hw] → y [n,ca+cb,hw]. */
static void
concat_one (Run * r, int n, int ca, int cb, int hw)
{
  const size_t na = (size_t) n * ca * hw, nb = (size_t) n * cb * hw;
  const size_t total = na + nb;
  g_autofree float *a = random_host (r, na, 1.0);
  g_autofree float *b = random_host (r, nb, 1.0);
  g_autofree double *ref = g_new (double, total);
  const PpOut dy = device_nan (r, total);

  pp_concat_channels (r->be, upload_in (r, a, na), ca, upload_in (r, b, nb),
      cb, n, hw, dy);
  for (int s = 0; s < n; s++)
    for (int ch = 0; ch < ca + cb; ch++)
      for (int i = 0; i < hw; i++)
        ref[((size_t) s * (ca + cb) + ch) * hw + i] = ch < ca
            ? a[((size_t) s * ca + ch) * hw + i]
            : b[((size_t) s * cb + ch - ca) * hw + i];
  check_device (r, PP_OP_CONCAT_CHANNELS, g_strdup_printf ("n%d %d + %d "
          "channels, hw%d", n, ca, cb, hw), dy, ref, total, 1.0);
}

static void
cases_concat_channels (Run * r)
{
  concat_one (r, 1, 1, 1, 1);
  concat_one (r, 2, 3, 5, 7);
  concat_one (r, 2, 320, 320, 17 * 17);
}

/* [n,c,hw] ↔ [n,hw,c]. */
static void
transpose_one (Run * r, gboolean to_nlc, int n, int c, int hw)
{
  const size_t total = (size_t) n * c * hw;
  g_autofree float *x = random_host (r, total, 1.0);
  g_autofree double *ref = g_new (double, total);
  const PpView dx = upload_in (r, x, total);
  const PpOut dy = device_nan (r, total);

  if (to_nlc)
    pp_nchw_to_nlc (r->be, dx, n, c, hw, dy);
  else
    pp_nlc_to_nchw (r->be, dx, n, c, hw, dy);
  for (int b = 0; b < n; b++)
    for (int ch = 0; ch < c; ch++)
      for (int i = 0; i < hw; i++) {
        const size_t nchw = ((size_t) b * c + ch) * hw + i;
        const size_t nlc = ((size_t) b * hw + i) * c + ch;

        if (to_nlc)
          ref[nlc] = x[nchw];
        else
          ref[nchw] = x[nlc];
      }
  check_device (r, to_nlc ? PP_OP_NCHW_TO_NLC : PP_OP_NLC_TO_NCHW,
      g_strdup_printf ("n%d c%d hw%d", n, c, hw), dy, ref, total, 1.0);
}

static void
transpose_cases (Run * r, gboolean to_nlc)
{
  transpose_one (r, to_nlc, 1, 1, 1);
  transpose_one (r, to_nlc, 2, 15, 17);
  transpose_one (r, to_nlc, 2, 37, 70);
  transpose_one (r, to_nlc, 1, 320, 1023);
}

static void
cases_nchw_to_nlc (Run * r)
{
  transpose_cases (r, TRUE);
}

static void
cases_nlc_to_nchw (Run * r)
{
  transpose_cases (r, FALSE);
}

/* ---- pp_for_rows -------------------------------------------------------- */

/* A row-wise chain as a model writes one: linear, then GELU on the range's
 * rows alone. */
typedef struct
{
  PpBackend *be;
  PpView x, w;
  PpOut y;
  int in, out;
  gint *hits;                   /* host: ranges that covered each row */
} RowsChain;

static void
rows_chain (int begin, int end, gpointer data)
{
  RowsChain *c = data;
  const size_t rows = end - begin;
  PpOut y;

  for (int row = begin; row < end; row++)
    g_atomic_int_inc (&c->hits[row]);
  if (end <= begin)
    return;
  y = pp_out_range (c->y, (size_t) begin * c->out, rows * c->out);
  pp_linear (c->be, pp_view_range (c->x, (size_t) begin * c->in,
          rows * c->in), end - begin, c->in, c->w, pp_view_none (), c->out,
      y);
  pp_gelu (c->be, y, rows * c->out);
}

static void
for_rows_one (Run * r, int rows, int in, int out)
{
  const size_t n_out = (size_t) rows * out;
  g_autofree float *x = random_host (r, (size_t) rows * in, 1.0);
  g_autofree float *w = random_host (r, (size_t) out * in, 1.0);
  g_autofree double *ref = g_new (double, n_out);
  g_autofree gint *hits = g_new0 (gint, rows);
  RowsChain chain = { r->be, upload_in (r, x, (size_t) rows * in),
    upload_view (r, w, (size_t) out * in, PP_DTYPE_F32),
    device_nan (r, n_out), in, out, hits
  };

  pp_for_rows (r->be, rows, rows_chain, &chain);
  for (int row = 0; row < rows; row++) {
    if (hits[row] != 1 && r->problem == NULL)
      r->problem = g_strdup_printf ("row %d ran %d times", row, hits[row]);
    for (int o = 0; o < out; o++) {
      double acc = 0.0;

      for (int k = 0; k < in; k++)
        acc += (double) x[(size_t) row * in + k] * w[(size_t) o * in + k];
      ref[(size_t) row * out + o] = pp_ref_gelu (acc);
    }
  }
  check_device (r, PP_OP_FOR_ROWS, g_strdup_printf ("%d rows: linear %d -> "
          "%d, gelu", rows, in, out), chain.y, ref, n_out, in);
}

static void
cases_for_rows (Run * r)
{
  for_rows_one (r, 1, 7, 5);
  for_rows_one (r, 13, 37, 11);
  for_rows_one (r, 1000, 64, 96);
}

/* ---- bytes_to_floats, floats_to_bytes ----------------------------------- */

/* Sizes around the vector widths and the threads' ranges, and a frame's. */
static const size_t byte_sizes[] = { 1, 15, 4097, 3 * 64 * 48 };

static void
cases_bytes_to_floats (Run * r)
{
  for (guint k = 0; k < G_N_ELEMENTS (byte_sizes); k++) {
    const size_t n = byte_sizes[k];
    g_autofree guint8 *x = g_new (guint8, n);
    g_autofree double *ref = g_new (double, n);
    guint8 *dx = device_bytes (r, n);
    const PpOut dy = device_nan (r, n);

    for (size_t i = 0; i < n; i++) {
      x[i] = (guint8) (i < 256 ? (guint) i
          : (guint) g_rand_int_range (r->rng, 0, 256));
      ref[i] = x[i];
    }
    pp_backend_upload (r->be, dx, x, n);
    pp_bytes_to_floats (r->be, dx, n, dy);
    check_device (r, PP_OP_BYTES_TO_FLOATS, g_strdup_printf ("%zu bytes", n),
        dy, ref, n, 1.0);
  }
}

/* Every byte must be pp_math_to_byte's, exactly: ties, NaN, infinities,
 * −0 and values past either end among random ones. */
static void
cases_floats_to_bytes (Run * r)
{
  static const float special[] = { 0.5f, 1.5f, 2.5f, 254.5f, 255.5f,
    -0.5f, -0.0f, 0.49999997f, 127.49999f, 255.49998f, 256.0f, -1.0f,
    1e-45f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY, NAN
  };

  for (guint k = 0; k < G_N_ELEMENTS (byte_sizes); k++) {
    const size_t n = byte_sizes[k];
    g_autofree float *x = random_host (r, n, 150.0);
    g_autofree guint8 *got = g_new (guint8, n);
    g_autofree float *widened = g_new (float, n);
    g_autofree double *ref = g_new (double, n);
    guint8 *dy = device_bytes (r, n);
    PpView dx;

    for (size_t i = 0; i < n; i++)
      x[i] = i < G_N_ELEMENTS (special) ? special[i] : x[i] + 128.0f;
    dx = upload_in (r, x, n);
    pp_floats_to_bytes (r->be, dx, n, dy);
    pp_backend_download (r->be, got, dy, n);
    for (size_t i = 0; i < n; i++) {
      const guint8 want = pp_math_to_byte (x[i]);

      ref[i] = want;
      widened[i] = got[i];
      if (got[i] != want && r->problem == NULL)
        r->problem = g_strdup_printf ("[%zu] = %a gave %u, not %u", i,
            x[i], got[i], want);
    }
    check (r, PP_OP_FLOATS_TO_BYTES, g_strdup_printf ("%zu floats", n),
        widened, ref, n, 1.0);
  }
}

/* ---- the feature bank's ops ------------------------------------------ */

/* The norm of @n floats, in double. */
static double
ref_norm (const float *x, int n)
{
  double s = 0.0;

  for (int j = 0; j < n; j++)
    s += (double) x[j] * x[j];
  return sqrt (s);
}

static void
row_norms_one (Run * r, int rows, int c)
{
  const size_t total = (size_t) rows * c;
  g_autofree float *x = random_host (r, total, 2.0);
  g_autofree double *ref = g_new (double, rows);
  const PpOut norms = device_nan (r, rows);

  /* a zero row */
  memset (x, 0, c * sizeof (float));
  pp_row_norms (r->be, upload_in (r, x, total), rows, c, norms);
  for (int i = 0; i < rows; i++)
    ref[i] = ref_norm (x + (size_t) i * c, c);
  check_device (r, PP_OP_ROW_NORMS, g_strdup_printf ("%dx%d", rows, c),
      norms, ref, rows, 1.0);
}

static void
cases_row_norms (Run * r)
{
  row_norms_one (r, 1, 1);
  row_norms_one (r, 7, 13);
  row_norms_one (r, 300, 320);
}

/* The row of the first of @count candidates (candidate k: row j =
 * pp_math_bank_kept (k, @r_merge)) with the largest @sim[k] · j's inverse
 * norm, as the ops' definitions say (pp-ops-math.h's float score); -1
 * when none beats -FLT_MAX. */
static int
ref_choice (const float *sim, const float *norms, int count, int r_merge)
{
  float best = -FLT_MAX;
  int at = -1;

  for (int k = 0; k < count; k++) {
    const int j = pp_math_bank_kept (k, r_merge);
    const float score = sim[k] * pp_math_inverse_norm (norms[j]);

    if (score > best) {
      best = score;
      at = j;
    }
  }
  return at;
}

/* y [rows, c] against a bank [m, c]: every third row near a bank row
 * (fused at threshold 0.9), the others random; row 0 zero, bank row 0
 * zero, bank rows 1 and 2 a tie for row 1 (equal norms and products,
 * different values: the first must be taken), and for row 2 a bank row
 * of a larger product but a smaller cosine than the one it is near.  The reference's y and
 * fused counts, then the op's, compared as one array. */
static void
bank_fuse_one (Run * r, int rows, int m, int c)
{
  const size_t ny = (size_t) rows * c, nb = (size_t) m * c;
  const double threshold = 0.9, strength = 0.8;
  g_autofree float *bank = random_host (r, nb, 1.0);
  g_autofree float *y = random_host (r, ny, 1.0);
  g_autofree float *fused = g_new (float, rows);
  g_autofree float *sim = g_new (float, (size_t) rows * m);
  g_autofree float *y_norms = g_new (float, rows);
  g_autofree float *b_norms = g_new (float, m);
  g_autofree double *ref = g_new (double, ny + rows);
  g_autofree float *got = g_new (float, ny + rows);
  guint fused_rows = 0;
  PpOut dy, dfused;

  memset (bank, 0, c * sizeof (float));
  for (int i = 0; i < rows; i++) {
    const int near = 1 + (int) g_rand_int_range (r->rng, 0, MAX (m - 1, 1));

    fused[i] = (float) g_rand_int_range (r->rng, 0, 4);
    for (int j = 0; i % 3 == 2 && near < m && j < c; j++)
      y[(size_t) i * c + j] = bank[(size_t) near * c + j]
          + (float) g_rand_double_range (r->rng, -0.05, 0.05);
  }
  if (rows > 0)
    memset (y, 0, c * sizeof (float));
  /* Row 2 near bank row 1, and bank row 3 four times bank row 1 plus as
   * much again at random: the largest product is bank row 3's, the
   * largest cosine (about 1 against 0.7) bank row 1's, which fuses. */
  for (int j = 0; rows > 2 && m > 3 && j < c; j++) {
    bank[(size_t) 3 * c + j] = 4.0f * (bank[(size_t) c + j]
        + (float) g_rand_double_range (r->rng, -1.0, 1.0));
    y[(size_t) 2 * c + j] = bank[(size_t) c + j]
        + (float) g_rand_double_range (r->rng, -0.05, 0.05);
  }
  for (int j = 0; j < m; j++)
    b_norms[j] = (float) ref_norm (bank + (size_t) j * c, c);
  for (int i = 0; i < rows; i++) {
    y_norms[i] = (float) ref_norm (y + (size_t) i * c, c);
    for (int j = 0; j < m; j++) {
      double dot = 0.0;

      for (int k = 0; k < c; k++)
        dot += (double) y[(size_t) i * c + k] * bank[(size_t) j * c + k];
      sim[(size_t) i * m + j] = (float) dot;
    }
  }
  if (rows > 1 && m > 2) {
    b_norms[2] = b_norms[1];
    sim[(size_t) m + 2] = sim[(size_t) m + 1] = 0.99f * y_norms[1]
        * b_norms[1];
  }
  dy = upload_out (r, y, ny);
  dfused = upload_out (r, fused, rows);
  pp_bank_fuse (r->be, upload_in (r, sim, (size_t) rows * m), rows, m, c,
      upload_in (r, y_norms, rows), upload_in (r, b_norms, m),
      upload_in (r, bank, nb), threshold, strength, dy, dfused);
  for (int i = 0; i < rows; i++) {
    const float *si = sim + (size_t) i * m;
    const int found = ref_choice (si, b_norms, m, 0);
    const int at = found < 0 ? 0 : found;
    const gboolean take = pp_math_cosine (si[at], y_norms[i], b_norms[at])
        >= threshold;

    for (int j = 0; j < c; j++) {
      const double yi = y[(size_t) i * c + j];

      ref[(size_t) i * c + j] = take ? (1.0 - strength) * yi + strength
          * bank[(size_t) at * c + j] : yi;
    }
    ref[ny + i] = fused[i] + (take ? 1.0 : 0.0);
    fused_rows += take;
  }
  pp_backend_synchronize (r->be);
  pp_backend_download (r->be, got, dy.data, ny * sizeof (float));
  pp_backend_download (r->be, got + ny, dfused.data, rows * sizeof (float));
  if (rows >= 3 && (fused_rows == 0 || fused_rows == (guint) rows))
    r->problem = g_strdup_printf ("%u of %d rows fused: the case tests "
        "neither both branches", fused_rows, rows);
  check (r, PP_OP_BANK_FUSE, g_strdup_printf ("%d rows, bank %dx%d", rows,
          m, c), got, ref, ny + rows, 1.0);
}

static void
cases_bank_fuse (Run * r)
{
  bank_fuse_one (r, 1, 1, 1);
  bank_fuse_one (r, 9, 5, 7);
  bank_fuse_one (r, 64, 256, 64);
  bank_fuse_one (r, 300, 41, 320);
}

/* Sources first, first + 2, … of n rows (r merged away) against random
 * products with the kept rows; norms random, one zero; the first
 * source's products all -inf (no destination: itself), the second's
 * best two a tie (the last two kept rows, of equal norms and products:
 * the first must win). */
static void
bank_merge_dest_one (Run * r, int sources, int first, int n, int r_merge)
{
  const int keep = n - r_merge;
  const size_t total = (size_t) sources * keep;
  g_autofree float *sim = random_host (r, total, 1.0);
  g_autofree float *norms = random_host (r, n, 1.0);
  g_autofree double *ref = g_new (double, sources);
  g_autofree float *got = NULL;
  const PpOut dest = device_nan (r, sources);

  for (int j = 0; j < n; j++)
    norms[j] = fabsf (norms[j]) + 0.5f;
  if (n > 3)
    norms[3] = 0.0f;
  for (int t = 0; t < keep && sources > 0; t++)
    sim[t] = -INFINITY;
  if (sources > 1 && keep >= 2) {
    const int j1 = pp_math_bank_kept (keep - 2, r_merge);
    const int j2 = pp_math_bank_kept (keep - 1, r_merge);

    norms[j1] = norms[j2] = 1.25f;
    /* a score of 4, where the random ones reach 2 */
    sim[(size_t) keep + keep - 2] = sim[(size_t) keep + keep - 1] = 5.0f;
  }
  pp_bank_merge_dest (r->be, upload_in (r, sim, total), sources, first, n,
      r_merge, upload_in (r, norms, n), dest);
  for (int q = 0; q < sources; q++) {
    const int at = ref_choice (sim + (size_t) q * keep, norms, keep,
        r_merge);

    ref[q] = at < 0 ? first + 2 * q : at;
  }
  got = download (r, dest.data, sources);
  for (int q = 0; q < sources && r->problem == NULL; q++)
    if (got[q] != ref[q])
      r->problem = g_strdup_printf ("source %d went to row %g, not %g",
          first + 2 * q, got[q], ref[q]);
  check (r, PP_OP_BANK_MERGE_DEST, g_strdup_printf ("%d sources from %d, "
          "%d of %d rows", sources, first, r_merge, n), got,
      ref, sources, 1.0);
}

static void
cases_bank_merge_dest (Run * r)
{
  bank_merge_dest_one (r, 1, 0, 3, 1);
  bank_merge_dest_one (r, 5, 4, 20, 9);
  bank_merge_dest_one (r, 64, 0, 512, 256);
  bank_merge_dest_one (r, 300, 200, 900, 450);
}

/* n rows of x, r merged away into random kept rows: one kept row gets
 * many sources, some none. */
static void
bank_merge_one (Run * r, int n, int r_merge, int c)
{
  const int keep = n - r_merge;
  const size_t total = (size_t) n * c, out = (size_t) keep * c;
  g_autofree float *x = random_host (r, total, 2.0);
  g_autofree float *dest = g_new (float, MAX (r_merge, 1));
  g_autofree double *ref = g_new (double, out);
  const PpOut y = device_nan (r, out);

  for (int q = 0; q < r_merge; q++)
    dest[q] = (float) pp_math_bank_kept (q % 3 == 0 ? keep - 1
        : (int) g_rand_int_range (r->rng, 0, keep), r_merge);
  pp_bank_merge (r->be, upload_in (r, x, total), n, r_merge, c,
      upload_in (r, dest, r_merge), y);
  for (int s = 0; s < keep; s++) {
    const int t = pp_math_bank_kept (s, r_merge);

    for (int j = 0; j < c; j++) {
      double sum = x[(size_t) t * c + j];
      int count = 1;

      for (int q = 0; q < r_merge; q++)
        if ((int) dest[q] == t) {
          sum += x[(size_t) 2 * q * c + j];
          count++;
        }
      ref[(size_t) s * c + j] = sum / count;
    }
  }
  check_device (r, PP_OP_BANK_MERGE, g_strdup_printf ("%d of %d rows x %d",
          r_merge, n, c), y, ref, out, 1.0);
}

static void
cases_bank_merge (Run * r)
{
  bank_merge_one (r, 2, 1, 1);
  bank_merge_one (r, 20, 9, 7);
  bank_merge_one (r, 512, 256, 64);
  bank_merge_one (r, 900, 450, 320);
  bank_merge_one (r, 40, 5, 2100);
}

/* ---- the run ------------------------------------------------------------ */

/* Every op's cases, indexed by PpOp: an op of PP_OPS_LIST without an entry
 * fails the run. */
static const CasesFunc op_cases[PP_OP_COUNT] = {
  [PP_OP_CONV2D] = cases_conv2d,
  [PP_OP_GROUP_NORM] = cases_group_norm,
  [PP_OP_LAYER_NORM] = cases_layer_norm,
  [PP_OP_LINEAR] = cases_linear,
  [PP_OP_LINEAR_ADD] = cases_linear_add,
  [PP_OP_ATTENTION] = cases_attention,
  [PP_OP_ATTENTION_CAUSAL] = cases_attention_causal,
  [PP_OP_SILU] = cases_silu,
  [PP_OP_RELU] = cases_relu,
  [PP_OP_TANH] = cases_tanh,
  [PP_OP_GELU] = cases_gelu,
  [PP_OP_QUICK_GELU] = cases_quick_gelu,
  [PP_OP_GEGLU] = cases_geglu,
  [PP_OP_UPSAMPLE_NEAREST] = cases_upsample_nearest,
  [PP_OP_INTERLEAVE_PHASES] = cases_interleave_phases,
  [PP_OP_RESIZE_BILINEAR] = cases_resize_bilinear,
  [PP_OP_CONCAT_CHANNELS] = cases_concat_channels,
  [PP_OP_BYTES_TO_FLOATS] = cases_bytes_to_floats,
  [PP_OP_FLOATS_TO_BYTES] = cases_floats_to_bytes,
  [PP_OP_ADD] = cases_add,
  [PP_OP_SCALE] = cases_scale,
  [PP_OP_AFFINE] = cases_affine,
  [PP_OP_AXPBY] = cases_axpby,
  [PP_OP_LCM_STEP] = cases_lcm_step,
  [PP_OP_TIMESTEP_EMBEDDING] = cases_timestep_embedding,
  [PP_OP_NCHW_TO_NLC] = cases_nchw_to_nlc,
  [PP_OP_NLC_TO_NCHW] = cases_nlc_to_nchw,
  [PP_OP_ADD_CHANNEL] = cases_add_channel,
  [PP_OP_MATMUL] = cases_matmul,
  [PP_OP_ROW_NORMS] = cases_row_norms,
  [PP_OP_BANK_FUSE] = cases_bank_fuse,
  [PP_OP_BANK_MERGE_DEST] = cases_bank_merge_dest,
  [PP_OP_BANK_MERGE] = cases_bank_merge,
  [PP_OP_FOR_ROWS] = cases_for_rows,
};

/* A failure that is no case's values: counted as a failed case. */
static void
fail_op (Run * r, PpOp op, const gchar * what)
{
  r->cases++;
  r->failed++;
  r->tally[op].cases++;
  r->tally[op].failed++;
  printf ("  %-18s FAIL: %s\n", op_name (op), what);
}

/* Runs @op's cases, which must call it through its wrapper at least once
 * each. */
static void
run_op (Run * r, PpOp op)
{
  const guint64 calls = op_calls (op);
  const guint cases = r->tally[op].cases;
  guint64 called;

  r->rng = g_rand_new_with_seed (SEED + op);
  op_cases[op] (r);
  g_rand_free (r->rng);
  called = op_calls (op) - calls;
  if (r->tally[op].cases == cases)
    fail_op (r, op, "no cases ran");
  else if (called < r->tally[op].cases - cases) {
    g_autofree gchar *what = g_strdup_printf ("its %u cases called pp_%s %"
        G_GUINT64_FORMAT " times", r->tally[op].cases - cases, op_name (op),
        called);

    fail_op (r, op, what);
  }
}

/* The PpOp named @name (pp-ops-list.h's names, and for_rows), or -1. */
static int
find_op (const gchar * name)
{
  for (int op = 0; op < PP_OP_COUNT; op++)
    if (g_str_equal (name, op_name (op)))
      return op;
  return -1;
}

static gboolean
parse_op (const gchar * option, const gchar * name, int *op, GError ** error)
{
  g_autoptr (GString) known = NULL;

  if (name == NULL)
    return TRUE;
  if ((*op = find_op (name)) >= 0)
    return TRUE;
  known = g_string_new (NULL);
  for (int o = 0; o < PP_OP_COUNT; o++)
    g_string_append_printf (known, "%s%s", o ? ", " : "", op_name (o));
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
      "%s: unknown op '%s'; the ops are %s", option, name, known->str);
  return FALSE;
}

static PpBackend *
get_backend (const gchar * name, GError ** error)
{
  GError *e = NULL;
  PpBackend *be = pp_backend_get (name, &e);

  /* A name that is none of the backends is bad usage; a backend that
   * cannot start is a failure. */
  if (be == NULL && g_error_matches (e, PP_ERROR, PP_ERROR_CONFIG)) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "%s",
        e->message);
    g_error_free (e);
  } else if (be == NULL)
    g_propagate_error (error, e);
  return be;
}

gboolean
pp_cmd_test_ops (int argc, char **argv, GError ** error)
{
  g_autofree gchar *backend = NULL, *only = NULL, *inject = NULL;
  g_autofree gchar *backend_help = g_strdup_printf ("compute backend: %s "
      "(default $%s, else auto)", pp_backend_names (), PP_BACKEND_ENV);
  gboolean verbose = FALSE;
  GOptionEntry entries[] = {
    {"backend", 0, 0, G_OPTION_ARG_STRING, &backend, backend_help, "B"},
    {"op", 0, 0, G_OPTION_ARG_STRING, &only,
        "test this op only (a name of pp-ops-list.h, or for_rows)", "NAME"},
    {"verbose", 'v', 0, G_OPTION_ARG_NONE, &verbose,
        "print each case's bounds too", NULL},
    {"inject-error", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_STRING, &inject,
        "for testing this checker: add a wrong value to OP's outputs", "OP"},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- every op of a "
      "backend against float64 references");
  Run r = { 0 };
  int first = 0, end = PP_OP_COUNT, ops = 0;
  gint64 start;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, error))
    return FALSE;
  if (argc > 1) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
        "unexpected argument '%s'", argv[1]);
    return FALSE;
  }
  r.inject = -1;
  r.views = PP_DTYPE_F32;
  if (!parse_op ("--op", only, &first, error)
      || !parse_op ("--inject-error", inject, &r.inject, error)
      || (r.be = get_backend (backend, error)) == NULL)
    return FALSE;
  if (only != NULL)
    end = first + 1;
  r.verbose = verbose;
  r.device = g_ptr_array_new ();
  pp_ops_set_profiling (TRUE);
  start = g_get_monotonic_time ();

  printf ("test-ops on %s (%s); %s bounds: NMSE %.2g x growth (1, or the "
      "reduction length), max abs error %.2g x sqrt(growth) x max |ref|; "
      "cases of 16-bit views add NMSE %.2g and %.2g x max |ref| (F16), "
      "%.2g and %.2g (BF16)\n", pp_backend_name (r.be),
      pp_backend_device (r.be), f32_bounds.dtype, f32_bounds.nmse,
      f32_bounds.max_rel, f16_bounds.nmse_floor, f16_bounds.max_floor,
      bf16_bounds.nmse_floor, bf16_bounds.max_floor);
  /* Every op of the list, whichever --op runs. */
  for (int op = 0; op < PP_OP_COUNT; op++)
    if (op_cases[op] == NULL) {
      g_autofree gchar *what = g_strdup_printf ("op %s has no reference",
          op_name (op));

      fail_op (&r, op, what);
    }
  for (int op = first; op < end; op++) {
    ops++;
    if (op_cases[op] != NULL)
      run_op (&r, op);
  }
  printf ("test-ops on %s (%s): %d ops, %u cases, %u passed, %u failed "
      "(%.1f s)\n", pp_backend_name (r.be), pp_backend_device (r.be), ops,
      r.cases, r.passed, r.failed,
      (g_get_monotonic_time () - start) / (double) G_USEC_PER_SEC);
  fflush (stdout);
  pp_ops_set_profiling (FALSE);
  g_ptr_array_unref (r.device);
  if (r.failed == 0)
    return TRUE;
  /* An op that gives wrong values breaks its contract. */
  g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "%u of %u cases failed "
      "on %s", r.failed, r.cases, pp_backend_name (r.be));
  return FALSE;
}
