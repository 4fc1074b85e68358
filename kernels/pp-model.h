/* ppdiffuse — the model interface: image phases on rank 0, denoising steps
 * on the workers.
 *
 * A model is named by a URI.  Built-in models are "builtin:NAME" with
 * optional parameters "builtin:NAME?key=value&key=value".  Every built-in
 * model accepts step-ms (milliseconds slept per step to emulate GPU time).
 * Anything else is a diffusers pipeline directory, "DIR?key=value&…"
 * (see pp-diffusion.h for its parameters).
 *
 * Each process loads only what its role needs: rank 0 the image phases
 * (VAE), a worker the steps (UNet, prompt embeddings). */
#pragma once

#include "pp-backend.h"
#include "pp-image.h"
#include "pp-settings.h"

G_BEGIN_DECLS

typedef struct _PpModel PpModel;
typedef struct _PpModelClass PpModelClass;
typedef struct _PpModelGraph PpModelGraph;
typedef struct _PpModelImageGraph PpModelImageGraph;

typedef enum
{
  PP_MODEL_ROLE_IMAGE = 1 << 0,   /* encode / decode (rank 0) */
  PP_MODEL_ROLE_STEPS = 1 << 1,   /* denoising steps (workers) */
  PP_MODEL_ROLE_ALL = PP_MODEL_ROLE_IMAGE | PP_MODEL_ROLE_STEPS,
} PpModelRole;

struct _PpModelClass
{
  const gchar *name;
  /* Reads the class's own parameters from @params, removing each one it
   * consumes; what remains is reported as unknown. */
  gboolean (*init) (PpModel * model, GHashTable * params, GError ** error);
  /* Optional: the parameters a running model can change (its live
   * settings).  Takes every live parameter of the class from @params (one
   * left out goes back to its default) and from @settings (the typed
   * ones: strength, seed, prompt-embeds, t-index-list).  With @commit FALSE it only checks
   * them: it must not change the model, and may run on another thread than
   * the one computing with it.  With @commit TRUE it applies them, all or
   * none, and starts over whatever was derived from the old ones.  @inputs
   * (PpTensor*, host or device; may be NULL) are tensors that came with
   * the settings, such as a prompt's hidden states. */
  gboolean (*update) (PpModel * model, GHashTable * params,
      const PpSettings * settings, GPtrArray * inputs, gboolean commit,
      GError ** error);
  gboolean (*step) (PpModel * model, guint step, guint n_steps,
      PpTensor * sample, GError ** error);
  /* Optional: the sample stays on the model's backend across steps.
   * steps_begin uploads @sample, step then works on the device copy (its
   * @sample argument is that host tensor, untouched), steps_end downloads
   * into @sample. */
  gboolean (*steps_begin) (PpModel * model, const PpTensor * sample,
      GError ** error);
  gboolean (*steps_end) (PpModel * model, PpTensor * sample,
      GError ** error);
  /* Image phases (rank 0); NULL: the image itself is the sample.  encode
   * makes the first sample of a frame size, a new host tensor.  The next
   * frames of that size are encoded into one, and every frame decoded, in
   * three parts each, so that the middle one can be a graph (set with
   * encode).  encode_in stages @image into buffers of
   * the model's for frames of its size (host work, uploads);
   * encode_compute encodes them into the model's latents, issuing only
   * backend ops on buffers that stay put while the frame size does;
   * encode_out copies the latents into @sample.  decode_in stages
   * @sample for a frame of @image's size, decode_compute decodes it with
   * backend ops alone (the same rule), decode_out writes @image. */
  PpTensor *(*encode) (PpModel * model, const PpImage * image,
      GError ** error);
  gboolean (*encode_in) (PpModel * model, const PpImage * image,
      GError ** error);
  gboolean (*encode_compute) (PpModel * model, GError ** error);
  gboolean (*encode_out) (PpModel * model, PpTensor * sample,
      GError ** error);
  gboolean (*decode_in) (PpModel * model, const PpTensor * sample,
      const PpImage * image, GError ** error);
  gboolean (*decode_compute) (PpModel * model, GError ** error);
  gboolean (*decode_out) (PpModel * model, PpImage * image, GError ** error);
  void (*finalize) (PpModel * model);
  /* Identity of the loaded weights (e.g. their SHA-256), or NULL: the URI
   * alone identifies the model. */
  gchar *(*weights_digest) (PpModel * model);
  /* Optional: how many times the model has built its per-prompt caches
   * (the UNet's cross-attention K/V cache); NULL: it has none. */
  guint64 (*cache_builds) (PpModel * model);
  /* Optional: a new cache epoch starts; drop what is kept per epoch (the
   * UNet's cross-attention K/V). */
  void (*epoch_reset) (PpModel * model);
  /* Optional: whether the frames computed next are the stream's (TRUE, the
   * default) or passes outside it (a warm-up pass), which per-stream state
   * (a temporal feature bank) must not take. */
  void (*stream_frame) (PpModel * model, gboolean counts);
  /* Optional: host and device bytes of the per-stream state (a temporal
   * feature bank); NULL: it keeps none. */
  guint64 (*stream_bytes) (PpModel * model);
  /* Optional: adds its networks' activation pools to @sum
   * (pp_pool_count); NULL: it has none. */
  void (*pools) (PpModel * model, PpPoolBytes * sum);
  /* Optional: one step for each of @n samples, sample i at step
   * @steps[i], in one batched pass (a stream batch), in three parts so
   * that the middle one can be a graph.  batch_in stages the samples (host
   * tensors or tensors on the model's backend, each of the same shape)
   * into buffers of the model's; FALSE from it with no error set:
   * pp_model_steps_batch runs them one by one.  batch_steps runs the steps
   * on those buffers, issuing only backend ops on buffers that stay put
   * while the batch's size, steps and sample shape do (a graph holds it
   * where the class is graphable).  batch_out copies the samples back.
   * NULL batch_in: one by one. */
  gboolean (*batch_in) (PpModel * model, guint n, PpTensor * const *samples,
      const guint * steps, guint n_steps, GError ** error);
  gboolean (*batch_steps) (PpModel * model, guint n, const guint * steps,
      guint n_steps, GError ** error);
  void (*batch_out) (PpModel * model, guint n, PpTensor * const *samples);
  /* Between steps_begin and steps_end, step issues only backend ops on
   * device buffers that stay put from run to run (no upload, download or
   * synchronize): a device graph can hold a slice of steps. */
  gboolean graphable;
};

