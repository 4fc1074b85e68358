/* ppdiffuse — UNet2DConditionModel forward pass (SD 1.x / SD 2.x layouts).
 *
 * The build step binds every weight by its diffusers key; the forward pass
 * follows diffusers' module order: time embedding, conv_in, down blocks
 * (pushing skips), mid block, up blocks (popping skips), output head. */
#include "pp-unet.h"
#include "pp-feature-bank.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-layers.h"
#include "pp-ops.h"

#include <string.h>

#define NCHW_DIMS 4
#define TOKENS_DIMS 3
#define VECTOR_ROWS_DIMS 2
#define KERNEL 3
#define PAD 1
#define DOWN_STRIDE 2
/* Positional time embedding widens C0 by this for the MLP. */
#define TIME_EMBED_MULT 4
/* Transformer2DModel's GroupNorm and BasicTransformerBlock's LayerNorms. */
#define TRANSFORMER_GROUP_NORM_EPS 1e-6f
#define TRANSFORMER_LAYER_NORM_EPS 1e-5f
/* FeedForward: GEGLU projects to 2 × (4 C) = value and gate halves. */
#define FF_MULT 4
#define GEGLU_HALVES 2
#define MID_RESNETS 2

#define DOWN_CROSS "CrossAttnDownBlock2D"
#define DOWN_PLAIN "DownBlock2D"
#define UP_CROSS "CrossAttnUpBlock2D"
#define UP_PLAIN "UpBlock2D"
#define MID_CROSS "UNetMidBlock2DCrossAttn"

/* diffusers UNet2DConditionModel defaults for keys a config may omit */
#define DEFAULT_CHANNELS 4
#define DEFAULT_LAYERS_PER_BLOCK 2
#define DEFAULT_CROSS_DIM 1280
#define DEFAULT_HEADS 8
#define DEFAULT_GROUPS 32
#define DEFAULT_NORM_EPS 1e-5
#define DEFAULT_DOWNSAMPLE_PADDING 1
/* Sanity bounds that keep sizes within int arithmetic. */
#define MAX_CHANNELS (1 << 16)
#define MAX_LAYERS 64
/* Set to 1 (read when the model is built): no cross-attention K/V cache,
 * the projections run on every forward. */
#define NO_KV_CACHE_ENV "PPDIFFUSE_NO_KV_CACHE"

typedef struct
{
  gint cin, cout;
  PpNorm norm1, norm2;
  PpConv conv1, conv2;
  /* Its bias is conv1's and its own, summed; on a backend that stacks
   * projections a view of PpUnet.time_proj's rows from @time_offset. */
  PpLinear time_emb_proj;
  gint time_offset;
  gboolean has_shortcut;
  PpConv conv_shortcut;         /* 1×1, when cin != cout */
} Resnet;

/* The resnets in forward order with their key prefixes, for their time
 * embedding projections, bound once all are known
 * (bind_time_projections). */
typedef struct
{
  GPtrArray *resnets;           /* Resnet * */
  GPtrArray *prefixes;          /* gchar *, owned */
} TimeBinds;

typedef struct
{
  PpLinear to_q, to_k, to_v, to_out;
  /* Self-attention on a backend that stacks projections (a GPU): to_q,
   * to_k and to_v stacked ([3C, C]), one product for the three (their
   * weights are views of its rows); else none. */
  PpLinear qkv;
} Attention;

/* A fused QKV's rows: q, k and v side by side. */
#define QKV_PARTS 3

/* Transformer2DModel with one BasicTransformerBlock. */
typedef struct
{
  gint channels, heads;
  PpNorm norm;
  /* Linear, or a 1×1 conv whose [C, C, 1, 1] weight reads as [C, C]: on
   * tokens both are the same product. */
  PpLinear proj_in, proj_out;
  PpNorm norm1, norm2, norm3;
  Attention attn1, attn2;
  PpLinear ff_in, ff_out;
  /* A temporal feature bank fuses this self-attention's outputs (the mid
   * block's and the first half of the up blocks', as StreamV2V's). */
  gboolean fuse;
} Transformer;

typedef struct
{
  gboolean cross;
  guint n_layers;
  Resnet *resnets;
  Transformer *attentions;      /* n_layers of them when cross, else NULL */
  gboolean has_sampler;
  PpConv sampler;               /* downsamplers.0.conv / upsamplers.0.conv */
} Block;

/* One cross-attention's to_k / to_v of the cached context, from the pool. */
typedef struct
{
  PpAct k, v;
} KvEntry;

/* The cross-attention K/V cache (docs/operator/cache-lifecycle.md): the
 * projections of one context, one entry per cross-attention in forward
 * order, filled by the first forward that sees the context. */
typedef struct
{
  gboolean enabled;             /* off with PPDIFFUSE_NO_KV_CACHE=1 */
  const PpTensor *context;      /* what the entries project; NULL: none */
  gconstpointer context_data;
  GArray *entries;              /* KvEntry */
  gboolean active;              /* this forward reads or fills entries */
  guint next;                   /* this forward's next entry */
  guint64 builds;
} KvCache;

struct _PpUnet
{
  gchar *config_path;
  PpWeights *owned_weights;     /* set by pp_unet_load */
  PpBackend *be;
  GPtrArray *device_weights;    /* uploaded copies, on backends that need
                                 * them */
  PpPool *pool;                 /* activations, reused across forwards */
  /* Of the spatial activations between conv_in and conv_out
   * (pp_backend_act_layout): the input and output stay NCHW. */
  PpLayout layout;
  GMutex forward_lock;
  KvCache *kv;
  /* The temporal feature bank the next forwards use, or NULL: the
   * caller's (pp_unet_set_bank). */
  PpFeatureBank *bank;
  PpAct *skip_stack;            /* n_skips */
  guint n_skips;

  gint in_channels, out_channels, cross_dim, groups;
  gfloat norm_eps, freq_shift, mid_scale;
  gboolean flip_sin_to_cos, linear_projection;
  PpActFn act;
  guint n_blocks;
  guint size_multiple;
  gint time_dim, temb_dim;

  PpLinear time_linear_1, time_linear_2;
  /* On a backend that stacks projections, every resnet's time embedding
   * projection as one linear (their rows one after another in forward
   * order): one product for a forward of one sample. */
  PpLinear time_proj;
  gboolean time_proj_stacked;
  PpConv conv_in;
  Block *down;
  Resnet mid_resnets[MID_RESNETS];
  Transformer mid_attention;
  Block *up;
  PpNorm norm_out;
  PpConv conv_out;
};

/* Build */

/* Binds resnet @r but for its time embedding projection, which
 * @time_binds collects. */
static void
bind_resnet (PpBinder * b, Resnet * r, gint cin, gint cout,
    TimeBinds * time_binds, const gchar * prefix)
{
  r->cin = cin;
  r->cout = cout;
  pp_bind_norm (b, &r->norm1, cin, "%s.norm1", prefix);
  /* conv1's bias is added with the time embedding's projection (its
   * bias is the two summed at load): see resnet_forward. */
  pp_bind_conv (b, &r->conv1, cin, cout, KERNEL, 1, PAD, FALSE, "%s.conv1",
      prefix);
  g_ptr_array_add (time_binds->resnets, r);
  g_ptr_array_add (time_binds->prefixes, g_strdup (prefix));
  pp_bind_norm (b, &r->norm2, cout, "%s.norm2", prefix);
  pp_bind_conv (b, &r->conv2, cout, cout, KERNEL, 1, PAD, TRUE, "%s.conv2",
      prefix);
  r->has_shortcut = cin != cout;
  if (r->has_shortcut)
    pp_bind_conv (b, &r->conv_shortcut, cin, cout, 1, 1, 0, TRUE,
        "%s.conv_shortcut", prefix);
}

/* The resnets' time embedding projections, each with conv1's bias and
 * its own summed: on a backend that stacks projections one linear of
 * their rows in forward order (PpUnet.time_proj: a forward of one sample
 * makes one product, not one a resnet), each resnet's a view of its rows;
 * elsewhere one linear each. */
static void
bind_time_projections (PpBinder * b, PpUnet * m,
    const TimeBinds * time_binds)
{
  const guint n = time_binds->resnets->len;
  g_autofree gint *outs = g_new (gint, n);
  g_autofree PpLinear *parts = g_new0 (PpLinear, n);
  g_autoptr (GPtrArray) projs = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GPtrArray) convs = g_ptr_array_new_with_free_func (g_free);
  g_autofree const gchar *const **biases = g_new (const gchar *const *, n);
  g_autofree const gchar **lists = g_new (const gchar *, 3 * n);
  gint offset = 0;

  for (guint i = 0; i < n; i++) {
    const Resnet *r = g_ptr_array_index (time_binds->resnets, i);
    const gchar *prefix = g_ptr_array_index (time_binds->prefixes, i);

    outs[i] = r->cout;
    g_ptr_array_add (projs, g_strconcat (prefix, ".time_emb_proj", NULL));
    g_ptr_array_add (convs, g_strconcat (prefix, ".conv1", NULL));
    lists[3 * i] = g_ptr_array_index (projs, i);
    lists[3 * i + 1] = g_ptr_array_index (convs, i);
    lists[3 * i + 2] = NULL;
    biases[i] = &lists[3 * i];
  }
  g_ptr_array_add (projs, NULL);
  m->time_proj_stacked = pp_backend_stacks_projections (b->be);
  if (m->time_proj_stacked)
    pp_bind_linear_concat (b, &m->time_proj, parts, n, m->temb_dim, outs,
        (const gchar * const *) projs->pdata, biases);
  for (guint i = 0; i < n; i++) {
    Resnet *r = g_ptr_array_index (time_binds->resnets, i);

    if (m->time_proj_stacked) {
      r->time_emb_proj = parts[i];
      r->time_offset = offset;
      offset += r->cout;
    } else {
      pp_bind_linear (b, &r->time_emb_proj, m->temb_dim, r->cout, FALSE,
          "%s", (const gchar *) g_ptr_array_index (projs, i));
      r->time_emb_proj.bias = pp_bind_bias_sum (b, r->cout, biases[i]);
    }
  }
}

