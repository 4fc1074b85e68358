/* ppdiffuse — model URIs, the model registry and the image phases. */
#include "pp-model.h"
#include "pp-error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PP_BUILTIN_SCHEME "builtin:"
#define PP_STEP_MS_MAX 60000.0

static const PpModelClass *const builtin_classes[] = {
  &pp_model_stamp_class,
  &pp_model_anisotropic_class,
};

static GHashTable *
parse_params (const gchar * query, GError ** error)
{
  GHashTable *params = g_hash_table_new_full (g_str_hash, g_str_equal,
      g_free, g_free);
  g_auto (GStrv) pairs = NULL;

  if (query == NULL || *query == '\0')
    return params;
  pairs = g_strsplit (query, "&", -1);
  for (guint i = 0; pairs[i] != NULL; i++) {
    const gchar *eq = strchr (pairs[i], '=');
    if (eq == NULL || eq == pairs[i] || eq[1] == '\0') {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "model parameter '%s' is not of the form key=value", pairs[i]);
      g_hash_table_unref (params);
      return NULL;
    }
    /* Values are URI-escaped (a path may hold '&' or '='). */
    gchar *value = g_uri_unescape_string (eq + 1, NULL);

    if (value == NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "model parameter '%s' has a broken %%-escape", pairs[i]);
      g_hash_table_unref (params);
      return NULL;
    }
    g_hash_table_replace (params, g_strndup (pairs[i], eq - pairs[i]), value);
  }
  return params;
}

static gboolean
param_boolean (GHashTable * params, const gchar * name, gboolean * value,
    GError ** error)
{
  g_autofree gchar *text = NULL;

  pp_model_param_string (params, name, &text);
  if (text == NULL)
    return TRUE;
  if (g_str_equal (text, "1") || g_str_equal (text, "true"))
    *value = TRUE;
  else if (g_str_equal (text, "0") || g_str_equal (text, "false"))
    *value = FALSE;
  else {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s=%s: expected 1 or 0 (true or false)", name, text);
    return FALSE;
  }
  return TRUE;
}

gboolean
pp_model_param_double (GHashTable * params, const gchar * key, gdouble min,
    gdouble max, gdouble * value, GError ** error)
{
  const gchar *text = g_hash_table_lookup (params, key);
  gchar *end = NULL;
  gdouble v;

  if (text == NULL)
    return TRUE;                /* keep the default */
  v = g_ascii_strtod (text, &end);
  if (end == text || *end != '\0' || !isfinite (v) || v < min || v > max) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "model parameter %s=%s: expected a number in [%g, %g]", key, text,
        min, max);
    return FALSE;
  }
  *value = v;
  g_hash_table_remove (params, key);
  return TRUE;
}

gboolean
pp_model_param_uint (GHashTable * params, const gchar * key, guint min,
    guint max, guint * value, GError ** error)
{
  gdouble v = *value;

  if (!pp_model_param_double (params, key, min, max, &v, error))
    return FALSE;
  if (v != (guint) v) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL, "model parameter %s=%g: "
        "expected a whole number in [%u, %u]", key, v, min, max);
    return FALSE;
  }
  *value = (guint) v;
  return TRUE;
}

gboolean
pp_model_param_string (GHashTable * params, const gchar * key,
    gchar ** value)
{
  gpointer stolen_key, stolen_value;

  if (!g_hash_table_steal_extended (params, key, &stolen_key, &stolen_value))
    return FALSE;
  g_free (stolen_key);
  g_free (*value);
  *value = stolen_value;
  return TRUE;
}

static const PpModelClass *
find_builtin (const gchar * name)
{
  for (guint i = 0; i < G_N_ELEMENTS (builtin_classes); i++)
    if (g_str_equal (builtin_classes[i]->name, name))
      return builtin_classes[i];
  return NULL;
}

PpModel *
pp_model_new (const gchar * uri, guint n_steps, PpModelRole roles,
    PpBackend * backend, GError ** error)
{
  g_autoptr (PpModel) model = NULL;
  g_autoptr (GHashTable) params = NULL;
  g_autofree gchar *path = NULL;
  const gchar *query;
  const PpModelClass *klass;

  if (uri == NULL || *uri == '\0') {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "no model given: use builtin:stamp, builtin:anisotropic or a "
        "diffusers pipeline directory");
    return NULL;
  }
  path = g_strdup (uri);
  query = strchr (path, '?');
  if (query != NULL)
    *(gchar *) query++ = '\0';
  if (g_str_has_prefix (path, PP_BUILTIN_SCHEME)) {
    klass = find_builtin (path + strlen (PP_BUILTIN_SCHEME));
    if (klass == NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
          "unknown built-in model '%s' in '%s': known are builtin:stamp and "
          "builtin:anisotropic", path + strlen (PP_BUILTIN_SCHEME), uri);
      return NULL;
    }
  } else {
    klass = &pp_model_diffusion_class;
  }
  params = parse_params (query, error);
  if (params == NULL)
    return NULL;

  model = g_new0 (PpModel, 1);
  g_mutex_init (&model->image_lock);
  g_rw_lock_init (&model->work_lock);
  model->klass = klass;
  model->uri = g_strdup (uri);
  model->path = g_steal_pointer (&path);
  model->n_steps = n_steps;
  model->roles = roles;
  model->backend = backend != NULL ? backend : pp_backend_get (NULL, error);
  if (model->backend == NULL)
    return NULL;
  if (!pp_model_param_double (params, "step-ms", 0.0, PP_STEP_MS_MAX,
          &model->step_ms, error))
    return NULL;
  model->graphs = g_str_equal (pp_backend_name (model->backend),
      PP_BACKEND_CUDA);
  if (!param_boolean (params, "cuda-graphs", &model->graphs, error))
    return NULL;
  model->image_graphs = model->graphs
      && pp_backend_has_graphs (model->backend);
  if (!param_boolean (params, "stream-batch", &model->stream_batch, error))
    return NULL;
  model->frame_batch = 1;
  if (!pp_model_param_uint (params, "frame-batch", 1,
          PP_MODEL_FRAME_BATCH_MAX, &model->frame_batch, error))
    return NULL;
  if (klass->init != NULL && !klass->init (model, params, error))
    return NULL;
  if (g_hash_table_size (params) > 0) {
    GList *keys = g_hash_table_get_keys (params);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "model '%s' has no parameter '%s'", uri, (const gchar *) keys->data);
    g_list_free (keys);
    return NULL;
  }
  return g_steal_pointer (&model);
}

