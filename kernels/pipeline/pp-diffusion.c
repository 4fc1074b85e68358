/* ppdiffuse — a diffusers pipeline directory as a model: img2img with a
 * VAE (TAESD or the released AutoencoderKL) on rank 0 and UNet steps on the
 * workers.
 *
 * URI: DIR, with what to load as parameters (pp_model_uri_for_load):
 * scheduler=euler|lcm, dtype, cuda-graphs, vae=VAE_DIR (escaped).
 *
 *   DIR/vae/        AutoencoderTiny or AutoencoderKL (config.json +
 *                   safetensors); or VAE_DIR, a VAE folder elsewhere (vae=)
 *   DIR/unet/       UNet2DConditionModel
 *   DIR/scheduler/scheduler_config.json  "_class_name": EulerDiscreteScheduler
 *                   (SD-Turbo) or LCMScheduler; scheduler=euler|lcm overrides
 *
 * The live settings come as a PpSettings (kernels/pp-settings.h), through
 * the class's update:
 *   prompt_embeds   .npy or .safetensors holding [1, L, D] (or [L, D])
 *                   encoder hidden states; D = the UNet's cross_attention_dim
 *   strength        img2img strength in (0, 1] (default 0.5)
 *   seed            noise seed (default 0); the same noise serves every frame,
 *                   which keeps a video stable from frame to frame
 *   t_index_list    StreamDiffusion-style LCM timesteps t = 999 − 20·idx
 *
 * Frames whose sides are not multiples of 8 · 2^(UNet blocks − 1) (the VAE's
 * factor times the UNet's down-sampling) are resized (bilinear) to the
 * nearest such multiples before encoding and back after decoding. */
#include "pp-model.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-npy.h"
#include "pp-prompt.h"
#include "pp-rng.h"
#include "pp-safetensors.h"
#include "pp-schedule.h"
#include "pp-checkpoint.h"
#include "pp-feature-bank.h"
#include "pp-vae.h"
#include "pp-unet.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VAE_ALIGN 8
#define PROMPT_EMBEDS_KEY "prompt_embeds"
#define SCHEDULER_CONFIG "scheduler" G_DIR_SEPARATOR_S "scheduler_config.json"
#define PIXEL_HALF_RANGE 127.5f
#define PIPELINE_COMPONENT_CONFIG "config.json"
#define MODEL_KINDS "a model is builtin:stamp, builtin:anisotropic, a " \
  "diffusers pipeline directory (model_index.json, unet/, vae/, " \
  "scheduler/) or a single-file checkpoint (.safetensors)"

/* Buffers on the model's backend, kept from frame to frame: in steady state
 * a frame allocates none.  Rank 0 encodes on one thread and decodes on
 * another, so each phase has its own. */
typedef struct
{
  gint height, width;           /* of the frames they are for */
  PpTensor *frame;              /* host U8 [1, 3, H, W], staging */
  PpTensor *frame_bytes;        /* U8 [1, 3, H, W]: the frame's bytes */
  PpTensor *frame_dev;          /* [1, 3, H, W] */
  PpTensor *vae_in;             /* [1, 3, H8, W8]; NULL when H8, W8 = H, W */
  PpTensor *latents;            /* [1, C, H8/8, W8/8] */
  PpTensor *noise;              /* the initial noise, like latents */
} EncodeBuffers;

typedef struct
{
  gint height, width;           /* of the frames */
  gint64 latent_shape[4];
  PpTensor *latents;            /* the sample */
  PpTensor *decoded;            /* [1, 3, H8, W8] */
  PpTensor *pixels_dev;         /* [1, 3, H, W]; NULL when H8, W8 = H, W */
  PpTensor *pixel_bytes;        /* U8 [1, 3, H, W]: the frame's bytes */
  PpTensor *pixels;             /* host U8 [1, 3, H, W], staging */
} DecodeBuffers;

typedef struct
{
  gint64 shape[4];
  PpTensor *sample;             /* the latents across a worker's steps */
  PpTensor *unet_in;
  PpTensor *eps;
  PpTensor **noise;             /* per step (LCM), n_steps entries */
} StepBuffers;

/* A stream batch of n samples of one shape: the samples, the UNet's input
 * and output, [n, C, H, W] each, and the samples' timesteps. */
typedef struct
{
  gint64 shape[4];
  PpTensor *samples, *unet_in, *eps;
  gdouble *timesteps;
} BatchBuffers;

typedef struct
{
  PpBackend *be;
  PpDType dtype;                /* of the weights on be */
  /* Where the components' config.json files are: the pipeline directory,
   * or for a single-file checkpoint its config= folder or one written
   * with its family's configurations (family_dir, removed at the end). */
  gchar *config_dir;
  gchar *checkpoint;            /* a single-file checkpoint, or NULL */
  gchar *family_dir;
  gint frame_align;             /* frame sides are resized to multiples */
  PpScheduleKind kind;          /* fixed at start: live checks read it */
  gchar *prompt_embeds_path;
  gdouble strength;
  guint64 seed;
  GArray *t_index_list;         /* guint, or NULL */
  PpSchedule *schedule;
  PpVae *vae;                   /* PP_MODEL_ROLE_IMAGE */
  PpUnet *unet;                 /* PP_MODEL_ROLE_STEPS */
  PpTensor *context;            /* [1, L, D] on the backend */
  /* The temporal feature bank: its settings, one bank per step (made at
   * the step's first frame), and whether this frame is one of the
   * stream's (a warm-up pass is not: pp_model_stream_frame). */
  gboolean temporal;
  guint bank_frames;
  gdouble fusion_threshold;
  PpFeatureBank **banks;
  gboolean frame_counts;
  /* The same noise serves every frame: drawn once per latent size. */
  EncodeBuffers enc;
  DecodeBuffers dec;
  StepBuffers steps;
  /* batches[n]: the buffers of a batch of n (2 ≤ n ≤
   * pp_model_batch_max), made at its first use. */
  BatchBuffers *batches;
} Diffusion;

/* Device tensor @t whole, as an op's input or output. */
static PpView
tensor_in (const PpTensor * t)
{
  return pp_view (t->data, t->dtype, (gsize) pp_tensor_numel (t));
}

static PpOut
tensor_out (PpTensor * t)
{
  return pp_out (t->data, t->dtype, (gsize) pp_tensor_numel (t));
}

/* Noise of RNG @stream like @like, on the device: drawn on the host, then
 * uploaded (once per latent size). */
