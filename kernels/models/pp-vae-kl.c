/* ppdiffuse — AutoencoderKL (the released SD VAE) forward passes.
 *
 * Encoder: conv_in, per stage its resnets and (but the last) a stride-2
 * downsampler, the mid block (resnet, single-head attention, resnet),
 * GroupNorm, SiLU, conv_out to the moments, quant_conv.  Decoder:
 * post_quant_conv, conv_in, the mid block, per stage (channels reversed)
 * layers_per_block + 1 resnets and (but the last) a nearest ×2 upsample
 * and conv, GroupNorm, SiLU, conv_out.  The resnets have no time input;
 * every GroupNorm has eps 1e-6 and norm_num_groups groups. */
#include "pp-vae-kl.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-layers.h"
#include "pp-ops.h"

#include <string.h>

#define KERNEL 3
#define PAD 1
#define NCHW_DIMS 4
#define NORM_EPS 1e-6f
#define DOWN_STRIDE 2
#define MID_RESNETS 2
#define MAX_STAGES 8
#define MAX_CHANNELS (1 << 16)
#define MAX_LAYERS 64
#define DOWN_BLOCK "DownEncoderBlock2D"
#define UP_BLOCK "UpDecoderBlock2D"
#define WHAT "AutoencoderKL"

typedef struct
{
  PpNorm norm1, norm2;
  PpConv conv1, conv2;
  gboolean has_shortcut;
  PpConv conv_shortcut;         /* 1×1, when cin != cout */
} Resnet;

typedef struct
{
  PpNorm group_norm;
  PpLinear to_q, to_k, to_v, to_out;
} Attention;

typedef struct
{
  Resnet resnets[MID_RESNETS];
  gboolean has_attention;
  Attention attention;
} Mid;

typedef struct
{
  guint n_resnets;
  Resnet *resnets;
  gboolean has_sampler;         /* downsampler or upsampler */
  PpConv sampler;
} Stage;

typedef struct
{
  PpConv conv_in;
  guint n_stages;
  Stage *stages;
  Mid mid;
  PpNorm norm_out;
  PpConv conv_out;
} Half;

struct _PpVaeKl
{
  gchar *config_path;
  PpWeights *owned_weights;     /* set by pp_vae_kl_load */
  PpBackend *be;
  GPtrArray *device_weights;
  /* One pool per half, as in TAESD: rank 0 encodes and decodes on two
   * threads. */
  PpPool *encoder_pool;
  PpPool *decoder_pool;
  /* Of the activations between each half's conv_in and conv_out
   * (pp_backend_act_layout): the inputs, the moments and the image stay
   * NCHW. */
  PpLayout layout;
  gint in_channels, out_channels, latent_channels, groups;
  PpActFn act;
  gdouble scaling_factor, shift_factor;
  guint scale_factor;
  gboolean has_quant_conv, has_post_quant_conv;
  PpConv quant_conv, post_quant_conv;
  Half encoder, decoder;
};

/* Build */

static void
bind_resnet (PpBinder * b, Resnet * r, gint cin, gint cout,
    const gchar * prefix)
{
  pp_bind_norm (b, &r->norm1, cin, "%s.norm1", prefix);
  pp_bind_conv (b, &r->conv1, cin, cout, KERNEL, 1, PAD, TRUE, "%s.conv1",
      prefix);
  pp_bind_norm (b, &r->norm2, cout, "%s.norm2", prefix);
  pp_bind_conv (b, &r->conv2, cout, cout, KERNEL, 1, PAD, TRUE, "%s.conv2",
      prefix);
  r->has_shortcut = cin != cout;
  if (r->has_shortcut)
    pp_bind_conv (b, &r->conv_shortcut, cin, cout, 1, 1, 0, TRUE,
        "%s.conv_shortcut", prefix);
}

/* diffusers' keys, else the names of checkpoints saved before its
 * Attention class (diffusers converts those at load too). */
static void
bind_attention (PpBinder * b, Attention * a, gint c, const gchar * prefix)
{
  g_autofree gchar *probe = g_strdup_printf ("%s.query.weight", prefix);
  /* Generated weights have neither name yet: they get diffusers' own. */
  gboolean old = pp_weights_has (b->weights, probe);

  pp_bind_norm (b, &a->group_norm, c, "%s.group_norm", prefix);
  pp_bind_linear (b, &a->to_q, c, c, TRUE, "%s.%s", prefix,
      old ? "query" : "to_q");
  pp_bind_linear (b, &a->to_k, c, c, TRUE, "%s.%s", prefix,
      old ? "key" : "to_k");
  pp_bind_linear (b, &a->to_v, c, c, TRUE, "%s.%s", prefix,
      old ? "value" : "to_v");
  pp_bind_linear (b, &a->to_out, c, c, TRUE, "%s.%s", prefix,
      old ? "proj_attn" : "to_out.0");
}