/* Parameters only a new model can change. */
static const gchar *const start_only_params[] = {
  "dtype", "cuda-graphs", "scheduler", "vae", "lora", "config",
  "stream-batch", "frame-batch",
};

static gboolean
update_params (PpModel * model, const PpSettings * settings,
    GPtrArray * inputs, gboolean commit, GError ** error)
{
  g_autofree gchar *path = g_strdup (settings->model);
  const gchar *old_query = strchr (model->uri, '?');
  gchar *query = path != NULL ? strchr (path, '?') : NULL;
  g_autoptr (GHashTable) params = NULL, old = NULL;
  gdouble step_ms = 0.0;

  if (query != NULL)
    *query++ = '\0';
  if (path == NULL || !g_str_equal (path, model->path)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "the running model is '%s'; '%s' needs a new one (change the model "
        "in the READY or NULL state)", model->path, path ? path : "(none)");
    return FALSE;
  }
  params = parse_params (query, error);
  old = params != NULL ? parse_params (old_query ? old_query + 1 : NULL,
      error) : NULL;
  if (old == NULL)
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (start_only_params); i++) {
    const gchar *key = start_only_params[i];
    const gchar *now = g_hash_table_lookup (old, key);
    const gchar *then = g_hash_table_lookup (params, key);

    if (g_strcmp0 (now, then) != 0) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "model parameter %s=%s cannot change while the model runs (it is "
          "%s; change it in the READY or NULL state)", key,
          then ? then : "(default)", now ? now : "(default)");
      return FALSE;
    }
    g_hash_table_remove (params, key);
  }
  if (!pp_model_param_double (params, "step-ms", 0.0, PP_STEP_MS_MAX,
          &step_ms, error))
    return FALSE;
  if (model->klass->update != NULL && !model->klass->update (model, params,
          settings, inputs, FALSE, error))
    return FALSE;
  if (g_hash_table_size (params) > 0) {
    GList *keys = g_hash_table_get_keys (params);
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "model '%s' has no live parameter '%s'", model->path,
        (const gchar *) keys->data);
    g_list_free (keys);
    return FALSE;
  }
  if (!commit)
    return TRUE;
  /* Checked: now applied, from a fresh copy of the parameters. */
  g_hash_table_unref (g_steal_pointer (&params));
  params = parse_params (query, error);
  for (guint i = 0; i < G_N_ELEMENTS (start_only_params); i++)
    g_hash_table_remove (params, start_only_params[i]);
  g_hash_table_remove (params, "step-ms");
  /* What a graph captured may be what the update frees or replaces (the
   * prompt's states, the step buffers): it is captured again. */
  pp_model_graphs_reset (model);
  if (model->klass->update != NULL && !model->klass->update (model, params,
          settings, inputs, TRUE, error))
    return FALSE;
  model->step_ms = step_ms;
  return TRUE;
}

gboolean
pp_model_check_update (PpModel * model, const PpSettings * settings,
    GPtrArray * inputs, GError ** error)
{
  return update_params (model, settings, inputs, FALSE, error);
}

gboolean
pp_model_update (PpModel * model, const PpSettings * settings,
    GPtrArray * inputs, GError ** error)
{
  return update_params (model, settings, inputs, TRUE, error);
}

gboolean
pp_model_uri_is_builtin (const gchar * uri)
{
  return uri != NULL && g_str_has_prefix (uri, PP_BUILTIN_SCHEME);
}

gchar *
pp_model_uri_for_load (const gchar * model, const PpModelLoad * load)
{
  GString *uri = g_string_new (model);

  if (model == NULL)
    return g_string_free (uri, FALSE);
  if (load->stream_batch)
    g_string_append (uri, "&stream-batch=1");
  if (load->frame_batch > 1)
    g_string_append_printf (uri, "&frame-batch=%u", load->frame_batch);
  if (pp_model_uri_is_builtin (model))
    goto done;
  if (load->scheduler != NULL && *load->scheduler)
    g_string_append_printf (uri, "&scheduler=%s", load->scheduler);
  if (load->dtype != NULL && *load->dtype)
    g_string_append_printf (uri, "&dtype=%s", load->dtype);
  if (load->cuda_graphs >= 0)
    g_string_append_printf (uri, "&cuda-graphs=%d", load->cuda_graphs > 0);
  if (load->vae != NULL && *load->vae) {
    g_autofree gchar *vae = g_uri_escape_string (load->vae, "/", FALSE);

    g_string_append_printf (uri, "&vae=%s", vae);
  }
  if (load->lora != NULL && *load->lora) {
    g_autofree gchar *lora = g_uri_escape_string (load->lora, "/", FALSE);

    g_string_append_printf (uri, "&lora=%s", lora);
  }
done:
  /* The first parameter opens the query. */
  if (uri->len > strlen (model) && strchr (model, '?') == NULL)
    uri->str[strlen (model)] = '?';
  return g_string_free (uri, FALSE);
}

