/* ppdiffuse — TAESD (diffusers AutoencoderTiny) forward passes.
 *
 * Both halves are a flat list of layers, numbered like diffusers'
 * nn.Sequential so that layer i binds the keys "encoder.layers.{i}.…" and
 * reports tap "encoder.layers.{i}". */
#include "pp-taesd.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-layers.h"
#include "pp-ops.h"

#include <string.h>

#define KERNEL 3
#define PAD 1
#define DOWN_STRIDE 2
#define NCHW_DIMS 4
/* Encoder input: [-1, 1] → [0, 1]; decoder output: [0, 1] → [-1, 1]. */
#define IMAGE_SHIFT 1.0f
#define IMAGE_SCALE 2.0f
/* The decoder first soft-clamps latents to (-3, 3): tanh(x / 3) · 3. */
#define LATENT_CLAMP 3.0f

typedef enum
{
  LAYER_CONV,
  LAYER_BLOCK,                  /* AutoencoderTinyBlock */
  LAYER_ACT,
  LAYER_UPSAMPLE,
} LayerType;

typedef struct
{
  LayerType type;
  PpConv conv;                  /* LAYER_CONV */
  PpConv block_conv[3];         /* LAYER_BLOCK: conv.0, conv.2, conv.4 */
  PpConv skip;                  /* LAYER_BLOCK, when in != out */
  gboolean has_skip;
} Layer;

/* Sequential indices of the three convolutions inside a block's conv. */
static const guint block_conv_index[3] = { 0, 2, 4 };

struct _PpTaesd
{
  gchar *config_path;
  PpWeights *owned_weights;     /* set by pp_taesd_load */
  PpBackend *be;
  GPtrArray *device_weights;    /* uploaded copies, on backends that need
                                 * them */
  /* Activations, reused across frames: one pool per half, since rank 0
   * encodes on one thread while it decodes on another, and a pool shared
   * by both would keep growing with each new way their frames overlap. */
  PpPool *encoder_pool;
  PpPool *decoder_pool;
  /* Of the activations between a half's first and last convolution
   * (pp_backend_act_layout): its input and output stay NCHW. */
  PpLayout layout;
  gint in_channels, out_channels, latent_channels;
  gint upsampling_factor;
  PpActFn act;
  guint encoder_down;           /* image pixels per latent pixel */
  guint decoder_up;
  GArray *encoder;              /* Layer */
  GArray *decoder;
};

static void
add_conv (PpBinder * b, GArray * layers, const gchar * half, gint cin,
    gint cout, gint stride, gboolean bias)
{
  Layer layer = { LAYER_CONV };

  pp_bind_conv (b, &layer.conv, cin, cout, KERNEL, stride, PAD, bias,
      "%s.layers.%u", half, layers->len);
  g_array_append_val (layers, layer);
}

/* A convolution (without a bias) that follows a ×2 upsampling. */
static void
add_conv_up2 (PpBinder * b, GArray * layers, const gchar * half, gint cin,
    gint cout)
{
  Layer layer = { LAYER_CONV };

  pp_bind_conv_up2 (b, &layer.conv, cin, cout, FALSE, "%s.layers.%u", half,
      layers->len);
  g_array_append_val (layers, layer);
}

static void
add_block (PpBinder * b, GArray * layers, const gchar * half, gint cin,
    gint cout)
{
  Layer layer = { LAYER_BLOCK };
  guint index = layers->len;

  for (guint i = 0; i < G_N_ELEMENTS (block_conv_index); i++)
    pp_bind_conv (b, &layer.block_conv[i], i == 0 ? cin : cout, cout, KERNEL,
        1, PAD, TRUE, "%s.layers.%u.conv.%u", half, index,
        block_conv_index[i]);
  layer.has_skip = cin != cout;
  if (layer.has_skip)
    pp_bind_conv (b, &layer.skip, cin, cout, 1, 1, 0, FALSE,
        "%s.layers.%u.skip", half, index);
  g_array_append_val (layers, layer);
}