static void
bind_mid (PpBinder * b, Mid * mid, gint c, gboolean attention,
    const gchar * half)
{
  for (guint i = 0; i < MID_RESNETS; i++) {
    g_autofree gchar *p = g_strdup_printf ("%s.mid_block.resnets.%u", half,
        i);

    bind_resnet (b, &mid->resnets[i], c, c, p);
  }
  mid->has_attention = attention;
  if (attention) {
    g_autofree gchar *p = g_strdup_printf ("%s.mid_block.attentions.0",
        half);

    bind_attention (b, &mid->attention, c, p);
  }
}

static void
half_clear (Half * h)
{
  for (guint i = 0; h->stages != NULL && i < h->n_stages; i++)
    g_free (h->stages[i].resnets);
  g_clear_pointer (&h->stages, g_free);
}

/* Every entry of @key must be @expected, one per stage. */
static gboolean
check_block_types (PpConfig * cfg, const gchar * key, const gchar * expected,
    guint n, GError ** error)
{
  g_auto (GStrv) types = NULL;

  if (!pp_config_has (cfg, key))
    return TRUE;
  if (!pp_config_get_string_list (cfg, key, &types, error))
    return FALSE;
  if (g_strv_length (types) != n) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' has %u entries but 'block_out_channels' has %u",
        pp_config_path (cfg), key, g_strv_length (types), n);
    return FALSE;
  }
  for (guint i = 0; i < n; i++)
    if (g_strcmp0 (types[i], expected) != 0) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: key '%s'[%u] is \"%s\"; only \"%s\" is supported",
          pp_config_path (cfg), key, i, types[i], expected);
      return FALSE;
    }
  return TRUE;
}

static gboolean
read_config (PpVaeKl * m, PpConfig * cfg, GArray ** channels,
    gint * layers, gboolean * mid_attention, GError ** error)
{
  /* Keys that change the network or the latents' scaling in ways this
   * model does not implement. */
  static const gchar *const refused[] = { "latents_mean", "latents_std",
    NULL
  };
  const gchar *path = pp_config_path (cfg);
  g_autofree gchar *act_fn = NULL;

  if (!pp_config_refuse_keys (cfg, refused, error)
      || !pp_config_get_positive_int (cfg, "in_channels", 3,
          &m->in_channels, error)
      || !pp_config_get_positive_int (cfg, "out_channels", 3,
          &m->out_channels, error)
      || !pp_config_get_positive_int (cfg, "latent_channels", 4,
          &m->latent_channels, error)
      || !pp_config_get_positive_int (cfg, "norm_num_groups", 32,
          &m->groups, error)
      || !pp_config_get_positive_int (cfg, "layers_per_block", 1, layers,
          error)
      || !pp_config_get_int_list (cfg, "block_out_channels", 0, channels,
          error)
      || !pp_config_get_string (cfg, "act_fn", "silu", &act_fn, error)
      || !pp_config_get_double (cfg, "scaling_factor", 0.18215,
          &m->scaling_factor, error)
      || !pp_config_get_double (cfg, "shift_factor", 0.0, &m->shift_factor,
          error)
      || !pp_config_get_bool (cfg, "use_quant_conv", TRUE,
          &m->has_quant_conv, error)
      || !pp_config_get_bool (cfg, "use_post_quant_conv", TRUE,
          &m->has_post_quant_conv, error)
      || !pp_config_get_bool (cfg, "mid_block_add_attention", TRUE,
          mid_attention, error)
      || !pp_config_act_fn (path, act_fn, "act_fn",
          (1u << PP_ACT_SILU) | (1u << PP_ACT_RELU), &m->act, error))
    return FALSE;
  if ((*channels)->len == 0 || (*channels)->len > MAX_STAGES) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key 'block_out_channels' has %u entries; expected 1 to %d",
        path, (*channels)->len, MAX_STAGES);
    return FALSE;
  }
  for (guint i = 0; i < (*channels)->len; i++) {
    gint64 c = g_array_index (*channels, gint64, i);

    if (c < 1 || c > MAX_CHANNELS || c % m->groups != 0) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: key 'block_out_channels'[%u] is %" G_GINT64_FORMAT
          "; expected a positive multiple of norm_num_groups (%d)", path, i,
          c, m->groups);
      return FALSE;
    }
  }
  if (*layers > MAX_LAYERS) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key 'layers_per_block' is %d; at most %d", path, *layers,
        MAX_LAYERS);
    return FALSE;
  }
  if (m->scaling_factor == 0.0) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key 'scaling_factor' is 0", path);
    return FALSE;
  }
  return check_block_types (cfg, "down_block_types", DOWN_BLOCK,
      (*channels)->len, error)
      && check_block_types (cfg, "up_block_types", UP_BLOCK,
      (*channels)->len, error);
}