const gchar *
pp_model_upsample_conv (void)
{
  const gchar *value = g_getenv (PP_UPSAMPLE_CONV_ENV);

  return value == NULL || *value == '\0' ? "phases" : value;
}

const gchar *
pp_model_uri_weights_dtype (const gchar * uri, PpBackend * backend)
{
  const gchar *query = uri != NULL ? strchr (uri, '?') : NULL;
  g_autoptr (GHashTable) params = NULL;
  const gchar *name;
  PpDType dtype;

  if (uri == NULL || g_str_has_prefix (uri, PP_BUILTIN_SCHEME))
    return pp_dtype_weights_name (PP_DTYPE_F32);
  params = parse_params (query != NULL ? query + 1 : NULL, NULL);
  name = params != NULL ? g_hash_table_lookup (params, "dtype") : NULL;
  if (name != NULL && pp_dtype_parse_weights (name, &dtype, NULL))
    return pp_dtype_weights_name (dtype);
  return pp_dtype_weights_name (backend->default_weight_dtype);
}

gchar *
pp_model_uri_param (const gchar * uri, const gchar * name)
{
  const gchar *query = uri != NULL ? strchr (uri, '?') : NULL;
  g_autoptr (GHashTable) params = NULL;
  gchar *value = NULL;

  if (query == NULL)
    return NULL;
  params = parse_params (query + 1, NULL);
  if (params != NULL)
    pp_model_param_string (params, name, &value);
  return value;
}

/* The image phases' graphs (below). */
#define IMAGE_KEY_DIMS (2 + PP_TENSOR_MAX_DIMS)
static void image_work_begin (PpModel * model);
static void image_work_end (PpModel * model);
static void image_graph_free (PpModel * model, PpModelImageGraph ** graph);
static void image_graph_reset (PpModel * model, PpModelImageGraph * graph);
static gboolean image_compute (PpModel * model, PpModelImageGraph ** graph,
    const gchar * what, const gint64 key[IMAGE_KEY_DIMS],
    gboolean (*compute) (PpModel * model, GError ** error), GError ** error);

void
pp_model_free (PpModel * model)
{
  if (model == NULL)
    return;
  pp_model_graphs_reset (model);
  g_clear_pointer (&model->graph, g_free);
  g_clear_pointer (&model->batch_graphs, g_ptr_array_unref);
  image_graph_free (model, &model->encode_graph);
  image_graph_free (model, &model->decode_graph);
  if (model->klass->finalize != NULL)
    model->klass->finalize (model);
  g_clear_pointer (&model->host_sample, pp_tensor_free);
  g_mutex_clear (&model->image_lock);
  g_rw_lock_clear (&model->work_lock);
  g_free (model->spoiled_by);
  g_free (model->uri);
  g_free (model->path);
  g_free (model);
}

gchar *
pp_model_digest (PpModel * model)
{
  g_autoptr (GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autofree gchar *weights = model->klass->weights_digest != NULL
      ? model->klass->weights_digest (model) : NULL;

  g_checksum_update (sum, (const guchar *) model->uri, -1);
  if (weights != NULL) {
    g_checksum_update (sum, (const guchar *) "\n", 1);
    g_checksum_update (sum, (const guchar *) weights, -1);
  }
  return g_strdup (g_checksum_get_string (sum));
}

gboolean
pp_model_spoiled (PpModel * model)
{
  return g_atomic_int_get (&model->spoiled) != 0;
}

/* The start of a piece of the model's work, which work_done ends: FALSE,
 * with an error saying why, when @model is spoiled; else the backend's
 * failure count before the work, for work_held. */
static gboolean
work_begin (PpModel * model, guint * since, GError ** error)
{
  g_rw_lock_reader_lock (&model->work_lock);
  *since = pp_backend_failures (model->backend);
  if (!pp_model_spoiled (model))
    return TRUE;
  g_rw_lock_reader_unlock (&model->work_lock);
  /* The failure itself too: work on another thread may fail on the
   * spoiled model before the failing work's own error is heard, and the
   * first error an application hears must name the cause. */
  g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "model %s: its backend "
      "(%s) failed during its work (%s), which may have left garbage in "
      "what it keeps between calls; it must be loaded again", model->uri,
      pp_backend_name (model->backend),
      (const gchar *) g_atomic_pointer_get (&model->spoiled_by));
  return FALSE;
}

/* Whether @model's backend failed, or was taken back, since
 * pp_backend_failures gave @since: the work's results are then garbage,
 * and its error is the failure unless the work (@ok FALSE) set its own. */
static gboolean
backend_failed (PpModel * model, guint since, gboolean ok, GError ** error)
{
  GError *failure = NULL;

  if (pp_backend_check (model->backend, since, &failure))
    return FALSE;
  if (ok || error == NULL || *error == NULL)
    g_propagate_error (error, failure);
  else
    g_error_free (failure);
  return TRUE;
}

