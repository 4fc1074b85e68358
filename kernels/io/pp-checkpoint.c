/* ppdiffuse — original-layout single-file checkpoints as diffusers'
 * components: key maps from the Stable Diffusion reference code's module
 * names (the LDM "CompVis" layout) to diffusers', over the file's mapping. */
#include "pp-checkpoint.h"
#include "pp-config.h"
#include "pp-error.h"

#include <errno.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>

#define UNET_PREFIX "model.diffusion_model."
#define VAE_PREFIX "first_stage_model."
#define CLIP_PREFIX "cond_stage_model.transformer."
#define OPEN_CLIP_PREFIX "cond_stage_model.model."
#define TEXT_MODEL "text_model."
/* Names listed in an error before "and N more". */
#define LIST_MAX PP_WEIGHTS_LIST_MAX
#define MAX_BLOCKS 16

/* The DDPM schedule's buffers an LDM checkpoint carries at top level:
 * diffusers computes its schedule from the scheduler's config. */
static const gchar *const schedule_buffers[] = {
  "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod",
  "sqrt_one_minus_alphas_cumprod", "log_one_minus_alphas_cumprod",
  "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
  "posterior_variance", "posterior_log_variance_clipped",
  "posterior_mean_coef1", "posterior_mean_coef2", "model_ema.decay",
  "model_ema.num_updates",
};

static const gchar *const part_names[] = {
  [PP_CHECKPOINT_UNET] = "unet", [PP_CHECKPOINT_VAE] = "vae",
  [PP_CHECKPOINT_TEXT_ENCODER] = "text_encoder",
};

gboolean
pp_checkpoint_is_file (const gchar * path)
{
  return path != NULL && g_str_has_suffix (path, ".safetensors")
      && g_file_test (path, G_FILE_TEST_IS_REGULAR);
}

const gchar *
pp_family_name (PpFamily family)
{
  return family == PP_FAMILY_SD1 ? "SD 1.x" : "SD 2.x / SD-Turbo";
}

static gboolean
is_schedule_buffer (const gchar * key)
{
  for (guint i = 0; i < G_N_ELEMENTS (schedule_buffers); i++)
    if (g_str_equal (key, schedule_buffers[i]))
      return TRUE;
  return FALSE;
}

/* The family of the checkpoint @st (at @path), told by its keys. */
static gboolean
family_of (PpSafetensors * st, const gchar * path, PpFamily * family,
    GError ** error)
{
  g_autoptr (GString) other = g_string_new (NULL);
  gboolean sd1 = FALSE, sd2 = FALSE, unet = FALSE;
  guint n_other = 0;

  for (guint i = 0; i < pp_safetensors_n_entries (st); i++) {
    const gchar *k = pp_safetensors_entry (st, i)->name;

    if (g_str_has_prefix (k, CLIP_PREFIX))
      sd1 = TRUE;
    else if (g_str_has_prefix (k, OPEN_CLIP_PREFIX))
      sd2 = TRUE;
    else if (g_str_has_prefix (k, UNET_PREFIX))
      unet = TRUE;
    else if (!g_str_has_prefix (k, VAE_PREFIX) && !is_schedule_buffer (k)
        && n_other++ < LIST_MAX)
      g_string_append_printf (other, "%s'%s'", other->len ? ", " : "", k);
  }
  if (n_other > 0 || !unet || sd1 == sd2) {
    if (n_other > LIST_MAX)
      g_string_append_printf (other, " and %u more", n_other - LIST_MAX);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s is no Stable Diffusion 1.x or 2.x checkpoint in the original "
        "layout (a UNet under '" UNET_PREFIX "', a VAE under '" VAE_PREFIX
        "' and one text encoder under '" CLIP_PREFIX "' or '"
        OPEN_CLIP_PREFIX "'): %s%s", path,
        n_other > 0 ? "keys of none of these: " : !unet ? "no UNet keys"
        : sd1 ? "both text encoders' keys" : "no text encoder keys",
        other->str);
    return FALSE;
  }
  *family = sd1 ? PP_FAMILY_SD1 : PP_FAMILY_SD2;
  return TRUE;
}

gboolean
pp_checkpoint_family (const gchar * path, PpFamily * family, GError ** error)
{
  g_autoptr (PpSafetensors) st = pp_safetensors_open (path, error);

  return st != NULL && family_of (st, path, family, error);
}

/* ---- the families' released configurations ---------------------------- */

