/* ppdiffuse — what the models in kernels/models share: layers bound to
 * named weights, NCHW activation buffers, taps and config checks.
 * Private to kernels/models. */
#pragma once

#include "pp-backend.h"
#include "pp-config.h"
#include "pp-lora.h"
#include "pp-tap.h"
#include "pp-weights.h"

G_BEGIN_DECLS

/* An activation: [N, C, H, W] in device memory of @pool's backend, stored
 * as @dtype and laid out as @layout (NCHW, or NHWC: channels last), taken
 * from @pool (or a view of memory someone else owns).  Model code never
 * dereferences @data, nor does arithmetic on it: it hands the activation
 * to ops as a view (pp_act_in, pp_act_out, and pp_view_range /
 * pp_out_range for a part), which carries its dtype and layout.  Token
 * sequences [N, L, C] are stored as n = N, c = L, h = 1, w = C, laid out
 * NCHW (their rows are the tokens). */
typedef struct
{
  gpointer data;
  PpDType dtype;
  gint n, c, h, w;
  PpPool *pool;
  gboolean view;                /* borrowed: clearing does not release it */
  PpLayout layout;
} PpAct;

/* Layers hold typed views of their weights (stored as the backend chose,
 * pp_backend_upload_weights): on backends that compute on host memory,
 * into PpWeights (which owns the data) or rounded copies; elsewhere into
 * copies the model owns (PpBinder.device). */
typedef struct
{
  PpView weight;                /* [cout, cin, kernel, kernel] */
  PpView bias;                  /* [cout], or none */
  gint cin, cout, kernel, stride, pad;
  /* Bound by pp_bind_conv_up2 as the four output phases of a 3×3
   * convolution of a nearest ×2 upsampling: weight [4·cout, cin, 2, 2],
   * bias [4·cout] (or none), kernel 2, padding 1. */
  gboolean phases;
} PpConv;

typedef struct
{
  PpView weight;                /* [out, in] */
  PpView bias;                  /* [out], or none */
  gint in, out;
} PpLinear;

/* GroupNorm or LayerNorm affine parameters. */
typedef struct
{
  PpView gamma;
  PpView beta;
  gint channels;
} PpNorm;

/* Binding: every call formats a key prefix and asks @weights for the
 * tensors under it with the exact diffusers shape. The first failure is
 * kept in @error and later calls do nothing, so a build function binds
 * everything and checks once at the end. */
typedef struct
{
  PpWeights *weights;
  PpBackend *be;
  /* Device copies of the weights, for the model to free
   * (pp_device_weights_free); NULL entries never. */
  GPtrArray *device;
  GError *error;
} PpBinder;

/* A binder for @weights on @be; its device array must go to the model. */
PpBinder pp_binder_init   (PpWeights * weights, PpBackend * be);
/* Frees the device weights a binder uploaded (NULL is fine). */
void     pp_device_weights_free (PpBackend * be, GPtrArray * device);

void     pp_bind_conv     (PpBinder * b, PpConv * conv, gint cin, gint cout,
                           gint kernel, gint stride, gint pad,
                           gboolean with_bias, const gchar * fmt, ...)
                           G_GNUC_PRINTF (9, 10);
void     pp_bind_linear   (PpBinder * b, PpLinear * lin, gint in, gint out,
                           gboolean with_bias, const gchar * fmt, ...)
                           G_GNUC_PRINTF (6, 7);
/* @n linears of one input and no bias ([@out, @in] weights under
 * @prefixes, a NULL-terminated array of @n), bound as one: @stacked's
 * weight is theirs one after another ([n·out, in], a copy the model owns),
 * so that one product computes them all (a fused QKV projection), and each
 * of @parts (@n of them) is a view of its rows. */
void     pp_bind_linear_stacked (PpBinder * b, PpLinear * stacked,
                           PpLinear * parts, guint n, gint in, gint out,
                           const gchar * const *prefixes);
/* @n linears of one input (@in) and @outs[i] outputs each, bound as one:
 * @stacked's weight is theirs one after another ([Σ outs, in], the
 * weights under @weights[i], a NULL-terminated array of @n) and, with
 * @biases, its bias part by part the
 * sum of the biases under @biases[i] (a NULL-terminated list each, added
 * as pp_bind_bias_sum adds them), copies the model owns; each of @parts
 * is a view of its rows and of its bias.  One product of a row then
 * computes them all (a UNet's time embedding projections). */
void     pp_bind_linear_concat (PpBinder * b, PpLinear * stacked,
                           PpLinear * parts, guint n, gint in,
                           const gint * outs,
                           const gchar * const *weights,
                           const gchar * const *const *biases);
