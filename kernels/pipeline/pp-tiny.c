/* ppdiffuse — small random-weight models. */
#include "pp-tiny.h"
#include "pp-clip-tokenizer.h"
#include "pp-clip-tokenizer-tiny.h"
#include "pp-clip-text.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-npy.h"
#include "pp-rng.h"
#include "pp-taesd.h"
#include "pp-vae-kl.h"
#include "pp-unet.h"
#include "pp-weights.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <string.h>
#include <json-glib/json-glib.h>

#define WEIGHTS_FILE "diffusion_pytorch_model.safetensors"
/* CLIP's context length: the text encoder's output rows. */
#define SD_PROMPT_TOKENS 77
#define PROMPT_TOKENS 8
/* Seeds of the components derive from the user's seed, apart from each other. */
#define SEED_VAE_OFFSET 1
#define SEED_EMBEDS_OFFSET 2
#define SEED_TEXT_OFFSET 3
/* The tiny text encoder: two layers of heads of TEXT_HEAD_DIM, an MLP of
 * TEXT_MLP_RATIO × the width (CLIP's), layer norms of CLIP's eps. */
#define TEXT_LAYERS 2
#define TEXT_HEAD_DIM 8
#define TEXT_MLP_RATIO 4
#define TEXT_LAYER_NORM_EPS 1e-5

static void
add_int_list (JsonBuilder * b, const gchar * key, const gint * v, guint n)
{
  json_builder_set_member_name (b, key);
  json_builder_begin_array (b);
  for (guint i = 0; i < n; i++)
    json_builder_add_int_value (b, v[i]);
  json_builder_end_array (b);
}

static void
add_string_list (JsonBuilder * b, const gchar * key,
    const gchar * const *v, guint n)
{
  json_builder_set_member_name (b, key);
  json_builder_begin_array (b);
  for (guint i = 0; i < n; i++)
    json_builder_add_string_value (b, v[i]);
  json_builder_end_array (b);
}

#define SET_INT(b, k, v) \
  (json_builder_set_member_name (b, k), json_builder_add_int_value (b, v))
#define SET_DOUBLE(b, k, v) \
  (json_builder_set_member_name (b, k), json_builder_add_double_value (b, v))
#define SET_BOOL(b, k, v) \
  (json_builder_set_member_name (b, k), json_builder_add_boolean_value (b, v))
#define SET_STRING(b, k, v) \
  (json_builder_set_member_name (b, k), json_builder_add_string_value (b, v))

static gboolean
save_builder (JsonBuilder * b, const gchar * path, GError ** error)
{
  g_autoptr (JsonNode) root = NULL;

  json_builder_end_object (b);
  root = json_builder_get_root (b);
  return pp_config_save_json (path, root, error);
}

/* The released stabilityai/sd-turbo UNet (SD 2.1's architecture). */
static guint
unet_config_sd_turbo (JsonBuilder * b)
{
  static const gint channels[] = { 320, 640, 1280, 1280 };
  static const gint heads[] = { 5, 10, 20, 20 };
  static const gchar *const down[] = { "CrossAttnDownBlock2D",
    "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"
  };
  static const gchar *const up[] = { "UpBlock2D", "CrossAttnUpBlock2D",
    "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"
  };
  const guint cross_dim = 1024;

  json_builder_begin_object (b);
  SET_STRING (b, "_class_name", "UNet2DConditionModel");
  SET_INT (b, "in_channels", 4);
  SET_INT (b, "out_channels", 4);
  add_int_list (b, "block_out_channels", channels, 4);
  SET_INT (b, "layers_per_block", 2);
  add_string_list (b, "down_block_types", down, 4);
  add_string_list (b, "up_block_types", up, 4);
  SET_STRING (b, "mid_block_type", "UNetMidBlock2DCrossAttn");
  SET_INT (b, "cross_attention_dim", cross_dim);
  add_int_list (b, "attention_head_dim", heads, 4);
  SET_INT (b, "norm_num_groups", 32);
  SET_DOUBLE (b, "norm_eps", 1e-5);
  SET_BOOL (b, "use_linear_projection", TRUE);
  SET_BOOL (b, "flip_sin_to_cos", TRUE);
  SET_INT (b, "freq_shift", 0);
  SET_STRING (b, "act_fn", "silu");
  SET_INT (b, "sample_size", 64);
  return cross_dim;
}