static const gchar sd1_unet[] =
    "{\"_class_name\":\"UNet2DConditionModel\",\"act_fn\":\"silu\","
    "\"attention_head_dim\":8,\"block_out_channels\":[320,640,1280,1280],"
    "\"center_input_sample\":false,\"cross_attention_dim\":768,"
    "\"down_block_types\":[\"CrossAttnDownBlock2D\",\"CrossAttnDownBlock2D\","
    "\"CrossAttnDownBlock2D\",\"DownBlock2D\"],\"downsample_padding\":1,"
    "\"flip_sin_to_cos\":true,\"freq_shift\":0,\"in_channels\":4,"
    "\"layers_per_block\":2,\"mid_block_scale_factor\":1,\"norm_eps\":1e-05,"
    "\"norm_num_groups\":32,\"out_channels\":4,\"sample_size\":64,"
    "\"up_block_types\":[\"UpBlock2D\",\"CrossAttnUpBlock2D\","
    "\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\"]}";

static const gchar sd2_unet[] =
    "{\"_class_name\":\"UNet2DConditionModel\",\"act_fn\":\"silu\","
    "\"attention_head_dim\":[5,10,20,20],"
    "\"block_out_channels\":[320,640,1280,1280],"
    "\"center_input_sample\":false,\"cross_attention_dim\":1024,"
    "\"down_block_types\":[\"CrossAttnDownBlock2D\",\"CrossAttnDownBlock2D\","
    "\"CrossAttnDownBlock2D\",\"DownBlock2D\"],\"downsample_padding\":1,"
    "\"flip_sin_to_cos\":true,\"freq_shift\":0,\"in_channels\":4,"
    "\"layers_per_block\":2,\"mid_block_scale_factor\":1,\"norm_eps\":1e-05,"
    "\"norm_num_groups\":32,\"out_channels\":4,\"sample_size\":64,"
    "\"up_block_types\":[\"UpBlock2D\",\"CrossAttnUpBlock2D\","
    "\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\"],"
    "\"use_linear_projection\":true}";

static const gchar vae[] =
    "{\"_class_name\":\"AutoencoderKL\",\"act_fn\":\"silu\","
    "\"block_out_channels\":[128,256,512,512],\"down_block_types\":"
    "[\"DownEncoderBlock2D\",\"DownEncoderBlock2D\",\"DownEncoderBlock2D\","
    "\"DownEncoderBlock2D\"],\"in_channels\":3,\"latent_channels\":4,"
    "\"layers_per_block\":2,\"norm_num_groups\":32,\"out_channels\":3,"
    "\"sample_size\":512,\"scaling_factor\":0.18215,\"up_block_types\":"
    "[\"UpDecoderBlock2D\",\"UpDecoderBlock2D\",\"UpDecoderBlock2D\","
    "\"UpDecoderBlock2D\"]}";

/* openai/clip-vit-large-patch14's text model; SD 2's OpenCLIP ViT-H/14
 * text model, its last layer left out (diffusers' SD 2 pipelines use the
 * penultimate layer's states). */
static const gchar sd1_text[] =
    "{\"architectures\":[\"CLIPTextModel\"],\"hidden_act\":\"quick_gelu\","
    "\"hidden_size\":768,\"intermediate_size\":3072,\"layer_norm_eps\":1e-05,"
    "\"max_position_embeddings\":77,\"num_attention_heads\":12,"
    "\"num_hidden_layers\":12,\"vocab_size\":49408}";

static const gchar sd2_text[] =
    "{\"architectures\":[\"CLIPTextModel\"],\"hidden_act\":\"gelu\","
    "\"hidden_size\":1024,\"intermediate_size\":4096,\"layer_norm_eps\":1e-05,"
    "\"max_position_embeddings\":77,\"num_attention_heads\":16,"
    "\"num_hidden_layers\":23,\"vocab_size\":49408}";

/* SD 1.x runs with the LCM scheduler (LCM-LoRA's), SD 2.x / SD-Turbo with
 * Euler at trailing spacing (SD-Turbo's); scheduler= overrides either. */
static const gchar sd1_scheduler[] =
    "{\"_class_name\":\"LCMScheduler\",\"beta_start\":0.00085,"
    "\"beta_end\":0.012,\"beta_schedule\":\"scaled_linear\","
    "\"num_train_timesteps\":1000,\"prediction_type\":\"epsilon\"}";