static PpTensor *
noise_new (Diffusion * d, guint64 stream, const PpTensor * like,
    GError ** error)
{
  g_autoptr (PpTensor) host = pp_tensor_new ("noise", PP_DTYPE_F32,
      like->ndim, like->shape, error);
  PpTensor *dev = NULL;
  PpRng rng;

  if (host == NULL)
    return NULL;
  pp_rng_init (&rng, d->seed, stream);
  pp_rng_fill_normal (&rng, host->data, (gsize) pp_tensor_numel (host));
  dev = pp_tensor_new_on (d->be, "noise", PP_DTYPE_F32, like->ndim,
      like->shape, error);
  if (dev != NULL && !pp_tensor_upload (dev, host, error))
    g_clear_pointer (&dev, pp_tensor_free);
  return dev;
}

static void
encode_buffers_clear (EncodeBuffers * b)
{
  g_clear_pointer (&b->frame, pp_tensor_free);
  g_clear_pointer (&b->frame_bytes, pp_tensor_free);
  g_clear_pointer (&b->frame_dev, pp_tensor_free);
  g_clear_pointer (&b->vae_in, pp_tensor_free);
  g_clear_pointer (&b->latents, pp_tensor_free);
  g_clear_pointer (&b->noise, pp_tensor_free);
  b->height = b->width = 0;
}

static void
decode_buffers_clear (DecodeBuffers * b)
{
  g_clear_pointer (&b->latents, pp_tensor_free);
  g_clear_pointer (&b->decoded, pp_tensor_free);
  g_clear_pointer (&b->pixels_dev, pp_tensor_free);
  g_clear_pointer (&b->pixel_bytes, pp_tensor_free);
  g_clear_pointer (&b->pixels, pp_tensor_free);
  b->height = b->width = 0;
}

static void
step_buffers_clear (StepBuffers * b, guint n_steps)
{
  g_clear_pointer (&b->sample, pp_tensor_free);
  g_clear_pointer (&b->unet_in, pp_tensor_free);
  g_clear_pointer (&b->eps, pp_tensor_free);
  for (guint k = 0; b->noise != NULL && k < n_steps; k++)
    g_clear_pointer (&b->noise[k], pp_tensor_free);
  g_clear_pointer (&b->noise, g_free);
  memset (b->shape, 0, sizeof b->shape);
}

static void
batch_buffers_clear (BatchBuffers * b)
{
  g_clear_pointer (&b->samples, pp_tensor_free);
  g_clear_pointer (&b->unet_in, pp_tensor_free);
  g_clear_pointer (&b->eps, pp_tensor_free);
  g_clear_pointer (&b->timesteps, g_free);
  memset (b->shape, 0, sizeof b->shape);
}

static void
batches_free (Diffusion * d, guint max)
{
  for (guint n = 0; d->batches != NULL && n <= max; n++)
    batch_buffers_clear (&d->batches[n]);
  g_clear_pointer (&d->batches, g_free);
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

/* The live settings of a pipeline model, as parsed from its parameters. */
typedef struct
{
  gchar *prompt_embeds_path;
  gdouble strength;
  guint64 seed;
  GArray *t_index_list;         /* guint, or NULL */
  PpSchedule *schedule;
  PpTensor *context;            /* host [1, L, D], or NULL: not loaded */
  gboolean temporal;
  guint bank_frames;
  gdouble fusion_threshold;
} Settings;

static void
settings_clear (Settings * s)
{
  g_clear_pointer (&s->prompt_embeds_path, g_free);
  g_clear_pointer (&s->t_index_list, g_array_unref);
  g_clear_pointer (&s->schedule, pp_schedule_free);
  g_clear_pointer (&s->context, pp_tensor_free);
}

/* The UNet's cross_attention_dim as its config.json says, for checking a
 * prompt's embeddings where no UNet is loaded (rank 0). */
static gboolean
read_cross_dim (const gchar * dir, guint * dim, GError ** error)
{
  g_autofree gchar *path = g_build_filename (dir, "unet", "config.json",
      NULL);
  PpConfig *cfg = pp_config_load (path, error);
  gint64 v = 0;
  gboolean ok;

  if (cfg == NULL)
    return FALSE;
  ok = pp_config_require_int (cfg, "cross_attention_dim", &v, error);
  pp_config_free (cfg);
  *dim = (guint) v;
  return ok;
}

/* The prompt states named by @ref ("chunk:DIGEST") among @inputs, checked
 * against the UNet's width and the digest, as a host tensor. */
static PpTensor *
context_from_inputs (const gchar * ref, GPtrArray * inputs, guint cross_dim,
    GError ** error)
{
  const PpTensor *states = NULL;
  g_autoptr (PpTensor) host = NULL;
  g_autofree gchar *digest = NULL;

  for (guint i = 0; inputs != NULL && i < inputs->len; i++) {
    const PpTensor *t = g_ptr_array_index (inputs, i);

    if (g_str_equal (t->name, PP_PROMPT_TENSOR))
      states = t;
  }
  if (states == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "prompt-embeds=%s: the prompt's states did not come with the "
        "settings (no '%s' tensor)", ref, PP_PROMPT_TENSOR);
    return NULL;
  }
  if (states->dtype != PP_DTYPE_F32 || states->ndim != 3
      || states->shape[0] != 1 || states->shape[2] != (gint64) cross_dim) {
    g_autofree gchar *got = pp_tensor_describe (states);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "the prompt's states are %s; the UNet needs F32[1, L, %u] (its "
        "cross_attention_dim)", got, cross_dim);
    return NULL;
  }
  host = pp_tensor_new ("context", PP_DTYPE_F32, 3, states->shape, error);
  if (host == NULL || !pp_tensor_transfer (host, states, error))
    return NULL;
  digest = pp_prompt_ref (host);
  if (!g_str_equal (digest, ref)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the prompt's states have digest %s, the settings name %s",
        digest, ref);
    return NULL;
  }
  return g_steal_pointer (&host);
}

/* A pipeline without a prompt: names both settings, and the model's own
 * embeddings when it ships some (make-tiny writes them). */
static void
set_no_prompt_error (const gchar * dir, GError ** error)
{
  g_autofree gchar *own = g_build_filename (dir, "prompt_embeds.npy", NULL);

  if (g_file_test (own, G_FILE_TEST_IS_REGULAR))
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "model '%s' needs a "
        "prompt: set prompt or prompt-embeds (this model has %s: "
        "prompt-embeds=%s)", dir, own, own);
  else
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "model '%s' needs a "
        "prompt: set prompt (a text, with the model's tokenizer/ and "
        "text_encoder/) or prompt-embeds (a .npy or .safetensors file of "
        "encoder hidden states)", dir);
}