static void
bind_projection (PpBinder * b, gboolean linear, PpLinear * lin, gint c,
    const gchar * prefix, const gchar * name)
{
  PpConv conv;

  if (linear) {
    pp_bind_linear (b, lin, c, c, TRUE, "%s.%s", prefix, name);
    return;
  }
  pp_bind_conv (b, &conv, c, c, 1, 1, 0, TRUE, "%s.%s", prefix, name);
  lin->weight = conv.weight;
  lin->bias = conv.bias;
  lin->in = c;
  lin->out = c;
}

static void
bind_attention (PpBinder * b, Attention * a, gint c, gint kv_dim,
    const gchar * prefix)
{
  pp_bind_linear (b, &a->to_q, c, c, FALSE, "%s.to_q", prefix);
  pp_bind_linear (b, &a->to_k, kv_dim, c, FALSE, "%s.to_k", prefix);
  pp_bind_linear (b, &a->to_v, kv_dim, c, FALSE, "%s.to_v", prefix);
  pp_bind_linear (b, &a->to_out, c, c, TRUE, "%s.to_out.0", prefix);
  a->qkv.weight = a->qkv.bias = pp_view_none ();
}

/* Self-attention: q, k and v projections of the same tokens, bound as one
 * stacked linear on a backend that stacks projections (a GPU); on the CPU
 * backends a stacked copy would cost its memory for a product no faster
 * (docs/perf.md), so they stay three. */
static void
bind_self_attention (PpBinder * b, Attention * a, gint c,
    const gchar * prefix)
{
  g_autofree gchar *q = g_strdup_printf ("%s.to_q", prefix);
  g_autofree gchar *k = g_strdup_printf ("%s.to_k", prefix);
  g_autofree gchar *v = g_strdup_printf ("%s.to_v", prefix);
  const gchar *const prefixes[QKV_PARTS + 1] = { q, k, v, NULL };
  PpLinear parts[QKV_PARTS];

  if (!pp_backend_stacks_projections (b->be)) {
    bind_attention (b, a, c, c, prefix);
    return;
  }
  pp_bind_linear_stacked (b, &a->qkv, parts, QKV_PARTS, c, c, prefixes);
  a->to_q = parts[0];
  a->to_k = parts[1];
  a->to_v = parts[2];
  pp_bind_linear (b, &a->to_out, c, c, TRUE, "%s.to_out.0", prefix);
}

static void
bind_transformer (PpBinder * b, const PpUnet * m, Transformer * t, gint c,
    gint heads, const gchar * prefix)
{
  g_autofree gchar *block = g_strdup_printf ("%s.transformer_blocks.0",
      prefix);
  g_autofree gchar *attn1 = g_strdup_printf ("%s.attn1", block);
  g_autofree gchar *attn2 = g_strdup_printf ("%s.attn2", block);

  t->channels = c;
  t->heads = heads;
  pp_bind_norm (b, &t->norm, c, "%s.norm", prefix);
  bind_projection (b, m->linear_projection, &t->proj_in, c, prefix,
      "proj_in");
  pp_bind_norm (b, &t->norm1, c, "%s.norm1", block);
  bind_self_attention (b, &t->attn1, c, attn1);
  pp_bind_norm (b, &t->norm2, c, "%s.norm2", block);
  bind_attention (b, &t->attn2, c, m->cross_dim, attn2);
  pp_bind_norm (b, &t->norm3, c, "%s.norm3", block);
  pp_bind_linear (b, &t->ff_in, c, GEGLU_HALVES * FF_MULT * c, TRUE,
      "%s.ff.net.0.proj", block);
  pp_bind_linear (b, &t->ff_out, FF_MULT * c, c, TRUE, "%s.ff.net.2", block);
  bind_projection (b, m->linear_projection, &t->proj_out, c, prefix,
      "proj_out");
}

static void
block_clear (Block * blk)
{
  g_clear_pointer (&blk->resnets, g_free);
  g_clear_pointer (&blk->attentions, g_free);
}

static void
block_init (Block * blk, gboolean cross, guint n_layers)
{
  blk->cross = cross;
  blk->n_layers = n_layers;
  blk->resnets = g_new0 (Resnet, n_layers);
  blk->attentions = cross ? g_new0 (Transformer, n_layers) : NULL;
}

/* Config */

typedef struct
{
  gint64 *channels;             /* block_out_channels */
  gint64 *layers;               /* layers_per_block, per block */
  gint64 *heads;                /* attention_head_dim = number of heads */
  gboolean *down_cross;
  gboolean *up_cross;
} BlockConfig;

static void
block_config_clear (BlockConfig * bc)
{
  g_free (bc->channels);
  g_free (bc->layers);
  g_free (bc->heads);
  g_free (bc->down_cross);
  g_free (bc->up_cross);
}

static gboolean
int_in_range (const gchar * path, const gchar * key, gint64 v, gint64 lo,
    gint64 hi, GError ** error)
{
  if (v >= lo && v <= hi)
    return TRUE;
  if (lo == hi)
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' is %" G_GINT64_FORMAT "; only %" G_GINT64_FORMAT
        " is supported", path, key, v, lo);
  else
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "%s: key '%s' is %" G_GINT64_FORMAT "; expected %" G_GINT64_FORMAT
      " to %" G_GINT64_FORMAT, path, key, v, lo, hi);
  return FALSE;
}

static gboolean
read_int (PpConfig * cfg, const gchar * path, const gchar * key, gint64 def,
    gint64 lo, gint64 hi, gint * out, GError ** error)
{
  gint64 v;

  if (!pp_config_get_int (cfg, key, def, &v, error)
      || !int_in_range (path, key, v, lo, hi, error))
    return FALSE;
  *out = (gint) v;
  return TRUE;
}

/* Reads an int-or-list key as @n values, each within [lo, hi]; an absent
 * key gives @n × @def. */
static gboolean
read_int_list (PpConfig * cfg, const gchar * path, const gchar * key,
    guint n, gint64 def, gint64 lo, gint64 hi, gint64 ** out,
    GError ** error)
{
  g_autoptr (GArray) list = NULL;

  if (!pp_config_has (cfg, key)) {
    *out = g_new (gint64, n);
    for (guint i = 0; i < n; i++)
      (*out)[i] = def;
    return TRUE;
  }
  if (!pp_config_get_int_list (cfg, key, n, &list, error))
    return FALSE;
  if (n != 0 && list->len != n) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' has %u entries; expected %u (one per block)", path,
        key, list->len, n);
    return FALSE;
  }
  for (guint i = 0; i < list->len; i++) {
    g_autofree gchar *entry = g_strdup_printf ("%s[%u]", key, i);

    if (!int_in_range (path, entry, g_array_index (list, gint64, i), lo, hi,
            error))
      return FALSE;
  }
  *out = g_memdup2 (list->data, list->len * sizeof (gint64));
  return TRUE;
}

/* Reads a list of block type names, each one of @cross_name (→ TRUE) or
 * @plain_name (→ FALSE). */
static gboolean
read_block_types (PpConfig * cfg, const gchar * path, const gchar * key,
    guint n, const gchar * cross_name, const gchar * plain_name,
    gboolean ** out, GError ** error)
{
  g_auto (GStrv) types = NULL;
  guint len;

  if (!pp_config_get_string_list (cfg, key, &types, error))
    return FALSE;
  len = g_strv_length (types);
  if (len != n) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' has %u entries; expected %u (one per entry of "
        "'block_out_channels')", path, key, len, n);
    return FALSE;
  }
  *out = g_new0 (gboolean, n);
  for (guint i = 0; i < n; i++) {
    if (g_strcmp0 (types[i], cross_name) == 0)
      (*out)[i] = TRUE;
    else if (g_strcmp0 (types[i], plain_name) != 0) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: key '%s' entry %u is \"%s\", an unsupported block type "
          "(supported: %s, %s)", path, key, i, types[i], cross_name,
          plain_name);
      g_clear_pointer (out, g_free);
      return FALSE;
    }
  }
  return TRUE;
}