static const gchar sd2_scheduler[] =
    "{\"_class_name\":\"EulerDiscreteScheduler\",\"beta_start\":0.00085,"
    "\"beta_end\":0.012,\"beta_schedule\":\"scaled_linear\","
    "\"num_train_timesteps\":1000,\"prediction_type\":\"epsilon\","
    "\"timestep_spacing\":\"trailing\"}";

static gboolean
write_file (const gchar * dir, const gchar * sub, const gchar * file,
    const gchar * text, GError ** error)
{
  g_autofree gchar *d = sub != NULL ? g_build_filename (dir, sub, NULL)
      : g_strdup (dir);
  g_autofree gchar *path = g_build_filename (d, file, NULL);

  if (g_mkdir_with_parents (d, 0755) != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "cannot create %s: %s",
        d, g_strerror (errno));
    return FALSE;
  }
  return g_file_set_contents (path, text, -1, error);
}

gboolean
pp_family_write_configs (PpFamily family, const gchar * dir, GError ** error)
{
  const gboolean sd1 = family == PP_FAMILY_SD1;

  return write_file (dir, NULL, "model_index.json",
      "{\"_class_name\":\"StableDiffusionPipeline\"}", error)
      && write_file (dir, "unet", "config.json", sd1 ? sd1_unet : sd2_unet,
      error)
      && write_file (dir, "vae", "config.json", vae, error)
      && write_file (dir, "text_encoder", "config.json",
      sd1 ? sd1_text : sd2_text, error)
      && write_file (dir, "scheduler", "scheduler_config.json",
      sd1 ? sd1_scheduler : sd2_scheduler, error);
}

void
pp_family_remove_configs (const gchar * dir)
{
  static const gchar *const files[][2] = {
    {NULL, "model_index.json"}, {"unet", "config.json"},
    {"vae", "config.json"}, {"text_encoder", "config.json"},
    {"scheduler", "scheduler_config.json"},
  };

  for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
    g_autofree gchar *sub = files[i][0] != NULL
        ? g_build_filename (dir, files[i][0], NULL) : g_strdup (dir);
    g_autofree gchar *path = g_build_filename (sub, files[i][1], NULL);

    g_unlink (path);
    if (files[i][0] != NULL)
      g_rmdir (sub);
  }
  g_rmdir (dir);
}

/* ---- key maps ----------------------------------------------------------- */

/* What a part's map needs of its config. */
typedef struct
{
  gint layers;                  /* UNet, VAE: layers_per_block */
  guint n_blocks;               /* UNet, VAE: len (block_out_channels) */
  gboolean down_attention[MAX_BLOCKS];  /* UNet */
  gboolean up_attention[MAX_BLOCKS];
  gint text_layers;             /* text encoder: num_hidden_layers */
} Layout;

/* A map's answer for one key. */
typedef enum
{
  MAP_NONE,                     /* no diffusers key: an error */
  MAP_SKIP,                     /* what diffusers leaves out */
  MAP_KEY,                      /* renamed */
  MAP_SPLIT3,                   /* OpenCLIP's in_proj: q, k and v thirds */
  MAP_SQUEEZE,                  /* [C, C, 1, 1] → [C, C] */
} MapKind;

typedef struct
{
  MapKind kind;
  gchar *key;                   /* MAP_KEY, MAP_SQUEEZE; MAP_SPLIT3: with
                                 * "%s" for q_proj, k_proj, v_proj */
} Mapped;

static Mapped
mapped (MapKind kind, gchar * key)
{
  Mapped m = { kind, key };

  return m;
}

/* Replaces a leading @from of @rest by @to; NULL when @rest has none. */
static gchar *
lead (const gchar * rest, const gchar * from, const gchar * to)
{
  return g_str_has_prefix (rest, from)
      ? g_strconcat (to, rest + strlen (from), NULL) : NULL;
}

/* A ResBlock's parameter, LDM → diffusers. */
static gchar *
unet_resnet (const gchar * rest)
{
  static const gchar *const names[][2] = {
    {"in_layers.0.", "norm1."}, {"in_layers.2.", "conv1."},
    {"emb_layers.1.", "time_emb_proj."}, {"out_layers.0.", "norm2."},
    {"out_layers.3.", "conv2."}, {"skip_connection.", "conv_shortcut."},
  };

  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    gchar *k = lead (rest, names[i][0], names[i][1]);

    if (k != NULL)
      return k;
  }
  return NULL;
}