struct _PpModel
{
  const PpModelClass *klass;
  gchar *uri;
  gchar *path;                  /* the URI less its parameters */
  guint n_steps;                /* steps of the schedule */
  PpModelRole roles;
  gdouble step_ms;
  PpBackend *backend;           /* where the model computes */
  gboolean steps_open;          /* between steps_begin and steps_end */
  /* Capture slices, stream batches and the image phases as graphs:
   * parameter cuda-graphs, or without it on
   * the cuda backend (where they have run correct) and not elsewhere
   * (cpu-strict emulates them only when asked). */
  gboolean graphs;
  /* The class holds the slices' graphs back while a step's work changes
   * from frame to frame (a temporal feature bank that is not yet
   * steady) or is not the stream's (its warm-up passes); a slice run
   * meanwhile drops its graph. */
  gboolean graphs_held;
  gboolean stream_batch;        /* parameter stream-batch: a worker batches
                                 * the frames at its steps */
  guint frame_batch;            /* parameter frame-batch: the most frames a
                                 * worker's pass takes at one step (≥ 1) */
  PpModelGraph *graph;          /* the slice captured, NULL before */
  /* The stream batches captured (PpModelBatchGraph), all of one sample
   * shape, and their counts. */
  GPtrArray *batch_graphs;
  gint64 batch_shape[PP_TENSOR_MAX_DIMS];
  guint64 batch_captures, batch_launches;
  guint64 batch_clock;          /* batch graph uses, for eviction */
  /* A model that computes on the host (no steps_begin) given a device
   * sample: the host copy its steps work on, between steps_begin and
   * steps_end. */
  PpTensor *host_sample;
  /* Rank 0's image phases as graphs (encode_compute, decode_compute),
   * NULL before.  Encoding and decoding run on two threads; where graphs
   * may run (image_graphs: graphs at load, on a backend that has them)
   * their device work is issued one at a time (image_lock, taken by
   * image_work_begin in pp-model.c): a graph's buffers of the model's
   * pool are its own only in stream order. */
  PpModelImageGraph *encode_graph, *decode_graph;
  gboolean image_graphs;
  GMutex image_lock;
  /* Held for reading by each piece of the model's work (an encoding, a
   * decoding, a step), for writing by other work on its backend that must
   * not overlap it (pp_model_run_alone) and by taking the backend back
   * (pp_model_take_backend_back). */
  GRWLock work_lock;
  /* Its backend halted during its work (pp_backend_keep_failures): what it
   * keeps from one call to the next (the cross-attention cache, graphs,
   * buffers of a size) may hold garbage, so it refuses work from then on
   * and is loaded again (pp_model_spoiled). */
  gint spoiled;
  /* The failure that spoiled it, in words (set once, atomically): the
   * error of every piece of work refused after it says what it was. */
  gchar *spoiled_by;
  gpointer priv;
};

