/* ppdiffuse — live settings on rank 0: checked on the engine's settings
 * thread while the stream goes on, applied by the chain at a chunk
 * boundary with a new cache epoch, and sent to every worker with the
 * first chunk of that epoch. */
#include "pp-stream-private.h"

#include "pp-log.h"
#include "pp-sigpipe.h"
#include "pp-protocol.h"

#include <string.h>

void
pp_stream_settings_free (PpSettings * settings)
{
  if (settings == NULL)
    return;
  pp_settings_clear (settings);
  g_free (settings);
}

static PpSettings *
settings_dup (const PpSettings * settings)
{
  PpSettings *copy = g_new0 (PpSettings, 1);

  pp_settings_copy (copy, settings);
  return copy;
}

void
pp_stream_resolve (PpStream * stream, const PpSettings * live,
    const gchar * prompt_ref, PpSettings * out)
{
  const PpModelLoad load = { NULL, stream->dtype, stream->cuda_graphs,
    stream->vae, stream->lora, stream->stream_batch, stream->frame_batch
  };

  pp_settings_copy (out, live);
  g_free (out->model);
  out->model = pp_model_uri_for_load (live->model, &load);
  if (prompt_ref != NULL) {
    g_free (out->prompt_embeds);
    out->prompt_embeds = g_strdup (prompt_ref);
  }
}

gboolean
pp_stream_check_prompt_model (const PpSettings * live, GError ** error)
{
  g_autofree gchar *name = NULL;

  if (!pp_model_uri_is_builtin (live->model))
    return TRUE;
  /* A prompt would be taken for a directory without a tokenizer, and
   * embeddings would be ignored: both said, neither dropped. */
  name = g_strndup (live->model, strcspn (live->model, "?"));
  if (pp_settings_has_prompt (live))
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "prompt '%s': built-in "
        "models take no prompt (%s has none); prompt and prompt-embeds are "
        "for a diffusers pipeline directory", live->prompt, name);
  else if (live->prompt_embeds != NULL && *live->prompt_embeds != '\0')
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "prompt-embeds '%s': "
        "built-in models take no prompt (%s has none); prompt and "
        "prompt-embeds are for a diffusers pipeline directory",
        live->prompt_embeds, name);
  else if (pp_settings_has_feature_bank (live))
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "temporal=%s: built-in "
        "models have no self-attention to bank (%s); the feature bank is "
        "for a diffusers pipeline directory", live->temporal, name);
  else
    return TRUE;
  return FALSE;
}

gboolean
pp_stream_encode_prompt (PpStream * stream, const PpSettings * live,
    PpBackend * backend, PpModel * beside, PpTensor ** states, gchar ** ref,
    GError ** error)
{
  g_autofree gchar *dir = NULL, *config = NULL;
  gboolean truncated = FALSE;
  const gchar *query;

  *states = NULL;
  *ref = NULL;
  if (!pp_stream_check_prompt_model (live, error))
    return FALSE;
  if (!pp_settings_has_prompt (live))
    return TRUE;
  query = strchr (live->model, '?');
  dir = query != NULL ? g_strndup (live->model, query - live->model)
      : g_strdup (live->model);
  config = pp_model_uri_param (live->model, "config");
  *states = pp_stream_prompt_encode (stream->prompt, dir, config,
      stream->lora, backend, beside, live->prompt, ref, &truncated, error);
  if (*states == NULL) {
    g_prefix_error (error, "prompt '%s': ", live->prompt);
    return FALSE;
  }
  if (truncated && stream->cb.warning != NULL) {
    g_autofree gchar *details = g_strdup_printf ("prompt: %s", live->prompt);

    stream->cb.warning ("The prompt is longer than the text encoder's 77 "
        "tokens: the rest is left out", details, stream->data);
  }
  return TRUE;
}

GPtrArray *
pp_stream_states_inputs (PpTensor * states)
{
  GPtrArray *inputs;

  if (states == NULL)
    return NULL;
  inputs = g_ptr_array_new ();
  g_ptr_array_add (inputs, states);
  return inputs;
}

static void
warn_ignored (PpStream * stream, const GError * error, const gchar * what,
    const PpSettings * settings)
{
  g_autofree gchar *text = pp_settings_describe (settings);
  g_autofree gchar *message = g_strdup_printf ("Ignoring new settings, the "
      "stream goes on with the previous ones: %s", error->message);
  g_autofree gchar *details = g_strdup_printf ("%s: %s", what, text);

  if (stream->cb.warning != NULL)
    stream->cb.warning (message, details, stream->data);
}

