/* ppdiffuse — a diffusers pipeline directory as a model: img2img with a
 * TAESD VAE on rank 0 and UNet steps on the workers.
 *
 * URI: DIR?prompt-embeds=FILE&strength=S&seed=N&t-index-list=A,B&scheduler=K
 *
 *   DIR/vae/        AutoencoderTiny (config.json + safetensors)
 *   DIR/unet/       UNet2DConditionModel
 *   DIR/scheduler/scheduler_config.json  "_class_name": EulerDiscreteScheduler
 *                   (SD-Turbo) or LCMScheduler; scheduler=euler|lcm overrides
 *   prompt-embeds   .npy or .safetensors holding [1, L, D] (or [L, D])
 *                   encoder hidden states; D = the UNet's cross_attention_dim
 *   strength        img2img strength in (0, 1] (default 0.5)
 *   seed            noise seed (default 0); the same noise serves every frame,
 *                   which keeps a video stable from frame to frame
 *   t-index-list    StreamDiffusion-style LCM timesteps t = 999 − 20·idx
 *
 * Frames whose sides are not multiples of 8 · 2^(UNet blocks − 1) (the VAE's
 * factor times the UNet's down-sampling) are resized (bilinear) to the
 * nearest such multiples before encoding and back after decoding. */
#include "pp-model.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-npy.h"
#include "pp-rng.h"
#include "pp-safetensors.h"
#include "pp-schedule.h"
#include "pp-taesd.h"
#include "pp-unet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_STRENGTH 0.5
#define VAE_ALIGN 8
#define PROMPT_EMBEDS_KEY "prompt_embeds"
#define SCHEDULER_CONFIG "scheduler" G_DIR_SEPARATOR_S "scheduler_config.json"
#define PIXEL_HALF_RANGE 127.5f

typedef struct
{
  gint frame_align;             /* frame sides are resized to multiples */
  gchar *prompt_embeds_path;
  gdouble strength;
  guint64 seed;
  GArray *t_index_list;         /* guint, or NULL */
  PpSchedule *schedule;
  PpTaesd *vae;                 /* PP_MODEL_ROLE_IMAGE */
  PpUnet *unet;                 /* PP_MODEL_ROLE_STEPS */
  PpTensor *context;            /* [1, L, D] */
  /* The same noise serves every frame: drawn once per latent size.
   * noise[0] is the initial noise, noise[1 + k] the noise after step k. */
  gfloat **noise;               /* n_steps + 1 entries, each noise_len */
  gsize noise_len;
} Diffusion;

/* Noise of @stream for latents of @n values, cached. */
static const gfloat *
cached_noise (PpModel * model, guint64 stream, gsize n)
{
  Diffusion *d = model->priv;
  guint slot = (guint) stream;
  PpRng rng;

  if (d->noise_len != n) {
    for (guint i = 0; i <= model->n_steps; i++)
      g_clear_pointer (&d->noise[i], g_free);
    d->noise_len = n;
  }
  if (d->noise[slot] == NULL) {
    d->noise[slot] = g_new (gfloat, n);
    pp_rng_init (&rng, d->seed, stream);
    pp_rng_fill_normal (&rng, d->noise[slot], n);
  }
  return d->noise[slot];
}

static gboolean
parse_index_list (const gchar * text, GArray ** out, GError ** error)
{
  g_auto (GStrv) parts = g_strsplit (text, ",", -1);
  GArray *list = g_array_new (FALSE, FALSE, sizeof (guint));

  for (guint i = 0; parts[i] != NULL; i++) {
    gchar *end = NULL;
    guint64 v = g_ascii_strtoull (g_strstrip (parts[i]), &end, 10);
    if (end == parts[i] || *end != '\0' || v > G_MAXUINT) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "t-index-list '%s': entry '%s' is not a non-negative integer",
          text, parts[i]);
      g_array_unref (list);
      return FALSE;
    }
    {
      guint value = (guint) v;
      g_array_append_val (list, value);
    }
  }
  *out = list;
  return TRUE;
}