/* @ok, unless the backend failed since work_begin gave @since
 * (backend_failed): FALSE then, and the model is spoiled. */
static gboolean
work_held (PpModel * model, guint since, gboolean ok, GError ** error)
{
  gchar *why;

  if (!backend_failed (model, since, ok, error))
    return ok;
  /* What spoiled it, kept before it is marked spoiled (work_begin reads
   * it then). */
  why = g_strdup (error != NULL && *error != NULL ? (*error)->message
      : "an op's failure");
  if (!g_atomic_pointer_compare_and_exchange (&model->spoiled_by, NULL, why))
    g_free (why);
  g_atomic_int_set (&model->spoiled, 1);
  return FALSE;
}

/* work_held, and the end of the work work_begin started. */
static gboolean
work_done (PpModel * model, guint since, gboolean ok, GError ** error)
{
  ok = work_held (model, since, ok, error);
  g_rw_lock_reader_unlock (&model->work_lock);
  return ok;
}

/* Takes @model's backend back, the caller holding work_lock for
 * writing. */
static gboolean
take_back_locked (PpModel * model, gchar ** recovered)
{
  if (!pp_backend_is_halted (model->backend) || pp_model_spoiled (model))
    return FALSE;
  return pp_backend_recover (model->backend, recovered);
}

gboolean
pp_model_take_backend_back (PpModel * model, gchar ** recovered)
{
  gboolean taken;

  *recovered = NULL;
  if (!pp_backend_is_halted (model->backend))
    return FALSE;
  g_rw_lock_writer_lock (&model->work_lock);
  taken = take_back_locked (model, recovered);
  g_rw_lock_writer_unlock (&model->work_lock);
  return taken;
}

gboolean
pp_model_run_alone (PpModel * model, PpModelAloneFunc func, gpointer data,
    gchar ** recovered, GError ** error)
{
  gboolean ok;
  guint since;

  if (recovered != NULL)
    *recovered = NULL;
  g_rw_lock_writer_lock (&model->work_lock);
  since = pp_backend_failures (model->backend);
  ok = func (data, error);
  if (backend_failed (model, since, ok, error))
    ok = FALSE;
  take_back_locked (model, recovered);
  g_rw_lock_writer_unlock (&model->work_lock);
  return ok;
}

PpTensor *
pp_model_encode (PpModel * model, const PpImage * image, GError ** error)
{
  if (model->klass->encode != NULL) {
    PpTensor *sample;
    guint since;

    if (!work_begin (model, &since, error))
      return NULL;
    /* Its device work, like an encode_compute's. */
    image_work_begin (model);
    sample = model->klass->encode (model, image, error);
    image_work_end (model);
    if (!work_done (model, since, sample != NULL, error))
      g_clear_pointer (&sample, pp_tensor_free);
    return sample;
  }
  /* Built-in models diffuse in pixel space: the sample is the image. */
  return pp_image_to_tensor (image, PP_MODEL_SAMPLE_NAME, error);
}

/* An image phase's _in failed (a frame of a new size whose buffers could
 * not all be had): it may have freed the buffers its graph, captured at
 * the last key, runs on, so that graph goes. */
static void
image_in_failed (PpModel * model, PpModelImageGraph * graph)
{
  image_work_begin (model);
  image_graph_reset (model, graph);
  image_work_end (model);
}

/* The key of an image phase's graph: the frame's size, and for decoding
 * the sample's shape. */
static void
image_key (const PpImage * image, const PpTensor * sample,
    gint64 key[IMAGE_KEY_DIMS])
{
  memset (key, 0, IMAGE_KEY_DIMS * sizeof (gint64));
  key[0] = image->width;
  key[1] = image->height;
  if (sample != NULL)
    memcpy (key + 2, sample->shape, sample->ndim * sizeof (gint64));
}

gboolean
pp_model_encode_into (PpModel * model, const PpImage * image,
    PpTensor * sample, GError ** error)
{
  const PpModelClass *k = model->klass;

  if (k->encode_in != NULL) {
    gint64 key[IMAGE_KEY_DIMS];
    guint since;

    if (!work_begin (model, &since, error))
      return FALSE;
    image_key (image, NULL, key);
    if (!k->encode_in (model, image, error)) {
      image_in_failed (model, model->encode_graph);
      return work_done (model, since, FALSE, error);
    }
    return work_done (model, since, image_compute (model,
            &model->encode_graph, "encoding", key, k->encode_compute, error)
        && k->encode_out (model, sample, error), error);
  }
  if (!pp_image_check_tensor (sample, image->width, image->height, error))
    return FALSE;
  if (sample->backend != NULL) {
    /* Pixel space on the host, then to the device tensor. */
    g_autoptr (PpTensor) host = pp_image_to_tensor (image,
        PP_MODEL_SAMPLE_NAME, error);

    return host != NULL && pp_tensor_upload (sample, host, error);
  }
  pp_image_to_tensor_into (image, sample);
  return TRUE;
}

