/* ppdiffuse — the CLIP text encoder (transformers CLIPTextModel).
 *
 * x = token_embedding[ids] + position_embedding[0…n)
 * per layer (pre-LN):  x += out_proj (causal_attention (layer_norm1 (x)))
 *                      x += fc2 (act (fc1 (layer_norm2 (x))))
 * last hidden state = final_layer_norm (x)
 *
 * The causal mask is the attention_causal op's (query i sees keys 0…i);
 * act is quick GELU (x·σ(1.702x), OpenAI's CLIP) or exact GELU (OpenCLIP's,
 * SD 2.x and Turbo) as config.json's hidden_act says. */
#include "pp-clip-text.h"
#include "pp-config.h"
#include "pp-error.h"
#include "pp-layers.h"
#include "pp-ops.h"

#define PREFIX "text_model"
/* Taps and outputs are [1, n, D]. */
#define SEQ_DIMS 3
#define EMBED_DIMS 2
/* The one sequence a forward pass encodes. */
#define BATCH 1

/* CLIPTextConfig's defaults, used where config.json omits a key. */
#define DEF_VOCAB 49408
#define DEF_HIDDEN 512
#define DEF_INTERMEDIATE 2048
#define DEF_LAYERS 12
#define DEF_HEADS 8
#define DEF_MAX_POSITIONS 77
#define DEF_LAYER_NORM_EPS 1e-5
#define DEF_HIDDEN_ACT "quick_gelu"

typedef enum
{
  CLIP_ACT_QUICK_GELU,
  CLIP_ACT_GELU,
} ClipAct;

typedef struct
{
  PpNorm layer_norm1, layer_norm2;
  PpLinear q_proj, k_proj, v_proj, out_proj;
  PpLinear fc1, fc2;
} Layer;

struct _PpClipText
{
  PpWeights *owned_weights;     /* set by pp_clip_text_load */
  PpBackend *be;
  GPtrArray *device_weights;    /* uploaded copies, on backends that need
                                 * them */
  GPtrArray *device_embeddings; /* the same for the float32 embeddings */
  PpPool *pool;
  gint vocab, hidden, intermediate, n_layers, heads, max_positions;
  gfloat eps;
  ClipAct act;
  /* [vocab, D] and [max_positions, D], F32 whatever the storage dtype:
   * rows are copied and added as activations. */
  PpView token_embedding;
  PpView position_embedding;
  Layer *layers;
  PpNorm final_layer_norm;
};

static gboolean
read_act (const gchar * path, const gchar * name, ClipAct * out,
    GError ** error)
{
  if (g_strcmp0 (name, "quick_gelu") == 0)
    *out = CLIP_ACT_QUICK_GELU;
  else if (g_strcmp0 (name, "gelu") == 0)
    *out = CLIP_ACT_GELU;
  else {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key 'hidden_act' is \"%s\"; supported: \"quick_gelu\", "
        "\"gelu\"", path, name);
    return FALSE;
  }
  return TRUE;
}

static gboolean
read_config (PpClipText * m, const gchar * path, GError ** error)
{
  g_autoptr (PpConfig) cfg = pp_config_load (path, error);
  g_autofree gchar *act = NULL;
  gdouble eps;

  if (cfg == NULL)
    return FALSE;
  if (!pp_config_get_positive_int (cfg, "vocab_size", DEF_VOCAB, &m->vocab, error)
      || !pp_config_get_positive_int (cfg, "hidden_size", DEF_HIDDEN, &m->hidden,
          error)
      || !pp_config_get_positive_int (cfg, "intermediate_size", DEF_INTERMEDIATE,
          &m->intermediate, error)
      || !pp_config_get_positive_int (cfg, "num_hidden_layers", DEF_LAYERS,
          &m->n_layers, error)
      || !pp_config_get_positive_int (cfg, "num_attention_heads", DEF_HEADS,
          &m->heads, error)
      || !pp_config_get_positive_int (cfg, "max_position_embeddings",
          DEF_MAX_POSITIONS, &m->max_positions, error)
      || !pp_config_get_double (cfg, "layer_norm_eps", DEF_LAYER_NORM_EPS,
          &eps, error)
      || !pp_config_get_string (cfg, "hidden_act", DEF_HIDDEN_ACT, &act,
          error)
      || !read_act (path, act, &m->act, error))
    return FALSE;
  if (m->hidden % m->heads != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: 'hidden_size' %d is not a multiple of 'num_attention_heads' %d",
        path, m->hidden, m->heads);
    return FALSE;
  }
  if (!(eps > 0.0)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: key 'layer_norm_eps' is %g; expected a positive number", path,
        eps);
    return FALSE;
  }
  m->eps = (gfloat) eps;
  return TRUE;
}

