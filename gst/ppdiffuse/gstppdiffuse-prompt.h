/* GStreamer ppdiffuse — text prompts on rank 0: encoded with the pipeline's
 * text encoder, off the streaming thread, for the epoch's first chunk.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include "pp-backend.h"

G_BEGIN_DECLS

/* The text encoder of one pipeline and the states of the last prompt it
 * encoded: an unchanged prompt costs nothing.  Used by one thread at a
 * time (the element's start, then its settings thread). */
typedef struct _GstPpDiffusePrompt GstPpDiffusePrompt;

GstPpDiffusePrompt *gst_pp_diffuse_prompt_new    (void);
void                gst_pp_diffuse_prompt_free   (GstPpDiffusePrompt * p);

/* The hidden states of @prompt (a blend: pp-prompt.h) for the pipeline
 * directory @dir, encoded on @backend: a host F32 [1, L, D] tensor the
 * caller owns, and in *@ref the prompt-embeds value that names them
 * (pp_prompt_ref).  *@truncated: a prompt was cut to the encoder's 77
 * tokens. */
PpTensor           *gst_pp_diffuse_prompt_encode (GstPpDiffusePrompt * p,
                                                  const gchar * dir,
                                                  PpBackend * backend,
                                                  const gchar * prompt,
                                                  gchar ** ref,
                                                  gboolean * truncated,
                                                  GError ** error);

/* A host copy of @t. */
PpTensor           *gst_pp_diffuse_tensor_copy   (const PpTensor * t);

G_END_DECLS