gboolean
pp_model_decode (PpModel * model, const PpTensor * sample, PpImage * image,
    GError ** error)
{
  const PpModelClass *k = model->klass;

  if (k->decode_in != NULL) {
    gint64 key[IMAGE_KEY_DIMS];
    guint since;

    if (!work_begin (model, &since, error))
      return FALSE;
    image_key (image, sample, key);
    if (!k->decode_in (model, sample, image, error)) {
      image_in_failed (model, model->decode_graph);
      return work_done (model, since, FALSE, error);
    }
    return work_done (model, since, image_compute (model,
            &model->decode_graph, "decoding", key, k->decode_compute, error)
        && k->decode_out (model, image, error), error);
  }
  if (sample->backend != NULL) {
    g_autoptr (PpTensor) host = pp_tensor_new (sample->name, sample->dtype,
        sample->ndim, sample->shape, error);

    return host != NULL && pp_tensor_download (host, sample, error)
        && pp_image_from_tensor (image, host, error);
  }
  return pp_image_from_tensor (image, sample, error);
}

/* pp_model_step without its step-ms. */
static gboolean
step_unslept (PpModel * model, guint step, guint n_steps, PpTensor * sample,
    GError ** error)
{
  if (step >= n_steps) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "step %u is outside the schedule of %u steps", step, n_steps);
    return FALSE;
  }
  if (!model->steps_open && (model->klass->steps_begin != NULL
          || sample->backend != NULL))
    return pp_model_steps_begin (model, sample, error)
        && step_unslept (model, step, n_steps, sample, error)
        && pp_model_steps_end (model, sample, error);
  /* A host model's steps work on the host copy of a device sample. */
  if (model->klass->steps_begin == NULL && sample->backend != NULL)
    sample = model->host_sample;
  return model->klass->step (model, step, n_steps, sample, error);
}

static void
sleep_step_ms (PpModel * model)
{
  if (model->step_ms > 0)
    g_usleep ((gulong) (model->step_ms * 1000.0));
}

gboolean
pp_model_step (PpModel * model, guint step, guint n_steps, PpTensor * sample,
    GError ** error)
{
  guint since;

  if (!work_begin (model, &since, error)
      || !work_done (model, since, step_unslept (model, step, n_steps,
              sample, error), error))
    return FALSE;
  sleep_step_ms (model);
  return TRUE;
}

gboolean
pp_model_steps_begin (PpModel * model, PpTensor * sample, GError ** error)
{
  g_return_val_if_fail (!model->steps_open, FALSE);

  if (sample->backend != NULL && sample->backend != model->backend) {
    g_autofree gchar *got = pp_tensor_describe (sample);

    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "the sample %s is on the "
        "%s backend, the model computes on %s", got, sample->backend->name,
        model->backend->name);
    return FALSE;
  }
  if (model->klass->steps_begin == NULL) {
    if (sample->backend == NULL)
      return TRUE;
    /* A host model: its steps work on a host copy of the device sample. */
    if (model->host_sample == NULL || model->host_sample->dtype
        != sample->dtype || model->host_sample->nbytes != sample->nbytes
        || model->host_sample->ndim != sample->ndim
        || memcmp (model->host_sample->shape, sample->shape,
            sample->ndim * sizeof sample->shape[0]) != 0) {
      g_clear_pointer (&model->host_sample, pp_tensor_free);
      model->host_sample = pp_tensor_new (sample->name, sample->dtype,
          sample->ndim, sample->shape, error);
      if (model->host_sample == NULL)
        return FALSE;
    }
    if (!pp_tensor_download (model->host_sample, sample, error))
      return FALSE;
    model->steps_open = TRUE;
    return TRUE;
  }
  if (!model->klass->steps_begin (model, sample, error))
    return FALSE;
  model->steps_open = TRUE;
  return TRUE;
}

gboolean
pp_model_steps_end (PpModel * model, PpTensor * sample, GError ** error)
{
  if (model->klass->steps_end == NULL) {
    if (!model->steps_open)
      return TRUE;
    model->steps_open = FALSE;
    return pp_tensor_upload (sample, model->host_sample, error);
  }
  g_return_val_if_fail (model->steps_open, FALSE);
  model->steps_open = FALSE;
  return model->klass->steps_end (model, sample, error);
}

/* Graphs of step slices and stream batches */

/* Eager runs of a slice (or a batch) at a shape before it is captured: the
 * first run allocates pools and scratch and picks library plans, which a
 * capture must not do. */
#define PP_MODEL_GRAPH_WARM_RUNS 1
/* Batches (a size and steps) a model keeps graphs of at once. */
#define PP_MODEL_BATCH_GRAPHS_MAX 16

/* One graph and its way there: eager runs at its key, then the capture. */
typedef struct
{
  guint eager_runs;
  gpointer graph;               /* the backend's */
} GraphSlot;

typedef struct
{
  PpModel *model;
  guint first, end, n_steps;
  PpTensor *sample;
} SliceCall;

struct _PpModelGraph
{
  gint64 shape[PP_TENSOR_MAX_DIMS];
  GraphSlot slot;
  SliceCall call;               /* the key and what the capture issued */
  guint64 captures, launches;
};

typedef struct
{
  PpModel *model;
  guint n, n_steps;
  guint *steps;                 /* owned */
} BatchCall;

typedef struct
{
  GraphSlot slot;
  BatchCall call;               /* the key and what the capture issued */
  guint64 used;                 /* model->batch_clock at its last use */
} PpModelBatchGraph;

/* Whether the model's steps may run as graphs now (a slice also needs
 * its samples on the device: steps_begin). */
static gboolean
graphs_usable (const PpModel * model)
{
  return model->graphs && !model->graphs_held && model->klass->graphable
      && pp_backend_has_graphs (model->backend);
}