/* "NAME.I.S.REST" → I, S and REST. */
static gboolean
block_indices (const gchar * k, const gchar * name, guint * i, guint * s,
    const gchar ** rest)
{
  gchar *end;
  guint64 a, b;

  if (!g_str_has_prefix (k, name))
    return FALSE;
  k += strlen (name);
  a = g_ascii_strtoull (k, &end, 10);
  if (end == k || *end != '.')
    return FALSE;
  k = end + 1;
  b = g_ascii_strtoull (k, &end, 10);
  if (end == k || *end != '.' || a > G_MAXUINT || b > G_MAXUINT)
    return FALSE;
  *i = (guint) a;
  *s = (guint) b;
  *rest = end + 1;
  return TRUE;
}

static gchar *
with_prefix (gchar * tail, const gchar * fmt, ...) G_GNUC_PRINTF (2, 3);

/* fmt's expansion followed by @tail (consumed); NULL when @tail is. */
static gchar *
with_prefix (gchar * tail, const gchar * fmt, ...)
{
  g_autofree gchar *head = NULL;
  va_list ap;
  gchar *k;

  if (tail == NULL)
    return NULL;
  va_start (ap, fmt);
  head = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  k = g_strconcat (head, tail, NULL);
  g_free (tail);
  return k;
}

/* "NAME.I.WHAT." → I and what follows. */
static gboolean
index_then (const gchar * k, const gchar * name, const gchar * what,
    guint * i, const gchar ** rest)
{
  gchar *end;
  guint64 v;

  if (!g_str_has_prefix (k, name))
    return FALSE;
  k += strlen (name);
  v = g_ascii_strtoull (k, &end, 10);
  if (end == k || !g_str_has_prefix (end, what) || v > G_MAXUINT)
    return FALSE;
  *i = (guint) v;
  *rest = end + strlen (what);
  return TRUE;
}

static Mapped
map_unet (const Layout * l, const gchar * k)
{
  const guint per = (guint) l->layers + 1;
  const gchar *rest;
  guint i, s;
  gchar *key;

  if ((key = lead (k, "time_embed.0.", "time_embedding.linear_1.")) != NULL
      || (key = lead (k, "time_embed.2.", "time_embedding.linear_2."))
      != NULL || (key = lead (k, "input_blocks.0.0.", "conv_in.")) != NULL
      || (key = lead (k, "out.0.", "conv_norm_out.")) != NULL
      || (key = lead (k, "out.2.", "conv_out.")) != NULL)
    return mapped (MAP_KEY, key);
  if (block_indices (k, "input_blocks.", &i, &s, &rest) && i >= 1) {
    guint b = (i - 1) / per, j = (i - 1) % per;

    if (b >= l->n_blocks)
      return mapped (MAP_NONE, NULL);
    if (j < (guint) l->layers && s == 0)
      key = with_prefix (unet_resnet (rest), "down_blocks.%u.resnets.%u.", b,
          j);
    else if (j < (guint) l->layers && s == 1 && l->down_attention[b])
      key = g_strdup_printf ("down_blocks.%u.attentions.%u.%s", b, j, rest);
    else if (j == (guint) l->layers && s == 0)
      key = with_prefix (lead (rest, "op.", ""),
          "down_blocks.%u.downsamplers.0.conv.", b);
    return mapped (key != NULL ? MAP_KEY : MAP_NONE, key);
  }
  if (index_then (k, "middle_block.", ".", &s, &rest)) {
    if (s == 0 || s == 2)
      key = with_prefix (unet_resnet (rest), "mid_block.resnets.%u.",
          s == 0 ? 0u : 1u);
    else if (s == 1)
      key = g_strdup_printf ("mid_block.attentions.0.%s", rest);
    return mapped (key != NULL ? MAP_KEY : MAP_NONE, key);
  }
  if (block_indices (k, "output_blocks.", &i, &s, &rest)) {
    guint b = i / per, j = i % per;
    gboolean attention = b < l->n_blocks && l->up_attention[b];

    if (b >= l->n_blocks)
      return mapped (MAP_NONE, NULL);
    if (s == 0)
      key = with_prefix (unet_resnet (rest), "up_blocks.%u.resnets.%u.", b,
          j);
    else if (s == 1 && attention)
      key = g_strdup_printf ("up_blocks.%u.attentions.%u.%s", b, j, rest);
    else if (s == (attention ? 2u : 1u) && j == (guint) l->layers
        && b + 1 < l->n_blocks)
      key = with_prefix (lead (rest, "conv.", ""),
          "up_blocks.%u.upsamplers.0.conv.", b);
    return mapped (key != NULL ? MAP_KEY : MAP_NONE, key);
  }
  return mapped (MAP_NONE, NULL);
}