static gboolean
scheduler_kind (const gchar * dir, const gchar * override,
    PpScheduleKind * kind, GError ** error)
{
  g_autofree gchar *path = g_build_filename (dir, SCHEDULER_CONFIG, NULL);
  g_autofree gchar *name = NULL;
  PpConfig *cfg;
  gboolean ok;

  if (override != NULL) {
    if (g_str_equal (override, "euler") || g_str_equal (override, "lcm")) {
      *kind = g_str_equal (override, "euler") ? PP_SCHEDULE_EULER
          : PP_SCHEDULE_LCM;
      return TRUE;
    }
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "scheduler=%s: expected euler or lcm", override);
    return FALSE;
  }
  cfg = pp_config_load (path, error);
  if (cfg == NULL)
    return FALSE;
  ok = pp_config_get_string (cfg, "_class_name", NULL, &name, error);
  pp_config_free (cfg);
  if (!ok)
    return FALSE;
  if (g_strcmp0 (name, "EulerDiscreteScheduler") == 0)
    *kind = PP_SCHEDULE_EULER;
  else if (g_strcmp0 (name, "LCMScheduler") == 0)
    *kind = PP_SCHEDULE_LCM;
  else {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: _class_name '%s' is not supported; use EulerDiscreteScheduler "
        "or LCMScheduler (or the scheduler=euler|lcm parameter)", path,
        name ? name : "(none)");
    return FALSE;
  }
  return TRUE;
}

static PpTensor *
load_context (const gchar * path, guint cross_dim, GError ** error)
{
  g_autoptr (PpTensor) t = NULL;

  if (g_str_has_suffix (path, ".safetensors")) {
    PpSafetensors *st = pp_safetensors_open (path, error);
    const PpStEntry *e;
    if (st == NULL)
      return NULL;
    e = pp_safetensors_find (st, PROMPT_EMBEDS_KEY);
    if (e == NULL && pp_safetensors_n_entries (st) == 1)
      e = pp_safetensors_entry (st, 0);
    if (e == NULL || e->ndim < 2 || e->ndim > 3
        || (e->ndim == 3 && e->shape[0] != 1)) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "%s: expected one tensor (or '%s') of shape [1, L, D] or [L, D]",
          path, PROMPT_EMBEDS_KEY);
      pp_safetensors_free (st);
      return NULL;
    }
    {
      const gint64 shape[3] = { 1, e->shape[e->ndim - 2],
        e->shape[e->ndim - 1]
      };
      t = pp_tensor_new ("context", PP_DTYPE_F32, 3, shape, error);
      if (t != NULL && !pp_safetensors_read_f32 (e, t->data)) {
        g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
            "%s: tensor '%s' cannot be converted to F32", path, e->name);
        g_clear_pointer (&t, pp_tensor_free);
      }
    }
    pp_safetensors_free (st);
  } else {
    t = pp_npy_load (path, error);
  }
  if (t == NULL) {
    g_prefix_error (error, "prompt-embeds: ");
    return NULL;
  }
  if (t->ndim == 2) {
    t->shape[2] = t->shape[1];
    t->shape[1] = t->shape[0];
    t->shape[0] = 1;
    t->ndim = 3;
  }
  if (t->ndim != 3 || t->shape[0] != 1 || t->shape[2] != (gint64) cross_dim) {
    g_autofree gchar *got = pp_tensor_describe (t);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "prompt-embeds %s holds %s; the UNet needs [1, L, %u] "
        "(its cross_attention_dim)", path, got, cross_dim);
    return NULL;
  }
  return g_steal_pointer (&t);
}

static gint
align_side (gint v, gint align)
{
  return MAX (align, (v + align / 2) / align * align);
}

/* The UNet halves the latent once per block but the last. */
static gboolean
read_frame_align (const gchar * dir, gint * align, GError ** error)
{
  g_autofree gchar *path = g_build_filename (dir, "unet", "config.json",
      NULL);
  g_autoptr (GArray) channels = NULL;
  PpConfig *cfg = pp_config_load (path, error);
  gboolean ok;

  if (cfg == NULL)
    return FALSE;
  ok = pp_config_get_int_list (cfg, "block_out_channels", 0, &channels,
      error);
  pp_config_free (cfg);
  if (!ok)
    return FALSE;
  *align = VAE_ALIGN << (MAX (channels->len, 1) - 1);
  return TRUE;
}