static void
slot_reset (PpModel * model, GraphSlot * slot)
{
  pp_backend_graph_free (model->backend, g_steal_pointer (&slot->graph));
  slot->eager_runs = 0;
}

/* Runs @func (@call) through @slot: as is while it warms up, then
 * captured and launched, then launched.  A capture that fails is logged
 * with what @describe says of @call, and the model runs without graphs
 * from then on. */
static gboolean
slot_run (PpModel * model, GraphSlot * slot, PpGraphFunc func,
    gpointer call, gchar * (*describe) (gconstpointer call),
    guint64 * captures, guint64 * launches, GError ** error)
{
  GError *local = NULL;

  if (slot->graph == NULL && slot->eager_runs < PP_MODEL_GRAPH_WARM_RUNS) {
    slot->eager_runs++;
    return func (call, error);
  }
  if (slot->graph == NULL) {
    const guint since = pp_backend_failures (model->backend);

    slot->graph = pp_backend_graph_capture (model->backend, func, call,
        &local);
    /* Halted before the capture (it captured nothing, which says nothing
     * of graphs) or during it (out of memory for a buffer: the graph
     * holds only part of the work). */
    if (!work_held (model, since, TRUE, error)) {
      slot_reset (model, slot);
      g_clear_error (&local);
      return FALSE;
    }
    if (slot->graph == NULL) {
      g_autofree gchar *what = describe (call);

      /* The capture ran nothing: run as is, and from now on. */
      g_warning ("%s of %s on %s cannot be captured as a graph (%s); the "
          "model runs without graphs", what, model->uri,
          pp_backend_name (model->backend), local->message);
      g_error_free (local);
      model->graphs = FALSE;
      return func (call, error);
    }
    (*captures)++;
  }
  if (!pp_backend_graph_launch (model->backend, slot->graph, error))
    return FALSE;
  (*launches)++;
  return TRUE;
}

static gboolean
slice_run (gpointer data, GError ** error)
{
  const SliceCall *c = data;

  for (guint k = c->first; k < c->end; k++)
    if (!pp_model_step (c->model, k, c->n_steps, c->sample, error))
      return FALSE;
  return TRUE;
}

static gchar *
slice_describe (gconstpointer data)
{
  const SliceCall *c = data;

  return g_strdup_printf ("steps [%u,%u)", c->first, c->end);
}

static void
slice_done (guint first, guint end, PpStepDone done, gpointer data)
{
  for (guint k = first; done != NULL && k < end; k++)
    done (k, data);
}

/* The graph of this slice and shape, started over when either changed;
 * its call takes @sample (what a launch reads of the call is the
 * emulation's, cpu-strict: a device graph holds what was captured). */
static PpModelGraph *
graph_for (PpModel * model, guint first, guint end, guint n_steps,
    PpTensor * sample)
{
  PpModelGraph *g = model->graph;
  gboolean reshaped;

  if (g == NULL)
    g = model->graph = g_new0 (PpModelGraph, 1);
  reshaped = pp_tensor_shape_changed (sample, g->shape);
  if (reshaped || g->call.first != first || g->call.end != end
      || g->call.n_steps != n_steps)
    slot_reset (model, &g->slot);
  g->call = (SliceCall) {
  model, first, end, n_steps, sample};
  return g;
}

gboolean
pp_model_steps_slice (PpModel * model, guint first, guint end, guint n_steps,
    PpTensor * sample, PpStepDone done, gpointer data, GError ** error)
{
  PpModelGraph *g;

  g_return_val_if_fail (first <= end && end <= n_steps, FALSE);
  if (!graphs_usable (model) || !model->steps_open) {
    /* What runs while the class holds the graphs (a warm-up pass of
     * another size) may replace buffers the slice's graph was captured
     * with: it warms up and is captured again once they are let be. */
    if (model->graphs_held && model->graph != NULL)
      slot_reset (model, &model->graph->slot);
    for (guint k = first; k < end; k++) {
      if (!pp_model_step (model, k, n_steps, sample, error))
        return FALSE;
      slice_done (k, k + 1, done, data);
    }
    return TRUE;
  }
  g = graph_for (model, first, end, n_steps, sample);
  if (!slot_run (model, &g->slot, slice_run, &g->call, slice_describe,
          &g->captures, &g->launches, error))
    return FALSE;
  slice_done (first, end, done, data);
  return TRUE;
}

static gboolean
batch_steps_run (gpointer data, GError ** error)
{
  const BatchCall *c = data;

  return c->model->klass->batch_steps (c->model, c->n, c->steps, c->n_steps,
      error);
}

static gchar *
batch_describe (gconstpointer data)
{
  const BatchCall *c = data;

  return g_strdup_printf ("a stream batch of %u samples", c->n);
}

static void
batch_graph_free (gpointer data)
{
  PpModelBatchGraph *g = data;

  g_free (g->call.steps);
  g_free (g);
}

static PpModelBatchGraph *
batch_entry (PpModel * model, guint i)
{
  return g_ptr_array_index (model->batch_graphs, i);
}

static void
batch_graphs_reset (PpModel * model)
{
  if (model->batch_graphs == NULL)
    return;
  for (guint i = 0; i < model->batch_graphs->len; i++)
    slot_reset (model, &batch_entry (model, i)->slot);
  g_ptr_array_set_size (model->batch_graphs, 0);
}