/* Takes the typed live settings @in into @s: strength, seed, t-index-list
 * and prompt-embeds, the schedule they make, and with @cross_dim > 0 the
 * prompt's embeddings, loaded and checked.  @in NULL: the defaults, the
 * prompt still to come (a model is loaded before its settings). */
/* temporal, bank-frames, fusion-threshold. */
static gboolean
temporal_parse (PpModel * model, const PpSettings * in, Settings * s,
    GError ** error)
{
  const gchar *mode = in != NULL ? in->temporal : NULL;

  s->temporal = in != NULL && pp_settings_has_feature_bank (in);
  s->bank_frames = PP_SETTINGS_DEFAULT_BANK_FRAMES;
  s->fusion_threshold = PP_SETTINGS_DEFAULT_FUSION_THRESHOLD;
  if (mode != NULL && *mode != '\0' && !s->temporal
      && !g_str_equal (mode, PP_SETTINGS_TEMPORAL_OFF)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "temporal=%s: expected "
        PP_SETTINGS_TEMPORAL_OFF " or " PP_SETTINGS_TEMPORAL_FEATURE_BANK,
        mode);
    return FALSE;
  }
  if (!s->temporal)
    return TRUE;
  if (in->bank_frames < 1 || in->bank_frames > PP_SETTINGS_MAX_BANK_FRAMES) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "bank-frames=%"
        G_GUINT64_FORMAT ": expected 1 to %d", in->bank_frames,
        PP_SETTINGS_MAX_BANK_FRAMES);
    return FALSE;
  }
  if (!(in->fusion_threshold >= -1.0 && in->fusion_threshold <= 1.0)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "fusion-threshold=%g: "
        "expected a cosine similarity in [-1, 1]", in->fusion_threshold);
    return FALSE;
  }
  s->bank_frames = (guint) in->bank_frames;
  s->fusion_threshold = in->fusion_threshold;
  return TRUE;
}

static void
banks_free (Diffusion * d, guint n_steps)
{
  for (guint k = 0; d->banks != NULL && k < n_steps; k++)
    g_clear_pointer (&d->banks[k], pp_feature_bank_free);
  g_clear_pointer (&d->banks, g_free);
}

static gboolean
settings_parse (PpModel * model, const PpSettings * in, GPtrArray * inputs,
    PpScheduleKind kind, guint cross_dim, Settings * s, GError ** error)
{
  s->strength = in != NULL ? in->strength : PP_SETTINGS_DEFAULT_STRENGTH;
  s->seed = in != NULL ? in->seed : PP_SETTINGS_DEFAULT_SEED;
  if (in != NULL && in->prompt_embeds != NULL && *in->prompt_embeds != '\0')
    s->prompt_embeds_path = g_strdup (in->prompt_embeds);
  if (!(s->strength >= 1e-6 && s->strength <= 1.0)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "strength=%g: expected a number in [%g, %g]", s->strength, 1e-6,
        1.0);
    return FALSE;
  }
  if (in != NULL && in->t_index_list != NULL && *in->t_index_list != '\0'
      && !parse_index_list (in->t_index_list, &s->t_index_list, error))
    return FALSE;
  if (!temporal_parse (model, in, s, error))
    return FALSE;
  s->schedule = pp_schedule_new (kind, model->n_steps, s->strength,
      s->t_index_list, error);
  if (s->schedule == NULL)
    return FALSE;
  if (cross_dim == 0 || in == NULL)
    return TRUE;
  if (s->prompt_embeds_path == NULL) {
    set_no_prompt_error (model->path, error);
    return FALSE;
  }
  if (g_str_has_prefix (s->prompt_embeds_path, PP_PROMPT_REF_PREFIX))
    s->context = context_from_inputs (s->prompt_embeds_path, inputs,
        cross_dim, error);
  else
    s->context = load_context (s->prompt_embeds_path, cross_dim, error);
  return s->context != NULL;
}

/* Whether the banks of the steps that ran are steady
 * (pp_feature_bank_steady): their work is then the same every frame, and
 * a slice with them may be a graph. */
static gboolean
banks_steady (const Diffusion * d, guint n_steps)
{
  gboolean any = FALSE;

  for (guint k = 0; d->banks != NULL && k < n_steps; k++) {
    if (d->banks[k] == NULL)
      continue;
    if (!pp_feature_bank_steady (d->banks[k]))
      return FALSE;
    any = TRUE;
  }
  return any;
}

/* Makes @s the model's settings (taking what it holds).  A prompt goes to
 * the device; what was derived from the old seed and schedule (the noise
 * of every size, the step buffers) starts over at the next frame. */
static gboolean
settings_apply (Diffusion * d, PpModel * model, Settings * s, GError ** error)
{
  if (s->context != NULL) {
    PpTensor *context = pp_tensor_new_on (d->be, "context", PP_DTYPE_F32,
        s->context->ndim, s->context->shape, error);

    if (context == NULL || !pp_tensor_upload (context, s->context, error)) {
      pp_tensor_free (context);
      return FALSE;
    }
    g_clear_pointer (&d->context, pp_tensor_free);
    d->context = context;
  }
  g_free (d->prompt_embeds_path);
  d->prompt_embeds_path = g_steal_pointer (&s->prompt_embeds_path);
  d->strength = s->strength;
  d->seed = s->seed;
  g_clear_pointer (&d->t_index_list, g_array_unref);
  d->t_index_list = g_steal_pointer (&s->t_index_list);
  g_clear_pointer (&d->schedule, pp_schedule_free);
  d->schedule = g_steal_pointer (&s->schedule);
  /* Other bank settings: new banks at the next frames.  (A settings
   * change starts a new epoch, which empties them anyway.) */
  if (s->temporal != d->temporal || s->bank_frames != d->bank_frames
      || s->fusion_threshold != d->fusion_threshold)
    banks_free (d, model->n_steps);
  d->temporal = s->temporal;
  model->graphs_held = d->temporal;
  d->bank_frames = s->bank_frames;
  d->fusion_threshold = s->fusion_threshold;
  encode_buffers_clear (&d->enc);
  step_buffers_clear (&d->steps, model->n_steps);
  /* Each settings epoch builds the UNet's K/V cache once. */
  if (d->unet != NULL)
    pp_unet_context_changed (d->unet);
  return TRUE;
}

