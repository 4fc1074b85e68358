/* GStreamer ppdiffuse — the element's properties.  A live one (a field of
 * PpSettings) tells the stream engine when it changes; the engine checks
 * it while playing.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-props.h"
#include "gstppdiffuse-live.h"
#include "pp-model.h"

GST_DEBUG_CATEGORY_EXTERN (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

#define DEFAULT_RANKS 2
#define DEFAULT_STEPS 4
#define DEFAULT_MAX_IN_FLIGHT 0
#define DEFAULT_MODEL PP_SETTINGS_DEFAULT_MODEL
#define DEFAULT_BACKEND GST_PP_DIFFUSE_BACKEND_AUTO
#define DEFAULT_CUDA_DEVICE_ID -1
/* More GPUs than one host has. */
#define MAX_CUDA_DEVICE_ID 1023
#define DEFAULT_DTYPE GST_PP_DIFFUSE_DTYPE_AUTO
#define DEFAULT_CUDA_GRAPHS FALSE
#define DEFAULT_STREAM_BATCH FALSE
#define DEFAULT_FRAME_BATCH 1
#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_STRENGTH PP_SETTINGS_DEFAULT_STRENGTH
#define DEFAULT_SEED PP_SETTINGS_DEFAULT_SEED
#define DEFAULT_SIMILARITY_THRESHOLD 0.0
#define MAX_STEPS 1000
#define MAX_IN_FLIGHT_LIMIT 1024
#define MIN_TIMEOUT_MS 100
#define MAX_TIMEOUT_MS (24 * 3600 * 1000)
#define DEFAULT_QOS TRUE
#define DEFAULT_STATS_INTERVAL_MS 1000
#define MAX_STATS_INTERVAL_MS (3600 * 1000)

enum
{
  PROP_0,
  PROP_RANKS,
  PROP_STEPS,
  PROP_MAX_IN_FLIGHT,
  PROP_MODEL,
  PROP_BACKEND,
  PROP_CUDA_DEVICE_ID,
  PROP_DTYPE,
  PROP_CUDA_GRAPHS,
  PROP_STREAM_BATCH,
  PROP_FRAME_BATCH,
  PROP_VAE,
  PROP_LORA,
  PROP_TIMEOUT_MS,
  PROP_WORKER,
  PROP_HOSTS,
  PROP_HOSTFILE,
  PROP_DUMP_DIR,
  PROP_PROMPT,
  PROP_PROMPT_EMBEDS,
  PROP_STRENGTH,
  PROP_SEED,
  PROP_T_INDEX_LIST,
  PROP_TEMPORAL,
  PROP_BANK_FRAMES,
  PROP_FUSION_THRESHOLD,
  PROP_WARM_UP,
  PROP_LEAKY,
  PROP_SIMILARITY_THRESHOLD,
  PROP_KEEP_WORKERS,
  PROP_STATS,
  PROP_QOS,
  PROP_STATS_INTERVAL_MS,
};

GType
gst_pp_diffuse_backend_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_PP_DIFFUSE_BACKEND_AUTO, "$PPDIFFUSE_BACKEND when set, else CUDA "
          "when this build has it and rank 0 sees a GPU, else the CPU (with "
          "a warning that says why)", "auto"},
    {GST_PP_DIFFUSE_BACKEND_CPU, "CPU kernels, MPI data plane", "cpu"},
    {GST_PP_DIFFUSE_BACKEND_CUDA, "CUDA kernels on the GPU of each rank's "
          "node-local rank; fails at start without a device", "cuda"},
    {GST_PP_DIFFUSE_BACKEND_CPU_STRICT, "CPU kernels on device buffers the "
          "host cannot touch: a debugging backend that faults on any stray "
          "host access to device memory", "cpu-strict"},
    {0, NULL, NULL},
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type,
        g_enum_register_static ("GstPpDiffuseBackend", values));
  return type;
}

GType
gst_pp_diffuse_dtype_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_PP_DIFFUSE_DTYPE_AUTO, "the backend's default: f16 on CUDA, f32 "
          "on the CPU", "auto"},
    {GST_PP_DIFFUSE_DTYPE_F32, "32-bit float weights", "f32"},
    {GST_PP_DIFFUSE_DTYPE_F16, "IEEE half weights (the CPU backends round "
          "the weights to half precision and compute in f32)", "f16"},
    {GST_PP_DIFFUSE_DTYPE_BF16, "bfloat16 weights (the CPU backends round "
          "likewise)", "bf16"},
    {0, NULL, NULL},
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type,
        g_enum_register_static ("GstPpDiffuseDtype", values));
  return type;
}

