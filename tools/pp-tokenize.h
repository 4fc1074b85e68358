/* ppdiffuse-tool tokenize: prompts to CLIP token ids. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

gboolean pp_cmd_tokenize (int argc, char **argv, GError ** error);

G_END_DECLS