/* A VAE ResnetBlock's parameter: nin_shortcut is conv_shortcut. */
static gchar *
vae_resnet (const gchar * rest)
{
  gchar *k = lead (rest, "nin_shortcut.", "conv_shortcut.");

  return k != NULL ? k : g_strdup (rest);
}

static Mapped
map_vae (const Layout * l, const gchar * k)
{
  static const gchar *const attention[][2] = {
    {"attn_1.norm.", "group_norm."}, {"attn_1.q.", "to_q."},
    {"attn_1.k.", "to_k."}, {"attn_1.v.", "to_v."},
    {"attn_1.proj_out.", "to_out.0."},
  };
  static const gchar *const halves[] = { "encoder", "decoder" };
  const gchar *rest;
  guint i, j;
  gchar *key;

  if (g_str_has_prefix (k, "quant_conv.")
      || g_str_has_prefix (k, "post_quant_conv."))
    return mapped (MAP_KEY, g_strdup (k));
  for (guint h = 0; h < G_N_ELEMENTS (halves); h++) {
    g_autofree gchar *half = g_strconcat (halves[h], ".", NULL);
    g_autofree gchar *mid = g_strconcat (half, "mid.", NULL);
    const gchar *r;

    if (!g_str_has_prefix (k, half))
      continue;
    r = k + strlen (half);
    if (g_str_has_prefix (r, "conv_in.") || g_str_has_prefix (r, "conv_out."))
      return mapped (MAP_KEY, g_strdup (k));
    if ((key = lead (r, "norm_out.", "conv_norm_out.")) != NULL)
      return mapped (MAP_KEY, with_prefix (key, "%s", half));
    if (g_str_has_prefix (k, mid)) {
      r = k + strlen (mid);
      for (guint b = 0; b < 2; b++) {
        g_autofree gchar *name = g_strdup_printf ("block_%u.", b + 1);

        if ((key = lead (r, name, "")) != NULL) {
          gchar *res = vae_resnet (key);

          g_free (key);
          return mapped (MAP_KEY, with_prefix (res,
                  "%smid_block.resnets.%u.", half, b));
        }
      }
      for (guint a = 0; a < G_N_ELEMENTS (attention); a++)
        if ((key = lead (r, attention[a][0], attention[a][1])) != NULL) {
          /* q, k, v and proj_out are 1×1 convolutions there */
          gboolean squeeze = a > 0 && g_str_has_suffix (key, ".weight");

          return mapped (squeeze ? MAP_SQUEEZE : MAP_KEY,
              with_prefix (key, "%smid_block.attentions.0.", half));
        }
      return mapped (MAP_NONE, NULL);
    }
    if (h == 0 && index_then (k, "encoder.down.", ".block.", &i, &rest)
        && sscanf (rest, "%u.", &j) == 1 && i < l->n_blocks) {
      const gchar *dot = strchr (rest, '.');

      return mapped (MAP_KEY, with_prefix (vae_resnet (dot + 1),
              "encoder.down_blocks.%u.resnets.%u.", i, j));
    }
    if (h == 0 && index_then (k, "encoder.down.", ".downsample.conv.", &i,
            &rest) && i + 1 < l->n_blocks)
      return mapped (MAP_KEY, g_strdup_printf ("encoder.down_blocks.%u."
              "downsamplers.0.conv.%s", i, rest));
    if (h == 1 && index_then (k, "decoder.up.", ".block.", &i, &rest)
        && sscanf (rest, "%u.", &j) == 1 && i < l->n_blocks) {
      const gchar *dot = strchr (rest, '.');

      return mapped (MAP_KEY, with_prefix (vae_resnet (dot + 1),
              "decoder.up_blocks.%u.resnets.%u.", l->n_blocks - 1 - i, j));
    }
    if (h == 1 && index_then (k, "decoder.up.", ".upsample.conv.", &i,
            &rest) && i >= 1 && i < l->n_blocks)
      return mapped (MAP_KEY, g_strdup_printf ("decoder.up_blocks.%u."
              "upsamplers.0.conv.%s", l->n_blocks - 1 - i, rest));
  }
  return mapped (MAP_NONE, NULL);
}