/* Drops the entry used longest ago. */
static void
batch_graph_evict (PpModel * model)
{
  guint oldest = 0;

  for (guint i = 1; i < model->batch_graphs->len; i++)
    if (batch_entry (model, i)->used < batch_entry (model, oldest)->used)
      oldest = i;
  slot_reset (model, &batch_entry (model, oldest)->slot);
  g_ptr_array_remove_index_fast (model->batch_graphs, oldest);
}

/* The graph entry of a batch of @n samples at @steps, shaped like
 * @sample: the batch buffers it holds are the model's for that size and
 * shape, so another shape drops every entry. */
static PpModelBatchGraph *
batch_graph_for (PpModel * model, guint n, const guint * steps,
    guint n_steps, const PpTensor * sample)
{
  PpModelBatchGraph *g;

  if (model->batch_graphs == NULL)
    model->batch_graphs = g_ptr_array_new_with_free_func (batch_graph_free);
  if (pp_tensor_shape_changed (sample, model->batch_shape))
    batch_graphs_reset (model);
  for (guint i = 0; i < model->batch_graphs->len; i++) {
    g = batch_entry (model, i);
    if (g->call.n == n && g->call.n_steps == n_steps
        && memcmp (g->call.steps, steps, n * sizeof *steps) == 0) {
      g->used = ++model->batch_clock;
      return g;
    }
  }
  /* A batch's steps depend on which frames waited for it: the entries
   * are bounded, and a full set drops the one used longest ago, so that
   * a source whose bursts make many batches keeps the graph of its usual
   * one. */
  if (model->batch_graphs->len >= PP_MODEL_BATCH_GRAPHS_MAX)
    batch_graph_evict (model);
  g = g_new0 (PpModelBatchGraph, 1);
  g->call = (BatchCall) {
  model, n, n_steps, g_memdup2 (steps, n * sizeof *steps)};
  g->used = ++model->batch_clock;
  g_ptr_array_add (model->batch_graphs, g);
  return g;
}

guint
pp_model_batch_max (const PpModel * model)
{
  return model->n_steps * model->frame_batch;
}

gboolean
pp_model_steps_batch (PpModel * model, guint n, PpTensor * const *samples,
    const guint * steps, guint n_steps, GError ** error)
{
  GError *own = NULL;

  g_return_val_if_fail (!model->steps_open, FALSE);
  for (guint i = 0; i < n; i++)
    if (steps[i] >= n_steps) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "step %u is outside the schedule of %u steps", steps[i], n_steps);
      return FALSE;
    }
  if (n >= 2 && model->klass->batch_in != NULL
      && model->klass->batch_in (model, n, samples, steps, n_steps, &own)) {
    /* The steps between the copies in and out: as is, or as a graph. */
    if (graphs_usable (model)) {
      PpModelBatchGraph *g = batch_graph_for (model, n, steps, n_steps,
          samples[0]);

      if (!slot_run (model, &g->slot, batch_steps_run, &g->call,
              batch_describe, &model->batch_captures,
              &model->batch_launches, error))
        return FALSE;
    } else {
      const BatchCall eager = { model, n, n_steps, (guint *) steps };

      if (!batch_steps_run ((gpointer) & eager, error))
        return FALSE;
    }
    model->klass->batch_out (model, n, samples);
  } else if (own != NULL) {
    g_propagate_error (error, own);
    return FALSE;
  } else {
    /* One by one. */
    for (guint i = 0; i < n; i++)
      if (!step_unslept (model, steps[i], n_steps, samples[i], error))
        return FALSE;
  }
  /* step-ms once for them all. */
  sleep_step_ms (model);
  return TRUE;
}

gboolean
pp_model_warm_batches (PpModel * model, const PpTensor * sample, guint max,
    guint step, guint n_steps, guint * sizes, GError ** error)
{
  PpTensor **samples;
  guint *steps;
  GError *own = NULL;
  gboolean ok = TRUE, batches;

  *sizes = 0;
  max = MIN (max, pp_model_batch_max (model));
  if (max < 2 || model->klass->batch_in == NULL
      || !pp_backend_plans_shapes (model->backend))
    return TRUE;
  samples = g_new0 (PpTensor *, max);
  steps = g_new (guint, max);
  for (guint i = 0; ok && i < max; i++) {
    samples[i] = pp_tensor_new ("warm-up batch sample", sample->dtype,
        sample->ndim, sample->shape, error);
    ok = samples[i] != NULL;
    steps[i] = step;
  }
  /* A model that takes no batch now stages nothing and says no more:
   * pp_model_steps_batch would run its samples one by one. */
  batches = ok && model->klass->batch_in (model, 2, samples, steps, n_steps,
      &own);
  if (own != NULL) {
    g_propagate_error (error, own);
    ok = FALSE;
  }
  /* The widest first: the activations it releases serve the narrower
   * ones (pp-pool.c). */
  for (guint n = max; ok && batches && n >= 2; n--) {
    ok = pp_model_steps_batch (model, n, samples, steps, n_steps, error);
    *sizes += ok;
  }
  for (guint i = 0; i < max; i++)
    g_clear_pointer (&samples[i], pp_tensor_free);
  g_free (samples);
  g_free (steps);
  return ok;
}

void
pp_model_new_epoch (PpModel * model)
{
  pp_model_graphs_reset (model);
  if (model->klass->epoch_reset != NULL)
    model->klass->epoch_reset (model);
}

void
pp_model_stream_frame (PpModel * model, gboolean counts)
{
  if (model->klass->stream_frame != NULL)
    model->klass->stream_frame (model, counts);
}