/* Tells a path that is not there from one that is no pipeline; what a
 * pipeline directory lacks beyond that, its loaders name. */
static gboolean
pipeline_dir_check (const gchar * dir, GError ** error)
{
  g_autofree gchar *index = g_build_filename (dir, "model_index.json", NULL);
  g_autofree gchar *unet = g_build_filename (dir, "unet", NULL);

  if (!g_file_test (dir, G_FILE_TEST_EXISTS)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "model '%s' does not exist; " MODEL_KINDS, dir);
    return FALSE;
  }
  if (pp_checkpoint_is_file (dir))
    return TRUE;
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "model '%s' is a file, not a directory; " MODEL_KINDS, dir);
    return FALSE;
  }
  if (!g_file_test (index, G_FILE_TEST_IS_REGULAR)
      && !g_file_test (unet, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "model '%s' is no diffusers pipeline directory: it has no "
        "model_index.json and no unet/; " MODEL_KINDS, dir);
    return FALSE;
  }
  return TRUE;
}

/* The LoRA's UNet pairs against the names and shapes of @unet_dir's
 * weights file (its header alone): a LoRA that does not fit is refused on
 * rank 0, before any worker loads it. */
static gboolean
check_unet_lora (Diffusion * d, PpLora * lora, GError ** error)
{
  g_autofree gchar *unet_dir = g_build_filename (d->config_dir, "unet",
      NULL);
  g_autofree gchar *path = NULL;
  g_autoptr (PpWeights) w = NULL;

  if (d->checkpoint != NULL) {
    g_autofree gchar *config = g_build_filename (unet_dir,
        PIPELINE_COMPONENT_CONFIG, NULL);

    w = pp_checkpoint_part (d->checkpoint, PP_CHECKPOINT_UNET, config,
        error);
  } else if ((path = pp_model_dir_weights_path (unet_dir, error)) != NULL)
    w = pp_weights_open (path, error);
  return w != NULL && pp_lora_check (lora, PP_LORA_UNET, w, error);
}

/* A single-file checkpoint's configurations: the config= folder, else its
 * family's, written to a folder of this model's own. */
static gboolean
checkpoint_configs (Diffusion * d, const gchar * path, const gchar * config,
    GError ** error)
{
  PpFamily family;

  d->checkpoint = g_strdup (path);
  if (!pp_checkpoint_family (path, &family, error))
    return FALSE;
  if (config != NULL && *config != '\0') {
    if (!g_file_test (config, G_FILE_TEST_IS_DIR)) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "config '%s' %s: it "
          "names a diffusers pipeline folder whose config files (unet/, "
          "vae/, text_encoder/, scheduler/, tokenizer/) describe the "
          "checkpoint", config, g_file_test (config, G_FILE_TEST_EXISTS)
          ? "is no directory" : "does not exist");
      return FALSE;
    }
    d->config_dir = g_strdup (config);
    return TRUE;
  }
  d->family_dir = g_dir_make_tmp ("ppdiffuse-family-XXXXXX", error);
  if (d->family_dir == NULL
      || !pp_family_write_configs (family, d->family_dir, error))
    return FALSE;
  d->config_dir = g_strdup (d->family_dir);
  return TRUE;
}

/* The component @part's config file under d->config_dir. */
static gchar *
part_config (Diffusion * d, const gchar * part)
{
  return g_build_filename (d->config_dir, part, PIPELINE_COMPONENT_CONFIG, NULL);
}

static gboolean
diffusion_init (PpModel * model, GHashTable * params, GError ** error)
{
  Diffusion *d = g_new0 (Diffusion, 1);
  g_autofree gchar *scheduler = NULL, *dtype_text = NULL, *vae = NULL;
  g_autofree gchar *lora_spec = NULL, *config = NULL;
  g_autoptr (PpLora) lora = NULL;
  Settings settings = { 0 };
  PpScheduleKind kind;
  gboolean ok;

  model->priv = d;
  d->be = model->backend;
  d->frame_counts = TRUE;
  if (!pipeline_dir_check (model->path, error))
    return FALSE;
  pp_model_param_string (params, "scheduler", &scheduler);
  pp_model_param_string (params, "dtype", &dtype_text);
  pp_model_param_string (params, "vae", &vae);
  pp_model_param_string (params, "lora", &lora_spec);
  pp_model_param_string (params, "config", &config);
  if (pp_checkpoint_is_file (model->path)) {
    if (!checkpoint_configs (d, model->path, config, error))
      return FALSE;
  } else if (config != NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "config=%s is for a "
        "single-file checkpoint; %s is a pipeline directory, which has its "
        "own", config, model->path);
    return FALSE;
  } else
    d->config_dir = g_strdup (model->path);
  d->dtype = d->be->default_weight_dtype;
  if (dtype_text != NULL && !pp_dtype_parse_weights (dtype_text, &d->dtype,
          error))
    return FALSE;
  if (!scheduler_kind (d->config_dir, scheduler, &kind, error))
    return FALSE;
  d->kind = kind;
  /* Read on every rank, so that rank 0 refuses a file that is not there
   * or not a LoRA before any spawn; fused where the UNet loads. */
  if (lora_spec != NULL && *lora_spec != '\0'
      && (lora = pp_lora_open (lora_spec, error)) == NULL)
    return FALSE;

  if (model->roles & PP_MODEL_ROLE_IMAGE) {
    g_autofree gchar *vae_dir = vae != NULL ? g_strdup (vae)
        : g_build_filename (d->config_dir, "vae", NULL);
    g_autofree gchar *unet_dir = g_build_filename (d->config_dir, "unet",
        NULL);

    if (vae != NULL && !g_file_test (vae, G_FILE_TEST_IS_DIR)) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "vae '%s' %s: it names "
          "a VAE folder (config.json and "
          "diffusion_pytorch_model.safetensors) of " PP_VAE_CLASSES
          ", such as madebyollin/taesd",
          vae, g_file_test (vae, G_FILE_TEST_EXISTS) ? "is no directory"
          : "does not exist");
      return FALSE;
    }
    /* Checked here too, so that rank 0 refuses it before any spawn. */
    if (!pp_unet_check_class (unet_dir, error)
        || (lora != NULL && !check_unet_lora (d, lora, error))
        || !read_frame_align (d->config_dir, &d->frame_align, error))
      return FALSE;
    if (d->checkpoint != NULL && vae == NULL) {
      g_autofree gchar *vae_config = part_config (d, "vae");
      PpWeights *w = pp_checkpoint_part (d->checkpoint, PP_CHECKPOINT_VAE,
          vae_config, error);

      d->vae = w != NULL ? pp_vae_load_checkpoint (vae_config, w, d->be,
          d->dtype, error) : NULL;
    } else
      d->vae = pp_vae_load (vae_dir, d->be, d->dtype, error);
    if (d->vae == NULL)
      return FALSE;
  }
  if (model->roles & PP_MODEL_ROLE_STEPS) {
    g_autofree gchar *unet_dir = g_build_filename (d->config_dir, "unet",
        NULL);

    if (d->checkpoint != NULL) {
      g_autofree gchar *unet_config = part_config (d, "unet");
      PpWeights *w = pp_checkpoint_part (d->checkpoint, PP_CHECKPOINT_UNET,
          unet_config, error);

      d->unet = w != NULL ? pp_unet_load_weights (unet_config, w, d->be,
          d->dtype, lora, error) : NULL;
    } else
      d->unet = pp_unet_load_lora (unet_dir, d->be, d->dtype, lora, error);
    if (d->unet == NULL)
      return FALSE;
  }
  /* The prompt is loaded where the UNet needs it. */
  /* The live settings come next (pp_model_update), the prompt with them. */
  ok = settings_parse (model, NULL, NULL, kind, 0, &settings, error)
      && settings_apply (d, model, &settings, error);
  settings_clear (&settings);
  return ok;
}