/* A float32 table [rows, D] on the device, whatever the storage dtype;
 * none after an error. */
static PpView
bind_embedding (PpClipText * m, PpWeights * weights, const gchar * key,
    gint rows, GError ** error)
{
  const gint64 shape[EMBED_DIMS] = { rows, m->hidden };
  const gfloat *host = pp_weights_get (weights, key, EMBED_DIMS, shape,
      error);
  PpView device;
  gpointer owned = NULL;

  if (host == NULL)
    return pp_view_none ();
  device = pp_backend_upload_weights (m->be, host, (gsize) rows * m->hidden,
      PP_DTYPE_F32, &owned, error);
  if (owned != NULL)
    g_ptr_array_add (m->device_embeddings, owned);
  if (pp_view_is_none (device))
    g_prefix_error (error, "weight '%s': ", key);
  return device;
}

static void
bind_layer (PpClipText * m, PpBinder * b, Layer * l, guint i)
{
  const gint d = m->hidden;
  const gchar *const f = PREFIX ".encoder.layers.%u.%s";

  pp_bind_norm (b, &l->layer_norm1, d, f, i, "layer_norm1");
  pp_bind_linear (b, &l->q_proj, d, d, TRUE, f, i, "self_attn.q_proj");
  pp_bind_linear (b, &l->k_proj, d, d, TRUE, f, i, "self_attn.k_proj");
  pp_bind_linear (b, &l->v_proj, d, d, TRUE, f, i, "self_attn.v_proj");
  pp_bind_linear (b, &l->out_proj, d, d, TRUE, f, i, "self_attn.out_proj");
  pp_bind_norm (b, &l->layer_norm2, d, f, i, "layer_norm2");
  pp_bind_linear (b, &l->fc1, d, m->intermediate, TRUE, f, i, "mlp.fc1");
  pp_bind_linear (b, &l->fc2, m->intermediate, d, TRUE, f, i, "mlp.fc2");
}

PpClipText *
pp_clip_text_new (const gchar * config_path, PpWeights * weights,
    PpBackend * be, GError ** error)
{
  g_autoptr (PpClipText) m = g_new0 (PpClipText, 1);
  PpBinder b = pp_binder_init (weights, be);

  m->be = be;
  m->pool = pp_pool_new (be, PP_DTYPE_F32);
  m->device_embeddings = g_ptr_array_new ();
  if (!read_config (m, config_path, error))
    return NULL;
  m->token_embedding = bind_embedding (m, weights,
      PREFIX ".embeddings.token_embedding.weight", m->vocab, error);
  if (pp_view_is_none (m->token_embedding))
    return NULL;
  m->position_embedding = bind_embedding (m, weights,
      PREFIX ".embeddings.position_embedding.weight", m->max_positions,
      error);
  if (pp_view_is_none (m->position_embedding))
    return NULL;
  /* Older checkpoints carry the buffer arange(max_positions); positions
   * are always 0…n-1 here. */
  pp_weights_skip (weights, PREFIX ".embeddings.position_ids");

  m->layers = g_new0 (Layer, m->n_layers);
  for (gint i = 0; i < m->n_layers; i++)
    bind_layer (m, &b, &m->layers[i], i);
  pp_bind_norm (&b, &m->final_layer_norm, m->hidden,
      PREFIX ".final_layer_norm");
  if (!pp_binder_finish (&b, error))
    return NULL;
  m->device_weights = b.device;
  return g_steal_pointer (&m);
}

/* @dir/model.safetensors, else @dir/model.fp16.safetensors. */
static gchar *
weights_path (const gchar * dir, GError ** error)
{
  const gchar *const names[] = { PP_CLIP_TEXT_WEIGHTS_FILE,
    PP_CLIP_TEXT_WEIGHTS_FILE_FP16
  };

  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    gchar *path = g_build_filename (dir, names[i], NULL);

    if (g_file_test (path, G_FILE_TEST_IS_REGULAR))
      return path;
    g_free (path);
  }
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "%s: no text encoder weights (%s or %s)", dir,
      PP_CLIP_TEXT_WEIGHTS_FILE, PP_CLIP_TEXT_WEIGHTS_FILE_FP16);
  return NULL;
}

PpClipText *
pp_clip_text_load (const gchar * dir, PpBackend * be, PpDType dtype,
    GError ** error)
{
  return pp_clip_text_load_lora (dir, be, dtype, NULL, error);
}