GType
gst_pp_diffuse_temporal_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_PP_DIFFUSE_TEMPORAL_OFF, "each frame on its own", "off"},
    {GST_PP_DIFFUSE_TEMPORAL_FEATURE_BANK, "a feature bank of past frames "
          "(extended self-attention, feature fusion: StreamV2V)",
        "feature-bank"},
    {0, NULL, NULL},
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type,
        g_enum_register_static ("GstPpDiffuseTemporal", values));
  return type;
}

static void
replace_string (gchar ** field, const GValue * value)
{
  g_free (*field);
  *field = g_value_dup_string (value);
}

static void
gst_pp_diffuse_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (object);

  GST_OBJECT_LOCK (self);
  switch (prop_id) {
    case PROP_RANKS:
      self->ranks = g_value_get_uint (value);
      break;
    case PROP_STEPS:
      self->steps = g_value_get_uint (value);
      break;
    case PROP_MAX_IN_FLIGHT:
      self->max_in_flight = g_value_get_uint (value);
      break;
    case PROP_MODEL:
      replace_string (&self->settings.model, value);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_BACKEND:
      self->backend = g_value_get_enum (value);
      break;
    case PROP_CUDA_DEVICE_ID:
      self->cuda_device_id = g_value_get_int (value);
      break;
    case PROP_DTYPE:
      self->dtype = g_value_get_enum (value);
      break;
    case PROP_CUDA_GRAPHS:
      self->cuda_graphs = g_value_get_boolean (value);
      self->cuda_graphs_set = TRUE;
      break;
    case PROP_STREAM_BATCH:
      self->stream_batch = g_value_get_boolean (value);
      break;
    case PROP_FRAME_BATCH:
      self->frame_batch = g_value_get_uint (value);
      break;
    case PROP_TIMEOUT_MS:
      self->timeout_ms = g_value_get_uint (value);
      break;
    case PROP_WORKER:
      replace_string (&self->worker, value);
      break;
    case PROP_HOSTS:
      replace_string (&self->hosts, value);
      break;
    case PROP_HOSTFILE:
      replace_string (&self->hostfile, value);
      break;
    case PROP_VAE:
      replace_string (&self->vae, value);
      break;
    case PROP_LORA:
      replace_string (&self->lora, value);
      break;
    case PROP_DUMP_DIR:
      replace_string (&self->dump_dir, value);
      break;
    case PROP_PROMPT:
      replace_string (&self->settings.prompt, value);
      /* One or the other: a prompt replaces a file of states. */
      if (pp_settings_has_prompt (&self->settings))
        g_clear_pointer (&self->settings.prompt_embeds, g_free);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_PROMPT_EMBEDS:
      replace_string (&self->settings.prompt_embeds, value);
      if (self->settings.prompt_embeds != NULL
          && *self->settings.prompt_embeds != '\0')
        g_clear_pointer (&self->settings.prompt, g_free);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_STRENGTH:
      self->settings.strength = g_value_get_double (value);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_SEED:
      self->settings.seed = g_value_get_uint64 (value);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_T_INDEX_LIST:
      replace_string (&self->settings.t_index_list, value);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_TEMPORAL:
      g_free (self->settings.temporal);
      self->settings.temporal = g_strdup (g_value_get_enum (value)
          == GST_PP_DIFFUSE_TEMPORAL_FEATURE_BANK
          ? PP_SETTINGS_TEMPORAL_FEATURE_BANK : PP_SETTINGS_TEMPORAL_OFF);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_BANK_FRAMES:
      self->settings.bank_frames = g_value_get_uint (value);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_FUSION_THRESHOLD:
      self->settings.fusion_threshold = g_value_get_double (value);
      pp_stream_settings_changed (self->stream);
      break;
    case PROP_WARM_UP:
      self->warm_up = g_value_get_boolean (value);
      self->warm_up_set = TRUE;
      break;
    case PROP_LEAKY:
      self->leaky = g_value_get_boolean (value);
      self->leaky_set = TRUE;
      break;
    case PROP_QOS:
      self->qos = g_value_get_boolean (value);
      break;
    case PROP_STATS_INTERVAL_MS:
      self->stats_interval_ms = g_value_get_uint (value);
      break;
    case PROP_SIMILARITY_THRESHOLD:
      self->similarity_threshold = g_value_get_double (value);
      break;
    case PROP_KEEP_WORKERS:
      self->keep_workers = g_value_get_boolean (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
  if (prop_id == PROP_STATS_INTERVAL_MS)
    gst_pp_diffuse_stats_timer_wake (self->stats_timer);
}

static void
gst_pp_diffuse_get_property (GObject * object, guint prop_id, GValue * value,
    GParamSpec * pspec)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (object);

  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, gst_pp_diffuse_stats_structure (self));
    return;
  }
  GST_OBJECT_LOCK (self);
  switch (prop_id) {
    case PROP_RANKS:
      g_value_set_uint (value, self->ranks);
      break;
    case PROP_STEPS:
      g_value_set_uint (value, self->steps);
      break;
    case PROP_MAX_IN_FLIGHT:
      g_value_set_uint (value, self->max_in_flight);
      break;
    case PROP_MODEL:
      g_value_set_string (value, self->settings.model);
      break;
    case PROP_BACKEND:
      g_value_set_enum (value, self->backend);
      break;
    case PROP_CUDA_DEVICE_ID:
      g_value_set_int (value, self->cuda_device_id);
      break;
    case PROP_DTYPE:
      g_value_set_enum (value, self->dtype);
      break;
    case PROP_CUDA_GRAPHS:
      g_value_set_boolean (value, self->cuda_graphs);
      break;
    case PROP_STREAM_BATCH:
      g_value_set_boolean (value, self->stream_batch);
      break;
    case PROP_FRAME_BATCH:
      g_value_set_uint (value, self->frame_batch);
      break;
    case PROP_TIMEOUT_MS:
      g_value_set_uint (value, self->timeout_ms);
      break;
    case PROP_WORKER:
      g_value_set_string (value, self->worker);
      break;
    case PROP_HOSTS:
      g_value_set_string (value, self->hosts);
      break;
    case PROP_HOSTFILE:
      g_value_set_string (value, self->hostfile);
      break;
    case PROP_VAE:
      g_value_set_string (value, self->vae);
      break;
    case PROP_LORA:
      g_value_set_string (value, self->lora);
      break;
    case PROP_DUMP_DIR:
      g_value_set_string (value, self->dump_dir);
      break;
    case PROP_PROMPT:
      g_value_set_string (value, self->settings.prompt);
      break;
    case PROP_PROMPT_EMBEDS:
      g_value_set_string (value, self->settings.prompt_embeds);
      break;
    case PROP_STRENGTH:
      g_value_set_double (value, self->settings.strength);
      break;
    case PROP_SEED:
      g_value_set_uint64 (value, self->settings.seed);
      break;
    case PROP_T_INDEX_LIST:
      g_value_set_string (value, self->settings.t_index_list);
      break;
    case PROP_TEMPORAL:
      g_value_set_enum (value, pp_settings_has_feature_bank (&self->settings)
          ? GST_PP_DIFFUSE_TEMPORAL_FEATURE_BANK
          : GST_PP_DIFFUSE_TEMPORAL_OFF);
      break;
    case PROP_BANK_FRAMES:
      g_value_set_uint (value, (guint) self->settings.bank_frames);
      break;
    case PROP_FUSION_THRESHOLD:
      g_value_set_double (value, self->settings.fusion_threshold);
      break;
    case PROP_WARM_UP:
      g_value_set_boolean (value, self->warm_up);
      break;
    case PROP_LEAKY:
      if (self->leaky_set) {
        g_value_set_boolean (value, self->leaky);
      } else {
        /* The value in effect: upstream's liveness. */
        g_mutex_lock (&self->lock);
        g_value_set_boolean (value, self->live);
        g_mutex_unlock (&self->lock);
      }
      break;
    case PROP_QOS:
      g_value_set_boolean (value, self->qos);
      break;
    case PROP_STATS_INTERVAL_MS:
      g_value_set_uint (value, self->stats_interval_ms);
      break;
    case PROP_SIMILARITY_THRESHOLD:
      g_value_set_double (value, self->similarity_threshold);
      break;
    case PROP_KEEP_WORKERS:
      g_value_set_boolean (value, self->keep_workers);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
}