static guint
unet_config (JsonBuilder * b, gboolean turbo)
{
  static const gint channels[] = { 32, 64 };
  static const gint heads_turbo[] = { 2, 4 };
  static const gchar *const down_sd15[] =
      { "CrossAttnDownBlock2D", "DownBlock2D" };
  static const gchar *const up_sd15[] = { "UpBlock2D", "CrossAttnUpBlock2D" };
  static const gchar *const down_turbo[] =
      { "CrossAttnDownBlock2D", "CrossAttnDownBlock2D" };
  static const gchar *const up_turbo[] =
      { "CrossAttnUpBlock2D", "CrossAttnUpBlock2D" };
  guint cross_dim = turbo ? 24 : 16;

  json_builder_begin_object (b);
  SET_STRING (b, "_class_name", "UNet2DConditionModel");
  SET_INT (b, "in_channels", 4);
  SET_INT (b, "out_channels", 4);
  add_int_list (b, "block_out_channels", channels, 2);
  SET_INT (b, "layers_per_block", turbo ? 2 : 1);
  add_string_list (b, "down_block_types", turbo ? down_turbo : down_sd15, 2);
  add_string_list (b, "up_block_types", turbo ? up_turbo : up_sd15, 2);
  SET_STRING (b, "mid_block_type", "UNetMidBlock2DCrossAttn");
  SET_INT (b, "cross_attention_dim", cross_dim);
  if (turbo)
    add_int_list (b, "attention_head_dim", heads_turbo, 2);
  else
    SET_INT (b, "attention_head_dim", 2);
  SET_INT (b, "norm_num_groups", 8);
  SET_DOUBLE (b, "norm_eps", 1e-5);
  SET_BOOL (b, "use_linear_projection", turbo);
  SET_BOOL (b, "flip_sin_to_cos", TRUE);
  SET_INT (b, "freq_shift", 0);
  SET_STRING (b, "act_fn", "silu");
  SET_INT (b, "sample_size", 8);
  SET_INT (b, "transformer_layers_per_block", 1);
  return cross_dim;
}

static void
taesd_config (JsonBuilder * b, gboolean released)
{
  static const gint tiny_channels[] = { 8, 8, 8, 8 };
  static const gint tiny_blocks[] = { 1, 1, 1, 1 };
  /* madebyollin/taesd */
  static const gint released_channels[] = { 64, 64, 64, 64 };
  static const gint encoder_blocks[] = { 1, 3, 3, 3 };
  static const gint decoder_blocks[] = { 3, 3, 3, 1 };
  const gint *channels = released ? released_channels : tiny_channels;

  json_builder_begin_object (b);
  SET_STRING (b, "_class_name", "AutoencoderTiny");
  SET_INT (b, "in_channels", 3);
  SET_INT (b, "out_channels", 3);
  SET_INT (b, "latent_channels", 4);
  add_int_list (b, "encoder_block_out_channels", channels, 4);
  add_int_list (b, "decoder_block_out_channels", channels, 4);
  add_int_list (b, "num_encoder_blocks", released ? encoder_blocks
      : tiny_blocks, 4);
  add_int_list (b, "num_decoder_blocks", released ? decoder_blocks
      : tiny_blocks, 4);
  SET_INT (b, "upsampling_scaling_factor", 2);
  SET_STRING (b, "act_fn", "relu");
  SET_DOUBLE (b, "scaling_factor", 1.0);
}

/* A small AutoencoderKL: the SD VAE's layout (four stages, 8 image pixels
 * per latent pixel, the mid blocks' attention) at widths 8 and 16. */
static void
vae_kl_config (JsonBuilder * b)
{
  static const gint channels[] = { 8, 16, 16, 16 };
  static const gchar *const down[] = { "DownEncoderBlock2D",
    "DownEncoderBlock2D", "DownEncoderBlock2D", "DownEncoderBlock2D"
  };
  static const gchar *const up[] = { "UpDecoderBlock2D", "UpDecoderBlock2D",
    "UpDecoderBlock2D", "UpDecoderBlock2D"
  };

  json_builder_begin_object (b);
  SET_STRING (b, "_class_name", "AutoencoderKL");
  SET_INT (b, "in_channels", 3);
  SET_INT (b, "out_channels", 3);
  SET_INT (b, "latent_channels", 4);
  add_int_list (b, "block_out_channels", channels, G_N_ELEMENTS (channels));
  add_string_list (b, "down_block_types", down, G_N_ELEMENTS (down));
  add_string_list (b, "up_block_types", up, G_N_ELEMENTS (up));
  SET_INT (b, "layers_per_block", 1);
  SET_INT (b, "norm_num_groups", 4);
  SET_STRING (b, "act_fn", "silu");
  SET_INT (b, "sample_size", 32);
  SET_DOUBLE (b, "scaling_factor", 0.18215);
}