#define PP_MODEL_SAMPLE_NAME "sample"
/* The most frames a worker's batched pass takes at one step
 * (frame-batch). */
#define PP_MODEL_FRAME_BATCH_MAX 8
#define PP_MODEL_DEFAULT_URI PP_SETTINGS_DEFAULT_MODEL

/* What a pipeline-directory model is loaded with, besides its path: the
 * parameters only a new model can change. */
typedef struct
{
  const gchar *scheduler;       /* NULL: the directory's own */
  const gchar *dtype;           /* weights' storage: f32, f16, bf16; NULL
                                 * or "": the backend's default */
  /* Capture each worker's slice of steps: 1 yes, 0 no, -1 the backend
   * decides (PpModel.graphs). */
  gint cuda_graphs;
  const gchar *vae;             /* a VAE folder in the place of the
                                 * directory's vae/; NULL or "": its own */
  const gchar *lora;            /* LoRA files fused at load,
                                 * "PATH[:SCALE][,…]" (pp-lora.h); NULL or
                                 * "": none */
  gboolean stream_batch;        /* a worker runs its steps for several
                                 * frames in one batched pass */
  guint frame_batch;            /* and up to this many frames at each of
                                 * them; 0 or 1: one */
} PpModelLoad;

/* The most samples a batched pass of @model takes: frame-batch at each
 * step of its schedule. */
guint     pp_model_batch_max (const PpModel * model);

/* Whether @uri names a built-in model (builtin:NAME[?…]), not a pipeline
 * directory. */
gboolean  pp_model_uri_is_builtin (const gchar * uri);
/* @model with @load appended as URI parameters when it is a pipeline
 * directory; a built-in model takes only stream-batch and frame-batch.  The element and
 * ppdiffuse-tool both build their URIs here, so they load the same model;
 * the live settings travel apart (PpSettings). */
gchar    *pp_model_uri_for_load (const gchar * model, const PpModelLoad * load);
/* The weights' storage dtype ("f32", "f16", "bf16") of the model at @uri
 * on @backend: its dtype parameter, else the backend's default; "f32" for
 * the built-in models, which compute on the host. */
const gchar *pp_model_uri_weights_dtype (const gchar * uri,
                                         PpBackend * backend);
/* How the models run a 3×3 convolution of a nearest ×2 upsampling,
 * $PPDIFFUSE_UPSAMPLE_CONV (read when a model binds its weights,
 * docs/architecture.md): "phases" (unset or empty too: its four output
 * phases) or "upsample" (the upsampling and the convolution apart); any
 * other value as it is, which the models refuse at their load.  It
 * changes the bits, so the ranks of a mesh must agree (the handshake's
 * "upsample-conv"). */
#define PP_UPSAMPLE_CONV_ENV "PPDIFFUSE_UPSAMPLE_CONV"
const gchar *pp_model_upsample_conv (void);
/* The value of parameter @name of @uri, unescaped; NULL when it has none
 * (or the query cannot be read: loading the model says why). */
gchar       *pp_model_uri_param (const gchar * uri, const gchar * name);

/* @backend: where the neural models compute (built-in models compute on
 * the host whatever it is); NULL: pp_backend_get (NULL), the environment's
 * PPDIFFUSE_BACKEND or auto. */
PpModel  *pp_model_new    (const gchar * uri, guint n_steps,
                           PpModelRole roles, PpBackend * backend,
                           GError ** error);
void      pp_model_free   (PpModel * model);
/* Whether a failure of @model's backend was kept (pp_backend_keep_failures)
 * during its work: it then refuses work, saying so, and must be loaded
 * again. */
gboolean  pp_model_spoiled (PpModel * model);
/* Other work on @model's backend than the model's own (rank 0's prompt
 * encoding): TRUE when it succeeded. */
typedef gboolean (*PpModelAloneFunc) (gpointer data, GError ** error);
/* Runs @func with none of @model's work in flight.  Where the backend
 * keeps failures and one came during @func, the model's work, which did
 * not run meanwhile, kept nothing of it: the backend is taken back at once
 * (pp_model_take_backend_back) and the model goes on.  FALSE, with @func's
 * error or the failure, when @func failed or the backend failed during
 * it; *@recovered (when not NULL) is then what failed if the backend was
 * taken back, else NULL (free it). */