/* Checking loads a prompt wherever the model runs, so that a bad file is
 * refused before any rank switches to it; applying loads it only where
 * the UNet needs it. */
static gboolean
diffusion_update (PpModel * model, GHashTable * params,
    const PpSettings * in, GPtrArray * inputs, gboolean commit,
    GError ** error)
{
  Diffusion *d = model->priv;
  Settings settings = { 0 };
  guint cross_dim = 0;
  gboolean ok;

  if (d->unet != NULL)
    cross_dim = pp_unet_cross_attention_dim (d->unet);
  else if (!commit && !read_cross_dim (d->config_dir, &cross_dim, error))
    return FALSE;
  ok = settings_parse (model, in, inputs, d->kind, cross_dim, &settings,
      error);
  if (ok && commit)
    ok = settings_apply (d, model, &settings, error);
  settings_clear (&settings);
  return ok;
}

/* Device buffers for frames of @image's size (new ones when it changed). */
static gboolean
encode_buffers (Diffusion * d, const PpImage * image, EncodeBuffers * b,
    GError ** error)
{
  const gint h8 = align_side (image->height, d->frame_align);
  const gint w8 = align_side (image->width, d->frame_align);
  const gint f = (gint) pp_vae_scale_factor (d->vae);
  const gint64 frame[4] = { 1, PP_IMAGE_CHANNELS, image->height,
    image->width
  };
  const gint64 vae[4] = { 1, PP_IMAGE_CHANNELS, h8, w8 };
  const gint64 latent[4] = { 1, pp_vae_latent_channels (d->vae), h8 / f,
    w8 / f
  };

  if (b->height == image->height && b->width == image->width)
    return TRUE;
  encode_buffers_clear (b);
  /* The frame crosses to the device as bytes, a quarter of its floats. */
  b->frame = pp_tensor_new ("image", PP_DTYPE_U8, 4, frame, error);
  if (b->frame == NULL)
    return FALSE;
  b->frame_bytes = pp_tensor_new_on (d->be, "image", PP_DTYPE_U8, 4, frame,
      error);
  if (b->frame_bytes == NULL)
    return FALSE;
  b->frame_dev = pp_tensor_new_on (d->be, "image", PP_DTYPE_F32, 4, frame,
      error);
  if (b->frame_dev == NULL)
    return FALSE;
  if (h8 != image->height || w8 != image->width) {
    b->vae_in = pp_tensor_new_on (d->be, "image", PP_DTYPE_F32, 4, vae,
        error);
    if (b->vae_in == NULL)
      return FALSE;
  }
  b->latents = pp_tensor_new_on (d->be, PP_MODEL_SAMPLE_NAME, PP_DTYPE_F32,
      4, latent, error);
  if (b->latents == NULL)
    return FALSE;
  b->noise = noise_new (d, PP_RNG_STREAM_INIT, b->latents, error);
  if (b->noise == NULL)
    return FALSE;
  b->height = image->height;
  b->width = image->width;
  return TRUE;
}

/* Encoding in three parts (PpModelClass.encode_in …): the frame (host)
 * to the device in the encode buffers; there, pixels in [-1, 1] resized
 * to the VAE's multiples → latents → noised by the strength, the first
 * sample (device ops on those buffers alone: a graph can hold it); then
 * the latents into the chunk's sample. */
static gboolean
diffusion_encode_in (PpModel * model, const PpImage * image,
    GError ** error)
{
  Diffusion *d = model->priv;
  EncodeBuffers *b = &d->enc;

  if (!encode_buffers (d, image, b, error)) {
    encode_buffers_clear (b);
    return FALSE;
  }
  pp_image_to_planes (image, b->frame->data);
  return pp_tensor_upload (b->frame_bytes, b->frame, error);
}

static gboolean
diffusion_encode_compute (PpModel * model, GError ** error)
{
  Diffusion *d = model->priv;
  EncodeBuffers *b = &d->enc;
  PpTensor *vae_in = b->frame_dev;

  pp_bytes_to_floats (d->be, b->frame_bytes->data,
      pp_tensor_numel (b->frame_dev), tensor_out (b->frame_dev));
  pp_affine (d->be, tensor_out (b->frame_dev),
      pp_tensor_numel (b->frame_dev), 1.0f / PIXEL_HALF_RANGE, -1.0f);
  if (b->vae_in != NULL) {
    pp_resize_bilinear (d->be, tensor_in (b->frame_dev), PP_IMAGE_CHANNELS,
        b->height, b->width, tensor_out (b->vae_in),
        (gint) b->vae_in->shape[2], (gint) b->vae_in->shape[3]);
    vae_in = b->vae_in;
  }
  if (!pp_vae_encode_into (d->vae, vae_in, b->latents, error))
    return FALSE;
  pp_schedule_add_noise (d->schedule, d->be, b->latents->data,
      b->noise->data, pp_tensor_numel (b->latents));
  return TRUE;
}

/* A device @sample (a chunk's payload that travels over NCCL) is filled
 * device to device. */
static gboolean
diffusion_encode_out (PpModel * model, PpTensor * sample, GError ** error)
{
  Diffusion *d = model->priv;

  return pp_tensor_transfer (sample, d->enc.latents, error);
}