static gboolean
ensure_dir (const gchar * dir, GError ** error)
{
  if (g_mkdir_with_parents (dir, 0755) == 0)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "cannot create %s: %s",
      dir, g_strerror (errno));
  return FALSE;
}

/* Weights: small models draw them from GRand (the tests' fixtures depend
 * on that sequence); the released sizes from the seeded rule, which
 * generates ~900 M values in parallel. */
static PpWeights *
new_weights (guint64 seed, gboolean released)
{
  return released ? pp_weights_new_seeded (seed)
      : pp_weights_new_random (seed);
}

/* Builds the model of @config on @w once, so that every weight it asks
 * for is generated, and frees it. */
static gboolean
build_vae (const gchar * config, PpWeights * w, gboolean kl, GError ** error)
{
  if (kl) {
    g_autoptr (PpVaeKl) m = pp_vae_kl_new (config, w, pp_backend_cpu (),
        error);

    return m != NULL;
  } else {
    g_autoptr (PpTaesd) m = pp_taesd_new (config, w, pp_backend_cpu (),
        error);

    return m != NULL;
  }
}

/* A VAE component: TAESD (the released size or a tiny one), or a tiny
 * AutoencoderKL when @kl. */
static gboolean
write_vae (const gchar * dir, guint64 seed, gboolean released, gboolean kl,
    GError ** error)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree gchar *config = g_build_filename (dir, "config.json", NULL);
  g_autofree gchar *weights = g_build_filename (dir, WEIGHTS_FILE, NULL);
  PpWeights *w;
  gboolean ok;

  if (kl)
    vae_kl_config (b);
  else
    taesd_config (b, released);
  if (!ensure_dir (dir, error) || !save_builder (b, config, error))
    return FALSE;
  w = new_weights (seed, released);
  ok = build_vae (config, w, kl, error)
      && pp_weights_save (w, weights, error);
  pp_weights_free (w);
  return ok;
}

static gboolean
write_unet (const gchar * dir, gboolean turbo, gboolean released,
    guint64 seed, guint * cross_dim, GError ** error)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree gchar *config = g_build_filename (dir, "config.json", NULL);
  g_autofree gchar *weights = g_build_filename (dir, WEIGHTS_FILE, NULL);
  PpWeights *w;
  PpUnet *m = NULL;
  gboolean ok;

  *cross_dim = released ? unet_config_sd_turbo (b) : unet_config (b, turbo);
  if (!ensure_dir (dir, error) || !save_builder (b, config, error))
    return FALSE;
  w = new_weights (seed, released);
  ok = (m = pp_unet_new (config, w, pp_backend_cpu (), error)) != NULL
      && pp_weights_save (w, weights, error);
  g_clear_pointer (&m, pp_unet_free);
  pp_weights_free (w);
  return ok;
}

/* The modules a LoRA of kind "lora" adapts, as LCM-LoRA does: attention
 * projections, the transformer's in and out projections, its feed-forward,
 * the resnets' convolutions. */
static const gchar *const lora_targets[] = {
  ".to_q.weight", ".to_k.weight", ".to_v.weight", ".to_out.0.weight",
  ".proj_in.weight", ".proj_out.weight", ".ff.net.0.proj.weight",
  ".ff.net.2.weight", ".conv1.weight", ".conv2.weight",
};

static gboolean
is_lora_target (const gchar * key)
{
  for (guint i = 0; i < G_N_ELEMENTS (lora_targets); i++)
    if (g_str_has_suffix (key, lora_targets[i]))
      return TRUE;
  return FALSE;
}

/* A kohya-layout LoRA (lora_unet_…, rank 4, alpha 4) for the UNet of kind
 * "sd15", in DIR/pytorch_lora_weights.safetensors: LCM-LoRA's layout and
 * file name, random values. */