PpClipText *
pp_clip_text_load_lora (const gchar * dir, PpBackend * be, PpDType dtype,
    PpLora * lora, GError ** error)
{
  g_autofree gchar *config_path = g_build_filename (dir,
      PP_COMPONENT_CONFIG, NULL);
  g_autofree gchar *path = weights_path (dir, error);
  PpWeights *w;

  if (path == NULL)
    return NULL;
  w = pp_weights_open (path, error);
  if (w == NULL)
    return NULL;
  return pp_clip_text_load_weights (config_path, w, be, dtype, lora, error);
}

PpClipText *
pp_clip_text_load_weights (const gchar * config_path, PpWeights * weights,
    PpBackend * be, PpDType dtype, PpLora * lora, GError ** error)
{
  g_autoptr (PpWeights) w = weights;
  g_autoptr (PpClipText) m = NULL;

  pp_weights_set_storage_dtype (w, dtype);
  if (lora != NULL && !pp_lora_fuse (lora, PP_LORA_TEXT_ENCODER, w, error))
    return NULL;
  m = pp_clip_text_new (config_path, w, be, error);
  if (m == NULL || !pp_weights_check_all_used (w, error))
    return NULL;
  m->owned_weights = g_steal_pointer (&w);
  return g_steal_pointer (&m);
}

void
pp_clip_text_free (PpClipText * m)
{
  if (m == NULL)
    return;
  g_free (m->layers);
  pp_device_weights_free (m->be, m->device_weights);
  pp_device_weights_free (m->be, m->device_embeddings);
  g_clear_pointer (&m->pool, pp_pool_free);
  g_clear_pointer (&m->owned_weights, pp_weights_free);
  g_free (m);
}

guint
pp_clip_text_hidden_size (PpClipText * m)
{
  return m->hidden;
}

guint
pp_clip_text_max_positions (PpClipText * m)
{
  return m->max_positions;
}

guint
pp_clip_text_vocab_size (PpClipText * m)
{
  return m->vocab;
}

guint
pp_clip_text_n_layers (PpClipText * m)
{
  return m->n_layers;
}

/* UNet2DConditionModel's default cross_attention_dim. */
#define UNET_DEF_CROSS_DIM 1280

gboolean
pp_clip_text_check_unet (PpClipText * m, const gchar * text_encoder_dir,
    const gchar * unet_config_path, GError ** error)
{
  g_autoptr (PpConfig) cfg = pp_config_load (unet_config_path, error);
  g_autofree gchar *text_config = NULL;
  gint64 cross_dim;

  if (cfg == NULL || !pp_config_get_int (cfg, "cross_attention_dim",
          UNET_DEF_CROSS_DIM, &cross_dim, error))
    return FALSE;
  if (cross_dim == m->hidden)
    return TRUE;
  text_config = g_build_filename (text_encoder_dir, PP_COMPONENT_CONFIG,
      NULL);
  g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
      "the text encoder's hidden_size is %d (%s) but the UNet's "
      "cross_attention_dim is %" G_GINT64_FORMAT " (%s): the two come from "
      "different pipelines", m->hidden, text_config, cross_dim,
      unet_config_path);
  return FALSE;
}

/* Forward */

/* A new activation: layer_norm (@x). */
static PpAct
norm_apply (const PpClipText * m, const PpNorm * norm, const PpAct * x)
{
  PpAct y = pp_act_new (x->pool, x->n, x->c, x->h, x->w);

  pp_layer_norm (m->be, pp_act_in (x), x->n * x->c * x->h, x->w, m->eps,
      norm->gamma, norm->beta, pp_act_out (&y));
  return y;
}

static void
act_apply (const PpClipText * m, PpAct * x)
{
  switch (m->act) {
    case CLIP_ACT_QUICK_GELU:
      pp_quick_gelu (m->be, pp_act_out (x), pp_act_numel (x));
      break;
    case CLIP_ACT_GELU:
      pp_gelu (m->be, pp_act_out (x), pp_act_numel (x));
      break;
  }
}

