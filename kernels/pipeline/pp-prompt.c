/* ppdiffuse — text prompts to encoder hidden states. */
#include "pp-prompt.h"
#include "pp-checkpoint.h"
#include "pp-clip-text.h"
#include "pp-clip-tokenizer.h"
#include "pp-error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The digest's length in a prompt reference: 64 bits tell prompts apart. */
#define PROMPT_REF_HEX 16
#define BLEND_SEPARATOR '|'
#define WEIGHT_SEPARATOR ':'

struct _PpPromptEncoder
{
  PpClipTokenizer *tokenizer;
  PpClipText *text;
  PpBackend *be;
};

PpPromptEncoder *
pp_prompt_encoder_new (const gchar * dir, const gchar * config_dir,
    const gchar * lora_spec, PpBackend * backend, GError ** error)
{
  g_autoptr (PpLora) lora = NULL;
  const gboolean checkpoint = pp_checkpoint_is_file (dir);
  const gchar *configs = checkpoint ? config_dir : dir;
  g_autofree gchar *tok_dir = NULL, *text_dir = NULL, *unet_config = NULL;
  g_autoptr (PpPromptEncoder) enc = g_new0 (PpPromptEncoder, 1);

  if (configs == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s is a single-file "
        "checkpoint, which holds no tokenizer: name a pipeline folder with "
        "its tokenizer/ by the model's config= parameter "
        "(model=\"%s?config=DIR\"), or give prompt-embeds", dir, dir);
    return NULL;
  }
  tok_dir = g_build_filename (configs, "tokenizer", NULL);
  text_dir = g_build_filename (configs, "text_encoder", NULL);
  unet_config = g_build_filename (configs, "unet", "config.json", NULL);
  enc->be = backend;
  enc->tokenizer = pp_clip_tokenizer_load (tok_dir, error);
  if (enc->tokenizer == NULL)
    return NULL;
  if (lora_spec != NULL && *lora_spec != '\0'
      && (lora = pp_lora_open (lora_spec, error)) == NULL)
    return NULL;
  /* The states are mixed and sent in f32 whatever the UNet's dtype. */
  if (checkpoint) {
    g_autofree gchar *text_config = g_build_filename (text_dir,
        "config.json", NULL);
    PpWeights *w = pp_checkpoint_part (dir, PP_CHECKPOINT_TEXT_ENCODER,
        text_config, error);

    enc->text = w != NULL ? pp_clip_text_load_weights (text_config, w,
        backend, PP_DTYPE_F32, lora, error) : NULL;
  } else
    enc->text = pp_clip_text_load_lora (text_dir, backend, PP_DTYPE_F32,
        lora, error);
  if (enc->text == NULL
      || !pp_clip_text_check_unet (enc->text, text_dir, unet_config, error))
    return NULL;
  if (pp_clip_tokenizer_model_max_length (enc->tokenizer)
      != pp_clip_text_max_positions (enc->text)) {
    g_set_error (error, PP_ERROR, PP_ERROR_MODEL,
        "%s: model_max_length %u, but the text encoder in %s takes %u "
        "positions", tok_dir, pp_clip_tokenizer_model_max_length
        (enc->tokenizer), text_dir, pp_clip_text_max_positions (enc->text));
    return NULL;
  }
  return g_steal_pointer (&enc);
}

void
pp_prompt_encoder_free (PpPromptEncoder * enc)
{
  if (enc == NULL)
    return;
  g_clear_pointer (&enc->tokenizer, pp_clip_tokenizer_free);
  g_clear_pointer (&enc->text, pp_clip_text_free);
  g_free (enc);
}

/* Splits part @index of a blend, "text" or "text:weight", into its text
 * and weight. */
static gboolean
parse_part (const gchar * part, guint index, gchar ** text, gdouble * weight,
    GError ** error)
{
  const gchar *colon = strrchr (part, WEIGHT_SEPARATOR);
  g_autofree gchar *w = colon ? g_strstrip (g_strdup (colon + 1)) : NULL;
  gchar *end = NULL;
  gdouble v = w != NULL && *w != '\0' ? g_ascii_strtod (w, &end) : 0.0;

  *weight = 1.0;
  if (end == NULL || *end != '\0') {
    *text = g_strdup (part);    /* no weight: the ':' is the prompt's */
  } else if (!isfinite (v) || v < 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "prompt blend part %u ('%s'): the weight must be a non-negative "
        "number", index + 1, part);
    return FALSE;
  } else {
    *weight = v;
    *text = g_strndup (part, colon - part);
  }
  if (*g_strstrip (*text) == '\0') {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "prompt blend part %u ('%s') has no text: write "
        "'text:weight|text:weight'", index + 1, part);
    g_clear_pointer (text, g_free);
    return FALSE;
  }
  return TRUE;
}

