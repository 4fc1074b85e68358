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

/* The exit status of test-ops on a backend whose device is not here (a
 * PP_ERROR_DEVICE error): the test harnesses' "skipped". */
#define PP_TEST_OPS_EXIT_SKIP 77

G_END_DECLS