/* Refuses a string key whose value is not the one this code implements. */
static gboolean
expect_string (PpConfig * cfg, const gchar * path, const gchar * key,
    const gchar * value, GError ** error)
{
  g_autofree gchar *v = NULL;

  /* diffusers reads an explicit null as "none" (no mid block, …), not as
   * the default */
  if (json_object_has_member (pp_config_root (cfg), key)
      && !pp_config_has (cfg, key)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' is null; only \"%s\" is supported", path, key, value);
    return FALSE;
  }
  if (!pp_config_get_string (cfg, key, value, &v, error))
    return FALSE;
  if (g_strcmp0 (v, value) == 0)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "%s: key '%s' is \"%s\"; only \"%s\" is supported", path, key,
      v ? v : "(null)", value);
  return FALSE;
}

static gboolean
read_config (PpUnet * m, PpConfig * cfg, BlockConfig * bc, GError ** error)
{
  /* Keys that switch on parts of UNet2DConditionModel this code does not
   * implement (SDXL's added embeddings, class labels, LCM's guidance
   * embedding, …). */
  static const gchar *const refused[] = {
    "center_input_sample", "dual_cross_attention", "only_cross_attention",
    "class_embed_type", "num_class_embeds", "class_embeddings_concat",
    "addition_embed_type", "addition_time_embed_dim", "encoder_hid_dim",
    "encoder_hid_dim_type", "time_cond_proj_dim", "timestep_post_act",
    "projection_class_embeddings_input_dim", "num_attention_heads",
    "time_embedding_dim", "time_embedding_act_fn", "cross_attention_norm",
    "mid_block_only_cross_attention", "resnet_skip_time_act",
    "reverse_transformer_layers_per_block", NULL
  };
  const gchar *path = m->config_path;
  g_autoptr (GArray) channels = NULL;
  g_autofree gint64 *transformer_layers = NULL;
  g_autofree gchar *act_fn = NULL;
  gdouble norm_eps, freq_shift, mid_scale;
  gint downsample_padding;
  guint n;

  if (!pp_config_refuse_keys (cfg, refused, error))
    return FALSE;
  if (!pp_config_get_int_list (cfg, "block_out_channels", 0, &channels,
          error))
    return FALSE;
  n = channels->len;
  if (n == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key 'block_out_channels' is an empty list", path);
    return FALSE;
  }
  m->n_blocks = n;
  if (!read_int_list (cfg, path, "block_out_channels", n, 0, 1,
          MAX_CHANNELS, &bc->channels, error)
      || !read_int_list (cfg, path, "layers_per_block", n,
          DEFAULT_LAYERS_PER_BLOCK, 1, MAX_LAYERS, &bc->layers, error)
      || !read_int_list (cfg, path, "attention_head_dim", n, DEFAULT_HEADS,
          1, MAX_CHANNELS, &bc->heads, error)
      || !read_int_list (cfg, path, "transformer_layers_per_block", n, 1, 1,
          1, &transformer_layers, error)
      || !read_block_types (cfg, path, "down_block_types", n, DOWN_CROSS,
          DOWN_PLAIN, &bc->down_cross, error)
      || !read_block_types (cfg, path, "up_block_types", n, UP_CROSS,
          UP_PLAIN, &bc->up_cross, error)
      || !expect_string (cfg, path, "mid_block_type", MID_CROSS, error)
      || !expect_string (cfg, path, "time_embedding_type", "positional",
          error)
      || !expect_string (cfg, path, "resnet_time_scale_shift", "default",
          error)
      || !expect_string (cfg, path, "attention_type", "default", error)
      || !read_int (cfg, path, "in_channels", DEFAULT_CHANNELS, 1, G_MAXINT,
          &m->in_channels, error)
      || !read_int (cfg, path, "out_channels", DEFAULT_CHANNELS, 1, G_MAXINT,
          &m->out_channels, error)
      || !read_int (cfg, path, "cross_attention_dim", DEFAULT_CROSS_DIM, 1,
          G_MAXINT, &m->cross_dim, error)
      || !read_int (cfg, path, "norm_num_groups", DEFAULT_GROUPS, 1,
          G_MAXINT, &m->groups, error)
      || !read_int (cfg, path, "downsample_padding",
          DEFAULT_DOWNSAMPLE_PADDING, PAD, PAD, &downsample_padding, error)
      || !pp_config_get_double (cfg, "norm_eps", DEFAULT_NORM_EPS, &norm_eps,
          error)
      || !pp_config_get_double (cfg, "freq_shift", 0.0, &freq_shift, error)
      || !pp_config_get_double (cfg, "mid_block_scale_factor", 1.0,
          &mid_scale, error)
      || !pp_config_get_bool (cfg, "flip_sin_to_cos", TRUE,
          &m->flip_sin_to_cos, error)
      || !pp_config_get_bool (cfg, "use_linear_projection", FALSE,
          &m->linear_projection, error)
      || !pp_config_get_string (cfg, "act_fn", "silu", &act_fn, error))
    return FALSE;
  if (!pp_config_act_fn (path, act_fn, "act_fn",
          (1u << PP_ACT_SILU) | (1u << PP_ACT_RELU), &m->act, error))
    return FALSE;
  /* The kernels of conv_in / conv_out (3 in every SD config). */
  {
    gint k_in, k_out;

    if (!read_int (cfg, path, "conv_in_kernel", KERNEL, KERNEL, KERNEL,
            &k_in, error)
        || !read_int (cfg, path, "conv_out_kernel", KERNEL, KERNEL, KERNEL,
            &k_out, error))
      return FALSE;
  }
  if (!(norm_eps > 0.0) || !(mid_scale > 0.0)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: keys 'norm_eps' (%g) and 'mid_block_scale_factor' (%g) must be "
        "positive", path, norm_eps, mid_scale);
    return FALSE;
  }
  m->norm_eps = (gfloat) norm_eps;
  m->freq_shift = (gfloat) freq_shift;
  m->mid_scale = (gfloat) mid_scale;
  m->time_dim = (gint) bc->channels[0];
  m->temb_dim = TIME_EMBED_MULT * m->time_dim;
  if (m->time_dim % 2 != 0 || freq_shift >= m->time_dim / 2) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: block_out_channels[0] = %d with freq_shift %g cannot make a "
        "sinusoidal time embedding (need an even size above 2·freq_shift)",
        path, m->time_dim, freq_shift);
    return FALSE;
  }
  for (guint i = 0; i < n; i++) {
    if (bc->channels[i] % m->groups != 0) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: block_out_channels[%u] = %" G_GINT64_FORMAT " is not a "
          "multiple of norm_num_groups (%d)", path, i, bc->channels[i],
          m->groups);
      return FALSE;
    }
    if ((bc->down_cross[i] || bc->up_cross[n - 1 - i] || i + 1 == n)
        && bc->channels[i] % bc->heads[i] != 0) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: block_out_channels[%u] = %" G_GINT64_FORMAT " does not split "
          "into attention_head_dim[%u] = %" G_GINT64_FORMAT " heads", path,
          i, bc->channels[i], i, bc->heads[i]);
      return FALSE;
    }
  }
  return TRUE;
}