/* The sum of the [@n] biases under @prefixes (a NULL-terminated list of
 * at least one), added in float32 in their order and stored once as a
 * weight the model owns: biases that reach the same values (a ResNet's
 * conv1 bias and its time embedding's) added in one pass.  Each bias is
 * checked as pp_bind_linear would. */
PpView   pp_bind_bias_sum (PpBinder * b, gint n,
                           const gchar * const *prefixes);
void     pp_bind_norm     (PpBinder * b, PpNorm * norm, gint channels,
                           const gchar * fmt, ...) G_GNUC_PRINTF (4, 5);
/* A 3×3 stride-2 convolution that diffusers' Downsample2D (padding 0)
 * applies after padding one zero row and column at the bottom and right.
 * Bound as a 4×4 kernel with a zero first row and column, stride 2 and
 * symmetric padding 1, which reads the same pixels with the same weights,
 * so the ops need no asymmetric padding. */
void     pp_bind_conv_pad_after (PpBinder * b, PpConv * conv, gint cin,
                           gint cout, const gchar * fmt, ...)
                           G_GNUC_PRINTF (5, 6);
/* A 3×3 convolution (stride 1, padding 1) of the nearest ×2 upsampling of
 * its input (diffusers' Upsample2D, TAESD's upsample and the convolution
 * after it), run by pp_conv_up2_apply.  Each output pixel (2i + a, 2j +
 * b) reads only input rows i - 1 + a … i + a and columns j - 1 + b … j +
 * b, the upsampled rows and columns it reads twice being one input
 * pixel: so the output is four phases, each a 2×2 convolution of the
 * input itself (padding 1) whose taps are sums of the 3×3 kernel's,
 * summed here once in float32 and stored as the weights are.  About 4/9
 * of the FLOPs, no upsampled activation, and an output four times as
 * wide as the convolution's (4·cout channels), interleaved by
 * interleave_phases.
 * $PPDIFFUSE_UPSAMPLE_CONV=upsample binds the 3×3 kernel as it is (the
 * upsampling and the convolution apart); phases, or unset, the phases;
 * anything else is a binding error naming the choices. */
void     pp_bind_conv_up2 (PpBinder * b, PpConv * conv, gint cin,
                           gint cout, gboolean with_bias,
                           const gchar * fmt, ...) G_GNUC_PRINTF (6, 7);
/* Hands the first binding error to @error; FALSE when there was one. */
gboolean pp_binder_finish (PpBinder * b, GError ** error);

/* A new activation (uninitialised) in @pool's activation dtype
 * (pp_pool_act_dtype), or in @dtype. */
PpAct    pp_act_new       (PpPool * pool, gint n, gint c, gint h, gint w);
PpAct    pp_act_new_as    (PpPool * pool, PpDType dtype, gint n, gint c,
                           gint h, gint w);
/* *@a in @dtype (a converted copy from its pool replaces it; nothing when
 * it is of @dtype already). */
void     pp_act_convert   (PpAct * a, PpDType dtype);
/* *@a laid out as @layout (a copy from its pool, transposed, replaces it;
 * nothing when it is so laid out already). */
void     pp_act_lay       (PpAct * a, PpLayout layout);
/* A view of @data (device memory of @pool's backend, stored as @dtype,
 * laid out NCHW) as an activation. */
PpAct    pp_act_view      (PpPool * pool, gpointer data, PpDType dtype,
                           gint n, gint c, gint h, gint w);
PpAct    pp_act_copy      (const PpAct * a);
/* @a whole, as an op's input or output. */
PpView   pp_act_in        (const PpAct * a);
PpOut    pp_act_out       (const PpAct * a);
PpBackend *pp_act_backend (const PpAct * a);
void     pp_act_clear     (PpAct * a);
gsize    pp_act_numel     (const PpAct * a);
/* Its size in bytes. */
gsize    pp_act_bytes     (const PpAct * a);
/* Frees *@dst and moves @src into it. */
void     pp_act_replace   (PpAct * dst, PpAct src);

/* conv(x), laid out as @x is; or as @layout (a model's edges: its input
 * and output are NCHW whatever its activations are). */
PpAct    pp_conv_apply    (const PpConv * conv, const PpAct * x);
PpAct    pp_conv_apply_laid (const PpConv * conv, const PpAct * x,
                           PpLayout layout);