gboolean  pp_model_run_alone (PpModel * model, PpModelAloneFunc func,
                              gpointer data, gchar ** recovered,
                              GError ** error);
/* When other work than @model's halted its backend (a kept failure) and
 * the model is not spoiled: waits until none of the model's work is in
 * flight (work in flight when the backend failed spoils the model) and,
 * still not spoiled, takes the backend back (pp_backend_recover), giving
 * what failed in *@recovered (free it).  FALSE when the backend was not
 * taken back: it runs, or the model is spoiled (it is loaded again). */
gboolean  pp_model_take_backend_back (PpModel * model, gchar ** recovered);
/* SHA-256 (hex) of the model's URI and its loaded weights: ranks that
 * loaded the same model give the same digest. */
gchar    *pp_model_digest (PpModel * model);
/* Image → sample tensor (VAE encode for real models). */
PpTensor *pp_model_encode (PpModel * model, const PpImage * image,
                           GError ** error);
/* The same into @sample, a tensor pp_model_encode returned for an image of
 * the same size: once warm, a frame then allocates nothing.  With graphs
 * (cuda-graphs, as for the steps) and a class that splits its image
 * phases (encode_in …), the device part of encoding frames of a size runs
 * as is once, is captured the second time and launched from then on
 * (started over by pp_model_graphs_reset); decoding's likewise, per frame
 * size and sample shape (pp_model_decode).  The two may run on two
 * threads. */
gboolean  pp_model_encode_into (PpModel * model, const PpImage * image,
                                PpTensor * sample, GError ** error);
/* Sample tensor → image (VAE decode for real models). */
gboolean  pp_model_decode (PpModel * model, const PpTensor * sample,
                           PpImage * image, GError ** error);
/* Runs denoising step @step of @n_steps in place, then sleeps step-ms.
 * Between pp_model_steps_begin and pp_model_steps_end on the same @sample,
 * the sample stays on the model's backend from step to step; outside them
 * a step uploads and downloads it itself.
 *
 * @sample may be a host tensor or a device tensor of the model's backend
 * (a chunk that arrived over NCCL): steps_begin then copies it device to
 * device into the model's buffer and steps_end copies the result back,
 * without a host round trip.  (Models that compute on the host, the
 * built-in ones, stage a device sample through a host copy.)  The same
 * holds for pp_model_encode_into's and pp_model_decode's @sample. */
gboolean  pp_model_step   (PpModel * model, guint step, guint n_steps,
                           PpTensor * sample, GError ** error);

/* Called after step @step of a slice has run (or, with a graph, after the
 * graph that ran it was launched). */
typedef void (*PpStepDone) (guint step, gpointer data);

/* Steps [@first, @end) of @n_steps on @sample, between steps_begin and
 * steps_end, @done (may be NULL) after each.  With the model parameter
 * cuda-graphs=1 (docs/operator/warm-up-and-cuda-graphs.md), on a backend
 * with graphs and a model whose steps a graph can hold, the first run of a
 * slice at a sample shape runs as is (warm-up: pools, scratch, library
 * plans), the second is captured into a graph and launched, and later ones
 * launch it; another slice or shape, or pp_model_graphs_reset, starts
 * over.  A capture that fails is logged, and the model runs without graphs
 * from then on. */
gboolean  pp_model_steps_slice (PpModel * model, guint first, guint end,
                                guint n_steps, PpTensor * sample,
                                PpStepDone done, gpointer data,
                                GError ** error);
/* Stream batch (StreamDiffusion's denoising batch): one step for each of
 * @n samples, sample i at step @steps[i] of @n_steps, in place, in one
 * batched pass where the model has one (the pipelines' UNet), else one
 * after the other; step-ms is slept once, as a GPU takes about one step's
 * time for a batch of a few latents.  Each sample comes out with the
 * bytes pp_model_step gives it alone (on the CPU backends; on a GPU
 * within the dtype's bounds).  The samples are host tensors or tensors on
 * the model's backend; no slice is open (steps_begin).  With graphs, the
 * pass's steps (not the samples' transfers in and out) go the way of
 * pp_model_steps_slice's: a batch of a size, steps and shape runs as is
 * once, is captured the second time and launched from then on; another
 * shape, or pp_model_graphs_reset, starts over. */
gboolean  pp_model_steps_batch (PpModel * model, guint n,
                                PpTensor * const *samples,
                                const guint * steps, guint n_steps,
                                GError ** error);