PpUnet *
pp_unet_new (const gchar * config_path, PpWeights * weights, PpBackend * be,
    GError ** error)
{
  g_autoptr (PpUnet) m = g_new0 (PpUnet, 1);
  BlockConfig bc = { 0 };
  PpBinder b = pp_binder_init (weights, be);
  g_autoptr (GPtrArray) time_resnets = g_ptr_array_new ();
  g_autoptr (GPtrArray) time_prefixes =
      g_ptr_array_new_with_free_func (g_free);
  TimeBinds time_binds = { time_resnets, time_prefixes };
  PpConfig *cfg;
  const gint64 *ch;
  guint n;
  gint c0, c_last, out_c, prev_c;
  gboolean ok;

  m->config_path = g_strdup (config_path);
  m->be = be;
  g_mutex_init (&m->forward_lock);
  m->kv = g_new0 (KvCache, 1);
  m->kv->enabled = g_strcmp0 (g_getenv (NO_KV_CACHE_ENV), "1") != 0;
  m->kv->entries = g_array_new (FALSE, TRUE, sizeof (KvEntry));
  cfg = pp_config_load (config_path, error);
  if (cfg == NULL) {
    pp_device_weights_free (be, b.device);
    return NULL;
  }
  ok = read_config (m, cfg, &bc, error);
  pp_config_free (cfg);
  if (!ok) {
    block_config_clear (&bc);
    pp_device_weights_free (be, b.device);
    return NULL;
  }
  n = m->n_blocks;
  ch = bc.channels;
  c0 = (gint) ch[0];
  c_last = (gint) ch[n - 1];
  m->size_multiple = 1u << (n - 1);

  pp_bind_linear (&b, &m->time_linear_1, m->time_dim, m->temb_dim, TRUE,
      "time_embedding.linear_1");
  pp_bind_linear (&b, &m->time_linear_2, m->temb_dim, m->temb_dim, TRUE,
      "time_embedding.linear_2");
  pp_bind_conv (&b, &m->conv_in, m->in_channels, c0, KERNEL, 1, PAD, TRUE,
      "conv_in");

  /* Down: block i maps the previous width to C_i; all but the last halve
   * the size. */
  m->down = g_new0 (Block, n);
  out_c = c0;
  for (guint i = 0; i < n; i++) {
    Block *blk = &m->down[i];
    gint in_c = out_c;

    out_c = (gint) ch[i];
    block_init (blk, bc.down_cross[i], (guint) bc.layers[i]);
    for (guint j = 0; j < blk->n_layers; j++) {
      g_autofree gchar *res = g_strdup_printf ("down_blocks.%u.resnets.%u",
          i, j);
      g_autofree gchar *att = g_strdup_printf ("down_blocks.%u.attentions.%u",
          i, j);

      bind_resnet (&b, &blk->resnets[j], j == 0 ? in_c : out_c, out_c,
          &time_binds, res);
      if (blk->cross)
        bind_transformer (&b, m, &blk->attentions[j], out_c,
            (gint) bc.heads[i], att);
    }
    blk->has_sampler = i + 1 < n;
    if (blk->has_sampler)
      pp_bind_conv (&b, &blk->sampler, out_c, out_c, KERNEL, DOWN_STRIDE,
          PAD, TRUE, "down_blocks.%u.downsamplers.0.conv", i);
  }

  /* Mid: resnet, transformer, resnet at C_last with the last block's
   * heads. */
  bind_resnet (&b, &m->mid_resnets[0], c_last, c_last, &time_binds,
      "mid_block.resnets.0");
  bind_transformer (&b, m, &m->mid_attention, c_last, (gint) bc.heads[n - 1],
      "mid_block.attentions.0");
  m->mid_attention.fuse = TRUE;
  bind_resnet (&b, &m->mid_resnets[1], c_last, c_last, &time_binds,
      "mid_block.resnets.1");

  /* Up: block i (channels reversed) has layers + 1 resnets, each taking
   * the running state concatenated with one skip. */
  m->up = g_new0 (Block, n);
  out_c = c_last;
  for (guint i = 0; i < n; i++) {
    Block *blk = &m->up[i];
    guint r = n - 1 - i;        /* the matching down block */
    gint skip_in = (gint) ch[i + 1 < n ? r - 1 : 0];

    prev_c = out_c;
    out_c = (gint) ch[r];
    block_init (blk, bc.up_cross[i], (guint) bc.layers[r] + 1);
    for (guint j = 0; j < blk->n_layers; j++) {
      g_autofree gchar *res = g_strdup_printf ("up_blocks.%u.resnets.%u",
          i, j);
      g_autofree gchar *att = g_strdup_printf ("up_blocks.%u.attentions.%u",
          i, j);
      gint h_c = j == 0 ? prev_c : out_c;
      gint s_c = j + 1 == blk->n_layers ? skip_in : out_c;

      bind_resnet (&b, &blk->resnets[j], h_c + s_c, out_c, &time_binds, res);
      if (blk->cross) {
        bind_transformer (&b, m, &blk->attentions[j], out_c,
            (gint) bc.heads[r], att);
        blk->attentions[j].fuse = i < n / 2;
      }
    }
    blk->has_sampler = i + 1 < n;
    if (blk->has_sampler)
      pp_bind_conv_up2 (&b, &blk->sampler, out_c, out_c, TRUE,
          "up_blocks.%u.upsamplers.0.conv", i);
  }

  bind_time_projections (&b, m, &time_binds);

  pp_bind_norm (&b, &m->norm_out, c0, "conv_norm_out");
  pp_bind_conv (&b, &m->conv_out, c0, m->out_channels, KERNEL, 1, PAD, TRUE,
      "conv_out");
  block_config_clear (&bc);
  if (!pp_binder_finish (&b, error))
    return NULL;
  m->device_weights = b.device;
  /* Activations in the weights' dtype where the backend computes on them
   * (pp_backend_act_dtype); the weights as stored tell it. */
  m->pool = pp_pool_new (be, pp_backend_act_dtype (be,
          m->conv_in.weight.dtype));
  m->layout = pp_backend_act_layout (be, pp_pool_act_dtype (m->pool));
  /* conv_in's output, then one per down layer and down sampler */
  m->n_skips = 1;
  for (guint i = 0; i < n; i++)
    m->n_skips += m->down[i].n_layers + (m->down[i].has_sampler ? 1 : 0);
  m->skip_stack = g_new0 (PpAct, m->n_skips);
  return g_steal_pointer (&m);
}

gboolean
pp_unet_check_class (const gchar * component_dir, GError ** error)
{
  g_autofree gchar *klass = pp_component_class (component_dir);

  /* Another class's keys would fail one by one: name the class. */
  if (klass == NULL || g_str_equal (klass, "UNet2DConditionModel"))
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s holds a %s (its "
      "config.json's _class_name); ppdiffuse runs UNet2DConditionModel, a "
      "text-conditioned Stable Diffusion UNet (SD1.5, SD2.x, SD-Turbo), in "
      "unet/", component_dir, klass);
  return FALSE;
}

PpUnet *
pp_unet_load (const gchar * component_dir, PpBackend * be, PpDType dtype,
    GError ** error)
{
  return pp_unet_load_lora (component_dir, be, dtype, NULL, error);
}

PpUnet *
pp_unet_load_lora (const gchar * component_dir, PpBackend * be,
    PpDType dtype, PpLora * lora, GError ** error)
{
  PpWeights *weights = NULL;
  PpUnet *m;

  if (!pp_unet_check_class (component_dir, error))
    return NULL;
  m = pp_component_load (component_dir, be, dtype,
      (PpComponentNewFunc) pp_unet_new, (GDestroyNotify) pp_unet_free,
      lora, PP_LORA_UNET, &weights, error);
  if (m != NULL)
    m->owned_weights = weights;
  return m;
}

PpUnet *
pp_unet_load_weights (const gchar * config_path, PpWeights * w,
    PpBackend * be, PpDType dtype, PpLora * lora, GError ** error)
{
  PpWeights *weights = NULL;
  PpUnet *m = pp_component_build (config_path, w, be, dtype,
      (PpComponentNewFunc) pp_unet_new, (GDestroyNotify) pp_unet_free,
      lora, PP_LORA_UNET, &weights, error);

  if (m != NULL)
    m->owned_weights = weights;
  return m;
}

void
pp_unet_set_bank (PpUnet * m, PpFeatureBank * bank)
{
  g_mutex_lock (&m->forward_lock);
  m->bank = bank;
  g_mutex_unlock (&m->forward_lock);
}

const gchar *
pp_unet_weights_digest (PpUnet * m)
{
  return m->owned_weights != NULL ? pp_weights_digest (m->owned_weights)
      : NULL;
}

/* Releases the entries to the pool: the next forward builds again. */
static void
kv_cache_drop (KvCache * kv)
{
  for (guint i = 0; i < kv->entries->len; i++) {
    KvEntry *e = &g_array_index (kv->entries, KvEntry, i);

    pp_act_clear (&e->k);
    pp_act_clear (&e->v);
  }
  g_array_set_size (kv->entries, 0);
  kv->context = NULL;
  kv->context_data = NULL;
}

void
pp_unet_free (PpUnet * m)
{
  if (m == NULL)
    return;
  for (guint i = 0; m->down != NULL && i < m->n_blocks; i++)
    block_clear (&m->down[i]);
  for (guint i = 0; m->up != NULL && i < m->n_blocks; i++)
    block_clear (&m->up[i]);
  g_free (m->down);
  g_free (m->up);
  g_free (m->config_path);
  pp_device_weights_free (m->be, m->device_weights);
  if (m->kv != NULL) {
    kv_cache_drop (m->kv);
    g_array_unref (m->kv->entries);
    g_free (m->kv);
  }
  g_clear_pointer (&m->pool, pp_pool_free);
  g_free (m->skip_stack);
  g_mutex_clear (&m->forward_lock);
  g_clear_pointer (&m->owned_weights, pp_weights_free);
  g_free (m);
}

guint
pp_unet_in_channels (PpUnet * m)
{
  return m->in_channels;
}

guint
pp_unet_out_channels (PpUnet * m)
{
  return m->out_channels;
}

guint
pp_unet_cross_attention_dim (PpUnet * m)
{
  return m->cross_dim;
}

guint
pp_unet_size_multiple (PpUnet * m)
{
  return m->size_multiple;
}

/* Whether @t's self-attention computes q, k and v as one product: bound
 * stacked, and no bank (which takes k and v apart: then three products on
 * the stacked rows). */
static gboolean
stacked_qkv (const PpUnet * m, const Transformer * t)
{
  return m->bank == NULL && !pp_view_is_none (t->attn1.qkv.weight);
}

static guint
stacked_in (const PpUnet * m, const Block * blk)
{
  guint n = 0;

  for (guint j = 0; blk->cross && j < blk->n_layers; j++)
    n += stacked_qkv (m, &blk->attentions[j]);
  return n;
}