#define CH(i) ((gint) g_array_index (channels, gint64, (i)))

static void
bind_encoder (PpVaeKl * m, PpBinder * b, GArray * channels, gint layers,
    gboolean mid_attention)
{
  Half *e = &m->encoder;
  const guint n = channels->len;

  pp_bind_conv (b, &e->conv_in, m->in_channels, CH (0), KERNEL, 1, PAD,
      TRUE, "encoder.conv_in");
  e->n_stages = n;
  e->stages = g_new0 (Stage, n);
  m->scale_factor = 1;
  for (guint i = 0; i < n; i++) {
    Stage *s = &e->stages[i];
    gint in = CH (i == 0 ? 0 : i - 1), out = CH (i);

    s->n_resnets = (guint) layers;
    s->resnets = g_new0 (Resnet, s->n_resnets);
    for (guint j = 0; j < s->n_resnets; j++) {
      g_autofree gchar *p = g_strdup_printf ("encoder.down_blocks.%u."
          "resnets.%u", i, j);

      bind_resnet (b, &s->resnets[j], j == 0 ? in : out, out, p);
    }
    s->has_sampler = i + 1 < n;
    if (s->has_sampler) {
      pp_bind_conv_pad_after (b, &s->sampler, out, out,
          "encoder.down_blocks.%u.downsamplers.0.conv", i);
      m->scale_factor *= DOWN_STRIDE;
    }
  }
  bind_mid (b, &e->mid, CH (n - 1), mid_attention, "encoder");
  pp_bind_norm (b, &e->norm_out, CH (n - 1), "encoder.conv_norm_out");
  /* double_z: the mean and the log-variance */
  pp_bind_conv (b, &e->conv_out, CH (n - 1), 2 * m->latent_channels, KERNEL,
      1, PAD, TRUE, "encoder.conv_out");
  if (m->has_quant_conv)
    pp_bind_conv (b, &m->quant_conv, 2 * m->latent_channels,
        2 * m->latent_channels, 1, 1, 0, TRUE, "quant_conv");
}

static void
bind_decoder (PpVaeKl * m, PpBinder * b, GArray * channels, gint layers,
    gboolean mid_attention)
{
  Half *d = &m->decoder;
  const guint n = channels->len;

  if (m->has_post_quant_conv)
    pp_bind_conv (b, &m->post_quant_conv, m->latent_channels,
        m->latent_channels, 1, 1, 0, TRUE, "post_quant_conv");
  pp_bind_conv (b, &d->conv_in, m->latent_channels, CH (n - 1), KERNEL, 1,
      PAD, TRUE, "decoder.conv_in");
  bind_mid (b, &d->mid, CH (n - 1), mid_attention, "decoder");
  d->n_stages = n;
  d->stages = g_new0 (Stage, n);
  for (guint i = 0; i < n; i++) {
    Stage *s = &d->stages[i];
    gint in = CH (i == 0 ? n - 1 : n - i), out = CH (n - 1 - i);

    s->n_resnets = (guint) layers + 1;
    s->resnets = g_new0 (Resnet, s->n_resnets);
    for (guint j = 0; j < s->n_resnets; j++) {
      g_autofree gchar *p = g_strdup_printf ("decoder.up_blocks.%u."
          "resnets.%u", i, j);

      bind_resnet (b, &s->resnets[j], j == 0 ? in : out, out, p);
    }
    s->has_sampler = i + 1 < n;
    if (s->has_sampler)
      pp_bind_conv_up2 (b, &s->sampler, out, out, TRUE,
          "decoder.up_blocks.%u.upsamplers.0.conv", i);
  }
  pp_bind_norm (b, &d->norm_out, CH (0), "decoder.conv_norm_out");
  pp_bind_conv (b, &d->conv_out, CH (0), m->out_channels, KERNEL, 1, PAD,
      TRUE, "decoder.conv_out");
}

