/* GStreamer ppdiffuse — text prompts on rank 0.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-prompt.h"
#include "pp-prompt.h"

#include <string.h>

struct _GstPpDiffusePrompt
{
  gchar *dir;                   /* the pipeline the encoder is of */
  PpBackend *backend;
  PpPromptEncoder *encoder;
  gchar *text;                  /* the last prompt, its states and ref */
  PpTensor *states;
  gchar *ref;
  gboolean truncated;
};

GstPpDiffusePrompt *
gst_pp_diffuse_prompt_new (void)
{
  return g_new0 (GstPpDiffusePrompt, 1);
}

static void
forget_prompt (GstPpDiffusePrompt * p)
{
  g_clear_pointer (&p->text, g_free);
  g_clear_pointer (&p->states, pp_tensor_free);
  g_clear_pointer (&p->ref, g_free);
}

void
gst_pp_diffuse_prompt_free (GstPpDiffusePrompt * p)
{
  if (p == NULL)
    return;
  forget_prompt (p);
  g_clear_pointer (&p->encoder, pp_prompt_encoder_free);
  g_free (p->dir);
  g_free (p);
}

PpTensor *
gst_pp_diffuse_tensor_copy (const PpTensor * t)
{
  PpTensor *copy = pp_tensor_new (t->name, t->dtype, t->ndim, t->shape, NULL);

  if (copy != NULL)
    memcpy (copy->data, t->data, t->nbytes);
  return copy;
}

PpTensor *
gst_pp_diffuse_prompt_encode (GstPpDiffusePrompt * p, const gchar * dir,
    PpBackend * backend, const gchar * prompt, gchar ** ref,
    gboolean * truncated, GError ** error)
{
  if (p->encoder == NULL || g_strcmp0 (p->dir, dir) != 0
      || p->backend != backend) {
    forget_prompt (p);
    g_clear_pointer (&p->encoder, pp_prompt_encoder_free);
    g_free (p->dir);
    p->dir = g_strdup (dir);
    p->backend = backend;
    p->encoder = pp_prompt_encoder_new (dir, backend, error);
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
  return gst_pp_diffuse_tensor_copy (p->states);
}