guint
pp_unet_stacked_attentions (PpUnet * m)
{
  guint n = stacked_qkv (m, &m->mid_attention);

  for (guint i = 0; i < m->n_blocks; i++)
    n += stacked_in (m, &m->down[i]) + stacked_in (m, &m->up[i]);
  return n;
}

guint
pp_unet_stacked_time_projections (PpUnet * m)
{
  guint n = 0;

  if (!m->time_proj_stacked)
    return 0;
  for (guint i = 0; i < m->n_blocks; i++)
    n += m->down[i].n_layers + m->up[i].n_layers;
  return n + MID_RESNETS;
}

/* Forward */

/* The group norm of x + @shift ([N, C] added to each channel; none:
 * none), then the model's activation when @act: SiLU in the norm's own
 * pass. */
static PpAct
group_norm_shifted (const PpUnet * m, const PpNorm * norm, gfloat eps,
    const PpAct * x, PpView shift, gboolean act)
{
  PpAct y = pp_act_new (m->pool, x->n, x->c, x->h, x->w);
  const gboolean silu = act && m->act == PP_ACT_SILU;

  y.layout = x->layout;
  pp_group_norm (m->be, pp_act_in (x), shift, x->n, x->c, x->h * x->w,
      m->groups, eps, norm->gamma, norm->beta, silu, pp_act_out (&y));
  if (act && !silu)
    pp_act_fn_apply (m->act, &y);
  return y;
}

static PpAct
group_norm (const PpUnet * m, const PpNorm * norm, gfloat eps,
    const PpAct * x, gboolean act)
{
  return group_norm_shifted (m, norm, eps, x, pp_view_none (), act);
}

/* The time embedding's projections of a forward: @temb_act is act(temb)
 * [N, temb_dim].  With the stacked projections and one sample, all of
 * them in one product (each resnet's a range of its row, resnet_forward);
 * else none here (each resnet projects its own). */
typedef struct
{
  const PpAct *temb_act;
  PpAct all;                    /* [1, Σ cout], or none (data NULL) */
} TimeProj;

static TimeProj
time_projections (const PpUnet * m, const PpAct * temb_act)
{
  TimeProj tp = { temb_act, { 0 } };

  if (m->time_proj_stacked && temb_act->n == 1)
    tp.all = pp_linear_apply (&m->time_proj, temb_act);
  return tp;
}

/* ResnetBlock2D: (shortcut(x) + conv2(act(norm2(conv1(act(norm1(x))) +
 * proj(act(temb)))))) / scale, proj(act(temb)) from @tp.  conv1 runs
 * without its bias: the time embedding's projection, whose bias holds
 * conv1's too (summed at load, bind_time_projections), is added to the
 * channels in norm2's pass (its shift), so neither is a pass over conv1's
 * output. */
static PpAct
resnet_forward (const PpUnet * m, const Resnet * r, const PpAct * x,
    const TimeProj * tp, gfloat scale)
{
  PpAct h, t = { 0 }, out;
  PpView shift;

  h = group_norm (m, &r->norm1, m->norm_eps, x, TRUE);
  pp_act_replace (&h, pp_conv_apply (&r->conv1, &h));
  if (tp->all.data != NULL)
    shift = pp_view_range (pp_act_in (&tp->all), r->time_offset, r->cout);
  else {
    t = pp_linear_apply (&r->time_emb_proj, tp->temb_act);
    shift = pp_act_in (&t);
  }
  pp_act_replace (&h, group_norm_shifted (m, &r->norm2, m->norm_eps, &h,
          shift, TRUE));
  pp_act_clear (&t);

  /* conv2's output plus the shortcut (x itself, or its projection) in
   * conv2's own pass: the sum's bits either way (addition commutes). */
  if (r->has_shortcut) {
    PpAct s = pp_conv_apply (&r->conv_shortcut, x);

    out = pp_conv_residual_apply (&r->conv2, &h, &s, FALSE);
    pp_act_clear (&s);
  } else
    out = pp_conv_residual_apply (&r->conv2, &h, x, FALSE);
  pp_act_clear (&h);
  if (scale != 1.0f)
    pp_scale (m->be, pp_act_out (&out), pp_act_numel (&out), 1.0f / scale);
  return out;
}

/* The token-wise part of a Transformer2DModel, [N·H·W, C] rows: every op
 * between the two attentions works on each row alone, so these chains run
 * as row-wise regions (pp_for_rows), which a backend may cut into ranges.
 * All buffers are the whole tokens' (device memory); a range works on its
 * rows of each. */
typedef struct
{
  PpBackend *be;
  const Transformer *t;
  PpOut h;                      /* the residual stream */
  /* [rows, 3C]: self-attention's q, k and v side by side, one product of
   * the stacked weights; none when they are three, or with a feature bank
   * (which takes k and v apart): then in @q, @k and @v. */
  PpOut qkv;
  PpOut q;                      /* [rows, C]: cross-attention's queries,
                                 * and self-attention's without @qkv */
  PpOut k, v;                   /* without @qkv: self-attention's */
  PpOut o;                      /* attention output */
  PpOut x;                      /* [rows, C]: a LayerNorm's output */
  PpOut g;                      /* [rows, 2 · 4C]: GEGLU input */
  PpOut f;                      /* [rows, 4C]: GEGLU output */
  PpOut out;                    /* the block's output: x, + b_out channels
                                 * first; proj_out(h) is added to it */
  gint hw;
  gboolean nhwc;                /* @out laid out NHWC: its rows are tokens */
} Tokens;

/* Rows [@begin, @begin + @rows) of @buf, @width elements a row, to write
 * or to read. */
static PpOut
rows_out (PpOut buf, gint begin, gint rows, gint width)
{
  return pp_out_range (buf, (gsize) begin * width, (gsize) rows * width);
}

static PpView
rows_in (PpOut buf, gint begin, gint rows, gint width)
{
  return pp_out_as_view (rows_out (buf, begin, rows, width));
}

/* x = LN(h) and q (and k, v when @kv) = its projections, rows [begin, end):
 * q, k and v as one product into @qkv when it is there. */
static void
tokens_norm_project (const Tokens * tk, const PpNorm * norm,
    const Attention * a, gboolean kv, int begin, int end)
{
  const gint c = tk->t->channels, rows = end - begin;
  const PpView x = rows_in (tk->x, begin, rows, c);

  pp_layer_norm (tk->be, rows_in (tk->h, begin, rows, c), rows, c,
      TRANSFORMER_LAYER_NORM_EPS, norm->gamma, norm->beta,
      rows_out (tk->x, begin, rows, c));
  if (kv && tk->qkv.data != NULL) {
    pp_linear (tk->be, x, rows, c, a->qkv.weight, pp_view_none (),
        a->qkv.out, rows_out (tk->qkv, begin, rows, a->qkv.out));
    return;
  }
  pp_linear (tk->be, x, rows, c, a->to_q.weight, pp_view_none (), c,
      rows_out (tk->q, begin, rows, c));
  if (!kv)
    return;
  pp_linear (tk->be, x, rows, c, a->to_k.weight, pp_view_none (), c,
      rows_out (tk->k, begin, rows, c));
  pp_linear (tk->be, x, rows, c, a->to_v.weight, pp_view_none (), c,
      rows_out (tk->v, begin, rows, c));
}

/* h[begin, end) += lin(in[begin, end)), @in holding lin->in values a row:
 * one op (a GPU's product adds itself to h). */
static void
tokens_add_linear (const Tokens * tk, const PpLinear * lin, PpOut in,
    int begin, int end)
{
  const gint c = tk->t->channels, rows = end - begin;

  pp_linear_add (tk->be, rows_in (in, begin, rows, lin->in), rows, lin->in,
      lin->weight, lin->bias, lin->out, rows_out (tk->h, begin, rows, c));
}

/* LN2(h) and q of attn2, where h += to_out(o) of attn1 came before. */
static void
tokens_cross_query (int begin, int end, gpointer data)
{
  const Tokens *tk = data;

  tokens_norm_project (tk, &tk->t->norm2, &tk->t->attn2, FALSE, begin, end);
}

/* Self-attention with the temporal feature bank (pp-feature-bank.h): the
 * frame's keys and values followed by the bank's, the output fused with
 * the bank's where the layer fuses, then h += it and the bank takes the
 * frame.  One sample ([hw, C] rows). */