static void
add_plain (GArray * layers, LayerType type)
{
  Layer layer = { type };

  g_array_append_val (layers, layer);
}

/* Reads a per-stage list; every stage must have the same channel count
 * because diffusers builds stage i's first layer as C_i → C_i. */
static gboolean
read_stages (PpConfig * cfg, const gchar * path, const gchar * channels_key,
    const gchar * blocks_key, GArray ** channels, GArray ** blocks,
    GError ** error)
{
  if (!pp_config_get_int_list (cfg, channels_key, 0, channels, error))
    return FALSE;
  if (!pp_config_get_int_list (cfg, blocks_key, (*channels)->len, blocks,
          error))
    return FALSE;
  if ((*channels)->len == 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' is an empty list", path, channels_key);
    return FALSE;
  }
  if ((*blocks)->len != (*channels)->len) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key '%s' has %u entries but '%s' has %u", path, blocks_key,
        (*blocks)->len, channels_key, (*channels)->len);
    return FALSE;
  }
  for (guint i = 0; i < (*channels)->len; i++) {
    gint64 c = g_array_index (*channels, gint64, i);
    gint64 n = g_array_index (*blocks, gint64, i);

    if (c < 1 || c > G_MAXINT || c != g_array_index (*channels, gint64, 0)) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: key '%s' entry %u is %" G_GINT64_FORMAT "; every stage must "
          "have the same positive channel count (%" G_GINT64_FORMAT ")",
          path, channels_key, i, c, g_array_index (*channels, gint64, 0));
      return FALSE;
    }
    if (n < 0 || n > G_MAXINT) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "%s: key '%s' entry %u is %" G_GINT64_FORMAT
          "; expected a block count ≥ 0", path, blocks_key, i, n);
      return FALSE;
    }
  }
  return TRUE;
}