/* The first frame of a size: the same, into a new host sample that
 * travels to the workers. */
static PpTensor *
diffusion_encode (PpModel * model, const PpImage * image, GError ** error)
{
  Diffusion *d = model->priv;
  PpTensor *sample;

  if (!diffusion_encode_in (model, image, error)
      || !diffusion_encode_compute (model, error))
    return NULL;
  sample = pp_tensor_new (PP_MODEL_SAMPLE_NAME, PP_DTYPE_F32, 4,
      d->enc.latents->shape, error);
  if (sample != NULL && !diffusion_encode_out (model, sample, error))
    g_clear_pointer (&sample, pp_tensor_free);
  return sample;
}

static gboolean
check_sample (const PpTensor * sample, GError ** error)
{
  if (sample->dtype != PP_DTYPE_F32 || sample->ndim != 4) {
    g_autofree gchar *got = pp_tensor_describe (sample);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "a diffusion step needs an F32[N,C,H,W] latent, got %s", got);
    return FALSE;
  }
  return TRUE;
}

/* FALSE with @error when the prompt's states have not come yet. */
static gboolean
have_context (Diffusion * d, GError ** error)
{
  if (d->context != NULL)
    return TRUE;
  g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
      "no prompt states yet: the first chunk after the settings named "
      "prompt-embeds=%s must bring them", d->prompt_embeds_path);
  return FALSE;
}

/* Device buffers for samples of @sample's shape: the sample, the UNet's
 * input and output, and the noise of every step that takes fresh noise. */
static gboolean
step_buffers (PpModel * model, const PpTensor * sample, GError ** error)
{
  Diffusion *d = model->priv;
  StepBuffers *b = &d->steps;

  if (memcmp (b->shape, sample->shape, sizeof b->shape) == 0)
    return TRUE;
  step_buffers_clear (b, model->n_steps);
  b->sample = pp_tensor_new_on (d->be, PP_MODEL_SAMPLE_NAME, PP_DTYPE_F32, 4,
      sample->shape, error);
  b->unet_in = b->sample == NULL ? NULL : pp_tensor_new_on (d->be, "unet_in",
      PP_DTYPE_F32, 4, sample->shape, error);
  b->eps = b->unet_in == NULL ? NULL : pp_tensor_new_on (d->be, "eps",
      PP_DTYPE_F32, 4, sample->shape, error);
  if (b->eps == NULL)
    goto fail;
  b->noise = g_new0 (PpTensor *, model->n_steps);
  for (guint k = 0; k < model->n_steps; k++) {
    if (!pp_schedule_step_needs_noise (d->schedule, k))
      continue;
    b->noise[k] = noise_new (d, PP_RNG_STREAM_STEP (k), sample, error);
    if (b->noise[k] == NULL)
      goto fail;
  }
  memcpy (b->shape, sample->shape, sizeof b->shape);
  return TRUE;
fail:
  step_buffers_clear (b, model->n_steps);
  return FALSE;
}

static gboolean
diffusion_steps_begin (PpModel * model, const PpTensor * sample,
    GError ** error)
{
  Diffusion *d = model->priv;

  /* The feature bank's work changes from frame to frame until its banks
   * are steady (an epoch's reset empties them), and a warm-up pass does
   * not take it: graphs wait for steady banks and a frame of the stream.
   * Set here, before every slice. */
  model->graphs_held = d->temporal && !(d->frame_counts
      && banks_steady (d, model->n_steps));
  /* From the host, or device to device from a chunk that came over NCCL. */
  return check_sample (sample, error) && step_buffers (model, sample, error)
      && pp_tensor_transfer (d->steps.sample, sample, error);
}

static gboolean
diffusion_steps_end (PpModel * model, PpTensor * sample, GError ** error)
{
  Diffusion *d = model->priv;

  return pp_tensor_transfer (sample, d->steps.sample, error);
}

/* Step @step on the device sample: ε̂ = UNet(scaled x, t), then the
 * scheduler's update. */
static gboolean
diffusion_step (PpModel * model, guint step, guint n_steps, PpTensor * sample,
    GError ** error)
{
  Diffusion *d = model->priv;
  StepBuffers *b = &d->steps;
  const gsize n = (gsize) pp_tensor_numel (b->sample);
  gboolean ok;

  if (!have_context (d, error))
    return FALSE;
  pp_schedule_scale_input (d->schedule, d->be, step, b->sample->data,
      b->unet_in->data, n);
  if (d->temporal && d->frame_counts) {
    if (d->banks == NULL)
      d->banks = g_new0 (PpFeatureBank *, model->n_steps);
    if (d->banks[step] == NULL)
      d->banks[step] = pp_feature_bank_new (d->bank_frames,
          d->fusion_threshold);
    pp_unet_set_bank (d->unet, d->banks[step]);
  }
  ok = pp_unet_forward_into (d->unet, b->unet_in,
      d->schedule->timesteps[step], d->context, b->eps, error);
  pp_unet_set_bank (d->unet, NULL);
  if (!ok)
    return FALSE;
  pp_schedule_step (d->schedule, d->be, step, b->sample->data, b->eps->data,
      b->noise[step] != NULL ? b->noise[step]->data : NULL, n);
  return TRUE;
}

/* The buffers of a batch of @n samples shaped like @sample ([1, C, H, W]),
 * kept for the next batch of that size and shape. */
static BatchBuffers *
batch_buffers (PpModel * model, guint n, const PpTensor * sample,
    GError ** error)
{
  Diffusion *d = model->priv;
  const gint64 shape[4] = { n, sample->shape[1], sample->shape[2],
    sample->shape[3]
  };
  BatchBuffers *b;

  if (n > pp_model_batch_max (model)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "a stream batch of %u "
        "samples: at most %u per step of the schedule (%u steps)", n,
        model->frame_batch, model->n_steps);
    return NULL;
  }
  if (d->batches == NULL)
    d->batches = g_new0 (BatchBuffers, pp_model_batch_max (model) + 1);
  b = &d->batches[n];
  if (memcmp (b->shape, shape, sizeof shape) == 0)
    return b;
  batch_buffers_clear (b);
  b->samples = pp_tensor_new_on (d->be, "samples", PP_DTYPE_F32, 4, shape,
      error);
  b->unet_in = b->samples == NULL ? NULL : pp_tensor_new_on (d->be,
      "unet_in", PP_DTYPE_F32, 4, shape, error);
  b->eps = b->unet_in == NULL ? NULL : pp_tensor_new_on (d->be, "eps",
      PP_DTYPE_F32, 4, shape, error);
  if (b->eps == NULL) {
    batch_buffers_clear (b);
    return NULL;
  }
  b->timesteps = g_new0 (gdouble, n);
  memcpy (b->shape, shape, sizeof shape);
  return b;
}