/* Checks the live settings as they are now against the running model:
 * accepted, they wait for the chain; refused, the caller hears so (it
 * puts back what was last accepted) and gets a warning.  The stream goes
 * on either way.  Settings thread. */
static void
check_settings (PpStream * stream)
{
  PpSettings snapshot = { 0 }, resolved = { 0 };
  g_autofree gchar *ref = NULL;
  g_autoptr (GPtrArray) inputs = NULL;
  PpTensor *states = NULL;
  GError *error = NULL;
  gboolean same, ok;

  pp_settings_init (&snapshot);
  stream->cb.snapshot (&snapshot, stream->data);
  /* A prompt is encoded here, off the streaming thread; its states are
   * named in the settings by their digest. */
  ok = pp_stream_encode_prompt (stream, &snapshot, stream->model->backend,
      stream->model, &states, &ref, &error);
  if (ok) {
    const PpSettings *current;

    pp_stream_resolve (stream, &snapshot, ref, &resolved);
    g_mutex_lock (&stream->lock);
    current = stream->next != NULL ? stream->next : stream->running;
    same = current != NULL && pp_settings_equal (&resolved, current);
    g_mutex_unlock (&stream->lock);
    if (same) {
      pp_tensor_free (states);
      pp_settings_clear (&snapshot);
      pp_settings_clear (&resolved);
      return;
    }
    inputs = pp_stream_states_inputs (states);
    ok = pp_model_check_update (stream->model, &resolved, inputs, &error);
  }
  if (ok) {
    /* In place for the next frame before the caller hears of them (its
     * word is that they apply from the next frame). */
    g_mutex_lock (&stream->lock);
    pp_stream_settings_free (stream->next);
    stream->next = settings_dup (&resolved);
    g_clear_pointer (&stream->next_states, pp_tensor_free);
    stream->next_states = states;
    g_mutex_unlock (&stream->lock);
    stream->cb.accepted (&snapshot, stream->data);
    PP_INFO ("new settings accepted; they apply from the next frame");
  } else {
    pp_tensor_free (states);
    stream->cb.refused (&snapshot, stream->data);
    warn_ignored (stream, error, "refused settings", resolved.model != NULL
        ? &resolved : &snapshot);
    g_error_free (error);
  }
  pp_settings_clear (&snapshot);
  pp_settings_clear (&resolved);
}

static gpointer
settings_loop (gpointer data)
{
  PpStream *stream = data;

  g_mutex_lock (&stream->lock);
  for (;;) {
    while (!stream->settings_stop && !stream->settings_dirty)
      g_cond_wait (&stream->settings_cond, &stream->lock);
    if (stream->settings_stop)
      break;
    stream->settings_dirty = FALSE;
    g_mutex_unlock (&stream->lock);
    check_settings (stream);
    g_mutex_lock (&stream->lock);
  }
  g_mutex_unlock (&stream->lock);
  return NULL;
}

void
pp_stream_settings_changed (PpStream * stream)
{
  g_mutex_lock (&stream->lock);
  if (stream->settings_thread != NULL) {
    stream->settings_dirty = TRUE;
    g_cond_signal (&stream->settings_cond);
  }
  g_mutex_unlock (&stream->lock);
}

void
pp_stream_settings_begin (PpStream * stream, const PpSettings * resolved,
    PpTensor * states, gboolean reused)
{
  g_clear_pointer (&stream->unsent, g_bytes_unref);
  g_clear_pointer (&stream->unsent_states, pp_tensor_free);
  g_mutex_lock (&stream->lock);
  if (!reused) {
    pp_stream_settings_free (stream->running);
    stream->running = settings_dup (resolved);
    /* The workers loaded the model with the defaults: the first chunk
     * brings the settings, and the prompt's states they name. */
    stream->unsent = pp_settings_serialize (resolved);
    stream->unsent_states = g_steal_pointer (&states);
  } else if (stream->running == NULL
      || !pp_settings_equal (stream->running, resolved)) {
    /* Settings changed while stopped: the first frame brings them. */
    pp_stream_settings_free (stream->next);
    stream->next = settings_dup (resolved);
    g_clear_pointer (&stream->next_states, pp_tensor_free);
    stream->next_states = g_steal_pointer (&states);
  }
  pp_tensor_free (states);
  stream->settings_stop = stream->settings_dirty = FALSE;
  stream->settings_thread = pp_thread_new ("ppdiffuse-settings",
      settings_loop, stream);
  g_mutex_unlock (&stream->lock);
}