static void
self_attention_banked (const PpUnet * m, Tokens * tk, PpAct * y)
{
  const Transformer *t = tk->t;
  const gint c = t->channels, hw = tk->hw, head_dim = c / t->heads;
  PpBankLayer *layer = pp_feature_bank_next (m->bank, c);
  const guint banked = pp_bank_layer_rows (layer);
  const PpView q_k_v[3] = { pp_out_as_view (tk->q), pp_out_as_view (tk->k),
    pp_out_as_view (tk->v)
  };
  PpAct o;

  if (banked > 0) {
    PpAct ke = pp_act_new (m->pool, 1, hw + (gint) banked, 1, c);
    PpAct ve = pp_act_new (m->pool, 1, hw + (gint) banked, 1, c);

    pp_bank_layer_extend (layer, m->be, q_k_v[1], q_k_v[2], hw,
        pp_act_out (&ke), pp_act_out (&ve));
    pp_attention (m->be, q_k_v[0], pp_act_in (&ke), pp_act_in (&ve), 1, hw,
        hw + (gint) banked, t->heads, head_dim, c, c,
        t->attn1.to_q.weight.dtype, tk->o);
    pp_act_clear (&ke);
    pp_act_clear (&ve);
  } else
    pp_attention (m->be, q_k_v[0], q_k_v[1], q_k_v[2], 1, hw, hw, t->heads,
        head_dim, c, c, t->attn1.to_q.weight.dtype, tk->o);
  o = pp_act_view (m->pool, tk->o.data, tk->o.dtype, 1, hw, 1, c);
  pp_act_replace (y, pp_linear_apply (&t->attn1.to_out, &o));
  pp_bank_layer_take (layer, m->be, q_k_v[1], q_k_v[2], pp_act_out (y), hw,
      t->fuse);
  pp_add (m->be, tk->h, pp_act_in (y), (gsize) hw * c);
}

/* Before self-attention: x1 = LN1(h), q, k, v of attn1. */
static void
tokens_before_self (int begin, int end, gpointer data)
{
  const Tokens *tk = data;

  tokens_norm_project (tk, &tk->t->norm1, &tk->t->attn1, TRUE, begin, end);
}

/* Between the attentions: h += to_out(o), then q of attn2 from LN2(h). */
static void
tokens_before_cross (int begin, int end, gpointer data)
{
  const Tokens *tk = data;

  tokens_add_linear (tk, &tk->t->attn1.to_out, tk->o, begin, end);
  tokens_norm_project (tk, &tk->t->norm2, &tk->t->attn2, FALSE, begin, end);
}

/* After cross-attention: h += to_out(o); h += ff.net.2(GEGLU(
 * ff.net.0.proj(LN3(h)))); out[:, p] += proj_out(h[p]) per sample,
 * straight into the output, which holds x: its rows when it is channels
 * last (one linear_add, the bias with the product), else its columns
 * (out then holds x + proj_out.bias already). */
static void
tokens_after_cross (int begin, int end, gpointer data)
{
  const Tokens *tk = data;
  const Transformer *t = tk->t;
  const gint c = t->channels, rows = end - begin, inner = FF_MULT * c;

  tokens_add_linear (tk, &t->attn2.to_out, tk->o, begin, end);
  pp_layer_norm (tk->be, rows_in (tk->h, begin, rows, c), rows, c,
      TRANSFORMER_LAYER_NORM_EPS, t->norm3.gamma, t->norm3.beta,
      rows_out (tk->x, begin, rows, c));
  pp_linear (tk->be, rows_in (tk->x, begin, rows, c), rows, c,
      t->ff_in.weight, t->ff_in.bias, t->ff_in.out,
      rows_out (tk->g, begin, rows, GEGLU_HALVES * inner));
  pp_geglu (tk->be, rows_in (tk->g, begin, rows, GEGLU_HALVES * inner), rows,
      inner, rows_out (tk->f, begin, rows, inner));
  tokens_add_linear (tk, &t->ff_out, tk->f, begin, end);

  if (tk->nhwc) {
    pp_linear_add (tk->be, rows_in (tk->h, begin, rows, c), rows, c,
        t->proj_out.weight, t->proj_out.bias, c,
        rows_out (tk->out, begin, rows, c));
    return;
  }
  for (int r = begin; r < end;) {
    const int b = r / tk->hw, p = r % tk->hw;
    const int span = MIN (end - r, tk->hw - p);

    /* out [C, span] of sample b from pixel p on, rows hw apart. */
    pp_matmul (tk->be, FALSE, TRUE, c, span, c, t->proj_out.weight, c,
        rows_in (tk->h, r, span, c), c, TRUE,
        pp_out_range (tk->out, (gsize) b * c * tk->hw + p,
            pp_strided_numel (c, span, tk->hw)), tk->hw);
    r += span;
  }
}

/* to_k and to_v of attn2 on @context: computed, or views of the cache's
 * entry for this cross-attention (computed into it on the forward that
 * builds it).  Cross-attentions run in the same order on every forward. */
static void
cross_kv (const PpUnet * m, const Transformer * t, const PpAct * context,
    PpAct * k, PpAct * v)
{
  KvCache *kv = m->kv;
  KvEntry *e;

  if (!kv->active) {
    *k = pp_linear_apply (&t->attn2.to_k, context);
    *v = pp_linear_apply (&t->attn2.to_v, context);
    return;
  }
  if (kv->next == kv->entries->len) {
    KvEntry built = { pp_linear_apply (&t->attn2.to_k, context),
      pp_linear_apply (&t->attn2.to_v, context)
    };

    g_array_append_val (kv->entries, built);
  }
  e = &g_array_index (kv->entries, KvEntry, kv->next++);
  *k = pp_act_view (m->pool, e->k.data, e->k.dtype, e->k.n, e->k.c, e->k.h,
      e->k.w);
  *v = pp_act_view (m->pool, e->v.data, e->v.dtype, e->v.n, e->v.c, e->v.h,
      e->v.w);
}

/* pp_for_rows over each sample's @hw rows in turn on a backend that runs
 * samples apart (the ranges it cuts depend on the row count), else over
 * them all at once. */
typedef struct
{
  PpRowsFunc func;
  gpointer data;
  int first;
} SampleRows;

static void
sample_rows (int begin, int end, gpointer data)
{
  const SampleRows *s = data;

  s->func (s->first + begin, s->first + end, s->data);
}

static void
for_sample_rows (PpBackend * be, gint n, gint hw, PpRowsFunc func,
    gpointer data)
{
  if (!pp_backend_samples_apart (be)) {
    pp_for_rows (be, n * hw, func, data);
    return;
  }
  for (gint b = 0; b < n; b++) {
    SampleRows s = { func, data, b * hw };

    pp_for_rows (be, hw, sample_rows, &s);
  }
}

/* Transformer2DModel: x + proj_out(block(proj_in(GroupNorm(x)))), the block
 * (self-attention, cross-attention on @context, GEGLU feed-forward, each
 * with a residual) running on tokens [N, H·W, C]. */