/* Sample @i's row of @t, one of @b's tensors ([n, C, H, W]). */
static PpOut
batch_row (const BatchBuffers * b, PpTensor * t, guint i)
{
  const gsize per = (gsize) (b->shape[1] * b->shape[2] * b->shape[3]);

  return pp_out_range (tensor_out (t), i * per, per);
}

/* A sample's bytes (host, or on @be) into device memory @dst, and back. */
static void
sample_in (PpBackend * be, PpOut dst, const PpTensor * sample)
{
  if (sample->backend == NULL)
    pp_backend_upload (be, dst.data, sample->data, sample->nbytes);
  else
    pp_backend_copy (be, dst.data, sample->data, sample->nbytes);
}

static void
sample_out (PpBackend * be, PpTensor * sample, PpOut src)
{
  if (sample->backend == NULL)
    pp_backend_download (be, sample->data, src.data, sample->nbytes);
  else
    pp_backend_copy (be, sample->data, src.data, sample->nbytes);
}

/* A stream batch (the model's batch_in, batch_steps, batch_out): sample i
 * at step @steps[i], the UNet run once on them all
 * (pp_unet_forward_batch_into), each sample's scheduler update as
 * diffusion_step does it.  batch_in stages the samples into the batch
 * buffers of their count; with the temporal bank it stages nothing and
 * returns FALSE with no error: each step's bank takes the frames one at a
 * time, in order. */
static gboolean
diffusion_batch_in (PpModel * model, guint n, PpTensor * const *samples,
    const guint * steps, guint n_steps, GError ** error)
{
  Diffusion *d = model->priv;
  BatchBuffers *b;

  if (d->temporal)
    return FALSE;
  if (!have_context (d, error))
    return FALSE;
  for (guint i = 0; i < n; i++) {
    if (!check_sample (samples[i], error))
      return FALSE;
    if (samples[i]->shape[0] != 1
        || memcmp (samples[i]->shape, samples[0]->shape,
            sizeof samples[0]->shape[0] * 4) != 0
        || (samples[i]->backend != NULL && samples[i]->backend != d->be)) {
      g_autofree gchar *first = pp_tensor_describe (samples[0]);
      g_autofree gchar *got = pp_tensor_describe (samples[i]);

      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "a stream batch takes "
          "samples of one shape, [1,C,H,W] each, on the host or on %s: "
          "sample 0 is %s, sample %u %s", d->be->name, first, i, got);
      return FALSE;
    }
  }
  if (!step_buffers (model, samples[0], error)
      || (b = batch_buffers (model, n, samples[0], error)) == NULL)
    return FALSE;
  for (guint i = 0; i < n; i++)
    sample_in (d->be, batch_row (b, b->samples, i), samples[i]);
  return TRUE;
}

/* Device ops only, on the batch buffers of @n samples and the step
 * buffers: what a graph can hold. */
static gboolean
diffusion_batch_steps (PpModel * model, guint n, const guint * steps,
    guint n_steps, GError ** error)
{
  Diffusion *d = model->priv;
  const BatchBuffers *b = &d->batches[n];
  const gsize per = (gsize) pp_tensor_numel (b->samples) / n;

  for (guint i = 0; i < n; i++) {
    pp_schedule_scale_input (d->schedule, d->be, steps[i],
        batch_row (b, b->samples, i).data, batch_row (b, b->unet_in, i).data,
        per);
    b->timesteps[i] = d->schedule->timesteps[steps[i]];
  }
  if (!pp_unet_forward_batch_into (d->unet, b->unet_in, b->timesteps,
          d->context, b->eps, error))
    return FALSE;
  for (guint i = 0; i < n; i++) {
    const PpTensor *noise = d->steps.noise[steps[i]];

    pp_schedule_step (d->schedule, d->be, steps[i],
        batch_row (b, b->samples, i).data, batch_row (b, b->eps, i).data,
        noise != NULL ? noise->data : NULL, per);
  }
  return TRUE;
}

static void
diffusion_batch_out (PpModel * model, guint n, PpTensor * const *samples)
{
  Diffusion *d = model->priv;
  const BatchBuffers *b = &d->batches[n];

  for (guint i = 0; i < n; i++)
    sample_out (d->be, samples[i], batch_row (b, b->samples, i));
}

static gboolean
decode_buffers (Diffusion * d, const PpTensor * sample,
    const PpImage * image, GError ** error)
{
  DecodeBuffers *b = &d->dec;
  const gint f = (gint) pp_vae_scale_factor (d->vae);
  const gint64 decoded[4] = { 1, PP_IMAGE_CHANNELS, sample->shape[2] * f,
    sample->shape[3] * f
  };
  const gint64 frame[4] = { 1, PP_IMAGE_CHANNELS, image->height,
    image->width
  };

  if (b->height == image->height && b->width == image->width
      && memcmp (b->latent_shape, sample->shape, sizeof b->latent_shape) == 0)
    return TRUE;
  decode_buffers_clear (b);
  b->latents = pp_tensor_new_on (d->be, PP_MODEL_SAMPLE_NAME, PP_DTYPE_F32,
      4, sample->shape, error);
  if (b->latents == NULL)
    return FALSE;
  b->decoded = pp_tensor_new_on (d->be, "image", PP_DTYPE_F32, 4, decoded,
      error);
  if (b->decoded == NULL)
    return FALSE;
  if (decoded[2] != image->height || decoded[3] != image->width) {
    b->pixels_dev = pp_tensor_new_on (d->be, "pixels", PP_DTYPE_F32, 4,
        frame, error);
    if (b->pixels_dev == NULL)
      return FALSE;
  }
  /* The frame comes back as bytes, a quarter of its floats. */
  b->pixel_bytes = pp_tensor_new_on (d->be, "pixels", PP_DTYPE_U8, 4, frame,
      error);
  if (b->pixel_bytes == NULL)
    return FALSE;
  b->pixels = pp_tensor_new ("pixels", PP_DTYPE_U8, 4, frame, error);
  if (b->pixels == NULL)
    return FALSE;
  b->height = image->height;
  b->width = image->width;
  memcpy (b->latent_shape, sample->shape, sizeof b->latent_shape);
  return TRUE;
}