PpPoolBytes
pp_model_pools (PpModel * model)
{
  PpPoolBytes sum = { 0, 0 };

  if (model->klass->pools != NULL)
    model->klass->pools (model, &sum);
  return sum;
}

gchar *
pp_model_describe_pools (PpModel * model)
{
  const PpPoolBytes pools = pp_model_pools (model);

  if (pools.held == 0)
    return NULL;
  return g_strdup_printf ("activation pools on %s: %.1f MiB held, at most "
      "%.1f MiB in use at once", pp_backend_name (model->backend),
      pools.held / 1048576.0, pools.peak / 1048576.0);
}

guint64
pp_model_stream_bytes (PpModel * model)
{
  return model->klass->stream_bytes != NULL
      ? model->klass->stream_bytes (model) : 0;
}

guint64
pp_model_cache_builds (PpModel * model)
{
  return model->klass->cache_builds != NULL
      ? model->klass->cache_builds (model) : 0;
}

void
pp_model_graphs_reset (PpModel * model)
{
  batch_graphs_reset (model);
  if (model->graph != NULL)
    slot_reset (model, &model->graph->slot);
  /* Not the decoding's (image_compute). */
  image_graph_reset (model, model->encode_graph);
}

void
pp_model_graph_counts (PpModel * model, guint64 * captures,
    guint64 * launches)
{
  *captures = model->graph != NULL ? model->graph->captures : 0;
  *launches = model->graph != NULL ? model->graph->launches : 0;
}

void
pp_model_batch_graph_counts (PpModel * model, guint64 * captures,
    guint64 * launches)
{
  *captures = model->batch_captures;
  *launches = model->batch_launches;
}

/* Rank 0's image phases: the device part of encoding frames of one size,
 * or of decoding samples of one shape into frames of one size, as a graph
 * (the way of pp_model_steps_slice's: once as is, then captured and
 * launched).  Encoding's is started over by pp_model_graphs_reset (a
 * settings update, on the encoding thread, replaces its noise and
 * buffers); decoding's only by another key, as the settings change
 * nothing it uses and it runs on another thread. */
typedef struct
{
  PpModel *model;
  gboolean (*compute) (PpModel * model, GError ** error);
  const gchar *what;
  gint64 key[IMAGE_KEY_DIMS];
} ImageCall;

struct _PpModelImageGraph
{
  GraphSlot slot;
  ImageCall call;
  guint64 captures, launches;
};

static gboolean
image_run (gpointer data, GError ** error)
{
  const ImageCall *c = data;

  return c->compute (c->model, error);
}

static gchar *
image_describe (gconstpointer data)
{
  const ImageCall *c = data;

  return g_strdup_printf ("%s of %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
      " frames", c->what, c->key[0], c->key[1]);
}

static void
image_graph_reset (PpModel * model, PpModelImageGraph * graph)
{
  if (graph != NULL)
    slot_reset (model, &graph->slot);
}

static void
image_graph_free (PpModel * model, PpModelImageGraph ** graph)
{
  if (*graph == NULL)
    return;
  slot_reset (model, &(*graph)->slot);
  g_clear_pointer (graph, g_free);
}

/* Around an image phase's device work.  Where graphs may run, it goes
 * one at a time with the other image phase's, whose thread could
 * otherwise issue ops between a graph's launch and what holds the pool
 * buffers the graph was captured with (they are the pool's again once the
 * capture ran); elsewhere the two run side by side (the pool hands each
 * its own buffers). */
static void
image_work_begin (PpModel * model)
{
  if (model->image_graphs)
    g_mutex_lock (&model->image_lock);
}

static void
image_work_end (PpModel * model)
{
  if (model->image_graphs)
    g_mutex_unlock (&model->image_lock);
}

/* @compute as is, or through the graph of @key. */
static gboolean
image_compute (PpModel * model, PpModelImageGraph ** graph,
    const gchar * what, const gint64 key[IMAGE_KEY_DIMS],
    gboolean (*compute) (PpModel * model, GError ** error), GError ** error)
{
  PpModelImageGraph *g;
  gboolean ok;

  image_work_begin (model);
  /* Without graphs, or after a failed capture turned them off
   * (slot_run). */
  if (!model->image_graphs || !model->graphs) {
    ok = compute (model, error);
    image_work_end (model);
    return ok;
  }
  if (*graph == NULL)
    *graph = g_new0 (PpModelImageGraph, 1);
  g = *graph;
  if (memcmp (g->call.key, key, sizeof g->call.key) != 0)
    slot_reset (model, &g->slot);
  g->call.model = model;
  g->call.compute = compute;
  g->call.what = what;
  memcpy (g->call.key, key, sizeof g->call.key);
  ok = slot_run (model, &g->slot, image_run, &g->call, image_describe,
      &g->captures, &g->launches, error);
  image_work_end (model);
  return ok;
}

void
pp_model_image_graph_counts (PpModel * model, guint64 * encode_captures,
    guint64 * encode_launches, guint64 * decode_captures,
    guint64 * decode_launches)
{
  const PpModelImageGraph *e = model->encode_graph, *d = model->decode_graph;

  *encode_captures = e != NULL ? e->captures : 0;
  *encode_launches = e != NULL ? e->launches : 0;
  *decode_captures = d != NULL ? d->captures : 0;
  *decode_launches = d != NULL ? d->launches : 0;
}