/* SD 1.x: transformers' names under the prefix (text_model. or not). */
static Mapped
map_clip (const gchar * k)
{
  const gchar *rest = g_str_has_prefix (k, TEXT_MODEL)
      ? k + strlen (TEXT_MODEL) : k;

  if (g_str_equal (rest, "embeddings.position_ids"))
    return mapped (MAP_SKIP, NULL);
  return mapped (MAP_KEY, g_strconcat (TEXT_MODEL, rest, NULL));
}

/* SD 2.x: OpenCLIP's names. */
static Mapped
map_open_clip (const Layout * l, const gchar * k)
{
  static const gchar *const layer[][2] = {
    {"ln_1.", "layer_norm1."}, {"ln_2.", "layer_norm2."},
    {"attn.out_proj.", "self_attn.out_proj."}, {"mlp.c_fc.", "mlp.fc1."},
    {"mlp.c_proj.", "mlp.fc2."},
  };
  const gchar *rest;
  gchar *key;
  guint i;

  if (g_str_equal (k, "token_embedding.weight"))
    return mapped (MAP_KEY,
        g_strdup ("text_model.embeddings.token_embedding.weight"));
  if (g_str_equal (k, "positional_embedding"))
    return mapped (MAP_KEY,
        g_strdup ("text_model.embeddings.position_embedding.weight"));
  if ((key = lead (k, "ln_final.", "text_model.final_layer_norm.")) != NULL)
    return mapped (MAP_KEY, key);
  if (g_str_equal (k, "text_projection") || g_str_equal (k, "logit_scale"))
    return mapped (MAP_SKIP, NULL);
  if (!index_then (k, "transformer.resblocks.", ".", &i, &rest))
    return mapped (MAP_NONE, NULL);
  if (i >= (guint) l->text_layers)
    return mapped (MAP_SKIP, NULL);
  if (g_str_equal (rest, "attn.in_proj_weight"))
    return mapped (MAP_SPLIT3, g_strdup_printf ("text_model.encoder."
            "layers.%u.self_attn.%%s.weight", i));
  if (g_str_equal (rest, "attn.in_proj_bias"))
    return mapped (MAP_SPLIT3, g_strdup_printf ("text_model.encoder."
            "layers.%u.self_attn.%%s.bias", i));
  for (guint n = 0; n < G_N_ELEMENTS (layer); n++)
    if ((key = lead (rest, layer[n][0], layer[n][1])) != NULL)
      return mapped (MAP_KEY, with_prefix (key, "text_model.encoder."
              "layers.%u.", i));
  return mapped (MAP_NONE, NULL);
}

/* ---- a part as diffusers' weights --------------------------------------- */

static gboolean
read_layout (PpCheckpointPart part, const gchar * config_path, Layout * l,
    GError ** error)
{
  g_autoptr (PpConfig) cfg = pp_config_load (config_path, error);
  g_autoptr (GArray) channels = NULL;
  g_auto (GStrv) down = NULL, up = NULL;
  gint64 layers = 1, text_layers = 0;

  if (cfg == NULL)
    return FALSE;
  if (part == PP_CHECKPOINT_TEXT_ENCODER) {
    if (!pp_config_require_int (cfg, "num_hidden_layers", &text_layers,
            error))
      return FALSE;
    l->text_layers = (gint) CLAMP (text_layers, 0, G_MAXINT);
    return TRUE;
  }
  if (!pp_config_get_int (cfg, "layers_per_block", 1, &layers, error)
      || !pp_config_get_int_list (cfg, "block_out_channels", 0, &channels,
          error))
    return FALSE;
  if (layers < 1 || layers > G_MAXINT / 2 || channels->len == 0
      || channels->len > MAX_BLOCKS) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s: layers_per_block %"
        G_GINT64_FORMAT " and %u blocks: not a layout this reader maps",
        config_path, layers, channels->len);
    return FALSE;
  }
  l->layers = (gint) layers;
  l->n_blocks = channels->len;
  if (part != PP_CHECKPOINT_UNET)
    return TRUE;
  if (!pp_config_get_string_list (cfg, "down_block_types", &down, error)
      || !pp_config_get_string_list (cfg, "up_block_types", &up, error))
    return FALSE;
  if (down == NULL || up == NULL || g_strv_length (down) != l->n_blocks
      || g_strv_length (up) != l->n_blocks) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "%s: down_block_types and "
        "up_block_types must have one entry per block", config_path);
    return FALSE;
  }
  for (guint b = 0; b < l->n_blocks; b++) {
    l->down_attention[b] = g_str_has_prefix (down[b], "CrossAttn");
    l->up_attention[b] = g_str_has_prefix (up[b], "CrossAttn");
  }
  return TRUE;
}

