/* ppdiffuse — the CUDA backend's choices among its ways (attention,
 * convolution algorithms and layout, group norm), each read once from an
 * environment variable when a backend is made.  Plain C, no CUDA: the
 * host tests check it. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The index in @names (NULL-terminated) of @value, the setting of the
 * environment variable @variable; NULL or "" is the first name.  FALSE
 * with a PP_ERROR_CONFIG error "VARIABLE=value: expected a, b or c" for
 * anything else. */
gboolean pp_cuda_choice_parse (const gchar * variable, const gchar * value,
                               const gchar * const *names, guint * index,
                               GError ** error);

G_END_DECLS
