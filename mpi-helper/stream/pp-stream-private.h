/* ppdiffuse — the stream engine's state, shared by its files:
 * pp-stream.c (start, stop, reuse, frames, collector), pp-stream-settings.c
 * (the settings thread and the settings' way into the chunks) and
 * pp-stream-prompt.c (text prompts). */
#pragma once

#include "pp-stream.h"

#include "pp-chunk-pool.h"
#include "pp-mesh.h"
#include "pp-model.h"

G_BEGIN_DECLS

/* The text encoder of one pipeline and the states of the last prompt it
 * encoded: an unchanged prompt costs nothing.  Used by one thread at a
 * time (the start, then the settings thread). */
typedef struct _PpStreamPrompt PpStreamPrompt;

PpStreamPrompt *pp_stream_prompt_new    (void);
void            pp_stream_prompt_free   (PpStreamPrompt * p);
/* The hidden states of @prompt (a blend: pp-prompt.h) for the pipeline
 * directory @dir, encoded on @backend: a host F32 [1, L, D] tensor the
 * caller owns, and in *@ref the prompt-embeds value that names them
 * (pp_prompt_ref).  *@truncated: a prompt was cut to the encoder's 77
 * tokens.  With @beside, a running stream's model on @backend: the
 * encoding runs with none of the model's work in flight, and a failure
 * of the backend that the prompt's work alone met is taken back at once
 * (pp_model_run_alone), so that the stream goes on. */
PpTensor       *pp_stream_prompt_encode (PpStreamPrompt * p,
                                         const gchar * dir,
                                         const gchar * config,
                                         const gchar * lora,
                                         PpBackend * backend,
                                         PpModel * beside,
                                         const gchar * prompt, gchar ** ref,
                                         gboolean * truncated,
                                         GError ** error);
/* A host copy of @t. */
PpTensor       *pp_stream_tensor_copy   (const PpTensor * t);

struct _PpStream
{
  PpStreamCallbacks cb;
  gpointer data;

  /* Set up by a start, kept across a stop that keeps the workers. */
  PpMesh *mesh;
  PpModel *model;               /* rank 0's image phases */
  gchar *mesh_key;              /* what the mesh was started with */
  gboolean kept;                /* the last halt kept the mesh */
  guint timeout_ms;
  gint warm_up;                 /* PpStreamConfig.warm_up */
  gchar *vae;                   /* the model's vae= (a start setting) */
  gchar *lora;                  /* the model's lora= (a start setting) */
  gchar *dtype;                 /* what the model loads with, for */
  gint cuda_graphs;             /* settings checked while it runs */
  gboolean stream_batch;
  guint frame_batch;
  PpStreamStats last_stats;     /* of the last mesh that stopped */
  /* Rank 0's compute device and the workers', of the mesh running or the
   * last one: interned strings (under lock), so that the stats read them
   * without allocating. */
  const gchar *device;
  const gchar *worker_devices[PP_STREAM_MAX_WORKERS];
  guint n_worker_devices;

  /* Chain thread: the chunks frames are encoded into, and the sample the
   * model made of the last frame size it met, so that a pooled chunk's
   * sample of that shape is encoded into. */
  PpChunkPool *chunks;
  gint sample_width, sample_height;
  PpTensorSpec sample_spec;
  gboolean warmed_up;           /* this mesh had its passes */
  gint measured;                /* atomic: measured was called */
  gint cache_epoch;             /* atomic: changed by the streaming thread */

  /* lock guards what follows, and cond wakes the collector and a drain. */
  GMutex lock;
  GCond cond;
  GThread *collector;
  gboolean collector_stop;
  guint outstanding;            /* submitted, not yet collected */
  gboolean failed;              /* the mesh failed mid-stream */

  /* Live settings: a change is checked on the settings thread; accepted
   * settings wait in next (under lock) for the chain, which applies them
   * to rank 0's model before the next frame, starts a new cache epoch and
   * sends them, serialised, with that epoch's chunks until one has gone
   * out (unsent, chain thread only). */
  GThread *settings_thread;
  GCond settings_cond;
  gboolean settings_dirty;
  gboolean settings_stop;
  PpSettings *next;             /* under lock */
  PpTensor *next_states;        /* under lock: its prompt's, or NULL */
  PpSettings *running;          /* under lock: rank 0's model runs them */
  GBytes *unsent;               /* chain thread */
  PpTensor *unsent_states;      /* chain thread */
  PpStreamPrompt *prompt;       /* the start, then the settings thread */
};

/* pp-stream-settings.c */
/* The settings every rank computes with: @live with the model as loaded
 * (the stream's dtype and cuda-graphs) and a text prompt's states named
 * by @prompt_ref. */
void      pp_stream_resolve       (PpStream * stream, const PpSettings * live,
                                   const gchar * prompt_ref,
                                   PpSettings * out);
/* FALSE with @error when @live gives a prompt, prompt-embeds or the
 * temporal feature bank to a model that takes none (a built-in model). */
gboolean  pp_stream_check_prompt_model (const PpSettings * live,
                                        GError ** error);
/* The states of @live's prompt, when it has one (NULL and NULL without);
 * @beside: the running stream's model, or NULL at a start
 * (pp_stream_prompt_encode). */
gboolean  pp_stream_encode_prompt (PpStream * stream, const PpSettings * live,
                                   PpBackend * backend, PpModel * beside,
                                   PpTensor ** states, gchar ** ref,
                                   GError ** error);
/* A GPtrArray holding @states, or NULL: the inputs of a model update. */
GPtrArray *pp_stream_states_inputs (PpTensor * states);
/* At a start: what the first frame brings, for a new mesh (@reused FALSE:
 * always) or a kept one (when they changed); takes @states. */
void      pp_stream_settings_begin (PpStream * stream,
                                    const PpSettings * resolved,
                                    PpTensor * states, gboolean reused);
void      pp_stream_settings_end   (PpStream * stream);
/* Chain: adds the settings not yet sent to @chunk. */
gboolean  pp_stream_attach_settings (PpStream * stream, PpChunk * chunk,
                                     GError ** error);
/* Chain: @chunk went out; every worker has seen the settings. */
void      pp_stream_settings_sent  (PpStream * stream);
void      pp_stream_settings_free  (PpSettings * settings);
/* Adds @host to @chunk, on the data plane's device when chunks travel
 * from there; takes @host. */
gboolean  pp_stream_add_payload    (PpStream * stream, PpChunk * chunk,
                                    PpTensor * host, GError ** error);

G_END_DECLS