#undef CH

PpVaeKl *
pp_vae_kl_new (const gchar * config_path, PpWeights * weights,
    PpBackend * be, GError ** error)
{
  g_autoptr (PpVaeKl) m = g_new0 (PpVaeKl, 1);
  g_autoptr (GArray) channels = NULL;
  PpBinder b = pp_binder_init (weights, be);
  gboolean mid_attention = TRUE, ok;
  gint layers = 1;
  PpConfig *cfg;
  PpDType act_dtype;

  m->config_path = g_strdup (config_path);
  m->be = be;
  cfg = pp_config_load (config_path, error);
  if (cfg == NULL)
    return NULL;
  ok = read_config (m, cfg, &channels, &layers, &mid_attention, error);
  pp_config_free (cfg);
  if (!ok)
    return NULL;
  bind_encoder (m, &b, channels, layers, mid_attention);
  bind_decoder (m, &b, channels, layers, mid_attention);
  if (!pp_binder_finish (&b, error))
    return NULL;
  m->device_weights = b.device;
  /* Activations in the weights' dtype where the backend computes on them
   * (pp_backend_act_dtype). */
  act_dtype = pp_backend_act_dtype (be, m->encoder.conv_in.weight.dtype);
  m->encoder_pool = pp_pool_new (be, act_dtype);
  m->decoder_pool = pp_pool_new (be, act_dtype);
  m->layout = pp_backend_act_layout (be, act_dtype);
  return g_steal_pointer (&m);
}

PpVaeKl *
pp_vae_kl_load (const gchar * component_dir, PpBackend * be, PpDType dtype,
    GError ** error)
{
  PpWeights *weights = NULL;
  PpVaeKl *m = pp_component_load (component_dir, be, dtype,
      (PpComponentNewFunc) pp_vae_kl_new, (GDestroyNotify) pp_vae_kl_free,
      NULL, 0, &weights, error);

  if (m != NULL)
    m->owned_weights = weights;
  return m;
}

PpVaeKl *
pp_vae_kl_load_weights (const gchar * config_path, PpWeights * w,
    PpBackend * be, PpDType dtype, GError ** error)
{
  PpWeights *weights = NULL;
  PpVaeKl *m = pp_component_build (config_path, w, be, dtype,
      (PpComponentNewFunc) pp_vae_kl_new, (GDestroyNotify) pp_vae_kl_free,
      NULL, 0, &weights, error);

  if (m != NULL)
    m->owned_weights = weights;
  return m;
}

void
pp_vae_kl_free (PpVaeKl * m)
{
  if (m == NULL)
    return;
  g_free (m->config_path);
  half_clear (&m->encoder);
  half_clear (&m->decoder);
  pp_device_weights_free (m->be, m->device_weights);
  g_clear_pointer (&m->encoder_pool, pp_pool_free);
  g_clear_pointer (&m->decoder_pool, pp_pool_free);
  g_clear_pointer (&m->owned_weights, pp_weights_free);
  g_free (m);
}

void
pp_vae_kl_pools (PpVaeKl * m, PpPoolBytes * sum)
{
  pp_pool_count (m->encoder_pool, sum);
  pp_pool_count (m->decoder_pool, sum);
}

guint
pp_vae_kl_latent_channels (PpVaeKl * m)
{
  return m->latent_channels;
}

guint
pp_vae_kl_scale_factor (PpVaeKl * m)
{
  return m->scale_factor;
}

/* Forward */

/* The group norm, then the activation when @act: SiLU in the norm's own
 * pass. */
static PpAct
norm_act (const PpVaeKl * m, const PpNorm * norm, const PpAct * x,
    gboolean act)
{
  PpAct y = pp_act_new (x->pool, x->n, x->c, x->h, x->w);
  const gboolean silu = act && m->act == PP_ACT_SILU;

  y.layout = x->layout;
  pp_group_norm (m->be, pp_act_in (x), pp_view_none (), x->n, x->c, x->h * x->w,
      m->groups, NORM_EPS, norm->gamma, norm->beta, silu, pp_act_out (&y));
  if (act && !silu)
    pp_act_fn_apply (m->act, &y);
  return y;
}

/* ResnetBlock2D without a time input: shortcut(x) +
 * conv2(act(norm2(conv1(act(norm1(x)))))). */