static gboolean
diffusion_init (PpModel * model, GHashTable * params, GError ** error)
{
  Diffusion *d = g_new0 (Diffusion, 1);
  g_autofree gchar *seed_text = NULL, *list_text = NULL, *scheduler = NULL;
  PpScheduleKind kind;

  model->priv = d;
  d->strength = DEFAULT_STRENGTH;
  d->noise = g_new0 (gfloat *, model->n_steps + 1);
  if (!g_file_test (model->path, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "model '%s' is neither builtin:stamp, builtin:anisotropic nor a "
        "diffusers pipeline directory", model->path);
    return FALSE;
  }
  pp_model_param_string (params, "prompt-embeds", &d->prompt_embeds_path);
  pp_model_param_string (params, "seed", &seed_text);
  pp_model_param_string (params, "t-index-list", &list_text);
  pp_model_param_string (params, "scheduler", &scheduler);
  if (!pp_model_param_double (params, "strength", 1e-6, 1.0, &d->strength,
          error))
    return FALSE;
  if (seed_text != NULL) {
    gchar *end = NULL;
    d->seed = g_ascii_strtoull (seed_text, &end, 10);
    if (end == seed_text || *end != '\0') {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "seed=%s is not a non-negative integer", seed_text);
      return FALSE;
    }
  }
  if (list_text != NULL && !parse_index_list (list_text, &d->t_index_list,
          error))
    return FALSE;
  if (!scheduler_kind (model->path, scheduler, &kind, error))
    return FALSE;
  d->schedule = pp_schedule_new (kind, model->n_steps, d->strength,
      d->t_index_list, error);
  if (d->schedule == NULL)
    return FALSE;

  if (model->roles & PP_MODEL_ROLE_IMAGE) {
    g_autofree gchar *vae_dir = g_build_filename (model->path, "vae", NULL);
    if (!read_frame_align (model->path, &d->frame_align, error))
      return FALSE;
    d->vae = pp_taesd_load (vae_dir, error);
    if (d->vae == NULL)
      return FALSE;
  }
  if (model->roles & PP_MODEL_ROLE_STEPS) {
    g_autofree gchar *unet_dir = g_build_filename (model->path, "unet", NULL);
    if (d->prompt_embeds_path == NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "model '%s' needs prompt-embeds (a .npy or .safetensors file of "
          "encoder hidden states)", model->path);
      return FALSE;
    }
    d->unet = pp_unet_load (unet_dir, error);
    if (d->unet == NULL)
      return FALSE;
    d->context = load_context (d->prompt_embeds_path,
        pp_unet_cross_attention_dim (d->unet), error);
    if (d->context == NULL)
      return FALSE;
  }
  return TRUE;
}

static PpTensor *
diffusion_encode (PpModel * model, const PpImage * image, GError ** error)
{
  Diffusion *d = model->priv;
  g_autoptr (PpTensor) pixels = pp_image_to_tensor (image, "image", error);
  g_autoptr (PpTensor) vae_in = NULL;
  PpTensor *latents = NULL;
  gint h8 = align_side (image->height, d->frame_align);
  gint w8 = align_side (image->width, d->frame_align);
  gsize n;

  if (pixels == NULL)
    return NULL;
  for (gint64 i = 0; i < pp_tensor_numel (pixels); i++)
    ((gfloat *) pixels->data)[i] = ((gfloat *) pixels->data)[i]
        / PIXEL_HALF_RANGE - 1.0f;
  if (h8 == image->height && w8 == image->width) {
    vae_in = g_steal_pointer (&pixels);
  } else {
    const gint64 shape[4] = { 1, PP_IMAGE_CHANNELS, h8, w8 };
    vae_in = pp_tensor_new ("image", PP_DTYPE_F32, 4, shape, error);
    if (vae_in == NULL)
      return NULL;
    pp_resize_bilinear (pixels->data, PP_IMAGE_CHANNELS, image->height,
        image->width, vae_in->data, h8, w8);
  }
  if (!pp_taesd_encode (d->vae, vae_in, &latents, NULL, NULL, error))
    return NULL;
  n = (gsize) pp_tensor_numel (latents);
  pp_schedule_add_noise (d->schedule, latents->data,
      cached_noise (model, PP_RNG_STREAM_INIT, n), n);
  g_strlcpy (latents->name, PP_MODEL_SAMPLE_NAME, sizeof latents->name);
  return latents;
}