PpTaesd *
pp_taesd_new (const gchar * config_path, PpWeights * weights, PpBackend * be,
    GError ** error)
{
  /* AutoencoderTiny's defaults, used where config.json omits a key */
  static const gint64 def_in = 3, def_out = 3, def_latent = 4, def_up = 2;
  g_autoptr (PpTaesd) m = g_new0 (PpTaesd, 1);
  g_autoptr (GArray) enc_ch = NULL, enc_n = NULL, dec_ch = NULL, dec_n =
      NULL;
  g_autofree gchar *act_fn = NULL, *upsample_fn = NULL;
  PpConfig *cfg;
  PpBinder b = pp_binder_init (weights, be);
  gdouble scaling, shift;
  gboolean ok;
  PpDType act_dtype;

  m->config_path = g_strdup (config_path);
  m->be = be;
  m->encoder = g_array_new (FALSE, TRUE, sizeof (Layer));
  m->decoder = g_array_new (FALSE, TRUE, sizeof (Layer));
  cfg = pp_config_load (config_path, error);
  if (cfg == NULL)
    return NULL;
  ok = pp_config_get_positive_int (cfg, "in_channels", def_in,
      &m->in_channels, error)
      && pp_config_get_positive_int (cfg, "out_channels", def_out,
      &m->out_channels, error)
      && pp_config_get_positive_int (cfg, "latent_channels", def_latent,
      &m->latent_channels, error)
      && pp_config_get_positive_int (cfg, "upsampling_scaling_factor", def_up,
      &m->upsampling_factor, error)
      && read_stages (cfg, config_path, "encoder_block_out_channels",
      "num_encoder_blocks", &enc_ch, &enc_n, error)
      && read_stages (cfg, config_path, "decoder_block_out_channels",
      "num_decoder_blocks", &dec_ch, &dec_n, error)
      && pp_config_get_string (cfg, "act_fn", "relu", &act_fn, error)
      && pp_config_get_string (cfg, "upsample_fn", "nearest", &upsample_fn,
      error)
      && pp_config_get_double (cfg, "scaling_factor", 1.0, &scaling, error)
      && pp_config_get_double (cfg, "shift_factor", 0.0, &shift, error);
  pp_config_free (cfg);
  if (!ok)
    return NULL;
  if (!pp_config_act_fn (config_path, act_fn, "act_fn",
          (1u << PP_ACT_RELU) | (1u << PP_ACT_SILU), &m->act, error))
    return NULL;
  if (g_strcmp0 (upsample_fn, "nearest") != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key 'upsample_fn' is \"%s\"; only \"nearest\" is supported",
        config_path, upsample_fn);
    return NULL;
  }
  /* The pipeline hands TAESD latents to the UNet unscaled. */
  if (scaling != 1.0 || shift != 0.0) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: keys 'scaling_factor' and 'shift_factor' are %g and %g; only "
        "1 and 0 are supported (latents go to the UNet as they are)",
        config_path, scaling, shift);
    return NULL;
  }

  /* Encoder: per stage a conv (the first maps the image in, the others
   * halve the size), its blocks, then a conv to the latent channels. */
  m->encoder_down = 1;
  for (guint i = 0; i < enc_ch->len; i++) {
    gint c = (gint) g_array_index (enc_ch, gint64, i);

    if (i == 0)
      add_conv (&b, m->encoder, "encoder", m->in_channels, c, 1, TRUE);
    else {
      add_conv (&b, m->encoder, "encoder", c, c, DOWN_STRIDE, FALSE);
      m->encoder_down *= DOWN_STRIDE;
    }
    for (gint64 j = 0; j < g_array_index (enc_n, gint64, i); j++)
      add_block (&b, m->encoder, "encoder", c, c);
  }
  add_conv (&b, m->encoder, "encoder",
      (gint) g_array_index (enc_ch, gint64, enc_ch->len - 1),
      m->latent_channels, 1, TRUE);

  /* Decoder: conv in + activation, then per stage its blocks, an upsample
   * between stages, and a conv (the last one to the image channels). */
  m->decoder_up = 1;
  add_conv (&b, m->decoder, "decoder", m->latent_channels,
      (gint) g_array_index (dec_ch, gint64, 0), 1, TRUE);
  add_plain (m->decoder, LAYER_ACT);
  for (guint i = 0; i < dec_ch->len; i++) {
    gint c = (gint) g_array_index (dec_ch, gint64, i);
    gboolean last = i + 1 == dec_ch->len;

    for (gint64 j = 0; j < g_array_index (dec_n, gint64, i); j++)
      add_block (&b, m->decoder, "decoder", c, c);
    if (!last) {
      add_plain (m->decoder, LAYER_UPSAMPLE);
      m->decoder_up *= m->upsampling_factor;
    }
    /* The upsampling's convolution as its output phases
     * (pp_bind_conv_up2), which take in the upsampling. */
    if (!last && m->upsampling_factor == 2)
      add_conv_up2 (&b, m->decoder, "decoder", c, c);
    else
      add_conv (&b, m->decoder, "decoder", c, last ? m->out_channels : c, 1,
          last);
  }
  if (!pp_binder_finish (&b, error))
    return NULL;
  m->device_weights = b.device;
  /* Activations in the weights' dtype where the backend computes on them
   * (pp_backend_act_dtype). */
  act_dtype = pp_backend_act_dtype (be,
      g_array_index (m->encoder, Layer, 0).conv.weight.dtype);
  m->encoder_pool = pp_pool_new (be, act_dtype);
  m->decoder_pool = pp_pool_new (be, act_dtype);
  m->layout = pp_backend_act_layout (be, act_dtype);
  return g_steal_pointer (&m);
}

/* Another class is said before its weights load, rather than as a
 * missing TAESD key (pp_vae_load picks the class; this is for callers that
 * ask for TAESD by name). */