static PpTensor *
encode_one (PpPromptEncoder * enc, const gchar * text, gboolean * truncated,
    GError ** error)
{
  const guint n = pp_clip_text_max_positions (enc->text);
  const gint64 shape[3] = { 1, n, pp_clip_text_hidden_size (enc->text) };
  g_autofree gint32 *ids = g_new (gint32, n);
  g_autoptr (PpTensor) dev = NULL;
  g_autoptr (PpTensor) host = NULL;
  gboolean cut = FALSE;
  guint since;

  if (!pp_clip_tokenizer_encode (enc->tokenizer, text, ids, &cut, error))
    return NULL;
  if (cut && truncated != NULL)
    *truncated = TRUE;
  since = pp_backend_failures (enc->be);
  dev = pp_tensor_new_on (enc->be, PP_PROMPT_TENSOR, PP_DTYPE_F32, 3, shape,
      error);
  host = dev != NULL ? pp_tensor_new (PP_PROMPT_TENSOR, PP_DTYPE_F32, 3,
      shape, error) : NULL;
  /* A failure of the backend kept meanwhile (pp_backend_keep_failures)
   * left garbage in @host. */
  if (host == NULL || !pp_clip_text_forward (enc->text, ids, n, dev, error)
      || !pp_tensor_download (host, dev, error)
      || !pp_backend_check (enc->be, since, error))
    return NULL;
  return g_steal_pointer (&host);
}

PpTensor *
pp_prompt_encode (PpPromptEncoder * enc, const gchar * prompt,
    gboolean * truncated, GError ** error)
{
  g_auto (GStrv) parts = NULL;
  g_autoptr (PpTensor) mix = NULL;
  gdouble sum = 0;
  guint n;

  if (truncated != NULL)
    *truncated = FALSE;
  if (prompt == NULL)
    prompt = "";
  /* A single prompt is encoded as it is: ':' means nothing in it. */
  if (strchr (prompt, BLEND_SEPARATOR) == NULL)
    return encode_one (enc, prompt, truncated, error);
  parts = g_strsplit (prompt, "|", -1);
  n = g_strv_length (parts);
  for (guint i = 0; i < n; i++) {
    g_autofree gchar *text = NULL;
    g_autoptr (PpTensor) one = NULL;
    gdouble weight;

    if (!parse_part (parts[i], i, &text, &weight, error))
      return NULL;
    sum += weight;
    one = encode_one (enc, text, truncated, error);
    if (one == NULL)
      return NULL;
    if (mix == NULL) {
      mix = pp_tensor_new (PP_PROMPT_TENSOR, PP_DTYPE_F32, one->ndim,
          one->shape, error);
      if (mix == NULL)
        return NULL;
      memset (mix->data, 0, mix->nbytes);
    }
    /* Scaled by the raw weight here, by 1/sum at the end. */
    {
      gfloat *dst = (gfloat *) mix->data;
      const gfloat *src = (const gfloat *) one->data;

      for (gint64 k = 0; k < pp_tensor_numel (one); k++)
        dst[k] += (gfloat) weight * src[k];
    }
  }
  if (!(sum > 0)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "prompt blend '%s': the weights sum to 0", prompt);
    return NULL;
  }
  {
    gfloat *dst = (gfloat *) mix->data;

    for (gint64 k = 0; k < pp_tensor_numel (mix); k++)
      dst[k] = (gfloat) (dst[k] / sum);
  }
  return g_steal_pointer (&mix);
}

gchar *
pp_prompt_ref (const PpTensor * states)
{
  g_autoptr (GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);

  g_checksum_update (sum, (const guchar *) states->shape,
      states->ndim * sizeof states->shape[0]);
  g_checksum_update (sum, states->data, states->nbytes);
  return g_strdup_printf ("%s%.*s", PP_PROMPT_REF_PREFIX, PROMPT_REF_HEX,
      g_checksum_get_string (sum));
}