static PpAct
resnet_forward (const PpVaeKl * m, const Resnet * r, const PpAct * x)
{
  PpAct h = norm_act (m, &r->norm1, x, TRUE), out;

  pp_act_replace (&h, pp_conv_apply (&r->conv1, &h));
  pp_act_replace (&h, norm_act (m, &r->norm2, &h, TRUE));
  pp_act_replace (&h, pp_conv_apply (&r->conv2, &h));
  /* Without a shortcut, h += x: the sum's bits either way (addition
   * commutes), without a copy of x. */
  if (!r->has_shortcut) {
    pp_add (m->be, pp_act_out (&h), pp_act_in (x), pp_act_numel (&h));
    return h;
  }
  out = pp_conv_apply (&r->conv_shortcut, x);
  pp_add (m->be, pp_act_out (&out), pp_act_in (&h), pp_act_numel (&out));
  pp_act_clear (&h);
  return out;
}

/* Attention over the H·W positions with one head of all C channels and a
 * residual: x + to_out(attention(q, k, v of group_norm(x))).  Channels
 * last, the norm's rows are the tokens and the output's rows are the
 * residual's. */
static PpAct
attention_forward (const PpVaeKl * m, const Attention * a, const PpAct * x)
{
  const gint hw = x->h * x->w;
  const gboolean nhwc = x->layout == PP_LAYOUT_NHWC;
  PpAct h = norm_act (m, &a->group_norm, x, FALSE);
  PpAct t, q, k, v, o, out;

  if (nhwc)
    t = pp_act_view (x->pool, h.data, h.dtype, x->n, hw, 1, x->c);
  else {
    t = pp_act_new (x->pool, x->n, hw, 1, x->c);
    pp_nchw_to_nlc (m->be, pp_act_in (&h), x->n, x->c, hw,
        pp_act_out (&t));
  }
  q = pp_linear_apply (&a->to_q, &t);
  k = pp_linear_apply (&a->to_k, &t);
  v = pp_linear_apply (&a->to_v, &t);
  pp_act_clear (&t);
  pp_act_clear (&h);
  o = pp_act_new (x->pool, x->n, hw, 1, x->c);
  pp_attention (m->be, pp_act_in (&q), pp_act_in (&k), pp_act_in (&v), x->n,
      hw, hw, 1, x->c, x->c, x->c, a->to_q.weight.dtype, pp_act_out (&o));
  pp_act_clear (&q);
  pp_act_clear (&k);
  pp_act_clear (&v);
  pp_act_replace (&o, pp_linear_apply (&a->to_out, &o));
  if (nhwc) {
    /* The tokens [n, hw, c] are the channels-last tensor itself. */
    out = o;
    out.c = x->c;
    out.h = x->h;
    out.w = x->w;
    out.layout = PP_LAYOUT_NHWC;
  } else {
    out = pp_act_new (x->pool, x->n, x->c, x->h, x->w);
    pp_nlc_to_nchw (m->be, pp_act_in (&o), x->n, x->c, hw,
        pp_act_out (&out));
    pp_act_clear (&o);
  }
  pp_add (m->be, pp_act_out (&out), pp_act_in (x), pp_act_numel (&out));
  return out;
}

static PpAct
mid_forward (const PpVaeKl * m, const Mid * mid, PpAct x)
{
  pp_act_replace (&x, resnet_forward (m, &mid->resnets[0], &x));
  if (mid->has_attention)
    pp_act_replace (&x, attention_forward (m, &mid->attention, &x));
  pp_act_replace (&x, resnet_forward (m, &mid->resnets[1], &x));
  return x;
}

/* The resnets of @s over @x (consumed). */
static PpAct
stage_resnets (const PpVaeKl * m, const Stage * s, PpAct x)
{
  for (guint j = 0; j < s->n_resnets; j++)
    pp_act_replace (&x, resnet_forward (m, &s->resnets[j], &x));
  return x;
}

static PpAct
encoder_forward (const PpVaeKl * m, PpAct x, PpTapFunc tap,
    gpointer tap_data)
{
  const Half *e = &m->encoder;

  pp_act_replace (&x, pp_conv_apply_laid (&e->conv_in, &x, m->layout));
  pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "encoder.conv_in");
  for (guint i = 0; i < e->n_stages; i++) {
    const Stage *s = &e->stages[i];

    x = stage_resnets (m, s, x);
    if (s->has_sampler)
      pp_act_replace (&x, pp_conv_apply (&s->sampler, &x));
    pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "encoder.down_blocks.%u", i);
  }
  x = mid_forward (m, &e->mid, x);
  pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "encoder.mid_block");
  pp_act_replace (&x, norm_act (m, &e->norm_out, &x, TRUE));
  pp_act_replace (&x, pp_conv_apply_laid (&e->conv_out, &x,
          PP_LAYOUT_NCHW));
  pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "encoder.conv_out");
  if (m->has_quant_conv) {
    pp_act_replace (&x, pp_conv_apply (&m->quant_conv, &x));
    pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "quant_conv");
  }
  return x;
}