static gboolean
check_vae_class (const gchar * component_dir, GError ** error)
{
  g_autofree gchar *klass = pp_component_class (component_dir);

  if (klass == NULL || g_str_equal (klass, "AutoencoderTiny"))
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "%s holds a %s (its config.json's _class_name), not a TAESD "
      "(AutoencoderTiny)", component_dir, klass);
  return FALSE;
}

PpTaesd *
pp_taesd_load (const gchar * component_dir, PpBackend * be, PpDType dtype,
    GError ** error)
{
  PpWeights *weights = NULL;
  PpTaesd *m;

  if (!check_vae_class (component_dir, error))
    return NULL;
  m = pp_component_load (component_dir, be, dtype,
      (PpComponentNewFunc) pp_taesd_new, (GDestroyNotify) pp_taesd_free,
      NULL, 0, &weights, error);
  if (m != NULL)
    m->owned_weights = weights;
  return m;
}

void
pp_taesd_free (PpTaesd * m)
{
  if (m == NULL)
    return;
  g_free (m->config_path);
  g_clear_pointer (&m->encoder, g_array_unref);
  g_clear_pointer (&m->decoder, g_array_unref);
  pp_device_weights_free (m->be, m->device_weights);
  g_clear_pointer (&m->encoder_pool, pp_pool_free);
  g_clear_pointer (&m->decoder_pool, pp_pool_free);
  g_clear_pointer (&m->owned_weights, pp_weights_free);
  g_free (m);
}

void
pp_taesd_pools (PpTaesd * m, PpPoolBytes * sum)
{
  pp_pool_count (m->encoder_pool, sum);
  pp_pool_count (m->decoder_pool, sum);
}

guint
pp_taesd_latent_channels (PpTaesd * m)
{
  return m->latent_channels;
}

guint
pp_taesd_scale_factor (PpTaesd * m)
{
  return m->decoder_up;
}

/* Forward */

/* conv(x) then the block's activation: one op when it is ReLU. */
static PpAct
conv_act (const PpTaesd * m, const PpConv * conv, const PpAct * x)
{
  PpAct h;

  if (m->act == PP_ACT_RELU)
    return pp_conv_relu_apply (conv, x);
  h = pp_conv_apply (conv, x);
  pp_act_fn_apply (m->act, &h);
  return h;
}

/* AutoencoderTinyBlock: fuse(conv(x) + skip(x)), fuse being ReLU: the
 * last convolution, the skip and the ReLU in one op. */
static PpAct
block_forward (const PpTaesd * m, const Layer * layer, const PpAct * x)
{
  PpAct h = conv_act (m, &layer->block_conv[0], x);
  PpAct y;

  pp_act_replace (&h, conv_act (m, &layer->block_conv[1], &h));
  if (layer->has_skip) {
    PpAct s = pp_conv_apply (&layer->skip, x);

    y = pp_conv_residual_apply (&layer->block_conv[2], &h, &s, TRUE);
    pp_act_clear (&s);
  } else
    y = pp_conv_residual_apply (&layer->block_conv[2], &h, x, TRUE);
  pp_act_clear (&h);
  return y;
}

/* Runs @layers over @x (consumed), tapping "{half}.layers.{i}": in m's
 * layout from the first layer's output on, and NCHW from the last's when
 * it is a convolution (each reading the other layout as it is). */