static PpAct
transformer_forward (const PpUnet * m, const Transformer * t,
    const PpAct * x, const PpAct * context)
{
  const gint hw = x->h * x->w, c = t->channels;
  const gint head_dim = c / t->heads, inner = FF_MULT * c;
  const gboolean stacked = stacked_qkv (m, t);
  PpAct g = group_norm (m, &t->norm, TRANSFORMER_GROUP_NORM_EPS, x, FALSE);
  PpAct tokens;
  PpAct out = pp_act_copy (x);
  PpAct h, o, nx, gg, ff, ck, cv;
  /* ny: the feature bank's self-attention output (self_attention_banked
   * makes it). */
  PpAct qkv = { 0 }, q = { 0 }, k = { 0 }, v = { 0 }, ny = { 0 };
  Tokens tk = { m->be, t };

  /* Channels last, the norm's rows are the tokens; else transposed. */
  if (x->layout == PP_LAYOUT_NHWC)
    tokens = pp_act_view (m->pool, g.data, g.dtype, x->n, hw, 1, c);
  else {
    tokens = pp_act_new (m->pool, x->n, hw, 1, c);
    pp_nchw_to_nlc (m->be, pp_act_in (&g), x->n, c, hw,
        pp_act_out (&tokens));
  }
  h = pp_linear_apply (&t->proj_in, &tokens);
  pp_act_clear (&tokens);
  pp_act_clear (&g);
  /* Channels last the bias comes with the product (tokens_after_cross). */
  for (gint b = 0; b < x->n && out.layout != PP_LAYOUT_NHWC; b++)
    pp_add_channel (m->be, rows_out (pp_act_out (&out), b, 1, c * hw), 1, c,
        hw, t->proj_out.bias);

  if (stacked)
    qkv = pp_act_new (m->pool, x->n, hw, 1, QKV_PARTS * c);
  else {
    q = pp_act_new (m->pool, x->n, hw, 1, c);
    k = pp_act_new (m->pool, x->n, hw, 1, c);
    v = pp_act_new (m->pool, x->n, hw, 1, c);
  }
  o = pp_act_new (m->pool, x->n, hw, 1, c);
  nx = pp_act_new (m->pool, x->n, hw, 1, c);
  gg = pp_act_new (m->pool, x->n, hw, 1, GEGLU_HALVES * inner);
  ff = pp_act_new (m->pool, x->n, hw, 1, inner);
  tk.h = pp_act_out (&h);
  tk.qkv = pp_act_out (&qkv);
  tk.q = pp_act_out (&q);
  tk.k = pp_act_out (&k);
  tk.v = pp_act_out (&v);
  tk.o = pp_act_out (&o);
  tk.x = pp_act_out (&nx);
  tk.g = pp_act_out (&gg);
  tk.f = pp_act_out (&ff);
  tk.out = pp_act_out (&out);
  tk.hw = hw;
  tk.nhwc = out.layout == PP_LAYOUT_NHWC;

  for_sample_rows (m->be, x->n, hw, tokens_before_self, &tk);
  if (m->bank != NULL) {
    /* One sample: pp_unet_forward refuses more with a bank. */
    self_attention_banked (m, &tk, &ny);
    for_sample_rows (m->be, x->n, hw, tokens_cross_query, &tk);
  } else if (stacked) {
    /* q, k and v: column ranges of the stacked projection's rows. */
    const PpView all = pp_act_in (&qkv);
    const gsize span = pp_strided_numel (x->n * hw, c, QKV_PARTS * c);

    pp_attention (m->be, pp_view_range (all, 0, span),
        pp_view_range (all, c, span), pp_view_range (all, 2 * c, span),
        x->n, hw, hw, t->heads, head_dim, QKV_PARTS * c, QKV_PARTS * c,
        t->attn1.to_q.weight.dtype, tk.o);
    pp_act_clear (&qkv);
    tk.qkv = pp_out (NULL, qkv.dtype, 0);
    q = pp_act_new (m->pool, x->n, hw, 1, c);
    tk.q = pp_act_out (&q);
    for_sample_rows (m->be, x->n, hw, tokens_before_cross, &tk);
  } else {
    pp_attention (m->be, pp_act_in (&q), pp_act_in (&k), pp_act_in (&v),
        x->n, hw, hw, t->heads, head_dim, c, c, t->attn1.to_q.weight.dtype,
        tk.o);
    for_sample_rows (m->be, x->n, hw, tokens_before_cross, &tk);
  }
  cross_kv (m, t, context, &ck, &cv);
  if (context->n == x->n)
    pp_attention (m->be, pp_act_in (&q), pp_act_in (&ck), pp_act_in (&cv),
        x->n, hw, context->c, t->heads, head_dim, c, c,
        t->attn2.to_q.weight.dtype, tk.o);
  else if (!pp_backend_samples_apart (m->be))
    /* One context for every sample (a stream batch's frames): each query
     * row attends to the same keys and values, so the samples' rows are
     * one sample of n · hw rows, one call (a device's attention takes
     * them in one launch). */
    pp_attention (m->be, pp_act_in (&q), pp_act_in (&ck), pp_act_in (&cv),
        1, x->n * hw, context->c, t->heads, head_dim, c, c,
        t->attn2.to_q.weight.dtype, tk.o);
  else                          /* the same, sample by sample */
    for (gint b = 0; b < x->n; b++)
      pp_attention (m->be, rows_in (tk.q, b * hw, hw, c), pp_act_in (&ck),
          pp_act_in (&cv), 1, hw, context->c, t->heads, head_dim, c, c,
          t->attn2.to_q.weight.dtype, rows_out (tk.o, b * hw, hw, c));
  pp_act_clear (&ck);
  pp_act_clear (&cv);
  for_sample_rows (m->be, x->n, hw, tokens_after_cross, &tk);

  pp_act_clear (&q);
  pp_act_clear (&k);
  pp_act_clear (&v);
  pp_act_clear (&o);
  pp_act_clear (&nx);
  pp_act_clear (&ny);
  pp_act_clear (&gg);
  pp_act_clear (&ff);
  pp_act_clear (&h);
  return out;
}

/* The timesteps of a forward: one for every sample, or one each. */
typedef struct
{
  gdouble one;
  const gdouble *each;          /* NULL: @one for every sample */
} Timesteps;

/* Time embedding MLP on the sinusoid of each sample's timestep, one row
 * per sample.  On a backend that runs samples apart each row goes through
 * the MLP alone (a GEMM's summation order may depend on its row count),
 * and one timestep for all is computed once. */
static PpAct
time_embedding (const PpUnet * m, gint batch, const Timesteps * ts)
{
  const gboolean apart = pp_backend_samples_apart (m->be);
  /* The rows the MLP runs on at a time, and how many times. */
  const gint rows = apart || ts->each == NULL ? 1 : batch;
  const gint runs = ts->each == NULL ? 1 : batch / rows;
  PpAct out = pp_act_new (m->pool, batch, 1, 1, m->temb_dim);
  const gsize row_bytes = m->temb_dim * pp_dtype_size (out.dtype);

  for (gint r = 0; r < runs; r++) {
    PpAct e = pp_act_new (m->pool, rows, 1, 1, m->time_dim);

    /* diffusers casts the timestep to float32 before the sinusoid. */
    for (gint b = 0; b < rows; b++)
      pp_timestep_embedding (m->be, (gfloat) (ts->each ? ts->each[r * rows
                  + b] : ts->one), m->time_dim, m->flip_sin_to_cos,
          m->freq_shift, rows_out (pp_act_out (&e), b, 1, m->time_dim));
    pp_act_replace (&e, pp_linear_apply (&m->time_linear_1, &e));
    pp_act_fn_apply (m->act, &e);
    pp_act_replace (&e, pp_linear_apply (&m->time_linear_2, &e));
    g_assert (e.dtype == out.dtype);
    pp_backend_copy (m->be,
        rows_out (pp_act_out (&out), r * rows, rows, m->temb_dim).data,
        e.data, pp_act_bytes (&e));
    pp_act_clear (&e);
  }
  /* One timestep for every sample: the first row for all. */
  for (gint b = runs * rows; b < batch; b++)
    pp_backend_copy (m->be, rows_out (pp_act_out (&out), b, 1,
            m->temb_dim).data, out.data, row_bytes);
  return out;
}

static gboolean
check_inputs (PpUnet * m, const PpTensor * sample, const PpTensor * ctx,
    GError ** error)
{
  /* Described only on error: a frame allocates nothing. */
  g_autofree gchar *s_desc = NULL, *c_desc = NULL;

  if (sample->dtype != PP_DTYPE_F32 || sample->ndim != NCHW_DIMS
      || sample->shape[1] != m->in_channels) {
    s_desc = pp_tensor_describe (sample);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "UNet sample: expected F32[N,%d,H,W], received %s",
        m->in_channels, s_desc);
    return FALSE;
  }
  if (sample->shape[2] % m->size_multiple != 0
      || sample->shape[3] % m->size_multiple != 0) {
    s_desc = pp_tensor_describe (sample);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "UNet sample: height and width must be multiples of %u (%u "
        "downsampling stages), received %s", m->size_multiple,
        m->n_blocks - 1, s_desc);
    return FALSE;
  }
  if (sample->shape[0] > G_MAXINT || sample->shape[2] > G_MAXINT
      || sample->shape[3] > G_MAXINT) {
    s_desc = pp_tensor_describe (sample);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "UNet sample: %s is too large", s_desc);
    return FALSE;
  }
  if (ctx->dtype != PP_DTYPE_F32 || ctx->ndim != TOKENS_DIMS
      || (ctx->shape[0] != sample->shape[0] && ctx->shape[0] != 1)
      || ctx->shape[2] != m->cross_dim || ctx->shape[1] > G_MAXINT) {
    c_desc = pp_tensor_describe (ctx);
    if (sample->shape[0] == 1)
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "UNet encoder_hidden_states: expected F32[1,L,%d] "
          "(cross_attention_dim), received %s", m->cross_dim, c_desc);
    else
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "UNet encoder_hidden_states: expected F32[1,L,%d] for every "
          "sample or F32[%" G_GINT64_FORMAT ",L,%d], one per sample "
          "(cross_attention_dim), received %s", m->cross_dim,
          sample->shape[0], m->cross_dim, c_desc);
    return FALSE;
  }
  return TRUE;
}

/* The skip connections: a stack of at most m->n_skips activations. */
typedef struct
{
  PpAct *acts;
  guint len, max;
} Skips;

static void
push_skip (Skips * skips, const PpAct * h)
{
  g_assert (skips->len < skips->max);
  skips->acts[skips->len++] = pp_act_copy (h);
}

static PpAct
pop_skip (Skips * skips)
{
  g_assert (skips->len > 0);
  return skips->acts[--skips->len];
}

/* The forward pass on activations of m's backend: @input [N, C_in, H, W],
 * @context [N or 1, L, D] (n, c = L, w = D) → the output, from m's pool. */