static gboolean
write_lora (const gchar * dir, guint64 seed, GError ** error)
{
  const gint64 rank = 4;
  const gfloat alpha = 4.0f, std = 0.05f;
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree gchar *config = g_build_filename (dir, "unet-config.json",
      NULL);
  g_autofree gchar *path = g_build_filename (dir, PP_TINY_LORA_FILE, NULL);
  g_autoptr (GArray) entries = g_array_new (FALSE, TRUE, sizeof (PpStEntry));
  g_autoptr (GPtrArray) owned = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GRand) rand = g_rand_new_with_seed ((guint32) seed);
  PpWeights *w;
  PpUnet *m;
  gboolean ok;

  unet_config (b, FALSE);
  if (!ensure_dir (dir, error) || !save_builder (b, config, error))
    return FALSE;
  w = pp_weights_new_random (seed);
  m = pp_unet_new (config, w, pp_backend_cpu (), error);
  g_unlink (config);
  if (m == NULL) {
    pp_weights_free (w);
    return FALSE;
  }
  for (guint i = 0; i < pp_weights_n_tensors (w); i++) {
    gint64 shape[PP_ST_MAX_DIMS];
    guint ndim;
    const gchar *key = pp_weights_key (w, i, &ndim, shape);
    g_autofree gchar *module = NULL;
    gint64 cols = 1;

    if (!is_lora_target (key) || ndim < 2)
      continue;
    module = g_strndup (key, strlen (key) - strlen (".weight"));
    g_strdelimit (module, ".", '_');
    for (guint d = 1; d < ndim; d++)
      cols *= shape[d];
    for (guint part = 0; part < 3; part++) {
      PpStEntry e = { 0 };
      gsize n;
      gfloat *x;

      e.dtype = PP_ST_F32;
      if (part == 0) {          /* down [r, in, kh, kw] */
        e.ndim = ndim;
        memcpy (e.shape, shape, sizeof shape);
        e.shape[0] = rank;
        n = (gsize) (rank * cols);
      } else if (part == 1) {   /* up [out, r, 1, 1] */
        e.ndim = ndim;
        e.shape[0] = shape[0];
        e.shape[1] = rank;
        for (guint d = 2; d < ndim; d++)
          e.shape[d] = 1;
        n = (gsize) (shape[0] * rank);
      } else {                  /* alpha, a scalar */
        e.ndim = 0;
        n = 1;
      }
      x = g_new (gfloat, n);
      for (gsize j = 0; j < n; j++)
        x[j] = part == 2 ? alpha
            : (gfloat) g_rand_double_range (rand, -std, std) * 1.7f;
      g_ptr_array_add (owned, x);
      e.name = g_strdup_printf ("lora_unet_%s.%s", module,
          part == 0 ? "lora_down.weight" : part == 1 ? "lora_up.weight"
          : "alpha");
      g_ptr_array_add (owned, e.name);
      e.nbytes = n * sizeof (gfloat);
      e.data = (const guint8 *) x;
      g_array_append_val (entries, e);
    }
  }
  pp_unet_free (m);
  pp_weights_free (w);
  ok = pp_safetensors_write_entries (path, entries->len,
      (const PpStEntry *) entries->data, NULL, error);
  return ok;
}

/* A CLIPTextModel of width @width (the UNet's cross_attention_dim), quick
 * GELU as SD 1.5's OpenAI CLIP has, or GELU as SD 2.x/Turbo's OpenCLIP. */
static gboolean
write_text_encoder (const gchar * dir, guint width, gboolean gelu,
    guint64 seed, GError ** error)
{
  static const gchar *const architectures[] = { "CLIPTextModel" };
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree gchar *config = g_build_filename (dir, "config.json", NULL);
  g_autofree gchar *weights = g_build_filename (dir,
      PP_CLIP_TEXT_WEIGHTS_FILE, NULL);
  PpWeights *w;
  PpClipText *m = NULL;
  gboolean ok;

  json_builder_begin_object (b);
  add_string_list (b, "architectures", architectures,
      G_N_ELEMENTS (architectures));
  SET_STRING (b, "model_type", "clip_text_model");
  SET_INT (b, "vocab_size", PP_TINY_TEXT_VOCAB);
  SET_INT (b, "hidden_size", width);
  SET_INT (b, "intermediate_size", TEXT_MLP_RATIO * width);
  SET_INT (b, "num_hidden_layers", TEXT_LAYERS);
  SET_INT (b, "num_attention_heads", MAX (1, width / TEXT_HEAD_DIM));
  SET_INT (b, "max_position_embeddings", SD_PROMPT_TOKENS);
  SET_STRING (b, "hidden_act", gelu ? "gelu" : "quick_gelu");
  SET_DOUBLE (b, "layer_norm_eps", TEXT_LAYER_NORM_EPS);
  SET_INT (b, "bos_token_id", PP_TINY_TEXT_VOCAB - 2);
  SET_INT (b, "eos_token_id", PP_TINY_TEXT_VOCAB - 1);
  if (!ensure_dir (dir, error) || !save_builder (b, config, error))
    return FALSE;
  w = new_weights (seed, FALSE);
  ok = (m = pp_clip_text_new (config, w, pp_backend_cpu (), error)) != NULL
      && pp_weights_save (w, weights, error);
  g_clear_pointer (&m, pp_clip_text_free);
  pp_weights_free (w);
  return ok;
}

