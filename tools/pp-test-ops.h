/* ppdiffuse-tool test-ops — every op of a backend against float64
 * references. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* ppdiffuse-tool test-ops [--backend B] [--op NAME] [--verbose]: runs every
 * op of pp-ops-list.h (and pp_for_rows) on backend B on several shapes and
 * compares its outputs with float64 references.  FALSE with @error when a
 * case fails; a usage error (a bad option, an unknown op or backend) is in
 * the G_OPTION_ERROR domain. */
gboolean pp_cmd_test_ops (int argc, char **argv, GError ** error);

G_END_DECLS