static PpAct
unet_forward (PpUnet * m, const PpAct * input, const Timesteps * ts,
    const PpAct * context, PpTapFunc tap, gpointer tap_data)
{
  Skips skips = { m->skip_stack, 0, m->n_skips };
  PpAct temb, h;
  TimeProj tp;

  temb = time_embedding (m, input->n, ts);
  pp_tap_act (tap, tap_data, &temb, VECTOR_ROWS_DIMS, "time_emb");
  /* Every resnet applies the activation to temb first: do it once. */
  pp_act_fn_apply (m->act, &temb);
  tp = time_projections (m, &temb);

  h = pp_conv_apply_laid (&m->conv_in, input, m->layout);
  pp_tap_act (tap, tap_data, &h, NCHW_DIMS, "conv_in");
  push_skip (&skips, &h);

  for (guint i = 0; i < m->n_blocks; i++) {
    const Block *blk = &m->down[i];

    for (guint j = 0; j < blk->n_layers; j++) {
      pp_act_replace (&h, resnet_forward (m, &blk->resnets[j], &h, &tp,
              1.0f));
      if (blk->cross)
        pp_act_replace (&h, transformer_forward (m, &blk->attentions[j], &h,
                context));
      push_skip (&skips, &h);
    }
    if (blk->has_sampler) {
      pp_act_replace (&h, pp_conv_apply (&blk->sampler, &h));
      push_skip (&skips, &h);
    }
    pp_tap_act (tap, tap_data, &h, NCHW_DIMS, "down_blocks.%u", i);
  }

  pp_act_replace (&h, resnet_forward (m, &m->mid_resnets[0], &h, &tp,
          m->mid_scale));
  pp_act_replace (&h, transformer_forward (m, &m->mid_attention, &h,
          context));
  pp_act_replace (&h, resnet_forward (m, &m->mid_resnets[1], &h, &tp,
          m->mid_scale));
  pp_tap_act (tap, tap_data, &h, NCHW_DIMS, "mid_block");

  for (guint i = 0; i < m->n_blocks; i++) {
    const Block *blk = &m->up[i];

    for (guint j = 0; j < blk->n_layers; j++) {
      PpAct skip = pop_skip (&skips);
      PpAct cat = pp_act_new (m->pool, h.n, h.c + skip.c, h.h, h.w);

      g_assert (skip.h == h.h && skip.w == h.w);
      cat.layout = h.layout;
      pp_concat_channels (m->be, pp_act_in (&h), h.c, pp_act_in (&skip),
          skip.c, h.n, h.h * h.w, pp_act_out (&cat));
      pp_act_clear (&skip);
      pp_act_replace (&h, cat);
      pp_act_replace (&h, resnet_forward (m, &blk->resnets[j], &h, &tp,
              1.0f));
      if (blk->cross)
        pp_act_replace (&h, transformer_forward (m, &blk->attentions[j], &h,
                context));
    }
    if (blk->has_sampler)
      pp_act_replace (&h, pp_conv_up2_apply (&blk->sampler, &h));
    pp_tap_act (tap, tap_data, &h, NCHW_DIMS, "up_blocks.%u", i);
  }
  g_assert (skips.len == 0);
  pp_act_clear (&tp.all);
  pp_act_clear (&temb);

  pp_act_replace (&h, group_norm (m, &m->norm_out, m->norm_eps, &h, TRUE));
  pp_act_replace (&h, pp_conv_apply_laid (&m->conv_out, &h,
          PP_LAYOUT_NCHW));
  pp_tap_act (tap, tap_data, &h, NCHW_DIMS, "out");
  return h;
}

/* @t as an activation of m's backend: a view of a device tensor, or a
 * pooled copy of a host one (to release with pp_act_clear either way). */
static gboolean
input_act (PpUnet * m, const PpTensor * t, gint n, gint c, gint h, gint w,
    PpAct * out, GError ** error)
{
  if (t->backend == m->be) {
    *out = pp_act_view (m->pool, t->data, t->dtype, n, c, h, w);
    return TRUE;
  }
  if (t->backend != NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "UNet on %s: tensor '%s' is on %s", m->be->name, t->name,
        t->backend->name);
    return FALSE;
  }
  *out = pp_act_new_as (m->pool, t->dtype, n, c, h, w);
  pp_backend_upload (m->be, out->data, t->data, pp_act_bytes (out));
  return TRUE;
}

/* Before a forward on @ctx: keeps the cache when it holds @ctx's
 * projections, else empties it for this forward to fill (a build). */
static void
kv_cache_begin (KvCache * kv, const PpTensor * ctx)
{
  if (!kv->enabled)
    return;
  if (ctx != kv->context || ctx->data != kv->context_data) {
    kv_cache_drop (kv);
    kv->context = ctx;
    kv->context_data = ctx->data;
  }
  if (kv->entries->len == 0)
    kv->builds++;
  kv->active = TRUE;
  kv->next = 0;
}

static gboolean
forward_acts (PpUnet * m, const PpTensor * sample, const Timesteps * ts,
    const PpTensor * ctx, gboolean use_cache, PpAct * out, PpTapFunc tap,
    gpointer tap_data, GError ** error)
{
  PpAct input, context;
  gint batch;

  if (!check_inputs (m, sample, ctx, error))
    return FALSE;
  batch = (gint) sample->shape[0];
  if (m->bank != NULL && batch != 1) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "a UNet with a temporal "
        "feature bank takes one sample at a time, received %d", batch);
    return FALSE;
  }
  if (!input_act (m, sample, batch, m->in_channels, (gint) sample->shape[2],
          (gint) sample->shape[3], &input, error))
    return FALSE;
  if (!input_act (m, ctx, (gint) ctx->shape[0], (gint) ctx->shape[1], 1,
          m->cross_dim, &context, error)) {
    pp_act_clear (&input);
    return FALSE;
  }
  /* One forward at a time: they share the skip stack. */
  g_mutex_lock (&m->forward_lock);
  if (use_cache)
    kv_cache_begin (m->kv, ctx);
  if (m->bank != NULL)
    pp_feature_bank_begin (m->bank);
  *out = unet_forward (m, &input, ts, &context, tap, tap_data);
  m->kv->active = FALSE;
  g_mutex_unlock (&m->forward_lock);
  pp_act_clear (&input);
  pp_act_clear (&context);
  return TRUE;
}

gboolean
pp_unet_forward (PpUnet * m, const PpTensor * sample, gdouble timestep,
    const PpTensor * encoder_hidden_states, PpTensor ** out, PpTapFunc tap,
    gpointer tap_data, GError ** error)
{
  const Timesteps ts = { timestep, NULL };
  PpAct h;

  if (!forward_acts (m, sample, &ts, encoder_hidden_states, FALSE, &h,
          tap, tap_data, error))
    return FALSE;
  {
    const gint64 shape[NCHW_DIMS] = { h.n, h.c, h.h, h.w };

    /* A byte copy into a float32 tensor. */
    pp_act_convert (&h, PP_DTYPE_F32);
    *out = sample->backend != NULL
        ? pp_tensor_new_on (m->be, "out", PP_DTYPE_F32, NCHW_DIMS, shape,
        error)
        : pp_tensor_new ("out", PP_DTYPE_F32, NCHW_DIMS, shape, error);
    if (*out != NULL && sample->backend != NULL)
      pp_backend_copy (m->be, (*out)->data, h.data, (*out)->nbytes);
    else if (*out != NULL)
      pp_backend_download (m->be, (*out)->data, h.data, (*out)->nbytes);
  }
  pp_act_clear (&h);
  return *out != NULL;
}

static gboolean
forward_into (PpUnet * m, const PpTensor * sample, const Timesteps * ts,
    const PpTensor * encoder_hidden_states, PpTensor * out, GError ** error)
{
  const gsize want = sample->ndim == NCHW_DIMS
      ? (gsize) sample->shape[0] * m->out_channels * sample->shape[2]
      * sample->shape[3] * sizeof (gfloat) : 0;
  PpAct h;

  if (out->backend != m->be || out->nbytes != want
      || out->dtype != PP_DTYPE_F32) {
    g_autofree gchar *got = pp_tensor_describe (out);

    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "UNet output: expected F32 [N,%d,H,W] of the sample on %s, "
        "received %s", m->out_channels, m->be->name, got);
    return FALSE;
  }
  if (!forward_acts (m, sample, ts, encoder_hidden_states, TRUE, &h,
          NULL, NULL, error))
    return FALSE;
  /* A byte copy into the float32 output. */
  pp_act_convert (&h, PP_DTYPE_F32);
  pp_backend_copy (m->be, out->data, h.data, out->nbytes);
  pp_act_clear (&h);
  return TRUE;
}

gboolean
pp_unet_forward_into (PpUnet * m, const PpTensor * sample, gdouble timestep,
    const PpTensor * encoder_hidden_states, PpTensor * out, GError ** error)
{
  const Timesteps ts = { timestep, NULL };

  return forward_into (m, sample, &ts, encoder_hidden_states, out, error);
}

gboolean
pp_unet_forward_batch_into (PpUnet * m, const PpTensor * sample,
    const gdouble * timesteps, const PpTensor * encoder_hidden_states,
    PpTensor * out, GError ** error)
{
  const Timesteps ts = { 0.0, timesteps };

  return forward_into (m, sample, &ts, encoder_hidden_states, out, error);
}

void
pp_unet_context_changed (PpUnet * m)
{
  g_mutex_lock (&m->forward_lock);
  kv_cache_drop (m->kv);
  g_mutex_unlock (&m->forward_lock);
}

guint64
pp_unet_kv_cache_builds (PpUnet * m)
{
  guint64 builds;

  g_mutex_lock (&m->forward_lock);
  builds = m->kv->builds;
  g_mutex_unlock (&m->forward_lock);
  return builds;
}

void
pp_unet_pools (PpUnet * m, PpPoolBytes * sum)
{
  pp_pool_count (m->pool, sum);
}

PpDType
pp_unet_act_dtype (PpUnet * m)
{
  return pp_pool_act_dtype (m->pool);
}

PpLayout
pp_unet_act_layout (PpUnet * m)
{
  return m->layout;
}