static gboolean
write_scheduler (const gchar * dir, gboolean turbo, GError ** error)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree gchar *sub = g_build_filename (dir, "scheduler", NULL);
  g_autofree gchar *path = g_build_filename (sub, "scheduler_config.json",
      NULL);

  json_builder_begin_object (b);
  SET_STRING (b, "_class_name", turbo ? "EulerDiscreteScheduler"
      : "LCMScheduler");
  SET_DOUBLE (b, "beta_start", 0.00085);
  SET_DOUBLE (b, "beta_end", 0.012);
  SET_STRING (b, "beta_schedule", "scaled_linear");
  SET_INT (b, "num_train_timesteps", 1000);
  SET_STRING (b, "prediction_type", "epsilon");
  if (turbo)
    SET_STRING (b, "timestep_spacing", "trailing");
  else
    SET_INT (b, "original_inference_steps", 50);
  return ensure_dir (sub, error) && save_builder (b, path, error);
}

static gboolean
write_index (const gchar * dir, gboolean turbo, GError ** error)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree gchar *path = g_build_filename (dir, "model_index.json", NULL);

  json_builder_begin_object (b);
  SET_STRING (b, "_class_name", turbo ? "StableDiffusionPipeline"
      : "LatentConsistencyModelPipeline");
  return save_builder (b, path, error);
}

static gboolean
write_embeds (const gchar * dir, guint cross_dim, guint tokens, guint64 seed,
    GError ** error)
{
  const gint64 shape[3] = { 1, tokens, cross_dim };
  g_autofree gchar *path = g_build_filename (dir, PP_TINY_PROMPT_EMBEDS,
      NULL);
  g_autoptr (PpTensor) t = pp_tensor_new ("prompt_embeds", PP_DTYPE_F32, 3,
      shape, error);
  PpRng rng;

  if (t == NULL)
    return FALSE;
  pp_rng_init (&rng, seed, PP_RNG_STREAM_INIT);
  pp_rng_fill_normal (&rng, t->data, (gsize) pp_tensor_numel (t));
  return pp_npy_save (path, t, error);
}

/* SD 2.x pipelines (turbo) pad prompts with "!", SD 1.x with EOS. */
static gboolean
write_tokenizer (const gchar * dir, gboolean turbo, GError ** error)
{
  g_autofree gchar *path = g_build_filename (dir, PP_TINY_TOKENIZER, NULL);

  return pp_clip_tokenizer_write_tiny (path, turbo ? "!" : PP_CLIP_EOS,
      error);
}

gboolean
pp_tiny_write (const gchar * kind, const gchar * dir, guint64 seed,
    GError ** error)
{
  g_autofree gchar *unet = g_build_filename (dir, "unet", NULL);
  g_autofree gchar *vae = g_build_filename (dir, "vae", NULL);
  g_autofree gchar *text = g_build_filename (dir, "text_encoder", NULL);
  gboolean turbo, released;
  guint cross_dim = 0;

  if (g_strcmp0 (kind, "taesd") == 0 || g_strcmp0 (kind, "vae-kl") == 0)
    return write_vae (dir, seed, FALSE, g_str_equal (kind, "vae-kl"), error);
  if (g_strcmp0 (kind, "lora") == 0)
    return write_lora (dir, seed, error);
  if (g_strcmp0 (kind, "sd15") != 0 && g_strcmp0 (kind, "turbo") != 0
      && g_strcmp0 (kind, "sd-turbo") != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "unknown kind '%s': expected sd15, turbo, taesd, vae-kl, lora or "
        "sd-turbo",
        kind);
    return FALSE;
  }
  released = g_str_equal (kind, "sd-turbo");
  turbo = released || g_str_equal (kind, "turbo");
  return ensure_dir (dir, error)
      && write_unet (unet, turbo, released, seed, &cross_dim, error)
      && write_vae (vae, seed + SEED_VAE_OFFSET, released, FALSE, error)
      && (released || write_text_encoder (text, cross_dim, turbo,
          seed + SEED_TEXT_OFFSET, error))
      && write_scheduler (dir, turbo, error)
      && write_index (dir, turbo, error)
      && write_tokenizer (dir, turbo, error)
      && write_embeds (dir, cross_dim, released ? SD_PROMPT_TOKENS
      : PROMPT_TOKENS, seed + SEED_EMBEDS_OFFSET, error);
}