static PpAct
decoder_forward (const PpVaeKl * m, PpAct x, PpTapFunc tap,
    gpointer tap_data)
{
  const Half *d = &m->decoder;

  if (m->has_post_quant_conv) {
    pp_act_replace (&x, pp_conv_apply (&m->post_quant_conv, &x));
    pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "post_quant_conv");
  }
  pp_act_replace (&x, pp_conv_apply_laid (&d->conv_in, &x, m->layout));
  pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "decoder.conv_in");
  x = mid_forward (m, &d->mid, x);
  pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "decoder.mid_block");
  for (guint i = 0; i < d->n_stages; i++) {
    const Stage *s = &d->stages[i];

    x = stage_resnets (m, s, x);
    if (s->has_sampler)
      pp_act_replace (&x, pp_conv_up2_apply (&s->sampler, &x));
    pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "decoder.up_blocks.%u", i);
  }
  pp_act_replace (&x, norm_act (m, &d->norm_out, &x, TRUE));
  pp_act_replace (&x, pp_conv_apply_laid (&d->conv_out, &x,
          PP_LAYOUT_NCHW));
  return x;
}

static gboolean
encode (PpVaeKl * m, const PpTensor * image, PpTensor ** latents,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  const gint l = m->latent_channels;
  PpAct x, mean;
  gsize plane;

  if (!pp_act_from_tensor (m->encoder_pool, image, WHAT " encode input",
          m->in_channels, m->scale_factor, &x, error))
    return FALSE;
  x = encoder_forward (m, x, tap, tap_data);
  /* The mean: each sample's first latent_channels of the moments. */
  mean = pp_act_new (x.pool, x.n, l, x.h, x.w);
  plane = (gsize) l * x.h * x.w;
  /* A byte copy: the moments and the mean are stored alike. */
  g_assert (mean.dtype == x.dtype);
  for (gint i = 0; i < x.n; i++)
    pp_backend_copy (m->be, pp_out_range (pp_act_out (&mean), i * plane,
            plane).data, pp_view_range (pp_act_in (&x), 2 * i * plane,
            plane).data, plane * pp_dtype_size (x.dtype));
  pp_act_clear (&x);
  pp_affine (m->be, pp_act_out (&mean), pp_act_numel (&mean),
      (gfloat) m->scaling_factor,
      (gfloat) (-m->shift_factor * m->scaling_factor));
  pp_tap_act (tap, tap_data, &mean, NCHW_DIMS, "latents");
  return pp_act_to_tensor (&mean, WHAT " latents", "latents",
      image->backend != NULL, latents, error);
}

static gboolean
decode (PpVaeKl * m, const PpTensor * latents, PpTensor ** image,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  PpAct x;

  if (!pp_act_from_tensor (m->decoder_pool, latents, WHAT " decode input",
          m->latent_channels, 1, &x, error))
    return FALSE;
  pp_affine (m->be, pp_act_out (&x), pp_act_numel (&x),
      (gfloat) (1.0 / m->scaling_factor), (gfloat) m->shift_factor);
  x = decoder_forward (m, x, tap, tap_data);
  pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "image");
  return pp_act_to_tensor (&x, WHAT " image", "image",
      latents->backend != NULL, image, error);
}

gboolean
pp_vae_kl_encode (PpVaeKl * m, const PpTensor * image, PpTensor ** latents,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  *latents = NULL;
  return encode (m, image, latents, tap, tap_data, error);
}

gboolean
pp_vae_kl_decode (PpVaeKl * m, const PpTensor * latents, PpTensor ** image,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  *image = NULL;
  return decode (m, latents, image, tap, tap_data, error);
}

gboolean
pp_vae_kl_encode_into (PpVaeKl * m, const PpTensor * image,
    PpTensor * latents, GError ** error)
{
  return encode (m, image, &latents, NULL, NULL, error);
}

gboolean
pp_vae_kl_decode_into (PpVaeKl * m, const PpTensor * latents,
    PpTensor * image, GError ** error)
{
  return decode (m, latents, &image, NULL, NULL, error);
}

PpLayout
pp_vae_kl_act_layout (PpVaeKl * m)
{
  return m->layout;
}