#define PARAM_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_READY)
/* Live settings: checked by the stream engine while playing. */
#define LIVE_PARAM_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_PLAYING)

void
gst_pp_diffuse_install_properties (GObjectClass * gobject_class)
{
  gobject_class->set_property = gst_pp_diffuse_set_property;
  gobject_class->get_property = gst_pp_diffuse_get_property;

  /**
   * GstPpDiffuse:ranks:
   *
   * Number of worker processes spawned through MPI; each runs a contiguous
   * slice of the denoising steps.
   */
  g_object_class_install_property (gobject_class, PROP_RANKS,
      g_param_spec_uint ("ranks", "Ranks",
          "Number of worker processes (each runs a slice of the steps); "
          "must not exceed steps", 1, PP_STREAM_MAX_WORKERS, DEFAULT_RANKS,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:steps:
   *
   * Denoising steps per frame, split over the workers without dropping any.
   */
  g_object_class_install_property (gobject_class, PROP_STEPS,
      g_param_spec_uint ("steps", "Steps",
          "Denoising steps per frame; the first (steps mod ranks) workers "
          "run one extra step", 1, MAX_STEPS, DEFAULT_STEPS, PARAM_FLAGS));
  /**
   * GstPpDiffuse:max-in-flight:
   *
   * Frames allowed between submission to the mesh and their push
   * downstream; upstream blocks when that many are out.
   */
  g_object_class_install_property (gobject_class, PROP_MAX_IN_FLIGHT,
      g_param_spec_uint ("max-in-flight", "Max in flight",
          "Frames in flight at most (frames; 0 = (ranks + 1) × "
          "frame-batch)", 0, MAX_IN_FLIGHT_LIMIT, DEFAULT_MAX_IN_FLIGHT,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:model:
   *
   * The model, as a URI: builtin:stamp (proves the schedule) or
   * builtin:anisotropic (Perona–Malik diffusion), with optional
   * parameters such as builtin:stamp?step-ms=10, a diffusers pipeline
   * directory, or a single-file checkpoint (FILE.safetensors, with
   * ?config=DIR naming a diffusers folder of its architecture).  While
   * playing, a URI of the same model with other live
   * parameters (kappa, lambda, mark, step-ms) takes effect at the next
   * frame on every rank; another model needs a restart (a warning, and
   * the running one stays).
   */
  g_object_class_install_property (gobject_class, PROP_MODEL,
      g_param_spec_string ("model", "Model",
          "Model: builtin:anisotropic[?kappa=K&lambda=L], builtin:stamp"
          "[?mark=M] (step-ms=M adds M milliseconds per step), a diffusers "
          "pipeline directory (unet/, vae/, scheduler/), or a single-file "
          "checkpoint (FILE.safetensors[?config=DIR]); its parameters "
          "change while playing", DEFAULT_MODEL,
          LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:backend:
   *
   * Where the workers compute.
   */
  g_object_class_install_property (gobject_class, PROP_BACKEND,
      g_param_spec_enum ("backend", "Backend",
          "Compute backend of the workers", GST_TYPE_PP_DIFFUSE_BACKEND,
          DEFAULT_BACKEND, PARAM_FLAGS));
  /**
   * GstPpDiffuse:cuda-device-id:
   *
   * The GPU rank 0 computes on, among those its process sees; the
   * workers of its host take the ones after it in turn (wrapping round to
   * device 0), each other host's workers likewise from the same device.
   * Naming one asks for the cuda backend: with backend=auto it is cuda
   * (failing at start without that device, as backend=cuda does), with a
   * CPU backend the start fails.  -1: device 0, or the one
   * $PPDIFFUSE_BACKEND=cuda:N names.
   */
  g_object_class_install_property (gobject_class, PROP_CUDA_DEVICE_ID,
      g_param_spec_int ("cuda-device-id", "CUDA device",
          "The GPU rank 0 computes on; its host's workers take the ones "
          "after it (-1: device 0, or $PPDIFFUSE_BACKEND=cuda:N's)", -1,
          MAX_CUDA_DEVICE_ID, DEFAULT_CUDA_DEVICE_ID, PARAM_FLAGS));
  /**
   * GstPpDiffuse:dtype:
   *
   * How a diffusers pipeline's weights are stored on the backend: f32,
   * f16 or bf16; compute accumulates in f32 either way.  auto is f16 on
   * CUDA and f32 on the CPU backends; on the CPU a 16-bit dtype rounds the
   * weights to its precision, so that the CPU computes what a GPU would.
   * Every rank uses the same dtype (the handshake checks it).
   */
  g_object_class_install_property (gobject_class, PROP_DTYPE,
      g_param_spec_enum ("dtype", "Weight dtype",
          "Storage dtype of a pipeline's weights (auto: f16 on CUDA, f32 on "
          "the CPU)", GST_TYPE_PP_DIFFUSE_DTYPE, DEFAULT_DTYPE,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:cuda-graphs:
   *
   * Capture each worker's slice of steps as a CUDA graph after its first
   * run at a latent size, and launch the graph for every later chunk of
   * the same size and cache epoch (a new epoch or size captures again);
   * rank 0's VAE encoding and decoding likewise, per frame size (new
   * settings capture the encoding again).  Only pipeline directories on
   * the cuda backend capture; elsewhere the work runs as usual (cpu-strict
   * emulates the capture, for tests).
   * Unset, the backend decides: on with cuda, off elsewhere.  See
   * docs/operator/warm-up-and-cuda-graphs.md.
   */
  g_object_class_install_property (gobject_class, PROP_CUDA_GRAPHS,
      g_param_spec_boolean ("cuda-graphs", "CUDA graphs",
          "Capture each worker's steps, and rank 0's VAE encoding and "
          "decoding, as CUDA graphs after warm-up and launch them per chunk "
          "(unset: on with the cuda backend, off elsewhere)",
          DEFAULT_CUDA_GRAPHS,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:stream-batch:
   *
   * StreamDiffusion's denoising batch: a worker whose slice has several
   * steps runs them for several frames in one batched UNet pass (frame n
   * at the slice's first step together with frame n−1 at the next …),
   * taking the frames that wait for it and never waiting for one.  Frame
   * order, the zero-stale-frame rule and each frame's bytes are those of
   * the unbatched steps.  It needs frames in flight to batch: at most
   * max-in-flight frames share a pass.  A start setting.  See
   * docs/architecture.md, "Stream batch".
   */
  g_object_class_install_property (gobject_class, PROP_STREAM_BATCH,
      g_param_spec_boolean ("stream-batch", "Stream batch",
          "Run a worker's steps for several frames in one batched pass "
          "(default off)", DEFAULT_STREAM_BATCH, PARAM_FLAGS));
  /**
   * GstPpDiffuse:frame-batch:
   *
   * The most frames a worker runs together at one step (StreamDiffusion's
   * frame buffer): the frames already waiting for a worker, up to this
   * many, start its slice in one batched UNet pass and go through it
   * together (with stream-batch, behind the frames at its later steps).
   * No frame is waited for; frame order, the zero-stale-frame rule and
   * each frame's bytes are those of the unbatched steps.  Throughput for
   * latency: a GPU runs a batch of a few latents in less than their
   * passes one by one, and a frame waits for its batch.  It needs frames
   * in flight: max-in-flight 0 lets (ranks + 1) × frame-batch.  A start
   * setting.  See docs/architecture.md, "Stream batch".
   */
  g_object_class_install_property (gobject_class, PROP_FRAME_BATCH,
      g_param_spec_uint ("frame-batch", "Frame batch",
          "The most frames a worker runs together at one step (frames; 1 = "
          "one at a time)", 1, PP_MODEL_FRAME_BATCH_MAX,
          DEFAULT_FRAME_BATCH, PARAM_FLAGS));
  /**
   * GstPpDiffuse:vae:
   *
   * A VAE folder (config.json and diffusion_pytorch_model.safetensors) that
   * rank 0 encodes and decodes frames with, in the place of the pipeline
   * directory's vae/: a TAESD (AutoencoderTiny, such as madebyollin/taesd)
   * for speed, where a released pipeline's vae/ holds the full
   * AutoencoderKL.  A start setting: a change applies at the next start.
   */
  g_object_class_install_property (gobject_class, PROP_VAE,
      g_param_spec_string ("vae", "VAE",
          "A VAE folder (TAESD or AutoencoderKL) to use in the place of the "
          "pipeline's vae/ (default: the pipeline's own)", NULL,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:lora:
   *
   * LoRA files fused into the UNet (and the text encoder, where a file
   * has pairs for it) when the model loads: PATH[:SCALE][,PATH[:SCALE]…],
   * SCALE a decimal multiplier (default 1), such as LCM-LoRA for 4-step
   * SD1.5.  diffusers/PEFT and kohya key layouts.  A start setting: a
   * change applies at the next start.
   */
  g_object_class_install_property (gobject_class, PROP_LORA,
      g_param_spec_string ("lora", "LoRA",
          "LoRA files fused at load, PATH[:SCALE][,PATH[:SCALE]...] "
          "(default: none)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:timeout-ms:
   *
   * How long a worker may be silent (no heartbeat) before it counts as
   * hung, and the deadline of the waits that do not scale with the work:
   * spawn, handshake, shutdown (MPI start-up and the spawn get at least
   * 10000 ms).  A wait on work (a chunk's send or
   * return, a worker computing one chunk) is allowed max (timeout-ms, 3 ×
   * what the mesh measured that work takes + timeout-ms / 4); before
   * anything is measured a step counts as 2 × timeout-ms, and so it does
   * again at a frame of another size (a caps change).  When a
   * deadline passes the element posts an error naming the rank, the
   * times and what to change.
   */
  g_object_class_install_property (gobject_class, PROP_TIMEOUT_MS,
      g_param_spec_uint ("timeout-ms", "Timeout",
          "How long a worker may be silent, and the least deadline of any "
          "wait on the workers; waits on work get 3 x its measured time "
          "when that is longer (milliseconds)",
          MIN_TIMEOUT_MS, MAX_TIMEOUT_MS, DEFAULT_TIMEOUT_MS, PARAM_FLAGS));
  /**
   * GstPpDiffuse:worker:
   *
   * Path of the ppdiffuse-worker executable.  Unset: $PPDIFFUSE_WORKER,
   * else the installed one.
   */
  g_object_class_install_property (gobject_class, PROP_WORKER,
      g_param_spec_string ("worker", "Worker",
          "Path of ppdiffuse-worker (default: $PPDIFFUSE_WORKER, else the "
          "installed one)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:hosts:
   *
   * Comma-separated hosts to run the workers on (MPI_Info "host").
   */
  g_object_class_install_property (gobject_class, PROP_HOSTS,
      g_param_spec_string ("hosts", "Hosts",
          "Comma-separated hosts for the workers, passed to MPI_Comm_spawn "
          "as \"host\" (default: none, this machine)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:hostfile:
   *
   * Open MPI hostfile for the workers (MPI_Info "hostfile").
   */
  g_object_class_install_property (gobject_class, PROP_HOSTFILE,
      g_param_spec_string ("hostfile", "Hostfile",
          "Open MPI hostfile for the workers, passed to MPI_Comm_spawn as "
          "\"hostfile\" (default: none)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:dump-dir:
   *
   * Folder for the flight recorders: when the mesh fails, every rank that
   * can writes its last events (chunk sends, receives, computes, missed
   * heartbeats) to ppdiffuse-rank<R>-pid<P>.txt there, as well as to the
   * log.
   */
  g_object_class_install_property (gobject_class, PROP_DUMP_DIR,
      g_param_spec_string ("dump-dir", "Dump folder",
          "Folder where each rank writes its flight recorder when the mesh "
          "fails (default: none, the log only)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:prompt:
   *
   * A text prompt for a diffusers pipeline directory with tokenizer/ and
   * text_encoder/, or a weighted blend of prompts: "a watercolor city:0.7|
   * neon night:0.3" (weights normalised to sum 1, the prompts' hidden
   * states mixed with them; a part without ":WEIGHT" weighs 1).  Rank 0
   * encodes it off the streaming thread; while playing the new prompt takes
   * effect at the next frame on every rank at once, like any live setting.
   * Setting a prompt clears #GstPpDiffuse:prompt-embeds, and setting that
   * clears this.  A prompt over 77 tokens is cut, with a warning.
   */
  g_object_class_install_property (gobject_class, PROP_PROMPT,
      g_param_spec_string ("prompt", "Prompt",
          "Text prompt or blend 'text:weight|text:weight' for a pipeline "
          "with tokenizer/ and text_encoder/ (default: none; clears "
          "prompt-embeds)", NULL, LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:prompt-embeds:
   *
   * Text-encoder hidden states for a pipeline-directory model.
   */
  g_object_class_install_property (gobject_class, PROP_PROMPT_EMBEDS,
      g_param_spec_string ("prompt-embeds", "Prompt embeddings",
          "File (.npy or .safetensors) of encoder hidden states [1, L, D] "
          "for a diffusers pipeline model (default: none)", NULL,
          LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:strength:
   *
   * img2img strength: how far along the noise schedule each frame starts.
   */
  g_object_class_install_property (gobject_class, PROP_STRENGTH,
      g_param_spec_double ("strength", "Strength",
          "img2img strength of a pipeline model, 0 < strength <= 1 "
          "(fraction of the schedule; default 0.5)", 1e-6, 1.0,
          DEFAULT_STRENGTH, LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:seed:
   *
   * Seed of the noise; the same noise serves every frame.
   */
  g_object_class_install_property (gobject_class, PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed",
          "Noise seed of a pipeline model (default 0)", 0, G_MAXUINT64,
          DEFAULT_SEED, LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:t-index-list:
   *
   * StreamDiffusion-style LCM timestep indices (t = 999 − 20·idx).
   */
  g_object_class_install_property (gobject_class, PROP_T_INDEX_LIST,
      g_param_spec_string ("t-index-list", "Timestep index list",
          "Comma-separated LCM timestep indices, t = 999 - 20*idx; as many "
          "as steps (default: none, the scheduler's own timesteps)", NULL,
          LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:temporal:
   *
   * Temporal consistency of a pipeline model: off (each frame on its own)
   * or feature-bank (StreamV2V's: every self-attention also attends to a
   * bank of past frames' keys and values, and the deeper ones take in part
   * the most similar banked outputs).  Live: a change starts a new epoch,
   * and every bank starts empty.
   */
  g_object_class_install_property (gobject_class, PROP_TEMPORAL,
      g_param_spec_enum ("temporal", "Temporal",
          "Temporal consistency of a pipeline model: off or feature-bank "
          "(default off)", GST_TYPE_PP_DIFFUSE_TEMPORAL,
          GST_PP_DIFFUSE_TEMPORAL_OFF, LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:bank-frames:
   *
   * The feature bank's size, in frames' worth of rows per self-attention
   * layer; older rows are merged into it (temporal=feature-bank).  Live.
   */
  g_object_class_install_property (gobject_class, PROP_BANK_FRAMES,
      g_param_spec_uint ("bank-frames", "Bank frames",
          "Feature bank size in frames (default 1)", 1,
          PP_SETTINGS_MAX_BANK_FRAMES, PP_SETTINGS_DEFAULT_BANK_FRAMES,
          LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:fusion-threshold:
   *
   * The cosine similarity from which a self-attention output takes in part
   * the most similar banked output (temporal=feature-bank).  Live.
   */
  g_object_class_install_property (gobject_class, PROP_FUSION_THRESHOLD,
      g_param_spec_double ("fusion-threshold", "Fusion threshold",
          "Cosine similarity from which outputs fuse with the bank's "
          "(default 0.98)", -1.0, 1.0, PP_SETTINGS_DEFAULT_FUSION_THRESHOLD,
          LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:warm-up:
   *
   * Before the first frame of a mesh, send a copy of it round the mesh and
   * wait for it to come back (in lockstep): every worker's first run of
   * its steps (allocations, caches, and on GPUs kernel selection) happens
   * before the stream starts.  The pass is flagged in its envelope and left
   * out of the output and of every statistic but "warm-up-passes".
   *
   * Unset, the backend decides: on a GPU (backend cuda) two passes run,
   * the first paying the set-up, the second measuring a steady frame (the
   * first frame of the stream then costs what a steady one does, and the
   * pace warning judges a steady frame); on the CPU backends none.  Set to
   * true: at least one pass on any backend; false: none.
   */
  g_object_class_install_property (gobject_class, PROP_WARM_UP,
      g_param_spec_boolean ("warm-up", "Warm-up pass",
          "Run warm-up passes round the mesh before the first frame "
          "(default: unset, two on a GPU backend, none on the CPU)", FALSE,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:leaky:
   *
   * What to do with a frame that arrives while max-in-flight frames are
   * in the mesh: block upstream until one leaves (off, for files and
   * other sources that can wait), or drop the new frame (on, for live
   * sources that cannot).  A dropped frame is counted as dropped-leaky
   * and announced with a QoS message; the next frame out is DISCONT.
   *
   * Until it is set, it follows upstream: on when the last LATENCY query
   * that went through the element found a live source upstream, off
   * otherwise (a pipeline queries latency before it goes to PLAYING, so a
   * live one is leaky from its first frame).  Setting it, to either value,
   * overrides that for the element's lifetime.  Reading it gives the
   * value in effect.
   */
  g_object_class_install_property (gobject_class, PROP_LEAKY,
      g_param_spec_boolean ("leaky", "Leaky",
          "Drop a new frame instead of blocking upstream while the mesh is "
          "full (default: unset, on when upstream is live, else off)", FALSE,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:qos:
   *
   * Handle downstream's QoS events (as GstBaseTransform's qos): on, a
   * frame that the last QoS event says would be late is dropped before
   * any work is spent on it (dropped-qos, a QOS message); off, every
   * frame goes through the mesh however late.  The events go upstream
   * either way.
   */
  g_object_class_install_property (gobject_class, PROP_QOS,
      g_param_spec_boolean ("qos", "QoS",
          "Drop frames that downstream's QoS events say would be late "
          "(default: on)", DEFAULT_QOS, G_PARAM_READWRITE |
          G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING));
  /**
   * GstPpDiffuse:stats-interval-ms:
   *
   * Every this many milliseconds while the mesh runs (PAUSED and PLAYING),
   * the element posts an element message whose structure, named
   * "ppdiffuse-stats", is what the stats property gives then: counters
   * since start and the figures of the interval just closed (frame rate,
   * latency percentiles, each worker's busy fraction).  0 posts none.
   * Posted from a thread of its own, whether frames flow or not.
   */
  g_object_class_install_property (gobject_class, PROP_STATS_INTERVAL_MS,
      g_param_spec_uint ("stats-interval-ms", "Statistics interval",
          "Period of the ppdiffuse-stats element message (milliseconds; "
          "0 = none; default 1000)", 0, MAX_STATS_INTERVAL_MS,
          DEFAULT_STATS_INTERVAL_MS, G_PARAM_READWRITE |
          G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING));
  /**
   * GstPpDiffuse:similarity-threshold:
   *
   * StreamDiffusion's stochastic similarity filter: each frame is compared
   * with the last frame sent to the mesh, by the cosine similarity of
   * 32×32 thumbnails (the mean R, G, B of each cell, mapped to [-1, 1]).
   * Above the threshold the frame is skipped with probability
   * max(0, 1 − (1 − similarity) / (1 − threshold)) (a draw seeded by
   * #GstPpDiffuse:seed), and the last output goes out again in its place,
   * with the skipped frame's timestamps and flags (counted in frames-out
   * and skipped-similar).  The first frame after a start, a flush, a caps
   * change or turning the filter on is always sent.  0 turns it off; a
   * change applies from the next frame, also while PLAYING.
   */
  g_object_class_install_property (gobject_class, PROP_SIMILARITY_THRESHOLD,
      g_param_spec_double ("similarity-threshold", "Similarity threshold",
          "Cosine similarity to the last frame sent above which a frame may "
          "be skipped and the last output repeated, 0..1 (default 0, off)",
          0.0, 1.0, DEFAULT_SIMILARITY_THRESHOLD, G_PARAM_READWRITE
          | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING));
  /**
   * GstPpDiffuse:keep-workers:
   *
   * Keep the worker mesh (and rank 0's model) up across stops: a stop
   * (PAUSED→READY, and so also →NULL) waits, up to timeout-ms, for every
   * chunk in flight to come back, discards it, and leaves the workers idle
   * (their heartbeats go on, so an idle mesh never times out); the next
   * start uses them again when ranks, steps, model and its start-only
   * parameters (prompt-embeds, strength, seed, t-index-list), backend,
   * dtype, cuda-graphs, timeout-ms, max-in-flight, worker, hosts,
   * hostfile and dump-dir are unchanged, with a new stream state (cache
   * epoch) and without a second warm-up pass.  The workers end when the
   * element is freed, when a start finds a setting changed (they are
   * spawned anew), and on any mesh error (a failed, idle-dead or
   * undrainable mesh is stopped as without this setting).  Off, every stop
   * ends the workers and every start spawns them.  While workers are kept,
   * mesh-chunks, mesh-wall-s and overlap-score in the stats stay those of
   * the last mesh that stopped.
   */
  g_object_class_install_property (gobject_class, PROP_KEEP_WORKERS,
      g_param_spec_boolean ("keep-workers", "Keep workers",
          "Keep the worker processes across stop and start while the "
          "settings they were spawned with are unchanged; they end when the "
          "element is freed (default: off, a stop ends them)", FALSE,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:stats:
   *
   * A "ppdiffuse-stats" structure: counters since start, percentiles of
   * the submit→return latency since start, the figures of the last
   * completed stats interval, and the figures of the last mesh stopped
   * (docs/element.md lists every field).
   */
  g_object_class_install_property (gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
          "frames-in, frames-out, fps, latency percentiles (ns) of the "
          "interval and since start, in-flight, worker-busy, kv-cache-builds, "
          "bank-bytes, batched-steps, worker-cpu-load, cpu-load, "
          "device, worker-devices, overlap-score, "
          "the drop counters, cache-epoch, and mesh-chunks, mesh-wall-s of "
          "the last run",
          GST_TYPE_STRUCTURE, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));

  gst_type_mark_as_plugin_api (GST_TYPE_PP_DIFFUSE_BACKEND, 0);
}

void
gst_pp_diffuse_props_init (GstPpDiffuse * self)
{
  self->ranks = DEFAULT_RANKS;
  self->steps = DEFAULT_STEPS;
  self->max_in_flight = DEFAULT_MAX_IN_FLIGHT;
  pp_settings_init (&self->settings);
  self->settings.model = g_strdup (DEFAULT_MODEL);
  self->backend = DEFAULT_BACKEND;
  self->cuda_device_id = DEFAULT_CUDA_DEVICE_ID;
  self->dtype = DEFAULT_DTYPE;
  self->cuda_graphs = DEFAULT_CUDA_GRAPHS;
  self->stream_batch = DEFAULT_STREAM_BATCH;
  self->frame_batch = DEFAULT_FRAME_BATCH;
  self->timeout_ms = DEFAULT_TIMEOUT_MS;
  self->similarity_threshold = DEFAULT_SIMILARITY_THRESHOLD;
  self->qos = DEFAULT_QOS;
  self->stats_interval_ms = DEFAULT_STATS_INTERVAL_MS;
}

/* ---- the live settings, for the stream engine ------------------------- */

void
gst_pp_diffuse_props_snapshot (PpSettings * live, gpointer data)
{
  GstPpDiffuse *self = data;

  GST_OBJECT_LOCK (self);
  pp_settings_copy (live, &self->settings);
  GST_OBJECT_UNLOCK (self);
}

void
gst_pp_diffuse_props_accepted (const PpSettings * live, gpointer data)
{
  GstPpDiffuse *self = data;

  GST_OBJECT_LOCK (self);
  pp_settings_copy (&self->accepted, live);
  GST_OBJECT_UNLOCK (self);
  GST_INFO_OBJECT (self, "new settings accepted; they apply from the next "
      "frame");
}

static const gchar *const live_property_names[] = {
  "model", "prompt", "prompt-embeds", "strength", "seed", "t-index-list",
};

/* Refused settings: the properties go back to what was last accepted,
 * unless they changed again meanwhile (that change is checked next). */
void
gst_pp_diffuse_props_refused (const PpSettings * live, gpointer data)
{
  GstPpDiffuse *self = data;
  gboolean restored = FALSE;

  GST_OBJECT_LOCK (self);
  if (pp_settings_equal (&self->settings, live)) {
    pp_settings_copy (&self->settings, &self->accepted);
    restored = TRUE;
  }
  GST_OBJECT_UNLOCK (self);
  if (restored)
    for (guint i = 0; i < G_N_ELEMENTS (live_property_names); i++)
      g_object_notify (G_OBJECT (self), live_property_names[i]);
}