static PpAct
run_layers (const PpTaesd * m, GArray * layers, const gchar * half, PpAct x,
    PpTapFunc tap, gpointer tap_data)
{
  for (guint i = 0; i < layers->len; i++) {
    const Layer *layer = &g_array_index (layers, Layer, i);

    if (i == 0 && layer->type != LAYER_CONV)
      pp_act_lay (&x, m->layout);
    switch (layer->type) {
      case LAYER_CONV:
        pp_act_replace (&x, pp_conv_apply_laid (&layer->conv, &x,
                i + 1 == layers->len ? PP_LAYOUT_NCHW : m->layout));
        break;
      case LAYER_BLOCK:
        pp_act_replace (&x, block_forward (m, layer, &x));
        break;
      case LAYER_ACT:
        pp_act_fn_apply (m->act, &x);
        break;
      case LAYER_UPSAMPLE:{
        const Layer *next = i + 1 < layers->len
            ? &g_array_index (layers, Layer, i + 1) : NULL;

        /* The convolution after it, bound as its output phases, reads x
         * itself (the upsampled x is made only for a tap): both layers in
         * one step. */
        if (next != NULL && next->type == LAYER_CONV && next->conv.phases) {
          if (tap != NULL) {
            PpAct y = pp_act_upsample (&x, m->upsampling_factor);

            pp_tap_act (tap, tap_data, &y, NCHW_DIMS, "%s.layers.%u", half,
                i);
            pp_act_clear (&y);
          }
          pp_act_replace (&x, pp_conv_up2_apply (&next->conv, &x));
          i++;
        } else
          pp_act_replace (&x, pp_act_upsample (&x,
              m->upsampling_factor));
        break;
      }
    }
    pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "%s.layers.%u", half, i);
  }
  return x;
}

static gboolean
encode (PpTaesd * m, const PpTensor * image, PpTensor ** latents,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  PpAct x;

  if (!pp_act_from_tensor (m->encoder_pool, image, "TAESD encode input",
          m->in_channels, m->encoder_down, &x, error))
    return FALSE;
  /* [-1, 1] → [0, 1] */
  pp_affine (m->be, pp_act_out (&x), pp_act_numel (&x), 1.0f / IMAGE_SCALE,
      IMAGE_SHIFT / IMAGE_SCALE);
  x = run_layers (m, m->encoder, "encoder", x, tap, tap_data);
  pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "latents");
  return pp_act_to_tensor (&x, "TAESD latents", "latents",
      image->backend != NULL, latents, error);
}

static gboolean
decode (PpTaesd * m, const PpTensor * latents, PpTensor ** image,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  PpAct x;
  gsize n;

  if (!pp_act_from_tensor (m->decoder_pool, latents, "TAESD decode input",
          m->latent_channels, 1, &x, error))
    return FALSE;
  /* tanh(x / 3) · 3 */
  n = pp_act_numel (&x);
  pp_scale (m->be, pp_act_out (&x), n, 1.0f / LATENT_CLAMP);
  pp_tanh (m->be, pp_act_out (&x), n);
  pp_scale (m->be, pp_act_out (&x), n, LATENT_CLAMP);
  x = run_layers (m, m->decoder, "decoder", x, tap, tap_data);
  /* [0, 1] → [-1, 1] */
  pp_affine (m->be, pp_act_out (&x), pp_act_numel (&x), IMAGE_SCALE,
      -IMAGE_SHIFT);
  pp_tap_act (tap, tap_data, &x, NCHW_DIMS, "image");
  return pp_act_to_tensor (&x, "TAESD image", "image",
      latents->backend != NULL, image, error);
}

gboolean
pp_taesd_encode (PpTaesd * m, const PpTensor * image, PpTensor ** latents,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  *latents = NULL;
  return encode (m, image, latents, tap, tap_data, error);
}

gboolean
pp_taesd_decode (PpTaesd * m, const PpTensor * latents, PpTensor ** image,
    PpTapFunc tap, gpointer tap_data, GError ** error)
{
  *image = NULL;
  return decode (m, latents, image, tap, tap_data, error);
}

gboolean
pp_taesd_encode_into (PpTaesd * m, const PpTensor * image,
    PpTensor * latents, GError ** error)
{
  return encode (m, image, &latents, NULL, NULL, error);
}

gboolean
pp_taesd_decode_into (PpTaesd * m, const PpTensor * latents,
    PpTensor * image, GError ** error)
{
  return decode (m, latents, &image, NULL, NULL, error);
}

PpLayout
pp_taesd_act_layout (PpTaesd * m)
{
  return m->layout;
}

PpDType
pp_taesd_act_dtype (PpTaesd * m)
{
  return pp_pool_act_dtype (m->decoder_pool);
}