/* Decoding in three parts (PpModelClass.decode_in …): the sample (host,
 * or device from NCCL) into the decode buffers; there, the VAE's image →
 * resized to the frame → pixels 0..255 (device ops alone); then back on
 * the host, into the frame. */
static gboolean
diffusion_decode_in (PpModel * model, const PpTensor * sample,
    const PpImage * image, GError ** error)
{
  Diffusion *d = model->priv;
  DecodeBuffers *b = &d->dec;

  if (sample->dtype != PP_DTYPE_F32 || sample->ndim != 4
      || sample->shape[0] != 1
      || sample->shape[1] != pp_vae_latent_channels (d->vae)) {
    g_autofree gchar *got = pp_tensor_describe (sample);
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "the VAE decodes F32[1,%u,h,w] latents, got %s",
        pp_vae_latent_channels (d->vae), got);
    return FALSE;
  }
  if (!decode_buffers (d, sample, image, error)) {
    decode_buffers_clear (b);
    return FALSE;
  }
  return pp_tensor_transfer (b->latents, sample, error);
}

/* The pixels the decode buffers end in. */
static PpTensor *
decoded_pixels (const DecodeBuffers * b)
{
  return b->pixels_dev != NULL ? b->pixels_dev : b->decoded;
}

static gboolean
diffusion_decode_compute (PpModel * model, GError ** error)
{
  Diffusion *d = model->priv;
  DecodeBuffers *b = &d->dec;
  PpTensor *pixels = decoded_pixels (b);

  if (!pp_vae_decode_into (d->vae, b->latents, b->decoded, error))
    return FALSE;
  if (b->pixels_dev != NULL)
    pp_resize_bilinear (d->be, tensor_in (b->decoded), PP_IMAGE_CHANNELS,
        (gint) b->decoded->shape[2], (gint) b->decoded->shape[3],
        tensor_out (b->pixels_dev), b->height, b->width);
  /* [-1, 1] → 0..255, rounded and clamped into bytes */
  pp_affine (d->be, tensor_out (pixels), pp_tensor_numel (pixels),
      PIXEL_HALF_RANGE, PIXEL_HALF_RANGE);
  pp_floats_to_bytes (d->be, tensor_in (pixels), pp_tensor_numel (pixels),
      b->pixel_bytes->data);
  return TRUE;
}

static gboolean
diffusion_decode_out (PpModel * model, PpImage * image, GError ** error)
{
  Diffusion *d = model->priv;
  DecodeBuffers *b = &d->dec;

  if (!pp_tensor_download (b->pixels, b->pixel_bytes, error))
    return FALSE;
  pp_image_from_planes (image, b->pixels->data);
  return TRUE;
}

static void
diffusion_finalize (PpModel * model)
{
  Diffusion *d = model->priv;

  if (d == NULL)
    return;
  g_free (d->prompt_embeds_path);
  if (d->family_dir != NULL)
    pp_family_remove_configs (d->family_dir);
  g_free (d->family_dir);
  g_free (d->config_dir);
  g_free (d->checkpoint);
  g_clear_pointer (&d->t_index_list, g_array_unref);
  g_clear_pointer (&d->schedule, pp_schedule_free);
  banks_free (d, model->n_steps);
  g_clear_pointer (&d->vae, pp_vae_free);
  g_clear_pointer (&d->unet, pp_unet_free);
  g_clear_pointer (&d->context, pp_tensor_free);
  encode_buffers_clear (&d->enc);
  decode_buffers_clear (&d->dec);
  step_buffers_clear (&d->steps, model->n_steps);
  batches_free (d, pp_model_batch_max (model));
  g_free (d);
}

static gchar *
diffusion_weights_digest (PpModel * model)
{
  Diffusion *d = model->priv;

  return d->unet != NULL ? g_strdup (pp_unet_weights_digest (d->unet))
      : NULL;
}

/* A new epoch (settings, a flush, new caps) starts the stream over: the
 * banks are emptied (docs/operator/cache-lifecycle.md). */
static void
diffusion_epoch_reset (PpModel * model)
{
  Diffusion *d = model->priv;

  if (d->unet != NULL)
    pp_unet_context_changed (d->unet);
  for (guint k = 0; d->banks != NULL && k < model->n_steps; k++)
    if (d->banks[k] != NULL)
      pp_feature_bank_reset (d->banks[k]);
}

static guint64
diffusion_stream_bytes (PpModel * model)
{
  Diffusion *d = model->priv;
  guint64 bytes = 0;

  for (guint k = 0; d->banks != NULL && k < model->n_steps; k++)
    if (d->banks[k] != NULL)
      bytes += pp_feature_bank_bytes (d->banks[k]);
  return bytes;
}

static void
diffusion_pools (PpModel * model, PpPoolBytes * sum)
{
  Diffusion *d = model->priv;

  if (d->unet != NULL)
    pp_unet_pools (d->unet, sum);
  if (d->vae != NULL)
    pp_vae_pools (d->vae, sum);
}

static void
diffusion_stream_frame (PpModel * model, gboolean counts)
{
  Diffusion *d = model->priv;

  d->frame_counts = counts;
}

static guint64
diffusion_cache_builds (PpModel * model)
{
  Diffusion *d = model->priv;

  return d->unet != NULL ? pp_unet_kv_cache_builds (d->unet) : 0;
}

const PpModelClass pp_model_diffusion_class = {
  .name = "diffusion",
  .init = diffusion_init,
  .update = diffusion_update,
  .step = diffusion_step,
  .steps_begin = diffusion_steps_begin,
  .steps_end = diffusion_steps_end,
  .batch_in = diffusion_batch_in,
  .batch_steps = diffusion_batch_steps,
  .batch_out = diffusion_batch_out,
  .encode = diffusion_encode,
  .encode_in = diffusion_encode_in,
  .encode_compute = diffusion_encode_compute,
  .encode_out = diffusion_encode_out,
  .decode_in = diffusion_decode_in,
  .decode_compute = diffusion_decode_compute,
  .decode_out = diffusion_decode_out,
  .finalize = diffusion_finalize,
  .weights_digest = diffusion_weights_digest,
  .cache_builds = diffusion_cache_builds,
  .epoch_reset = diffusion_epoch_reset,
  .stream_frame = diffusion_stream_frame,
  .stream_bytes = diffusion_stream_bytes,
  .pools = diffusion_pools,
  .graphable = TRUE,
};
