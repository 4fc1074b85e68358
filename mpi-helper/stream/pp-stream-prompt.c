/* ppdiffuse — text prompts on rank 0: encoded with the pipeline's text
 * encoder, off the streaming thread, for the epoch's first chunk. */
#include "pp-stream-private.h"

#include "pp-prompt.h"

#include <string.h>

struct _PpStreamPrompt
{
  gchar *dir;                   /* the pipeline the encoder is of */
  gchar *lora;                  /* the LoRA setting fused into it */
  gchar *config;                /* a checkpoint's config folder */
  PpBackend *backend;
  PpPromptEncoder *encoder;
  gchar *text;                  /* the last prompt, its states and ref */
  PpTensor *states;
  gchar *ref;
  gboolean truncated;
};

PpStreamPrompt *
pp_stream_prompt_new (void)
{
  return g_new0 (PpStreamPrompt, 1);
}

static void
forget_prompt (PpStreamPrompt * p)
{
  g_clear_pointer (&p->text, g_free);
  g_clear_pointer (&p->states, pp_tensor_free);
  g_clear_pointer (&p->ref, g_free);
}

void
pp_stream_prompt_free (PpStreamPrompt * p)
{
  if (p == NULL)
    return;
  forget_prompt (p);
  g_clear_pointer (&p->encoder, pp_prompt_encoder_free);
  g_free (p->dir);
  g_free (p->lora);
  g_free (p->config);
  g_free (p);
}

PpTensor *
pp_stream_tensor_copy (const PpTensor * t)
{
  PpTensor *copy = pp_tensor_new (t->name, t->dtype, t->ndim, t->shape, NULL);

  if (copy != NULL)
    memcpy (copy->data, t->data, t->nbytes);
  return copy;
}

PpTensor *
pp_stream_prompt_encode (PpStreamPrompt * p, const gchar * dir,
    const gchar * config, const gchar * lora, PpBackend * backend,
    const gchar * prompt, gchar ** ref, gboolean * truncated,
    GError ** error)
{
  if (p->encoder == NULL || g_strcmp0 (p->dir, dir) != 0
      || g_strcmp0 (p->config, config) != 0
      || g_strcmp0 (p->lora, lora) != 0 || p->backend != backend) {
    forget_prompt (p);
    g_clear_pointer (&p->encoder, pp_prompt_encoder_free);
    g_free (p->dir);
    g_free (p->lora);
    g_free (p->config);
    p->dir = g_strdup (dir);
    p->config = g_strdup (config);
    p->lora = g_strdup (lora);
    p->backend = backend;
    p->encoder = pp_prompt_encoder_new (dir, config, lora, backend, error);
    if (p->encoder == NULL)
      return NULL;
  }
  if (p->states == NULL || g_strcmp0 (p->text, prompt) != 0) {
    PpTensor *states;

    forget_prompt (p);
    states = pp_prompt_encode (p->encoder, prompt, &p->truncated, error);
    if (states == NULL)
      return NULL;
    p->states = states;
    p->text = g_strdup (prompt);
    p->ref = pp_prompt_ref (states);
  }
  *ref = g_strdup (p->ref);
  if (truncated != NULL)
    *truncated = p->truncated;
  return pp_stream_tensor_copy (p->states);
}