/* @x upsampled @factor times, nearest neighbour, laid out as @x is. */
PpAct    pp_act_upsample  (const PpAct * x, gint factor);
/* A convolution bound by pp_bind_conv_up2 applied to the nearest ×2
 * upsampling of @x, laid out as @x is: [n, cout, 2h, 2w]. */
PpAct    pp_conv_up2_apply (const PpConv * conv, const PpAct * x);
/* relu(conv(x)) in one op, laid out as @x is. */
PpAct    pp_conv_relu_apply (const PpConv * conv, const PpAct * x);
/* conv(x) + @residual (of the output's shape, laid out as @x is), and its
 * relu with @relu, in one op: a residual connection. */
PpAct    pp_conv_residual_apply (const PpConv * conv, const PpAct * x,
                           const PpAct * residual, gboolean relu);
/* Rows of @x ([rows, lin->in], rows = n·c·h) → [rows, lin->out]; one
 * sample's rows at a time on a backend that runs samples apart
 * (pp_backend_samples_apart), so that a sample's bytes do not depend on
 * the batch it comes in. */
PpAct    pp_linear_apply  (const PpLinear * lin, const PpAct * x);

/* Checks that @t is float32 [N, @channels, H, W] with H and W multiples of
 * @multiple, on the host or on @pool's backend, and copies it into a new
 * activation from @pool, in the pool's dtype.  Errors start with @what
 * ("TAESD encode input"). */
gboolean pp_act_from_tensor (PpPool * pool, const PpTensor * t,
                             const gchar * what, gint channels,
                             guint multiple, PpAct * out, GError ** error);
/* Copies @a (converted to float32, laid out NCHW) into *@out and releases @a: into *@out
 * when it is set (it must be a float32 tensor on @a's backend of @a's
 * size), else into a new tensor named @name, on the device when @device.
 * Errors start with @what. */
gboolean pp_act_to_tensor   (PpAct * a, const gchar * what,
                             const gchar * name, gboolean device,
                             PpTensor ** out, GError ** error);

/* Calls @tap (when set) with a float32 host copy of @a named by @fmt. */
void     pp_tap_act       (PpTapFunc tap, gpointer tap_data, const PpAct * a,
                           guint ndim, const gchar * fmt, ...)
                           G_GNUC_PRINTF (5, 6);

/* The activation functions configs may name (diffusers get_activation). */
typedef enum
{
  PP_ACT_RELU,
  PP_ACT_SILU,
} PpActFn;

/* Reads string key @key (default @def) and maps it to an activation among
 * @allowed (a bit mask of 1 << PpActFn). */
gboolean pp_config_act_fn (const gchar * path, const gchar * value,
                           const gchar * key, guint allowed, PpActFn * out,
                           GError ** error);
void     pp_act_fn_apply  (PpActFn fn, PpAct * x);

/* Refuses a config that sets any of @keys (NULL-terminated) to something
 * other than null, false, or a list of false: features that change the
 * network in ways these models do not implement. */
gboolean pp_config_refuse_keys (PpConfig * cfg, const gchar * const * keys,
                                GError ** error);

/* A diffusers component directory: DIR/config.json and DIR's weights file. */
#define PP_COMPONENT_CONFIG "config.json"

typedef gpointer (*PpComponentNewFunc) (const gchar * config_path,
    PpWeights * weights, PpBackend * be, GError ** error);

/* The class @component_dir's config.json names (diffusers'
 * "_class_name"), or NULL when it names none or cannot be read (the
 * loader then says what is missing). */
gchar   *pp_component_class (const gchar * component_dir);

/* Builds a component from @component_dir with @make, its weights stored as
 * @dtype on @be (0: the backend's default), and checks that it used every
 * tensor of the weights file.  On success *@weights holds the weights,
 * which the component's data points into: the caller keeps them alive.
 * With @lora, its pairs that target @target are fused into the weights
 * first (pp-lora.h). */
gpointer pp_component_load (const gchar * component_dir, PpBackend * be,
    PpDType dtype, PpComponentNewFunc make, GDestroyNotify free_component,
    PpLora * lora, PpLoraTarget target, PpWeights ** weights,
    GError ** error);
/* The same from config file @config_path and weights @w (taken: freed on
 * failure, handed to *@weights on success), for weights that are not a
 * component directory's own file (a single-file checkpoint's part). */
gpointer pp_component_build (const gchar * config_path, PpWeights * w,
    PpBackend * be, PpDType dtype, PpComponentNewFunc make,
    GDestroyNotify free_component, PpLora * lora, PpLoraTarget target,
    PpWeights ** weights, GError ** error);

G_END_DECLS