static gboolean
diffusion_step (PpModel * model, guint step, guint n_steps, PpTensor * sample,
    GError ** error)
{
  Diffusion *d = model->priv;
  gsize n = (gsize) pp_tensor_numel (sample);
  g_autoptr (PpTensor) input = NULL;
  g_autoptr (PpTensor) eps = NULL;

  if (sample->dtype != PP_DTYPE_F32 || sample->ndim != 4) {
    g_autofree gchar *got = pp_tensor_describe (sample);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "a diffusion step needs an F32[N,C,H,W] latent, got %s", got);
    return FALSE;
  }
  input = pp_tensor_new ("unet_in", PP_DTYPE_F32, 4, sample->shape, error);
  if (input == NULL)
    return FALSE;
  pp_schedule_scale_input (d->schedule, step, sample->data, input->data, n);
  if (!pp_unet_forward (d->unet, input, d->schedule->timesteps[step],
          d->context, &eps, NULL, NULL, error))
    return FALSE;
  pp_schedule_step (d->schedule, step, sample->data, eps->data,
      pp_schedule_step_needs_noise (d->schedule, step)
      ? cached_noise (model, PP_RNG_STREAM_STEP (step), n) : NULL, n);
  return TRUE;
}

static gboolean
diffusion_decode (PpModel * model, const PpTensor * sample, PpImage * image,
    GError ** error)
{
  Diffusion *d = model->priv;
  g_autoptr (PpTensor) decoded = NULL;
  g_autoptr (PpTensor) pixels = NULL;
  const gint64 shape[4] = { 1, PP_IMAGE_CHANNELS, image->height,
    image->width
  };

  if (!pp_taesd_decode (d->vae, sample, &decoded, NULL, NULL, error))
    return FALSE;
  if (decoded->ndim != 4 || decoded->shape[1] != PP_IMAGE_CHANNELS) {
    g_autofree gchar *got = pp_tensor_describe (decoded);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "the VAE decoded %s, expected 3 channels", got);
    return FALSE;
  }
  pixels = pp_tensor_new (PP_MODEL_SAMPLE_NAME, PP_DTYPE_F32, 4, shape, error);
  if (pixels == NULL)
    return FALSE;
  if (decoded->shape[2] == image->height && decoded->shape[3] == image->width)
    memcpy (pixels->data, decoded->data, pixels->nbytes);
  else
    pp_resize_bilinear (decoded->data, PP_IMAGE_CHANNELS,
        (gint) decoded->shape[2], (gint) decoded->shape[3], pixels->data,
        image->height, image->width);
  for (gint64 i = 0; i < pp_tensor_numel (pixels); i++)
    ((gfloat *) pixels->data)[i] = (((gfloat *) pixels->data)[i] + 1.0f)
        * PIXEL_HALF_RANGE;
  return pp_image_from_tensor (image, pixels, error);
}

static void
diffusion_finalize (PpModel * model)
{
  Diffusion *d = model->priv;

  if (d == NULL)
    return;
  g_free (d->prompt_embeds_path);
  g_clear_pointer (&d->t_index_list, g_array_unref);
  g_clear_pointer (&d->schedule, pp_schedule_free);
  g_clear_pointer (&d->vae, pp_taesd_free);
  g_clear_pointer (&d->unet, pp_unet_free);
  g_clear_pointer (&d->context, pp_tensor_free);
  for (guint i = 0; d->noise != NULL && i <= model->n_steps; i++)
    g_free (d->noise[i]);
  g_free (d->noise);
  g_free (d);
}

static gchar *
diffusion_weights_digest (PpModel * model)
{
  Diffusion *d = model->priv;

  return d->unet != NULL ? g_strdup (pp_unet_weights_digest (d->unet))
      : NULL;
}

const PpModelClass pp_model_diffusion_class = {
  .name = "diffusion",
  .init = diffusion_init,
  .step = diffusion_step,
  .encode = diffusion_encode,
  .decode = diffusion_decode,
  .finalize = diffusion_finalize,
  .weights_digest = diffusion_weights_digest,
};