/* CLIPEncoderLayer: @x [1, n, D] updated in place. */
static void
layer_forward (const PpClipText * m, const Layer * l, PpAct * x)
{
  PpAct h = norm_apply (m, &l->layer_norm1, x);
  PpAct q = pp_linear_apply (&l->q_proj, &h);
  PpAct k = pp_linear_apply (&l->k_proj, &h);
  PpAct v = pp_linear_apply (&l->v_proj, &h);
  PpAct a = pp_act_new (x->pool, x->n, x->c, x->h, x->w);

  pp_attention_causal (m->be, pp_act_in (&q), pp_act_in (&k), pp_act_in (&v),
      x->n, x->c, m->heads, m->hidden / m->heads, l->q_proj.weight.dtype,
      pp_act_out (&a));
  pp_act_clear (&q);
  pp_act_clear (&k);
  pp_act_clear (&v);
  pp_act_replace (&h, pp_linear_apply (&l->out_proj, &a));
  pp_act_clear (&a);
  pp_add (m->be, pp_act_out (x), pp_act_in (&h), pp_act_numel (x));

  pp_act_replace (&h, norm_apply (m, &l->layer_norm2, x));
  pp_act_replace (&h, pp_linear_apply (&l->fc1, &h));
  act_apply (m, &h);
  pp_act_replace (&h, pp_linear_apply (&l->fc2, &h));
  pp_add (m->be, pp_act_out (x), pp_act_in (&h), pp_act_numel (x));
  pp_act_clear (&h);
}

static gboolean
check_input (PpClipText * m, const gint32 * ids, guint n_tokens,
    const PpTensor * out, GError ** error)
{
  if (n_tokens < 1 || n_tokens > (guint) m->max_positions) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "text encoder: %u tokens; expected 1 to %d (max_position_embeddings)",
        n_tokens, m->max_positions);
    return FALSE;
  }
  for (guint i = 0; i < n_tokens; i++)
    if (ids[i] < 0 || ids[i] >= m->vocab) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "text encoder: token %u is id %d, outside the vocabulary of %d",
          i, ids[i], m->vocab);
      return FALSE;
    }
  if (out->dtype != PP_DTYPE_F32 || out->ndim != SEQ_DIMS
      || out->shape[0] != BATCH || out->shape[1] != n_tokens
      || out->shape[2] != m->hidden
      || (out->backend != NULL && out->backend != m->be)) {
    g_autofree gchar *desc = pp_tensor_describe (out);

    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "text encoder output: expected F32[%d,%u,%d] on the host or %s, "
        "received %s", BATCH, n_tokens, m->hidden, m->be->name, desc);
    return FALSE;
  }
  return TRUE;
}

gboolean
pp_clip_text_forward_tap (PpClipText * m, const gint32 * ids,
    guint n_tokens, PpTensor * out_hidden, PpTapFunc tap, gpointer tap_data,
    GError ** error)
{
  const gsize d = m->hidden;
  PpAct x, y;

  if (!check_input (m, ids, n_tokens, out_hidden, error))
    return FALSE;
  /* Stored as n = 1, c = tokens, h = 1, w = D (pp-layers.h). */
  x = pp_act_new (m->pool, BATCH, (gint) n_tokens, 1, m->hidden);
  /* Rows of the table as they are: it is stored as the activations are. */
  g_assert (m->token_embedding.dtype == x.dtype);
  for (guint i = 0; i < n_tokens; i++)
    pp_backend_copy (m->be, pp_out_range (pp_act_out (&x), i * d, d).data,
        pp_view_range (m->token_embedding, (gsize) ids[i] * d, d).data,
        d * pp_dtype_size (x.dtype));
  pp_add (m->be, pp_act_out (&x), m->position_embedding, pp_act_numel (&x));
  pp_tap_act (tap, tap_data, &x, SEQ_DIMS, "embeddings");

  for (gint i = 0; i < m->n_layers; i++) {
    layer_forward (m, &m->layers[i], &x);
    pp_tap_act (tap, tap_data, &x, SEQ_DIMS, "encoder.layers.%d", i);
  }
  y = norm_apply (m, &m->final_layer_norm, &x);
  pp_act_clear (&x);
  pp_tap_act (tap, tap_data, &y, SEQ_DIMS, "last_hidden_state");

  /* The output is float32 (check_input). */
  g_assert (y.dtype == PP_DTYPE_F32);
  if (out_hidden->backend != NULL)
    pp_backend_copy (m->be, out_hidden->data, y.data, out_hidden->nbytes);
  else
    pp_backend_download (m->be, out_hidden->data, y.data,
        out_hidden->nbytes);
  pp_act_clear (&y);
  return TRUE;
}

gboolean
pp_clip_text_forward (PpClipText * m, const gint32 * ids, guint n_tokens,
    PpTensor * out_hidden, GError ** error)
{
  return pp_clip_text_forward_tap (m, ids, n_tokens, out_hidden, NULL, NULL,
      error);
}