static void
add_entry (GArray * out, const PpStEntry * from, gchar * name)
{
  PpStEntry e = *from;

  e.name = name;
  g_array_append_val (out, e);
}

PpWeights *
pp_checkpoint_part (const gchar * path, PpCheckpointPart part,
    const gchar * config_path, GError ** error)
{
  g_autoptr (PpSafetensors) st = NULL;
  g_autoptr (GString) unmapped = g_string_new (NULL);
  g_autofree gchar *source = NULL;
  GArray *entries;
  Layout layout = { 0 };
  PpFamily family;
  const gchar *prefix;
  guint n_unmapped = 0;

  if ((st = pp_safetensors_open (path, error)) == NULL
      || !family_of (st, path, &family, error)
      || !read_layout (part, config_path, &layout, error))
    return NULL;
  prefix = part == PP_CHECKPOINT_UNET ? UNET_PREFIX
      : part == PP_CHECKPOINT_VAE ? VAE_PREFIX
      : family == PP_FAMILY_SD1 ? CLIP_PREFIX : OPEN_CLIP_PREFIX;
  entries = g_array_new (FALSE, TRUE, sizeof (PpStEntry));
  for (guint i = 0; i < pp_safetensors_n_entries (st); i++) {
    const PpStEntry *e = pp_safetensors_entry (st, i);
    const gchar *k = e->name + strlen (prefix);
    Mapped m;

    if (!g_str_has_prefix (e->name, prefix))
      continue;
    m = part == PP_CHECKPOINT_UNET ? map_unet (&layout, k)
        : part == PP_CHECKPOINT_VAE ? map_vae (&layout, k)
        : family == PP_FAMILY_SD1 ? map_clip (k) : map_open_clip (&layout, k);
    switch (m.kind) {
      case MAP_NONE:
        if (n_unmapped++ < LIST_MAX)
          g_string_append_printf (unmapped, "%s'%s'",
              unmapped->len ? ", " : "", e->name);
        break;
      case MAP_SKIP:
        break;
      case MAP_KEY:
        add_entry (entries, e, g_steal_pointer (&m.key));
        break;
      case MAP_SQUEEZE:
        if (e->ndim == 4 && e->shape[2] == 1 && e->shape[3] == 1) {
          PpStEntry s = *e;

          s.ndim = 2;
          add_entry (entries, &s, g_steal_pointer (&m.key));
        } else
          add_entry (entries, e, g_steal_pointer (&m.key));
        break;
      case MAP_SPLIT3:
        if (e->ndim >= 1 && e->shape[0] % 3 == 0) {
          static const gchar *const qkv[] = { "q_proj", "k_proj", "v_proj" };
          PpStEntry t = *e;

          t.shape[0] = e->shape[0] / 3;
          t.nbytes = e->nbytes / 3;
          for (guint q = 0; q < 3; q++) {
            t.data = e->data + q * t.nbytes;
            add_entry (entries, &t, g_strdup_printf (m.key, qkv[q]));
          }
        } else if (n_unmapped++ < LIST_MAX)
          g_string_append_printf (unmapped, "%s'%s' (not 3 × D rows)",
              unmapped->len ? ", " : "", e->name);
        break;
    }
    g_free (m.key);
  }
  if (n_unmapped > 0) {
    if (n_unmapped > LIST_MAX)
      g_string_append_printf (unmapped, " and %u more", n_unmapped - LIST_MAX);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: %u key(s) of the %s (%s) map to no diffusers weight of %s: %s",
        path, n_unmapped, part_names[part], pp_family_name (family),
        config_path, unmapped->str);
    for (guint i = 0; i < entries->len; i++)
      g_free (g_array_index (entries, PpStEntry, i).name);
    g_array_unref (entries);
    return NULL;
  }
  source = g_strdup_printf ("%s (%s, original layout)", path,
      part_names[part]);
  return pp_weights_new_mapped (g_steal_pointer (&st), entries, source);
}