/* On a backend that plans per shape (pp_backend_plans_shapes: a GPU),
 * runs once a batch of every size from 2 to @max (at most
 * pp_model_batch_max) of samples shaped like @sample, each sample at step
 * @step of @n_steps, and drops what they compute: each size's plans are
 * made then, before the stream, not when a batch of that size first
 * comes in the middle of it (and with graphs, each size's batch at @step
 * is captured at its next run).  *@sizes: how many sizes ran; none where
 * the backend does not plan per shape or the model runs no batched pass
 * (a temporal bank). */
gboolean  pp_model_warm_batches (PpModel * model, const PpTensor * sample,
                                 guint max, guint step, guint n_steps,
                                 guint * sizes, GError ** error);
/* How many times the model has built its per-prompt caches
 * (docs/operator/cache-lifecycle.md); 0 for a model without any. */
guint64   pp_model_cache_builds (PpModel * model);
/* Drops the captured graph: a new cache epoch (settings, RESET) changes
 * what the steps compute. */
void      pp_model_graphs_reset (PpModel * model);
/* A new cache epoch (a RESET chunk, or one of a higher epoch): the graphs
 * and every per-epoch cache are dropped, to be made again by the next
 * chunk. */
void      pp_model_new_epoch (PpModel * model);
/* The frames computed next are the stream's (@counts) or not (a warm-up
 * pass): per-stream state advances only on the stream's. */
void      pp_model_stream_frame (PpModel * model, gboolean counts);
/* Bytes of the model's per-stream state (0 when it keeps none). */
guint64   pp_model_stream_bytes (PpModel * model);
/* What the activation pools of the model's networks hold, and the most
 * each had in use at once, summed (0 and 0 for a model without pools). */
PpPoolBytes pp_model_pools      (PpModel * model);
/* That in words for a log ("activation pools: …"), or NULL for a model
 * without pools.  Free it. */
gchar    *pp_model_describe_pools (PpModel * model);
/* Graphs captured and launched so far (0 and 0 without graphs): of step
 * slices, and of stream batches. */
void      pp_model_graph_counts (PpModel * model, guint64 * captures,
                                 guint64 * launches);
void      pp_model_batch_graph_counts (PpModel * model, guint64 * captures,
                                       guint64 * launches);
/* The same of the image phases (rank 0): encoding, then decoding. */
void      pp_model_image_graph_counts (PpModel * model,
                                       guint64 * encode_captures,
                                       guint64 * encode_launches,
                                       guint64 * decode_captures,
                                       guint64 * decode_launches);
gboolean  pp_model_steps_begin (PpModel * model, PpTensor * sample,
                                GError ** error);
gboolean  pp_model_steps_end   (PpModel * model, PpTensor * sample,
                                GError ** error);

/* Live settings.  A running model takes @settings when settings->model
 * names the same model with the same start-only parameters (dtype,
 * cuda-graphs, scheduler): its live parameters (step-ms and each class's
 * own, such as kappa, lambda, mark) become those of settings->model, a
 * parameter left out going back to its default, and a pipeline takes the
 * typed ones (strength, seed, t-index-list, prompt-embeds).
 * pp_model_check_update only checks (it may run on another thread than the
 * one computing with @model); pp_model_update applies, all or nothing.
 * @inputs: tensors that came with the settings (the hidden states of a
 * prompt whose prompt-embeds is chunk:DIGEST), or NULL.  A model is loaded
 * with the defaults; model->uri stays the URI it started with.
 * pp_model_update drops a captured graph (pp_model_graphs_reset): the
 * buffers it was captured with may be gone. */
gboolean  pp_model_check_update (PpModel * model, const PpSettings * settings,
                                 GPtrArray * inputs, GError ** error);
gboolean  pp_model_update       (PpModel * model, const PpSettings * settings,
                                 GPtrArray * inputs, GError ** error);

/* Built-in model classes. */
extern const PpModelClass pp_model_stamp_class;
extern const PpModelClass pp_model_anisotropic_class;
extern const PpModelClass pp_model_diffusion_class;

/* Parameter helpers for model classes: take and parse one parameter. */
gboolean pp_model_param_double (GHashTable * params, const gchar * key,
                                gdouble min, gdouble max, gdouble * value,
                                GError ** error);
/* A whole number in [@min, @max]; absent, *@value is kept. */
gboolean pp_model_param_uint   (GHashTable * params, const gchar * key,
                                guint min, guint max, guint * value,
                                GError ** error);
gboolean pp_model_param_string (GHashTable * params, const gchar * key,
                                gchar ** value);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpModel, pp_model_free)

G_END_DECLS
