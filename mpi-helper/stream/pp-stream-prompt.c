/* ppdiffuse — text prompts on rank 0: encoded with the pipeline's text
 * encoder, off the streaming thread, for the epoch's first chunk. */
#include "pp-stream-private.h"

#include "pp-log.h"
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
  if (p->encoder != NULL) {
    g_clear_pointer (&p->encoder, pp_prompt_encoder_free);
    /* Its weights go back to the device. */
    pp_backend_give_back (p->backend);
  }
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

/* Says that rank 0's backend, failed during the prompt's @work with
 * @what, was taken back. */
static void
say_taken_back (const gchar * work, const gchar * what)
{
  PP_INFO ("rank 0's backend failed during %s and was taken back (%s): the "
      "stream goes on", work, what);
}

typedef struct
{
  PpStreamPrompt *p;
  const gchar *prompt;
  PpTensor *states;
} Encoding;

static gboolean
encode (gpointer data, GError ** error)
{
  Encoding *e = data;

  e->states = pp_prompt_encode (e->p->encoder, e->prompt, &e->p->truncated,
      error);
  return e->states != NULL;
}

PpTensor *
pp_stream_prompt_encode (PpStreamPrompt * p, const gchar * dir,
    const gchar * config, const gchar * lora, PpBackend * backend,
    PpModel * beside, const gchar * prompt, gchar ** ref,
    gboolean * truncated, GError ** error)
{
  if (p->encoder == NULL || g_strcmp0 (p->dir, dir) != 0
      || g_strcmp0 (p->config, config) != 0
      || g_strcmp0 (p->lora, lora) != 0 || p->backend != backend) {
    const guint since = pp_backend_failures (backend);

    forget_prompt (p);
    g_clear_pointer (&p->encoder, pp_prompt_encoder_free);
    g_free (p->dir);
    g_free (p->lora);
    g_free (p->config);
    p->dir = g_strdup (dir);
    p->config = g_strdup (config);
    p->lora = g_strdup (lora);
    p->backend = backend;
    /* Loaded beside the stream's work (it reads the weights from disk, too
     * long to hold the stream for): a failure of the backend during it
     * may spoil that work too, which then fails the stream. */
    p->encoder = pp_prompt_encoder_new (dir, config, lora, backend, error);
    if (p->encoder != NULL && !pp_backend_check (backend, since, error))
      g_clear_pointer (&p->encoder, pp_prompt_encoder_free);
    if (p->encoder == NULL) {
      g_autofree gchar *what = NULL;

      /* Once none of the stream's work is in flight. */
      if (beside != NULL && pp_model_take_backend_back (beside, &what))
        say_taken_back ("the loading of the text encoder", what);
      return NULL;
    }
  }
  if (p->states == NULL || g_strcmp0 (p->text, prompt) != 0) {
    Encoding e = { p, prompt, NULL };
    g_autofree gchar *recovered = NULL;

    forget_prompt (p);
    if (beside != NULL ? !pp_model_run_alone (beside, encode, &e, &recovered,
            error) : !encode (&e, error)) {
      g_clear_pointer (&e.states, pp_tensor_free);
      if (recovered != NULL)
        say_taken_back ("the prompt's encoding (run alone)", recovered);
      return NULL;
    }
    p->states = e.states;
    p->text = g_strdup (prompt);
    p->ref = pp_prompt_ref (p->states);
  }
  *ref = g_strdup (p->ref);
  if (truncated != NULL)
    *truncated = p->truncated;
  return pp_stream_tensor_copy (p->states);
}