/* Stops the settings thread; a change it had accepted but the chain had
 * not applied is in the caller's properties, for the next start. */
void
pp_stream_settings_end (PpStream * stream)
{
  GThread *thread;

  g_mutex_lock (&stream->lock);
  stream->settings_stop = TRUE;
  g_cond_signal (&stream->settings_cond);
  thread = g_steal_pointer (&stream->settings_thread);
  g_mutex_unlock (&stream->lock);
  if (thread != NULL)
    g_thread_join (thread);
  g_mutex_lock (&stream->lock);
  g_clear_pointer (&stream->next, pp_stream_settings_free);
  g_clear_pointer (&stream->next_states, pp_tensor_free);
  /* Applied on rank 0 but not yet sent: a kept mesh's workers must get
   * the settings at the next start, whatever they are then. */
  if (stream->unsent != NULL)
    g_clear_pointer (&stream->running, pp_stream_settings_free);
  g_mutex_unlock (&stream->lock);
  g_clear_pointer (&stream->unsent, g_bytes_unref);
  g_clear_pointer (&stream->unsent_states, pp_tensor_free);
}

gboolean
pp_stream_take_settings (PpStream * stream)
{
  g_autofree gchar *text = NULL;
  g_autoptr (GPtrArray) inputs = NULL;
  PpSettings *next;
  PpTensor *states;
  GError *error = NULL;
  guint32 epoch;

  g_mutex_lock (&stream->lock);
  next = g_steal_pointer (&stream->next);
  states = g_steal_pointer (&stream->next_states);
  g_mutex_unlock (&stream->lock);
  if (next == NULL)
    return FALSE;
  inputs = pp_stream_states_inputs (states);
  if (!pp_model_update (stream->model, next, inputs, &error)) {
    warn_ignored (stream, error, "settings", next);
    g_error_free (error);
    pp_tensor_free (states);
    pp_stream_settings_free (next);
    return FALSE;
  }
  epoch = (guint32) g_atomic_int_add (&stream->cache_epoch, 1) + 1;
  text = pp_settings_describe (next);
  PP_INFO ("cache epoch %u: settings %s", epoch, text);
  g_clear_pointer (&stream->unsent, g_bytes_unref);
  stream->unsent = pp_settings_serialize (next);
  g_mutex_lock (&stream->lock);
  pp_stream_settings_free (stream->running);
  stream->running = next;
  g_mutex_unlock (&stream->lock);
  g_clear_pointer (&stream->unsent_states, pp_tensor_free);
  stream->unsent_states = states;
  return TRUE;
}

gboolean
pp_stream_add_payload (PpStream * stream, PpChunk * chunk, PpTensor * host,
    GError ** error)
{
  PpBackend *device = pp_mesh_data_plane_backend (stream->mesh);
  PpTensor *dev;

  if (device == NULL) {
    pp_chunk_add_tensor (chunk, host);
    return TRUE;
  }
  dev = pp_tensor_new_on (device, host->name, host->dtype, host->ndim,
      host->shape, error);
  if (dev == NULL || !pp_tensor_upload (dev, host, error)) {
    pp_tensor_free (dev);
    pp_tensor_free (host);
    return FALSE;
  }
  pp_tensor_free (host);
  pp_chunk_add_tensor (chunk, dev);
  return TRUE;
}

gboolean
pp_stream_attach_settings (PpStream * stream, PpChunk * chunk,
    GError ** error)
{
  gsize size;
  const guint8 *bytes;
  gint64 n;
  PpTensor *host;

  if (stream->unsent == NULL)
    return TRUE;
  bytes = g_bytes_get_data (stream->unsent, &size);
  n = (gint64) size;
  host = pp_tensor_new (PP_SETTINGS_TENSOR, PP_DTYPE_U8, 1, &n, error);
  if (host == NULL)
    return FALSE;
  memcpy (host->data, bytes, size);
  if (!pp_stream_add_payload (stream, chunk, host, error))
    return FALSE;
  /* A prompt's states go with its settings. */
  return stream->unsent_states == NULL || pp_stream_add_payload (stream,
      chunk, pp_stream_tensor_copy (stream->unsent_states), error);
}

void
pp_stream_settings_sent (PpStream * stream)
{
  g_clear_pointer (&stream->unsent, g_bytes_unref);
  g_clear_pointer (&stream->unsent_states, pp_tensor_free);
}
